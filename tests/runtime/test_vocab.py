"""The vocabulary (layoutc/runtime/vocab.py) against Python's and torch's own semantics."""

from __future__ import annotations

import itertools
import math

import pytest

from layoutc.runtime import vocab as V

VALUES = (-9, -4, -1, 0, 1, 2, 3, 7, 32, 100)


def test_integer_operators_follow_python_floor_semantics() -> None:
    for a, b in itertools.product(VALUES, VALUES):
        assert V.apply(V.Op.ADD, [a, b]) == a + b and V.apply(V.Op.MUL, [a, b]) == a * b
        assert V.apply(V.Op.LT, [a, b]) is (a < b) and V.apply(V.Op.GE, [a, b]) is (a >= b)
        assert V.apply(V.Op.MIN, [a, b]) == min(a, b) and V.apply(V.Op.GCD, [a, b]) == math.gcd(a, b)
        if b <= 0:  # the finite-divisor rule: a divisor <= 0 has no value (docs/language.md 4.5)
            for op in (V.Op.DIV, V.Op.MOD, V.Op.CDIV, V.Op.ROUND_DOWN, V.Op.ROUND_UP):
                with pytest.raises(V.OpError, match=f"(division|modulo) by {b}$"):
                    V.apply(op, [a, b])
        else:
            assert V.apply(V.Op.DIV, [a, b]) == a // b and V.apply(V.Op.MOD, [a, b]) == a % b
            assert V.apply(V.Op.CDIV, [a, b]) == -(-a // b)
            assert V.apply(V.Op.ROUND_UP, [a, b]) == math.ceil(a / b) * b
            assert V.apply(V.Op.ROUND_DOWN, [a, b]) == math.floor(a / b) * b
        if a > 0 and b > 0:
            assert V.apply(V.Op.LCM, [a, b]) == math.lcm(a, b)
        elif a <= 0 or b <= 0:
            with pytest.raises(V.OpError):
                V.apply(V.Op.LCM, [a, b])
    with pytest.raises(V.OpError, match="2\\*\\*62"):
        V.apply(V.Op.MUL, [2**40, 2**40])
    assert {o.value for o in V.FUNCTIONS} == {"round_up", "round_down", "cdiv", "lcm", "gcd", "min", "max"}
    assert all(V.Op.parse(o.value) is o for o in V.Op)


def test_decode_formats_are_the_numformats_and_have_no_integer_value() -> None:
    from layoutc.runtime.numformats import CODES, DECODERS
    assert {o.value for o in V.DECODES} == set(DECODERS) == set(CODES)
    for op in V.DECODES:
        assert op.arity == 1 and not op.is_function
        with pytest.raises(V.OpError, match="decodes a stored code"):
            V.apply(op, [3])


def test_dtypes_match_torch() -> None:
    torch = pytest.importorskip("torch")
    for name, d in V.DTYPES.items():
        t = getattr(torch, name)
        assert torch.empty((), dtype=t).element_size() * 8 == d.bits, name
        if d.floating:
            info = torch.finfo(t)
            assert float(info.max) == d.largest and info.bits == d.bits, name
            for value in (0, 1, 3, 255, 256, 257, 2049, 60000, 65504, -7):
                exact = abs(value) <= d.largest and float(torch.tensor(value, dtype=torch.float64).to(t)) == value
                assert d.exact(value) == exact, (name, value)
        else:
            info = torch.iinfo(t)
            assert d.exact(info.max) and d.exact(info.min) and not d.exact(info.max + 1), name


def test_activations_name_the_hf_names() -> None:
    assert set(V.HF_ACTIVATIONS.values()) <= set(V.ACTIVATIONS)
    assert V.ACTIVATIONS["swigluoai"].up_offset == 1 and not V.ACTIVATIONS["relu2"].gated
