"""Layout words as z3 terms: the layout algebra (layoutc/runtime/algebra.py) evaluated on Int terms.

`layout_phys` is the physical position of logical element `i` of role `k` under an axis's
layout word (`algebra.position`); `view_at` is the (role id, index) a kernel's view assigns
to a physical position (`algebra.read`, the runtime's reading: layoutc/runtime/layout.py and
activations.py). The placement and roundtrip properties are proved over them; the same
formulas give the runtime's indices, so the verifier proves what the runtime does.
"""

from __future__ import annotations

import z3  # type: ignore[import-untyped]

from layoutc.compiler import ir
from layoutc.runtime import algebra

ROLE_ID = {"gate": 0, "up": 1, "": 0}
#: A segmented word places two segments (gate | up: the grammar's `NAME | NAME`).
SEGMENTS = 2


class Z3Arith:
    """algebra.Arith on z3 Int terms (`/` and `%` are z3's integer division and modulus)."""

    def lt(self, a: z3.ArithRef, b: z3.ArithRef) -> z3.BoolRef:
        return a < b

    def where(self, cond: z3.BoolRef, a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
        return z3.If(cond, a, b)

    def div(self, a: z3.ArithRef, b: int) -> z3.ArithRef:
        return a / b

    def mod(self, a: z3.ArithRef, b: int) -> z3.ArithRef:
        return a % b

    def minimum(self, a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
        return z3.If(a < b, a, b)


Z3 = Z3Arith()


def layout_phys(layout: algebra.Word, k: int, i: z3.ArithRef, logical: z3.ArithRef,
                padded: z3.ArithRef) -> z3.ArithRef:
    """Physical index (an Int term) of logical element `i` of role `k` (0: gate, 1: up) of a
    segment of `logical` elements padded to `padded`. Raises algebra.UnknownLayout for a
    word the algebra does not define."""
    return algebra.position(layout, SEGMENTS, k, i, logical, padded)


def view_at(v: ir.View | None, j: z3.ArithRef, size: z3.ArithRef,
            roles: tuple[str, ...]) -> tuple[z3.ArithRef, z3.ArithRef]:
    """(role id, index), Int terms, that the kernel assigns to physical position j of an axis
    of `size` positions (no view: linear, every position its own index of the first role)."""
    if v is None or v.view is algebra.ViewWord.LINEAR:
        return z3.IntVal(ROLE_ID[roles[0] if roles else ""], j.ctx), j
    # the role ids as the segments' values: one If per view, as the solver has always seen it
    return algebra.read(v.view, j, size, Z3, (ROLE_ID[v.roles[0]], ROLE_ID[v.roles[1]]))
