"""The wheel, installed, runs a quantized checkpoint (issue 41 item 5: the hand-listed packages
left `layoutc.tools.quant_run` out of the wheel, and after `pip install .` every quantized
`layoutc run` failed; tests/house/test_install.py never ran that path).

The checkout's files (tracked and untracked-but-not-ignored, so no stale build/ leaks in) are
built into a wheel with setuptools (`pip wheel`, as `pip install .` builds it) and installed
with `--no-deps` into a fresh virtual environment made without pip. Its dependencies (torch,
transformers, safetensors, lark, jinja2, z3) come from this interpreter's folders through a .pth
file, read after the environment's own site-packages, so the installed copy is the only layoutc
it can import (the .pth files of those folders, an editable install's finder among them, are
never run: Python reads .pth files in site directories only). From a folder outside the
checkout, the environment's own `layoutc` console script runs a GPTQ int4 checkpoint
(tests/support/tiny_run.py: hidden 128, intermediate 256, 4 experts, group 64) at TP 1 and 2 on torch's
int4pack kernel against transformers' block; every row must be "ok". ~60 s on 2 cores.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.house.test_install import _site_dir, _source_copy
from tests.house.test_packaging import _setup
from tests.support import tiny_run

pytestmark = [pytest.mark.slow, pytest.mark.kernel, pytest.mark.transformers]  # int4pack in the child

ROOT = Path(__file__).resolve().parents[2]
#: the modules `layoutc run` on a quantized checkpoint imports beyond the standard library
DEPENDENCIES = ("torch", "numpy", "transformers", "safetensors", "lark", "jinja2", "markupsafe", "z3")
PROBE = "import layoutc, layoutc_generated, layoutc.tools.quant_run as q; print(layoutc.__file__, q.__file__)"


def _wheel(tmp_path: Path) -> Path:
    source = _source_copy(tmp_path / "src")
    # this environment's setuptools when it meets pyproject's build-system requirement (no
    # network); an older one builds in isolation, as tests/house/test_install.py does
    try:
        recent = int(importlib.metadata.version("setuptools").split(".")[0]) >= 68
    except importlib.metadata.PackageNotFoundError:
        recent = False
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *(["--no-build-isolation"] if recent else []),
         "--no-cache-dir", "--wheel-dir", str(dist), str(source)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("layoutc-*.whl")
    return wheel


def test_installed_wheel_runs_a_quantized_checkpoint(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        folders = {os.path.dirname(n).replace("/", ".") for n in z.namelist() if ".dist-info/" not in n}
    assert set(_setup().packages(str(ROOT))) <= folders, "packages missing from the wheel"

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index",
         str(wheel)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    (site / "layoutc_dependencies.pth").write_text("\n".join(sorted({_site_dir(m) for m in DEPENDENCIES})) + "\n")

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {"PATH": f"{env_dir / 'bin'}:{os.environ.get('PATH', '')}", "HOME": str(tmp_path),
           "LAYOUTC_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    probe = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=outside,
                           env=env)  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert all(p.startswith(str(site)) for p in probe.stdout.split()), probe.stdout  # not this checkout

    ckpt = tiny_run.make(tmp_path / "gptq4", "--quant", "gptq4", "--group-size", "64")
    run = subprocess.run(
        [str(env_dir / "bin" / "layoutc"), "run", str(ckpt), "--tp", "1,2", "--format", "json"],
        capture_output=True, text=True, timeout=600, cwd=outside, env=env)  # fmt: skip
    assert run.returncode == 0, f"rc={run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    report = json.loads(run.stdout)
    assert [r["tp_size"] for r in report["rows"]] == [1, 2], report
    for r in report["rows"]:
        assert r["kernel"].startswith("aten::_weight_int4pack_mm_for_cpu"), r
        assert r["ok"] and r["independent"] and r["kernel_ran"] and r["result"] == "ok", r
