"""The verifier: proves pad-soundness of a checked contract with z3 (docs/verification.md).

driver.py is the entry (`layoutc verify`, `layoutc compile`): it reads each file once,
looks up the verdict cache (cache.py, a generic store; entries.py keys and encodes what
it holds), proves what is missing (prove.py, which runs the properties of registry.py,
one module each under properties/, on a run.py `Run`: the encoding of smt.py and the
solvers) and hands the results to report.py, which renders them. verdicts.py holds the
types every stage shares.
"""
