"""The one rank loop (layoutc/tools/rankloop.py, issue 41 item 1) and the typed run options.

run_ranks is held to what the all-reduce does (vLLM's tensor_model_parallel_all_reduce sums the ranks'
partials in the model dtype, here bfloat16, in rank order), to releasing each rank's weights before
the next rank is loaded, and to passing a strategy's refusal through before any later rank loads.
"""

from __future__ import annotations

import ast
import gc
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

from layoutc.tools.rankloop import RankSum, run_ranks
from layoutc.tools.runoptions import RunOptions

ROOT = Path(__file__).resolve().parents[2]


class _Weights:
    def __init__(self, rank: int) -> None:
        self.rank = rank


class _Strategy:
    """Rank r's partial is x * (r + 1) / 3 in bfloat16; records loads, calls and which weights are alive."""

    def __init__(self, refuse: int | None = None) -> None:
        self.loaded: list[int] = []
        self.calls: list[int] = []
        self.alive_at_load: list[int] = []
        self.refs: list[weakref.ref[_Weights]] = []
        self.refuse = refuse

    def load(self, rank: int) -> _Weights:
        gc.collect()
        self.alive_at_load.append(sum(r() is not None for r in self.refs))
        if rank == self.refuse:
            raise ValueError(f"refused rank {rank}")
        self.loaded.append(rank)
        w = _Weights(rank)
        self.refs.append(weakref.ref(w))
        return w

    def compute(self, weights: _Weights, x: torch.Tensor, routing: tuple[Any, Any]) -> torch.Tensor:
        self.calls.append(weights.rank)
        return (x * (weights.rank + 1) / 3).to(torch.bfloat16)


def test_the_partials_are_summed_in_their_dtype_in_rank_order() -> None:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    s = _Strategy()
    k = run_ranks(s, range(3), x, (None, None), iters=2)
    want = (x / 3).to(torch.bfloat16).clone()
    for r in (1, 2):
        want = want.add_((x * (r + 1) / 3).to(torch.bfloat16))
    assert isinstance(k, RankSum) and k.output.dtype == torch.bfloat16
    assert torch.equal(k.output, want)  # bf16 adds, not a float32 sum cast once
    assert s.loaded == [0, 1, 2] and s.calls == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # a warm-up and 2 timed calls each
    assert [f.rank for f in k.ranks] == [0, 1, 2]
    assert k.load_s >= 0 and k.kernel_s >= 0 and k.peak_mib >= 0


def test_each_rank_s_weights_are_released_before_the_next_loads() -> None:
    s = _Strategy()
    run_ranks(s, range(4), torch.ones(2, 2), (None, None), warmup=False, iters=1)
    assert s.alive_at_load == [0, 0, 0, 0], s.alive_at_load
    assert s.calls == [0, 1, 2, 3]  # no warm-up: one call per rank


def test_a_refusal_passes_through_before_later_ranks_load() -> None:
    s = _Strategy(refuse=1)
    with pytest.raises(ValueError, match="refused rank 1"):
        run_ranks(s, range(3), torch.ones(2, 2), (None, None))
    assert s.loaded == [0]


def test_no_ranks_or_no_timed_call_is_an_error() -> None:
    with pytest.raises(ValueError, match="no ranks"):
        run_ranks(_Strategy(), [], torch.ones(1, 1), (None, None))
    with pytest.raises(ValueError, match="iters"):
        run_ranks(_Strategy(), range(1), torch.ones(1, 1), (None, None), iters=0)


def test_every_runner_calls_the_one_loop() -> None:
    """No runner keeps a loop of its own: the all-reduce sum (`.add_(part)`) is written in rankloop.py only,
    and run.py, ep_run.py, quant_run/runner.py and quant_run/padded.py each call run_ranks."""
    tools = ROOT / "layoutc" / "tools"
    own = [
        str(p.relative_to(ROOT))
        for p in tools.rglob("*.py")
        if p.name != "rankloop.py" and ".add_(part)" in p.read_text(encoding="utf-8")
    ]
    assert not own, own
    for name in ("run.py", "ep_run.py", "quant_run/runner.py", "quant_run/padded.py"):
        assert "run_ranks(" in (tools / name).read_text(encoding="utf-8"), name


def test_no_namespace_below_the_command() -> None:
    """Only `run` (the subcommand's entry) takes argparse's Namespace; everything below takes RunOptions."""
    found = []
    for path in [
        ROOT / "layoutc/tools/run.py",
        ROOT / "layoutc/tools/ep_run.py",
        *(ROOT / "layoutc/tools/quant_run").glob("*.py"),
    ]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name != "run":
                for a in node.args.args:
                    if a.annotation is not None and "Namespace" in ast.unparse(a.annotation):
                        found.append(f"{path.name}:{node.lineno} {node.name}")
    assert not found, found


def test_options_from_a_namespace_are_frozen_and_defaulted() -> None:
    import argparse
    import dataclasses

    opts = RunOptions.from_namespace(argparse.Namespace(model_dir="m", tp="2", func=print))
    assert (opts.model_dir, opts.tp, opts.ep, opts.placement, opts.world) == ("m", "2", "1", "linear", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.contract = "x"  # type: ignore[misc]
