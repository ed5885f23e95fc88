"""Decoded values of the tensors at one pad lane, and the notes that explain them.

The inertness property (layoutc/compiler/verify/properties/inertness.py) reads every
tensor at a pad lane through :class:`PadValues`: the fill decoded by the tensor's own
format where it holds its pad, a free finite value where it is live.
"""

from __future__ import annotations

from fractions import Fraction
from typing import assert_never

import z3  # type: ignore[import-untyped]

from layoutc.compiler import ir
from layoutc.compiler.verify.properties.shards import split_here
from layoutc.compiler.verify.run import Run
from layoutc.runtime.numformats import CODES, FORMATS, NAN_NOTE, decode_code, fits
from layoutc.runtime.vocab import Op, OpKind

# The smallest largest-finite value among the compute dtypes an activation may take
# (float16 65504 < bfloat16 < float32): a bound proved against it holds in all three.
COMPUTE_MAX = 65504


Pair = tuple[z3.ArithRef, z3.BoolRef]  # a decoded value and "it is finite"


class PadValues:
    """Decoded values of the tensors at one pad lane, each a (real, finite) pair
    (docs/verification.md, inertness). Pad positions hold the fill, decoded by the
    tensor's own format (`e8m0(code)`, ...) where it has one; live positions hold a
    free finite value (the checkpoint's)."""

    def __init__(self, run: Run, lane: z3.ArithRef, tag: str, tail: bool = False) -> None:
        self.run = run
        self.lane = lane
        self.tag = tag
        # tail: the lane lies past a short rank's slice (a block shard, docs/verification.md,
        # coverage), where every sharded tensor holds its fill and replicated ones are live
        self.tail = tail
        self.count = 0
        self.notes: list[tuple[z3.BoolRef, str]] = []  # (this pad is finite, what it is)

    def fresh(self, what: str) -> z3.ArithRef:
        self.count += 1
        return z3.Real(f"{self.tag}.{what}.{self.count}", self.run.ctx)

    def true(self) -> z3.BoolRef:
        return z3.BoolVal(True, self.run.ctx)

    def pad_value(self, t: ir.Tensor, refs: dict[str, Pair] | None = None) -> Pair:
        """t's decoded value where t holds its pad (at a tail lane: its `tail fill`, which
        defaults to the fill)."""
        word = "pad code"
        if self.tail and t.tail_fill is not None:
            t, word = t.at_tail(), "tail fill code"
        if t.fill_kind == "uninit":
            self.count += 1
            finite = z3.Bool(f"{self.tag}.finite.{t.name}.{self.count}", self.run.ctx)
            self.notes.append((finite, f"{t.name}'s pad is uninitialised memory (torch.empty): it may hold NaN "
                                       "or inf"))
            return self.fresh(f"{t.name}.uninit"), finite
        if t.decode is not None and (t.kind in ("scale", "zero") or refs is not None):
            value, finite = self.decode(t.decode, t, refs or {})
            if not z3.is_true(z3.simplify(finite)):
                self.notes.append((finite, f"{t.name}'s {word} {t.fill} decodes to a non-finite value "
                                           f"({format_note(t.decode, t.fill)})"))
            return value, finite
        if t.kind == "scale" and t.decode is None:
            stored = self.undeclared_bytes(t)
            if stored is not None:
                return stored
        return z3.RealVal(t.fill, self.run.ctx), self.true()

    def undeclared_bytes(self, t: ir.Tensor) -> Pair | None:
        """A scale stored as uint8 without a declared format may be any byte format: an
        integer, E8M0 (MX block scales) or float8_e4m3fn bytes; its pad must be finite and
        neutral in each. The format is one free choice per tensor (the same in every use)."""
        ctx = self.run.ctx
        is_byte: z3.BoolRef
        match t.storage:
            case ir.FixedStorage(dtype="uint8"):
                is_byte = z3.BoolVal(True, ctx)
            case ir.FixedStorage():
                return None
            case ir.ParamStorage(param=name):
                param = self.run.contract.param(name)
                if "uint8" not in param.values:
                    return None
                is_byte = self.run.enc.vars[param.name] == param.values.index("uint8")
            case _:
                assert_never(t.storage)
        fmt = z3.Int(f"byte_format.{t.name}", ctx)
        value: z3.ArithRef = z3.RealVal(t.fill, ctx)
        finite: z3.BoolRef = self.true()
        for n, name in enumerate(("e8m0", "e4m3fn"), start=1):
            decoded = FORMATS[name](t.fill) if 0 <= t.fill <= 255 else None
            chosen = z3.And(fmt == n)
            value = z3.If(chosen, z3.RealVal(decoded if decoded is not None else 0, ctx), value)
            finite = z3.If(chosen, z3.BoolVal(decoded is not None, ctx), finite)
        value = z3.If(is_byte, value, z3.RealVal(t.fill, ctx))
        finite = z3.Or(z3.Not(is_byte), finite)
        if not z3.is_true(z3.simplify(finite)):
            self.notes.append((finite, f"{t.name} is stored as uint8 bytes without a declared format; its pad "
                                       f"byte {t.fill} is not finite in every byte format ({byte_notes(t.fill)}): "
                                       "declare it, e.g. `decode = e8m0(code)`"))
        return value, finite

    def in_pad(self, t: ir.Tensor, axis_name: str) -> z3.BoolRef | None:
        """Whether `t`'s element at intermediate lane `self.lane` lies in t's pad region."""
        try:
            axis = t.axis(axis_name)
        except KeyError:
            return None  # no intermediate axis: a per-tensor or per-expert value, always live
        logical, _, _ = self.run.sizes[(t.name, axis_name)]
        if self.tail:
            return split_here(self.run, t, axis)
        if axis.kind == "groups" and axis.group_size is not None:
            def live_groups(v: int):  # type: ignore[no-untyped-def]
                if v == -1:
                    return z3.BoolVal(False, self.run.ctx)
                return self.lane / v >= (logical + (v - 1)) / v
            return self.run.enc.by_values(axis.group_size, live_groups, None)
        if not axis.is_padded:
            return z3.BoolVal(False, self.run.ctx)
        return self.lane >= logical

    def at_lane(self, t: ir.Tensor, axis_name: str) -> Pair:
        """t's decoded value at the lane: its pad value in its pad region, else a free live value."""
        pad = self.in_pad(t, axis_name)
        if pad is None or z3.is_false(pad):
            return self.fresh(f"{t.name}.live"), self.true()
        value, finite = self.pad_value(t)
        if z3.is_true(pad):
            return value, finite
        return z3.If(pad, value, self.fresh(f"{t.name}.live")), z3.Or(z3.Not(pad), finite)

    def value(self, t: ir.Tensor, axis_name: str) -> Pair:
        """Decoded value of weight or bias `t` at the lane, which lies in t's pad region."""
        if t.decode is None:
            return self.pad_value(t)
        names = list(dict.fromkeys(n.tensor for n in ir.walk(t.decode) if isinstance(n, ir.TensorValue)))
        others = [self.run.contract.tensor(name) for name in names]
        refs = {o.name: self.at_lane(o, axis_name) for o in others}
        value, finite = self.pad_value(t, refs)
        # A dequantized pad is computed in the activation dtype: where every tensor the decode
        # reads holds its pad too, the value is a constant, and one beyond float16's largest
        # value is inf in a float16 kernel (then 0 * inf is NaN).
        pads = [self.in_pad(o, axis_name) for o in others]
        all_pad = z3.And([p if p is not None else z3.BoolVal(False, self.run.ctx) for p in pads]) if pads \
            else z3.BoolVal(True, self.run.ctx)  # a decode of its own code only: a constant at every pad
        constant, constant_finite = self.pad_value(t, {o.name: self.pad_value(o) for o in others})
        big = z3.And(all_pad, constant_finite, abs_value(constant) > COMPUTE_MAX)
        if z3.is_false(z3.simplify(big)):
            return value, finite
        fits = z3.And(finite, z3.Not(big))
        self.notes.append((fits, f"{t.name}'s pad dequantizes to a value beyond {COMPUTE_MAX} (float16's largest), "
                                 "which is inf in a float16 kernel"))
        return value, fits

    def decode(self, e: ir.Expr, t: ir.Tensor, refs: dict[str, Pair]) -> Pair:
        """A decode expression over t's pad code (and the values of the tensors it reads)."""
        ctx = self.run.ctx
        match e:
            case ir.Code():
                return z3.RealVal(t.fill, ctx), self.true()
            case ir.TensorValue():
                return refs[e.tensor]
            case ir.Op() if e.op.kind is OpKind.DECODE:
                decoded = decode_code(e.op.value, t.fill)
                if decoded is None:
                    return z3.RealVal(0, ctx), z3.BoolVal(False, ctx)
                return z3.RealVal(decoded, ctx), self.true()
            case ir.Cond() if e.type == ir.REAL:
                cond = self.run.enc.expr(e.cond)
                (a, fa), (b, fb) = self.decode(e.then, t, refs), self.decode(e.orelse, t, refs)
                return z3.If(cond, a, b), z3.If(cond, fa, fb)
            case ir.Select() if e.type == ir.REAL:
                return self._decode_select(e, t, refs)
            case ir.Op() if e.type == ir.REAL:
                if e.op is Op.NEG:
                    v, f = self.decode(e.args[0], t, refs)
                    return -v, f
                (a, fa), (b, fb) = (self.decode(x, t, refs) for x in e.args)
                return {Op.ADD: a + b, Op.SUB: a - b, Op.MUL: a * b}[e.op], z3.And(fa, fb)
            case ir.Const() | ir.Ref() | ir.AxisSize() | ir.Cond() | ir.Select() | ir.Op():
                # an integer or boolean term inside the decode: the encoder's value
                return z3.ToReal(self.run.enc.expr(e)), self.true()
            case _:
                assert_never(e)

    def _decode_select(self, e: ir.Select, t: ir.Tensor, refs: dict[str, Pair]) -> Pair:
        assert isinstance(e.subject.type, ir.EnumT)
        members = e.subject.type.members
        subject = self.run.enc.expr(e.subject)
        cases = list(e.cases) if e.default is not None else list(e.cases[:-1])
        value, finite = self.decode(e.default if e.default is not None else e.cases[-1][1], t, refs)
        for member, arm in reversed(cases):
            av, af = self.decode(arm, t, refs)
            hit = subject == members.index(member)
            value, finite = z3.If(hit, av, value), z3.If(hit, af, finite)
        return value, finite

    def has_pad(self, t: ir.Tensor) -> z3.BoolRef:
        """Whether any of t's axes has a pad region (t's fill is then written somewhere)."""
        parts: list[z3.BoolRef] = []
        for axis in t.axes:
            logical, padded, _ = self.run.sizes[(t.name, axis.name)]
            if axis.kind == "groups" and axis.group_size is not None:
                parts.append(self.run.enc.by_values(
                    axis.group_size, lambda v, lo=logical, hi=padded: z3.BoolVal(False, self.run.ctx) if v == -1
                    else (hi + (v - 1)) / v > (lo + (v - 1)) / v, None))
            elif axis.is_padded:
                parts.append(padded > logical)
        return z3.Or(parts) if parts else z3.BoolVal(False, self.run.ctx)


