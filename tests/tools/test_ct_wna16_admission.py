"""compressed-tensors W4A16 / W8A16 follow their own method's admission (issue 45 item 5): vLLM 0.32's
CompressedTensorsWNA16MoEMethod.create_weights refuses a rank's slice of the intermediate (I / tp) that
is not whole scale groups (group 128 at I 1408: 704 / 352 / 176 per rank at tp 2 / 4 / 8), and never
pads the TP shard. Contracts vllm_ct_wna16_int4_moe / vllm_ct_wna16_int8_moe model that method:
`layoutc audit` lists them (and leaves out the GPTQ method's Marlin contracts, which pad; the torch
kernels' rows are refused at the degrees the method refuses, methods.py gated_by_own), and
`layoutc run` refuses those degrees with LR170 before any route (torch_int4pack_gptq_moe would run
them with a short last rank). vLLM's own create_weights is the oracle in
tests/conformance/test_vllm_ct_wna16_admission.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from layoutc.tools.audit import audit_report, load_contracts
from layoutc.tools.hfconfig import parse_model_config

ROOT = Path(__file__).resolve().parents[2]
QWEN3 = json.loads((ROOT / "layoutc" / "tools" / "models" / "qwen3-30b-a3b.json").read_text())
TPS = [1, 2, 4, 8]
REFUSAL = "does not pad the TP shard: I / tp must be a multiple of group_size"


def _ct(bits: int, group: int) -> dict[str, Any]:
    """llm-compressor's W4A16 / W8A16 quantization_config (compressed-tensors pack-quantized)."""
    weights = {"num_bits": bits, "type": "int", "symmetric": True, "group_size": None if group == -1 else group,
               "strategy": "channel" if group == -1 else "group", "actorder": None, "dynamic": False,
               "observer": "minmax", "observer_kwargs": {}}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "ignore": ["lm_head"], "kv_cache_scheme": None,
            "config_groups": {"group_0": {"targets": ["Linear"], "format": "pack-quantized", "weights": weights,
                                          "input_activations": None, "output_activations": None}}}


@pytest.fixture(scope="module")
def contracts():  # type: ignore[no-untyped-def]
    loaded, problems = load_contracts([str(ROOT / "contracts")])
    assert problems is None, problems
    return [c for c in loaded if all(m.engine != "sglang" for m in c.models)]  # vLLM's audit, as the CLI's default


@pytest.mark.parametrize(("bits", "group", "admitted"), [
    (4, 128, {1: 1408}),
    (4, 32, {1: 1408, 2: 704, 4: 352}),
    (4, -1, {1: 1408, 2: 704, 4: 352, 8: 176}),
    (8, 128, {1: 1408}),
    (8, -1, {1: 1408, 2: 704, 4: 352, 8: 176}),
])
def test_audit_ct_wna16_at_1408_follows_the_ct_method(contracts, bits: int, group: int,  # type: ignore[no-untyped-def]
                                                      admitted: dict[int, int]) -> None:
    raw = copy.deepcopy(QWEN3)
    raw["quantization_config"] = _ct(bits, group)
    raw["moe_intermediate_size"] = 1408
    rep = audit_report([("m", parse_model_config(raw, source="qwen3-ct"))], TPS, contracts)
    own = f"vllm_ct_wna16_int{bits}_moe"
    rows = {r.tp_size: r for r in rep.rows if r.contract == own}
    assert sorted(rows) == TPS, [r.contract for r in rep.rows]
    assert {tp: r.intermediate_size_per_partition_padded for tp, r in rows.items() if r.admitted} == admitted
    for tp, r in rows.items():
        assert r.admitted or (r.reason is not None and REFUSAL in r.reason), (tp, r.reason)
    # the torch kernel that `layoutc run` uses gets the checkpoint as the method loads it: refused at the same degrees
    kernel = "torch_int4pack_gptq_moe" if bits == 4 else "torch_int8pack_gptq_moe"
    torch_rows = {r.tp_size: r for r in rep.rows if r.contract == kernel}
    for tp, r in torch_rows.items():
        if tp not in admitted:  # refused: by the method, or already by the kernel's own domain (int8pack: group -1)
            assert not r.admitted, (tp, r.reason)
    if bits == 4 and group != -1:  # int4pack alone would pad these degrees (768 at tp 2): the method's refusal
        assert sorted(torch_rows) == TPS and sorted(tp for tp, r in torch_rows.items() if r.admitted) == sorted(admitted)
        for tp in set(TPS) - set(admitted):
            reason = torch_rows[tp].reason
            assert reason is not None and REFUSAL in reason and "vllm_ct_wna16_int4_moe" in reason, (tp, reason)
    # the GPTQ method's Marlin contract (which pads I / tp to whole tiles) is not this method's
    skipped = {s.contract: s.reason for s in rep.skipped}
    marlin = "marlin_moe_wna16" if bits == 4 else "marlin_moe_gptq_int8"
    assert marlin not in {r.contract for r in rep.rows}
    assert "quant_method is 'compressed-tensors'" in skipped[marlin], skipped[marlin]


