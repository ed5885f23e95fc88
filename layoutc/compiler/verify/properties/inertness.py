"""The `inertness` property: every padded lane adds exactly 0 to the layer output.

A pad lane of the intermediate dim (and, for a block shard, a lane past a short rank's
slice) contributes act(gate) * up * w2-column = 0 exactly, with every value finite; every
written scale or zero-point pad decodes to a finite value; the hidden dim's pad columns
decode to 0 (docs/verification.md, inertness).
"""

from __future__ import annotations

from collections.abc import Mapping

import z3  # type: ignore[import-untyped]

from layoutc.compiler import ir
from layoutc.compiler.verify.obligations import Obligation, decide
from layoutc.compiler.verify.properties.pad_values import (
    COMPUTE_MAX,
    PadValues,
    abs_value,
    byte_notes,
    format_note,
    numeral,
    show_real,
)
from layoutc.compiler.verify.properties.shards import sharded_axes, short_ranks, split_here
from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Verdict
from layoutc.runtime.vocab import ACTIVATIONS


def obligations(run: Run) -> list[Obligation]:
    """Scale and zero-point pads (and tails) finite; the intermediate pad lanes (and a short
    rank's tail lanes) inert; the hidden dim's pad columns zero."""
    c = run.contract
    ctx = run.ctx
    w13 = c.weight("w13")
    lane = z3.Int("lane", ctx)
    obs: list[Obligation] = []
    # Every scale or zero-point pad that is written must decode to a finite value, and so
    # must its `tail fill`, where short ranks can occur.
    sv = PadValues(run, lane, "scalepad")
    for t in c.tensors:
        if t.kind not in ("scale", "zero"):
            continue
        sharded = any((t, a) in sharded_axes(c) for a in t.axes)
        if t.tail_fill is not None and sharded:
            obs += _scale_tail_finite(run, t)
        value, finite = sv.pad_value(t)
        if z3.is_true(z3.simplify(finite)):
            continue
        # a short rank's tail holds the fill too (unless it has its own `tail fill`),
        # whether or not the tensor is padded
        has_pad = z3.Or(sv.has_pad(t), short_ranks(run)) if sharded and t.tail_fill is None \
            else sv.has_pad(t)

        def sexplain(model, t=t, value=value):  # type: ignore[no-untyped-def]
            note = format_note(t.decode, t.fill) if t.decode is not None else "uninitialised memory" \
                if t.fill_kind == "uninit" else (f"stored as uint8 bytes without a declared format, and "
                                                 f"{byte_notes(t.fill)}; declare it, e.g. `decode = e8m0(code)`")
            return (f"{t.name}'s pad holds code {t.fill if t.fill_kind != 'uninit' else '(uninit)'}, which decodes "
                    f"to a non-finite value ({note}); every weight it scales in the pad is then NaN, and the "
                    "kernel adds NaN * 0 = NaN to the output", t.name)
        obs.append(Obligation(f"{t.name} pad is finite", t.span, z3.And(run.admitted, has_pad, z3.Not(finite)),
                              sexplain, t.name))
    obs += _decoded_fills(run)
    obs.append(_lane_obligation(run, tail=False))
    if run.contract.block_shard is not None:
        obs.append(_lane_obligation(run, tail=True))
    try:
        hidden = w13.axis("k")
    except KeyError:
        return obs
    if hidden.is_padded:
        hl, hp, _ = run.sizes[(w13.name, "k")]
        col = z3.Int("hidden", ctx)
        hv = PadValues(run, col, "hpad")
        value, hfinite = hv.value(w13, "k")
        hgoal = z3.And(run.admitted, col >= hl, col < hp, z3.Not(z3.And(hfinite, value == 0)))

        def hexplain(model):  # type: ignore[no-untyped-def]
            return (f"w13 hidden pad column {run.val(model, col)} decodes to "
                    f"{run.enc.evaluate(model, value)} or may be non-finite", "w13.k")
        obs.append(Obligation("hidden pad columns", hidden.span, hgoal, hexplain, w13.name))
    return obs


