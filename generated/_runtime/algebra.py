# Copied by `layoutc compile` from layoutc/runtime/algebra.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""The layout algebra: what every layout word means, defined once.

Specification
=============

A *layout* says where the entries of one tensor axis live. The axis holds
``segments`` logical runs (one, or two for a gated ``w13``: gate and up), each of
``logical`` live entries, placed among ``segments * padded`` physical positions.
A layout is a map

    position(k, i) : {0..segments-1} x {0..logical-1}  ->  {0..segments*padded-1}

from a logical coordinate (segment k, entry i) to a physical position. Positions
that no coordinate maps to are the *pad*: they hold the tensor's fill. The five
layout words are the five maps the contracts use (docs/language.md, section 5):

    word        position(k, i)          pad positions
    ----------  ----------------------  -------------------------------------------
    NONE        i                       none (padded == logical)
    PAD         i                       [logical, padded)            (one segment)
    HALVES      k * padded + i          [k*padded + logical, (k+1)*padded) per k
    CONCAT      k * logical + i         [segments*logical, segments*padded)
    INTERLEAVE  segments * i + k        [segments*logical, segments*padded)

Worked examples (logical 3, padded 4; ``g``/``u`` = gate/up, ``.`` = pad):

    HALVES(gate | up)       g0 g1 g2 .  u0 u1 u2 .      (vLLM's split at half)
    CONCAT(gate | up)       g0 g1 g2 u0 u1 u2 .  .
    INTERLEAVE(gate | up)   g0 u0 g1 u1 g2 u2 .  .      (gpt-oss pairs, padded by pairs)
    PAD                     x0 x1 x2 .

Every map is injective whenever logical <= padded, so ``unpad`` (gather the
positions back) is an exact inverse of ``pad``. A layout is an affine map per
segment, so, as in CuTe's (shape, stride) form, it is written with ``+`` and
``*`` only: the same formula evaluates on Python ints, on torch index tensors
and on z3 terms. Padding is what CuTe's form states with a larger codomain than
its domain; here it is the codomain ``segments * padded``.

A *view* is how a kernel reads an axis of ``size`` positions: the inverse
direction, a map from a physical position j to (segment, entry):

    view        read(j)
    ----------  ---------------------------------------------------------------
    LINEAR      (0, j)
    HALVES      (0, j) if j < size / 2 else (1, j - size / 2)
    INTERLEAVE  (j mod 2, j div 2)

A layout is *placed right* for a view when read(position(k, i)) == (k, i) for
every logical coordinate: that is what the verifier proves (``placement``). The
view needs a select and integer division, so it is written against a small
arithmetic interface (``Arith``): ``INTS`` here, a torch one in the runtime,
a z3 one in the verifier.

Shards. The intermediate axes are split over ranks: rank r of a shard of
``full`` entries per segment reads entries [min(r*L, full), min((r+1)*L, full))
of each segment, L being the axis's logical size (``extent``). An even split has
full == ranks * L; a block shard may leave the last ranks short or empty, and a
short rank's positions past its slice (the *tail*) hold the tensor's tail fill.

Runs. For copying, an axis is a list of runs: (source start, destination start,
length) copies, [lo, hi) pads past each logical run, and [lo, hi) tails inside a
logical run past a short rank's slice (``runs``). ``locate`` answers the
reverse question for one position (a picture, a plugin message).

An unknown word is an error (``UnknownLayout``): nothing defaults.

This module is standard library only: the compiler imports it without torch,
and ``layoutc compile`` copies it into every generated package.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol

#: A number of any of the three evaluations: a Python int, a torch index tensor or a z3
#: term (all support + and *). `Truth` is what comparing two of them gives.
Num = Any
Truth = Any


class UnknownLayout(ValueError):
    """A layout or view word that this algebra does not define."""


class Word(enum.StrEnum):
    """The layout words of a contract axis (docs/language.md, section 5). A word is its
    spelling as a string (so a diagnostic or a generated table prints it as written)."""

    NONE = "none"
    PAD = "pad"
    HALVES = "halves"
    CONCAT = "concat"
    INTERLEAVE = "interleave"

    @classmethod
    def parse(cls, text: str) -> Word:
        """The word spelled `text`; raises UnknownLayout for any other spelling."""
        try:
            return cls(text)
        except ValueError:
            raise UnknownLayout(f"unknown layout word {text!r}; known: "
                                f"{', '.join(w.value for w in cls)}") from None

    @property
    def segmented(self) -> bool:
        """Whether the word places several segments (gate and up) on the axis."""
        return self in (Word.HALVES, Word.CONCAT, Word.INTERLEAVE)

    @property
    def padded(self) -> bool:
        """Whether the axis may hold pad positions."""
        return self is not Word.NONE


class ViewWord(enum.StrEnum):
    """How a kernel reads an axis (a contract's `view`, or a glue interface's); a view is
    its spelling as a string, as a Word is."""

    LINEAR = "linear"
    HALVES = "halves"
    INTERLEAVE = "interleave"

    @classmethod
    def parse(cls, text: str) -> ViewWord:
        """The view spelled `text`; raises UnknownLayout for any other spelling."""
        try:
            return cls(text)
        except ValueError:
            raise UnknownLayout(f"unknown view {text!r}; known: {', '.join(v.value for v in cls)}") from None


class Arith(Protocol):
    """The operations a view and a shard extent need beyond + and *, for one kind of number."""

    def lt(self, a: Num, b: Num) -> Truth: ...

    def where(self, cond: Truth, a: Num, b: Num) -> Num: ...

    def div(self, a: Num, b: int) -> Num: ...

    def mod(self, a: Num, b: int) -> Num: ...

    def minimum(self, a: Num, b: Num) -> Num: ...


class IntArith:
    """Arith on Python ints (floor division, as the runtime's slices use)."""

    def lt(self, a: int, b: int) -> bool:
        return a < b

    def where(self, cond: bool, a: int, b: int) -> int:
        return a if cond else b

    def div(self, a: int, b: int) -> int:
        return a // b

    def mod(self, a: int, b: int) -> int:
        return a % b

    def minimum(self, a: int, b: int) -> int:
        return min(a, b)


INTS = IntArith()


def position(word: Word, segments: int, k: int, i: Num, logical: Num, padded: Num) -> Num:
    """Physical position of segment `k`'s logical entry `i` (the table above).

    `i`, `logical` and `padded` may be ints, torch tensors or z3 terms: only + and *
    are used. Sizes are in the axis's unit (values, storage elements or groups).
    """
    if word in (Word.NONE, Word.PAD):
        return i
    if word is Word.HALVES:
        return k * padded + i
    if word is Word.CONCAT:
        return k * logical + i
    if word is Word.INTERLEAVE:
        return segments * i + k
    raise UnknownLayout(f"unknown layout word {word!r}")


def read(view: ViewWord, j: Num, size: Num, arith: Arith, ids: tuple[Num, Num] | None = None) -> tuple[Num, Num]:
    """(segment, entry) a kernel reading with `view` assigns to physical position `j`
    of an axis of `size` positions (two segments for HALVES and INTERLEAVE).

    `ids`: what to give for segment 0 and segment 1 of a two-segment view instead of the
    numbers 0 and 1 (a caller's role ids: the segment is then one select between them).
    """
    if view is ViewWord.LINEAR:
        return 0, j
    if view is ViewWord.HALVES:
        half = arith.div(size, 2)
        first = arith.lt(j, half)
        first_id, second_id = (0 * j, 0 * j + 1) if ids is None else ids
        return arith.where(first, first_id, second_id), arith.where(first, j, j - half)
    if view is ViewWord.INTERLEAVE:
        if ids is None:
            return arith.mod(j, 2), arith.div(j, 2)
        return arith.where(arith.mod(j, 2) == 0, ids[0], ids[1]), arith.div(j, 2)
    raise UnknownLayout(f"unknown view {view!r}")


def extent(rank: Num, logical: Num, full: Num, arith: Arith) -> tuple[Num, Num]:
    """(start, length) of rank `rank`'s slice of one segment of `full` checkpoint entries,
    each rank owning `logical` of them: [min(r*L, full), min((r+1)*L, full))."""
    start = arith.minimum(rank * logical, full)
    return start, arith.minimum(logical, full - start)


#: One axis's (copies, pads, tails): (source start, destination start, length) of each live
#: run; [lo, hi) of each pad run (past the logical run: the pad fill); [lo, hi) of each tail
#: run (inside the logical run, past a short rank's slice: the tail fill).
Runs = tuple[list[tuple[int, int, int]], list[tuple[int, int]], list[tuple[int, int]]]


def runs(word: Word, segments: int, logical: int, padded: int, start: int = 0, live: int | None = None,
         stride: int | None = None) -> Runs:
    """(copies, pads, tails) of one axis whose source segments hold entries [start, start + live)
    of `stride`-long segments (default: the whole logical run, segments `logical` apart).

    The copies of an INTERLEAVE axis are one run of whole entries (segments * live
    positions), since its segments alternate; every other word copies one run per segment.
    """
    n = logical if live is None else live
    seg = logical if stride is None else stride
    lg, pd, k = logical, padded, segments
    if word is Word.INTERLEAVE:
        copied = [(k * start, 0, k * n)] if n else []
        return copied, ([(k * lg, k * pd)] if lg < pd else []), ([(k * n, k * lg)] if n < lg else [])
    if word is Word.CONCAT:
        copied = [(j * seg + start, j * lg, n) for j in range(k)] if n else []
        tails = [(j * lg + n, (j + 1) * lg) for j in range(k) if n < lg]
        return copied, ([(k * lg, k * pd)] if pd > lg else []), tails
    if word in (Word.NONE, Word.PAD, Word.HALVES):
        copied = [(j * seg + start, position(word, k, j, 0, lg, pd), n) for j in range(k)] if n else []
        return (copied, [(j * pd + lg, (j + 1) * pd) for j in range(k) if lg < pd],
                [(j * pd + n, j * pd + lg) for j in range(k) if n < lg])
    raise UnknownLayout(f"unknown layout word {word!r}")


@dataclass(frozen=True)
class Located:
    """What one physical position holds: a logical (segment, entry), or a pad or tail position
    (segment is then the segment whose run it follows, None past every segment)."""

    kind: str  # "entry" | "pad"
    segment: int | None
    entry: int | None


def locate(word: Word, segments: int, logical: int, padded: int, j: int) -> Located | None:
    """What position `j` of an axis holds (None: outside its segments * padded positions)."""
    if not 0 <= j < segments * padded:
        return None
    if word is Word.INTERLEAVE:
        if j < segments * logical:
            return Located("entry", j % segments, j // segments)
        return Located("pad", None, None)
    if word is Word.CONCAT:
        if j < segments * logical:
            return Located("entry", j // logical, j % logical)
        return Located("pad", None, None)
    if word in (Word.NONE, Word.PAD, Word.HALVES):
        k, i = divmod(j, padded)
        return Located("entry", k, i) if i < logical else Located("pad", k, None)
    raise UnknownLayout(f"unknown layout word {word!r}")


def view_of(word: Word) -> ViewWord:
    """The view under which `word` is placed right for every size (its own reading):
    HALVES and INTERLEAVE read themselves; every one-segment word reads linearly.
    CONCAT has none for a padded axis: it is read by no kernel view."""
    if word is Word.HALVES:
        return ViewWord.HALVES
    if word is Word.INTERLEAVE:
        return ViewWord.INTERLEAVE
    if word in (Word.NONE, Word.PAD):
        return ViewWord.LINEAR
    raise UnknownLayout(f"layout word {word.value!r} has no view that reads it for every size")
