"""`layoutc run` on local quantized checkpoints (examples/make_checkpoint.py --quant, written by
the test packers in tests/support/quant_pack.py; I = 704, so 176 per rank at tp 4; I = 768 where a
group or block of 128 must divide it: 704 = 5.5 * 128), against transformers'
experts module over the independent dequantizer (gpt-oss MXFP4: transformers' GptOssExperts
as from_pretrained(Mxfp4Config(dequantize=True)) builds it, its own dequantization); float32
makes the comparison tight (the codes pass through exactly).

- GPTQ / AWQ int4 run on torch's int4pack kernel from the checkpoint's own codes (kernel).
- GPTQ int8 symmetric channelwise runs on torch's int8pack kernel from its own codes (kernel);
  grouped and asymmetric GPTQ int8 have no int8pack form and fall back to Marlin's loaders.
- Every other method has no kernel on this CPU: each rank's padded tensors come from the
  contract's generated alloc / load, are decoded by the contract's decode and run through the
  reference at the padded shapes (slow). A configuration the contract refuses is a `refused:`
  line (exit 1); corrupting a pad the contract declares inert makes the row MISMATCH.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NO_KERNEL = "no kernel for this method on this CPU: reference only"
#: the independent reference of every quantized row: transformers' own block (quant_run/oracle.py)
BLOCK = "transformers Qwen3MoeSparseMoeBlock (from_pretrained, model.layers.N.mlp): its routed output"
PER_TENSOR_HOW = ("over each quantized module dequantized on its own, under its own name, by the independent "
                  "dequantizer (checkpoints/quant/dequant.py), the folder loaded by transformers' from_pretrained: "
                  "the declared format is not read")
MXFP4_HOW = "over transformers' own MXFP4 dequantization (from_pretrained, Mxfp4Config(dequantize=True))"


def _maker() -> Any:
    spec = importlib.util.spec_from_file_location("make_checkpoint", ROOT / "examples" / "make_checkpoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_MAKER: list[Any] = []


def _make(out: Path, *flags: str) -> Path:
    if not _MAKER:
        _MAKER.append(_maker())
    assert _MAKER[0].main([str(out), "--layers", "1", *flags]) == 0
    return out


def _run(capsys: pytest.CaptureFixture[str], folder: Path, *extra: str, tp: str = "1,2,4") -> tuple[int, dict[str, Any]]:
    from layoutc.cli import main

    capsys.readouterr()
    code = main(["run", str(folder), "--tp", tp, "--dtype", "float32", "--format", "json", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.kernel  # aten::_weight_int4pack_mm_for_cpu
@pytest.mark.transformers
@pytest.mark.parametrize("flags", [("--quant", "gptq4", "--group-size", "64"),
                                   ("--quant", "gptq4", "--group-size", "64", "--act-order", "--asym"),
                                   ("--quant", "gptq4", "--group-size", "128", "--act-order", "--intermediate", "768"),
                                   ("--quant", "awq4", "--group-size", "32"),
                                   ("--quant", "awq4", "--group-size", "64"),
                                   ("--quant", "awq4", "--group-size", "128", "--intermediate", "768")])
def test_int4_runs_on_int4pack_at_tp_1_2_4(tmp_path, capsys, flags):
    folder = _make(tmp_path / "ckpt", *flags)
    code, report = _run(capsys, folder)
    assert code == 0, report
    assert [r["tp_size"] for r in report["rows"]] == [1, 2, 4]
    for r in report["rows"]:
        assert r["kernel"].startswith("aten::_weight_int4pack_mm_for_cpu")
        assert "dequantizer" in r["reference"] and r["rel_error"] < 1e-5
        assert r["reference"].startswith(BLOCK) and r["reference"].endswith(PER_TENSOR_HOW), r
        assert r["independent"] and r["kernel_ran"] and r["result"] == "ok", r


INT8PACK = "aten::_weight_int8pack_mm (torch_int8pack_gptq_moe)"


@pytest.mark.kernel  # aten::_weight_int8pack_mm
@pytest.mark.slow
@pytest.mark.transformers
@pytest.mark.parametrize(("dtype", "tp", "shapes"), [("float32", "1,2,4", {1: (704, 704), 2: (352, 352), 4: (176, 176)}),
                                                     ("bfloat16", "3", {3: (235, 240)})])
def test_int8_channelwise_runs_on_int8pack(tmp_path, capsys, dtype, tp, shapes):
    """GPTQ int8 sym, group -1 (I = 704) on int8pack from the checkpoint's own codes: fp32 at tp 1, 2, 4
    within 1e-5; bf16 at tp 3 (cdiv(704, 3) = 235 rows, padded to 240 for the bf16 K rule, the last
    rank 234 rows and a tail) within bf16's 2e-2 (run.py TOLERANCE). The kernel column names the op."""
    from layoutc.tools.run import TOLERANCE

    folder = _make(tmp_path / "ckpt", "--quant", "gptq8", "--group-size", "-1")
    code, report = _run(capsys, folder, "--dtype", dtype, tp=tp)
    assert code == 0, report
    assert {r["tp_size"]: (r["intermediate_size_per_partition"], r["intermediate_size_per_partition_padded"])
            for r in report["rows"]} == shapes
    for r in report["rows"]:
        assert r["kernel"] == INT8PACK, r
        assert r["reference"].startswith(BLOCK) and r["reference"].endswith(PER_TENSOR_HOW), r
        assert r["ok"] and r["independent"] and r["kernel_ran"] and r["tolerance"] == TOLERANCE[dtype], r
        assert r["rel_error"] < (1e-5 if dtype == "float32" else TOLERANCE[dtype]), r


