"""`layoutc run` streams its reference one layer at a time (issue 44), on heterogeneous configs,
and falls back to the class config.json names when AutoModelForCausalLM has none (issue 45 item 3).

- Peak memory (the child's VmHWM, tests/support/robust_helpers.py PEAK_SCRIPT) of a medium-width
  Qwen3-MoE checkpoint (hidden 1024, moe_intermediate 384, 32 experts, bf16, written by
  bench/wide_checkpoint.py through transformers' own revert_weight_conversion) is the same at 6
  layers as at 2. Old code: `from_pretrained` of every layer in float32, 6 layers peak higher.
- `--layer-range` on gemma-4 (its sliding / full `layer_types`) and on two hybrid families
  (Qwen3-Next's linear / full attention layers, Jamba's expert period): exactly the MoE layers
  in the range run, each against transformers' own module of that layer. Old code: no option.
- A Qwen3-VL-MoE checkpoint (`Qwen3VLMoeForConditionalGeneration`, which AutoModelForCausalLM
  does not map) is proved and checked against its own block, built from config.json's
  `architectures`. Old code: LR118 ("transformers could not load the model").
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.robust_helpers import PEAK_SCRIPT

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.transformers, pytest.mark.kernel]


def _wide() -> Any:
    spec = importlib.util.spec_from_file_location("wide_checkpoint", ROOT / "bench" / "wide_checkpoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _peak_run(*argv: str) -> tuple[int, dict[str, Any], int, str]:
    """`layoutc run ARGV --format json` in a child: (exit code, the JSON, VmHWM KiB, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, "run", *argv, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
    )
    peak = [int(line.split("=")[1]) for line in proc.stderr.splitlines() if line.startswith("peak_kib=")]
    assert peak, proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout), peak[0], proc.stderr


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_layers(tmp_path: Path) -> None:
    wide = _wide()
    peaks = {}
    for layers in (2, 6):
        folder = str(tmp_path / f"q{layers}")
        wide.write(folder, wide.config_for("qwen3_moe", layers, width=0.5, experts=32))
        code, data, peak, err = _peak_run(folder, "--tp", "1,2")
        assert code == 0, err[-3000:]
        assert [r["layer"] for r in data["rows"]] == [n for n in range(layers) for _ in (1, 2)]
        assert all(r["result"] == "ok" and r["independent"] for r in data["rows"]), data["rows"]
        assert [f["layer"] for f in data["layers"]] == list(range(layers)), data["layers"]
        assert all(f["reference_build_ms"] > 0 and f["peak_mib"] > 0 for f in data["layers"]), data["layers"]
        assert "ETA" in err, err[-2000:]
        # the rows reset the kernel's peak per rank: the layers' own peaks (over those resets) count too
        peaks[layers] = max(peak, max(int(f["peak_mib"] * 1024) for f in data["layers"]))
    # one layer's float32 reference here is 151 MB; 4 more layers held would add over 600 MB
    assert peaks[6] <= 1.10 * peaks[2], peaks


def _rows(data: dict[str, Any]) -> list[tuple[int, int]]:
    return [(r["layer"], r["tp_size"]) for r in data["rows"]]


def test_layer_range_on_gemma4_layer_types(tmp_path: Path) -> None:
    """gemma-4's text model at 6 layers (five sliding, one full): --layer-range 3:6 runs layers 3,
    4 and 5 (5 the full-attention one), each against transformers' Gemma4TextExperts of that layer."""
    wide = _wide()
    cfg = wide.config_for("gemma4", 6, width=0.05, experts=8)
    assert cfg["layer_types"][5] == "full_attention" and cfg["layer_types"][3] == "sliding_attention"
    folder = wide.write(str(tmp_path / "g"), cfg)
    code, data, _, err = _peak_run(folder, "--tp", "1,2", "--layer-range", "3:6")
    assert code == 0, err[-3000:]
    assert _rows(data) == [(3, 1), (3, 2), (4, 1), (4, 2), (5, 1), (5, 2)], data["rows"]
    assert all(r["result"] == "ok" and "Gemma4TextExperts" in r["reference"] for r in data["rows"]), data["rows"]
    code, data, _, err = _peak_run(folder, "--tp", "1", "--layer-range", "3:", "--layers", "1")
    assert code == 0 and _rows(data) == [(3, 1)], (err[-2000:], data["rows"])


