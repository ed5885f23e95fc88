"""Checking `param`, `let` and `require`/`admit` declarations into the scope's tables."""

from __future__ import annotations

from dataclasses import replace
from typing import assert_never

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.exprs import expect, expr
from layoutc.compiler.check.names import check_name, define
from layoutc.compiler.check.scope import MAX_ENUM, MAX_PARAMS, Scope, Sink
from layoutc.compiler.diagnostics import Related, Span
from layoutc.compiler.evaluate import MAX_MAGNITUDE, int_bounds


def declare_param(scope: Scope, sink: Sink, d: A.ParamDecl) -> None:
    """`param NAME: DOMAIN [= DEFAULT]` into ``scope.params`` (and its interval into
    ``scope.bounds`` when it is an int); a parameter that fails stays poisoned."""
    if len(scope.params) >= MAX_PARAMS:
        sink.error("LC307", d.span, f"more than {MAX_PARAMS} parameters")
        scope.poisoned.add(d.name)
        return
    if not define(scope, sink, d.name, d.span):
        scope.poisoned.add(d.name)
        return
    scope.poisoned.add(d.name)  # removed again below once the domain is valid
    p = _domain(scope, sink, d)
    if p is None:
        return
    if d.default is not None:
        if p.type != ir.INT or not (p.low <= d.default <= p.high if p.kind == "range" else d.default in p.values):
            sink.error("LC302", d.span, f"default {d.default} of `{d.name}` is not an int in its domain")
            return
        p = replace(p, default=d.default)
    scope.params[d.name] = p
    if p.type == ir.INT:
        scope.bounds[d.name] = (p.low, p.high)
    scope.poisoned.discard(d.name)


def _domain(scope: Scope, sink: Sink, d: A.ParamDecl) -> ir.Param | None:
    dom = d.domain
    match dom:
        case A.RangeDomain():
            if dom.low > dom.high:
                sink.error("LC302", dom.span, f"empty range {dom.low}..{dom.high}")
                return None
            return ir.Param(d.name, "range", ir.INT, (), dom.low, dom.high, d.span)
        case A.SetDomain():
            if len(set(dom.values)) != len(dom.values):
                sink.error("LC202", dom.span, "a value is listed twice in the set")
                return None
            return ir.Param(d.name, "set", ir.INT, tuple(sorted(dom.values)), min(dom.values),
                            max(dom.values), d.span)
        case A.EnumDomain():
            return _enum(scope, sink, d, dom)
        case A.BoolDomain():
            return ir.Param(d.name, "bool", ir.BOOL, (False, True), 0, 1, d.span)
        case _:
            assert_never(dom)


def _enum(scope: Scope, sink: Sink, d: A.ParamDecl, dom: A.EnumDomain) -> ir.Param | None:
    """An enum parameter; its members join ``scope.members`` one by one, as they pass."""
    if len(dom.members) > MAX_ENUM:
        sink.error("LC307", dom.span, f"an enum may have at most {MAX_ENUM} members")
        return None
    enum = ir.EnumT(d.name, dom.members)
    listed: dict[str, Span] = {}
    for member, span in zip(dom.members, dom.member_spans, strict=False):
        if member in listed:
            sink.error("LC202", span, f"enum member `{member}` is listed twice",
                       related=(Related(listed[member], "first listed here"),))
            return None
        listed[member] = span
    for member, span in zip(dom.members, dom.member_spans, strict=False):
        if not check_name(sink, member, span):
            return None
        if member != member.lower():  # generated plan() matches values case-insensitively (issue 16)
            sink.error("LC204", span, f"enum member `{member}` must be lowercase: generated modules "
                       "compare values case-insensitively, so it could never be selected")
            return None
        if member in scope.members or member in scope.defined_at:
            first = scope.defined_at.get(member) or scope.member_at[member]
            sink.error("LC207", span, f"enum member `{member}` clashes with another name",
                       related=(Related(first, "first defined here"),))
            return None
        scope.members[member] = enum
        scope.member_at[member] = span
    return ir.Param(d.name, "enum", enum, dom.members, 0, len(dom.members) - 1, d.span)


def declare_let(scope: Scope, sink: Sink, d: A.LetDecl) -> None:
    """`let NAME = EXPR` into ``scope.lets``; an int let's interval must stay within 2**62 (LC308)."""
    value = expr(scope, sink, d.value)
    if not define(scope, sink, d.name, d.span) or value is None:
        scope.poisoned.add(d.name)
        return
    if value.type == ir.INT:
        bounds = int_bounds(value, scope.bounds)
        if bounds is None or max(abs(bounds[0]), abs(bounds[1])) > MAX_MAGNITUDE:
            sink.error("LC308", d.span, f"`{d.name}` can exceed 2**62 in magnitude for some configuration; "
                       "sizes never get there")
            scope.poisoned.add(d.name)
            return
        scope.bounds[d.name] = bounds
    scope.lets[d.name] = ir.Let(d.name, value, value.type, d.span)


def declare_rule(scope: Scope, sink: Sink, d: A.RuleDecl) -> None:
    """`require COND : "..."` or `admit COND : "..."` into ``scope.rules`` (COND a bool)."""
    cond = expr(scope, sink, d.cond)
    if cond is None or not expect(sink, cond, ir.BOOL):
        return
    scope.rules.append(ir.Rule(d.kind, cond, d.message, d.span))