@pytest.mark.kernel  # aten::_weight_int8pack_mm
@pytest.mark.slow
@pytest.mark.transformers
def test_a_live_int8pack_tail_mismatches(tmp_path, capsys, monkeypatch):
    """The int8pack rows can fail: at tp = 3 the last rank holds 234 of 235 rows and its tail row is
    code 128 with scale 0 (w13) and code 128 (w2's column). Made live (codes 200, w13 scale 1), the
    tp = 3 row MISMATCHes; tp = 2 has no tail and still matches."""
    from layoutc.tools.quant_run import rank8

    folder = _make(tmp_path / "ckpt", "--quant", "gptq8", "--group-size", "-1")
    real = rank8.load_rank
    seen: list[int] = []

    def corrupt(layout, plan, rank, experts):
        t = real(layout, plan, rank, experts)
        live = plan.intermediate_size - rank * plan.intermediate_size_per_partition
        p = plan.intermediate_size_per_partition_padded
        if 0 <= live < p:
            seen.append(rank)
            codes, scales, w2 = t[("weight", "w13")], t[("scale", "w13")], t[("weight", "w2")]
            assert bool((codes[:, live:p] == 128).all()) and bool((scales[:, live:p] == 0).all())
            assert bool((w2[:, :, live:p] == 128).all())
            for rows in (slice(live, p), slice(p + live, 2 * p)):
                codes[:, rows], scales[:, rows] = 200, 1.0
            w2[:, :, live:p] = 200
        return t

    monkeypatch.setattr(rank8, "load_rank", corrupt)
    code, report = _run(capsys, folder, tp="2,3")
    assert seen == [2], seen
    assert code == 1
    assert {r["tp_size"]: r["ok"] for r in report["rows"]} == {2: True, 3: False}, report["rows"]
    assert all(r["kernel"] == INT8PACK for r in report["rows"])


