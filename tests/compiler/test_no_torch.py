"""The compiler needs only lark, jinja2 and z3 (issue 16 item 1).

A fresh interpreter installs a meta-path finder that refuses ``torch`` (and the
kernel packages, numpy and the checkpoint readers) before anything else is
imported, imports every compiler module, and runs check, verify, compile
(into a temporary folder, and ``--check`` against generated/), explain, audit and
rule through the real CLI. Any import of a blocked module fails the child.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from robust_helpers import REPO, run_python

# Nothing in the compiler imports torch; of the tools, run, tp, the checkpoint readers and
# the vLLM plugin do (checkpoints, kernels), and ep_run (`run --ep`).
TORCH_MODULES: set[str] = set()
# runcompare: run.py's inputs and comparison, moved there with their lazy torch import (issue 41)
# kit: its drivers are kit text (they import torch and the engine)
TORCH_TOOLS = {"run", "tp", "checkpoints", "vllm_plugin", "ep_run", "quant_run", "runcompare", "kit"}
BLOCKED = ("torch", "numpy", "zentorch", "vllm", "transformers", "safetensors", "torchvision")

CHILD = textwrap.dedent(r'''
    import importlib, json, os, pkgutil, sys

    BLOCKED = tuple(json.loads(sys.argv[1]))
    attempts = []

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                attempts.append(name)
                raise ImportError(f"{name} is blocked: the compiler must not import it")
            return None

    sys.meta_path.insert(0, Refuse())
    skip = set(json.loads(sys.argv[2]))
    import layoutc, layoutc.compiler
    names = ["layoutc", "layoutc.cli"] + [m.name for m in pkgutil.walk_packages(layoutc.compiler.__path__, "layoutc.compiler.")]
    # the torch-free tools (run and tp load checkpoints and kernels: they need torch)
    names += ["layoutc.tools.audit", "layoutc.tools.hfconfig", "layoutc.tools.explain"]
    imported = []
    for name in names:
        if name in skip or name == "layoutc.__main__" or name.startswith("layoutc.runtime"):
            continue
        importlib.import_module(name)
        imported.append(name)
    from layoutc.cli import main
    out = os.environ["OUT_DIR"]
    codes = {
        "check": main(["check", "contracts"]),
        "verify": main(["verify", "contracts/torch_grouped_mm.moe", "contracts/vllm_cpu_grouped_gemm.moe"]),
        "compile": main(["compile", "contracts/torch_grouped_mm.moe", "--out", out]),
        "compile_check": main(["compile", "contracts", "--out", "generated", "--check"]),
        "explain": main(["explain", "contracts/torch_grouped_mm.moe", "--set", "num_experts=8",
                         "--set", "hidden_size=64", "--set", "intermediate_size=64", "--set", "tp_size=2",
                         "--set", "activation=silu", "--set", "dtype=bfloat16"]),
        "audit": main(["audit", "gemma-4-26b-a4b", "gpt-oss-120b", "--tp", "1,4"]),
        "rule": main(["rule", "LC201"]),
    }
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print("RESULT " + json.dumps({"imported": imported, "codes": codes, "attempts": attempts, "loaded": loaded}))
''')


@pytest.mark.slow
def test_compiler_runs_with_torch_blocked(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OUT_DIR", str(tmp_path / "out"))
    res = run_python(CHILD, [json.dumps(BLOCKED), json.dumps(sorted(TORCH_MODULES))], timeout=300)
    lines = [line for line in res.out.splitlines() if line.startswith("RESULT ")]
    assert res.rc == 0 and lines, res.describe()
    doc = json.loads(lines[-1].removeprefix("RESULT "))
    for module in ("layoutc.cli", "layoutc.compiler.check", "layoutc.compiler.verify.properties", "layoutc.compiler.emit.render", "layoutc.tools.audit",
                   "layoutc.tools.hfconfig", "layoutc.tools.explain", "layoutc.compiler.emit.compile", "layoutc.compiler.safeio"):
        assert module in doc["imported"]
    assert doc["loaded"] == [], doc
    assert doc["attempts"] == [], f"the compiler tried to import {doc['attempts']}"
    assert doc["codes"] == {"check": 0, "verify": 0, "compile": 0, "compile_check": 0, "explain": 0,
                            "audit": 0, "rule": 0}, res.describe()
    assert (tmp_path / "out" / "torch_grouped_mm.py").is_file()


def test_every_compiler_module_is_checked() -> None:
    """No module of the compiler imports torch, and only the listed tools do."""
    compiler = sorted((REPO / "layoutc" / "compiler").rglob("*.py"))
    assert len(compiler) > 20
    torch_users = {str(p.relative_to(REPO)) for p in compiler if "import torch" in p.read_text()}
    assert not torch_users, f"compiler modules that import torch: {sorted(torch_users)}"
    # a tool is a module or a package of layoutc/tools; a package's modules count as the tool
    tools_dir = REPO / "layoutc" / "tools"
    tools = {p.relative_to(tools_dir).parts[0].removesuffix(".py") for p in tools_dir.rglob("*.py")
             if "import torch" in p.read_text()}
    assert tools <= TORCH_TOOLS, f"tools that import torch: {sorted(tools - TORCH_TOOLS)}"


def test_nothing_in_the_compiler_imports_cli() -> None:
    """audit used to import cli (issue 11 item 6): the CLI sits on top, nothing imports it; and
    nothing in the compiler imports a tool (issue 21 item 6)."""
    offenders = []
    for path in [*(REPO / "layoutc" / "compiler").rglob("*.py"), *(REPO / "layoutc" / "tools").rglob("*.py"),
                 *(REPO / "layoutc" / "runtime").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        if "from .cli import" in text or "from layoutc.cli import" in text or "import layoutc.cli" in text:
            offenders.append(str(path.relative_to(REPO)))
        if path.is_relative_to(REPO / "layoutc" / "compiler") and "layoutc.tools" in text:
            offenders.append(f"{path.relative_to(REPO)} (imports a tool)")
    assert not offenders, offenders


def test_pyproject_keeps_torch_out_of_the_core_dependencies() -> None:
    import tomllib

    doc = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    core = [d.split(">")[0].split("=")[0].split("<")[0].strip().lower() for d in doc["project"]["dependencies"]]
    assert sorted(core) == ["jinja2", "lark", "z3-solver"]
    extras = doc["project"]["optional-dependencies"]
    assert extras["runtime"] == ["torch==2.13.0+cpu"]
    assert any(d.startswith("vllm-cpu==") for d in extras["kernels"])
    assert any(d.startswith("zentorch==") for d in extras["kernels"])
