"""The `vacuity` property: the contract admits at least one configuration.

It is decided first; where nothing is admitted (or the solver cannot tell), no other
property is asked: each gets the vacuity verdict's status (:func:`unreached`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace

from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Verdict

NOTHING_ADMITTED = "no configuration satisfies the domains, requires and admits together"


def check(run: Run, earlier: Mapping[str, Verdict]) -> Verdict:
    """Proved when some configuration satisfies the domains, requires and admits together;
    vacuous when none does; inconclusive when the solver cannot tell. One query counted.
    The admitted configuration found is the run's `witness`."""
    start = time.perf_counter()
    status, run.witness = run.solve(run.admitted)
    seconds = time.perf_counter() - start
    span = run.contract.span
    if status == "unsat":
        return Verdict("vacuity", "vacuous", NOTHING_ADMITTED, seconds, 1, span)
    if status != "sat":
        return Verdict("vacuity", "inconclusive", f"vacuity check: {status}", seconds, 1, span)
    return Verdict("vacuity", "proved", "at least one configuration is admitted", seconds, 1, span)


def unreached(vacuity: Verdict, prop: str) -> Verdict:
    """The verdict of property `prop`, not asked because vacuity was not proved: vacuous
    (no time, no query of its own) or inconclusive (the vacuity check's time and query)."""
    if vacuity.status == "vacuous":
        return replace(vacuity, property=prop, seconds=0.0, queries=0)
    return replace(vacuity, property=prop)
