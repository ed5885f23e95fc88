"""Obligations and how a property's obligations become its verdict.

An :class:`Obligation` is one rule of a property as a refutation query: its goal is
satisfiable iff the rule is broken. :func:`decide` proves a property's obligations
(docs/verification.md), and a broken one becomes a :class:`Counterexample` with the
smallest configuration the solver finds (:func:`minimize`) and the tensor's picture.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3  # type: ignore[import-untyped]

from layoutc.compiler.diagnostics import Span
from layoutc.compiler.evaluate import EvalError
from layoutc.compiler.picture import tensor_picture
from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Counterexample, Verdict

MINIMIZE_QUERIES = 16

# explain(model) -> (message, where) or (message, where, kind): the kind names which way the
# rule broke, appended to the obligation's name in `Counterexample.rule`
Explain = Callable[[Any], tuple[str, ...]]


@dataclass
class Obligation:
    name: str
    span: Span
    goal: z3.BoolRef  # satisfiable iff the rule is broken
    explain: Explain
    tensor: str | None = None


def decide(run: Run, prop: str, obligations: list[Obligation], span: Span) -> Verdict:
    """The verdict of property `prop` from its obligations: proved when every goal is unsat
    (one query for all of them first), a counterexample at the first sat one, inconclusive
    where some are unknown and none is sat. `span`: where a proof points."""
    start = time.perf_counter()
    q0 = run.queries
    unknown: list[str] = []
    if len(obligations) > 1:
        # One query for the whole property first: unsat proves every obligation at once.
        status, _ = run.solve(z3.Or([ob.goal for ob in obligations]))
        if status == "unsat":
            return Verdict(prop, "proved", f"{len(obligations)} obligation(s) proved", time.perf_counter() - start,
                           run.queries - q0, span)
    for ob in obligations:
        status, model = run.solve(ob.goal)
        if status == "sat":
            assert model is not None
            cex = counterexample(run, ob, model)
            return Verdict(prop, "counterexample", f"{ob.name}: {cex.message}", time.perf_counter() - start,
                           run.queries - q0, ob.span, cex)
        if status != "unsat":
            unknown.append(f"{ob.name}: {status}")
    seconds = time.perf_counter() - start
    if unknown:
        return Verdict(prop, "inconclusive", "; ".join(unknown), seconds, run.queries - q0, span)
    detail = f"{len(obligations)} obligation(s) proved" if obligations else "nothing to prove"
    return Verdict(prop, "proved", detail, seconds, run.queries - q0, span)


def minimize(run: Run, goal: z3.BoolRef, model: z3.ModelRef) -> z3.ModelRef:
    """Shrink the range parameters' sum while the goal stays satisfiable, by bisection.

    The search region is [lo, ceiling): no model below lo (proved unsat), none tried at
    or above the best one. An `unknown` answer never ends the search: the other half is
    tried instead, and the region shrinks. At most MINIMIZE_QUERIES solver calls.
    """
    if not run.options.minimize:
        return model
    ranged = [p for p in run.contract.params if p.kind == "range"]
    if not ranged:
        return model
    total = z3.Sum([run.enc.vars[p.name] for p in ranged])
    lo = sum(p.low for p in ranged)
    ceiling = run.val(model, total)
    calls = 0
    while lo < ceiling and calls < MINIMIZE_QUERIES:
        mid = (lo + ceiling - 1) // 2
        calls += 1
        status, better = run.solve(goal, [total >= lo, total <= mid])
        if status == "unsat":
            lo = mid + 1
            continue
        if status != "sat":  # unknown below mid: try the upper half, then narrower windows below
            calls += 1
            status, better = run.solve(goal, [total > mid, total < ceiling])
            if status != "sat":
                ceiling = mid + 1 if mid + 1 < ceiling else ceiling - 1
                continue
        assert better is not None
        model = better
        ceiling = run.val(model, total)
    return model


def counterexample(run: Run, ob: Obligation, model: z3.ModelRef) -> Counterexample:
    """The counterexample of a broken obligation at the smallest configuration found."""
    model = minimize(run, ob.goal, model)
    config, derived = run.concrete(model)
    explained = ob.explain(model)
    message, where = explained[0], explained[1]
    rule = f"{ob.name}: {explained[2]}" if len(explained) > 2 else ob.name
    picture: list[str] = []
    if ob.tensor is not None:
        try:
            env = {**config, **derived}
            picture = tensor_picture(run.contract, run.contract.tensor(ob.tensor), env)
        except (EvalError, ZeroDivisionError, KeyError):
            picture = []
    return Counterexample(config, derived, message, where, tuple(picture), rule)
