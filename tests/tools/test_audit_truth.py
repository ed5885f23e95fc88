"""A truthful audit (issue 16 item 3): never "fast path" for a kernel that cannot compute the model.

* every admitted row's kernel computes the model's activation, evaluated from the
  contract's own `activation` clause (the swigluoai contract used to say "yes" for
  silu and gelu models on all 153 rows tried);
* the weight-only int4/int8 pack contracts, whose glue quantizes float weights at
  load, are never offered to a checkpoint;
* a model whose `swiglu_limit` differs from what a contract admits is refused, and a
  contract that cannot state the clamp cannot confirm a clamped model;
* Jamba's expert_layer_period/offset counts the MoE layers;
* every row says which config key each number came from.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from layoutc.compiler.evaluate import eval_expr, eval_lets
from layoutc.compiler.source import load
from layoutc.tools.audit import audit, audit_report, load_contracts
from layoutc.tools.hfconfig import bundled_model_names, load_model_config, parse_model_config

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / "contracts"
TPS = [1, 2, 4, 8, 16]


@pytest.fixture(scope="module")
def contracts():  # type: ignore[no-untyped-def]
    loaded, problems = load_contracts([str(CONTRACTS)])
    assert problems is None, problems
    return loaded


@pytest.fixture(scope="module")
def models():  # type: ignore[no-untyped-def]
    return [(n, load_model_config(n)) for n in bundled_model_names()]


def test_every_fast_path_computes_the_models_activation(contracts, models) -> None:  # type: ignore[no-untyped-def]
    """Oracle: the contract's kernel `activation` clause evaluated at the row's params."""
    by_name = {c.name: c for c in contracts}
    labels = dict(models)
    admitted = 0
    for row in audit(models, TPS, contracts):
        if not row.admitted:
            continue
        admitted += 1
        c = by_name[row.contract]
        assert c.kernel is not None and c.kernel.activation is not None, row
        env = eval_lets(c, dict(row.params))
        assert eval_expr(c.kernel.activation, env) == labels[row.model].activation, row
    assert admitted > 50  # the bundled models do take fast paths


def test_swigluoai_fast_path_only_with_the_kernels_constants(contracts, models) -> None:  # type: ignore[no-untyped-def]
    """The CPU grouped GEMM takes silu, gelu, gelu_tanh and swigluoai; a swigluoai row is a fast
    path only with the kernel's fixed constants (alpha 1.702 -> 1702, limit 7.0 -> 7000)."""
    rows = [r for r in audit(models, TPS, contracts) if r.contract == "vllm_cpu_grouped_gemm"]
    swiglu = [r for r in rows if dict(models)[r.model].activation == "swigluoai" and r.admitted]
    assert all(r.params["swiglu_limit_milli"] == 7000 and r.params["swiglu_alpha_milli"] == 1702 for r in swiglu)
    others = [r for r in rows if dict(models)[r.model].activation != "swigluoai"]
    # the contract's default (0: no such constant) stands for models that state none
    assert others and all(r.params.get("swiglu_limit_milli", 0) == 0 for r in others)
    assert all("swiglu_limit_milli" not in r.variant for r in others)


@pytest.mark.parametrize("name", ["torch_int4pack_moe", "torch_int8pack_moe"])
def test_weight_only_pack_kernels_are_not_offered_to_checkpoints(name: str, contracts, models) -> None:  # type: ignore[no-untyped-def]
    report = audit_report(models, TPS, contracts)
    assert not [r for r in report.rows if r.contract == name]
    skipped = [s for s in report.skipped if s.contract == name]
    assert len(skipped) == len(models)
    assert all("weight-only" in s.reason for s in skipped)


@pytest.fixture(scope="module")
def limit_contract(tmp_path_factory):  # type: ignore[no-untyped-def]
    c, diags, _ = load(str(CONTRACTS / "vllm_cpu_grouped_gemm.moe"))  # it states the kernel's clamp
    assert c is not None, diags
    return c


def _gpt_oss(**changes):  # type: ignore[no-untyped-def]
    """gpt-oss-120b's shape as an unquantized checkpoint (the bundled one is MXFP4, which
    the unquantized contracts skip)."""
    changes.setdefault("quant_method", None)
    return dataclasses.replace(load_model_config("gpt-oss-120b"), **changes)


def test_matching_swiglu_limit_is_admitted(limit_contract) -> None:  # type: ignore[no-untyped-def]
    rows = audit([("gpt-oss", _gpt_oss())], [1], [limit_contract])
    assert rows and any(r.admitted for r in rows), [r.reason for r in rows]
    assert all(r.params["swiglu_limit_milli"] == 7000 and r.params["swiglu_alpha_milli"] == 1702 for r in rows)
    assert rows[0].sources["swiglu_limit_milli"] == "swiglu_limit"


def test_different_swiglu_limit_is_refused(limit_contract) -> None:  # type: ignore[no-untyped-def]
    for limit in (10.0, 7.5):
        rows = audit([("clamp", _gpt_oss(swiglu_limit=limit))], [1, 2], [limit_contract])
        assert rows and not any(r.admitted for r in rows)
        assert all("swiglu_limit" in (r.reason or "") for r in rows), [r.reason for r in rows]


