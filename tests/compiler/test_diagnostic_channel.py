"""One diagnostic channel (issue 16 item 5).

Verify findings and compile, explain and audit errors are the same `Diagnostic` as
`check`'s: `file:line:col`, a registered code, `--format text|json|github`. An
inconclusive verdict exits 2 and the JSON tells "the solver gave up" from "the tool
failed". `layoutc rule LCxxx` prints a code's documentation.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from layoutc.cli import main
from layoutc.compiler.diagnostics import CODES
from layoutc.compiler.verify import prove as verify_module

ROOT = Path(__file__).resolve().parents[2]
UNSOUND = ROOT / "tests" / "cases" / "unsound" / "end_padded_w13.moe"
GOOD = ROOT / "contracts" / "torch_grouped_mm.moe"
LOCATED = re.compile(r"^(.+?):(\d+):(\d+): (error|warning)\[(LC\d{3})\]: ", re.M)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_verify_counterexample_is_a_located_diagnostic(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "verify", str(UNSOUND))
    assert code == 1
    found = [m for m in LOCATED.finditer(err) if m.group(5) == "LC601"]
    assert found and all(m.group(1) == str(UNSOUND) and int(m.group(2)) >= 1 for m in found), err
    assert "Summary:" in out  # the report is still there


def test_verify_github_titles_carry_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "verify", str(UNSOUND), "--format", "github")
    assert code == 1
    assert re.search(r"^::error file=.+,line=\d+,title=layoutc LC601 ", out, re.M), out


def test_inconclusive_is_exit_2_and_the_solver_gave_up(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "verify", str(GOOD), "--budget-s", "0.000001", "--format", "json")
    assert code == 2
    doc = json.loads(out)
    props = doc["contracts"][0]["properties"]
    inconclusive = [p for p in props if p["status"] == "inconclusive"]
    assert inconclusive and all(p["cause"] == "solver" for p in inconclusive)
    assert doc["tool_failures"] == [] and doc["summary"]["tool_failures"] == 0
    assert {d["code"] for d in doc["diagnostics"]} >= {"LC603"}


def test_a_verifier_failure_is_exit_2_and_the_tool_failed(capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("simulated bug in the verifier")

    monkeypatch.setattr(verify_module, "verify", broken)
    code, out, _ = run(capsys, "verify", str(GOOD), "--format", "json", "--no-cache")
    assert code == 2
    doc = json.loads(out)
    assert doc["summary"]["tool_failures"] == 1 and doc["contracts"] == []
    assert doc["tool_failures"][0]["cause"] == "tool" and doc["tool_failures"][0]["code"] == "LC900"
    assert "simulated bug" in doc["tool_failures"][0]["message"]


def test_check_github_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.moe"
    bad.write_text(GOOD.read_text().replace("round_up(", "roundup("), encoding="utf-8")
    code, out, _ = run(capsys, "check", str(bad), "--format", "github")
    assert code == 1
    assert re.search(rf"^::error file={re.escape(str(bad))},line=\d+,col=\d+,title=layoutc LC305::", out, re.M), out


def test_compile_drift_is_lc701(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "gen"
    assert main(["compile", str(GOOD), "--out", str(out_dir), "--no-verify"]) == 0
    module = out_dir / "torch_grouped_mm.py"
    lines = module.read_text().splitlines(keepends=True)
    lines[40] = "# edited by hand\n"
    module.write_text("".join(lines))
    (out_dir / "stray.py").write_text("")
    capsys.readouterr()
    code, out, _ = run(capsys, "compile", str(GOOD), "--out", str(out_dir), "--no-verify", "--check",
                       "--format", "json")
    assert code == 1
    diags = json.loads(out)
    assert {d["code"] for d in diags} == {"LC701"}
    by_file = {Path(d["span"]["file"]).name: d for d in diags}
    assert by_file["torch_grouped_mm.py"]["span"]["line"] == 41
    assert "stray.py" in by_file


def test_compile_duplicate_contract_name_is_lc702(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "copy.moe"
    shutil.copy(GOOD, copy)
    code, _, err = run(capsys, "compile", str(GOOD), str(copy), "--out", str(tmp_path / "o"), "--no-verify")
    assert code == 2
    assert re.search(rf"^{re.escape(str(copy))}:1:1: error\[LC702\]: ", err, re.M), err


def test_compile_refuses_an_unsound_contract_with_lc601(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compile", str(UNSOUND), "--out", str(tmp_path / "o"))
    assert code == 1
    assert "error[LC601]" in err and not (tmp_path / "o").exists()


def test_explain_errors_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", str(GOOD), "--set", "tp_size=5", "--format", "json")
    assert code == 2
    diags = json.loads(out)
    assert diags[0]["code"] == "LC703" and diags[0]["span"]["file"] == str(GOOD) and diags[0]["span"]["line"] >= 1


def test_audit_errors_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 64,\n "num_experts": }')
    code, out, _ = run(capsys, "audit", str(bad), "--format", "json")
    assert code == 2
    diags = json.loads(out)
    assert diags[0]["code"] == "LC704"
    assert (diags[0]["span"]["line"], diags[0]["span"]["column"]) == (2, 17)  # where the JSON breaks


@pytest.mark.parametrize("code", sorted(CODES))
def test_rule_prints_every_code(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "rule", code.lower())
    assert rc == 0
    assert out.startswith(f"{code}: {CODES[code]}")
    assert "meaning: " in out and "example: " in out  # the row of docs/language.md's code table
