"""The `kernel-arguments` property: pad counts passed to the kernel describe padding that really exists.

Each kernel argument that trims axes (`trims`) tells the kernel to skip at most the
axis's pad, never a live position, and never a negative count (docs/verification.md,
kernel arguments).
"""

from __future__ import annotations

from collections.abc import Mapping

import z3  # type: ignore[import-untyped]

from layoutc.compiler.verify.obligations import Obligation, decide
from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Verdict


def obligations(run: Run) -> list[Obligation]:
    """Per trimmed axis of each kernel argument: the count lies in [0, padded - logical]."""
    kernel = run.contract.kernel
    if kernel is None:
        return []
    obs: list[Obligation] = []
    for arg in kernel.args:
        value = run.enc.expr(arg.value)
        count = run.enc.expr(arg.trim_count)
        for tname, aname in arg.trims:
            logical, padded, _ = run.sizes[(tname, aname)]
            pad = padded - logical

            def explain(model, arg=arg, tname=tname, aname=aname, logical=logical, padded=padded,
                        value=value, count=count):  # type: ignore[no-untyped-def]
                lv, pv, cv = run.val(model, logical), run.val(model, padded), run.val(model, count)
                told = run.val(model, value)
                segment = "each segment" if run.contract.tensor(tname).axis(aname).segments > 1 else "the axis"
                if cv > pv - lv:
                    return (f"padded {pv}, pad {pv - lv} per segment; kernel told {arg.name}={told}, so it skips "
                            f"the last {cv} positions of {segment} of {tname}.{aname}: positions "
                            f"{max(0, pv - cv)}..{lv - 1} are live and dropped", f"{tname}.{aname}")
                return f"kernel told {arg.name}={told}: a negative trim of {cv}", f"{tname}.{aname}"
            wrong = z3.Or(count > pad, count < 0)
            obs.append(Obligation(f"{arg.name} on {tname}.{aname}", arg.span,
                                  z3.And(run.admitted, wrong), explain, tname))
    return obs


def check(run: Run, earlier: Mapping[str, Verdict]) -> Verdict:
    """The `kernel-arguments` verdict: every obligation of :func:`obligations` proved, or why not."""
    return decide(run, "kernel-arguments", obligations(run), run.contract.span)
