"""`layoutc run` on the families of issue 45 items 2, 4 and 6: non-gated relu2 experts (Nemotron-H,
transformers' NemotronHMoE), separate fused gate and up (step3p7), FP8 releases of proposed families,
and the public families built locally. Checkpoints: tests/support/family_models.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tools.test_run_families import _require, _run

pytestmark = [pytest.mark.kernel, pytest.mark.transformers]




def test_nemotron_h_non_gated_proved_then_refused_by_name(tmp_path: Path) -> None:
    """Nemotron-H's experts are up_proj -> relu2 -> down_proj with no gate (NemotronHExperts): the
    proposal states them (gated false), is proved against transformers' own NemotronHMoE block, and
    run refuses them by name (LR148: no glue computes a non-gated activation). Before: LR101."""
    _require()
    from tests.support.family_models import make

    folder = make(str(tmp_path / "nemotron_h"), "nemotron_h")
    written = tmp_path / "format.json"
    code, out, err = _run(folder, "--tp", "1,2", "--write-format", str(written))
    assert code == 2, (out, err)
    assert "error[LR148]" in err and "non-gated" in err and "relu2" in err, err
    assert "proved on layer 1 against transformers NemotronHMoE" in err, err
    assert "_supports_no_act_and_mul" in err, err
    fmt = json.loads(written.read_text())
    assert fmt["gated"] is False and fmt["gate"] is None and fmt["up"] == "{e}.up_proj.weight", fmt
    # the written format reads back, and the same refusal follows from it alone
    code, out, err = _run(folder, "--tp", "1", "--format-file", str(written))
    assert code == 2 and "error[LR148]" in err, (out, err)


def test_nemotron_h_proof_fails_on_another_activation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The proof is against the block, not the declaration: an up projection read with relu in place
    of relu2 agrees with no candidate (LR117)."""
    _require()
    import torch.nn.functional as F

    from layoutc.tools.checkpoints import reference
    from tests.support.family_models import make

    folder = make(str(tmp_path / "nemotron_h"), "nemotron_h")
    monkeypatch.setattr(reference, "_act_alone", lambda h, moe: F.relu(h))
    code, out, err = _run(folder, "--tp", "1")
    assert code == 2 and "error[LR117]" in err, (out, err)


def test_non_gated_format_file_checked(tmp_path: Path) -> None:
    """A non-gated format names its up projection alone: a gate beside gated false is LR103."""
    from layoutc.tools.checkpoints.formats import FormatError, load_format_file

    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "x",
                "layer_prefix": "model.layers.{layer}.",
                "experts": "mlp.experts.",
                "fused": False,
                "gated": False,
                "gate": "{e}.gate_proj.weight",
                "up": "{e}.up_proj.weight",
                "down": "{e}.down_proj.weight",
            }
        )
    )
    with pytest.raises(FormatError, match="non-gated"):
        load_format_file(str(path))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_step3p7_separate_fused_gate_up_proposed_and_run(tmp_path: Path, dtype: str) -> None:
    """step3p7 keeps three fused 3-D tensors per MoE layer (moe.gate_proj, moe.up_proj, moe.down_proj):
    proposed as separate fused gate and up, proved against Step3p7SparseMoeBlock, and every row at
    tp 1, 2, 4 matches it. Before: LR101 "no layer holds two 3-D tensors"."""
    _require()
    from tests.support.public_family_models import make

    folder = make(str(tmp_path / "step3p7"), "step3p7", dtype)
    written = tmp_path / "format.json"
    code, out, err = _run(folder, "--tp", "1,2,4", "--format", "json", "--write-format", str(written))
    assert code == 0, (out, err)
    report = json.loads(out)
    assert [r["layer"] for r in report["rows"]] == [1, 1, 1]
    assert all(r["ok"] and r["independent"] for r in report["rows"]), report["rows"]
    assert "Step3p7SparseMoeBlock" in report["rows"][0]["reference"]
    # the proof built layer 1 before the layer's timing window: that build is not the window's to subtract
    assert all(f["reference_ms"] >= 0 and f["reference_build_ms"] >= 0 for f in report["layers"]), report["layers"]
    fmt = json.loads(written.read_text())
    assert (fmt["fused"], fmt["gate"], fmt["up"], fmt["gate_up"]) == (
        True,
        "moe.gate_proj.weight",
        "moe.up_proj.weight",
        None,
    ), fmt