#: id -> (make_checkpoint flags, --contract or None, the contract whose loaders ran, the reference's
#: words, the TP degrees that run, the refused degrees -> words of the contract's refusal)
REFERENCE_ONLY: dict[str, tuple[tuple[str, ...], str | None, str | None, str, tuple[int, ...],
                                dict[int, str]]] = {
    "gptq_int4_g128_704_int4pack": (("--quant", "gptq4", "--group-size", "128"), None, None, "", (),
                                    {tp: "[intermediate_size=704, group_size=128]; then error[LR170]: quant_method 'gptq' "
                                         "refuses this degree: AutoGPTQMoEMethod (modelled by marlin_moe_wna16) admits "
                                         "it only under its own rule: marlin_moe_wna16: admit failed"
                                     for tp in (1, 2, 4)}),
    "gptq_int8_channel_marlin": (("--quant", "gptq8", "--group-size", "-1"), "marlin_moe_gptq_int8",
                                 "marlin_moe_gptq_int8", "transformers Qwen3MoeExperts", (1, 2, 4), {}),
    "gptq_int8_asym": (("--quant", "gptq8", "--group-size", "-1", "--asym"), None, None, "", (),
                       {tp: "error[LR162]: contract torch_int8pack_gptq_moe decodes w13_qweight without a zero point"
                        for tp in (1, 2, 4)}),
    "gptq_int8_g32": (("--quant", "gptq8", "--group-size", "32"), None, "marlin_moe_gptq_int8",  # int8pack: -1 only
                      "transformers Qwen3MoeExperts", (1, 2), {4: "torch_int8pack_gptq_moe: group_size=32 is not one "
                                                              "of (-1,)"}),
    "gptq_int4_channel_default": (("--quant", "gptq4", "--group-size", "-1"), None, "marlin_moe_wna16",
                                  "transformers Qwen3MoeExperts", (1, 2, 4), {}),  # int4pack takes no group -1
    "gptq_int4_channel_marlin": (("--quant", "gptq4", "--group-size", "-1"), "marlin_moe_wna16", "marlin_moe_wna16",
                                 "transformers Qwen3MoeExperts", (1, 2, 4), {}),
    "gptq_int4_act_order_marlin": (("--quant", "gptq4", "--group-size", "64", "--act-order"), "marlin_moe_wna16",
                                   None, "", (), {tp: "desc_act=True) is no longer supported" for tp in (1, 2, 4)}),
    "gptq_int8_act_order": (("--quant", "gptq8", "--group-size", "64", "--act-order"), None, None, "", (),
                            {tp: "error[LR162]: gptq_int8 is act-order" for tp in (1, 2, 4)}),
    "gptq_int4_on_the_awq_contract": (("--quant", "gptq4", "--group-size", "64"), "marlin_moe_awq", None, "", (),
                                      {tp: "error[LR161]: contract tensor w13_qweight packs 8 values along n, but gptq_int4's "
                                       "weight tensor has 8 values a word along in" for tp in (1, 2, 4)}),
    "gptq_int8_on_the_int4pack_contract": (("--quant", "gptq8", "--group-size", "64"), "torch_int4pack_gptq_moe", None,
                                           "", (), {tp: "error[LR161]: contract tensor w13_qweight holds one value an "
                                                    "element, but gptq_int8's weight tensor packs 4 values a word "
                                                    "along in" for tp in (1, 2, 4)}),
    "gptq_int4_asym_marlin": (("--quant", "gptq4", "--group-size", "-1", "--asym"), "marlin_moe_wna16", None, "",
                              (), {tp: "error[LR162]" for tp in (1, 2, 4)}),
    "awq_int4_g32_marlin": (("--quant", "awq4", "--group-size", "32"), "marlin_moe_awq", "marlin_moe_awq",
                            "transformers Qwen3MoeExperts", (1, 2), {4: "no quant group may straddle the pad boundary"}),
    "fp8_block_deepseek_768": (("--quant", "fp8_block", "--intermediate", "768"), None, "marlin_moe_fp8",
                               "transformers Qwen3MoeExperts", (1, 2, 4), {}),
    "fp8_block_704": (("--quant", "fp8_block"), None, None, "", (),
                      {tp: "intermediate_size must be a multiple of 128" for tp in (1, 2, 4)}),
    "fp8_channel": (("--quant", "fp8_channel"), None, None, "transformers Qwen3MoeExperts", (1, 2, 4), {}),
    "fp8_tensor": (("--quant", "fp8_tensor"), None, None, "transformers Qwen3MoeExperts", (1, 2, 4), {}),
    "mxfp4_gpt_oss": (("--family", "gpt_oss", "--quant", "mxfp4"), None, "vllm_cpu_mxfp4_gpt_oss_moe",
                      "transformers GptOssExperts", (1, 2, 4), {}),
    "mxfp4_gpt_oss_flashinfer": (("--family", "gpt_oss", "--quant", "mxfp4"), "flashinfer_trtllm_mxfp4_moe",
                                 "flashinfer_trtllm_mxfp4_moe", "transformers GptOssExperts", (1, 2, 4), {}),
    # ModelOpt NVFP4: w13 reordered to [up | gate] and split-padded per half (176 -> 192 at tp 4)
    "nvfp4_modelopt": (("--quant", "nvfp4"), None, "flashinfer_nvfp4_moe", "transformers Qwen3MoeExperts",
                       (1, 2, 4), {}),
    # llm-compressor NVFP4: weight_packed, and weight_global_scale stored as the reciprocal
    "nvfp4_compressed_tensors": (("--quant", "nvfp4_ct"), None, "flashinfer_nvfp4_moe",
                                 "transformers Qwen3MoeExperts", (1, 2, 4), {}),
}


