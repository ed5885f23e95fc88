"""vLLM 0.32's CPU engine under `enable_expert_parallel` with the layoutc plugin (issue 23
item 4): engine loads of a tiny Mixtral (8 experts, hidden 256, intermediate 704, one layer;
tests/support/engine/checkpoints.py) in a child process (tests/support/engine/child.py); the tp 2 ones are runs of the
session's Mixtral child (tests/conftest.py `mixtral_runs`, shared with tests/engine/test_vllm_plugin_engine.py).

vLLM admits EP on the CPU grouped GEMM (pinned in tests/engine/test_ep_vllm_cpu.py), and its
`apply` would pass global expert ids to a kernel holding this rank's experts only. So:

- tp 2 + EP, check mode: the plugin refuses the layer at load, naming why;
- tp 2 + EP, replace mode: the plugin remaps the ids through the contract's expert map and
  the engine decodes tp 1's greedy tokens (plugin off, the oracle: vLLM itself);
- tp 1, plugin off: the reference.

Cost: two engine loads of the shared child, and two more for the uneven tp 3 split (see docs/vllm_plugin.md for
the measured time).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.test_vllm_plugin_engine import (
    WORKER_FAILED,
    _child,
    _require,
    _sections,
    assert_same_greedy,
    plain_runs,
)

pytestmark = [pytest.mark.engine, pytest.mark.kernel, pytest.mark.transformers, pytest.mark.slow]


def test_expert_parallel_tp2_check_refuses_replace_matches_tp1(mixtral_runs: tuple[int, str, list[dict]]) -> None:
    """Two engine loads of tests/engine/test_vllm_plugin_engine.py MIXTRAL_RUNS (tp 2 + EP, check and replace) against its
    tp 1 off run, the plugin off: the same checkpoint, engine and mode this test once loaded in a child of its own."""
    rc, log, runs = mixtral_runs
    assert rc == 0, log[-4000:]
    got, part = {(r["tp"], r["mode"]): r for r in runs if r["ep"]}, _sections(log)
    assert set(got) == {(2, "check"), (2, "replace")}, sorted(got)
    got[(1, "off")] = next(r for r in plain_runs(runs) if (r["tp"], r["mode"]) == (1, "off"))
    assert WORKER_FAILED in got[(2, "check")].get("error", ""), got[(2, "check")]
    checked = part["tp=2 mode=check ep=1"]
    message = next(ln for ln in checked.splitlines() if "LayoutcVllmError: layoutc: layer" in ln)
    for needle in ("vLLM runs it with expert parallelism (ep_size 2, 4 of 8 experts on this rank)",
                   "CPUUnquantizedExperts.apply ignores expert_map",
                   "contract vllm_cpu_grouped_gemm remaps them (LAYOUTC_VLLM=replace)"):
        assert needle in message, (needle, message)
    replaced, ref = got[(2, "replace")], got[(1, "off")]
    assert "error" not in replaced and "error" not in ref, (replaced, ref)
    assert_same_greedy(replaced, ref, "tp 2 EP replace vs tp 1")
    lines = [ln for ln in part["tp=2 mode=replace ep=1"].splitlines() if "layoutc: mode=replace," in ln]
    assert len(lines) == 2 and all("contract=vllm_cpu_grouped_gemm x1, layers=1" in ln for ln in lines), lines


def test_expert_parallel_tp3_uneven_split_replace_matches_tp1(tmp_path: Path) -> None:
    """Issue 43 item 4: 8 experts over 3 EP ranks (3, 3, 2: rank 2 holds one fewer than the contract's
    cdiv(8, 3) = 3 slots). Replace mode loads every rank, the short rank's spare slot filled as the
    contract says, and decodes tp 1's greedy tokens (plugin off). Before: rank 2 stopped the engine,
    "cannot pad this layer's weights: w13 has shape (2, ...), expected (3, ...)". A Mixtral with 3 heads
    and a vocabulary of 576 (vLLM splits both over tp). Two engine loads, 3 workers on the tp 3 one."""
    _require("vllm")
    from tests.support.engine import checkpoints as ck

    model = ck.mixtral(tmp_path / "mixtral_h3", heads=3, vocab=576)
    rc, log, runs = _child(model, tmp_path / "mixtral_ep3.json", (), (), block_zentorch=True,
                           runs="3:replace:ep,1:off")
    assert rc == 0, log[-4000:]
    got, part = {(r["tp"], r["mode"]): r for r in runs}, _sections(log)
    assert set(got) == {(3, "replace"), (1, "off")}, sorted(got)
    replaced, ref = got[(3, "replace")], got[(1, "off")]
    assert replaced["ep"] and "error" not in replaced and "error" not in ref, (replaced, ref)
    assert_same_greedy(replaced, ref, "tp 3 EP replace (8 experts: 3, 3, 2) vs tp 1")
    lines = [ln for ln in part["tp=3 mode=replace ep=1"].splitlines() if "layoutc: mode=replace," in ln]
    assert len(lines) == 3 and all("contract=vllm_cpu_grouped_gemm x1, layers=1" in ln for ln in lines), lines
