"""Rewrite tests/cases/unsound/*.expected from the current verifier output.

Run `python tests/regen_unsound_corpus.py`, then read the diff: every change to a
pinned counterexample must be explained in the commit message.
"""

from __future__ import annotations

import json
from pathlib import Path

from layoutc.check import load
from layoutc.verify import verify

CORPUS = Path(__file__).resolve().parent / "cases" / "unsound"


def first_counterexample(path: Path) -> dict[str, object]:
    contract, diags, _ = load(str(path))
    assert contract is not None, diags
    for verdict in verify(contract):
        if verdict.status == "counterexample" and verdict.property != "admission":
            assert verdict.counterexample is not None
            return {"property": verdict.property, "config": verdict.counterexample.config,
                    "message": verdict.counterexample.message}
    return {"property": None}


def main() -> None:
    for path in sorted(CORPUS.glob("*.moe")):
        expected = first_counterexample(path)
        path.with_suffix(".expected").write_text(json.dumps(expected, indent=2) + "\n")
        print(f"{path.name}: {expected['property']}")


if __name__ == "__main__":
    main()
