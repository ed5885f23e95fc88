# Copied by `layoutc compile` from layoutc/runtime/experts.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""Expert parallelism: which rank holds which expert, and vLLM's parallel flattening.

Stdlib only (the compiler, the verifier's tests and the audit read it without torch);
`expert_map.py` builds the torch tensors from it.

Placement (vLLM 0.32, vllm/model_executor/layers/fused_moe/expert_map_manager.py,
`determine_expert_map`): `E` physical experts over `ep_size` ranks; rank `r` holds
`E // ep_size + (1 if r < E % ep_size else 0)` of them, so when the count does not divide
the last ranks hold one fewer.

- `linear`: rank `r` holds the contiguous run starting at `r * (E // ep_size) + min(r, E % ep_size)`;
- `round_robin`: rank `r` holds `r, r + ep_size, r + 2 * ep_size, ...`.

Local ids run 0.. in ascending global order on every rank.

Redundant experts (EPLB, vllm/distributed/eplb/eplb_state.py
`build_initial_global_physical_to_logical_map`): `R` redundant physical experts follow the
`E_logical` routed ones; physical expert `p` holds logical expert `p % E_logical`, so the
placement runs over `E_logical + R` physical experts and a logical expert with a replica is
held by two ranks (or twice by one) with identical bytes.

Flattening (config.py `FusedMoEParallelConfig.make`): the MoE layer sees `tp * dp * pcp`
devices. With expert parallelism on (and more than one device) `ep_size` is that product and
the layer's tensor-parallel size is 1; off, the intermediate is split `tp * dp * pcp` ways.
The flattened rank is `dp_rank * pcp * tp + pcp_rank * tp + tp_rank`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import LayoutContractError
from .twin import adopt

PLACEMENTS = ("linear", "round_robin")

# Stable codes of the expert-parallel errors (docs/language.md, "Expert parallelism").
CODES = {
    "EP01": "ep_size exceeds the number of (physical) experts: a rank would hold none",
    "EP02": "ep_size times tp_size does not match the world size",
    "EP03": "an expert placement vLLM does not know (linear, round_robin)",
    "EP04": "a checkpoint's expert count does not match the config",
    "EP05": "a global expert id reaches a kernel whose experts axis holds the rank's experts only",
    "EP06": "an ep_size, rank or expert count that is not a positive int in range",
}


class ExpertParallelError(LayoutContractError):
    """An expert-parallel configuration layoutc refuses; `code` is one of `CODES`."""

    def __init__(self, code: str, message: str) -> None:
        assert code in CODES, code
        self.code = code
        super().__init__(f"[{code}] {message}")


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ExpertParallelError("EP06", f"{name} must be a positive int, got {value!r}")
    return value


def check_placement(placement: object) -> str:
    """The placement name, or ExpertParallelError EP03 naming the ones vLLM knows."""
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise ExpertParallelError("EP03", f"expert placement {placement!r} is not one vLLM 0.32 knows "
                                  f"(vllm.config.parallel.ExpertPlacementStrategy: {', '.join(PLACEMENTS)})")
    return placement


def check_served(who: str, placement: object, served: tuple[str, ...]) -> str:
    """plan()'s `expert_placement=`: EP03 for a name vLLM does not know, and for one the
    contract's kernel does not serve (`experts ... placement A, B`)."""
    name = check_placement(placement)
    if name not in served:
        raise ExpertParallelError("EP03", f"{who}: expert placement {name!r} is not one this contract serves "
                                  f"({', '.join(served)})")
    return name


@dataclass(frozen=True)
class EpPlan:
    """The four numbers `expert_map.local_experts` reads from a plan (generated modules map
    their own parameter names onto these)."""

    num_experts: int
    ep_size: int
    expert_placement: str
    num_redundant_experts: int = 0


def check_ep(num_experts: int, ep_size: int, placement: object, num_redundant: int = 0) -> str:
    """Validate an EP degree over `num_experts` logical (+ `num_redundant`) experts.

    Raises ExpertParallelError: EP06 (not a positive int), EP01 (ep_size > physical experts:
    vLLM would give a rank 0 experts), EP03 (unknown placement). Returns the placement.
    """
    _positive("num_experts", num_experts)
    _positive("ep_size", ep_size)
    if isinstance(num_redundant, bool) or not isinstance(num_redundant, int) or num_redundant < 0:
        raise ExpertParallelError("EP06", f"num_redundant_experts must be an int >= 0, got {num_redundant!r}")
    physical = num_experts + num_redundant
    if ep_size > physical:
        raise ExpertParallelError("EP01", f"ep_size={ep_size} exceeds the {physical} experts: ranks "
                                  f"{physical}..{ep_size - 1} would hold none")
    return check_placement(placement)


def local_count(num_experts: int, ep_size: int, ep_rank: int) -> int:
    """How many of `num_experts` physical experts rank `ep_rank` holds (both placements)."""
    base, extra = divmod(num_experts, ep_size)
    return base + (1 if ep_rank < extra else 0)


def owner(expert: int, num_experts: int, ep_size: int, placement: str) -> int:
    """The EP rank holding physical expert `expert` (0 <= expert < num_experts)."""
    if placement == "round_robin":
        return expert % ep_size
    base, extra = divmod(num_experts, ep_size)
    # The first `extra` ranks hold base + 1 experts each, the rest base.
    head = extra * (base + 1)
    return expert // (base + 1) if expert < head else extra + (expert - head) // base


def local_id(expert: int, num_experts: int, ep_size: int, placement: str) -> int:
    """The id physical expert `expert` has on its owner rank (its position there)."""
    rank = owner(expert, num_experts, ep_size, placement)
    if placement == "round_robin":
        return expert // ep_size
    base, extra = divmod(num_experts, ep_size)
    return expert - (rank * base + min(rank, extra))


def held(ep_rank: int, num_experts: int, ep_size: int, placement: str) -> list[int]:
    """The physical experts rank `ep_rank` holds, in local-id order."""
    if placement == "round_robin":
        return list(range(ep_rank, num_experts, ep_size))
    base, extra = divmod(num_experts, ep_size)
    start = ep_rank * base + min(ep_rank, extra)
    return list(range(start, start + local_count(num_experts, ep_size, ep_rank)))


def physical_to_logical(num_experts: int, num_redundant: int) -> list[int]:
    """vLLM's initial EPLB arrangement: physical `p` holds logical `p % num_experts`."""
    return [p % num_experts for p in range(num_experts + num_redundant)]


@dataclass(frozen=True)
class ParallelConfig:
    """What one MoE layer sees: vLLM 0.32's `FusedMoEParallelConfig` sizes and ranks.

    `tp_size`/`tp_rank` shard the intermediate; `ep_size`/`ep_rank` split the experts.
    """

    tp_size: int
    tp_rank: int
    dp_size: int
    dp_rank: int
    pcp_size: int
    pcp_rank: int
    ep_size: int
    ep_rank: int
    use_ep: bool


def parallel_config(tp: int, dp: int, pcp: int, enable_ep: bool,
                    tp_rank: int = 0, dp_rank: int = 0, pcp_rank: int = 0) -> ParallelConfig:
    """The MoE layer's parallel configuration for a `tp x dp x pcp` deployment.

    EP is used only when asked for and the product exceeds 1; then every device holds whole
    experts (tp 1, ep = the product); off, the intermediate is split over the product.
    Raises ExpertParallelError EP06 on a size < 1 or a rank outside its size.
    Source: vLLM 0.32 config.py `FusedMoEParallelConfig.make` and `flatten_tp_across_dp_and_pcp`.
    """
    for name, size, rank in (("tp", tp, tp_rank), ("dp", dp, dp_rank), ("pcp", pcp, pcp_rank)):
        _positive(f"{name}_size", size)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < size:
            raise ExpertParallelError("EP06", f"{name}_rank={rank!r} is outside 0..{size - 1}")
    flat = tp * dp * pcp
    flat_rank = dp_rank * pcp * tp + pcp_rank * tp + tp_rank
    if enable_ep and flat > 1:
        return ParallelConfig(1, 0, dp, dp_rank, pcp, pcp_rank, flat, flat_rank, True)
    return ParallelConfig(flat, flat_rank, dp, dp_rank, pcp, pcp_rank, 1, 0, False)


def world_ranks(world: int, ep_size: int, tp_size: int) -> list[tuple[int, int]]:
    """(ep_rank, tp_rank) of each world rank, tp innermost (vLLM's order: tp fastest).

    Raises ExpertParallelError EP02 when ep_size * tp_size != world.
    """
    _positive("world", world)
    _positive("ep_size", ep_size)
    _positive("tp_size", tp_size)
    if ep_size * tp_size != world:
        raise ExpertParallelError("EP02", f"ep_size={ep_size} x tp_size={tp_size} = {ep_size * tp_size} "
                                  f"does not match the world of {world} ranks")
    return [(r // tp_size, r % tp_size) for r in range(world)]


adopt(globals())  # one class per process beside layoutc (twin.py)