def _olmoe_fp8(tmp_path: Path) -> str:
    from tests.support.family_models import make
    from tests.support.public_family_models import fp8_block

    # hidden and intermediate whole 128-blocks: marlin_moe_fp8's loaders pad the reference rows
    return fp8_block(
        make(
            str(tmp_path / "olmoe-fp8"),
            "olmoe",
            "bfloat16",
            hidden_size=128,
            moe_intermediate_size=256,
            intermediate_size=256,
        )
    )


def test_fp8_release_of_a_proposed_family_is_proved_on_the_dequantized_weights(tmp_path: Path) -> None:
    """An FP8 block release of OLMoE (no built-in format): the format is proposed from the names and
    proved on the weights dequantized from F8_E4M3 + weight_scale_inv against transformers' own
    OlmoeSparseMoeBlock, then every row matches that block. Before: LR102 "moe_layers 'tensors'
    needs the checkpoint's tensor names"."""
    _require()
    folder = _olmoe_fp8(tmp_path)
    code, out, err = _run(folder, "--tp", "1,2", "--format", "json")
    assert (
        "proved on layer 0 over the weights dequantized from fp8_block against transformers OlmoeSparseMoeBlock" in err
    ), err
    report = json.loads(out)
    rows = report["rows"]
    assert [(r["layer"], r["tp_size"]) for r in rows] == [(0, 1), (0, 2), (1, 1), (1, 2)], report
    # no FP8 kernel runs on this CPU: the rows are reference-only ("unchecked", exit 1), but each
    # matched transformers' block, loaded by transformers from the checkpoint
    assert all(r["matched"] and r["independent"] for r in rows), rows
    assert code == 1 and not report["refused"], report


def test_fp8_proof_refuses_a_wrong_gate_up_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The proof decides: offered only the proposal with gate and up swapped, run refuses it (LR117)."""
    _require()
    from layoutc.tools.checkpoints import propose as P

    folder = _olmoe_fp8(tmp_path)
    real = P.propose
    monkeypatch.setattr(P, "propose", lambda config, shapes: (real(config, shapes)[0][1:], ""))
    code, out, err = _run(folder, "--tp", "1")
    assert code == 2 and "error[LR117]" in err and "up_proj.weight, transposed=False: rel error" in err, (out, err)


def test_qwen3_5_fused_experts_on_disk_with_grouped_mtp_experts(tmp_path: Path) -> None:
    """Qwen3.5/3.6 releases store the routed experts fused (experts.gate_up_proj, experts.down_proj) and
    the MTP layer's experts grouped the same way under mtp.: the format is proposed from the decoder
    layers, the MTP tensors are left alone, and every row matches Qwen3_5MoeSparseMoeBlock."""
    _require()
    from tests.support.public_family_models import qwen3_5_fused_mtp

    folder = qwen3_5_fused_mtp(str(tmp_path / "qwen3_5"))
    code, out, err = _run(folder, "--tp", "1,2,4", "--format", "json")
    assert code == 0, (out, err)
    rows = json.loads(out)["rows"]
    assert sorted({r["layer"] for r in rows}) == [0, 1] and len(rows) == 6
    assert all(r["ok"] and "Qwen3_5MoeSparseMoeBlock" in r["reference"] for r in rows), rows
    assert "fused model.layers.{layer}.mlp.experts.gate_up_proj" in err, err


def test_minimax_m3_swigluoai_halves_runs_on_the_interleaved_kernel(tmp_path: Path) -> None:
    """MiniMax-M3's experts compute swigluoai (alpha, clamp, up + 1) on [gate | up] halves, while its
    config.json says hidden_act silu: the proposal states swigluoai from swiglu_alpha / swiglu_limit,
    the contract's loaders interleave the halves for vLLM's kernel, and every row matches
    MiniMaxM3VLSparseMoeBlock with inputs past the clamp. routed_scaling_factor is 1 here: the block's
    scale outside the experts is the block-level format's (issue 45 item 1). Before: LR142 (silu
    with an alpha the glue does not compute)."""
    _require()
    from tests.support.family_models import make

    folder = make(
        str(tmp_path / "mm3"),
        "minimax_m3_vl_text",
        intermediate_size=32,
        routed_scaling_factor=1.0,
        bos_token_id=1,
        eos_token_id=2,
    )
    written = tmp_path / "format.json"
    code, out, err = _run(folder, "--tp", "1,2,4", "--format", "json", "--write-format", str(written))
    assert code == 0, (out, err)
    rows = json.loads(out)["rows"]
    assert len(rows) == 6 and all(r["ok"] and "swiglu_limit 7" in r["input_reach"] for r in rows), rows
    fmt = json.loads(written.read_text())
    assert (fmt["fixed_activation"], fmt["swiglu"], fmt["gate_up_layout"]) == (
        "swigluoai",
        ["swiglu_alpha", "swiglu_limit"],
        "halves",
    ), fmt


def test_deepseek_v4_flat_namespace_is_read_and_refused_for_its_clamp(tmp_path: Path) -> None:
    """DeepSeek-V4's release has no model. prefix (layers.N.ffn.experts.E.w1.weight): the proposal reads
    it, and run refuses the family by its real cause, the swiglu_limit clamp DeepseekV4Experts computes
    and no glue does (LR142), before anything is loaded."""
    _require()
    from tests.support.family_models import make
    from tests.support.public_family_models import flat_namespace

    folder = flat_namespace(make(str(tmp_path / "dsv4"), "deepseek_v4"))
    code, _out, err = _run(folder, "--tp", "1")
    assert code == 2 and "error[LR142]" in err and "swiglu_limit = 10" in err and "DeepseekV4Experts" in err, err


@pytest.mark.parametrize("intermediate", [1856, 2688])
def test_nemotron_3_sizes_are_proved_then_refused_as_non_gated(tmp_path: Path, intermediate: int) -> None:
    """Nemotron-3 Nano and Super's expert intermediate sizes (1856, 2688; NVIDIA's configs): proved against
    NemotronHMoE, refused by name (LR148)."""
    _require()
    from tests.support.family_models import make

    folder = make(
        str(tmp_path / "nemotron3"),
        "nemotron_h",
        moe_intermediate_size=intermediate,
        moe_shared_expert_intermediate_size=64,
    )
    code, _out, err = _run(folder, "--tp", "1,2,4")
    assert code == 2 and "error[LR148]" in err and "proved on layer 1 against transformers NemotronHMoE" in err, err


def test_latent_moe_is_refused_naming_the_latent_size(tmp_path: Path) -> None:
    """Nemotron-3 Super's latent MoE (moe_latent_size: fc1_latent_proj / fc2_latent_proj around the experts):
    the experts' input size is the latent one, and the refusal says so (LR101), not "no key"."""
    _require()
    from tests.support.family_models import make

    folder = make(str(tmp_path / "latent"), "nemotron_h", moe_latent_size=32)
    code, _out, err = _run(folder, "--tp", "1")
    assert code == 2 and "error[LR101]" in err and "moe_latent_size = 32" in err and "latent MoE" in err, err


