"""The pad-soundness properties, one module each (docs/verification.md).

Each module defines `check(run, earlier) -> Verdict`; the obligation properties also
`obligations(run) -> list[Obligation]`. Their order and their one-line docs are in
layoutc/compiler/verify/registry.py; layoutc/compiler/verify/prove.py runs them.
"""