def _decoded_fills(run: Run) -> list[Obligation]:
    """A weight's `fill decoded V` holds: at every pad lane of each padded axis its stored pad
    code, decoded by the weight's `decode` (number formats from layoutc/runtime/numformats.py,
    the tensors it reads at their value there: their own pad, or any finite live value), is
    exactly V and finite. The checker picked the code with the tensors at their pad values
    only; a live scale beside a pad row is the case it did not see."""
    obs: list[Obligation] = []
    for t in run.contract.tensors:
        if t.kind != "weight" or t.decode is None or t.fill_value is None or t.fill_kind != "decoded":
            continue
        for axis in t.axes:
            if not axis.is_padded:
                continue
            logical, padded, _ = run.sizes[(t.name, axis.name)]
            lane = z3.Int(f"fill.{t.name}.{axis.name}", run.ctx)
            value, finite = PadValues(run, lane, f"fill.{t.name}.{axis.name}").value(t, axis.name)
            want = t.fill_value
            goal = z3.And(run.admitted, lane >= logical, lane < padded, z3.Not(z3.And(finite, value == want)))

            def explain(model, t=t, axis=axis, lane=lane, value=value, want=want):  # type: ignore[no-untyped-def]
                return (f"{t.name}'s pad code {t.fill} at {t.name}.{axis.name} lane {run.val(model, lane)} decodes to "
                        f"{run.enc.evaluate(model, value)} (or a non-finite value), not the declared "
                        f"`fill decoded {want}`", f"{t.name}.{axis.name}")
            obs.append(Obligation(f"{t.name}.{axis.name} pad decodes to {want}", axis.span, goal, explain, t.name))
    return obs


def _scale_tail_finite(run: Run, t: ir.Tensor) -> list[Obligation]:
    """A scale's or zero-point's `tail fill` decodes to a finite value wherever a short rank
    holds it (a block shard with tp_size * L > FULL, on an axis split there)."""
    tv = PadValues(run, z3.Int("lane", run.ctx), "scaletail", tail=True)
    _, finite = tv.pad_value(t)
    if z3.is_true(z3.simplify(finite)):
        return []
    split = z3.Or([split_here(run, t, a) for a in t.axes if (t, a) in sharded_axes(run.contract)])
    tail = t.at_tail()

    def explain(model):  # type: ignore[no-untyped-def]
        note = format_note(tail.decode, tail.fill) if tail.decode is not None else (
            f"stored as uint8 bytes without a declared format, and {byte_notes(tail.fill)}; declare it, "
            "e.g. `decode = e8m0(code)`")
        return (f"{t.name}'s `tail fill` holds code {tail.fill} past a short rank's slice (a block shard: "
                f"tp_size * L > FULL), which decodes to a non-finite value ({note}); every weight it scales "
                "there is then NaN, and the kernel adds NaN * 0 = NaN to the output", t.name)
    goal = z3.And(run.admitted, short_ranks(run), split, z3.Not(finite))
    return [Obligation(f"{t.name} tail is finite", t.span, goal, explain, t.name)]


def _up_offset(run: Run) -> z3.ArithRef:
    kernel = run.contract.kernel
    act = kernel.activation if kernel is not None else None
    if act is None:
        return z3.RealVal(0, run.ctx)
    assert isinstance(act.type, ir.EnumT)
    if isinstance(act, ir.Const):
        return z3.RealVal(ACTIVATIONS[str(act.value)].up_offset, run.ctx)
    subject = run.enc.expr(act)
    result: z3.ArithRef = z3.RealVal(0, run.ctx)
    for idx, member in enumerate(act.type.members):
        result = z3.If(subject == idx, z3.RealVal(ACTIVATIONS[member].up_offset, run.ctx), result)
    return result


