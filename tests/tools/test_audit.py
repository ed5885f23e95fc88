"""Tests for `layoutc audit` (layoutc/tools/audit.py): the public cases, costs, formats and errors.

Speed is not asserted here (see docs/audit.md, "Speed", for the measurement).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from layoutc.cli import main
from layoutc.compiler.source import load
from layoutc.tools.audit import (
    AuditRow,
    audit,
    audit_formats,
    audit_report,
    checkpoint_format,
    load_contracts,
    parse_tp,
    render_markdown,
    render_text,
)
from layoutc.tools.audit.engines import engine_of
from layoutc.tools.checkpoints.quant import fp8
from layoutc.tools.hfconfig import (
    INTERMEDIATE_SIZE_ALIASES,
    NUM_EXPERTS_ALIASES,
    bundled_model_names,
    load_model_config,
)

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / "contracts"

ROW_KEYS = {
    "model", "model_name", "contract", "variant", "tp_size", "intermediate_size",
    "intermediate_size_per_partition", "intermediate_size_per_partition_padded", "admitted", "rule",
    "reason", "pad_fraction", "extra_bytes", "extra_flops_pct", "num_moe_layers", "params", "violations", "sources",
}
SKIPPED_KEYS = {"model", "model_name", "contract", "reason"}


@pytest.fixture(scope="module")
def contracts():
    loaded, problems = load_contracts([str(CONTRACTS)])
    assert problems is None, problems
    return loaded


def contract(name: str):
    c, diags, _ = load(str(CONTRACTS / f"{name}.moe"))
    assert c is not None, diags
    return c


def rows_for(name: str, tps, contracts, **where):
    rows = audit([(name, load_model_config(name))], tps, contracts)
    return [r for r in rows if all(getattr(r, k) == v for k, v in where.items())]


def one(rows):
    assert len(rows) == 1, rows
    return rows[0]


def run_json(capsys, *argv: str) -> dict:
    assert main(["audit", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


# ---- the public cases ---------------------------------------------------------------


def test_gemma4_tp4_pads_176_to_192_on_vec(contracts):
    row = one(rows_for("gemma-4-26b-a4b", [4], contracts, contract="vllm_cpu_grouped_gemm",
                       variant={"isa": "vec"}))
    assert row.admitted and row.rule is None and row.reason is None
    assert (row.intermediate_size_per_partition, row.intermediate_size_per_partition_padded) == (176, 192)
    assert row.pad_fraction == pytest.approx(16 / 192)
    assert row.extra_flops_pct == pytest.approx(16 / 176 * 100)
    assert row.params["dtype"] == "bfloat16" and row.params["activation"] == "gelu_tanh"
    # extra bytes: w13 gets 16 zero rows per half, w2 16 zero columns, w13_bias 16 per half;
    # bf16 (2 bytes); 128 experts, H = 2816; all 30 layers are MoE layers.
    e, h, pad, layers = 128, 2816, 16, 30
    per_layer = (e * 2 * pad * h + e * h * pad + e * 2 * pad) * 2
    assert row.extra_bytes == per_layer * layers


def test_gemma4_tp2_is_aligned(contracts):
    row = one(rows_for("gemma-4-26b-a4b", [2], contracts, contract="vllm_cpu_grouped_gemm",
                       variant={"isa": "vec"}))
    assert row.admitted
    assert (row.intermediate_size_per_partition, row.intermediate_size_per_partition_padded) == (352, 352)
    assert row.pad_fraction == 0 and row.extra_bytes == 0 and row.extra_flops_pct == 0


def test_gemma4_every_isa_is_a_variant(contracts):
    rows = rows_for("gemma-4-26b-a4b", [4], contracts, contract="vllm_cpu_grouped_gemm")
    by_isa = {r.variant["isa"]: r for r in rows}
    assert set(by_isa) == {"vec", "amx", "neon", "vsx"}
    # vsx tiles are (16, 2): 176 is already aligned.
    assert by_isa["vsx"].intermediate_size_per_partition_padded == 176
    assert by_isa["amx"].intermediate_size_per_partition_padded == 192


def test_minimax_m2_block_fp8_tp8_pads_the_tp_shard(contracts):
    """vLLM's block-FP8 TP-shard padding: 192 -> 256-row shards, ranks 6 and 7 empty; the
    cost counts the empty ranks (mean live width 1536 / 8 = 192 of 256)."""
    row = one(rows_for("minimax-m2", [8], contracts, contract="marlin_moe_fp8"))
    assert row.params["scheme"] == "fp8_block128"
    assert row.admitted
    assert (row.intermediate_size_per_partition, row.intermediate_size_per_partition_padded) == (256, 256)
    assert row.pad_fraction == pytest.approx(0.25)
    assert row.extra_flops_pct == pytest.approx(100 / 3)
    # w13 [256, 2*256, 3072] + w2 [256, 3072, 256] fp8 bytes, mean live 192 of 256 rows, and
    # their float32 block scales (the mean live scale blocks: 1.5 of 2), over 62 layers
    weights = 256 * 3 * 3072 * (256 - 192)
    scales = 256 * 3 * (3072 // 128) * (2 - 1.5) * 4
    assert row.extra_bytes == round(weights + scales) * 62


def test_minimax_m2_block_fp8_tp4_admitted_and_scale_dtype_pinned(contracts):
    rows = rows_for("minimax-m2", [1, 2, 4, 8], contracts, contract="marlin_moe_fp8")
    # The uint8 (MXFP8) scale dtype contradicts block FP8 for every TP: no such variant.
    assert {r.variant.get("scale_dtype") for r in rows} == {"float32"}
    assert [r.admitted for r in rows] == [True, True, True, True]


def test_gpt_oss_120b_tp8_aiter_pads_360_to_512_but_cannot_confirm_the_clamp(contracts):
    """The allocation is still 360 -> 512, but aiter_fused_moe has no swiglu_limit
    parameter, so audit cannot confirm its kernel clamps at gpt-oss's swiglu_limit 7.0:
    not a fast path (issue 16: never "yes" for what the contract does not say)."""
    row = one(rows_for("gpt-oss-120b", [8], contracts, contract="aiter_fused_moe"))
    assert not row.admitted
    assert (row.intermediate_size_per_partition, row.intermediate_size_per_partition_padded) == (360, 512)
    assert row.params["activation"] == "swigluoai"
    reasons = " ".join(m for _, m in row.violations)
    assert "swiglu_limit = 7" in reasons and "no swiglu_limit parameter" in reasons


# ---- mapping rules ------------------------------------------------------------------


def test_checkpoint_formats_of_bundled_models():
    formats = {name: checkpoint_format(load_model_config(name)).key for name in bundled_model_names()}
    assert formats["deepseek-v2-lite-gptq"] == "gptq_int4"
    assert formats["deepseek-v3"] == "fp8_block128"
    assert formats["minimax-m2"] == "fp8_block128"
    assert formats["gpt-oss-120b"] == formats["gpt-oss-20b"] == "mxfp4"
    assert formats["mixtral-8x7b"] == formats["gemma-4-26b-a4b"] == "unquantized"


def test_every_pair_is_a_row_or_skipped(contracts):
    """No (model, contract) pair disappears silently."""
    models = [(n, load_model_config(n)) for n in bundled_model_names()]
    report = audit_report(models, [1, 2, 4, 8, 16], contracts)
    with_rows = {(r.model, r.contract) for r in report.rows}
    skipped = {(s.model, s.contract) for s in report.skipped}
    assert not with_rows & skipped
    assert with_rows | skipped == {(n, c.name) for n, _ in models for c in contracts}
    assert all(s.reason for s in report.skipped)


def test_quantized_contracts_only_take_matching_checkpoints(contracts):
    models = [(n, load_model_config(n)) for n in bundled_model_names()]
    report = audit_report(models, [1], contracts)
    pairs = {(r.model, r.contract) for r in report.rows}
    assert {m for m, c in pairs if c == "marlin_moe_wna16"} == {"deepseek-v2-lite-gptq"}
    assert {m for m, c in pairs if c == "marlin_moe_fp8"} == {"deepseek-v3", "minimax-m2"}
    assert not {m for m, c in pairs if c == "flashinfer_nvfp4_moe"}
    assert ("gpt-oss-120b", "aiter_fused_moe") in pairs
    assert ("gpt-oss-120b", "vllm_cpu_grouped_gemm") not in pairs
    assert ("mixtral-8x7b", "aiter_fused_moe") in pairs
    skip = next(s for s in report.skipped if (s.model, s.contract) == ("mixtral-8x7b", "marlin_moe_fp8"))
    assert "unquantized" in skip.reason


def test_require_violation_is_a_row(contracts):
    row = one(rows_for("gemma-4-26b-a4b", [3], contracts, contract="vllm_cpu_grouped_gemm",
                       variant={"isa": "vec"}))
    assert not row.admitted and row.rule.startswith("require line ")
    assert row.reason == "intermediate_size must split evenly over tp_size"
    # 704 / 3 is not a size: no per-rank numbers are reported.
    assert row.intermediate_size_per_partition is None and row.extra_bytes is None


def test_unsupported_activation(contracts):
    rows = rows_for("nemotron-3-nano-30b-a3b", [1, 2], contracts, contract="vllm_cpu_grouped_gemm")
    assert len(rows) == 2 and all(r.variant == {} for r in rows)
    for r in rows:
        assert not r.admitted and r.rule.startswith("param line ")
        assert r.reason.startswith("activation relu2 not supported by this kernel")
    row = one(rows_for("gemma-4-26b-a4b", [1], contracts, contract="aiter_fused_moe"))
    assert "activation gelu_tanh not supported by this kernel" in row.reason


def test_tp_outside_contract_domain(contracts):
    # 9 is no effective MoE TP degree vLLM forms (dp * pcp * tp), so no contract lists it.
    row = one(rows_for("gpt-oss-120b", [9], contracts, contract="aiter_fused_moe"))
    assert not row.admitted and "tp_size = 9 is outside" in row.reason


def test_dtype_enumerated_when_config_omits_it(contracts):
    rows = rows_for("deepseek-v2-lite-gptq", [1], contracts, contract="marlin_moe_wna16")
    assert {r.variant["dtype"] for r in rows} == {"float16", "bfloat16"}
    assert all(r.params["group_size"] == 128 and r.params["act_order"] is True for r in rows)


def test_dtype_outside_enum_is_enumerated(contracts):
    # OLMoE is float32; the AMX kernel takes bf16 only (an admit, so a row says so).
    rows = rows_for("olmoe-1b-7b", [1], contracts, contract="vllm_cpu_grouped_gemm")
    amx = next(r for r in rows if r.variant == {"isa": "amx"})
    assert not amx.admitted and "bfloat16" in amx.reason
    f16 = dataclasses.replace(load_model_config("mixtral-8x7b"), dtype="float16")
    rows = audit([("m", f16)], [1], [contract("zentorch_fused_moe")])
    assert {r.variant["dtype"] for r in rows} == {"bfloat16", "float32"}


def test_gptq_act_order(contracts):
    rows = rows_for("deepseek-v2-lite-gptq", [1, 2, 4], contracts, contract="marlin_moe_wna16",
                    variant={"dtype": "bfloat16"})
    # group_size 128 with desc_act: vLLM 0.32 refuses the checkpoint at every tp
    # (gptq_utils.normalize_and_validate_gptq_desc_act), a `require` of the contract.
    assert [r.admitted for r in rows] == [False, False, False]
    assert all("desc_act=True) is no longer supported" in r.reason for r in rows)


def test_extra_bytes_counts_packed_and_grouped_storage():
    base = load_model_config("deepseek-v2-lite-gptq")
    model = dataclasses.replace(base, act_order=False, group_size=32)
    row = one([r for r in audit([("m", model)], [4], [contract("marlin_moe_wna16")])
               if r.variant == {"dtype": "float16"}])
    assert (row.intermediate_size_per_partition, row.intermediate_size_per_partition_padded) == (352, 384)
    e, h, g, i, p = 64, 2048, 32, 352, 384
    per_layer = (
        e * (h // 8) * 2 * (p - i) * 4          # w13_qweight int32, k packed 8
        + e * (h // g) * 2 * (p - i) * 2        # w13_scales fp16
        + e * (h // g) * 2 * (p - i) // 8 * 4   # w13_qzeros int32, n packed 8
        + e * 2 * (p - i) * 2                   # w13_bias fp16
        + e * (p - i) // 8 * h * 4              # w2_qweight int32, k packed 8
        + e * (p // g - i // g) * h * 2         # w2_scales fp16
        + e * (p // g - i // g) * (h // 8) * 4  # w2_qzeros int32
    )
    assert row.extra_bytes == per_layer * base.num_moe_layers


def test_extra_bytes_mxfp8_scale_groups():
    base = load_model_config("minimax-m2")
    model = dataclasses.replace(base, block_size=(1, 32), quant_scheme=fp8("block", block=(1, 32), e8m0_scales=True))
    assert checkpoint_format(model).key == "mxfp8"
    row = one(audit([("m", model)], [16], [contract("marlin_moe_fp8")]))
    assert row.variant == {"scale_dtype": "uint8"} and row.admitted
    assert (row.intermediate_size_per_partition, row.intermediate_size_per_partition_padded) == (96, 128)
    e, h = 256, 3072
    per_layer = e * 2 * 32 * h + e * 2 * 32 * (h // 32) + e * h * 32 + e * h * 1  # all 1-byte
    assert row.extra_bytes == per_layer * 62


def test_own_quantized_contract_is_audited_from_its_tensors(tmp_path):
    """A contract of one's own takes the checkpoints its tensors describe (formats.takes):
    a renamed marlin_moe_fp8 gives marlin_moe_fp8's rows, with no table naming it."""
    text = (CONTRACTS / "marlin_moe_fp8.moe").read_text().replace(
        "contract marlin_moe_fp8", "contract my_fp8_kernel")
    (tmp_path / "my.moe").write_text(text)
    loaded, problems = load_contracts([str(tmp_path)])
    assert problems is None
    model = load_model_config("minimax-m2")
    mine = audit_report([("minimax-m2", model)], [8], loaded)
    theirs = audit_report([("minimax-m2", model)], [8], [contract("marlin_moe_fp8")])
    assert not mine.skipped and [audit_formats(c) for c in loaded] == [None]  # no `route audit` names its formats
    assert [dataclasses.replace(r, contract="marlin_moe_fp8") for r in mine.rows] == list(theirs.rows)
    assert mine.rows[0].params["scheme"] == "fp8_block128"


