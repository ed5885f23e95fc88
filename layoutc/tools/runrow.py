"""One row of a `layoutc run` report for both routes (dense / EP, run.py; quantized,
quant_run/runner.py), its result in words, its one text printer and its one JSON writer.

A route writes only its own row fields (`fields(quantized)`: the JSON keys, in their order), so
neither route's JSON gains a key of the other's. A per-route field set, not None-omitted fields:
a dense row writes `scale_ratio: null` when its mismatch is no constant factor.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from layoutc.tools.ep_run import placement_lines
from layoutc.tools.runcompare import reach_words


@dataclass(frozen=True)
class Row:
    """One layer at one TP (and EP) degree.

    matched: rel_error <= tolerance. independent: the reference is transformers' own block (from
    from_pretrained), not one built from the declared format. ok: matched, independent and kernel_ran.
    result: `result_words`. input_scale: the second half of the tokens is the first times this
    (runcompare.run_inputs); input_reach: what that half reaches, and the clamp limit it was chosen
    against (InputReach.text). Dense / EP only: peak_mib, routing (where the kernel's routing came
    from), router_weight ("output" or "input"), ep_size / placement / experts_by_rank (`--ep`: the
    experts split over ep_size ranks of tp_size shards, each EP rank's experts), block (the block's step
    outside its experts, block.BlockOps.words), scale_ratio (a MISMATCH that is a constant factor: the
    block's output / the kernel's). Quantized only: kernel (the op that ran, or why none), kernel_ran (a
    real kernel computed the kernel side, not a reference of the declared format).
    """

    layer: int
    tp_size: int
    intermediate_size_per_partition: int
    intermediate_size_per_partition_padded: int
    rel_error: float
    tolerance: float
    ok: bool
    kernel_ms: float
    load_ms: float
    peak_mib: float = 0.0
    reference: str = ""
    routing: str = ""
    independent: bool = True
    matched: bool = True
    router_weight: str = "output"
    result: str = "ok"
    ep_size: int = 1
    placement: str = ""
    experts_by_rank: list[list[int]] = field(default_factory=list)
    input_scale: float = 1.0
    input_reach: str = ""
    block: str = ""
    scale_ratio: float | None = None
    kernel: str = ""
    kernel_ran: bool = True


_QUANT = "kernel reference kernel_ms load_ms matched independent kernel_ran result input_scale input_reach"


def fields(quantized: bool) -> tuple[str, ...]:
    """A route's JSON row keys, in order: the dense route's are Row's up to scale_ratio."""
    names = tuple(f.name for f in dataclasses.fields(Row))
    return names[:7] + tuple(_QUANT.split()) if quantized else names[: names.index("kernel")]


def result_words(matched: bool, checked: bool, why_not: str) -> str:
    """A row's result: "ok" or "MISMATCH" when `checked` (an independent reference and a real kernel),
    else "unchecked: <why_not>", or "MISMATCH (unchecked: <why_not>)" past the tolerance."""
    if checked:
        return "ok" if matched else "MISMATCH"
    return f"unchecked: {why_not}" if matched else f"MISMATCH (unchecked: {why_not})"


def unchecked(rows: list[Row]) -> list[Row]:
    """The rows without an independent reference or a real kernel."""
    return [r for r in rows if not (r.independent and r.kernel_ran)]


def write_json(
    head: dict[str, Any], rows: list[Row], refused: list[str], tail: dict[str, Any], quantized: bool
) -> None:
    """The report as one JSON document on stdout: `head`'s keys, "rows" (each with its route's
    `fields`), "refused", "unchecked" (each unchecked row's result), then `tail`'s keys."""
    keys = fields(quantized)
    out = {**head, "rows": [{k: getattr(r, k) for k in keys} for r in rows], "refused": refused}
    out["unchecked"] = [f"layer {r.layer} tp={r.tp_size}: {r.result}" for r in unchecked(rows)]
    sys.stdout.write(json.dumps({**out, **tail}, indent=2) + "\n")


def print_text(title: str, rows: list[Row], refused: list[str], after: list[str], quantized: bool) -> None:
    """The report as text on stdout: `title`, the table (an ep column only at --ep > 1; a quantized
    row names its kernel and reference, the dense route's references and routing follow the table),
    the inputs, the EP topology, the `refused:` lines, then the route's `after` lines."""
    ep = any(r.ep_size > 1 for r in rows)
    end = f"  {'indep':>5} {'kernel':>6}  result | kernel | reference" if quantized else f" {'peak MiB':>9}  result"
    lines = [title, f"{'layer':>5} {'tp':>3} {' ep ' if ep else ''}{'I_pp -> padded':>15} {'rel error':>10} "]
    lines[1] += f"{'tol':>8} {'kernel ms':>10} {'load ms':>9}{end}"
    for r in rows:
        pad = f"{r.intermediate_size_per_partition} -> {r.intermediate_size_per_partition_padded}"
        if quantized:
            yes = ("yes" if r.independent else "no", "yes" if r.kernel_ran else "no")
            end = f"  {yes[0]:>5} {yes[1]:>6}  {r.result} | {r.kernel} | {r.reference}"
        else:
            end = f" {r.peak_mib:>9.1f}  {r.result}"
        lines.append(f"{r.layer:>5} {r.tp_size:>3} {f'{r.ep_size:>3} ' if ep else ''}{pad:>15} {r.rel_error:>10.2e} ")
        lines[-1] += f"{r.tolerance:>8.0e} {r.kernel_ms:>10.2f} {r.load_ms:>9.1f}{end}"
    if rows:
        lines += [] if quantized else _references(rows)
        reach = f"seeded N(0, 1) hidden states, and the same scaled: {reach_words(rows)}"
        lines.append(f"inputs: {reach}; the larger error of the two halves")
    lines += placement_lines(rows) + [f"refused: {line}" for line in refused] + after
    sys.stdout.write("".join(f"{line}\n" for line in lines))


def _references(rows: list[Row]) -> list[str]:
    """The dense route's lines under the table: each reference and routing (per layer where they
    differ), the router weight, and the block's step outside the experts."""
    seen: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        layers = seen.setdefault((r.reference, r.routing), [])
        if r.layer not in layers:
            layers.append(r.layer)
    lines: list[str] = []
    for (reference, routing), layers in seen.items():
        which = "" if len(seen) == 1 else f" (layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))})"
        lines += [f"reference{which}: {reference}", f"routing{which}: {routing}"]
    lines.append(f"router weight: on each expert's {rows[0].router_weight}")
    if rows[0].block:
        lines.append(f"block outside the experts (the format's, applied to the kernel's output): {rows[0].block}")
    return lines