def _lane_obligation(run: Run, tail: bool) -> Obligation:
    """A pad lane of w13.n (lanes [L, P)) is inert; `tail`: so is a lane past a short rank's
    slice, where every sharded tensor holds its fill (docs/verification.md, inertness)."""
    c = run.contract
    ctx = run.ctx
    w13, w2 = c.weight("w13"), c.weight("w2")
    lane = z3.Int("tail_lane" if tail else "lane", ctx)
    logical, padded, _ = run.sizes[(w13.name, "n")]
    vals = PadValues(run, lane, "tail" if tail else "pad", tail=tail)
    w_gate, f_gate = vals.value(w13, "n")
    w_up, f_up = vals.value(w13, "n") if c.gated else (z3.RealVal(0, ctx), vals.true())
    biases = [t for t in c.tensors if t.kind == "bias" and t.projection == "w13"]
    zero = (z3.RealVal(0, ctx), vals.true())
    b_gate, f_bgate = vals.value(biases[0], "n") if biases else zero
    b_up, f_bup = vals.value(biases[0], "n") if biases and c.gated else zero
    column, f_column = vals.value(w2, "k")
    offset = _up_offset(run)
    finite = z3.And(f_gate, f_up, f_bgate, f_bup, f_column)
    # A non-zero pad row meets every finite hidden state x: its pre-activation row . x is
    # unbounded, so the lane can overflow to inf, and inf * 0 is NaN. Only exactly-zero rows
    # leave the lane at act(b_gate) * (b_up + c), a constant.
    rows_zero = z3.And(w_gate == 0, w_up == 0)
    if c.gated:
        lane_zero = z3.And(rows_zero, z3.Or(b_gate == 0, b_up + offset == 0))
        bg, bu, off = numeral(b_gate), numeral(b_up), numeral(offset)
        bound = abs(bg) * (abs(bu) + abs(off)) if None not in (bg, bu, off) else None  # type: ignore[operator,arg-type]
    else:
        lane_zero = z3.And(rows_zero, b_gate == 0)
        bg = numeral(b_gate)
        bound = abs(bg) * (abs(bg) + 1) if bg is not None else None
    if bound is None:
        # the biases are not constants: offset depends on the activation; bound each case
        bound_ok = z3.And(abs_value(b_gate) <= COMPUTE_MAX, abs_value(b_up) <= COMPUTE_MAX,
                          abs_value(b_gate) * (abs_value(b_up) + abs_value(offset)) <= COMPUTE_MAX) if c.gated \
            else z3.BoolVal(False, ctx)
    else:
        bound_ok = z3.BoolVal(bound <= COMPUTE_MAX, ctx)
    bounded = z3.And(rows_zero, bound_ok)
    inert = z3.And(finite, z3.Or(lane_zero, z3.And(bounded, column == 0)))
    if tail:  # a short rank's lanes past its slice: any lane of L can be one (empty ranks)
        goal = z3.And(run.admitted, short_ranks(run), lane >= 0, lane < logical, z3.Not(inert))
    else:
        goal = z3.And(run.admitted, lane >= logical, lane < padded, z3.Not(inert))

    def explain(model):  # type: ignore[no-untyped-def]
        lv = run.val(model, lane)

        def show(term):  # type: ignore[no-untyped-def]
            return show_real(run.enc.evaluate(model, term))
        parts = ", ".join(f"{name} = {show(term)}" for name, term in (
            ("gate row", w_gate), ("up row", w_up), ("gate bias", b_gate), ("up bias", b_up), ("w2 column", column)))
        nonfinite = [what for fin, what in vals.notes if z3.is_false(run.enc.evaluate(model, fin))]
        if nonfinite:
            kind = "non-finite pad"
            why = f"{'; '.join(dict.fromkeys(nonfinite))}, and 0 * inf or 0 * NaN is not 0"
        elif z3.is_false(run.enc.evaluate(model, rows_zero)):
            kind = "non-zero pad row"
            row, value = ("gate", w_gate) if z3.is_false(run.enc.evaluate(model, w_gate == 0)) \
                else ("up", w_up)
            why = (f"its {row} row decodes to {show(value)}, not exactly 0: over all finite hidden states x the "
                   f"pre-activation {show(value)} * x is unbounded, so act(gate) * up can overflow to inf (a "
                   f"float16 activation does past {COMPUTE_MAX}), and inf * 0 is NaN even where its w2 column is 0")
        elif z3.is_true(run.enc.evaluate(model, column == 0)):
            kind = "activation not provably finite"
            why = (f"its activation act(gate bias) * (up bias + {show(offset)}) is not provably finite (bound "
                   f"{COMPUTE_MAX}, float16), and inf * 0 (its zero w2 column) is NaN")
        else:
            kind = "non-zero lane and non-zero w2 column"
            why = "the lane's activation is non-zero and its w2 column does not decode to 0"
        held = "the `tail fill`" if any(t.tail_fill is not None for t in c.tensors) else "the fill"
        where = (f"on a rank whose slice is shorter than L (a block shard: tp_size * L > FULL), lane {lv} "
                 f"holds {held}" if tail else f"pad lane {lv}")
        return f"{where} and adds to the output: {why}; {parts}", f"lane {lv}", kind
    name = "short-rank tail lanes" if tail else "intermediate pad lanes"
    return Obligation(name, w13.span, goal, explain, w13.name)


def check(run: Run, earlier: Mapping[str, Verdict]) -> Verdict:
    """The `inertness` verdict: every obligation of :func:`obligations` proved, or why not."""
    return decide(run, "inertness", obligations(run), run.contract.span)
