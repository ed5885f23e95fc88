"""The `route` pass: which checkpoints a tool picks a contract for (docs/language.md, "Routes").

`route ROUTE {FORMAT, ...} [rank N]` is the contract's own claim, so that a tool finds its
contracts from the generated modules' `LAYOUT.routes` and keeps no table of contract names
(the route registry: a variant declares itself, as sqlglot's dialects register themselves):

* ROUTE is one of ``interface.ROUTES`` (LC236);
* the format set is not empty, lists each format once, and names formats of
  ``interface.CHECKPOINT_FORMATS`` (LC237);
* `rank N` orders the contracts that serve one format on one ranked route (``RANKED_ROUTES``):
  N >= 1, and `audit` takes none (LC238); a line without it has rank 1;
* `route run {"unquantized"}` needs a glue: `layoutc run` runs the contract's kernel through it
  (LC239; a quantized checkpoint's kernel is called by the quantized runner, chosen by the torch
  function the contract's `models torch` line names);
* no two lines of a contract name the same route and format (LC240).

Across contracts (:func:`conflicts`, run by `layoutc check` and `layoutc compile` over every file
they load, and by the run-time query ``layoutc.runtime.models.routed``): no two contracts serve one
format on one ranked route at one rank (LC241), so a tool's choice never depends on file order.
"""

from __future__ import annotations

from collections.abc import Iterable

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.names import suggest
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.diagnostics import Diagnostic, Related, Span, error
from layoutc.runtime.interface import CHECKPOINT_FORMATS, RANKED_ROUTES, ROUTES


def check_routes(scope: Scope, sink: Sink) -> None:
    """Pass: every `route` line into ``scope.routes`` (after the glue pass: LC239 reads it)."""
    seen: dict[tuple[str, str], Span] = {}
    for d in scope.module.decls:
        if not isinstance(d, A.RouteDecl):
            continue
        found = _route(scope, sink, d)
        if found is None:
            continue
        clash = next(((f, seen[(found.route, f)]) for f in found.formats if (found.route, f) in seen), None)
        if clash is not None:
            sink.error(
                "LC240",
                d.span,
                f"a second `route {found.route}` line names format {clash[0]!r}, which the first names too",
                related=(Related(clash[1], "first stated here"),),
                help="state each format once per route",
            )
            continue
        for f in found.formats:
            seen[(found.route, f)] = d.span
        scope.routes.append(found)


def _route(scope: Scope, sink: Sink, d: A.RouteDecl) -> ir.Route | None:
    ok = True
    if d.route not in ROUTES:
        sink.error(
            "LC236",
            d.span,
            f"unknown route `{d.route[:80]}`: a contract serves one of " + ", ".join(ROUTES),
            help=suggest(d.route, list(ROUTES)),
        )
        return None
    if d.rank is not None and (d.route not in RANKED_ROUTES or d.rank < 1):
        why = (
            "is not ranked (every contract that declares a format is audited)"
            if d.route not in RANKED_ROUTES
            else "ranks from 1 (the first choice)"
        )
        sink.error("LC238", d.span, f"`rank {d.rank}` on `route {d.route}`: route {d.route} {why}")
        ok = False
    ok = _formats(sink, d) and ok
    if d.route == "run" and "unquantized" in (f for f, _ in d.formats) and scope.first(A.GlueDecl) is None:
        sink.error(
            "LC239",
            d.span,
            '`route run {"unquantized"}`: `layoutc run` runs the contract\'s kernel '
            "through its glue, and this contract binds no glue",
            help="declare a `glue` block, or leave unquantized checkpoints to a contract that binds one",
        )
        ok = False
    if not ok:
        return None
    return ir.Route(d.route, tuple(f for f, _ in d.formats), d.rank if d.rank is not None else 1, d.span)


def _formats(sink: Sink, d: A.RouteDecl) -> bool:
    if not d.formats:
        sink.error(
            "LC237",
            d.span,
            f"`route {d.route}` names no checkpoint format",
            help='list the formats: route run {"unquantized"}',
        )
        return False
    ok = True
    listed: dict[str, Span] = {}
    for fmt, span in d.formats:
        if fmt not in CHECKPOINT_FORMATS:
            sink.error(
                "LC237",
                span,
                f"unknown checkpoint format {fmt[:80]!r}: a route names " + ", ".join(CHECKPOINT_FORMATS),
                help=suggest(fmt, list(CHECKPOINT_FORMATS)),
            )
            ok = False
        elif fmt in listed:
            sink.error(
                "LC237", span, f"format {fmt!r} is listed twice", related=(Related(listed[fmt], "first listed here"),)
            )
            ok = False
        listed.setdefault(fmt, span)
    return ok


def conflicts(contracts: Iterable[ir.Contract]) -> list[Diagnostic]:
    """LC241 for each contract that serves a format on a ranked route at a rank another contract
    (earlier in `contracts`) already serves it at, pointing at both lines."""
    claimed: dict[tuple[str, str, int], tuple[str, Span]] = {}
    out: list[Diagnostic] = []
    for c in contracts:
        for r in c.routes:
            if r.route not in RANKED_ROUTES:
                continue
            for fmt in r.formats:
                first = claimed.setdefault((r.route, fmt, r.rank), (c.name, r.span))
                if first[0] != c.name:
                    out.append(
                        error(
                            "LC241",
                            r.span,
                            f"contract {c.name} serves {fmt!r} on route {r.route} at rank "
                            f"{r.rank}, and so does contract {first[0]}: a tool could pick either",
                            related=(Related(first[1], f"{first[0]} claims it here"),),
                            help="give one of them another `rank N` (the lowest is picked first)",
                        )
                    )
    return out
