"""Draw a padded axis as index ranges: what lies where, and how the kernel reads it.

`explain` prints these pictures; `verify` attaches them to counterexamples.
Pure Python on concrete sizes (no solver).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from layoutc.compiler import ir
from layoutc.compiler.evaluate import Env, eval_expr
from layoutc.runtime import algebra
from layoutc.runtime.algebra import ViewWord, Word


@dataclass(frozen=True)
class Run:
    """Physical positions [start, stop) hold `what` (e.g. 'gate[0..175]' or 'pad')."""

    start: int
    stop: int
    what: str

    def __str__(self) -> str:
        return f"{self.start}..{self.stop - 1} {self.what}"


def axis_sizes(axis: ir.Axis, env: Env) -> tuple[int, int, int]:
    """(logical, padded, group) per segment; sizes in values, or in groups for a groups axis."""
    logical = int(eval_expr(axis.logical, env))
    padded = int(eval_expr(axis.padded, env))
    group = 1
    if axis.group_size is not None:
        group = int(eval_expr(axis.group_size, env))
        if group == -1:
            return 1, 1, -1
        logical, padded = logical // group, padded // group
    return logical, padded, group


def layout_runs(axis: ir.Axis, env: Env, fill: str = "pad") -> list[Run]:
    """The physical runs of one axis as the pad code writes it."""
    logical, padded, _ = axis_sizes(axis, env)
    roles = axis.roles or ("",)

    def name(role: str, a: int, b: int) -> str:
        return f"{role}[{a}..{b - 1}]" if role else f"[{a}..{b - 1}]"

    copies, pads, _ = algebra.runs(axis.layout, axis.segments, logical, padded)
    if axis.layout is Word.INTERLEAVE:  # one run of (role0[i], role1[i]) pairs
        live = [Run(dst, dst + n, f"{roles[0]}/{roles[1]} pairs [0..{logical - 1}]") for _, dst, n in copies]
    else:  # one run per segment
        live = [Run(dst, dst + n, name(roles[k], 0, n)) for k, (_, dst, n) in enumerate(copies)]
    filled = [Run(lo, hi, fill) for lo, hi in pads]
    if len(live) == len(filled):  # a pad past each segment's run (pad, halves): segment by segment
        return [run for pair in zip(live, filled, strict=True) for run in pair]
    return live + filled  # one pad after every segment (concat, interleave), or none


def view_runs(view: ir.View | None, size: int) -> list[Run]:
    """How the kernel reads an axis of `size` physical positions."""
    if view is None:
        return [Run(0, size, "read linearly")]
    match view.view:
        case ViewWord.LINEAR:
            return [Run(0, size, "read linearly")]
        case ViewWord.HALVES:
            half = size // 2
            return [Run(0, half, f"kernel: {view.roles[0]}[0..{half - 1}]"),
                    Run(half, size, f"kernel: {view.roles[1]}[0..{size - half - 1}]")]
        case ViewWord.INTERLEAVE:
            return [Run(0, size, f"kernel: pairs ({view.roles[0]}, {view.roles[1]}) at (2i, 2i+1)")]
        case _:
            assert_never(view.view)


def tensor_picture(contract: ir.Contract, tensor: ir.Tensor, env: Env) -> list[str]:
    """Lines describing each padded axis of `tensor`, with the kernel's view."""
    lines: list[str] = []
    for axis in tensor.axes:
        if not axis.is_padded and axis.kind != "groups":
            continue
        logical, padded, group = axis_sizes(axis, env)
        unit = "groups" if axis.kind == "groups" else "values"
        size = axis.segments * padded
        head = f"{tensor.name}.{axis.name}: {axis.layout}"
        if axis.roles:
            head += f"({' | '.join(axis.roles)})"
        head += f", {logical} -> {padded} {unit} per segment, {size} in all"
        if axis.pack > 1:
            head += f", {axis.pack} per storage element"
            if axis.pack_order != tuple(range(axis.pack)):
                head += f" (slot i holds value ({', '.join(map(str, axis.pack_order))})[i])"
        if group not in (1,):
            head += f", group {group}"
        lines.append(head)
        fill = "uninitialised" if tensor.fill_kind == "uninit" else f"fill {tensor.fill}"
        lines.extend(f"  {run}" for run in layout_runs(axis, env, fill))
        if tensor.tail_fill is not None and ir.is_intermediate(tensor, axis):
            lines.append(f"  past a short rank's slice (block shard): tail fill {tensor.tail_fill}")
        view = find_view(contract, tensor, axis.name)
        if view is not None and view.view is not ViewWord.LINEAR:
            lines.extend(f"  {run}" for run in view_runs(view, size))
    return lines


def find_view(contract: ir.Contract, tensor: ir.Tensor, axis: str) -> ir.View | None:
    """The kernel's view of `tensor.axis`: its projection weight's (the checker allows
    views on weights only; a bias, scale or zero-point is read with its weight's view)."""
    if contract.kernel is None:
        return None
    weight = contract.weight(tensor.projection).name
    return next((v for v in contract.kernel.views if v.tensor == weight and v.axis == axis), None)
