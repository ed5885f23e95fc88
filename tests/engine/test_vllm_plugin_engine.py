"""The layoutc vLLM plugin in real vLLM 0.32 CPU engines (tiny random checkpoints, no network).

Each test reads a child process (tests/support/engine/child.py) that loads a fresh
`vllm.LLM` per (tp, plugin mode) and greedy-decodes fixed prompts (its workers forked from a server that
imported vLLM once, tests/support/engine/forkserve.py, rather than spawned afresh: each import was ~10 CPU s); the tiny Mixtral's runs
are all in one child (MIXTRAL_RUNS, tests/conftest.py `mixtral_runs`), shared with
tests/engine/test_ep_engine.py. Oracle: vLLM
itself with the plugin off. Both CPU MoE routes are covered: the grouped GEMM
(which pads; zentorch made unimportable in every engine process by
tests/support/engine/site/sitecustomize.py, so vLLM's platform detection falls back to
CpuPlatform) and zentorch (vLLM's ZenCpuPlatform, where vLLM picks it; see that
test: not on the machine this was written on). The engines are slow (tens of seconds per load on
2 cores); each test names its cost.

Skips only when vllm (or zentorch, for the zentorch route) is not installed; fails
instead when CI is set. LAYOUTC_ENGINE_RESULTS=DIR keeps each child's JSON and log.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import contract_line

pytestmark = [pytest.mark.engine, pytest.mark.kernel, pytest.mark.transformers, pytest.mark.slow]

CONTRACT_LINE = {k: contract_line("vllm_cpu_grouped_gemm", k)
                 for k in ("tensor w13:", "tensor w2:", "admit hidden_size % output_alignment")}


ROOT = Path(__file__).resolve().parents[2]
CHILD = ROOT / "tests" / "support" / "engine" / "child.py"
SITE = ROOT / "tests" / "support" / "engine" / "site"
MODES = ("off", "check", "replace")
TPS = (1, 2, 4)
TIMEOUT_S = 1500
# Logprob tolerance across tensor-parallel sizes: the ranks' bf16 partial sums are
# all-reduced in another order (measured on the Mixtral: max |diff| 0.06 at tp 2, 0.16
# at tp 4, same tokens). Across plugin modes at one tp the weights are bit-identical,
# so logprobs must be exactly equal.
TP_LOGPROB_TOL = 0.25


#: a greedy step whose top-2 margin at the reference is below this may flip across tp: each of
#: the two logprobs moves by up to TP_LOGPROB_TOL when the partial sums are all-reduced in
#: another order.
TIE_TOL = 2 * TP_LOGPROB_TOL


def assert_same_greedy(run: dict, ref: dict, where: object) -> None:
    """`run` decodes `ref`'s greedy tokens with logprobs within TP_LOGPROB_TOL, except that a
    prompt may part from `ref` at a step where `ref`'s top-2 margin is a near-tie (< TIE_TOL),
    after which its tokens are conditioned on another history and not compared. At least half of
    all tokens must be compared, so a run that parts early everywhere still fails."""
    compared = total = 0
    for i, (got, want) in enumerate(zip(run["tokens"], ref["tokens"], strict=True)):
        n = next((j for j, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), len(want))
        if n < len(want):
            gap = ref["gaps"][i][n]
            assert gap < TIE_TOL, (where, i, n, got[n], want[n], gap)
        diff = max((abs(a - b) for a, b in zip(run["logprobs"][i][:n], ref["logprobs"][i][:n], strict=True)),
                   default=0.0)
        assert diff < TP_LOGPROB_TOL, (where, i, diff)
        compared, total = compared + n, total + len(want)
    assert compared * 2 >= total, (where, compared, total)


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is not None:
        return
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"CI must install {module} (the kernels extra) for the vLLM engine tests")
    pytest.skip(f"{module} is not installed (pip install -e '.[kernels]')")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    _require("vllm")
    from tests.support.engine import checkpoints as ck

    base = tmp_path_factory.mktemp("ckpt")
    return {"gpt_oss": ck.gpt_oss(base / "gpt_oss"),
            "gpt_oss_704": ck.gpt_oss(base / "gpt_oss_704", intermediate=ck.GPT_OSS_UNALIGNED)}


#: A stopped engine's workers get SIGTERM at once: vLLM's executor otherwise waits its 5 s grace period
#: (VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS, multiproc_executor.py `_ensure_worker_termination`) for workers
#: that on this CPU outlive it after every load, then sends SIGTERM anyway. Nothing is checked after a stop.
QUICK_EXIT = {"VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS": "0"}


def _child(model: Path, out: Path, tps: tuple[int, ...], modes: tuple[str, ...], *, block_zentorch: bool,
           break_pad: str | None = None, runs: str = "") -> tuple[int, str, list[dict]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYOUTC_VLLM", "LAYOUTC_TEST_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(SITE), *filter(None, [env.get("PYTHONPATH")])])
    env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", VLLM_CPU_KVCACHE_SPACE="1", **QUICK_EXIT)
    if block_zentorch:
        env["LAYOUTC_TEST_BLOCK_ZENTORCH"] = "1"
    if break_pad:
        env["LAYOUTC_TEST_BREAK"] = break_pad
    cmd = [sys.executable, str(CHILD), str(model), str(out), "--tp", ",".join(map(str, tps)),
           "--modes", ",".join(modes), "--forkserver"]
    if runs:  # tp:mode[:ep][:break=KIND],... in order, a failing load recorded and the next run going on
        cmd += ["--runs", runs, "--keep-going"]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    log = proc.stdout + proc.stderr
    runs = json.loads(out.read_text())["runs"] if out.exists() else []
    keep = os.environ.get("LAYOUTC_ENGINE_RESULTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{out.stem}.log").write_text(log)
        if out.exists():
            shutil.copy(out, Path(keep) / out.name)
    return proc.returncode, log, runs


def _by(runs: list[dict]) -> dict[tuple[int, str], dict]:
    return {(r["tp"], r["mode"]): r for r in runs}


def _assert_modes_agree(runs: list[dict], log: str, contract: str, cross_tp: bool = True) -> None:
    """check and replace decode what off decodes, bit for bit, at every tp; with `cross_tp`, each
    tp's off run decodes tp 1's greedy tokens too (assert_same_greedy)."""
    got = _by(runs)
    assert set(got) == {(tp, m) for tp in TPS for m in MODES}, sorted(got)
    for tp in TPS:
        off = got[(tp, "off")]
        for mode in ("check", "replace"):
            other = got[(tp, mode)]
            assert other["tokens"] == off["tokens"], (tp, mode)
            diff = max(abs(a - b) for x, y in zip(other["logprobs"], off["logprobs"], strict=True)
                       for a, b in zip(x, y, strict=True))
            assert diff == 0.0, (tp, mode, diff)
        if cross_tp:  # the same greedy tokens as tp=1 and close logprobs, up to a near-tie
            assert_same_greedy(off, got[(1, "off")], tp)
    for mode in ("check", "replace"):
        lines = [ln for ln in log.splitlines() if f"layoutc: mode={mode}," in ln]
        # one summary line per worker process: 1 + 2 + 4 workers
        assert len(lines) == sum(TPS), (mode, lines)
        assert all(f"contract={contract} x1, layers=1" in ln for ln in lines), lines
    assert not any("layoutc: mode=" in ln for ln in log.splitlines() if "mode=off" in ln)


def test_grouped_gemm_route_gpt_oss_replace_matches_off(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """gpt-oss on the grouped GEMM at tp 2: the swigluoai layout, checked and replaced. 3 engine loads."""
    rc, log, runs = _child(checkpoints["gpt_oss"], tmp_path / "gpt_oss_grouped.json", (2,), MODES,
                           block_zentorch=True)
    assert rc == 0, log[-4000:]
    got = _by(runs)
    for mode in ("check", "replace"):
        assert got[(2, mode)]["tokens"] == got[(2, "off")]["tokens"], mode
        assert got[(2, mode)]["logprobs"] == got[(2, "off")]["logprobs"], mode
        assert sum(f"layoutc: mode={mode}, contract=vllm_cpu_grouped_gemm x1, layers=1" in ln
                   for ln in log.splitlines()) == 2


#: Every run of the default tiny Mixtral (I = 704, tests/support/engine/checkpoints.py) that the engine tests check, in
#: ONE child (tests/conftest.py `mixtral_runs`, session-scoped: tests/engine/test_ep_engine.py reads it too): the grouped
#: GEMM's 9 (off, check, replace at tp 1, 2, 4); vLLM patched to end-pad w13 as in vllm#48624 at tp 4, off and
#: check (`break=`: that run's workers alone, spawned afresh, are patched); tp 2 with expert parallelism, check and
#: replace. Each run is a fresh engine, as when these were three children; the child's vLLM import, a checkpoint
#: and the EP test's own tp 1 reference (the same checkpoint, engine and mode as the grouped tp 1 off run) are
#: no longer repeated.
MIXTRAL_RUNS = ",".join([*(f"{tp}:{m}" for tp in TPS for m in MODES), "4:off:break=end_pad", "4:check:break=end_pad",
                         "2:check:ep", "2:replace:ep"])


def mixtral_runs_child(base: Path) -> tuple[int, str, list[dict]]:
    """MIXTRAL_RUNS in one child (--keep-going: a refused start is recorded with its error): 13 engine loads."""
    _require("vllm")
    from tests.support.engine import checkpoints as ck

    return _child(ck.mixtral(base / "mixtral"), base / "mixtral_runs.json", (), (), block_zentorch=True,
                  runs=MIXTRAL_RUNS)


def plain_runs(runs: list[dict]) -> list[dict]:
    """The runs with neither a planted break nor expert parallelism."""
    return [r for r in runs if not r["ep"] and not r.get("break")]


def test_grouped_gemm_route_mixtral_modes_agree(mixtral_runs: tuple[int, str, list[dict]]) -> None:
    """Mixtral, I = 704: tp 4 pads 176 -> 192 (vLLM's _pad_moe_intermediate, or the contract's). 9 engine loads
    of MIXTRAL_RUNS."""
    rc, log, runs = mixtral_runs
    assert rc == 0, log[-4000:]
    assert "using ZenCpuPlatform" not in log
    grouped = plain_runs(runs)
    assert not [r for r in grouped if "error" in r], ([r for r in grouped if "error" in r], log[-4000:])
    part = _sections(log)
    _assert_modes_agree(grouped, "".join(part.get(f"tp={tp} mode={m} ep=0", "") for tp in TPS for m in MODES),
                        "vllm_cpu_grouped_gemm")


def test_zentorch_route_gpt_oss_modes_agree(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """gpt-oss (swigluoai, interleaved pairs, biases) through zentorch_fused_moe. 9 engine loads.

    Runs only where vLLM itself picks ZenCpuPlatform: an AMD CPU whose /proc/cpuinfo
    lists avx512, with zentorch importable (vllm/platforms/__init__.py). The 2-core
    AMD EPYC guest this was written on lists no avx512 flag, so vLLM takes the
    grouped GEMM there; forcing the detection fails in vLLM's zentorch linear path
    ("zentorch_matmul bf16 path needs the cpu support avx512bf16"). Measured.
    """
    _require("zentorch")
    with open("/proc/cpuinfo") as f:
        cpuinfo = f.read()
    if "AuthenticAMD" not in cpuinfo or "avx512" not in cpuinfo:
        pytest.skip("vLLM picks ZenCpuPlatform only on an AMD CPU whose /proc/cpuinfo lists avx512")
    rc, log, runs = _child(checkpoints["gpt_oss"], tmp_path / "gpt_oss_zentorch.json", TPS, MODES,
                           block_zentorch=False)
    assert rc == 0, log[-4000:]
    _assert_modes_agree(runs, log, "zentorch_fused_moe", cross_tp=False)
    # vLLM's own route across tp, the plugin off: on the AMD AVX-512 host this first ran on
    # (2026-12-04), vLLM 0.32's ZenCpuPlatform at tp 2 left tp 1's greedy tokens at a step whose
    # tp-1 margin is 3.75 nats (prompt 0, step 2), twice; layoutc's zentorch_fused_moe at tp 2
    # matches transformers' GptOssMLP on the same shapes (layoutc run, rel 3.5e-3 bf16), so the
    # departure is outside the plugin. Shown as an xfail naming it, after every plugin check passed.
    got = _by(runs)
    departed = []
    for tp in TPS:
        try:
            assert_same_greedy(got[(tp, "off")], got[(1, "off")], tp)
        except AssertionError as exc:
            departed.append(f"tp {tp}: {exc}")
    if departed:
        pytest.xfail("vLLM 0.32 ZenCpuPlatform, plugin off: tp > 1 departs from tp 1's greedy tokens at a "
                     f"non-tie step (outside the plugin; every mode agrees with off): {'; '.join(departed)}")


def test_check_mode_stops_an_end_padded_engine(mixtral_runs: tuple[int, str, list[dict]]) -> None:
    """vLLM patched (in every engine process) to end-pad w13 as in vllm#48624, tp 4. 2 engine loads of MIXTRAL_RUNS.

    Off: the broken engine starts and decodes other tokens than the healthy one (the
    breakage is real). Check: the engine does not start; the error names layoutc,
    the layer, the tensor, the rows and the contract line.
    """
    rc, all_log, all_runs = mixtral_runs
    assert rc == 0, all_log[-4000:]
    runs = [r for r in all_runs if r.get("break") == "end_pad"]
    assert [(r["tp"], r["mode"]) for r in runs] == [(4, "off"), (4, "check")], all_runs
    assert "error" in runs[1] and "tokens" not in runs[1], "check mode let an end-padded engine start"
    assert "error" not in runs[0], runs[0]
    healthy = plain_runs(all_runs)
    assert not [r for r in healthy if "error" in r], all_log[-4000:]
    assert runs[0]["tokens"] != _by(healthy)[(4, "off")]["tokens"]
    log = _sections(all_log)["tp=4 mode=check ep=0 break=end_pad"]
    assert "LayoutcVllmError" in log, log[-4000:]
    message = next(ln for ln in log.splitlines() if "layoutc: layer" in ln)
    assert "layer model.layers.0.block_sparse_moe.experts: " in message, message
    assert "w13 is not laid out as contract vllm_cpu_grouped_gemm says" in message, message
    # I_pp = 176 padded to 192 per half: vLLM's broken pad put up[0..15] in gate's pad rows.
    assert "rows 176..191 hold up[0..15], where the contract puts pad of gate" in message, message
    assert CONTRACT_LINE["tensor w13:"] in message, message


def _sections(log: str) -> dict[str, str]:
    """The child's log split at its per-run markers (`tp=T mode=M ep=E`)."""
    out: dict[str, str] = {}
    key = ""
    for line in log.splitlines():
        if line.startswith("=== layoutc engine run "):
            key = line.removeprefix("=== layoutc engine run ").removesuffix(" ===")
            out.setdefault(key, "")
        elif key:
            out[key] += line + "\n"
    return out


