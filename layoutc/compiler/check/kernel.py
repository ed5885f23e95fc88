"""The `kernel` pass: the kernel's views, alignments, activation and arguments."""

from __future__ import annotations

from typing import assert_never

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.exprs import Where, expect, expr
from layoutc.compiler.check.names import check_name, suggest
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.check.tensors import axis_ref
from layoutc.compiler.diagnostics import Related, Span
from layoutc.runtime.algebra import ViewWord
from layoutc.runtime.vocab import ACTIVATIONS


def check_kernel(scope: Scope, sink: Sink) -> None:
    """Pass: the contract's (first) `kernel` block into ``scope.kernel``."""
    d = scope.first(A.KernelDecl)
    if d is not None:
        scope.kernel = kernel(scope, sink, d)


def kernel(scope: Scope, sink: Sink, d: A.KernelDecl) -> ir.Kernel:
    """`kernel NAME { ... }`; a clause that fails is left out after its diagnostic."""
    views: list[ir.View] = []
    aligns: list[ir.Align] = []
    args: list[ir.KernelArg] = []
    activation: ir.Expr | None = None
    seen_views: dict[tuple[str, str], Span] = {}
    arg_names: dict[str, Span] = {}
    for cl in d.clauses:
        match cl:
            case A.ViewClause():
                view = _view(scope, sink, cl, seen_views)
                if view is not None:
                    views.append(view)
            case A.AlignClause():
                cond = expr(scope, sink, cl.cond, Where(axes=True))
                if cond is not None and expect(sink, cond, ir.BOOL):
                    aligns.append(ir.Align(cond, cl.message, cl.span))
            case A.ActivationClause():
                if activation is not None:
                    sink.error("LC206", cl.span, "the kernel has more than one `activation` clause")
                    continue
                activation = activation_expr(scope, sink, cl.value, cl.span)
            case A.ArgClause():
                arg = _arg(scope, sink, cl, arg_names)
                if arg is not None:
                    args.append(arg)
            case _:
                assert_never(cl)
    return ir.Kernel(d.name, tuple(views), tuple(aligns), activation, tuple(args), d.span)


def _view(scope: Scope, sink: Sink, cl: A.ViewClause, seen_views: dict[tuple[str, str], Span]) -> ir.View | None:
    """`view T.a halves(gate | up)`: a weight's axis, viewed once, read as it is segmented."""
    axis = axis_ref(scope, sink, cl.tensor, cl.axis, cl.span)
    if axis is None:
        return None
    key = (cl.tensor, cl.axis)
    owner = scope.tensors.get(cl.tensor)
    if owner is not None and owner.kind != "weight":
        sink.error("LC405", cl.span, f"`{cl.tensor}` is a {owner.kind} of {owner.projection}: the kernel reads "
                   f"it with its weight's view; declare the view on the `weight {owner.projection}` tensor")
        return None
    if key in seen_views:
        sink.error("LC202", cl.span, f"`{cl.tensor}.{cl.axis}` already has a view",
                   related=(Related(seen_views[key], "first view here"),))
        return None
    seen_views[key] = cl.span
    if cl.view is not ViewWord.LINEAR and axis.segments != 2:
        sink.error("LC405", cl.span, f"`{cl.view}` view on `{cl.tensor}.{cl.axis}`, which is not "
                   "segmented into gate and up")
        return None
    if cl.roles and sorted(cl.roles) != ["gate", "up"]:
        sink.error("LC403", cl.span, f"the kernel's view roles must be `gate` and `up`, found "
                   f"{' | '.join(cl.roles)}")
        return None
    if cl.view is ViewWord.LINEAR and axis.segments == 2:
        sink.error("LC405", cl.span, f"`{cl.tensor}.{cl.axis}` is segmented; the kernel must read it "
                   "as `halves` or `interleave`")
        return None
    return ir.View(cl.tensor, cl.axis, cl.view, cl.roles, cl.span)


def _arg(scope: Scope, sink: Sink, cl: A.ArgClause, arg_names: dict[str, Span]) -> ir.KernelArg | None:
    """`arg NAME = VALUE trims T.a, ... by COUNT`: an int argument that trims padded axes."""
    if cl.name in arg_names or not check_name(sink, cl.name, cl.span):
        if cl.name in arg_names:
            sink.error("LC202", cl.span, f"kernel argument `{cl.name}` is defined twice",
                       related=(Related(arg_names[cl.name], "first defined here"),))
        return None
    arg_names[cl.name] = cl.span
    value = expr(scope, sink, cl.value)
    if value is None or not expect(sink, value, ir.INT):
        return None
    trims: list[tuple[str, str]] = []
    for ref in cl.trims:
        axis = axis_ref(scope, sink, ref.tensor, ref.axis, ref.span)
        if axis is None:
            continue
        if not axis.is_padded:
            sink.error("LC504", ref.span, f"`{ref.tensor}.{ref.axis}` is never padded, so the kernel "
                       "cannot trim it")
            continue
        trims.append((ref.tensor, ref.axis))
    count = expr(scope, sink, cl.trim_count, Where(self_arg=(cl.name, value)))
    if count is None or not expect(sink, count, ir.INT) or len(trims) != len(cl.trims):
        return None
    return ir.KernelArg(cl.name, value, tuple(trims), count, cl.span)


def activation_expr(scope: Scope, sink: Sink, node: A.Expr, span: Span) -> ir.Expr | None:
    """An activation: a known activation name, or an enum of them (LC503)."""
    if isinstance(node, A.Name) and node.name not in scope.members and node.name not in scope.params \
            and node.name not in scope.lets and node.name not in scope.poisoned:
        if node.name in ACTIVATIONS:
            return ir.Const(node.name, ir.EnumT("activation", (node.name,)), span)
        sink.error("LC503", node.span, f"unknown activation `{node.name}`; known: "
                   + ", ".join(sorted(ACTIVATIONS)), help=suggest(node.name, list(ACTIVATIONS)))
        return None
    value = expr(scope, sink, node)
    if value is None:
        return None
    if not isinstance(value.type, ir.EnumT):
        sink.error("LC503", span, "the kernel's activation must be an activation name or an enum "
                   "parameter of activations")
        return None
    unknown = [m for m in value.type.members if m not in ACTIVATIONS]
    if unknown:
        sink.error("LC503", span, f"unknown activation {', '.join(unknown)}; known: "
                   + ", ".join(sorted(ACTIVATIONS)), help=suggest(unknown[0], list(ACTIVATIONS)))
        return None
    return value
