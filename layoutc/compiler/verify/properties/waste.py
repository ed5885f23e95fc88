"""The `waste` property (informational): the worst-case pad fraction over the domain."""

from __future__ import annotations

import time
from collections.abc import Mapping

import z3  # type: ignore[import-untyped]

from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Counterexample, Verdict


def check(run: Run, earlier: Mapping[str, Verdict]) -> Verdict:
    """The worst-case pad fraction of w13's intermediate dim, a lower bound with its witness
    (status `info`; `earlier` is not read)."""
    start = time.perf_counter()
    q0 = run.queries
    w13 = run.contract.weight("w13")
    logical, padded, _ = run.sizes[(w13.name, "n")]
    lo, hi, best, gave_up = 0, 100, None, None
    # The first query (is there padding at all?) is decided in full; the bisection above it
    # uses the quick whole-domain attempt only: a witness raises the bound to its own
    # fraction, an unknown lowers the search like an unsat but is reported. The result is
    # always a lower bound with its witness. After each new witness, one probe just above
    # it first (is it the worst case?): the witness is often already the maximum, and one
    # refutation there settles what bisection would take several (harder) ones for.
    probe = False
    with run.holding(run.admitted, padded > 0):
        while lo < hi:
            mid = 1 if best is None else lo + 1 if probe else (lo + hi + 1) // 2
            probing, probe = probe, False
            status, model = run.solve(z3.And(run.admitted, padded > 0, (padded - logical) * 100 >= mid * padded),
                                      quick_only=best is not None)
            if status == "sat":
                assert model is not None
                pv, lv = run.val(model, padded), run.val(model, logical)
                lo, best = max(mid, (pv - lv) * 100 // pv), model  # the witness may beat mid by far
                probe = not probing
            elif status == "unsat":
                hi = mid - 1
            else:
                gave_up = status
                if best is None:
                    break
                if not probing:  # an unknown probe only hands over to the bisection
                    hi = mid - 1
    tail = _short_rank_note(run)
    seconds = time.perf_counter() - start
    if best is None:
        detail = f"not determined: the solver gave up ({gave_up})" if gave_up else \
            "no padding anywhere in the domain" if not tail else "no pad past any rank's logical size"
        return Verdict("waste", "info", detail + tail, seconds, run.queries - q0, run.contract.span)
    config, derived = run.concrete(best)
    lv, pv = run.val(best, logical), run.val(best, padded)
    where = ", ".join(f"{k}={v}" for k, v in config.items())
    unsettled = " (higher fractions not settled by the quick solver)" if gave_up else ""
    return Verdict("waste", "info", f"worst-case pad fraction >= {lo}% of the intermediate dim "
                   f"({lv} -> {pv}) at {where}{unsettled}{tail}", seconds, run.queries - q0, run.contract.span,
                   Counterexample(config, derived, "worst case", "w13.n"))


def _short_rank_note(run: Run) -> str:
    """For a block shard: whether some admitted configuration leaves ranks empty (all fill),
    with one such configuration (the pad fraction above counts one rank's pad only)."""
    shard = run.contract.block_shard
    if shard is None:
        return ""
    logical, _, _ = run.sizes[(run.contract.weight("w13").name, "n")]
    tp, full = run.enc.vars[shard.count], run.enc.expr(shard.full)
    status, model = run.solve(z3.And(run.admitted, (tp - 1) * logical >= full, logical > 0), quick_only=True)
    if status != "sat" or model is None:
        return "; block shard: no admitted configuration leaves a rank empty" if status == "unsat" else ""
    tv, lv, fv = run.val(model, tp), run.val(model, logical), run.val(model, full)
    config, _ = run.concrete(model)
    where = ", ".join(f"{k}={v}" for k, v in config.items())
    empty = tv - -(-fv // lv)
    return (f"; block shard: ranks can be empty, holding only fill ({empty} of {tv} ranks at {where}, "
            f"{lv} rows each)")
