"""The one loop over a world's ranks that every `layoutc run` path calls (issue 41 item 1).

A rank strategy says how one rank's weights are loaded and how its partial output is computed
(`RankStrategy`: dense bf16 through the generated loaders and the glue's `prepack_padded` /
`fused_moe`, experts under EP with the rank's `expert_map`, int4pack / int8pack from the
checkpoint's codes, a contract's padded loaders decoded through the reference); `run_ranks`
does what is common: per rank, free the previous rank's memory (malloc_trim), load, call the
kernel (a warm-up and `iters` timed calls), record the rank's figures, and sum the partials in
their own dtype, as the all-reduce does (vLLM's `tensor_model_parallel_all_reduce` sums in
the model dtype). Each rank's weights are released before the next rank is loaded.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from layoutc.tools.runmemory import rss_peak_reset, status_kib, trim


class RankStrategy(Protocol):
    """How one rank of one layer is loaded and run (the kind of route: dense, EP, quantized codes, padded)."""

    def load(self, rank: Any) -> Any:
        """The rank's weights, ready for `compute` (loaded through the generated module; prepacked where the
        kernel takes prepacked weights). `rank`: the rank's id as the loop's `ranks` give it."""
        ...

    def compute(self, weights: Any, x: Any, routing: tuple[Any, Any]) -> Any:
        """The rank's partial output [T, H] (before the all-reduce). x: [T, H]; routing: (topk_weights
        float32 [T, top_k], topk_ids int32 [T, top_k])."""
        ...


@dataclass(frozen=True)
class RankFigures:
    """One rank's figures: load (+ prepack) seconds, the median of its timed kernel calls (seconds),
    and its peak RSS growth over load and calls (MiB, Linux VmHWM; 0 where /proc is not there)."""

    rank: Any
    load_s: float
    kernel_s: float
    peak_mib: float


@dataclass(frozen=True)
class RankSum:
    """The summed output over the ranks (the all-reduce, in the partials' dtype) and each rank's figures;
    `load_s`, `kernel_s` and `peak_mib` are the slowest / largest rank's, as a run's row reports them."""

    output: Any
    ranks: tuple[RankFigures, ...]

    @property
    def load_s(self) -> float:
        return max([0.0, *(r.load_s for r in self.ranks)])

    @property
    def kernel_s(self) -> float:
        return max([0.0, *(r.kernel_s for r in self.ranks)])

    @property
    def peak_mib(self) -> float:
        return max([0.0, *(r.peak_mib for r in self.ranks)])


def run_ranks(
    strategy: RankStrategy,
    ranks: Iterable[Any],
    x: Any,
    routing: tuple[Any, Any],
    *,
    warmup: bool = True,
    iters: int = 3,
) -> RankSum:
    """Every rank of `ranks` in order through `strategy`, the partials summed: returns RankSum.

    x: [T, H]; routing: (topk_weights, topk_ids) [T, top_k]. With `warmup`, one untimed call
    precedes the `iters` (>= 1) timed ones; the last call's output is the rank's partial. Errors
    of `load` / `compute` (the module's LayoutContractError on a refused plan, RunError) pass
    through unchanged, before any later rank is loaded. Raises ValueError for no ranks or iters < 1.
    """
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    total = None
    figures: list[RankFigures] = []
    for rank in ranks:
        trim()  # the previous rank's weights are gone: each rank's peak from here
        base = status_kib("VmRSS")
        rss_peak_reset()
        t0 = time.perf_counter()
        weights = strategy.load(rank)
        t1 = time.perf_counter()
        part: Any = strategy.compute(weights, x, routing) if warmup else None
        times = []
        for _ in range(iters):
            t2 = time.perf_counter()
            part = strategy.compute(weights, x, routing)
            times.append(time.perf_counter() - t2)
        figures.append(RankFigures(rank, t1 - t0, statistics.median(times), (status_kib("VmHWM") - base) / 1024))
        total = part.clone() if total is None else total.add_(part)  # the all-reduce: sum in the partials' dtype
        del weights, part
    if total is None:
        raise ValueError("run_ranks: no ranks")
    return RankSum(total, tuple(figures))
