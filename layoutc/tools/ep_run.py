"""`layoutc run --ep`: one layer over `ep x tp` ranks, each rank holding its own experts.

World rank `w` is EP rank `w // tp`, TP rank `w % tp` (`runtime.experts.world_ranks`, TP
fastest as vLLM orders ranks). Each rank loads its TP shard of the layer through the
generated loaders at the EP plan, reading from the safetensors files only the experts its EP
rank holds (`local_experts`, vLLM's `determine_expert_map`; checkpoints.loader
`load_layer_experts`) straight into the kernel's local experts axis, prepacks, and runs the
real kernel with the router's global ids and its expert map (the kernel computes only the rank's
routed, local pairs: `expert_map.run_local`). The
ranks' outputs are summed (the all-reduce of the EP and TP groups).

A rank never reads a foreign expert: its peak memory is its own experts' TP shard. Measured
(a 16-expert float32 Qwen3-MoE layer, H 1024, I 2048, 25 MiB per expert; EP 4, rank 1, tp 1):
the process's peak RSS grows by 195 MiB loading the rank's 4 experts, against 900 MiB for the
former path (the whole TP shard of all 16, then keeping the rank's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layoutc.runtime.experts import ExpertParallelError, check_ep, check_placement, world_ranks
from layoutc.tools.contract_module import kernel_of, layout_of
from layoutc.tools.rankloop import run_ranks
from layoutc.tools.runplan import KernelRun, RunError, checkpoint_plan

# The run's code for each runtime expert-parallel code (layoutc.runtime.experts.CODES) a
# command line can reach; `layoutc rule LR105` etc. explain them (diagnostics.CODES).
RUN_CODES = {"EP01": "LR105", "EP02": "LR106", "EP03": "LR107", "EP04": "LR119", "EP06": "LR104"}


def _run_error(exc: ExpertParallelError, where: str) -> RunError:
    """`exc` as the run's coded error; the message without its `[EPxx] ` prefix."""
    message = str(exc).removeprefix(f"[{exc.code}] ")
    return RunError(RUN_CODES.get(exc.code, "LR104"), f"{where}: {message}")


def check_ep_options(num_experts: int, pairs: list[tuple[int, int]], placement: str,
                     world: int | None) -> None:
    """The EP options of a run against the model, before anything is loaded.

    num_experts: config.json's routed experts. pairs: every (tp, ep) degree the run asks for.
    placement: `--placement`. world: `--world` (None: each pair runs over ep x tp ranks).
    Raises RunError LR107 (a placement vLLM 0.32 does not know), LR105 (an EP degree above the
    experts: vLLM's `determine_expert_map` would give a rank none), LR106 (ep x tp is not the
    world). Source: vLLM 0.32 fused_moe/expert_map_manager.py `determine_expert_map`;
    config.py `FusedMoEParallelConfig.make` (ep_size = the flattened world when EP is on).
    """
    try:
        check_placement(placement)
    except ExpertParallelError as exc:
        raise _run_error(exc, "--placement") from None
    for tp, ep in pairs:
        try:
            check_ep(num_experts, ep, placement)
            if world is not None:
                world_ranks(world, ep, tp)
        except ExpertParallelError as exc:
            raise _run_error(exc, f"--tp {tp} --ep {ep}") from None


def check_served_placement(layout: Any, placement: str, eps: list[int]) -> None:
    """RunError LR107 when an EP degree > 1 is asked for with a placement the contract's
    `experts ... placement A, B` does not serve (its plan() parameter's values)."""
    param = layout.param("expert_placement")
    if any(e > 1 for e in eps) and param is not None and param.values and placement not in param.values:
        raise RunError("LR107", f"--placement {placement}: contract {layout.contract} serves "
                       f"{', '.join(map(str, param.values))} ({layout.source_file}, `experts ... placement`)")


def check_expert_count(ckpt: Any, moe: Any, layers: list[int]) -> None:
    """RunError LR119 when a layer's checkpoint holds another number of experts than
    config.json says: its router's rows ([E, H], an nn.Linear(H, E) weight), and, for a
    per-expert format, a tensor of expert E (one past the config's last). From the
    safetensors headers only. The router may hold the rows the format's block states past the
    routed experts (shared experts' scores, identity experts: checkpoints.block.BlockOps.router_rows)."""
    from layoutc.tools.checkpoints.block import block_ops

    more = block_ops(moe).router_rows
    for layer in layers:
        router, _ = moe.format.router_names(layer)
        rows = ckpt.shape(router)[0] if router in ckpt.weight_map else None
        extra = None if moe.format.fused else moe.format.names(layer, moe.num_experts)["down"]
        if rows is not None and rows != moe.num_experts + more:
            held = f"its router {router!r} has {rows} rows" + (f" (the format states {more} past them)" if more else "")
        elif extra is not None and extra in ckpt.weight_map:
            held = f"it holds a tensor of expert {moe.num_experts}, {extra!r}"
        else:
            continue
        raise RunError("LR119", f"{ckpt.folder}: config.json gives {moe.num_experts} experts, but in layer {layer} "
                       f"{held}; the checkpoint's expert count does not match the config")


