"""`layoutc audit --engine vllm,sglang` and `layoutc explain --engine`: each engine's CPU layout side by side.

The numbers are the contracts' plans (sglang_cpu_* pad the full intermediate size to
tp_size x block before sharding; vLLM shards first), which tests/conformance/test_sglang.py
holds to SGLang 0.5.23's own code and tests/conformance to vLLM's.
"""

from __future__ import annotations

import json
import re

import pytest

from layoutc.cli import main

MODELS = "layoutc/tools/models"


def _side_by_side(out: str) -> dict[tuple[str, int], str]:
    """The side-by-side table's rows keyed by (engine label's first word, tp)."""
    table = out.split("engines, side by side:", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        match = re.match(r"\s+(vLLM|SGLang) \S+\s+\S+\s+(\d+)\s+(.*)$", line)
        assert match, line
        rows[(match.group(1), int(match.group(2)))] = " ".join(match.group(3).split())
    return rows


def test_audit_gpt_oss_20b_at_tp_8_both_engines_last_rank_192(in_root, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """gpt-oss-20b (I = 2880, MXFP4) at tp 8: both engines 384 per rank, rank 7 holding 192 live rows;
    at tp 4 they differ (vLLM 736 per rank, SGLang 768)."""
    assert main(["audit", f"{MODELS}/gpt-oss-20b.json", "--tp", "4,8", "--engine", "vllm,sglang"]) == 0
    rows = _side_by_side(capsys.readouterr().out)
    assert rows[("SGLang", 8)].startswith("384 6.2% ranks 0-6: 384, rank 7: 192 1.3 GiB yes")
    assert rows[("vLLM", 8)].startswith("384 6.2% ranks 0-6: 384, rank 7: 192 1.3 GiB")
    assert rows[("SGLang", 4)].startswith("768 6.2% ranks 0-2: 768, rank 3: 576 2.5 GiB yes")
    assert rows[("vLLM", 4)].startswith("736 2.2% ranks 0-2: 736, rank 3: 672 2.4 GiB")


def test_audit_qwen3_30b_tp_5_vllm_refuses_sglang_pads(in_root, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """Qwen3-30B-A3B (I = 768) at tp 5: vLLM refuses (768 does not split) and shows no layout;
    SGLang pads 768 -> 800, 160 per rank, rank 4 holding 128."""
    assert main(["audit", f"{MODELS}/qwen3-30b-a3b.json", "--tp", "5,8", "--engine", "vllm,sglang"]) == 0
    rows = _side_by_side(capsys.readouterr().out)
    assert rows[("vLLM", 5)] == "- - - - NO: intermediate_size must split evenly over tp_size"
    assert rows[("SGLang", 5)] == "160 4.0% ranks 0-3: 160, rank 4: 128 11.2 GiB yes"
    assert rows[("vLLM", 8)] == rows[("SGLang", 8)] == "96 0.0% all ranks: 96 6.8 GiB yes"


def test_audit_engines_json(in_root, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """DeepSeek-V2-Lite (I = 1408) at tp 8 in JSON: per-rank live rows of each engine."""
    assert main(["audit", f"{MODELS}/deepseek-v2-lite.json", "--tp", "8", "--engine", "vllm,sglang",
                 "--format", "json"]) == 0
    engines = {e["engine"]: e for e in json.loads(capsys.readouterr().out)["engines"]}
    assert engines["vllm"]["contract"] == "vllm_cpu_grouped_gemm"
    assert engines["vllm"]["per_rank_padded"] == 192 and engines["vllm"]["live_rows"] == [176] * 8
    assert engines["sglang"]["contract"] == "sglang_cpu_moe" and engines["sglang"]["admitted"]
    assert engines["sglang"]["per_rank_padded"] == 192 and engines["sglang"]["live_rows"] == [192] * 7 + [64]
    assert engines["vllm"]["rank_bytes"] == engines["sglang"]["rank_bytes"] > 0


def test_audit_one_engine_has_no_side_by_side_and_unknown_engine_is_a_usage_error(  # type: ignore[no-untyped-def]
        in_root, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", f"{MODELS}/mixtral-8x7b.json", "--tp", "3", "--engine", "sglang"]) == 0
    out = capsys.readouterr().out
    assert "sglang_cpu_moe" in out and "vllm_cpu_grouped_gemm" not in out and "side by side" not in out
    assert main(["audit", f"{MODELS}/mixtral-8x7b.json", "--engine", "vllm,tgi"]) == 2
    captured = capsys.readouterr()
    assert "unknown engine 'tgi'; known: vllm, sglang" in captured.out + captured.err


SGLANG_704 = ["explain", "contracts/sglang_cpu_moe.moe", "--set", "num_experts=8", "--set", "hidden_size=2048",
              "--set", "intermediate_size=704", "--set", "tp_size=4", "--set", "activation=silu",
              "--set", "dtype=bfloat16"]


def test_explain_draws_each_ranks_slice_under_both_rules(in_root, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """gemma-4's I = 704 at tp 4: vLLM 176 live + 16 pad on every rank; SGLang 192 on ranks 0-2, 128 + 64 pad on rank 3."""
    assert main([*SGLANG_704, "--engine", "vllm,sglang"]) == 0
    out = capsys.readouterr().out
    assert ("  vLLM 0.32.0/0.33.0/0.34.0 (vllm_cpu_grouped_gemm, isa=amx): shard I = 704 into 176 rows per rank, then pad each "
            "rank's slice to 192; L_padded = 192 per rank, waste 8.3%\n"
            f"    ranks 0-3: rows [0, 176) .. [528, 704), 176 live + 16 pad  |{'#' * 29}{'.' * 3}|\n") in out
    assert ("  SGLang 0.5.23 (sglang_cpu_moe): pad I = 704 to 768 (a multiple of tp_size x 32) before sharding, "
            "then 192 rows per rank, the last ranks shorter; L_padded = 192 per rank, waste 8.3%\n"
            f"    ranks 0-2: rows [0, 192) .. [384, 576), 192 live + 0 pad  |{'#' * 32}|\n"
            f"    rank 3: rows [576, 704), 128 live + 64 pad  |{'#' * 21}{'.' * 11}|\n") in out
    assert out.index("vLLM 0.32.0/0.33.0/0.34.0 (") < out.index("SGLang 0.5.23 (")
    assert main([*SGLANG_704, "--engine", "sglang"]) == 0
    assert "vLLM" not in capsys.readouterr().out
    assert main(SGLANG_704) == 0
    assert "by engine" not in capsys.readouterr().out


def test_explain_from_a_vllm_contract_draws_sglangs_empty_rank(in_root, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """Explaining vLLM's contract with --engine sglang,vllm draws SGLang's counterpart: Mixtral-like
    I = 896 at tp 8 (112 per rank, 128 with vLLM's pad) is 1024 under SGLang, ranks 0-6 128 rows, rank 7 none."""
    args = ["explain", "contracts/vllm_cpu_grouped_gemm.moe", "--set", "num_experts=8", "--set", "hidden_size=4096",
            "--set", "intermediate_size=896", "--set", "tp_size=8", "--set", "isa=amx", "--set", "activation=silu",
            "--set", "dtype=bfloat16", "--engine", "sglang,vllm"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "    ranks 0-7: rows [0, 112) .. [784, 896), 112 live + 16 pad" in out
    assert "    ranks 0-6: rows [0, 128) .. [768, 896), 128 live + 0 pad" in out
    assert f"    rank 7: no rows, 0 live + 128 pad  |{'.' * 32}|" in out
    assert out.index("SGLang 0.5.23 (") < out.index("vLLM 0.32.0/0.33.0/0.34.0 (")


def test_explain_engine_refusals_are_lines_and_unknown_engine_is_lc703(  # type: ignore[no-untyped-def]
        in_root, capsys: pytest.CaptureFixture[str]) -> None:
    fp8 = ["explain", "contracts/sglang_cpu_fp8_moe.moe", "--set", "num_experts=8", "--set", "hidden_size=7168",
           "--set", "intermediate_size=2048", "--set", "dtype=bfloat16", "--engine", "vllm,sglang"]
    assert main([*fp8, "--set", "tp_size=9", "--set", "block=64"]) == 0
    assert ("  vLLM 0.32.0/0.33.0: no CPU contract for this variant (marlin_moe_fp8 is the format at block=128)"
            in capsys.readouterr().out)
    assert main([*fp8, "--set", "tp_size=3", "--set", "block=128"]) == 0
    assert ("  vLLM 0.32.0/0.33.0 (marlin_moe_fp8): refused: require (line 22): intermediate_size must split evenly over "
            "tp_size" in capsys.readouterr().out)
    assert main([*SGLANG_704, "--engine", "vllm,tgi"]) == 2
    captured = capsys.readouterr()
    assert "error[LC703]: --engine: unknown engine 'tgi'; known: vllm, sglang" in captured.out + captured.err
    aiter = ["explain", "contracts/aiter_unquantized_moe.moe", "--set", "num_experts=8", "--set", "hidden_size=4096",
             "--set", "intermediate_size=1024", "--set", "tp_size=2", "--set", "activation=silu",
             "--set", "dtype=bfloat16", "--engine", "sglang"]
    assert main(aiter) == 0
    assert "  SGLang 0.5.23: no CPU contract for the format aiter_unquantized_moe serves\n" in capsys.readouterr().out