def test_kimi_k3_latent_experts_are_named_from_its_published_config() -> None:
    """Kimi-K3 (moonshotai/Kimi-K3 config.json: text_config hidden_size 7168, routed_expert_hidden_size 3584,
    896 experts, top-16, moe_intermediate_size 3072; transformers 5.19 has no kimi_k3): experts whose input
    is the latent size are named as a latent MoE, at a tenth of the published sizes."""
    from layoutc.tools.checkpoints.propose import propose

    config = {
        "model_type": "kimi_k3",
        "text_config": {
            "model_type": "kimi_linear",
            "hidden_size": 716,
            "routed_expert_hidden_size": 358,
            "num_experts": 8,
            "num_experts_per_token": 2,
            "moe_intermediate_size": 307,
            "num_hidden_layers": 2,
            "hidden_act": "silu",
        },
    }
    shapes: dict[str, tuple[int, ...]] = {
        f"language_model.model.layers.1.block_sparse_moe.experts.{e}.{p}.weight": s
        for e in range(8)
        for p, s in (("w1", (307, 358)), ("w3", (307, 358)), ("w2", (358, 307)))
    }
    found, why = propose(config, shapes)
    assert not found and "text_config.routed_expert_hidden_size = 358" in why and "latent MoE" in why, why


def test_fp8_release_of_non_gated_experts_is_refused_by_name(tmp_path: Path) -> None:
    """Nemotron-3's FP8 releases: the quantized runner reads gated experts only, so the non-gated proposal
    is refused LR148 before anything is dequantized (the dequantizer would look for the absent gate).
    Before this issue: LR101 (nothing proposed)."""
    _require()
    from tests.support.family_models import make
    from tests.support.public_family_models import fp8_block

    folder = fp8_block(
        make(
            str(tmp_path / "nh-fp8"),
            "nemotron_h",
            "bfloat16",
            hidden_size=128,
            moe_intermediate_size=256,
            moe_shared_expert_intermediate_size=64,
        )
    )
    code, _out, err = _run(folder, "--tp", "1")
    assert code == 2 and "error[LR148]" in err and "quantized runner" in err, err