def ep_plan(mod: Any, whole: Any, ep: int, placement: str) -> Any:
    """The plan at EP `ep` from the EP 1 plan `whole` (`LAYOUT.replan`), with `placement`
    where the contract's plan() takes `expert_placement`. Raises the module's
    LayoutContractError (EP01, EP03) when the contract refuses it."""
    layout = layout_of(mod)
    changes: dict[str, Any] = {"ep_size": ep}
    if layout.param("expert_placement") is not None:
        changes["expert_placement"] = placement
    return layout.replan(whole, **changes)


def load_ep_rank(ckpt: Any, moe: Any, mod: Any, layer: int, tp: int, ep: int, ep_rank: int, tp_rank: int, *,
                 dtype: str, isa: str, placement: str = "linear") -> tuple[Any, Any, Any, dict[str, Any], Any]:
    """One rank's (plan, packed_w13, packed_w2, biases, expert_map) of `layer` at `ep x tp`.

    Only the EP rank's experts are read (their TP shard), in local-id order, into the plan's
    local experts axis (`checkpoints.loader.load_layer_experts`). Raises as `ep_kernel_sum`.
    """
    from layoutc.tools.checkpoints.loader import load_layer_experts

    layout = layout_of(mod)
    kernel = kernel_of(layout)
    if layout.local_experts is None:
        raise RunError("LR120", f"{layout.contract} partitions no experts over EP ranks (no `experts ... over` "
                       "declaration): it cannot run at --ep > 1")
    whole = checkpoint_plan(mod, moe, tp, dtype, isa)  # EP 1, then replanned at ep
    plan = ep_plan(mod, whole, ep, placement)
    axis = int(plan.local_num_experts)
    count, emap = layout.local_experts(ep_rank, plan)
    held = held_experts(emap, moe.num_experts)
    if len(held) != count or count > axis:
        raise RunError("LR120", f"{layout.contract}: EP rank {ep_rank} holds {len(held)} of the checkpoint's "
                       f"{moe.num_experts} experts, but local_experts counts {count} ({axis} local slots)")
    rw = load_layer_experts(ckpt, moe, layer, mod, plan, tp_rank, held)
    packed13, packed2 = kernel.prepack_padded(rw.w13, rw.w2, plan)
    bias = {} if rw.w13_bias is None else {"w13_bias": rw.w13_bias, "w2_bias": rw.w2_bias}
    return plan, packed13, packed2, bias, emap


def held_experts(emap: Any, num_experts: int) -> list[int]:
    """The global expert ids an EP rank's map holds, in local-id order (all of them when
    `emap` is None, EP 1). emap: int32 [num_experts], -1 for a foreign expert
    (`local_experts`, vLLM 0.32 `determine_expert_map`)."""
    if emap is None:
        return list(range(num_experts))
    ids = [int(v) for v in emap.tolist()]
    return sorted((e for e in range(num_experts) if ids[e] >= 0), key=lambda e: ids[e])


def ep_kernel_sum(ckpt: Any, moe: Any, mod: Any, layer: int, tp: int, ep: int, x: Any, weights: Any, ids: Any, *,
                  dtype: str, isa: str, options: dict[str, Any], placement: str = "linear", iters: int = 3) -> Any:
    """The summed output of `layer` over `ep * tp` ranks; returns run.KernelRun.

    x: [T, H] in `dtype`; weights / ids: [T, top_k], ids global. Timed and measured as
    run.kernel_sum times a TP rank: the slowest rank's load, the slowest rank's median of
    `iters` kernel calls after a warm-up, and the largest rank's peak RSS growth (MiB, Linux
    VmHWM) over its load, prepack and calls. Raises the module's
    LayoutContractError (ExpertParallelError EP01/EP03 from plan(), EP02 from world_ranks)
    when the configuration is refused.
    """
    ranks = EPRanks(ckpt, moe, mod, layer, tp, ep, dtype, isa, placement, kernel_of(layout_of(mod)).fused_moe,
                    options)
    k = run_ranks(ranks, world_ranks(ep * tp, ep, tp), x, (weights, ids), iters=iters)
    return KernelRun(k.output, ranks.plan, k.load_s, k.kernel_s, k.peak_mib)


