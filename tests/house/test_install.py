"""A real non-editable install ships the contracts and the docs (issue 16 item 2).

`pip install --no-deps --no-build-isolation --target DIR .` builds the wheel with
setuptools (as `pip install .` does) and unpacks it into DIR. A fresh virtual
environment (made without pip) sees DIR and, through a .pth file, the directories
that hold lark, jinja2 and z3 only, never this checkout nor torch. There,
`layoutc audit gemma-4-26b-a4b` must work without `--contracts` (it exited 2 before:
contracts/ was not package data), `layoutc rule LC201` must print the documentation,
and check/verify/compile must run on the installed contracts. ~15 s, no network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(r'''
    import importlib.abc, json, os, sys

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "numpy", "vllm", "zentorch"):
                raise ImportError(f"{name} is blocked")
            return None

    sys.meta_path.insert(0, Refuse())
    import layoutc, layoutc_contracts
    from layoutc.tools.audit import default_contracts_dir
    from layoutc.cli import main
    out = sys.argv[1]
    contracts = str(default_contracts_dir())
    result = {
        "layoutc": layoutc.__file__,
        "contracts_dir": contracts,
        "audit": main(["audit", "gemma-4-26b-a4b", "--tp", "1,4", "--format", "json"]),
    }
    sys.stdout.flush()
    result["rule"] = main(["rule", "LC201"])
    result["check"] = main(["check", contracts])
    result["verify"] = main(["verify", os.path.join(contracts, "torch_grouped_mm.moe")])
    result["compile"] = main(["compile", os.path.join(contracts, "torch_grouped_mm.moe"), "--out", out])
    sys.stdout.flush()
    print("RESULT " + json.dumps(result))
''')


def _site_dir(module: str) -> str:
    spec = __import__("importlib.util").util.find_spec(module)
    assert spec is not None and spec.origin, module
    origin = Path(spec.origin)
    return str(origin.parent.parent if origin.name == "__init__.py" else origin.parent)


def _source_copy(dest: Path) -> Path:
    """The checkout's files (tracked and untracked-but-not-ignored) in a fresh folder, so
    that a stale in-tree build/ cannot leak old files into the wheel."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True,
                            cwd=ROOT, timeout=60, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def test_non_editable_install_audits_without_contracts_flag(tmp_path: Path) -> None:
    target = tmp_path / "site"
    source = _source_copy(tmp_path / "src")
    # Build with this environment's setuptools when it meets pyproject's build-system
    # requirement (no network); an older one (a bare venv has 65) builds in isolation.
    import importlib.metadata
    try:
        recent = int(importlib.metadata.version("setuptools").split(".")[0]) >= 68
    except importlib.metadata.PackageNotFoundError:
        recent = False
    isolation = ["--no-build-isolation"] if recent else []
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *isolation,
         "--no-cache-dir", "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert build.returncode == 0, build.stderr[-3000:]
    assert sorted(p.name for p in (target / "layoutc_contracts").glob("*.moe")) == sorted(
        p.name for p in (source / "contracts").glob("*.moe"))
    assert (target / "layoutc_docs" / "language.md").is_file()
    assert (target / "bin" / "layoutc").is_file()  # the console script

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    deps = sorted({_site_dir(m) for m in ("lark", "jinja2", "markupsafe", "z3")})
    # the installed copy first, then the three dependencies' folders (which are the
    # test venv's site-packages: the editable finder there is never activated, .pth
    # files are only read in site directories)
    (site / "layoutc_under_test.pth").write_text("\n".join([str(target), *deps]) + "\n")
    run = subprocess.run([str(python), "-c", CHILD, str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)})
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, f"rc={run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["layoutc"].startswith(str(target)), result  # not this checkout
    assert result["contracts_dir"].startswith(str(target)), result
    assert {k: result[k] for k in ("audit", "rule", "check", "verify", "compile")} == {
        "audit": 0, "rule": 0, "check": 0, "verify": 0, "compile": 0}, run.stderr[-3000:]
    doc = json.loads(run.stdout[run.stdout.index("{"):run.stdout.index("\nLC201")])
    assert any(r["contract"] == "vllm_cpu_grouped_gemm" and r["admitted"] for r in doc["rows"])
    assert "meaning: unknown name" in run.stdout
    assert (tmp_path / "out" / "torch_grouped_mm.py").is_file()