@pytest.mark.transformers  # the checkpoint is built by transformers' save_pretrained and packed by llm-compressor
@pytest.mark.kernel  # aten::_weight_int4pack_mm_for_cpu at the admitted degrees
@pytest.mark.slow
def test_run_llm_compressor_w4a16_g128_refuses_tp_4_8_with_lr170(tmp_path_factory, capsys) -> None:  # type: ignore[no-untyped-def]
    from layoutc.cli import main
    from tests.support import packers

    packers.packers_path()
    folder = packers.checkpoint("ct_w4a16_g128_i256", tmp_path_factory)
    capsys.readouterr()
    code = main(["run", str(folder), "--tp", "1,2,4,8", "--dtype", "float32", "--tokens", "16", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and not report["ok"], report
    assert report["quantization"] == "ct_wna16_int4", report
    rows = report["rows"]
    assert [(r["tp_size"], r["intermediate_size_per_partition_padded"]) for r in rows] == [(1, 256), (2, 128)], rows
    assert all(r["result"] == "ok" and r["kernel_ran"] and "torch_int4pack_gptq_moe" in r["kernel"] for r in rows), rows
    assert len(report["refused"]) == 2, report["refused"]
    for tp, line in zip((4, 8), report["refused"], strict=True):
        assert line.startswith(f"layer 0 tp={tp}: error[LR170]: quant_method 'compressed-tensors'"), line
        assert "CompressedTensorsWNA16MoEMethod (modelled by vllm_ct_wna16_int4_moe)" in line and REFUSAL in line, line


def test_only_a_contract_of_the_method_alone_gates_the_kernels() -> None:
    from layoutc.tools.checkpoints.quant.methods import gated_by_own, states_only_method

    wna16 = [("vllm", "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe."
                      "compressed_tensors_moe_wna16:CompressedTensorsWNA16MoEMethod")]
    marlin = [("vllm", "vllm.model_executor.layers.fused_moe.experts.marlin_moe:MarlinExperts"),
              ("vllm", "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe."
                       "compressed_tensors_moe_w8a8_fp8:CompressedTensorsW8A8Fp8MoEMethod")]
    torch_kernel = [("torch", "torch:_weight_int4pack_mm_for_cpu")]
    assert states_only_method(wna16, "compressed-tensors") and not states_only_method(wna16, "gptq")
    assert not states_only_method(marlin, "compressed-tensors")  # also a backend's kernel: Marlin's tile rules
    assert gated_by_own({"m": wna16, "t": torch_kernel}, "compressed-tensors") == {"t": ["m"]}
    assert gated_by_own({"m": marlin, "t": torch_kernel}, "compressed-tensors") == {}
    assert gated_by_own({"m": wna16, "t": torch_kernel}, None) == {}
