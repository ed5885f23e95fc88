"""The examples run as a user runs them (a fresh process from the repository root).

CI also runs examples/gemma4_cpu_moe.py on its own; running it here catches a broken
example before CI does (a compile output imported the wrong way once broke it).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, require_package

pytestmark = [pytest.mark.kernel, pytest.mark.slow]


def test_gemma4_example_verifies_compiles_and_runs_the_kernel() -> None:
    require_package("vllm", "pip install -e '.[kernels]'")
    done = subprocess.run([sys.executable, "examples/gemma4_cpu_moe.py", "--experts", "4", "--tokens", "8",
                           "--tp", "1,4"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "layoutc compile: a fresh vllm_cpu_grouped_gemm module" in done.stdout
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [(r[0], r[1], r[2]) for r in rows] == [("1", "704", "704"), ("4", "176", "192")], done.stdout
    assert all(float(r[3]) < 2e-2 for r in rows), done.stdout  # relative error against float32


def test_tp_example_runs_real_ranks() -> None:
    """Real gloo ranks on the real kernel: every row ran, none failed, errors within bf16's."""
    require_package("vllm", "pip install -e '.[kernels]'")
    done = subprocess.run([sys.executable, "examples/tp_moe.py", "--experts", "4", "--tokens", "4",
                           "--only", "Qwen3-30B-A3B"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    rows = [[c.strip() for c in line.split("|")] for line in done.stdout.splitlines()
            if line.startswith("Qwen3-30B-A3B")]
    assert sorted(r[1] for r in rows) == ["2", "3", "4"], done.stdout
    assert all(float(r[5]) < 2e-2 and r[-1] == "_C::cpu_fused_moe" for r in rows), done.stdout
    assert "3 runs, 0 failed" in done.stdout
