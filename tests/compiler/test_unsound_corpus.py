"""The unsound corpus: every case yields its pinned counterexample; every shipped contract proves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layoutc.compiler.evaluate import eval_expr, eval_lets
from layoutc.compiler.source import load
from layoutc.compiler.verify.prove import verify
from layoutc.compiler.verify.registry import PROPERTY_IDS
from tests.conftest import ROOT
from tests.support.regen_unsound_corpus import first_counterexample, first_counterexample_verdict

CORPUS = sorted((ROOT / "tests" / "cases" / "unsound").glob("*.moe"))
WARNINGS = ROOT / "tests" / "cases" / "warnings"
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
    # issue 12: floating-point inertness and decoded scales
    "w13_fill_1_f16": "inertness",
    "w13_fill_60000_f16": "inertness",
    "mxfp8_scale_nan": "inertness",
    "mxfp8_scale_nan_undeclared": "inertness",
    "e8m0_pad_not_neutral": "inertness",
    "e8m0_dequant_overflow": "inertness",
    # issue 12: coverage of the full checkpoint by the ranks' shards
    "floor_divided_shard": "coverage",
    "ceil_divided_shard": "coverage",
    # issue 12 item 4: block shards (a rank's slice whole blocks, the last ranks short or empty)
    "block_shard_misaligned": "coverage",
    "block_shard_drops_rows": "coverage",
    "block_shard_ragged_scales": "coverage",
    "block_shard_uninit_tail": "inertness",
    # `tail fill`: the value past a short rank's slice is held to the same rules as a pad
    "block_shard_scale_tail_nan": "inertness",
    "block_shard_weight_tail_1": "inertness",
    # a ragged last scale group (block FP8 at tp=1) whose pad rows share a live scale
    "block_fp8_ragged_pad_code": "inertness",
    # issue 22: a `fill decoded 0` that a live per-channel scale breaks; a packed byte split at a
    # short rank's end
    "decoded_fill_live_scale": "inertness",
    "packed_block_shard_odd_full": "coverage",
    # issue 23: expert parallelism (a dropped expert, an expert on two ranks, a foreign id unmasked)
    "ep_dropped_expert": "expert-coverage",
    "ep_expert_on_two_ranks": "expert-coverage",
    "ep_foreign_unmasked": "expert-coverage",
    # issue 39: a foreign pair handed to local expert 0 at weight 0 (that expert still runs)
    "ep_foreign_masked": "expert-coverage",
}


def test_the_corpus_is_complete() -> None:
    assert {p.stem for p in CORPUS} == set(EXPECTED_PROPERTY)


@pytest.mark.slow
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_pinned_counterexample(path: Path) -> None:
    """Pinned by property and rule; the configuration is re-checked by plain evaluation."""
    expected = json.loads(path.with_suffix(".expected").read_text())
    assert set(expected) == {"property", "rule"}
    assert expected["property"] == EXPECTED_PROPERTY[path.stem]
    assert first_counterexample(path) == expected
    found = first_counterexample_verdict(path)
    assert found is not None
    verdict, contract = found
    cex = verdict.counterexample
    assert cex is not None and cex.message
    env = eval_lets(contract, cex.config)
    # the configuration is admitted: every require and admit holds at it (no solver)
    assert all(eval_expr(rule.cond, env) is True for rule in contract.rules), cex.config
    assert cex.derived == {k: v for k, v in env.items() if k not in cex.config}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_contract_is_proved_on_every_property(path: Path) -> None:
    contract, diags, _ = load(str(path))
    assert contract is not None, diags
    verdicts = verify(contract)
    assert [v.property for v in verdicts] == list(PROPERTY_IDS)
    bad = [(v.property, v.status, v.detail) for v in verdicts if v.status not in ("proved", "info")]
    assert not bad, bad
    assert not [w for v in verdicts for w in v.warnings]  # shipped contracts verify with no warning


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


def _warnings(name: str) -> list[str]:
    contract, diags, _ = load(str(WARNINGS / f"{name}.moe"))
    assert contract is not None, diags
    verdicts = verify(contract)
    assert all(v.status in ("proved", "info") for v in verdicts), [(v.property, v.detail) for v in verdicts]
    return [w for v in verdicts for w in v.warnings]


def test_a_needed_guard_gets_no_warning() -> None:
    """The floor-dividing helper's gate protects coverage, which the pad properties do not
    see: it must not be called stricter than needed (issue 12, item 6)."""
    assert _warnings("floor_divide_guard") == []


def test_a_gate_the_requires_imply_is_reported() -> None:
    warnings = _warnings("implied_gate")
    assert len(warnings) == 1 and "(again)" in warnings[0] and "never rejects anything" in warnings[0]


def test_fp16_pad_rows_of_one_overflow_to_nan_in_torch() -> None:
    """The rule behind w13_fill_1_f16, on torch's own float16 arithmetic: a pad row of 1 next
    to a zero w2 column, hidden states of 20 and H = 256, gives NaN (inf * 0)."""
    torch = pytest.importorskip("torch")
    hidden, inter, padded = 256, 8, 16
    w13 = torch.zeros(2 * padded, hidden, dtype=torch.float16)
    w13[:inter] = 0.01
    w13[padded:padded + inter] = 0.01
    w13[inter:padded] = 1  # gate pad rows
    w13[padded + inter:] = 1  # up pad rows
    w2 = torch.zeros(hidden, padded, dtype=torch.float16)
    w2[:, :inter] = 0.01  # the pad columns stay 0
    x = torch.full((1, hidden), 20.0, dtype=torch.float16)
    gate_up = x @ w13.T
    act = torch.nn.functional.silu(gate_up[:, :padded]) * gate_up[:, padded:]
    assert torch.isinf(act[:, inter:]).all() and torch.isfinite(act[:, :inter]).all()
    out = act @ w2.T
    assert torch.isnan(out).all()
    # with exactly-zero pad rows the same layer is finite
    w13[inter:padded] = 0
    w13[padded + inter:] = 0
    gate_up = x @ w13.T
    act = torch.nn.functional.silu(gate_up[:, :padded]) * gate_up[:, padded:]
    assert torch.isfinite(act @ w2.T).all()