@dataclass
class EPRanks:
    """The experts-under-EP rank strategy (rankloop.RankStrategy): rank (ep_rank, tp_rank)'s experts through
    `load_ep_rank`, run by the glue's `fused_moe` with the rank's `expert_map` and `options`. `plan`: the
    last loaded rank's EP plan (the same at every rank)."""

    ckpt: Any
    moe: Any
    mod: Any
    layer: int
    tp: int
    ep: int
    dtype: str
    isa: str
    placement: str
    fused_moe: Any
    options: dict[str, Any]
    plan: Any = None

    def load(self, rank: tuple[int, int]) -> tuple[Any, Any, dict[str, Any], Any]:
        plan, packed13, packed2, bias, emap = load_ep_rank(self.ckpt, self.moe, self.mod, self.layer, self.tp,
                                                           self.ep, rank[0], rank[1], dtype=self.dtype,
                                                           isa=self.isa, placement=self.placement)
        self.plan = plan
        return packed13, packed2, {**bias, **self.options}, emap

    def compute(self, weights: tuple[Any, Any, dict[str, Any], Any], x: Any, routing: tuple[Any, Any]) -> Any:
        packed13, packed2, extra, emap = weights
        return self.fused_moe(x, packed13, packed2, routing[0], routing[1], self.plan, expert_map=emap, **extra)


def rank_experts(mod: Any, plan: Any, num_experts: int) -> list[list[int]]:
    """Each EP rank's global expert ids, in local-id order, under the EP plan `plan` (the
    module's `local_experts`, vLLM 0.32's `determine_expert_map`)."""
    local = layout_of(mod).local_experts
    if local is None:  # no `experts ... over`: one rank holds every expert
        return [list(range(num_experts))]
    return [held_experts(local(r, plan)[1], num_experts) for r in range(int(plan.ep_size))]


def _ids_text(ids: list[int]) -> str:
    """``0..31`` for a contiguous run, ``1, 5`` for a few, ``0, 4, ... 124 (32)`` for a long stride."""
    if not ids:
        return "none"
    if ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 2:
        return f"{ids[0]}..{ids[-1]}"
    if len(ids) <= 4:
        return ", ".join(map(str, ids))
    return f"{ids[0]}, {ids[1]}, ... {ids[-1]} ({len(ids)})"


def placement_lines(rows: list[Any]) -> list[str]:
    """The run report's EP topology: one line per (EP degree, placement) of `rows` (run.Row)
    at ep > 1, each rank's expert count and ids, e.g. ``ep 4, round_robin: rank 0: 0, 4 ...``."""
    out: list[str] = []
    seen: set[tuple[int, str]] = set()
    for r in rows:
        if r.ep_size <= 1 or (r.ep_size, r.placement) in seen:
            continue
        seen.add((r.ep_size, r.placement))
        ranks = "; ".join(f"rank {i}: {_ids_text(ids)}" for i, ids in enumerate(r.experts_by_rank))
        out.append(f"experts at ep {r.ep_size}, {r.placement} placement: {ranks}")
    return out


#: config.json keys for the number of expert groups (DeepSeek-V2/V3 `n_group`; vLLM's FusedMoE
#: argument `num_expert_group`)
EXPERT_GROUP_KEYS = ("n_group", "num_expert_group")


def vllm_placement_note(config: dict[str, Any], placement: str) -> str | None:
    """The note a round_robin run needs when vLLM 0.32 would not serve this model round-robin, else None.

    vLLM 0.32 `fused_moe/expert_map_manager.py` determine_expert_placement_strategy keeps
    round_robin only for a model with more than one expert group (`num_expert_group`, from the
    config's `n_group`), no redundant experts and EPLB off, and otherwise falls back to linear
    with a warning. layoutc runs the placement asked for (the contract's round_robin layout is
    still checked), and says so.
    """
    from layoutc.tools.checkpoints.quant.config import WRAPPER_KEYS

    if placement != "round_robin":
        return None
    scopes = [config, *(config.get(k) for k in WRAPPER_KEYS)]
    groups = next((s[k] for s in scopes if isinstance(s, dict) for k in EXPERT_GROUP_KEYS
                   if isinstance(s.get(k), int) and not isinstance(s.get(k), bool)), None)
    if groups is not None and groups > 1:
        return None
    have = "no expert groups" if groups is None else f"{groups} expert group"
    return (f"note: vLLM 0.32 serves this model ({have}) with linear expert placement: round_robin needs more "
            "than one expert group (determine_expert_placement_strategy falls back to linear with a warning); "
            "the round_robin rows check the contract's round_robin layout, not the placement vLLM would use")

