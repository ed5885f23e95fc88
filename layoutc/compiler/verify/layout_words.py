"""Layout words as z3 terms: where `pad` stores a logical element, and what the kernel reads.

`layout_phys` is the physical position of logical element `i` of role `k` under an axis
layout (`none`, `pad`, `halves`, `concat`, `interleave`; docs/language.md, axis layouts);
`view_at` is the (role id, index) a kernel's view (`linear`, `halves`, `interleave`) assigns
to a physical position (the runtime's reading: layoutc/runtime/layout.py and
activations.py). The placement and roundtrip properties are proved over them.
"""

from __future__ import annotations

import z3  # type: ignore[import-untyped]

from layoutc.compiler import ir

ROLE_ID = {"gate": 0, "up": 1, "": 0}


def layout_phys(layout: str, k: int, i: z3.ArithRef, logical: z3.ArithRef, padded: z3.ArithRef) -> z3.ArithRef:
    """Physical index (an Int term) of logical element `i` of role `k` (0: gate, 1: up) of a
    segment of `logical` elements padded to `padded`."""
    if layout in ("none", "pad"):
        return i
    if layout == "halves":
        return k * padded + i
    if layout == "concat":
        return k * logical + i
    return 2 * i + k  # interleave


def view_at(v: ir.View | None, j: z3.ArithRef, size: z3.ArithRef,
         roles: tuple[str, ...]) -> tuple[z3.ArithRef, z3.ArithRef]:
    """(role id, index), Int terms, that the kernel assigns to physical position j of an axis
    of `size` positions (no view: linear, every position its own index of the first role)."""
    if v is None or v.view == "linear":
        return z3.IntVal(ROLE_ID[roles[0] if roles else ""], j.ctx), j
    r0, r1 = ROLE_ID[v.roles[0]], ROLE_ID[v.roles[1]]
    if v.view == "halves":
        half = size / 2
        first = j < half
        return z3.If(first, r0, r1), z3.If(first, j, j - half)
    return z3.If(j % 2 == 0, r0, r1), j / 2
