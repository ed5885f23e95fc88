"""The projection structure pass: one w13 and one w2 weight with their axes, at most one bias
per projection, and scales and zero-points that decode their own code only."""

from __future__ import annotations

from layoutc.compiler import ir
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.diagnostics import Related

# projection -> (its intermediate axis, its hidden axis)
PROJECTIONS = (("w13", "n", "k"), ("w2", "k", "n"))


def check_structure(scope: Scope, sink: Sink) -> None:
    """Pass: the w13/w2 structure (LC409, LC410, LC412, LC408). Runs only on a contract with
    no error so far: with a tensor missing, every finding here would repeat that error."""
    if sink.has_errors():
        return
    _weights(scope, sink)
    seen_bias: dict[str, ir.Tensor] = {}
    for t in scope.tensors.values():
        if t.kind == "bias":
            if t.projection in seen_bias:
                sink.error("LC412", t.span, f"`{t.name}` is a second bias of {t.projection}; a projection has at most "
                           "one bias", related=(Related(seen_bias[t.projection].span, "first bias here"),))
            seen_bias[t.projection] = t
    for t in scope.tensors.values():
        if t.kind == "bias" and {a.name for a in t.axes} - {"experts", "n"}:
            sink.error("LC410", t.span, f"bias `{t.name}` has only `experts` and `n` axes")
        if t.kind in ("scale", "zero") and t.decode is not None:
            for node in ir.walk(t.decode):
                if isinstance(node, ir.TensorValue):
                    sink.error("LC408", node.span, f"the decode of {t.kind} `{t.name}` reads only its own `code` "
                               f"(a format such as `e8m0(code)`), not `{node.tensor}`")
                    break


def _weights(scope: Scope, sink: Sink) -> None:
    """Exactly one weight per projection (LC409) with its intermediate and hidden axes (LC410)."""
    for proj, inter, hidden in PROJECTIONS:
        weights = [t for t in scope.tensors.values() if t.kind == "weight" and t.projection == proj]
        if len(weights) != 1:
            sink.error("LC409", scope.anchor if not weights else weights[1].span,
                       f"the contract needs exactly one `weight {proj}` tensor, found {len(weights)}")
            continue
        w = weights[0]
        names = {a.name for a in w.axes}
        if not {inter, hidden} <= names:
            sink.error("LC410", w.span, f"weight `{w.name}` needs axes `{inter}` and `{hidden}`")
            continue
        iax = w.axis(inter)
        if proj == "w2" and iax.segments != 1:
            sink.error("LC410", iax.span, "w2's k axis holds one segment; use `pad(L -> P)` or a plain size")
        if iax.kind == "groups" or w.axis(hidden).kind == "groups":
            sink.error("LC410", w.span, f"weight `{w.name}` cannot have a groups axis")