@pytest.mark.parametrize("family", ["qwen3_next", "jamba"])
def test_layer_range_on_hybrid_families(tmp_path: Path, family: str) -> None:
    """Qwen3-Next (linear attention in layers 0-2, full in 3) and Jamba (experts every second
    layer from 1): --layer-range 2:4 runs the MoE layers there, against each layer's own block."""
    from tests.support.family_models import make

    extra: dict[str, Any] = {
        "qwen3_next": {
            "layer_types": ["linear_attention"] * 3 + ["full_attention"],
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
        },
        "jamba": {
            "expert_layer_period": 2,
            "expert_layer_offset": 1,
            "attn_layer_period": 4,
            "attn_layer_offset": 2,
            "mamba_d_state": 4,
            "mamba_d_conv": 2,
            "mamba_expand": 1,
            "mamba_dt_rank": 8,
        },
    }[family]
    folder = make(str(tmp_path / family), family, num_hidden_layers=4, **extra)
    code, data, _, err = _peak_run(folder, "--tp", "1,2", "--layer-range", "2:4")
    assert code == 0, err[-3000:]
    want = [(2, 1), (2, 2), (3, 1), (3, 2)] if family == "qwen3_next" else [(3, 1), (3, 2)]
    assert _rows(data) == want, data["rows"]
    block = {"qwen3_next": "Qwen3NextSparseMoeBlock", "jamba": "JambaSparseMoeBlock"}[family]
    assert all(r["result"] == "ok" and block in r["reference"] for r in data["rows"]), data["rows"]


def test_layer_range_outside_the_moe_layers_is_lr104(tmp_path: Path) -> None:
    from tests.support.family_models import make

    folder = make(
        str(tmp_path / "j"),
        "jamba",
        num_hidden_layers=4,
        expert_layer_period=2,
        expert_layer_offset=1,
        attn_layer_period=4,
        attn_layer_offset=2,
        mamba_d_state=4,
        mamba_d_conv=2,
        mamba_expand=1,
        mamba_dt_rank=8,
    )
    for bad in ("2:3", "4:2", "x", "3"):
        proc = subprocess.run(
            [sys.executable, "-m", "layoutc", "run", folder, "--layer-range", bad],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert proc.returncode == 2 and "error[LR104]" in proc.stderr and "--layer-range" in proc.stderr, (
            bad,
            proc.stderr[-2000:],
        )
        assert "Traceback" not in proc.stderr


def _qwen3_vl_moe(folder: Path) -> str:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    text = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 64,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 128,
        "max_position_embeddings": 128,
        "decoder_sparse_step": 1,
        "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3]},
    }
    vision = {
        "depth": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,
        "patch_size": 4,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 16,
        "deepstack_visual_indexes": [0],
    }
    config = tf.Qwen3VLMoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=False)
    model = tf.AutoModelForImageTextToText.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    model.config.dtype = "float32"
    model.save_pretrained(str(folder))
    return str(folder)


def test_a_vl_wrapper_is_checked_against_the_architectures_class(tmp_path: Path) -> None:
    """AutoModelForCausalLM maps no class to Qwen3VLMoeConfig; config.json's architectures names
    Qwen3VLMoeForConditionalGeneration, whose text layers hold Qwen3VLMoeTextSparseMoeBlock: the
    proposed format is proved on it and every row is ok against it."""
    import transformers as tf

    assert tf.Qwen3VLMoeConfig not in tf.AutoModelForCausalLM._model_mapping
    folder = _qwen3_vl_moe(tmp_path / "vl")
    code, data, _, err = _peak_run(folder, "--tp", "1,2")
    assert code == 0, err[-3000:]
    assert _rows(data) == [(0, 1), (0, 2), (1, 1), (1, 2)], data["rows"]
    assert all(r["result"] == "ok" and "Qwen3VLMoeTextSparseMoeBlock" in r["reference"] for r in data["rows"]), data[
        "rows"
    ]


def test_model_classes_order() -> None:
    """The classes tried: AutoModelForCausalLM's, then architectures', then the image-text Auto class's."""
    import transformers as tf

    from layoutc.tools.checkpoints.stream import model_classes

    vl = tf.Qwen3VLMoeConfig(architectures=["Qwen3VLMoeForConditionalGeneration"])
    assert [c.__name__ for _, c in model_classes(tf, vl)] == ["Qwen3VLMoeForConditionalGeneration"]
    q = tf.Qwen3MoeConfig(architectures=["Qwen3MoeForCausalLM"])
    assert [c.__name__ for _, c in model_classes(tf, q)] == ["Qwen3MoeForCausalLM"]
    q = tf.Qwen3MoeConfig(architectures=["NoSuchClass"])
    assert [c.__name__ for _, c in model_classes(tf, q)] == ["Qwen3MoeForCausalLM"]
