"""Fetch a released wheel with pip and unpack only its Python into an ignored cache folder.

Nothing is vendored: the cache (default `<repo>/.replay-wheels/`, or $LAYOUTC_REPLAY_DIR) is in
.gitignore. Each release is unpacked once, into a staging folder renamed into place, so an
interrupted unpack is never taken for a complete one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class FetchError(RuntimeError):
    """A wheel that could not be downloaded or unpacked; `command` is what failed."""

    def __init__(self, command: str, detail: str) -> None:
        super().__init__(f"{command}: {detail}")
        self.command = command


def cache_dir() -> Path:
    """$LAYOUTC_REPLAY_DIR or <repo>/.replay-wheels."""
    return Path(os.environ.get("LAYOUTC_REPLAY_DIR") or ROOT / ".replay-wheels")


def unpacked(requirement: str) -> Path:
    """The folder holding the Python files of `requirement` ("vllm==0.28.0"), fetching it if needed.

    Runs `python -m pip download --no-deps --only-binary=:all: REQ -d CACHE/wheels` (pip's own
    cache makes a second call cheap) and extracts the wheel's `*.py` members only.
    Raises FetchError naming the command that failed.
    """
    name, _, version = requirement.partition("==")
    if not version:
        raise FetchError(requirement, "give a pinned requirement, NAME==VERSION")
    base = cache_dir()
    dest = base / "py" / f"{name}-{version}"
    if dest.is_dir():
        return dest
    wheels = base / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        requirement,
        "-d",
        str(wheels),
    ]
    shown = " ".join(cmd[2:])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = [ln for ln in proc.stderr.strip().splitlines() if "WARNING" not in ln][-1:]
        raise FetchError(shown, tail[0] if tail else f"exit {proc.returncode}")
    stem = name.replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-{version}-*.whl"))
    if not found:
        raise FetchError(shown, f"no {stem}-{version}-*.whl in {wheels}")
    stage = dest.with_name(dest.name + ".partial")
    shutil.rmtree(stage, ignore_errors=True)
    try:
        with zipfile.ZipFile(found[0]) as whl:
            for member in whl.namelist():
                if member.endswith(".py") and ".." not in Path(member).parts:
                    whl.extract(member, stage)
    except (OSError, zipfile.BadZipFile) as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise FetchError(f"unzip {found[0].name}", str(exc)) from exc
    stage.rename(dest)
    return dest