@pytest.mark.slow
@pytest.mark.transformers
@pytest.mark.parametrize("case", sorted(REFERENCE_ONLY))
def test_reference_only_rows_through_the_contract_loaders(tmp_path, capsys, case):
    flags, contract, loaders, reference, runs, refused = REFERENCE_ONLY[case]
    folder = _make(tmp_path / "ckpt", *flags)
    code, report = _run(capsys, folder, *(("--contract", contract) if contract else ()))
    assert code == 1, report  # no kernel runs: every row is unchecked (issue 39 item 6), never "ok"
    assert [r["tp_size"] for r in report["rows"]] == list(runs)
    for r in report["rows"]:
        assert r["kernel"].startswith(NO_KERNEL.removesuffix(": reference only")), r
        if case.startswith(("mxfp4", "fp8_block", "gptq_int4", "awq")):  # vLLM's CPU experts need AMX here
            assert " (needs x86 AMX tiles for vLLM 0.32's CPUExperts" in r["kernel"] or "could run here" in r["kernel"]
        assert ": reference only (" in r["kernel"], r
        if loaders is None:
            assert "no contract declares this method" in r["kernel"], r
        else:
            assert f"padded by {loaders}'s loaders" in r["kernel"], r
        block = BLOCK.replace("Qwen3MoeSparseMoeBlock", "GptOssMLP") if "mxfp4" in case else BLOCK
        oracle = MXFP4_HOW if "mxfp4" in case else PER_TENSOR_HOW
        if loaders is None:
            assert r["reference"].startswith(block) and r["reference"].endswith(oracle), r
        else:  # each rank through transformers' module over its decoded padded tensors, the sum against the block
            assert r["reference"].startswith(f"{reference} over the rank's padded tensors decoded by {loaders}'s "
                                             f"decode, ranks summed, against {block}"), r
            assert r["reference"].endswith(oracle), r
        assert r["matched"] and r["rel_error"] < 1e-5, r
        assert not r["ok"] and r["independent"] and not r["kernel_ran"], r
        assert r["result"].startswith("unchecked: no kernel ran"), r
    assert len(report["refused"]) == len(refused), report["refused"]
    for line, (tp, words) in zip(report["refused"], sorted(refused.items()), strict=True):
        assert line.startswith(f"layer 0 tp={tp}: ") and words in line, line


def test_the_padded_rank_is_padded():
    """The gate rows at I_pp = 176 on marlin_moe_gptq_int8 are padded to 192 (round_up(176, 64)),
    so the rows of test_reference_only_rows_through_the_contract_loaders run on padded shapes."""
    import generated.marlin_moe_gptq_int8 as mod

    plan = mod.plan(num_experts=8, hidden_size=256, intermediate_size=704, tp_size=4, group_size=-1,
                    activation="silu", dtype="float16")
    assert (plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded) == (176, 192)


