"""The last passes: build the contract's IR, hold it to its glue's interface, and check that
its layout cases are enumerable."""

from __future__ import annotations

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.cases import TooManyCases, layout_cases
from layoutc.compiler.check.binding import check_binding
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.diagnostics import error


def build_contract(scope: Scope, sink: Sink) -> None:
    """Pass: ``scope.contract``, from a contract with a name and no error so far."""
    contract = scope.first(A.ContractDecl)
    if contract is None or sink.has_errors():
        return
    policy = scope.first(A.PolicyDecl)
    scope.contract = ir.Contract(
        name=contract.name, file=scope.module.file, source_text=scope.text, sources=tuple(scope.sources),
        policy=policy.kind if policy else "error", fallback=policy.fallback if policy else None,
        params=tuple(scope.params.values()), lets=tuple(scope.lets.values()), rules=tuple(scope.rules),
        tensors=tuple(scope.tensors.values()), kernel=scope.kernel, glue=scope.glue, span=contract.span,
        enum_members=dict(scope.members), shard=scope.shard, ep=scope.ep, models=tuple(scope.models),
        routes=tuple(scope.routes),
    )


def bind_glue(scope: Scope, sink: Sink) -> None:
    """Pass: every way the built contract disagrees with its glue's declared interface
    (``binding.py``, LC520-LC530)."""
    if scope.contract is not None:
        sink.extend(check_binding(scope.contract))


def enumerable_cases(scope: Scope, sink: Sink) -> None:
    """Pass: a bound contract's layout cases can be enumerated (LC413), so the generated
    module can be written out case by case."""
    if scope.contract is None or sink.has_errors():
        return
    try:
        layout_cases(scope.contract)
    except TooManyCases as exc:
        sink.extend([error("LC413", scope.contract.span, str(exc))])
