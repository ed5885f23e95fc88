"""The error corpus: every ``tests/cases/errors/NAME.moe`` is a small contract with
one mistake, and ``NAME.expected`` is the exact stderr of ``layoutc check`` on it.

The files are checked in process (``layoutc.cli.main``) from the repository root,
so the paths in the expected text are ``tests/cases/errors/NAME.moe``. When a
message changes on purpose, run ``python tests/support/regen_errors_corpus.py`` and
review the diff of the ``.expected`` files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layoutc.cli import main
from layoutc.compiler.diagnostics import CODES

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path("tests") / "cases" / "errors"
CASES = sorted(p.stem for p in (ROOT / CORPUS).glob("*.moe"))
BASE = (CORPUS / "_base.moe.txt").as_posix()

# Codes that no corpus file triggers, and why.
NOT_IN_CORPUS = {
    "LC105": "needs a file over 1 MiB; test_file_too_large builds one in a temporary folder",
    "LC210": "a warning (exit 0): test_missing_policy_is_a_warning checks it",
    "LC241": "needs two contract files checked together: tests/compiler/test_routes_decl.py checks a folder of two",
    "LC900": "internal error: only a bug in layoutc can raise it",
    **{code: "not a `check` diagnostic (verify, compile, explain, audit, the command line): "
       "tests/tools/test_hostile_cli.py and tests/compiler/test_diagnostic_channel.py trigger it"
       for code in ("LC601", "LC602", "LC603", "LC604", "LC701", "LC702", "LC703", "LC704", "LC705", "LC801")},
    "LC802": "an environment variable, not a contract: tests/tools/test_hostile_cli.py (LAYOUTC_JOBS) and "
             "tests/tools/test_vllm_plugin.py (LAYOUTC_VLLM) trigger it",
}

TRACEBACK_MARKERS = ("Traceback (most recent call last)", "LC900")


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def _check(capsys: pytest.CaptureFixture[str], path: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["check", path])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _no_traceback(*texts: str) -> None:
    for text in texts:
        for marker in TRACEBACK_MARKERS:
            assert marker not in text, f"layoutc crashed or leaked a traceback:\n{text}"


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 45, CASES


@pytest.mark.parametrize("name", CASES)
def test_error_case(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = (CORPUS / f"{name}.moe").as_posix()
    expected_file = ROOT / CORPUS / f"{name}.expected"
    assert expected_file.is_file(), f"{expected_file} is missing: run python tests/support/regen_errors_corpus.py {name}"
    expected = expected_file.read_text(encoding="utf-8")
    code, out, err = _check(capsys, path)
    _no_traceback(out, err)
    assert code == 1, f"exit code {code}, stderr:\n{err}"
    assert out == ""
    assert err == expected


def test_every_expected_has_a_case() -> None:
    stale = sorted(p.name for p in (ROOT / CORPUS).glob("*.expected") if p.stem not in CASES)
    assert not stale, f"expected files without a .moe: {stale}"


def test_base_contract_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    """Every case is the base with one mistake, so the base itself must check clean."""
    code, out, err = _check(capsys, BASE)
    _no_traceback(out, err)
    assert code == 0, err
    assert err == ""


def test_corpus_covers_every_code() -> None:
    seen: set[str] = set()
    for name in CASES:
        text = (ROOT / CORPUS / f"{name}.expected").read_text(encoding="utf-8")
        seen.update(re.findall(r"(?:error|warning)\[(LC\d{3})\]", text))
    assert seen <= set(CODES), sorted(seen - set(CODES))
    missing = sorted({c for c in CODES if c.startswith("LC")} - seen - set(NOT_IN_CORPUS))  # LR: run's codes
    assert not missing, f"no corpus case triggers {missing}; add one (or explain it in NOT_IN_CORPUS)"


def test_each_case_reports_at_least_one_located_error() -> None:
    for name in CASES:
        text = (ROOT / CORPUS / f"{name}.expected").read_text(encoding="utf-8")
        first = text.splitlines()[0]
        assert re.match(rf"{re.escape((CORPUS / name).as_posix())}\.moe:\d+:\d+: error\[LC\d{{3}}\]: ", first), first


def test_file_too_large(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.moe"
    big.write_text("contract big\n" + "# padding\n" * 120_000, encoding="utf-8")
    code, out, err = _check(capsys, str(big))
    _no_traceback(out, err)
    assert code == 1
    assert "error[LC105]" in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _check(capsys, str(tmp_path / "absent.moe"))
    _no_traceback(out, err)
    assert code == 2  # an input that cannot be read is not a finding (issue 16)
    assert "absent.moe:1:1: error[LC100]" in err


def test_missing_policy_is_a_warning(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    text = (ROOT / BASE).read_text().replace("policy error\n", "")
    path = tmp_path / "no_policy.moe"
    path.write_text(text)
    assert main(["check", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning[LC210]: no `policy` declared; using `policy error`" in err
