"""`layoutc run` on a compressed-tensors MXFP4 checkpoint (`mxfp4-pack-quantized`, issue 45 item 5)
whose experts were packed by compressed-tensors' own MXFP4PackedCompressor (the compressor
llm-compressor saves with), its scales computed by compressed-tensors' calculate_qparams for
the MXFP4A16 preset: each rank's tensors come through contract marlin_moe_ct_mxfp4's generated
loaders (bit-equal to vLLM 0.32's loading in tests/conformance/test_vllm_ct_mxfp4_loading.py),
decoded by its decode and run through transformers' experts at tp 1, 2, 4, 8, against
transformers' own block over the independent dequantizer. vLLM 0.32 has no CPU experts class for
this method (MarlinExperts, CUDA), so the rows are reference-only ("unchecked"): no kernel ran.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from layoutc.tools.checkpoints.formats import FormatError
from layoutc.tools.checkpoints.quant.config import read_quantization

ROOT = Path(__file__).resolve().parents[2]


def _ct_config(ignore: list[str]) -> dict[str, Any]:
    """config.json's quantization_config as compressed-tensors 0.17 writes the MXFP4A16 preset."""
    from compressed_tensors.config import CompressionFormat
    from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme

    scheme = preset_name_to_scheme("MXFP4A16", ["Linear"])
    weights = json.loads(scheme.weights.model_dump_json())
    return {"quant_method": "compressed-tensors", "format": CompressionFormat.mxfp4_pack_quantized.value,
            "quantization_status": "compressed", "ignore": ignore, "kv_cache_scheme": None,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                          "output_activations": None,
                                          "format": CompressionFormat.mxfp4_pack_quantized.value}}}


def ct_mxfp4_checkpoint(out: Path, intermediate: int = 1024) -> Path:
    """A qwen3_moe checkpoint (examples/make_checkpoint.py, float32) whose routed experts are
    rewritten by compressed-tensors' MXFP4PackedCompressor."""
    import torch
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams
    from safetensors.torch import load_file, save_file

    spec = importlib.util.spec_from_file_location("make_checkpoint", ROOT / "examples" / "make_checkpoint.py")
    assert spec is not None and spec.loader is not None
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    assert maker.main([str(out), "--layers", "1", "--experts", "4", "--intermediate", str(intermediate),
                       "--dtype", "float32"]) == 0
    scheme = preset_name_to_scheme("MXFP4A16", ["Linear"])
    tensors = load_file(str(out / "model.safetensors"))
    packed: dict[str, torch.Tensor] = {}
    for name, w in tensors.items():
        if ".mlp.experts." not in name:
            packed[name] = w
            continue
        groups = w.reshape(w.shape[0], -1, 32)
        scale, zero = calculate_qparams(groups.amin(-1), groups.amax(-1), scheme.weights)
        stored = MXFP4PackedCompressor.compress({"weight": w, "weight_scale": scale, "weight_zero_point": zero},
                                                scheme)
        module = name.removesuffix(".weight")
        packed.update({f"{module}.{k}": v.contiguous() for k, v in stored.items()})
    save_file(packed, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    keep = sorted(n.removesuffix(".weight") for n, t in packed.items() if n.endswith(".weight") and t.dim() == 2)
    config["quantization_config"] = _ct_config(keep)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def test_reader_declares_mxfp4_pack_quantized() -> None:
    config = {"model_type": "qwen3_moe", "num_hidden_layers": 1, "num_experts": 4, "hidden_size": 256,
              "moe_intermediate_size": 1024, "num_experts_per_tok": 2, "hidden_act": "silu", "quantization_config": _ct_config([])}
    scheme = read_quantization(config)
    assert scheme is not None and (scheme.name, scheme.method, scheme.group_size) == ("mxfp4_ct", "compressed-tensors",
                                                                                        32)
    assert [t.suffix for t in scheme.tensors] == [".weight_packed", ".weight_scale"]
    bad = json.loads(json.dumps(config))
    bad["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 16
    with pytest.raises(FormatError) as err:
        read_quantization(bad)
    assert err.value.code == "LR150" and "_is_mxfp4" in str(err.value)


def test_audit_takes_it_on_the_compressed_tensors_method_contract_only() -> None:
    from layoutc.tools.audit import audit_report, load_contracts
    from layoutc.tools.hfconfig import parse_model_config

    raw = json.loads((ROOT / "layoutc" / "tools" / "models" / "qwen3-30b-a3b.json").read_text())  # I 768
    raw["quantization_config"] = _ct_config(["lm_head"])
    loaded, problems = load_contracts([str(ROOT / "contracts")])
    assert problems is None, problems
    vllm = [c for c in loaded if all(m.engine != "sglang" for m in c.models)]
    rep = audit_report([("m", parse_model_config(raw, source="ct-mxfp4"))], [1, 2, 4, 8], vllm)
    rows = {(r.contract, r.tp_size): (r.admitted, r.intermediate_size_per_partition_padded) for r in rep.rows}
    # 768 / 8 = 96: whole 32-groups at every tp, nothing padded
    assert rows == {("marlin_moe_ct_mxfp4", tp): (True, 768 // tp) for tp in (1, 2, 4, 8)}, rows
    skipped = {s.contract: s.reason for s in rep.skipped}
    assert "quant_method 'mxfp4'" in skipped["vllm_cpu_mxfp4_moe"], skipped["vllm_cpu_mxfp4_moe"]


@pytest.mark.slow
@pytest.mark.transformers
def test_run_compressed_tensors_mxfp4_through_the_contracts_loaders_at_tp_1_2_4_8(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from layoutc.cli import main

    folder = ct_mxfp4_checkpoint(tmp_path / "ct")
    capsys.readouterr()
    code = main(["run", str(folder), "--tp", "1,2,4,8", "--dtype", "float32", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert report["quantization"] == "mxfp4_ct" and not report["refused"], report
    assert [(r["tp_size"], r["intermediate_size_per_partition_padded"]) for r in report["rows"]] == \
        [(1, 1024), (2, 512), (4, 256), (8, 128)]
    for r in report["rows"]:
        assert "marlin_moe_ct_mxfp4's loaders" in r["kernel"], r["kernel"]
        assert r["independent"] and r["matched"] and r["rel_error"] < 1e-5, r
        assert not r["kernel_ran"] and r["result"].startswith("unchecked: no kernel ran"), r
    assert code == 1  # reference-only rows are unchecked (docs/verification.md)
