"""What the run's shared incremental solver holds, and which queries may be asked of it.

The shared solver (layoutc/compiler/verify/run.py) holds the domain, the pins and the
requires at its base, and more in scopes (`Run.holding`). A query may be decided there
only when it entails every held term; :class:`Held` answers that by the query's shape
alone (conjuncts, and conjuncts common to every disjunct), never by solving.
"""

from __future__ import annotations

from typing import Any

import z3  # type: ignore[import-untyped]
from z3 import z3core

# How deep a query's And/Or structure is searched for the terms the shared solver holds.
SHAPE_DEPTH = 5


class Held:
    """The terms the shared solver holds, scope by scope, and for each the held terms it
    entails by its shape (so that a query need only show the outermost ones)."""

    def __init__(self) -> None:
        self.scopes: list[list[int]] = []
        self.implied: dict[int, frozenset[int]] = {}

    def push(self, parts: list[z3.BoolRef]) -> None:
        ids = []
        for p in parts:
            key = p.get_id()
            found = shape_entails(p, self.implied, skip=key)
            self.implied[key] = frozenset((key,)).union(*(self.implied[f] for f in found))
            ids.append(key)
        self.scopes.append(ids)

    def pop(self) -> None:
        for key in self.scopes.pop():
            if not any(key in scope for scope in self.scopes):
                self.implied.pop(key, None)

    def entailed_by(self, formula: z3.BoolRef) -> bool:
        """Whether `formula` entails every held term by its shape alone (the caller makes
        sure the base scope is pushed before asking)."""
        found = shape_entails(formula, self.implied)
        closure: frozenset[int] = frozenset().union(*(self.implied[f] for f in found))
        return all(key in closure for scope in self.scopes for key in scope)


def shape_entails(formula: z3.BoolRef, targets: dict[int, frozenset[int]], skip: int = -1) -> frozenset[int]:
    """The keys (AST ids) of `targets` that are conjuncts of `formula` (through nested
    `And`s), or of every disjunct of an `Or` in that position. The walk stops at a target
    and looks at the top SHAPE_DEPTH levels only (the goals are And(admitted, ...) and Ors
    of those), through z3's C API (no Python wrapper per node)."""
    ctx = formula.ctx_ref()
    memo: dict[int, frozenset[int]] = {}

    def walk(ast: Any, depth: int) -> frozenset[int]:
        key = z3core.Z3_get_ast_id(ctx, ast)
        if key in targets and key != skip:
            return frozenset((key,))
        if key not in memo:
            found: frozenset[int] = frozenset()
            if depth < SHAPE_DEPTH and z3core.Z3_get_ast_kind(ctx, ast) == z3.Z3_APP_AST:
                kind = z3core.Z3_get_decl_kind(ctx, z3core.Z3_get_app_decl(ctx, ast))
                if kind in (z3.Z3_OP_AND, z3.Z3_OP_OR):
                    subs = [walk(z3core.Z3_get_app_arg(ctx, ast, n), depth + 1)
                            for n in range(z3core.Z3_get_app_num_args(ctx, ast))]
                    if kind == z3.Z3_OP_AND:
                        found = found.union(*subs)
                    elif subs:
                        found = frozenset.intersection(*subs)
            memo[key] = found
        return memo[key]
    return walk(formula.as_ast(), 0)
