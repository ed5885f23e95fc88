"""Admission follows each quantization method's own rule (issue 45 item 5): the same block-FP8
[128, 128] bytes at intermediate 1408 are padded per rank (768 / 384 / 256 at tp 2 / 4 / 8) under
quant_method "fp8" (vLLM 0.32 Fp8MoEMethod: pad_tp_shard_to_weight_blocks; contract
marlin_moe_fp8) and refused under "compressed-tensors" (CompressedTensorsW8A8Fp8MoEMethod:
validate_fp8_block_shape_moe, "704 is not divisible by weight quantization block_n = 128";
contract marlin_moe_ct_fp8). `layoutc audit` and `layoutc run` pick the contract that models
the checkpoint's own method (layoutc/tools/checkpoints/quant/methods.py) and say the same.
vLLM's own methods are the oracle in tests/conformance/test_ct_fp8_admission.py.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from layoutc.tools.audit import audit_report, load_contracts
from layoutc.tools.checkpoints.quant.methods import left_out, method_of
from layoutc.tools.hfconfig import parse_model_config

ROOT = Path(__file__).resolve().parents[2]
QWEN3 = json.loads((ROOT / "layoutc" / "tools" / "models" / "qwen3-30b-a3b.json").read_text())
TPS = [1, 2, 4, 8]
_ARGS = {"num_bits": 8, "type": "float", "symmetric": True, "group_size": None, "actorder": None,
         "observer": "minmax", "observer_kwargs": {}}
#: llm-compressor's FP8_BLOCK preset (compressed-tensors 0.17 preset_name_to_scheme "FP8_BLOCK")
CT_BLOCK = {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "ignore": ["lm_head"], "kv_cache_scheme": None,
            "config_groups": {"group_0": {
                "targets": ["Linear"], "format": "float-quantized",
                "weights": {**_ARGS, "strategy": "block", "block_structure": [128, 128], "dynamic": False},
                "input_activations": {**_ARGS, "strategy": "group", "group_size": 128, "block_structure": None,
                                      "dynamic": True, "observer": None},
                "output_activations": None}}}
FP8_BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128],
             "modules_to_not_convert": ["lm_head"]}
CT_REFUSAL = "compressed-tensors block FP8 (CompressedTensorsW8A8Fp8MoEMethod) does not pad the TP shard"


@pytest.fixture(scope="module")
def contracts():  # type: ignore[no-untyped-def]
    loaded, problems = load_contracts([str(ROOT / "contracts")])
    assert problems is None, problems
    return [c for c in loaded if all(m.engine != "sglang" for m in c.models)]  # vLLM's audit, as the CLI's default


def _model(quant: dict[str, Any], intermediate: int = 1408):  # type: ignore[no-untyped-def]
    raw = copy.deepcopy(QWEN3)
    raw["quantization_config"] = quant
    raw["moe_intermediate_size"] = intermediate
    return parse_model_config(raw, source="qwen3-quant")


def _rows(rep: Any) -> dict[str, dict[int, tuple[bool, int | None, str | None]]]:
    out: dict[str, dict[int, tuple[bool, int | None, str | None]]] = {}
    for r in rep.rows:
        out.setdefault(r.contract, {})[r.tp_size] = (r.admitted, r.intermediate_size_per_partition_padded if r.admitted else None, r.reason)
    return out


def test_method_of_reads_the_models_targets() -> None:
    ct = ("vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe."
          "compressed_tensors_moe_w8a8_fp8:CompressedTensorsW8A8Fp8MoEMethod")
    assert method_of(ct) == "compressed-tensors"
    assert method_of("vllm.model_executor.layers.quantization.fp8:Fp8MoEMethod") == "fp8"
    assert method_of("vllm.model_executor.layers.fused_moe.experts.marlin_moe:MarlinExperts") is None
    assert method_of("vllm.model_executor.layers.quantization.fp8_extra:X") is None  # a module prefix, not a string one
    fp8 = [("vllm", "vllm.model_executor.layers.quantization.fp8:Fp8MoEMethod")]
    mine = [("vllm", ct)]
    assert set(left_out({"a": fp8, "b": mine}, "compressed-tensors")) == {"a"}
    assert set(left_out({"a": fp8, "b": mine}, "fp8")) == {"b"}
    # no contract models the checkpoint's own method: nothing is left out (CT NVFP4 on ModelOpt's)
    assert left_out({"a": fp8}, "compressed-tensors") == {}
    # another engine's contract for the own method does not leave this engine's out
    assert left_out({"a": fp8, "s": [("sglang", "sglang.srt.layers.quantization.compressed_tensors.x:Y")]},
                    "compressed-tensors") == {}


def test_audit_compressed_tensors_block_fp8_at_1408_is_refused_at_tp_2_4_8(contracts) -> None:  # type: ignore[no-untyped-def]
    rep = audit_report([("m", _model(CT_BLOCK))], TPS, contracts)
    rows = _rows(rep)
    assert set(rows) == {"marlin_moe_ct_fp8"}, rows
    got = rows["marlin_moe_ct_fp8"]
    assert got[1][:2] == (True, 1408), got
    for tp in (2, 4, 8):
        admitted, _, reason = got[tp]
        assert not admitted and reason is not None and CT_REFUSAL in reason, (tp, got[tp])
    skipped = {s.contract: s.reason for s in rep.skipped}
    assert "quant_method is 'compressed-tensors'" in skipped["marlin_moe_fp8"], skipped["marlin_moe_fp8"]


def test_audit_fp8_block_at_1408_keeps_vllms_tp_shard_padding(contracts) -> None:  # type: ignore[no-untyped-def]
    rep = audit_report([("m", _model(FP8_BLOCK))], TPS, contracts)
    rows = _rows(rep)
    assert set(rows) == {"marlin_moe_fp8"}, rows
    assert {tp: v[:2] for tp, v in rows["marlin_moe_fp8"].items()} == \
        {1: (True, 1408), 2: (True, 768), 4: (True, 384), 8: (True, 256)}
    skipped = {s.contract: s.reason for s in rep.skipped}
    assert "quant_method is 'fp8'" in skipped["marlin_moe_ct_fp8"], skipped["marlin_moe_ct_fp8"]


def _maker() -> Any:
    spec = importlib.util.spec_from_file_location("make_checkpoint", ROOT / "examples" / "make_checkpoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ct_block_checkpoint(out: Path, intermediate: int = 1408) -> Path:
    """A block-FP8 checkpoint (examples/make_checkpoint.py --quant fp8_block) rewritten as
    llm-compressor stores FP8_BLOCK: `weight_scale` for `weight_scale_inv`, CT_BLOCK's config."""
    import torch
    from safetensors.torch import load_file, save_file

    assert _maker().main([str(out), "--layers", "1", "--experts", "4", "--intermediate", str(intermediate),
                          "--dtype", "float32", "--quant", "fp8_block"]) == 0
    st = out / "model.safetensors"
    tensors = {k.replace(".weight_scale_inv", ".weight_scale"): v for k, v in load_file(str(st)).items()}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(st), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    quant = copy.deepcopy(CT_BLOCK)
    quant["ignore"] = config["quantization_config"]["modules_to_not_convert"]
    config["quantization_config"] = quant
    (out / "config.json").write_text(json.dumps(config, indent=2))
    assert all(t.dtype != torch.float8_e5m2 for t in tensors.values())
    return out


@pytest.mark.transformers  # the checkpoint is built by transformers' save_pretrained
def test_run_compressed_tensors_block_fp8_at_1408_refuses_tp_2_4_8_with_lr170(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from layoutc.cli import main

    folder = ct_block_checkpoint(tmp_path / "ct")
    capsys.readouterr()
    code = main(["run", str(folder), "--tp", "1,2,4,8", "--dtype", "float32", "--format", "json",
                 "--no-transformers"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1, report
    assert [(r["tp_size"], r["intermediate_size_per_partition_padded"]) for r in report["rows"]] == [(1, 1408)]
    assert "marlin_moe_ct_fp8" in report["rows"][0]["kernel"], report["rows"][0]
    assert report["rows"][0]["matched"], report["rows"][0]
    assert len(report["refused"]) == 3, report["refused"]
    for tp, line in zip((2, 4, 8), report["refused"], strict=True):
        assert line.startswith(f"layer 0 tp={tp}: error[LR170]: quant_method 'compressed-tensors'"), line
        assert "CompressedTensorsW8A8Fp8MoEMethod" in line and CT_REFUSAL in line, line