def test_unknown_unquantized_contract_takes_unquantized_models(tmp_path):
    text = (CONTRACTS / "torch_grouped_mm.moe").read_text().replace(
        "contract torch_grouped_mm", "contract my_gemm")
    path = tmp_path / "my_gemm.moe"
    path.write_text(text)
    loaded, _ = load_contracts([str(path)])
    rows = audit([("mixtral-8x7b", load_model_config("mixtral-8x7b"))], [2], loaded)
    assert one(rows).contract == "my_gemm" and rows[0].admitted


def test_audit_labels_configs_by_name(contracts):
    rows = audit([load_model_config("gemma-4-26b-a4b")], [2], contracts)
    assert rows and isinstance(rows[0], AuditRow)
    assert {r.model for r in rows} == {"google/gemma-4-26B-A4B-it"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        rows[0].admitted = False  # type: ignore[misc]


# ---- CLI and formats ----------------------------------------------------------------


def test_json_schema(capsys):
    doc = run_json(capsys, "gemma-4-26b-a4b", "minimax-m2", "--tp", "2,8")
    assert set(doc) == {"models", "rows", "skipped"}
    assert doc["rows"] and doc["skipped"]
    gemma = next(m for m in doc["models"] if m["model"] == "gemma-4-26b-a4b")
    assert gemma["sources"]["intermediate_size"] == "text_config.moe_intermediate_size"
    assert gemma["sources"]["num_experts"] == "text_config.num_experts"
    for row in doc["rows"]:
        assert set(row) == ROW_KEYS
        assert isinstance(row["variant"], dict) and isinstance(row["params"], dict)
        assert isinstance(row["admitted"], bool) and isinstance(row["tp_size"], int)
        assert isinstance(row["violations"], list)
        if row["admitted"]:
            assert row["rule"] is None and row["reason"] is None and row["violations"] == []
            assert isinstance(row["extra_bytes"], int) and isinstance(row["pad_fraction"], float | int)
        else:
            assert isinstance(row["rule"], str) and isinstance(row["reason"], str)
            assert row["violations"][0] == {"rule": row["rule"], "reason": row["reason"]}
            assert row["extra_bytes"] is None and row["pad_fraction"] is None
    for entry in doc["skipped"]:
        assert set(entry) == SKIPPED_KEYS
    minimax = [r for r in doc["rows"] if r["model"] == "minimax-m2" and r["tp_size"] == 8]
    assert [r["admitted"] for r in minimax] == [True]
    assert any(not r["admitted"] for r in doc["rows"])
    assert {(s["model"], s["contract"]) for s in doc["skipped"]} >= {
        ("gemma-4-26b-a4b", "marlin_moe_fp8"), ("minimax-m2", "vllm_cpu_grouped_gemm")}


def _cells(line: str) -> list[str]:
    # split on unescaped pipes
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_markdown_shape(capsys):
    assert main(["audit", "gemma-4-26b-a4b", "gpt-oss-120b", "--tp", "1,4", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header, separator = _cells(lines[0]), _cells(lines[1])
    assert header[:4] == ["model", "contract", "variant", "TP"] and header[-1] == "fast path"
    assert len(separator) == len(header) and all(set(c) <= set("-:") for c in separator)
    table = [line for line in lines[2:] if line.startswith("|")]
    assert table and all(len(_cells(line)) == len(header) for line in table)
    report = audit_report([(n, load_model_config(n)) for n in ("gemma-4-26b-a4b", "gpt-oss-120b")],
                          [1, 4], [c for c in load_contracts([str(CONTRACTS)])[0] if engine_of(c) == "vllm"])
    assert len(table) == len(report.rows)  # the default --engine vllm: every contract but sglang_*
    assert "Skipped (model, contract) pairs:" in out
    assert any("| gemma-4-26b-a4b | `vllm_cpu_grouped_gemm` | isa=vec | 4 | 176 | 192 |" in line
               for line in table)
    assert render_markdown(report) == out


def test_text_table_grouped_and_aligned(capsys):
    assert main(["audit", "gemma-4-26b-a4b", "minimax-m2", "--tp", "2,4,8"]) == 0
    out = capsys.readouterr().out
    assert out.index("gemma-4-26b-a4b (google/gemma-4-26B-A4B-it)") < out.index("minimax-m2 (MiniMaxAI")
    assert "legend:" in out and "skipped:" in out
    lines = out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("contract"))
    column = header.index("fast path")
    names = tuple(f"  {c.stem} " for c in CONTRACTS.glob("*.moe"))
    rows = [line for line in lines if line.startswith(names)]
    assert rows and all(line[column:].startswith(("yes", "NO  ")) for line in rows)
    gemma = next(line for line in rows if "vllm_cpu_grouped_gemm" in line and "isa=vec" in line
                 and re.search(r"\s4\s+176\s+192\s", line))
    assert "8.3%" in gemma and "+9.1%" in gemma


def test_contracts_option_takes_files_and_folders(capsys, tmp_path):
    doc = run_json(capsys, "gemma-4-26b-a4b", "--tp", "4",
                   "--contracts", str(CONTRACTS / "vllm_cpu_grouped_gemm.moe"))
    assert {r["contract"] for r in doc["rows"]} == {"vllm_cpu_grouped_gemm"}
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "z.moe").write_text((CONTRACTS / "zentorch_fused_moe.moe").read_text())
    doc = run_json(capsys, "gemma-4-26b-a4b", "--tp", "4", "--contracts", str(folder),
                   str(CONTRACTS / "torch_grouped_mm.moe"))
    assert {r["contract"] for r in doc["rows"]} == {"zentorch_fused_moe", "torch_grouped_mm"}


def test_bad_config_exit_2_names_fields_tried(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "moe_intermediate_size": 32, "num_experts_per_tok": 2,
                                "num_hidden_layers": 2, "hidden_act": "silu"}))
    assert main(["audit", str(path), "--tp", "1"]) == 2
    err = capsys.readouterr().err
    assert "num_experts" in err and ", ".join(NUM_EXPERTS_ALIASES) in err
    no_width = tmp_path / "no_width.json"
    no_width.write_text(json.dumps({"hidden_size": 64, "num_experts": 4}))
    assert main(["audit", str(no_width)]) == 2
    assert ", ".join(INTERMEDIATE_SIZE_ALIASES) in capsys.readouterr().err
    assert main(["audit", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_unknown_bundled_name_did_you_mean(capsys):
    assert main(["audit", "gemma-4-26b", "--tp", "4"]) == 2
    err = capsys.readouterr().err
    assert "did you mean" in err and "'gemma-4-26b-a4b'" in err
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("tp", ["x", "0", "-2", ",", "2.5"])
def test_bad_tp_exit_2(capsys, tp):
    assert main(["audit", "gemma-4-26b-a4b", f"--tp={tp}"]) == 2
    assert "--tp" in capsys.readouterr().err


def test_parse_tp():
    assert parse_tp("1, 2,4,2,8") == [1, 2, 4, 8]


def test_broken_contract_exit_1(capsys, tmp_path):
    (tmp_path / "bad.moe").write_text("contract x\nparam a: int in 1..2\nlet b = nope\n")
    assert main(["audit", "gemma-4-26b-a4b", "--contracts", str(tmp_path)]) == 1
    assert "error[" in capsys.readouterr().err


def test_text_render_of_report_matches_cli(capsys, contracts):
    assert main(["audit", "gpt-oss-120b", "--tp", "8"]) == 0
    out = capsys.readouterr().out
    vllm = [c for c in contracts if engine_of(c) == "vllm"]  # the default --engine vllm
    report = audit_report([("gpt-oss-120b", load_model_config("gpt-oss-120b"))], [8], vllm)
    assert render_text(report) == out
    assert re.search(r"aiter_fused_moe\s+-\s+8\s+360\s+512\s", out)


# ---- expert parallelism (--ep) ------------------------------------------------------
# Expected numbers are the model configs' own (HF config.json: experts, H, I, layers, bf16)
# through vLLM 0.32's EP rules: the layer's tp is 1 (FusedMoEParallelConfig.make), rank r
# holds E // ep (+1 for r < E % ep) experts (determine_expert_map, pinned against vLLM in
# tests/conformance/test_expert_parallel.py), w13 [E_local, 2I, H] + w2 [E_local, H, I].

def _ep_row(doc: dict, model: str, ep: int, contract: str = "vllm_cpu_grouped_gemm", isa: str | None = "vec") -> dict:
    rows = [r for r in doc["ep_rows"] if r["model"] == model and r["contract"] == contract and r["ep_size"] == ep
            and (isa is None or r["variant"].get("isa") == isa)]
    assert len(rows) == 1, rows
    return rows[0]


def _topo(doc: dict, model: str, degree: int, contract: str = "vllm_cpu_grouped_gemm") -> dict:
    rows = [t for t in doc["topology"] if t["model"] == model and t["contract"] == contract
            and t["degree"] == degree and t["variant"].get("isa", "vec") == "vec"]
    assert len(rows) == 1, rows
    return rows[0]


def test_ep_qwen3_moe_experts_memory_and_no_pad(capsys):
    """Qwen3-30B-A3B: 128 experts, H 2048, I 768, 48 MoE layers, bf16, at --tp 2,4 --ep 2,4."""
    doc = run_json(capsys, "qwen3-30b-a3b", "--tp", "2,4", "--ep", "2,4")
    expert_bytes = 3 * 768 * 2048 * 2  # w13 + w2 of one expert, bf16
    for ep, local in ((2, 64), (4, 32)):
        row = _ep_row(doc, "qwen3-30b-a3b", ep)
        assert (row["admitted"], row["tp_size"], row["local_num_experts"], row["min_local_experts"]) == (True, 1, local, local)
        assert (row["intermediate_size_per_partition"], row["intermediate_size_per_partition_padded"]) == (768, 768)
        assert row["pad_needed"] is False and row["fast_path"] == "yes" and row["code"] is None
        assert row["rank_bytes"] == local * expert_bytes * 48
        assert row["placements"] == ["linear", "round_robin"]
        assert row["experts_by_rank"]["linear"] == [list(range(r * local, (r + 1) * local)) for r in range(ep)]
        assert row["experts_by_rank"]["round_robin"] == [list(range(r, 128, ep)) for r in range(ep)]
        topo = _topo(doc, "qwen3-30b-a3b", ep)
        # --tp ep at the same degree: the intermediate split, every expert, the same bytes
        assert topo["tp"] == {"fast_path": "yes", "rank_bytes": 128 * 3 * (768 // ep) * 2048 * 2 * 48,
                              "intermediate_size_per_partition": 768 // ep,
                              "intermediate_size_per_partition_padded": 768 // ep}
        assert topo["ep"] == {"fast_path": "yes", "rank_bytes": local * expert_bytes * 48, "local_num_experts": local}
    # torch_grouped_mm states linear placement only
    assert _ep_row(doc, "qwen3-30b-a3b", 4, "torch_grouped_mm", None)["placements"] == ["linear"]


def test_ep_mixtral_experts_and_an_ep_above_the_experts(capsys):
    """Mixtral-8x7B: 8 experts, H 4096, I 14336, 32 MoE layers, bf16; --ep 16 is refused (EP01)."""
    doc = run_json(capsys, "mixtral-8x7b", "--tp", "2,4", "--ep", "2,4,16")
    for ep, local in ((2, 4), (4, 2)):
        row = _ep_row(doc, "mixtral-8x7b", ep)
        assert row["admitted"] and row["local_num_experts"] == local and row["pad_needed"] is False
        assert row["rank_bytes"] == local * 3 * 14336 * 4096 * 2 * 32
        assert row["experts_by_rank"]["linear"][-1] == list(range(8 - local, 8))
    over = _ep_row(doc, "mixtral-8x7b", 16)
    assert (over["admitted"], over["code"], over["rule"]) == (False, "EP01", "runtime EP01")
    assert over["reason"] == "ep_size=16 exceeds the 8 experts: ranks 8..15 would hold none"
    assert over["local_num_experts"] is None and over["rank_bytes"] is None
    assert _topo(doc, "mixtral-8x7b", 16)["tp"] is None  # 16 is not a --tp degree here
    # torch_grouped_mm's ep_size domain is {1, 2, 4, 8}: its own parameter refuses 16
    domain = _ep_row(doc, "mixtral-8x7b", 16, "torch_grouped_mm", None)
    assert not domain["admitted"] and "ep_size = 16 is outside this contract's domain {1, 2, 4, 8}" in domain["reason"]


def test_ep_uneven_split_holds_one_fewer_on_the_last_ranks(capsys):
    """128 experts over 3 ranks: 43, 43, 42 (the contract's local_num_experts is 43)."""
    doc = run_json(capsys, "qwen3-30b-a3b", "--tp", "1", "--ep", "3")
    row = _ep_row(doc, "qwen3-30b-a3b", 3)
    assert (row["local_num_experts"], row["min_local_experts"]) == (43, 42)
    assert [len(r) for r in row["experts_by_rank"]["linear"]] == [43, 43, 42]
    assert row["experts_by_rank"]["linear"][2] == list(range(86, 128))
    assert row["experts_by_rank"]["round_robin"][2] == list(range(2, 128, 3))
    assert row["rank_bytes"] == 43 * 3 * 768 * 2048 * 2 * 48  # the spare slot is allocated


def test_ep_takes_the_fast_path_where_tp_pads(capsys):
    """Gemma-4-26B-A4B (I 704): --tp 4 pads 176 to the vec kernel's 32-row tile, --ep 4 keeps
    704 whole (a multiple of 32): EP takes the fast path without a pad."""
    doc = run_json(capsys, "gemma-4-26b-a4b", "--tp", "4", "--ep", "4")
    topo = _topo(doc, "gemma-4-26b-a4b", 4)
    assert topo["tp"]["fast_path"] == "padded" and topo["tp"]["intermediate_size_per_partition_padded"] == 192
    assert topo["ep"]["fast_path"] == "yes"
    row = _ep_row(doc, "gemma-4-26b-a4b", 4)
    assert (row["intermediate_size_per_partition"], row["intermediate_size_per_partition_padded"]) == (704, 704)
    assert topo["tp"]["rank_bytes"] > topo["ep"]["rank_bytes"]  # the TP pad's zeros


def test_ep_text_and_markdown(capsys):
    assert main(["audit", "mixtral-8x7b", "--tp", "2", "--ep", "2,16"]) == 0
    text = capsys.readouterr().out
    assert "TP and EP, side by side:" in text and "expert parallelism (--ep;" in text
    assert "runtime EP01: ep_size=16 exceeds the 8 experts" in text
    assert "vllm_cpu_grouped_gemm: placement linear, round_robin" in text
    assert re.search(r"no expert parallelism: .*zentorch_fused_moe", text)
    assert main(["audit", "mixtral-8x7b", "--tp", "2", "--ep", "2", "--format", "markdown"]) == 0
    assert "| ep: experts / rank |" in capsys.readouterr().out
    assert main(["audit", "mixtral-8x7b", "--tp", "2"]) == 0
    assert "side by side" not in capsys.readouterr().out  # no --ep, no EP table


@pytest.mark.parametrize("ep", ["0", "x", "", "2,,a", "99999999"])
def test_bad_ep_exit_2(capsys, ep):
    assert main(["audit", "mixtral-8x7b", "--tp", "2", f"--ep={ep}"]) == 2
    err = capsys.readouterr().err
    assert "error[LC801]" in err and "--ep" in err
