"""One rank of `run_tp_layer` (runs in a spawned process): plan, shard, prepack, kernel, all_reduce.

Every rank calls the generated module's `plan(...)` with its `tp_size`, takes its shard
of the full logical layer with the `shard` function of the module's `weight w13` /
`weight w2` (/ `bias w13`) tensors, looked up by role in its LAYOUT, prepacks it with the
module's `prepack_padded` and runs `fused_moe`; the partial outputs are summed with
`dist.all_reduce(SUM)` in the model dtype. The `bias w2` shard gives the bias to rank 0
and zeros to the other ranks, so it is added once. Rank 0 compares the sum with
`reference_moe`.

What a rank reports goes to the launcher's queue as `(kind, rank, payload)`: "report"
(its `RankReport` fields), "errors" (rank 0's error against the reference) or "error"
(the exception, its traceback and whether it was raised inside a gloo call).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, Self

import torch
import torch.distributed as dist

from layoutc.runtime.interface import ModuleLayout, ShardFn, TensorEntry
from layoutc.tools.contract_module import import_contract_module, kernel_of, layout_of
from layoutc.tools.tp.reference import reference_moe

# Ops that are plumbing, not kernels, when recording what a rank dispatched.
_PLUMBING_NAMESPACES = frozenset({"aten", "prim", "prims", "c10d", "_c10d_functional"})


@dataclass(frozen=True)
class LayerTensors:
    """One full logical checkpoint layer and its inputs, shared with every rank.

    w13 [E, 2*I, H] ([gate | up]), w2 [E, H, I], w13_bias [E, 2*I] / w2_bias [E, H] or None,
    x [T, H] (model dtype), topk_weights float32 / topk_ids int32 [T, top_k].
    """

    w13: torch.Tensor
    w2: torch.Tensor
    x: torch.Tensor
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor
    w13_bias: torch.Tensor | None = None
    w2_bias: torch.Tensor | None = None

    def share_memory(self) -> None:
        """Move every tensor to shared memory (once, not once per rank when the args are pickled)."""
        for f in fields(self):
            tensor = getattr(self, f.name)
            if tensor is not None:
                tensor.share_memory_()


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


def _kernel_ops(ops: list[str], layout: ModuleLayout) -> list[str]:
    """The kernels among recorded ops: any op outside aten/prim, plus the glue's declared ops."""
    declared = {op for _, op in layout.kernel.glue.ops} if layout.kernel is not None else set()
    return [op for op in ops if op in declared or op.split("::")[0] not in _PLUMBING_NAMESPACES]


def _kernel_library() -> str | None:
    """The loaded `vllm/_C*.so` (from /proc/self/maps), or None."""
    with contextlib.suppress(OSError), open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            columns = line.split()
            if columns and "/vllm/_C" in columns[-1] and columns[-1].endswith(".so"):
                return columns[-1]
    return None


_IN_COLLECTIVE = [False]  # per process: is this rank inside a gloo call right now?


@contextlib.contextmanager
def collective() -> Iterator[None]:
    """Mark a gloo call: a failure inside one is usually a peer's failure seen from here.

    The mark stays set when the call raises, for the rank's error report to read.
    """
    _IN_COLLECTIVE[0] = True
    yield
    _IN_COLLECTIVE[0] = False


def init_rank(rank: int, tp_size: int, port: int, cfg: dict[str, Any]) -> None:
    """This process's threads, and its gloo process group on the loopback (MASTER_ADDR/PORT)."""
    torch.set_num_threads(cfg["threads_per_rank"])
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with collective():
        dist.init_process_group("gloo", rank=rank, world_size=tp_size, timeout=timedelta(seconds=cfg["timeout_s"]))


def report_error(results: Any, rank: int, exc: BaseException) -> None:
    """Send the launcher this rank's exception (the caller re-raises it)."""
    results.put(("error", rank, {"exc_type": type(exc).__name__, "message": str(exc),
                                 "traceback": traceback.format_exc(), "secondary": _IN_COLLECTIVE[0],
                                 "time": time.time()}))


