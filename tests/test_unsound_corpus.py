"""The unsound corpus: every case yields its pinned counterexample; every shipped contract proves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layoutc.check import load
from layoutc.evaluate import eval_expr, eval_lets
from layoutc.verify import PROPERTY_IDS, verify
from tests.conftest import ROOT
from tests.regen_unsound_corpus import first_counterexample

CORPUS = sorted((ROOT / "tests" / "cases" / "unsound").glob("*.moe"))
SHIPPED = sorted((ROOT / "contracts").glob("*.moe"))

# The bug each case must reproduce (the corpus named in the verifier issue).
EXPECTED_PROPERTY = {
    "end_padded_w13": "placement",
    "aiter_x2_every_tp": "kernel-arguments",
    "neon_gate_swigluoai": "alignment",
    "uninit_pad": "inertness",
    "zero_point_raw_zero": "inertness",
    "act_order_padding": "alignment",
    "group_straddle": "groups",
    "only_w13_padded": "alignment",
    "fused_tile_rule": "alignment",
    "negative_size": "roundtrip",
    "hidden_mismatch": "placement",
}


def test_the_corpus_is_complete() -> None:
    assert {p.stem for p in CORPUS} == set(EXPECTED_PROPERTY)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_pinned_counterexample(path: Path) -> None:
    expected = json.loads(path.with_suffix(".expected").read_text())
    assert expected["property"] == EXPECTED_PROPERTY[path.stem]
    assert first_counterexample(path) == expected


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_contract_is_proved_on_every_property(path: Path) -> None:
    contract, diags, _ = load(str(path))
    assert contract is not None, diags
    verdicts = verify(contract)
    assert [v.property for v in verdicts] == list(PROPERTY_IDS)
    bad = [(v.property, v.status, v.detail) for v in verdicts if v.status not in ("proved", "info")]
    assert not bad, bad


def test_aiter_x2_at_the_public_numbers() -> None:
    """gpt-oss-120b, I=2880, tp=8: 360 -> 512, pad 152 per half. The sound contract tells
    CKTile 128 (<= 152); the x2 rule tells it 256, so 104 live rows per half are dropped."""
    config = {"num_experts": 128, "hidden_size": 2880, "intermediate_size": 2880, "tp_size": 8,
              "activation": "swigluoai"}
    for path, told in ((ROOT / "contracts" / "aiter_fused_moe.moe", 128),
                       (ROOT / "tests" / "cases" / "unsound" / "aiter_x2_every_tp.moe", 256)):
        contract, _, _ = load(str(path))
        assert contract is not None and contract.kernel is not None
        env = eval_lets(contract, config)
        assert (env["intermediate_size_per_partition"], env["intermediate_size_per_partition_padded"]) == (360, 512)
        arg = next(a for a in contract.kernel.args if a.name == "intermediate_pad")
        assert eval_expr(arg.value, env) == told
        assert eval_expr(arg.trim_count, env) == told
    # and the verifier, pinned to these numbers, agrees
    contract, _, _ = load(str(ROOT / "tests" / "cases" / "unsound" / "aiter_x2_every_tp.moe"))
    assert contract is not None
    verdicts = {v.property: v for v in verify(contract, fixed=config)}
    cex = verdicts["kernel-arguments"].counterexample
    assert verdicts["kernel-arguments"].status == "counterexample" and cex is not None
    assert "kernel told intermediate_pad=256" in cex.message and "positions 256..359 are live and dropped" in cex.message


def test_language_example_tile_family_choice_is_proved() -> None:
    """docs/language.md's example of choosing the cheaper tile family checks and verifies."""
    contract, diags, _ = load(str(ROOT / "tests" / "cases" / "language" / "tile_family_choice.moe"))
    assert contract is not None, diags
    assert all(v.status in ("proved", "info") for v in verify(contract))
