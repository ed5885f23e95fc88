"""Closed forms the verifier uses instead of an index formula are equivalent to it."""

from __future__ import annotations

import itertools

import pytest
import z3

from layoutc.compiler.verify.properties.roundtrip import injective_broken
from layoutc.runtime.algebra import Word

pytestmark = pytest.mark.slow


def test_roundtrip_closed_form_matches_the_index_formula() -> None:
    """For every layout, "a logical position is stored outside the axis or two share one"
    holds exactly when L > 0 and L > P (per segment, in groups for a groups axis)."""
    ctx = z3.Context()
    i1, i2 = z3.Int("i1", ctx), z3.Int("i2", ctx)
    layouts = [("pad", 1, 1), ("halves", 2, 2), ("concat", 2, 2), ("interleave", 2, 2)]
    for (layout, roles, segs), lg, pg in itertools.product(layouts, range(-3, 7), range(-3, 7)):
        s = z3.Solver(ctx=ctx)
        s.add(injective_broken(Word.parse(layout), roles, z3.IntVal(lg, ctx), z3.IntVal(pg, ctx), segs, i1, i2))
        assert (s.check() == z3.sat) == (lg > 0 and lg > pg), (layout, lg, pg)


DIVISION_LETS = """
let t_div = intermediate_size / tp_size
let t_mod = intermediate_size % tp_size
let t_round_up = round_up(intermediate_size, tp_size)
let t_round_down = round_down(intermediate_size, tp_size)
let t_cdiv = cdiv(intermediate_size, tp_size)
let t_nested = round_up(intermediate_size / tp_size, 32) * tp_size
let t_product = tp_size * hidden_size
"""


def _contract_with_division_lets():  # type: ignore[no-untyped-def]
    from pathlib import Path

    from layoutc.compiler.source import load
    path = Path(__file__).resolve().parents[2] / "contracts" / "vllm_cpu_grouped_gemm.moe"
    contract, diags, _ = load(str(path), path.read_text() + DIVISION_LETS)
    assert contract is not None, diags
    return contract


def test_division_by_a_parameter_is_floor_division_on_every_divisor_value() -> None:
    """Division, modulo and rounding by tp_size (quotient/remainder variables defined in
    `Encoder.aux`) force exactly the values layoutc's evaluator (Python floor division)
    computes, for every tp_size value and numerators around each multiple; and
    `Encoder.evaluate` recomputes them from a model whose query carried no definition."""
    from layoutc.compiler.evaluate import eval_lets
    from layoutc.compiler.verify.smt import Encoder

    contract = _contract_with_division_lets()
    enc = Encoder(contract)
    names = ["t_div", "t_mod", "t_round_up", "t_round_down", "t_cdiv", "t_nested", "t_product"]
    tp_values = contract.param("tp_size").values
    # /, %, round_down of I share one definition (I = q * tp + r), round_up and cdiv another
    assert len(enc.aux) >= 2
    base = enc.domain()
    checked = 0
    for tp in tp_values:
        for size in sorted({1, 2, tp - 1, tp, tp + 1, 31 * tp + 5, 262144} - {0}):
            config = {"num_experts": 1, "hidden_size": 7, "intermediate_size": size, "tp_size": tp}
            pins = [enc.vars[k] == v for k, v in config.items()]
            want = eval_lets(contract, {**config, "isa": "vec", "activation": "silu", "dtype": "float32",
                                        "ep_size": 1})
            s = z3.Solver(ctx=enc.ctx)
            s.add(base, *enc.aux, *pins)
            for name in names:
                s.push()
                s.add(enc.vars[name] != want[name])
                assert s.check() == z3.unsat, (name, config, want[name])
                s.pop()
            # a model of the pins alone (no definitions): evaluate recomputes the quotients
            bare = z3.Solver(ctx=enc.ctx)
            bare.add(*pins)
            assert bare.check() == z3.sat
            model = bare.model()
            for name in names:
                let = next(x for x in contract.lets if x.name == name)
                got = enc.evaluate(model, enc.expr(let.value)).as_long()
                assert got == want[name], (name, config, got, want[name])
                checked += 1
    assert checked == len(names) * sum(len(sorted({1, 2, tp - 1, tp, tp + 1, 31 * tp + 5, 262144} - {0}))
                                       for tp in tp_values)
