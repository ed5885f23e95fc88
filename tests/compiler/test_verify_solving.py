"""The verifier's solving machinery (`Run.solve`) answers like a fresh solver on the bare query.

`solve` first asks a shared incremental solver that already holds the domain, the
requires (and, around the obligations, the admits). That is sound only for queries
that entail what it holds; these tests check the shape test that decides it, that a
query which does not entail it is answered on its own, and that the shared solver's
answers agree with a fresh solver's on real obligations.
"""

from __future__ import annotations

import z3

from layoutc.compiler.cases import layout_cases
from layoutc.compiler.source import load
from layoutc.compiler.verify.held import shape_entails
from layoutc.compiler.verify.properties import (
    alignment,
    coverage,
    groups,
    inertness,
    kernel_arguments,
    placement,
    roundtrip,
)
from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Options
from tests.conftest import ROOT


def _run(path: str) -> Run:
    contract, diags, _ = load(str(ROOT / path))
    assert contract is not None, diags
    return Run(layout_cases(contract)[0].contract, Options(budget_s=600))


def _fresh(formula: z3.BoolRef, run: Run) -> z3.CheckSatResult:
    """A solver of its own on the bare formula with the definitions of its quotient and
    remainder variables (`Encoder.aux`; nothing held, no history)."""
    solver = z3.SimpleSolver(ctx=formula.ctx)
    solver.set("arith.solver", 2)
    solver.set("timeout", 20_000)
    solver.add(formula, *run.enc.aux)
    return solver.check()


def test_shape_entailment_is_conjuncts_and_common_conjuncts_of_disjuncts() -> None:
    ctx = z3.Context()
    a, b, x, y = (z3.Bool(n, ctx) for n in "abxy")
    targets = {a.get_id(): frozenset((a.get_id(),)), b.get_id(): frozenset((b.get_id(),))}
    entails = lambda f: shape_entails(f, targets)  # noqa: E731
    assert entails(z3.And(a, x)) == {a.get_id()}
    assert entails(z3.And(z3.And(x, a), z3.And(b, y))) == {a.get_id(), b.get_id()}
    assert entails(z3.Or(z3.And(a, x), z3.And(y, a, b))) == {a.get_id()}
    assert entails(z3.Or(z3.And(a, x), y)) == frozenset()  # y alone does not entail a
    assert entails(z3.Not(z3.And(a, b))) == frozenset()
    assert entails(z3.Implies(a, b)) == frozenset()


def test_a_query_without_the_requires_is_not_asked_of_the_shared_solver() -> None:
    """base and not(require) is satisfiable (tp_size need not divide intermediate_size in
    the bare domain); a solver holding the require would call it unsat."""
    run = _run("tests/cases/warnings/implied_gate.moe")
    assert run.requires
    query = z3.And(run.base, z3.Not(run.requires[0]))
    assert run._shared_core(query) == ("unknown", None)  # refused, not answered (first query of the run)
    assert run.solve(run.admitted)[0] == "sat"
    assert run._shared_core(query) == ("unknown", None)  # and later on
    status, model = run.solve(query)
    assert status == "sat" and model is not None
    assert z3.is_true(model.eval(query, model_completion=True))


def test_held_terms_need_the_outermost_terms_only() -> None:
    run = _run("contracts/vllm_cpu_grouped_gemm.moe")
    goal = z3.And(run.admitted, z3.Int("x", run.ctx) > 0)
    with run.holding(run.admitted):
        frame_held = run._held
        assert frame_held.entailed_by(goal)  # admitted implies the base and the requires held below it
        assert not frame_held.entailed_by(z3.And(run.base, *run.requires))  # but not the admits
    assert run._held.entailed_by(z3.And(run.base, *run.requires))


def test_the_shared_solver_agrees_with_a_fresh_solver_on_real_obligations() -> None:
    """Every obligation of two shipped contracts and of an unsound one: the same status
    from `solve` (the shared solver, holding the domain, requires and admits) as from a
    solver of its own on the goal alone; a sat model satisfies the goal."""
    for path in ("contracts/marlin_moe_awq.moe", "contracts/vllm_cpu_grouped_gemm.moe",
                 "tests/cases/unsound/group_straddle.moe"):
        run = _run(path)
        with run.holding(run.admitted):
            obligations = [ob for prop in (alignment, placement, roundtrip, groups, kernel_arguments, coverage,
                                           inertness) for ob in prop.obligations(run)]
            assert obligations
            for ob in obligations:
                status, model = run.solve(ob.goal)
                assert status in ("sat", "unsat"), (path, ob.name, status)
                assert status == str(_fresh(ob.goal, run)), (path, ob.name)
                if status == "sat":
                    assert z3.is_true(model.eval(ob.goal, model_completion=True)), (path, ob.name)
                    assert z3.is_true(run.enc.evaluate(model, ob.goal)), (path, ob.name)