def test_swigluoai_model_without_a_limit_is_refused(limit_contract) -> None:  # type: ignore[no-untyped-def]
    rows = audit([("unclamped", _gpt_oss(swiglu_limit=None))], [1], [limit_contract])
    assert rows and not any(r.admitted for r in rows)
    assert "states no swiglu_limit" in (rows[0].reason or "")


def test_contract_without_a_limit_cannot_confirm_a_clamped_model(contracts) -> None:  # type: ignore[no-untyped-def]
    """aiter takes swigluoai but states no clamp: not a fast path for gpt-oss."""
    model = _gpt_oss()
    rows = [r for r in audit([("gpt-oss", model)], [1], contracts) if r.contract == "aiter_fused_moe"]
    assert rows and not any(r.admitted for r in rows)
    assert any("no swiglu_limit parameter" in m for r in rows for _, m in r.violations)


def _jamba(**extra: object) -> dict[str, object]:
    raw: dict[str, object] = {"model_type": "jamba", "hidden_size": 4096, "intermediate_size": 14336,
                              "num_experts": 16, "num_experts_per_tok": 2, "num_hidden_layers": 32,
                              "hidden_act": "silu", "torch_dtype": "bfloat16"}
    raw.update(extra)
    return raw


def test_jamba_counts_every_other_layer() -> None:
    model = parse_model_config(_jamba(expert_layer_period=2, expert_layer_offset=1))
    assert model.num_moe_layers == 16
    assert "expert_layer_period" in (model.source_of("num_moe_layers") or "")
    assert parse_model_config(_jamba()).num_moe_layers == 16  # the HF defaults (2, 1)
    assert parse_model_config(_jamba(expert_layer_period=4, expert_layer_offset=3)).num_moe_layers == 8
    assert parse_model_config(_jamba(expert_layer_period=1, expert_layer_offset=0)).num_moe_layers == 32


def test_jamba_memory_figures_follow_the_layer_count(contracts) -> None:  # type: ignore[no-untyped-def]
    half = parse_model_config(_jamba(intermediate_size=14000), source="jamba.json")  # 3500 per rank: padded
    every = dataclasses.replace(half, moe_layers=tuple(range(32)))
    a = [r for r in audit([("j", half)], [4], contracts) if r.admitted and r.extra_bytes]
    b = [r for r in audit([("j", every)], [4], contracts) if r.admitted and r.extra_bytes]
    assert a and len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.num_moe_layers == 16 and 2 * x.extra_bytes == y.extra_bytes


def test_rows_name_the_config_key_of_each_number(contracts) -> None:  # type: ignore[no-untyped-def]
    rows = audit([("gemma-4-26b-a4b", load_model_config("gemma-4-26b-a4b"))], [4], contracts)
    row = next(r for r in rows if r.contract == "vllm_cpu_grouped_gemm")
    assert row.sources["intermediate_size"] == "text_config.moe_intermediate_size"
    assert row.sources["num_experts"] == "text_config.num_experts"
    assert row.sources["hidden_size"] == "text_config.hidden_size"
    assert row.sources["num_moe_layers"].startswith("every layer")
    assert row.to_json()["sources"] == row.sources


def test_swiglu_parameters_do_not_multiply_or_skip_other_activations(tmp_path: Path) -> None:
    """A merged contract (activation in {silu, ..., swigluoai} plus a swiglu_limit range):
    a silu model gets one row per variant and TP, not a skipped pair."""
    text = (CONTRACTS / "vllm_cpu_grouped_gemm.moe").read_text(encoding="utf-8").replace(
        "param dtype: enum {bfloat16, float16, float32}",
        "param dtype: enum {bfloat16, float16, float32}\nparam swiglu_limit: int in 1..100\n"
        # tied to the activation (a parameter nothing reads or ties is LC309, issue 39)
        "admit activation != swigluoai or swiglu_limit == 7 : \"the kernel clamps swigluoai at 7\"")
    path = tmp_path / "merged.moe"
    path.write_text(text, encoding="utf-8")
    merged, diags, _ = load(str(path))
    assert merged is not None, diags
    report = audit_report([("mixtral-8x7b", load_model_config("mixtral-8x7b"))], [1, 2], [merged])
    assert not report.skipped
    plain = audit([("mixtral-8x7b", load_model_config("mixtral-8x7b"))], [1, 2],
                  [load(str(CONTRACTS / "vllm_cpu_grouped_gemm.moe"))[0]])
    assert len(report.rows) == len(plain)
    assert [r.admitted for r in report.rows] == [r.admitted for r in plain]
    assert all(r.variant["swiglu_limit"] == 1 for r in report.rows)  # shown, not hidden
    # and gpt-oss (swigluoai, limit 7) reads its limit from the config
    rows = audit([("gpt-oss", _gpt_oss())], [1], [merged])
    assert rows and all(r.params["swiglu_limit"] == 7 and "swiglu_limit" not in r.variant for r in rows)
