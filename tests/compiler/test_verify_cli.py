"""`layoutc verify` output formats, exit codes and the documented JSON schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layoutc.cli import main
from layoutc.compiler.verify.registry import PROPERTY_IDS
from tests.conftest import ROOT

UNSOUND = ROOT / "tests" / "cases" / "unsound"
STATUSES = {"proved", "counterexample", "inconclusive", "vacuous", "info"}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().out


def test_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(["verify", str(ROOT / "contracts"), str(UNSOUND / "end_padded_w13.moe"), "--format", "json"],
                    capsys)
    assert code == 1
    doc = json.loads(out)
    assert set(doc) == {"contracts", "summary", "tool_failures", "diagnostics"}
    assert {"contracts", "properties", "proved", "counterexample", "inconclusive", "vacuous", "info",
            "tool_failures"} == set(doc["summary"])
    assert doc["tool_failures"] == [] and doc["summary"]["tool_failures"] == 0
    # every counterexample is also a located LC601 diagnostic
    cex_diags = [d for d in doc["diagnostics"] if d["code"] == "LC601"]
    assert len(cex_diags) == doc["summary"]["counterexample"]
    assert all(d["span"]["file"].endswith("end_padded_w13.moe") and d["span"]["line"] >= 1 for d in cex_diags)
    seen_cex = False
    for entry in doc["contracts"]:
        assert set(entry) == {"contract", "file", "properties"}
        assert [p["id"] for p in entry["properties"]] == list(PROPERTY_IDS)
        for prop in entry["properties"]:
            assert set(prop) == {"id", "status", "detail", "counterexample", "seconds", "queries", "line", "warnings",
                                 "cause"}
            assert prop["cause"] == ("solver" if prop["status"] == "inconclusive" else None)
            assert prop["status"] in STATUSES
            assert isinstance(prop["seconds"], float) and isinstance(prop["queries"], int)
            assert isinstance(prop["line"], int) and isinstance(prop["warnings"], list)
            if prop["status"] == "counterexample":
                seen_cex = True
                cex = prop["counterexample"]
                assert set(cex) == {"config", "derived", "message", "where", "picture"}
                assert isinstance(cex["picture"], list) and cex["picture"]
            else:
                assert prop["counterexample"] is None
    assert seen_cex
    assert doc["summary"]["counterexample"] >= 2  # placement and admission of the unsound case
    assert doc["summary"]["contracts"] == len(doc["contracts"])


def test_text_report_has_a_summary_block(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(["verify", str(UNSOUND / "uninit_pad.moe")], capsys)
    assert code == 1
    assert "inertness" in out and "counterexample" in out
    assert "config:" in out and "| w13.n:" in out  # the picture
    tail = out.split("Summary:")[1]
    for status in ("proved", "counterexample", "inconclusive", "vacuous"):
        assert status in tail


def test_github_annotations_point_at_file_and_line(capsys: pytest.CaptureFixture[str]) -> None:
    path = UNSOUND / "aiter_x2_every_tp.moe"
    code, out = run(["verify", str(path), "--format", "github"], capsys)
    assert code == 1
    errors = [line for line in out.splitlines() if line.startswith("::error ")]
    assert errors
    arg_line = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "arg intermediate_pad" in line)
    assert any(f"line={arg_line}," in line and "kernel-arguments" in line for line in errors), errors


def test_vacuous_contract_is_not_proved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "contracts" / "zentorch_fused_moe.moe").read_text()
    text += 'admit hidden_size < 0 : "nothing admits a negative size"\n'
    path = tmp_path / "vacuous.moe"
    path.write_text(text)
    code, out = run(["verify", str(path), "--format", "json"], capsys)
    assert code == 1
    statuses = {p["status"] for p in json.loads(out)["contracts"][0]["properties"]}
    assert statuses == {"vacuous"}


def test_precommit_hook_is_declared() -> None:
    text = (ROOT / ".pre-commit-hooks.yaml").read_text()
    assert "id: layoutc-verify" in text and "entry: layoutc verify" in text and r"files: \.moe$" in text
