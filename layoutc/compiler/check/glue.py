"""The `glue` passes: the glue's op slots and arguments against its kind's declared interface,
and the activation it passes against the kernel's."""

from __future__ import annotations

import re
from dataclasses import dataclass

from layoutc.compiler import glues, ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.exprs import expr
from layoutc.compiler.check.kernel import activation_expr
from layoutc.compiler.check.names import suggest
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.diagnostics import Related, Span

OP_TARGET = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class GlueSpec:
    """The op slots and argument roles of one glue kind (from its declared interface)."""

    ops: tuple[str, ...]
    args: tuple[str, ...]
    summary: str


def _glue_kinds() -> dict[str, GlueSpec]:
    return {kind: GlueSpec(tuple(slot for slot, _ in g.interface.ops), g.interface.args, g.interface.summary)
            for kind, g in glues.registry().items()}


GLUE_KINDS: dict[str, GlueSpec] = _glue_kinds()


def check_glue(scope: Scope, sink: Sink) -> None:
    """Pass: the contract's (first) `glue` block into ``scope.glue``."""
    d = scope.first(A.GlueDecl)
    if d is not None:
        scope.glue = glue(scope, sink, d)


def glue(scope: Scope, sink: Sink, d: A.GlueDecl) -> ir.Glue | None:
    """`glue KIND { package ...; op SLOT = "ns::name"; arg ROLE = EXPR }`: a known kind (LC501)
    with one package and every op slot and argument of its interface, each once (LC502)."""
    spec = GLUE_KINDS.get(d.kind)
    if spec is None:
        sink.error("LC501", d.span, f"unknown glue kind `{d.kind}`",
                   help=suggest(d.kind, list(GLUE_KINDS)) or f"known: {', '.join(sorted(GLUE_KINDS))}")
        return None
    ok = True
    if len(d.package) != 1:
        sink.error("LC502", d.span, f"glue `{d.kind}` needs exactly one `package` clause")
        ok = False
    ops, ops_ok = _ops(sink, d, spec)
    args, args_ok = _args(scope, sink, d, spec)
    if not (ok and ops_ok and args_ok):
        return None
    return ir.Glue(d.kind, d.package[0][0], tuple(sorted(ops.items())),
                   tuple(sorted(args.items())), d.span)


def _ops(sink: Sink, d: A.GlueDecl, spec: GlueSpec) -> tuple[dict[str, str], bool]:
    ok = True
    ops: dict[str, str] = {}
    given: dict[str, Span] = {}
    for name, target, span in d.ops:
        if name in given:
            sink.error("LC502", span, f"op `{name}` is given twice", related=(Related(given[name], "first given here"),))
            ok = False
            continue
        given[name] = span
        if name not in spec.ops:
            sink.error("LC502", span, f"glue `{d.kind}` has no op slot `{name}`; slots: {', '.join(spec.ops)}",
                       help=suggest(name, list(spec.ops)))
            ok = False
            continue
        if not OP_TARGET.fullmatch(target):
            sink.error("LC502", span, f"op `{target[:80]}` must look like `namespace::name`")
            ok = False
            continue
        ops[name] = target
    for name in spec.ops:
        if name not in given:
            sink.error("LC502", d.span, f"glue `{d.kind}` needs `op {name} = \"namespace::name\"`")
            ok = False
    return ops, ok


def _args(scope: Scope, sink: Sink, d: A.GlueDecl, spec: GlueSpec) -> tuple[dict[str, ir.Expr], bool]:
    ok = True
    args: dict[str, ir.Expr] = {}
    given: dict[str, Span] = {}
    for name, value, span in d.args:
        if name in given:
            sink.error("LC502", span, f"argument `{name}` is given twice",
                       related=(Related(given[name], "first given here"),))
            ok = False
            continue
        given[name] = span
        if name not in spec.args:
            sink.error("LC502", span, f"glue `{d.kind}` has no argument `{name}`; arguments: "
                       f"{', '.join(spec.args) or 'none'}", help=suggest(name, list(spec.args)))
            ok = False
            continue
        defined = isinstance(value, A.Name) and (value.name in scope.params or value.name in scope.lets
                                                 or value.name in scope.members or value.name in scope.poisoned)
        bare = name == "activation" and isinstance(value, A.Name) and not defined
        e = activation_expr(scope, sink, value, span) if bare else expr(scope, sink, value)
        if e is None:
            ok = False
            continue
        args[name] = e
    for name in spec.args:
        if name not in given:
            sink.error("LC502", d.span, f"glue `{d.kind}` needs `arg {name} = ...`")
            ok = False
    return args, ok


def glue_matches_kernel(scope: Scope, sink: Sink) -> None:
    """Pass: the activation the glue passes to the kernel is the one the contract verified (LC502)."""
    glue, kernel = scope.glue, scope.kernel
    if glue is None or kernel is None:
        return
    for name, value in glue.args:
        if name != "activation":
            continue
        if kernel.activation is None or ir.shape(value) != ir.shape(kernel.activation):
            sink.error("LC502", glue.span, "the glue's `arg activation` must be exactly the kernel's `activation` "
                       "clause: the verifier proves the layout for the kernel's activation only",
                       related=(Related(kernel.span, "the kernel block"),))