WORKER_FAILED = "WorkerProc initialization failed"


def test_unaligned_swigluoai_at_tp4_loads_padded_in_replace(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """gpt-oss-shaped, I = 704 at tp 4 (176 per rank, swigluoai): 2 refused starts and 2 engine loads.

    Off: vLLM refuses at backend selection with its generic message (the reason,
    `_supports_grouped_gemm`'s, is logged at debug only). Check: layoutc's message names
    that reason and the contract's verdict. Replace: the contract answers the gate, pads
    176 -> 192 by whole pairs, and vLLM's kernel decodes tp 1's greedy tokens.
    """
    rc, log, runs = _child(checkpoints["gpt_oss_704"], tmp_path / "gpt_oss_704.json", (), (), block_zentorch=True,
                           runs="4:off,4:check,4:replace,1:off")
    assert rc == 0, log[-4000:]
    got, part = {(r["tp"], r["mode"]): r for r in runs}, _sections(log)
    assert set(got) == {(4, "off"), (4, "check"), (4, "replace"), (1, "off")}, sorted(got)
    off, checked = part["tp=4 mode=off ep=0"], part["tp=4 mode=check ep=0"]
    assert WORKER_FAILED in got[(4, "off")]["error"], got[(4, "off")]
    assert "NotImplementedError: No Unquantized MoE backend supports the deployment configuration." in off, off[-3000:]
    assert "layoutc" not in off
    assert WORKER_FAILED in got[(4, "check")]["error"], got[(4, "check")]
    message = next(ln for ln in checked.splitlines() if "LayoutcVllmError: layoutc: vLLM refuses" in ln)
    for needle in ("No Unquantized MoE backend supports the deployment configuration.",
                   "_supports_grouped_gemm refused it: kernel requires hidden and intermediate dimensions "
                   "divisible by 32",
                   "contract vllm_cpu_grouped_gemm admits it and pads intermediate_size_per_partition 176 -> 192 "
                   "(whole (gate, up) pairs at the end)", "activation swigluoai, hidden 256, intermediate 704 over tp 4"):
        assert needle in message, (needle, message)
    replaced, ref = got[(4, "replace")], got[(1, "off")]
    assert "error" not in replaced and "error" not in ref, (replaced, ref)
    assert_same_greedy(replaced, ref, "tp 4 replace vs tp 1")
    lines = [ln for ln in part["tp=4 mode=replace ep=0"].splitlines() if "layoutc: mode=replace," in ln]
    assert len(lines) == 4 and all("contract=vllm_cpu_grouped_gemm x1, layers=1" in ln for ln in lines), lines


CALLER = ROOT / "tests" / "support" / "engine" / "caller.py"
REFUSAL = "layoutc.tools.vllm_plugin.errors.LayoutcVllmError"
# Each planted kind (tests/support/engine/site/sitecustomize.py) at tp 1 with I = 176 (padded to 192, 8 experts):
# what the caller's exception must say beyond the layer: the tensor, the experts, the rows and what they
# hold against what the contract puts there, and the tensor's contract line (the 8 kinds, and the
# end pad of vllm#48624).
_ALL, _W13, _W2 = "in experts 0..7 of 8", "tensor w13:", "tensor w2:"
CALLER_NEEDLES = {
    "end_pad": ["w13 is not laid out as contract vllm_cpu_grouped_gemm says", _ALL,
                "rows 176..191 hold up[0..15], where the contract puts pad of gate", _W13],
    "double_pad": ["w13 has shape (8, 416, 256), but contract vllm_cpu_grouped_gemm pads it to (8, 384, 256)", _ALL,
                   "axis n (halves) holds 2 x 208 rows where the contract puts 2 x 192 (176 live + 16 pad), "
                   "16 rows of pad too many per segment", _W13],
    "garbage_pad": ["w13 is not laid out as contract vllm_cpu_grouped_gemm says", _ALL,
                    "rows 176..191 hold the constant 7.0, where the contract puts pad of gate", _W13],
    "nan_pad": ["w13 is not laid out as contract vllm_cpu_grouped_gemm says", _ALL,
                "rows 176..191 hold the constant NaN, where the contract puts pad of gate", _W13],
    "ones_pad": ["w13 is not laid out as contract vllm_cpu_grouped_gemm says", _ALL,
                 "rows 368..383 hold the constant 1.0, where the contract puts pad of up", _W13],
    "ones_w13": ["w13 is not laid out as contract vllm_cpu_grouped_gemm says", _ALL,
                 "rows 176..191 hold the constant 1.0, where the contract puts pad of gate", _W13],
    "w2_front": ["w2 is not laid out as contract vllm_cpu_grouped_gemm says", _ALL,
                 "columns 0..15 hold the pad code 0, where the contract puts k[0..15]", _W2],
    "up_double": ["w13 is not laid out as contract vllm_cpu_grouped_gemm says", _ALL,
                  "rows 192..207 hold the pad code 0, where the contract puts up[0..15]", _W13],
    "swap_halves": ["w13 is not laid out as contract vllm_cpu_grouped_gemm says", _ALL,
                    "rows 0..175 hold up[0..175], where the contract puts gate[0..175]", _W13],
    "one_expert": ["w13 is not laid out as contract vllm_cpu_grouped_gemm says", "16 of 384 rows wrong, in expert 3 of 8",
                   "rows 176..191 hold the constant 7.0, where the contract puts pad of gate", _W13],
}


def _run_caller(model: Path, out: Path, calls: str, log_name: str, **extra_env: str) -> str:
    """tests/support/engine/caller.py (a plain Python caller of `vllm.LLM(...)`) on `model` with `calls`
    (`kind@mode;...`), writing its results to `out`; its stdout + stderr, kept under
    $LAYOUTC_ENGINE_RESULTS/`log_name` when set. Asserts the caller itself exited 0."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LAYOUTC_VLLM", "LAYOUTC_TEST_")) and k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env["PYTHONPATH"] = os.pathsep.join([str(SITE), *filter(None, [env.get("PYTHONPATH")])])
    env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", VLLM_CPU_KVCACHE_SPACE="1", **QUICK_EXIT, **extra_env)
    proc = subprocess.run([sys.executable, str(CALLER), str(model), str(out), "--calls", calls, "--forkserver"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    log = proc.stdout + proc.stderr
    keep = os.environ.get("LAYOUTC_ENGINE_RESULTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / log_name).write_text(log)
    assert proc.returncode == 0, log[-4000:]
    return log


def test_a_plain_caller_catches_the_refusal(tmp_path: Path) -> None:
    """Issue 43 item 3: a program that calls `vllm.LLM(...)` (vLLM's default process model: engine
    core and worker in their own processes) catches layoutc's refusal itself, not vLLM's generic
    "Engine core initialization failed. See root cause above.": the exception is LayoutcVllmError
    and its text names the layer, the tensor, the experts, the rows, what they hold and the contract
    line, for each planted kind (the issue's 8 and the end pad). One caller process, 10 refused starts at tp 1."""
    _require("vllm")
    from tests.support.engine import checkpoints as ck

    model = ck.mixtral(tmp_path / "mixtral_176", intermediate=176)
    out = tmp_path / "caller.json"
    log = _run_caller(model, out, ";".join(f"{k}@check" for k in CALLER_NEEDLES), "caller.log",
                      LAYOUTC_TEST_BLOCK_ZENTORCH="1")
    calls = {c["kind"]: c for c in json.loads(out.read_text())["calls"]}
    assert set(calls) == set(CALLER_NEEDLES), (sorted(calls), log[-4000:])
    for kind, needles in CALLER_NEEDLES.items():
        call = calls[kind]
        assert not call["started"], (kind, "check mode let a broken engine start")
        assert call["type"] == REFUSAL, (kind, call)
        text = call["text"]
        assert text.startswith("layoutc: layer model.layers.0.block_sparse_moe.experts: "), (kind, text)
        for needle in needles:
            assert CONTRACT_LINE.get(needle, needle) in text, (kind, needle, text)


ZEN_INT8 = "vllm_zen_cpu_int8_moe"
ZEN_LINE = {k: contract_line(ZEN_INT8, k) for k in ("tensor w13_weight:", "tensor w13_weight_scale:")}
# Each planted W8A8 kind (tests/support/engine/site/sitecustomize.py) at tp 1 with I = 176 (8 experts): what the
# caller's exception must say, beyond the layer.
W8A8_NEEDLES = {
    "w8a8_pad_ones": [f"w13_weight has shape (8, 384, 256), but contract {ZEN_INT8} lays it out as (8, 352, 256)",
                      "in experts 0..7 of 8: axis n (halves) holds 2 x 192 rows where the contract puts 2 x 176 "
                      "(176 live + 0 pad), 16 rows of pad too many per segment", ZEN_LINE["tensor w13_weight:"]],
    "w8a8_scale_swap": [f"w13_weight_scale is not laid out as contract {ZEN_INT8} says",
                        "352 of 352 rows wrong, in experts 0..7 of 8",
                        "rows 0..175 hold up[0..175], where the contract puts gate[0..175]",
                        ZEN_LINE["tensor w13_weight_scale:"]],
    "w8a8_scale_expert": [f"w13_weight_scale is not laid out as contract {ZEN_INT8} says",
                          "3 of 352 rows wrong, in expert 3 of 8",
                          "rows 5..7 hold the constant 1.0, where the contract puts gate[5..7]",
                          ZEN_LINE["tensor w13_weight_scale:"]],
}


def test_a_w8a8_checkpoint_is_checked_and_planted_bugs_are_refused(tmp_path: Path) -> None:
    """Issue 43 items 1-2: a compressed-tensors W8A8 int8 Mixtral (tests/support/engine/checkpoints.py, I = 176)
    in a real engine, from a plain caller (zentorch left importable: on the AMD guest this was written on
    vLLM picks ZenCPUExpertsInt8, "[zen_cpu] Using zentorch_fused_moe for W8A8 INT8 MoE"). check: the
    engine starts and its MoE layer is checked against contract vllm_zen_cpu_int8_moe (weights, scales
    and the scale copies the kernel reads); check,strict starts too (every layer held). Each planted bug
    in the W8A8 path (weights padded with scales of ones, the w13 scales' halves swapped, one expert's
    scale rows wrong) is refused, and the caller catches LayoutcVllmError naming the layer, the tensor,
    the experts, the rows, the value and the contract line. One caller process, 5 engine starts at tp 1."""
    _require("vllm")
    from tests.support.engine import checkpoints as ck

    model = ck.mixtral_w8a8(tmp_path / "mixtral_w8a8", intermediate=176)
    out = tmp_path / "w8a8.json"
    log = _run_caller(model, out, ";".join(["none@check", "none@check,strict", *(f"{k}@check" for k in W8A8_NEEDLES)]),
                      "w8a8.log")
    if "[zen_cpu] Using zentorch_fused_moe for W8A8 INT8 MoE" not in log:
        pytest.skip("vLLM did not pick ZenCPUExpertsInt8 for W8A8 int8 on this CPU (it needs zentorch and an AMD "
                    "CPU vLLM's ZenCpuPlatform accepts); AMX: test_cpu_int8_amx_engine_is_held; neon/vsx are not held yet")
    calls = json.loads(out.read_text())["calls"]
    checked, strict, *broken = calls
    assert checked["started"] and strict["started"], (checked, strict, log[-4000:])
    summaries = [ln for ln in log.splitlines() if f"layoutc: mode=check, contract={ZEN_INT8} x1, layers=1, not held=0 ("
                 in ln]
    assert len(summaries) == 2, ([ln for ln in log.splitlines() if "layoutc: mode=" in ln], log[-4000:])
    assert "MoE layer not held" not in log, log[-4000:]
    for call, (kind, needles) in zip(broken, W8A8_NEEDLES.items(), strict=True):
        assert call["kind"] == kind and not call["started"], (kind, call)
        assert call["type"] == REFUSAL, (kind, call)
        text = call["text"]
        assert text.startswith("layoutc: layer model.layers.0.block_sparse_moe.experts: "), (kind, text)
        for needle in needles:
            assert needle in text, (kind, needle, text)


AMX_INT8 = "vllm_cpu_int8_moe"


def _amx_tiles() -> str | None:
    """None where the CPU has AMX tiles (vLLM's own test: CPUExpertsInt8._supports_current_device asks
    `torch.cpu._is_amx_tile_supported()`; Linux lists the `amx_tile` flag in /proc/cpuinfo), else why not."""
    import torch

    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if torch.cpu._is_amx_tile_supported() and "amx_tile" in flags.split():
        return None
    return ("CPUExpertsInt8 needs AMX tiles (ISA amx, the /proc/cpuinfo flag amx_tile); this CPU has none "
            f"(torch.cpu._is_amx_tile_supported() = {torch.cpu._is_amx_tile_supported()}); "
            "tests/tools/test_vllm_plugin_amx_int8.py holds vLLM's method with the op stood in")


def test_cpu_int8_amx_engine_is_held(tmp_path: Path) -> None:
    """Issue 43 item 2, where the CPU has AMX tiles: a compressed-tensors W8A8 int8 Mixtral (I = 128, a
    multiple of the amx tile 32) with zentorch unimportable, so vLLM picks CPUExpertsInt8. check and
    check,strict start with the MoE layer held to vllm_cpu_int8_moe before `_C::convert_weight_packed`;
    the w13 scales' halves swapped is refused, and the caller catches LayoutcVllmError naming the layer,
    the tensor, the experts, the rows and the contract line. One caller process, 3 engine starts at tp 1."""
    why = _amx_tiles()
    if why is not None:
        pytest.skip(why)
    _require("vllm")
    from tests.support.engine import checkpoints as ck

    model = ck.mixtral_w8a8(tmp_path / "mixtral_w8a8_amx", intermediate=128)
    out = tmp_path / "w8a8_amx.json"
    log = _run_caller(model, out, "none@check;none@check,strict;w8a8_scale_swap@check", "w8a8_amx.log",
                      LAYOUTC_TEST_BLOCK_ZENTORCH="1")
    checked, strict, swapped = json.loads(out.read_text())["calls"]
    assert checked["started"] and strict["started"], (checked, strict, log[-4000:])
    summaries = [ln for ln in log.splitlines() if f"layoutc: mode=check, contract={AMX_INT8} x1, layers=1, not held=0 ("
                 in ln]
    assert len(summaries) == 2, ([ln for ln in log.splitlines() if "layoutc: mode=" in ln], log[-4000:])
    assert not swapped["started"] and swapped["type"] == REFUSAL, swapped
    text = swapped["text"]
    for needle in ("layoutc: layer model.layers.0.block_sparse_moe.experts: ",
                   f"w13_weight_scale is not laid out as contract {AMX_INT8} says",
                   "rows 0..127 hold up[0..127], where the contract puts gate[0..127]",
                   contract_line(AMX_INT8, "tensor w13_weight_scale:")):
        assert needle in text, (needle, text)
