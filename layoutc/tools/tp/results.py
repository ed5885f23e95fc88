"""What the tensor-parallel runs return, and the error that names a failing rank."""

from __future__ import annotations

from dataclasses import dataclass


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
    prepack_path: "prepack_padded" (the module re-blocks the padded shard as it is; every
    generated module with a glue has it).
    kernel_library: path of the loaded `vllm/_C*.abi3.so` (from /proc/self/maps), or None.
    num_threads: `torch.get_num_threads()` inside the rank.
    shard_seconds: the `shard` of `weight w13` + `weight w2` (+ `bias w13`).
    unpad_seconds: 0 (the padded shard is prepacked as it is; kept for the report's shape).
    prepack_seconds: `prepack_padded` (both weights).
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