def rank_main(rank: int, tp_size: int, port: int, module_name: str, cfg: dict[str, Any],
              tensors: LayerTensors, results: Any) -> None:
    """Body of one rank (runs in a spawned process); reports to `results`, re-raises on error."""
    try:
        init_rank(rank, tp_size, port, cfg)
        try:
            report, output = _rank_layer(rank, tp_size, module_name, cfg, tensors)
            if rank == 0:
                results.put(("errors", rank, _errors_against_reference(output, tensors, cfg["activation"])))
            results.put(("report", rank, report))
        finally:
            dist.destroy_process_group()
    except BaseException as exc:
        report_error(results, rank, exc)
        raise


def _errors_against_reference(output: torch.Tensor, tensors: LayerTensors, activation: str) -> dict[str, float]:
    """rel_error (Frobenius, dimensionless) and max_abs_error of the all-reduced output."""
    ref = reference_moe(tensors.x, tensors.w13, tensors.w2, tensors.topk_weights, tensors.topk_ids, activation,
                        w13_bias=tensors.w13_bias, w2_bias=tensors.w2_bias)
    diff = output.to(torch.float32) - ref
    ref_norm = float(ref.norm())
    return {"rel_error": float(diff.norm()) / ref_norm if ref_norm else float(diff.norm()),
            "max_abs_error": float(diff.abs().max()) if diff.numel() else 0.0}


def _shard(layout: ModuleLayout, tensor: TensorEntry) -> ShardFn:
    """`tensor`'s shard function; ValueError when the contract shards nothing (no shard count)."""
    if tensor.shard is None:
        raise ValueError(f"contract {layout.contract} shards nothing (it has no tp_size parameter): "
                         "it cannot run over ranks")
    return tensor.shard


def _layer_plan(layout: ModuleLayout, cfg: dict[str, Any], tp_size: int) -> Any:
    """`plan(...)` with the parameters the contract takes (e.g. no `isa` for torch_grouped_mm)."""
    plan_args = {"num_experts": cfg["num_experts"], "hidden_size": cfg["hidden_size"],
                 "intermediate_size": cfg["intermediate_size"], "tp_size": tp_size, "isa": cfg["isa"],
                 "activation": cfg["activation"], "dtype": cfg["dtype"]}
    if cfg["activation"] == "swigluoai":  # gpt-oss's constants (the family table's), its reference's too
        from layoutc.tools.checkpoints.formats import FORMATS

        alpha, limit = FORMATS["gpt_oss"].swiglu_defaults or (1.702, 7.0)
        plan_args.update(swiglu_alpha_milli=round(1000 * alpha), swiglu_limit_milli=round(1000 * limit))
    return layout.plan(**layout.plan_arguments(plan_args))


@dataclass
class _Prepacked:
    """One rank's prepacked weights, its bias arguments, and what preparing them took (seconds)."""

    w13: Any
    w2: Any
    bias_args: dict[str, torch.Tensor | None]
    prepack_ops: list[str]
    prepack_path: str
    shard_seconds: float
    unpad_seconds: float
    prepack_seconds: float


def _shard_and_prepack(layout: ModuleLayout, plan: Any, rank: int, tensors: LayerTensors) -> _Prepacked:
    """The rank's shard of the full layer, prepacked for the kernel as it is (`prepack_padded`)."""
    kernel = kernel_of(layout)
    e13, e2 = layout.weight("w13"), layout.weight("w2")
    eb13, eb2 = layout.tensor("bias", "w13"), layout.tensor("bias", "w2")
    t0 = time.perf_counter()
    w13 = _shard(layout, e13)(tensors.w13, rank, plan)
    w2 = _shard(layout, e2)(tensors.w2, rank, plan)
    w13_bias = None if tensors.w13_bias is None or eb13 is None else \
        _shard(layout, eb13)(tensors.w13_bias, rank, plan)
    t1 = time.perf_counter()
    with _OpRecorder() as prepack_rec:
        packed_w13, packed_w2 = kernel.prepack_padded(w13.contiguous(), w2.contiguous(), plan)
    t2 = time.perf_counter()
    del w13, w2
    # row-parallel output bias: the generated shard gives it to rank 0 and zeros to the others
    w2_bias = None if tensors.w2_bias is None or eb2 is None else \
        _shard(layout, eb2)(tensors.w2_bias, rank, plan)
    bias_args = {} if tensors.w13_bias is None else {"w13_bias": w13_bias, "w2_bias": w2_bias}
    return _Prepacked(packed_w13, packed_w2, bias_args, _kernel_ops(prepack_rec.ops, layout), "prepack_padded",
                      t1 - t0, 0.0, t2 - t1)


