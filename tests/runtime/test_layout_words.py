"""The layout words are spelled in one place (issue 21): algebra.py defines them, the grammar
reads them, and every other module names them through `algebra.Word` / `algebra.ViewWord`,
so no consumer can interpret a word its own way or default an unknown one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layoutc.runtime import algebra

ROOT = Path(__file__).resolve().parents[2] / "layoutc"
WORD_LITERAL = re.compile(r"\"(halves|concat|interleave)\"|'(halves|concat|interleave)'")
#: The modules that may spell a layout word as a string literal: the algebra, the vocabulary
#: and the grammar (its keywords).
ALLOWED = {"runtime/algebra.py", "runtime/vocab.py", "compiler/grammar.lark"}


def _sources() -> list[Path]:
    return [p for p in ROOT.rglob("*") if p.is_file() and "__pycache__" not in p.parts
            and p.suffix in (".py", ".j2", ".lark", ".toml", ".json")]


def test_layout_words_are_spelled_in_at_most_three_modules() -> None:
    spelled = {p.relative_to(ROOT).as_posix() for p in _sources()
               if WORD_LITERAL.search(p.read_text(encoding="utf-8"))}
    assert "runtime/algebra.py" in spelled  # the pattern finds the definitions themselves
    assert spelled <= ALLOWED and len(spelled) <= 3, sorted(spelled - ALLOWED)


def test_an_unknown_word_is_an_error_in_the_runtime_and_the_algebra() -> None:
    from layoutc.runtime import layout
    from layoutc.runtime.errors import LayoutContractError

    with pytest.raises(LayoutContractError, match="unknown layout word 'pairs'"):
        layout.Axis("n", "pairs", 2, 4, 4, False)
    with pytest.raises(algebra.UnknownLayout):
        algebra.Word.parse("pairs")
    assert layout.Axis("n", "interleave", 2, 4, 6, False).word is algebra.Word.INTERLEAVE


def test_a_two_segment_view_gives_the_callers_ids_for_its_segments() -> None:
    """The verifier reads with role ids (gate 0, up 1, or up | gate): the same select as 0 / 1."""
    for view in (algebra.ViewWord.HALVES, algebra.ViewWord.INTERLEAVE):
        for j in range(8):
            segment, entry = algebra.read(view, j, 8, algebra.INTS)
            assert algebra.read(view, j, 8, algebra.INTS, (7, 9)) == ((7, 9)[segment], entry)
