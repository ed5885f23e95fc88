"""Prove every property of a contract: the registry's properties, per layout case.

:func:`verify` is the verifier's entry (layoutc/compiler/verify/driver.py calls it, and
tests do); it knows nothing of files, caches or reports.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import replace

from layoutc.compiler import ir
from layoutc.compiler.evaluate import Value
from layoutc.compiler.verify.properties import vacuity
from layoutc.compiler.verify.registry import PROPERTIES, PROPERTY_IDS
from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Options, Verdict


def verify_case(contract: ir.Contract, options: Options | None = None,
                fixed: dict[str, Value] | None = None) -> list[Verdict]:
    """Check every property of one contract with a single layout. Returns one verdict per property id.

    Vacuity is decided first; the properties after it run in registry order, those that
    hold the admitted set inside one `Run.holding` scope. `fixed` pins parameters to
    values (the verdict then speaks of those configurations only); tests use it to
    compare the verifier with the generated code at run time.
    """
    run = Run(contract, options or Options(), dict(fixed or {}))
    first, *rest = PROPERTIES
    verdicts: dict[str, Verdict] = {first.id: first.check()(run, {})}
    if verdicts[first.id].status != "proved":
        return [vacuity.unreached(verdicts[first.id], p) for p in PROPERTY_IDS]
    for holds, group in itertools.groupby(rest, key=lambda p: p.holds_admitted):
        # every obligation's goal of a holding property is admitted and more
        with run.holding(run.admitted) if holds else contextlib.nullcontext():
            for prop in group:
                verdicts[prop.id] = prop.check()(run, verdicts)
    return [verdicts[p] for p in PROPERTY_IDS]


def verify(contract: ir.Contract, options: Options | None = None,
           fixed: dict[str, Value] | None = None) -> list[Verdict]:
    """Check every property of one contract. Returns one verdict per property id.

    A contract whose layout depends on finite parameters (`when` alternatives, or a
    glue whose kernel reads w13 differently per activation) is proved once per
    layout case (cases.layout_cases), each against the view its kernel reads; a
    property is proved only when it is proved in every case that admits a
    configuration. `fixed` pins parameters to values (tests compare the verifier
    with the generated code at run time). Raises only on a bug in layoutc (the driver
    turns that into a tool failure, LC900).
    """
    from layoutc.compiler.cases import layout_cases

    cases = layout_cases(contract)
    runs = [(case.label, verify_case(case.contract, options, fixed)) for case in cases]
    verdicts = runs[0][1] if len(runs) == 1 else combine(runs)
    if contract.glue is None and contract.kernel is not None and contract.kernel.views:
        verdicts = [replace(v, detail=v.detail + "; the kernel's view is the contract's own declaration "
                            "(no glue binds it): trusted, not checked against code")
                    if v.property == "placement" and v.status == "proved" else v for v in verdicts]
    return verdicts


_RANK = {"counterexample": 0, "inconclusive": 1, "proved": 2, "info": 2, "vacuous": 3}


def combine(runs: list[tuple[str, list[Verdict]]]) -> list[Verdict]:
    """One verdict per property over the layout cases: the worst status of the cases that admit
    something (vacuous cases admit nothing, so they prove nothing and refute nothing)."""
    out: list[Verdict] = []
    for index, prop in enumerate(PROPERTY_IDS):
        live = [(label, vs[index]) for label, vs in runs if vs[index].status != "vacuous"]
        seconds = sum(vs[index].seconds for _, vs in runs)
        queries = sum(vs[index].queries for _, vs in runs)
        if not live:
            out.append(replace(runs[0][1][index], seconds=seconds, queries=queries))
            continue
        label, worst = min(live, key=lambda lv: _RANK[lv[1].status])
        # a gate is redundant only if it is redundant in every case: each case's own
        # `require` (its layout-case restriction) can make a gate look implied there alone
        warnings = tuple(w for w in live[0][1].warnings if all(w in v.warnings for _, v in live[1:]))
        if worst.status in ("proved", "info") and prop != "waste":
            detail = f"{worst.detail} in each of {len(live)} layout cases"
        else:
            detail = f"[layout case {label}] {worst.detail}" if label else worst.detail
        out.append(replace(worst, detail=detail, seconds=seconds, queries=queries, warnings=warnings))
    return out