def _timed_forward(layout: ModuleLayout, plan: Any, tensors: LayerTensors, packed: _Prepacked,
                   cfg: dict[str, Any]) -> tuple[torch.Tensor, list[str], list[float], list[float]]:
    """`warmup` + `iters` steps of barrier, `fused_moe`, all_reduce. Returns the last reduced
    output, the kernel ops of the first step, and the timed steps' kernel and step seconds."""
    kernel_times: list[float] = []
    step_times: list[float] = []
    forward_ops: list[str] = []
    output = torch.empty(0)
    fused_moe = kernel_of(layout).fused_moe
    args = (tensors.x, packed.w13, packed.w2, tensors.topk_weights, tensors.topk_ids, plan)
    for i in range(cfg["warmup"] + cfg["iters"]):
        with collective():
            dist.barrier()
        s0 = time.perf_counter()
        if i == 0:
            with _OpRecorder() as rec:
                output = fused_moe(*args, **packed.bias_args)
            forward_ops = _kernel_ops(rec.ops, layout)
        else:
            output = fused_moe(*args, **packed.bias_args)
        s1 = time.perf_counter()
        with collective():
            dist.all_reduce(output, op=dist.ReduceOp.SUM)
        s2 = time.perf_counter()
        if i >= cfg["warmup"]:
            kernel_times.append(s1 - s0)
            step_times.append(s2 - s0)
    return output, forward_ops, kernel_times, step_times


def _rank_layer(rank: int, tp_size: int, module_name: str, cfg: dict[str, Any],
                tensors: LayerTensors) -> tuple[dict[str, Any], torch.Tensor]:
    """This rank's part of the layer: (its RankReport fields plus "plan", its all-reduced output)."""
    layout = layout_of(import_contract_module(module_name))
    plan = _layer_plan(layout, cfg, tp_size)
    if tensors.w13_bias is not None and (layout.tensor("bias", "w13") is None or layout.tensor("bias", "w2") is None):
        raise ValueError(f"contract {layout.contract} takes no expert bias (it declares no `bias w13` and "
                         "`bias w2` tensors); run with bias=False")
    packed = _shard_and_prepack(layout, plan, rank, tensors)

    if cfg.get("fail_on_rank") == rank:
        raise RuntimeError(f"injected failure on rank {rank} (fail_on_rank={rank})")

    output, forward_ops, kernel_times, step_times = _timed_forward(layout, plan, tensors, packed, cfg)
    declared_forward = dict(kernel_of(layout).glue.ops).get("forward")
    forward_op = (declared_forward if declared_forward in forward_ops
                  else forward_ops[-1] if forward_ops else "")
    report = {
        "rank": rank, "pid": os.getpid(), "num_threads": torch.get_num_threads(),
        "kernel_ops": tuple(dict.fromkeys([*packed.prepack_ops, *forward_ops])), "forward_op": forward_op,
        "prepack_path": packed.prepack_path, "kernel_library": _kernel_library(),
        "shard_seconds": packed.shard_seconds, "unpad_seconds": packed.unpad_seconds,
        "prepack_seconds": packed.prepack_seconds,
        "forward_seconds": statistics.median(step_times), "kernel_seconds": statistics.median(kernel_times),
        "plan": (plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded),
    }
    return report, output