def format_note(e: ir.Expr, code: int) -> str:
    fmts = sorted({n.op.value for n in ir.walk(e) if isinstance(n, ir.Op) and n.op.kind is OpKind.DECODE})
    bad = [f for f in fmts if decode_code(f, code) is None]
    return "; ".join(f"{f}({code}): " + (NAN_NOTE[f] if fits(f, code) else f"not one of its codes {CODES[f][0]}.."
                                         f"{CODES[f][1]}") for f in bad) \
        or "a non-finite input"


def show_real(v: z3.ExprRef) -> str:
    """A decoded value for a message: an integer, 2^k, or a short decimal."""
    q = numeral(v)
    if q is None:
        return str(v)
    if q.denominator == 1 and abs(q.numerator) < 10**12:
        return str(q.numerator)
    if abs(q.numerator) == 1 and q.denominator & (q.denominator - 1) == 0:
        return f"{'-' if q < 0 else ''}2^-{q.denominator.bit_length() - 1}"
    return f"{float(q):.6g}"


def byte_notes(code: int) -> str:
    bad = [f for f in ("e8m0", "e4m3fn") if not 0 <= code <= 255 or FORMATS[f](code) is None]
    return "; ".join(f"{f}({code}): {NAN_NOTE[f]}" for f in bad) or "none"


def abs_value(x: z3.ArithRef) -> z3.ArithRef:
    return z3.If(x >= 0, x, -x)


def numeral(x: z3.ExprRef) -> Fraction | None:
    s = z3.simplify(x)
    if z3.is_rational_value(s):
        return Fraction(s.numerator_as_long(), s.denominator_as_long())  # type: ignore[attr-defined]
    return None
