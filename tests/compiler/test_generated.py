"""The committed generated/ is the golden record: current, byte-stable, standalone, lint-clean."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from layoutc.cli import main
from tests.conftest import ROOT

MODULES = sorted(p.stem for p in (ROOT / "generated").glob("*.py") if p.stem != "__init__")


def test_generated_is_current(in_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compile", "contracts/", "--out", "generated", "--check"])
    out = capsys.readouterr().out
    assert code == 0, out


def test_check_reports_modified_missing_and_extra(tmp_path: Path, in_root: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(ROOT / "generated", tmp_path / "g")
    (tmp_path / "g" / "zentorch_fused_moe.py").unlink()
    (tmp_path / "g" / "stray.py").write_text("x = 1\n")
    target = tmp_path / "g" / "vllm_cpu_grouped_gemm.py"
    target.write_text(target.read_text().replace("def plan(", "def plan_(", 1))
    assert main(["compile", "contracts/", "--out", str(tmp_path / "g"), "--check"]) == 1
    out = capsys.readouterr().out
    assert "missing:" in out and "zentorch_fused_moe.py" in out
    assert "extra:" in out and "stray.py" in out
    assert "modified:" in out and "-def plan_(" in out and "+def plan(" in out
    # --check wrote nothing
    assert not (tmp_path / "g" / "zentorch_fused_moe.py").exists()


def test_check_ignores_version_only_differences(tmp_path: Path, in_root: Path) -> None:
    shutil.copytree(ROOT / "generated", tmp_path / "g")
    for path in (tmp_path / "g").glob("*.py"):
        path.write_text(path.read_text().replace("# layoutc-version: ", "# layoutc-version: 9.9.9-was-"))
    assert main(["compile", "contracts/", "--out", str(tmp_path / "g"), "--check"]) == 0


def test_check_does_not_depend_on_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(ROOT / "contracts"), "--out", str(ROOT / "generated"), "--check"]) == 0


@pytest.mark.slow
def test_output_is_byte_identical_across_runs_and_hash_seeds(tmp_path: Path) -> None:
    outs = []
    for seed in ("0", "12345"):
        out = tmp_path / f"out{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-m", "layoutc", "compile", str(ROOT / "contracts"), "--out", str(out)],
                       check=True, env=env, capture_output=True, cwd=tmp_path)
        outs.append({p.name: p.read_bytes() for p in sorted(out.glob("*.py"))})
    assert outs[0] == outs[1]
    assert outs[0] == {p.name: p.read_bytes() for p in sorted((ROOT / "generated").glob("*.py"))}


BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('layoutc', 'lark', 'jinja2', 'z3'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
sys.path.insert(0, {root!r})
import importlib
mod = importlib.import_module('generated.' + {name!r})
assert callable(mod.plan)
leaked = [m for m in sys.modules if m.split('.')[0] in ('layoutc', 'lark', 'jinja2', 'z3')]
assert not leaked, leaked
print('ok')
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", MODULES)
def test_generated_modules_need_only_torch(name: str, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", BLOCKER.format(root=str(ROOT), name=name)],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("tool", [["ruff", "check", "--no-cache", "generated", "layoutc", "tests", "examples", "bench"],
                                  ["mypy", "--strict", "generated", "layoutc/runtime"]])
def test_generated_code_is_lint_and_type_clean(tool: list[str]) -> None:
    if shutil.which(tool[0]) is None:
        pytest.skip(f"{tool[0]} is not installed: pip install -e '.[test]'")
    result = subprocess.run(tool, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_generated_modules_are_ruff_formatted() -> None:
    """The emitter writes formatted code itself (layoutc/compiler/emit/pyfmt.py), so compile and
    --check give the same bytes with or without ruff; this holds it to ruff's formatter. The
    copied `_runtime/` is layoutc/runtime's text, formatted or not as its source is."""
    if shutil.which("ruff") is None:
        pytest.skip("ruff is not installed: pip install -e '.[test]'")
    files = sorted(str(p) for p in (ROOT / "generated").glob("*.py"))
    result = subprocess.run(["ruff", "format", "--check", *files], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compiler_never_runs_a_formatter() -> None:
    """ruff is no dependency of the compiler: nothing under layoutc/compiler starts a process or
    imports ruff (compile's output is the emitter's own text, the same with or without ruff)."""
    for path in sorted((ROOT / "layoutc" / "compiler").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "subprocess" not in text and "import ruff" not in text and 'which("ruff")' not in text, path
