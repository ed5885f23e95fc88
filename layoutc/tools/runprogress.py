"""What a runner reports while and after it runs each layer: `Progress` on stderr (with an ETA,
the run being linear in layers) and each layer's `LayerFigures` (`layoutc run --format json`'s
"layers"). Standard library only; used by the bf16 runner (layoutc.tools.run) and the quantized
one (layoutc.tools.quant_run.runner), which import it from below.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any


class Progress:
    """Progress on stderr: a bar redrawn in place on a terminal, else one line per layer and
    TP degree (so a log or a CI job shows where a long run is); each with the time so far and an
    ETA (the mean time of the steps done, times the steps left: the run is linear in layers)."""

    def __init__(self, total: int, tty: bool) -> None:
        self.total, self.done, self.tty = total, 0, tty
        self.start = time.perf_counter()

    def step(self, label: str) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        timing = f"{elapsed:.1f} s, ETA {eta:.1f} s"
        if not self.tty:
            sys.stderr.write(f"layoutc run: [{self.done}/{self.total}] {label} done ({timing})\n")
        elif self.total > 1:
            width = 30
            filled = width * self.done // self.total
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label:<24} {timing}")
            if self.done == self.total:
                sys.stderr.write("\n")
        sys.stderr.flush()


@dataclass(frozen=True)
class LayerFigures:
    """One layer's costs (`layoutc run --format json`'s "layers"): milliseconds reading and
    preparing the inputs (inputs_ms), building transformers' module of the layer (reference_build_ms),
    running it (reference_ms), loading every rank at every degree (load_ms), running the kernel
    (kernel_ms, the rows' medians summed), comparing (compare_ms); peak_mib: this process's peak
    RSS (VmHWM, MiB) while the layer ran, the largest over the per-rank resets (`layoutc.tools.runmemory.peak_kib`)."""

    layer: int
    inputs_ms: float
    reference_build_ms: float
    reference_ms: float
    load_ms: float
    kernel_ms: float
    compare_ms: float
    total_ms: float
    peak_mib: float


def build_entry(oracle: Any, layer: int) -> float | None:
    """The oracle's recorded build seconds of `layer` (its `build_s` entry, a new float on each build:
    checkpoints/stream.py), or None (no oracle, or the layer not built yet)."""
    found = getattr(oracle, "build_s", None) if oracle is not None else None
    return None if found is None else found.get(layer)


def built_between(before: float | None, after: float | None) -> float:
    """Seconds of a build made between two `build_entry` reads of one layer, else 0.0: a layer built
    before the window (a format proof's, handed on cached) is not the window's to subtract."""
    return after if after is not None and after is not before else 0.0