@pytest.mark.slow
@pytest.mark.transformers
def test_a_live_pad_mismatches(tmp_path, capsys, monkeypatch):
    """The check can fail: with one pad lane of w13's scales made 1 (gate and up of channel
    I_pp of every expert; the contract pads them with 0), that lane is no longer inert under
    decode and the tp > 1 rows MISMATCH (exit 1); the tp = 1 row, which has no pad, still matches.
    (--contract: GPTQ int8 channelwise runs on int8pack by default.)"""
    from layoutc.tools.quant_run import padded

    folder = _make(tmp_path / "ckpt", "--quant", "gptq8", "--group-size", "-1")
    real = padded.load_rank

    def corrupt(layout, contract, plan, rank, sources):
        loaded = real(layout, contract, plan, rank, sources)
        live, p = plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded
        if p > live:
            scales = loaded.tensors["w13_scales"]  # [E, 1, 2P]: [gate | up] along n
            scales[:, :, live] = 1.0
            scales[:, :, p + live] = 1.0
        return loaded

    monkeypatch.setattr(padded, "load_rank", corrupt)
    code, report = _run(capsys, folder, "--contract", "marlin_moe_gptq_int8")
    assert code == 1
    matched = {r["tp_size"]: r["matched"] for r in report["rows"]}
    assert matched == {1: True, 2: False, 4: False}, report["rows"]
    assert not any(r["ok"] for r in report["rows"])  # reference only: never ok
    assert all(r["rel_error"] > 1e-2 for r in report["rows"] if r["tp_size"] > 1)


@pytest.mark.slow
@pytest.mark.transformers
def test_an_uneven_split_is_a_coded_refusal_not_a_traceback(tmp_path, capsys):
    """I = 704 over tp = 3: per-channel FP8 (no contract; vLLM splits evenly) is refused with
    LR163, and GPTQ int8 on --contract marlin_moe_gptq_int8 with Marlin's own rule; tp = 2 still
    runs. Exit 1. (int8pack splits rows anywhere: test_int8_channelwise_runs_on_int8pack runs tp 3.)"""
    fp8 = _make(tmp_path / "fp8", "--quant", "fp8_channel")
    code, report = _run(capsys, fp8, tp="2,3")
    assert code == 1 and [r["tp_size"] for r in report["rows"]] == [2] and report["rows"][0]["matched"]
    assert report["refused"] == [report["refused"][0]] and "tp=3: error[LR163]: no contract declares fp8_channel" \
        in report["refused"][0]
    int8 = _make(tmp_path / "int8", "--quant", "gptq8", "--group-size", "-1")
    code, report = _run(capsys, int8, "--contract", "marlin_moe_gptq_int8", tp="2,3")
    assert code == 1 and [r["tp_size"] for r in report["rows"]] == [2]
    assert len(report["refused"]) == 1 and "marlin_moe_gptq_int8" in report["refused"][0] \
        and "intermediate_size must split evenly over tp_size" in report["refused"][0]


