"""Shared test fixtures: the repo root, and the real-kernel availability rule.

Tests that need a kernel package skip only when the package is truly absent, with
the install command as the reason; under CI (CI=true) a missing package is a
failure instead, because .ci/run installs it.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def require_package(module: str, install: str) -> None:
    """Skip (or fail under CI) when `module` cannot be found."""
    if importlib.util.find_spec(module) is not None:
        return
    message = f"{module} is not installed: {install}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI must install the real kernels; {message}")
    pytest.skip(message)


@pytest.fixture
def in_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(ROOT)
    return ROOT


@pytest.fixture(autouse=True, scope="session")
def _hermetic_verdict_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The suite's verdicts go to a cache of its own, never the user's ~/.cache/layoutc
    (child processes inherit the variable)."""
    if "LAYOUTC_CACHE_DIR" not in os.environ:
        os.environ["LAYOUTC_CACHE_DIR"] = str(tmp_path_factory.mktemp("verdict-cache"))


def contract_line(contract: str, prefix: str) -> str:
    """`contracts/<contract>.moe:N` for the first line starting with `prefix` (tests pin
    diagnostics to contract lines without hard-coding numbers that edits shift)."""
    lines = (ROOT / "contracts" / f"{contract}.moe").read_text(encoding="utf-8").splitlines()
    number = next(i for i, text in enumerate(lines, 1) if text.startswith(prefix))
    return f"contracts/{contract}.moe:{number}"
