"""Rewrite tests/cases/unsound/*.expected from the current verifier output.

Run `python tests/support/regen_unsound_corpus.py`, then read the diff: every change to a
pinned counterexample (its property or its rule) must be explained in the commit message.
"""

from __future__ import annotations

import json
from pathlib import Path

from layoutc.compiler.source import load
from layoutc.compiler.verify.prove import verify

CORPUS = Path(__file__).resolve().parents[1] / "cases" / "unsound"


def first_counterexample(path: Path) -> dict[str, object]:
    """The first counterexample's property and rule (the obligation that broke).

    The configuration and the message are not pinned: shrinking may find another
    smallest configuration, and messages get reworded (issue 12, item 7).
    """
    cex = first_counterexample_verdict(path)
    if cex is None:
        return {"property": None}
    verdict, _ = cex
    assert verdict.counterexample is not None
    return {"property": verdict.property, "rule": verdict.counterexample.rule}


def first_counterexample_verdict(path: Path):  # type: ignore[no-untyped-def]
    """(verdict, contract) of the first non-admission counterexample, or None."""
    contract, diags, _ = load(str(path))
    assert contract is not None, diags
    for verdict in verify(contract):
        if verdict.status == "counterexample" and verdict.property != "admission":
            assert verdict.counterexample is not None
            return verdict, contract
    return None


def main() -> None:
    for path in sorted(CORPUS.glob("*.moe")):
        expected = first_counterexample(path)
        path.with_suffix(".expected").write_text(json.dumps(expected, indent=2) + "\n")
        print(f"{path.name}: {expected['property']} / {expected.get('rule')}")


if __name__ == "__main__":
    main()