@pytest.mark.slow
@pytest.mark.transformers
def test_a_live_tail_mismatches(tmp_path, capsys, monkeypatch):
    """The check reaches a short rank's tail too: block FP8 at I = 768 over tp = 4 on
    marlin_moe_fp8 gives each rank round_up(192, 128) = 256 rows in whole blocks of 128, so the
    6 blocks fill ranks 0-2 and rank 3 is all tail (codes 0, scales `tail fill 1`: decoding to
    0). With the tail's codes made 0x38 (1.0 in E4M3) in w13 (gate and up rows) and w2 (columns),
    the tail is live and tp = 4 MISMATCHes; tp = 1 and 2 have no tail and still match."""
    import torch

    from layoutc.tools.quant_run import padded

    folder = _make(tmp_path / "ckpt", "--quant", "fp8_block", "--intermediate", "768")
    real = padded.load_rank
    tails: list[tuple[int, int]] = []

    def corrupt(layout, contract, plan, rank, sources):
        loaded = real(layout, contract, plan, rank, sources)
        w13 = loaded.tensors["w13_weight"].view(torch.uint8)  # [E, 2P, H]: [gate | up]
        w2 = loaded.tensors["w2_weight"].view(torch.uint8)  # [E, H, P]
        dead = ~(w13 != 0).any(dim=2).any(dim=0)  # rows no expert has a non-zero byte in: the tail
        p = plan.intermediate_size_per_partition_padded
        if plan.tp_size == 4 and bool(dead.any()):
            tails.append((rank, int(dead.sum())))
            assert torch.equal(dead[:p], dead[p:])  # gate's and up's tails are the same rows
            assert not w2[:, :, dead[:p]].any()  # w2's tail columns are code 0 as loaded
            w13[:, dead] = 0x38
            w2[:, :, dead[:p]] = 0x38
        return loaded

    monkeypatch.setattr(padded, "load_rank", corrupt)
    code, report = _run(capsys, folder)
    assert tails == [(3, 512)], tails
    assert code == 1
    assert {r["tp_size"]: r["matched"] for r in report["rows"]} == {1: True, 2: True, 4: False}, report["rows"]


def test_the_contract_slot_order_is_the_one_the_codes_are_read_in() -> None:
    """padded.py reads a packed word's slots in the contract's `pack N order (...)`; a contract
    whose order differs from the checkpoint's (marlin_moe_awq with its AWQ order taken out) is
    LR161, and the words unpack to the values the order says."""
    import dataclasses
    import importlib

    import torch

    from layoutc.tools.checkpoints.quant import scheme as S
    from layoutc.tools.quant_run import padded
    from layoutc.tools.runplan import RunError

    contract = padded.contract_ir(importlib.import_module("layoutc_generated.marlin_moe_awq"))
    t = next(x for x in contract.tensors if x.name == "w13_qweight")
    axis, pk = padded._packing(S.awq(128), t)
    assert pk is not None and tuple(t.axes[axis].pack_order) == S.AWQ_ORDER
    word = sum(slot << (4 * slot) for slot in range(8))  # slot i holds the value i
    codes = padded._unpack(torch.tensor([[word]], dtype=torch.int32), 1, pk, t.axes[axis].slot_of)
    assert codes.tolist() == [[S.AWQ_ORDER.index(j) for j in range(8)]]  # element j sits in slot slot_of(j)
    identity = dataclasses.replace(t.axes[axis], pack_order=tuple(range(8)))
    wrong = dataclasses.replace(t, axes=tuple(identity if i == axis else a for i, a in enumerate(t.axes)))
    with pytest.raises(RunError, match="slot order"):
        padded._packing(S.awq(128), wrong)


@pytest.mark.slow
@pytest.mark.transformers
def test_nvfp4_up_global_scale_differing_from_gates_mismatches(tmp_path, capsys):
    """flashinfer_nvfp4_moe holds one w13 global scale per expert, loaded from the gate's
    `weight_scale_2` (vLLM 0.32 ModelOptNvFp4FusedMoE.process_weights_after_loading keeps
    w13_weight_scale_2[:, 0] and warns "w1_weight_scale_2 must match w3_weight_scale_2"). With
    one expert's up_proj.weight_scale_2 doubled the checkpoint's own decode (the independent
    dequantizer) and the contract's differ, so the row MISMATCHes (exit 1); the unedited
    checkpoint matches (test_reference_only_rows_through_the_contract_loaders)."""
    from safetensors.torch import load_file, save_file

    folder = _make(tmp_path / "ckpt", "--quant", "nvfp4")
    st = folder / "model.safetensors"
    tensors = load_file(str(st))
    name = "model.layers.0.mlp.experts.3.up_proj.weight_scale_2"
    tensors[name] = tensors[name] * 2
    save_file(tensors, str(st), metadata={"format": "pt"})
    code, report = _run(capsys, folder, tp="1")
    assert code == 1 and [r["tp_size"] for r in report["rows"]] == [1]
    assert not report["rows"][0]["matched"] and report["rows"][0]["rel_error"] > 1e-3, report["rows"]
