"""`layoutc run`'s "ok" means the layer matches transformers' own module (issue 39 items 5-7).

- Clamped SwiGLU: hy_v4 and deepseek_v4 (transformers' HYV4Experts / DeepseekV4Experts clamp
  gate and up at config.json's swiglu_limit 10) on a contract whose glue computes unclamped
  silu are refused (LR142, naming the key) before anything loads; with that check taken out,
  run's scaled inputs reach the clamp and the row is a MISMATCH, not "ok".
- Quantized rows are compared with transformers' own block loaded from the checkpoint
  (quant_run/oracle.py), not with a loop of the declared format: an FP8 checkpoint with gate
  and up swapped in the format file MISMATCHes; a block that scales its routed output by 2.5
  outside the experts is not "ok"; a row whose kernel side runs no kernel is "unchecked".
- The quantized path refuses a contract text that is not the generated module's own
  (SOURCE_SHA256, LR165).

Checkpoints: tests/support/family_models.py and examples/make_checkpoint.py (tests/support/quant_pack.py), hidden
64 or 128, I 128 or 256, 4 experts, one layer, so each run is a few seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.tiny_run import make as _make
from tests.support.tiny_run import run as _run


def _clamped(tmp_path: Path, family: str) -> str:
    from tests.support.family_models import make

    extra: dict[str, Any] = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
    if family == "deepseek_v4":  # its first layer hash-routed (tid2eid), the second top-k routed
        extra.update(mlp_layer_types=["hash_moe", "moe"], layer_types=["sliding_attention"] * 2)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return make(str(tmp_path / family), family, **extra)


@pytest.mark.slow  # builds the models with transformers
@pytest.mark.transformers
@pytest.mark.parametrize("family", ["hy_v4", "deepseek_v4"])
def test_a_clamp_the_glue_does_not_compute_is_refused(tmp_path: Path, family: str) -> None:
    """Exit 2, LR142 naming swiglu_limit, before any weight is read (on the old code: exit 0,
    every row "ok", run's 16 tokens never reaching the clamp)."""
    folder = _clamped(tmp_path, family)
    assert json.loads((Path(folder) / "config.json").read_text())["swiglu_limit"] == 10.0
    code, out, err = _run(folder, "--tp", "1,2")
    assert code == 2, (out, err)
    assert "error[LR142]: config.json's swiglu_limit = 10" in err and "declares no swiglu_limit_milli" in err, err
    assert out == ""


@pytest.mark.kernel
@pytest.mark.transformers
def test_a_missing_clamp_is_a_mismatch_at_run_s_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With LR142 taken out, hy_v4 on vllm_cpu_grouped_gemm (unclamped silu) MISMATCHes against
    transformers' HYV4MoE: the second half of run's inputs reaches the clamp (its scale is
    reported); on the first half alone (the old inputs) the same row matched."""
    from layoutc.tools import run as R

    folder = _clamped(tmp_path, "hy_v4")
    monkeypatch.setattr(R, "check_activation", lambda *a, **k: None)
    code, out, err = _run(folder, "--tp", "1,2", "--format", "json")
    assert code == 1, (out, err)
    rows = json.loads(out)["rows"]
    assert [r["tp_size"] for r in rows] == [1, 2]
    for r in rows:
        assert r["independent"] and not r["matched"] and r["result"] == "MISMATCH", r
        assert r["rel_error"] > 0.1 and r["input_scale"] > 4, r
        assert r["reference"].startswith("transformers HYV4MoE (from_pretrained"), r


def _swapped_format(path: Path) -> Path:
    from layoutc.tools.checkpoints.formats import FORMATS, format_json

    fmt = FORMATS["qwen3_moe"]
    path.write_text(json.dumps(format_json(dataclasses.replace(fmt, gate=fmt.up, up=fmt.gate))))
    return path


@pytest.mark.slow
@pytest.mark.kernel  # int4pack
@pytest.mark.transformers
@pytest.mark.parametrize("quant", ["fp8_tensor", "gptq4"])
def test_a_swapped_gate_and_up_in_the_format_file_is_not_ok(tmp_path: Path, quant: str) -> None:
    """The format file swaps gate_proj and up_proj. FP8 per-tensor (no kernel: the declared-format
    loop is both sides) and GPTQ int4 (int4pack) are both stopped by the float32 proof against
    transformers' block over the checkpoint's own names (LR143, gate / up named); unswapped, the int4pack rows are ok and the FP8 rows unchecked.
    (Old code: FP8 swapped exit 0, every row "ok".)"""
    flags = ("--quant", "gptq4", "--group-size", "64") if quant == "gptq4" else ("--quant", quant)
    folder = _make(tmp_path / "ckpt", *flags)
    code, out, err = _run(str(folder), "--tp", "1,2", "--format", "json")
    assert code == (0 if quant == "gptq4" else 1), (out, err)
    for r in json.loads(out)["rows"]:
        assert r["matched"] and r["independent"] and r["kernel_ran"] == (quant == "gptq4"), r
        assert r["result"] == "ok" if quant == "gptq4" else r["result"].startswith("unchecked: no kernel ran"), r
    code, out, err = _run(
        str(folder), "--tp", "1,2", "--format", "json", "--format-file", str(_swapped_format(tmp_path / "swapped.json"))
    )
    # the format file is proved in float32 over the dequantized weights before any row (issue 45
    # F2a): LR143 naming the swapped field, never a row
    assert code == 2, (out, err)
    (diag,) = json.loads(out)
    assert diag["code"] == "LR143" and "The field at fault is gate / up" in diag["message"], diag


@pytest.mark.slow
@pytest.mark.kernel
@pytest.mark.transformers
@pytest.mark.parametrize("quant", ["fp8_tensor", "gptq4"])
def test_a_block_scaling_its_routed_output_outside_the_experts_is_not_ok(
    tmp_path: Path, quant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A family whose sparse-MoE block multiplies the routed output by 2.5 after its experts
    (stood in for by transformers' Qwen3MoeSparseMoeBlock with its forward so wrapped): the
    kernel does not scale, so the row MISMATCHes (old code: "ok", its reference never ran the
    block)."""
    import transformers.models.qwen3_moe.modeling_qwen3_moe as q

    flags = ("--quant", "gptq4", "--group-size", "64") if quant == "gptq4" else ("--quant", quant)
    folder = _make(tmp_path / "ckpt", *flags)
    real = q.Qwen3MoeSparseMoeBlock.forward
    monkeypatch.setattr(q.Qwen3MoeSparseMoeBlock, "forward", lambda self, h: real(self, h) * 2.5)
    code, out, err = _run(str(folder), "--tp", "1,2", "--format", "json")
    assert code == 1, (out, err)
    for r in json.loads(out)["rows"]:
        assert not r["ok"] and not r["matched"] and r["result"].startswith("MISMATCH"), r
        assert 0.5 < r["rel_error"] < 0.7, r  # |1 - 2.5| / 2.5 = 0.6


@pytest.mark.slow
@pytest.mark.transformers
def test_a_module_compiled_from_another_text_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference-only route decodes with contracts/marlin_moe_fp8.moe; a generated module whose
    SOURCE_SHA256 is not that text's is refused by name (LR165, exit 2), not decoded with the
    other text."""
    import layoutc_generated.marlin_moe_fp8 as mod

    folder = _make(tmp_path / "ckpt", "--quant", "fp8_block")
    monkeypatch.setattr(mod, "SOURCE_SHA256", "0" * 64)
    code, out, err = _run(str(folder), "--tp", "1")
    assert code == 2, (out, err)
    assert "error[LR165]: contract marlin_moe_fp8: " in err and "SOURCE_SHA256 000000000000" in err, err


def test_check_source_compares_the_module_s_text(tmp_path: Path) -> None:
    """padded.check_source: the text whose sha256 is the module's SOURCE_SHA256 is returned; one
    byte more is LR165."""
    import hashlib
    import types

    from layoutc.tools.quant_run.padded import check_source
    from layoutc.tools.runplan import RunError

    text = "contract x {}\n"
    path = tmp_path / "x.moe"
    path.write_text(text)
    mod = types.SimpleNamespace(
        CONTRACT="x", __name__="layoutc_generated.x", SOURCE_SHA256=hashlib.sha256(text.encode()).hexdigest()
    )
    assert check_source(mod, path) == text
    path.write_text(text + " ")
    with pytest.raises(RunError) as exc:
        check_source(mod, path)
    assert exc.value.code == "LR165"


def test_clamp_settings_read_every_clamp_key() -> None:
    """clamp_settings: swiglu_limit / swiglu_alpha as numbers, a per-layer swiglu_limits entry (0 and
    null: none), swiglu_limits_shared (a shared expert only) ignored, an unknown clamp-like key
    unreadable (None), hidden_act, null and false values ignored."""
    from layoutc.tools.checkpoints.activation import clamp_settings

    cfg = {
        "hidden_act": "silu",
        "swiglu_limit": 10,
        "swiglu_alpha": None,
        "swiglu_limits": [0, 7.5, None],
        "swiglu_limits_shared": [16, 16, 16],
        "expert_clamp_value": 3.0,
        "clip_qkv": 8,
        "use_swiglu_ffn": False,
    }
    assert clamp_settings(cfg, 0) == {"swiglu_limit": 10.0, "expert_clamp_value": None}
    assert clamp_settings(cfg, 1) == {"swiglu_limit": 10.0, "swiglu_limits": 7.5, "expert_clamp_value": None}
    assert clamp_settings({**cfg, "use_swiglu_ffn": True}, 0)["use_swiglu_ffn"] is None  # on: unknown, refused


def test_check_activation_holds_each_key_to_the_glue_constant() -> None:
    """check_activation on vllm_cpu_grouped_gemm (glue vllm_cpu_moe): swigluoai's limit 7 (its
    declared constant swiglu_limit_milli 7000) passes and 8 is LR142 when the format does not
    hand the key to plan(); silu with any swiglu_limit, and an unknown clamp key, are LR142;
    null and absent keys pass."""
    import dataclasses
    import importlib
    import types

    from layoutc.tools.checkpoints.activation import check_activation
    from layoutc.tools.checkpoints.formats import FORMATS
    from layoutc.tools.runplan import RunError

    mod = importlib.import_module("layoutc_generated.vllm_cpu_grouped_gemm")
    fmt = dataclasses.replace(FORMATS["gpt_oss"], swiglu=None)

    def check(activation: str, cfg: dict[str, Any]) -> str:
        moe = types.SimpleNamespace(format=fmt, activation=activation, text_config=cfg)
        try:
            check_activation(moe, mod, "vllm_cpu_grouped_gemm", [0])
        except RunError as exc:
            return f"{exc.code}: {exc}"
        return "passed"

    assert check("swigluoai", {"swiglu_limit": 7.0, "swiglu_alpha": 1.702}) == "passed"
    assert check("swigluoai", {"swiglu_limit": 8.0}).startswith("LR142: config.json's swiglu_limit = 8")
    assert "declares swiglu_limit_milli 7000" in check("swigluoai", {"swiglu_limit": 8.0})
    assert check("silu", {"swiglu_limit": 10}).startswith("LR142: config.json's swiglu_limit = 10")
    assert check("silu", {"moe_clamp": 5}).startswith("LR142: config.json's moe_clamp = 5 may change")
    assert check("silu", {"swiglu_limit": None}) == check("silu", {}) == "passed"


@pytest.mark.kernel  # int4pack
@pytest.mark.transformers
@pytest.mark.parametrize("flag", ["--no-transformers", "--no-from-pretrained"])
def test_a_quantized_row_without_transformers_block_is_unchecked(tmp_path: Path, flag: str) -> None:
    """GPTQ int4 on int4pack (a real kernel) compared with a reference built from the declared
    format: matched, but independent false, "unchecked: ..." and exit 1."""
    folder = _make(tmp_path / "ckpt", "--quant", "gptq4", "--group-size", "64")
    code, out, err = _run(str(folder), "--tp", "1", "--format", "json", flag)
    assert code == 1, (out, err)
    report = json.loads(out)
    assert not report["ok"] and len(report["unchecked"]) == 1, report
    (r,) = report["rows"]
    assert r["matched"] and r["kernel_ran"] and not r["independent"] and not r["ok"], r
    assert r["result"] == f"unchecked: no independent reference ({flag}): a reference built from the declared format"
