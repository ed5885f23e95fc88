"""Shared test fixtures: the repo root, the real-kernel availability rule, and the markers.

Tests that need a kernel package skip only when the package is truly absent, with
the install command as the reason; under CI (CI=true) a missing package is a
failure instead, because .ci/run installs it.

Markers (registered in pyproject.toml): every test that carries none of kernel, engine,
transformers, conformance or slow is marked `fast` here, so `python -m pytest -m fast` is
the fast lane; a test not marked kernel or engine runs under tests/support/kernel_guard.py.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests.support import kernel_guard

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


@pytest.fixture(scope="session")
def mixtral_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, list[dict]]:
    """(exit code, log, run records) of ONE vLLM engine child over the tiny Mixtral's runs
    (tests/engine/test_vllm_plugin_engine.py MIXTRAL_RUNS: 13 engine loads), shared by the engine tests of
    tests/engine/test_vllm_plugin_engine.py and tests/engine/test_ep_engine.py, which each started a child of their own."""
    from tests.engine.test_vllm_plugin_engine import mixtral_runs_child

    return mixtral_runs_child(tmp_path_factory.mktemp("mixtral_runs"))


NOT_FAST = ("kernel", "engine", "transformers", "conformance", "slow")
MAY_RUN_KERNELS = ("kernel", "engine")


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.get_closest_marker(name) for name in NOT_FAST):
            item.add_marker(pytest.mark.fast)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m fast`, skip collecting tests/conformance: every test there is marked
    conformance, and importing it imports vLLM (about 15 s)."""
    if config.getoption("markexpr", "") == "fast" and collection_path == ROOT / "tests" / "conformance":
        return True
    return None


def _guarded(item: pytest.Item):  # type: ignore[no-untyped-def]
    if any(item.get_closest_marker(name) for name in MAY_RUN_KERNELS):
        return (yield)
    kernel_guard.take()
    with kernel_guard.armed():
        result = yield
    caught = kernel_guard.take()
    if caught:  # raised and swallowed by the code under test: still a wrong marker
        pytest.fail(f"{item.nodeid} is not marked kernel but reached {', '.join(caught)}", pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):  # type: ignore[no-untyped-def]
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    return (yield from _guarded(item))
