"""Semantic checks: resolve names, type expressions, validate tensors and kernel
clauses, and build the typed IR (``ir.py``).

``check(module, text)`` returns ``(contract | None, diagnostics)``; it never
raises on bad input. The checker is the passes of ``PASSES``, run in order over one
``Scope`` (what they share) and one ``Sink`` (the diagnostics they collect); each
pass is a function of its own module:

* ``declarations``: every declaration in source order: the once-per-contract table
  (contract, policy, shard, kernel, glue; LC206), sources, params, lets, rules, tensors;
* ``check_models``: the `models` lines, once every parameter is known;
* ``check_routes``: the `route` lines, once the glue is known;
* ``required``, ``fills``, ``structure``, ``kernel``, ``glue``, ``shard``: the checks
  that need every tensor; ``build``: the IR; ``unread``: every parameter is read by what
  the contract states (LC309); then its glue binding and its layout cases.

Reading a contract file is ``layoutc.compiler.source``'s job.
"""

from __future__ import annotations

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.build import bind_glue, build_contract, enumerable_cases
from layoutc.compiler.check.declarations import declarations, default_policy, required
from layoutc.compiler.check.ep import check_ep
from layoutc.compiler.check.fills import check_fill_ranges, check_tail_fills, resolve_fills
from layoutc.compiler.check.glue import check_glue, glue_matches_kernel
from layoutc.compiler.check.kernel import check_kernel
from layoutc.compiler.check.models import check_models
from layoutc.compiler.check.routes import check_routes
from layoutc.compiler.check.scope import Pass, Scope, Sink
from layoutc.compiler.check.shard import check_shard
from layoutc.compiler.check.structure import check_structure
from layoutc.compiler.check.unread import check_unread_params
from layoutc.compiler.diagnostics import Diagnostic

__all__ = ["PASSES", "Scope", "Sink", "check", "run_passes"]

# In order: a pass reads what the ones before it put into the scope.
PASSES: tuple[Pass, ...] = (
    declarations,         # source order: names, params, lets, rules, tensors; LC206 table
    required,             # LC205 contract name, LC209 source
    check_models,         # the `models` lines (LC230-LC235; a `when` reads any parameter)
    resolve_fills,        # `fill decoded V` -> a stored code
    check_fill_ranges,    # every pad code fits its storage
    check_structure,      # one w13 and one w2 weight (only on a contract with no error yet)
    check_kernel,         # the kernel block (needs the tensors)
    check_glue,           # the glue block
    glue_matches_kernel,  # the glue's activation is the kernel's
    check_routes,         # the `route` lines (LC236-LC240; `route run` needs the glue)
    default_policy,       # LC210: no policy means `policy error`
    check_shard,          # the shard (needs the tensors for LC414)
    check_tail_fills,     # a `tail fill` needs a block shard
    check_ep,             # the expert parallelism (`experts ... over`)
    build_contract,       # the IR, from a contract with no error
    check_unread_params,  # LC309: every parameter is read by a statement, or tied to one
    bind_glue,            # the IR against its glue's interface
    enumerable_cases,     # and its layout cases enumerable
)


def run_passes(module: A.Module, text: str, passes: tuple[Pass, ...] = PASSES) -> tuple[Scope, Sink]:
    """Run `passes` over a fresh scope of `module`; returns the scope and its diagnostics."""
    scope, sink = Scope(module, text), Sink()
    for run in passes:
        run(scope, sink)
    return scope, sink


def check(module: A.Module, text: str) -> tuple[ir.Contract | None, list[Diagnostic]]:
    """Check one parsed module and build its IR.

    Args:
        module: from ``parse.parse``.
        text: the source text it was parsed from (kept in the IR for the generated
            module's hash).

    Returns:
        (contract, diagnostics): the contract is None when any diagnostic is an error.
    """
    scope, sink = run_passes(module, text)
    return (None if sink.has_errors() else scope.contract), sink.diagnostics
