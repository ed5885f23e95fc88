"""The layout algebra (layoutc/runtime/algebra.py): its laws, on ints, torch tensors and z3 terms.

Each word's `position` must be injective into [0, segments * padded), `runs` must write every
position exactly once (copies, pads and tails), `locate` must invert `position`, and every
word must be placed right under its own view. The same `position` and `read` formulas,
evaluated on torch index tensors and on z3 terms, must give the ints' answers.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutc.runtime import algebra as L

WORDS = list(L.Word)


def _segments(word: L.Word) -> list[int]:
    return [2] if word.segmented else [1]


sizes = st.tuples(st.integers(0, 40), st.integers(0, 24)).map(lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=300, deadline=None)
@given(word=st.sampled_from(WORDS), size=sizes)
def test_position_is_injective_and_located(word: L.Word, size: tuple[int, int]) -> None:
    logical, padded = size
    if word is L.Word.NONE:
        padded = logical
    for segments in _segments(word):
        seen: dict[int, tuple[int, int]] = {}
        for k in range(segments):
            for i in range(logical):
                j = L.position(word, segments, k, i, logical, padded)
                assert 0 <= j < segments * padded
                assert j not in seen, (word, k, i, seen[j])
                seen[j] = (k, i)
                assert L.locate(word, segments, logical, padded, j) == L.Located("entry", k, i)
        for j in range(segments * padded):
            if j not in seen:
                located = L.locate(word, segments, logical, padded, j)
                assert located is not None and located.kind == "pad"
        assert L.locate(word, segments, logical, padded, segments * padded) is None


@settings(max_examples=300, deadline=None)
@given(word=st.sampled_from(WORDS), size=sizes, data=st.data())
def test_runs_write_every_position_once(word: L.Word, size: tuple[int, int], data: st.DataObject) -> None:
    logical, padded = size
    if word is L.Word.NONE:
        padded = logical
    segments = _segments(word)[0]
    start = data.draw(st.integers(0, 8))
    live = data.draw(st.integers(0, logical))
    stride = start + logical + data.draw(st.integers(0, 5))
    copies, pads, tails = L.runs(word, segments, logical, padded, start, live, stride)
    written = [0] * (segments * padded)
    for src, dst, n in copies:
        for t in range(n):
            written[dst + t] += 1
            # the copied entry is the one `position` puts there
            k, i = ((src + t) // stride, (src + t) % stride - start) if word is not L.Word.INTERLEAVE \
                else ((t % segments), (src + t) // segments - start)
            assert L.position(word, segments, k, i, logical, padded) == dst + t
    for lo, hi in pads + tails:
        for j in range(lo, hi):
            written[j] += 1
    assert written == [1] * (segments * padded)


@pytest.mark.parametrize("word", [L.Word.PAD, L.Word.HALVES, L.Word.INTERLEAVE, L.Word.NONE])
def test_each_word_is_placed_right_under_its_own_view(word: L.Word) -> None:
    view = L.view_of(word)
    for logical in range(0, 9):
        for padded in range(logical, logical + 5) if word is not L.Word.NONE else [logical]:
            segments = _segments(word)[0]
            for k in range(segments):
                for i in range(logical):
                    j = L.position(word, segments, k, i, logical, padded)
                    assert L.read(view, j, segments * padded, L.INTS) == (k, i)


def test_concat_has_no_view_and_unknown_words_are_errors() -> None:
    with pytest.raises(L.UnknownLayout):
        L.view_of(L.Word.CONCAT)
    with pytest.raises(L.UnknownLayout, match="unknown layout word 'pairs'"):
        L.Word.parse("pairs")
    with pytest.raises(L.UnknownLayout, match="unknown view"):
        L.ViewWord.parse("pad")
    assert L.Word.parse("interleave") is L.Word.INTERLEAVE


def test_the_same_formulas_on_torch_tensors_and_z3_terms() -> None:
    """position and read are written once: on torch index tensors and z3 terms they give the
    ints' answers (the runtime's and the verifier's evaluations of the algebra)."""
    torch = pytest.importorskip("torch")
    z3 = pytest.importorskip("z3")

    class TorchArith:
        def lt(self, a, b):  # type: ignore[no-untyped-def]
            return a < b

        def where(self, cond, a, b):  # type: ignore[no-untyped-def]
            return torch.where(cond, a, b)

        def div(self, a, b):  # type: ignore[no-untyped-def]
            return torch.div(a, b, rounding_mode="floor")

        def mod(self, a, b):  # type: ignore[no-untyped-def]
            return a % b

        def minimum(self, a, b):  # type: ignore[no-untyped-def]
            return torch.minimum(a, b)

    class Z3Arith:
        def lt(self, a, b):  # type: ignore[no-untyped-def]
            return a < b

        def where(self, cond, a, b):  # type: ignore[no-untyped-def]
            return z3.If(cond, a, b)

        def div(self, a, b):  # type: ignore[no-untyped-def]
            return a / b

        def mod(self, a, b):  # type: ignore[no-untyped-def]
            return a % b

        def minimum(self, a, b):  # type: ignore[no-untyped-def]
            return z3.If(a < b, a, b)

    logical, padded = 5, 8
    for word in WORDS:
        pd = logical if word is L.Word.NONE else padded
        segments = _segments(word)[0]
        i = torch.arange(logical)
        for k in range(segments):
            want = [L.position(word, segments, k, v, logical, pd) for v in range(logical)]
            assert L.position(word, segments, k, i, logical, pd).tolist() == want
            zi = z3.Int("i")
            term = L.position(word, segments, k, zi, z3.IntVal(logical), z3.IntVal(pd))
            got = [z3.simplify(z3.substitute(term, (zi, z3.IntVal(v)))).as_long() for v in range(logical)]
            assert got == want
    for view in L.ViewWord:
        size = 2 * padded
        want = [L.read(view, j, size, L.INTS) for j in range(size)]
        seg, idx = L.read(view, torch.arange(size), torch.tensor(size), TorchArith())
        seg_t = seg if isinstance(seg, torch.Tensor) else torch.full((size,), seg)
        assert list(zip(seg_t.tolist(), idx.tolist(), strict=True)) == [tuple(w) for w in want]
        zj = z3.Int("j")
        zseg, zidx = L.read(view, zj, z3.IntVal(size), Z3Arith())
        for j in range(size):
            s = zseg if isinstance(zseg, int) else z3.simplify(z3.substitute(zseg, (zj, z3.IntVal(j)))).as_long()
            x = z3.simplify(z3.substitute(zidx, (zj, z3.IntVal(j)))).as_long()
            assert (s, x) == tuple(want[j])
    for rank in range(5):
        want = L.extent(rank, 3, 10, L.INTS)
        got = L.extent(torch.tensor(rank), torch.tensor(3), torch.tensor(10), TorchArith())
        assert (int(got[0]), int(got[1])) == want
