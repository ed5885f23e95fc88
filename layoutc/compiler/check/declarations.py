"""The declarations pass and the checks on what a contract must declare.

Declarations are checked in one walk, in source order: a name is visible from its
declaration on (a `let` that reads a later `param` is an error), and diagnostics come
out in the order of the text. Each kind has its handler; the once-per-contract kinds
share one table (`ONCE`), so "more than one `X` declaration" (LC206) is said one way.
"""

from __future__ import annotations

from typing import assert_never

from layoutc.compiler import syntax as A
from layoutc.compiler.check.names import check_name
from layoutc.compiler.check.params import declare_let, declare_param, declare_rule
from layoutc.compiler.check.scope import OnceDecl, Scope, Sink
from layoutc.compiler.check.tensors import declare_tensor
from layoutc.compiler.diagnostics import Related

# The declarations a contract states at most once, with the keyword that names them in LC206.
ONCE: dict[type[OnceDecl], str] = {
    A.ContractDecl: "contract",
    A.PolicyDecl: "policy",
    A.ShardDecl: "shard",
    A.EpDecl: "experts ... over",
    A.KernelDecl: "kernel",
    A.GlueDecl: "glue",
}


def declarations(scope: Scope, sink: Sink) -> None:
    """Pass: every declaration of the module, in source order, into the scope."""
    for d in scope.module.decls:
        match d:
            case A.ContractDecl() | A.PolicyDecl() | A.ShardDecl() | A.EpDecl() | A.KernelDecl() | A.GlueDecl():
                declare_once(scope, sink, d)
            case A.SourceDecl():
                scope.sources.append(d.text)
            case A.ModelsDecl() | A.RouteDecl():
                pass  # check/models.py, check/routes.py: once every parameter and the glue are declared
            case A.ParamDecl():
                declare_param(scope, sink, d)
            case A.LetDecl():
                declare_let(scope, sink, d)
            case A.RuleDecl():
                declare_rule(scope, sink, d)
            case A.TensorDecl():
                declare_tensor(scope, sink, d)
            case _:
                assert_never(d)


def declare_once(scope: Scope, sink: Sink, d: OnceDecl) -> None:
    """Keep the first declaration of a once-per-contract kind; each later one is LC206,
    pointing back at the first. The kernel, glue and shard blocks are checked by their
    own passes, once the tensors are known."""
    kind = type(d)
    first = scope.declared.get(kind)
    if first is not None:
        sink.error("LC206", d.span, f"more than one `{ONCE[kind]}` declaration",
                   related=(Related(first.span, "first declared here"),))
        return
    scope.declared[kind] = d
    match d:
        case A.ContractDecl():
            check_name(sink, d.name, d.span)
        case A.PolicyDecl():
            if d.fallback is not None:
                check_name(sink, d.fallback, d.span)
        case A.ShardDecl() | A.EpDecl() | A.KernelDecl() | A.GlueDecl():
            pass
        case _:
            assert_never(d)


def required(scope: Scope, sink: Sink) -> None:
    """Pass: a contract names itself (LC205) and the kernel file or PR it follows (LC209)."""
    if scope.first(A.ContractDecl) is None:
        sink.error("LC205", scope.top, "missing `contract NAME` declaration")
    if not scope.sources:
        sink.error("LC209", scope.anchor,
                   "missing `source \"...\"`: every contract names the kernel file or PR it follows")


def default_policy(scope: Scope, sink: Sink) -> None:
    """Pass: a contract without `policy` gets `policy error`, with a warning (LC210)."""
    contract = scope.first(A.ContractDecl)
    if scope.first(A.PolicyDecl) is None and contract is not None:
        sink.warning("LC210", contract.span, "no `policy` declared; using `policy error`")
