"""The SMT encoding (layoutc/compiler/verify/smt.py) of each IR operator against Python's
semantics, on a few values: every term, with its parameters pinned and the encoder's
quotient/remainder definitions (`Encoder.aux`) asserted, has exactly the value Python
computes (floor division, as layoutc's evaluator). Fast: no contract file, no property."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import z3

from layoutc.compiler import ir
from layoutc.compiler.diagnostics import Span
from layoutc.compiler.verify.smt import Encoder
from layoutc.runtime.vocab import Op

AT = Span("<unit>", 1, 1, 1, 1)
MODES = ("vec", "amx", "avx")
PARAMS = (
    ir.Param("x", "range", ir.INT, (), -20, 40, AT),
    ir.Param("d", "set", ir.INT, (1, 2, 3, 7), 0, 0, AT),  # a divisor with positive values only
    ir.Param("g", "set", ir.INT, (4, 6), 0, 0, AT),
    ir.Param("mode", "enum", ir.EnumT("mode", MODES), MODES, 0, 0, AT),
    ir.Param("flag", "bool", ir.BOOL, (False, True), 0, 0, AT),
)
BY_NAME = {p.name: p for p in PARAMS}
X_VALUES = (-20, -7, -1, 0, 6, 13)


def _encoder() -> Encoder:
    return Encoder(SimpleNamespace(params=PARAMS, lets=(), rules=()))  # type: ignore[arg-type]


def ref(name: str) -> ir.Ref:
    p = BY_NAME[name]
    return ir.Ref(name, "param", p.type, AT)


def num(value: int) -> ir.Const:
    return ir.Const(value, ir.INT, AT)


def op(name: str, *args: ir.Expr, type_: ir.Type = ir.INT) -> ir.Op:
    return ir.Op(Op.parse(name), tuple(args), type_, AT)


def _value(enc: Encoder, e: ir.Expr, env: dict[str, Any]) -> int | bool:
    """The one value the term of `e` takes under `env` (asserted unique)."""
    term = enc.expr(e)
    pins = [enc.vars[k] == enc.param_value(k, v) for k, v in env.items()]
    s = z3.Solver(ctx=enc.ctx)
    s.add(*pins, *enc.aux)
    assert s.check() == z3.sat
    got = s.model().eval(term, model_completion=True)
    s.add(term != got)
    assert s.check() == z3.unsat, f"{e}: more than one value under {env}"
    return z3.is_true(got) if z3.is_bool(got) else got.as_long()


ARITH: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a // b,
    "%": lambda a, b: a % b,
    "round_up": lambda a, b: -(-a // b) * b,
    "round_down": lambda a, b: a // b * b,
    "cdiv": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
}
COMPARE: dict[str, Callable[[int, int], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


@pytest.mark.parametrize("name", sorted(ARITH))
def test_arithmetic_by_a_parameter_and_by_a_numeral(name: str) -> None:
    """x OP d (a non-numeral divisor: quotient/remainder variables) and x OP 3 (a numeral)."""
    enc = _encoder()
    for x, d in itertools.product(X_VALUES, BY_NAME["d"].values):
        assert _value(enc, op(name, ref("x"), ref("d")), {"x": x, "d": d}) == ARITH[name](x, int(d)), (x, d)
        assert _value(enc, op(name, ref("x"), num(3)), {"x": x}) == ARITH[name](x, 3), x


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_comparisons(name: str) -> None:
    enc = _encoder()
    for x, d in itertools.product(X_VALUES, BY_NAME["d"].values):
        e = op(name, ref("x"), ref("d"), type_=ir.BOOL)
        assert _value(enc, e, {"x": x, "d": d}) is COMPARE[name](x, int(d)), (x, d)


def test_nested_division_shares_one_definition_per_pair() -> None:
    """round_up(x / d, 4) * d, and x / d again: the same (numerator, divisor) pair is defined once."""
    enc = _encoder()
    e = op("*", op("round_up", op("/", ref("x"), ref("d")), num(4)), ref("d"))
    again = op("%", ref("x"), ref("d"))
    for x, d in itertools.product(X_VALUES, BY_NAME["d"].values):
        assert _value(enc, e, {"x": x, "d": d}) == -(-(x // int(d)) // 4) * 4 * int(d)
        assert _value(enc, again, {"x": x, "d": d}) == x % int(d)
    assert len(enc.aux) == 1


@pytest.mark.parametrize("name", ["lcm", "gcd"])
def test_lcm_and_gcd_are_tables_over_finite_parameters(name: str) -> None:
    enc = _encoder()
    fn = math.lcm if name == "lcm" else math.gcd
    for d, g in itertools.product(BY_NAME["d"].values, BY_NAME["g"].values):
        assert _value(enc, op(name, ref("d"), ref("g")), {"d": d, "g": g}) == fn(int(d), int(g))
    assert {"d", "g"} <= enc.split_params


def test_unary_logic_and_constants() -> None:
    enc = _encoder()
    for x in X_VALUES:
        assert _value(enc, op("neg", ref("x")), {"x": x}) == -x
    for flag, x in itertools.product((False, True), X_VALUES):
        env = {"flag": flag, "x": x}
        positive = op(">", ref("x"), num(0), type_=ir.BOOL)
        assert _value(enc, op("not", ref("flag"), type_=ir.BOOL), env) is (not flag)
        assert _value(enc, op("and", ref("flag"), positive, type_=ir.BOOL), env) is (flag and x > 0)
        assert _value(enc, op("or", ref("flag"), positive, type_=ir.BOOL), env) is (flag or x > 0)
    assert _value(enc, ir.Const(True, ir.BOOL, AT), {}) is True
    assert _value(enc, ir.Const(-5, ir.INT, AT), {}) == -5
    assert _value(enc, ir.Const("amx", BY_NAME["mode"].type, AT), {}) == MODES.index("amx")


def test_cond_and_select() -> None:
    enc = _encoder()
    cond = ir.Cond(ref("flag"), ref("x"), op("neg", ref("x")), ir.INT, AT)
    with_default = ir.Select(ref("mode"), (("vec", num(10)), ("amx", num(20))), num(30), ir.INT, AT)
    no_default = ir.Select(ref("mode"), (("vec", num(1)), ("amx", num(2)), ("avx", num(3))), None, ir.INT, AT)
    for flag, x in itertools.product((False, True), X_VALUES):
        assert _value(enc, cond, {"flag": flag, "x": x}) == (x if flag else -x)
    for mode in MODES:
        assert _value(enc, with_default, {"mode": mode}) == {"vec": 10, "amx": 20}.get(mode, 30)
        assert _value(enc, no_default, {"mode": mode}) == MODES.index(mode) + 1


def test_axis_sizes_only_inside_a_kernel_clause_and_decode_terms_never() -> None:
    enc = _encoder()
    size = ir.AxisSize("w13", "n", AT)
    assert enc.expr(size, {("w13", "n"): enc.int(96)}).as_long() == 96
    with pytest.raises(ValueError, match="axis size outside a kernel clause"):
        enc.expr(size)
    for e in (ir.Code(AT), ir.TensorValue("scale", AT)):
        with pytest.raises(ValueError, match="cannot encode"):
            enc.expr(e)


def test_the_domain_has_exactly_the_declared_configurations() -> None:
    """range -20..40 (61) x set of 4 x set of 2 x enum of 3 x bool (2): 2928 models."""
    enc = _encoder()
    s = z3.Solver(ctx=enc.ctx)
    s.add(enc.domain())
    finite = [enc.vars[n] for n in ("d", "g", "mode", "flag")]
    combos = 0
    while s.check() == z3.sat:  # the finite parameters' combinations, each with the full range of x
        m = s.model()
        combos += 1
        assert m.eval(enc.vars["d"]).as_long() in (1, 2, 3, 7)
        pinned = [v == m.eval(v, model_completion=True) for v in finite]
        t = z3.Solver(ctx=enc.ctx)
        t.add(enc.domain(), *pinned)
        xs = z3.Optimize(ctx=enc.ctx)
        xs.add(enc.domain(), *pinned)
        low, high = xs.minimize(enc.vars["x"]), xs.maximize(enc.vars["x"])
        xs.set(priority="box")
        assert xs.check() == z3.sat
        assert (low.value().as_long(), high.value().as_long()) == (-20, 40)
        s.add(z3.Not(z3.And(pinned)))
    assert combos == 4 * 2 * 3 * 2
