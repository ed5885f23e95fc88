"""`layoutc run --ep` refuses bad expert-parallel input with a registered code, exit 2, before
anything is loaded (issue 23, "Bad input"):

- an EP degree above the experts (LR105, runtime EP01: vLLM's `determine_expert_map` would
  give the ranks above the expert count no experts);
- a `--tp x --ep` product that is not `--world` (LR106, runtime EP02);
- a placement vLLM 0.32 does not know, or the contract does not serve (LR107, EP03);
- a checkpoint whose expert count is not config.json's (LR119, EP04).

The checkpoints are hand-written safetensors (tests/tools/test_run_failfast.py `make_qwen3`: 2
experts). "Before anything is loaded" is held by making every loader and the header shape
check raise: a code that came after them could not be the one printed.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from layoutc.compiler.diagnostics import CODES
from layoutc.compiler.ruledoc import rule_text
from layoutc.runtime.experts import CODES as EP_CODES
from layoutc.tools.ep_run import RUN_CODES
from tests.tools.test_run_failfast import E, H, _coded, make_qwen3, run_cli


@pytest.fixture
def nothing_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every path that reads a tensor (or checks the expert headers) raises."""
    import layoutc.tools.checkpoints.loader as loader
    import layoutc.tools.checkpoints.preflight as preflight

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("loaded before the EP input was checked")

    monkeypatch.setattr(loader, "load_layer_rank", boom)
    monkeypatch.setattr(loader, "load_layer_experts", boom)  # the EP ranks' loader
    monkeypatch.setattr(preflight, "check_experts", boom)
    monkeypatch.setattr(preflight, "check_finite", boom)


def test_run_codes_are_registered_and_explained() -> None:
    for ep_code, lr in RUN_CODES.items():
        assert ep_code in EP_CODES and lr in CODES, (ep_code, lr)
        text = rule_text(lr)
        assert text is not None and "meaning:" in text and "example:" in text, text


def test_ep_above_the_experts(tmp_path: Path, nothing_loads: None) -> None:
    ckpt = make_qwen3(tmp_path / "m")
    code, _, err, s = run_cli(str(ckpt), "--tp", "1", "--ep", "1,4")
    _coded(code, err, "LR105", s, f"--tp 1 --ep 4: ep_size=4 exceeds the {E} experts: ranks 2..3 would hold none")


def test_ep_times_tp_not_the_world(tmp_path: Path, nothing_loads: None) -> None:
    ckpt = make_qwen3(tmp_path / "m")
    code, _, err, s = run_cli(str(ckpt), "--tp", "1,2", "--ep", "2", "--world", "2")
    _coded(code, err, "LR106", s, "--tp 2 --ep 2: ep_size=2 x tp_size=2 = 4 does not match the world of 2 ranks")


def test_unknown_placement(tmp_path: Path, nothing_loads: None) -> None:
    ckpt = make_qwen3(tmp_path / "m")
    code, _, err, s = run_cli(str(ckpt), "--tp", "1", "--ep", "2", "--placement", "striped")
    _coded(code, err, "LR107", s, "expert placement 'striped' is not one vLLM 0.32 knows", "linear, round_robin")


def test_placement_the_contract_does_not_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch_grouped_mm states `placement linear` only (vLLM falls back to linear with EPLB)."""
    import layoutc.tools.checkpoints.loader as loader

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("loaded before the placement was checked")

    monkeypatch.setattr(loader, "load_layer_rank", boom)
    monkeypatch.setattr(loader, "load_layer_experts", boom)
    ckpt = make_qwen3(tmp_path / "m")
    code, _, err, s = run_cli(str(ckpt), "--tp", "1", "--ep", "2", "--placement", "round_robin",
                              "--contract", "torch_grouped_mm", "--no-transformers")
    _coded(code, err, "LR107", s, "--placement round_robin: contract torch_grouped_mm serves linear")


def test_config_gives_fewer_experts_than_the_router(tmp_path: Path, nothing_loads: None) -> None:
    """Before LR119 this reached the kernel and died in an IndexError (LR199)."""
    ckpt = make_qwen3(tmp_path / "m", config={"num_experts": 1})
    code, _, err, s = run_cli(str(ckpt), "--tp", "1", "--ep", "1")
    _coded(code, err, "LR119", s, "config.json gives 1 experts, but in layer 0 its router "
           "'model.layers.0.mlp.gate.weight' has 2 rows")


def test_config_gives_more_experts_than_the_checkpoint(tmp_path: Path, nothing_loads: None) -> None:
    ckpt = make_qwen3(tmp_path / "m", config={"num_experts": 3})
    code, _, err, s = run_cli(str(ckpt), "--tp", "1", "--ep", "3")
    _coded(code, err, "LR119", s, "config.json gives 3 experts", "has 2 rows")


def test_an_expert_past_the_config(tmp_path: Path, nothing_loads: None) -> None:
    """The router agrees with config.json (1 row), but expert 1's tensors are still there."""
    ckpt = make_qwen3(tmp_path / "m", config={"num_experts": 1}, shapes={"model.layers.0.mlp.gate.weight": (1, H)})
    code, _, err, s = run_cli(str(ckpt), "--tp", "1")
    _coded(code, err, "LR119", s, "it holds a tensor of expert 1, 'model.layers.0.mlp.experts.1.down_proj.weight'")


def test_a_matching_world_is_admitted(tmp_path: Path) -> None:
    """`--world 2` with tp 1 x ep 2 and tp 2 x ep 1 passes the EP checks (the run goes on to
    the loaders: the check is not a refusal of every --world)."""
    from layoutc.tools.ep_run import check_ep_options

    check_ep_options(E, [(1, 2), (2, 1)], "round_robin", 2)
    check_ep_options(E, [(4, 2)], "linear", None)


def test_rank_loader_refuses_experts_that_do_not_fit(tmp_path: Path) -> None:
    """checkpoints.loader.load_layer_experts at EP 2 over 2 experts (1 local slot): two held
    experts, or an id past the checkpoint's, is FormatError LR120 before any tensor is read."""
    import importlib

    from layoutc.tools.checkpoints.formats import FormatError, describe
    from layoutc.tools.checkpoints.loader import load_layer_experts
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.ep_run import ep_plan
    from layoutc.tools.runplan import checkpoint_plan

    mod = importlib.import_module("layoutc_generated.vllm_cpu_grouped_gemm")
    with Checkpoint(str(make_qwen3(tmp_path / "m"))) as ckpt:
        moe = describe(ckpt.config, None, ckpt.weight_map)
        plan = ep_plan(mod, checkpoint_plan(mod, moe, 1, "float32", "vec"), 2, "linear")
        assert plan.local_num_experts == 1
        for held in ([0, 1], [2]):
            with pytest.raises(FormatError, match=r"do not fit the rank's 1 local slots of the checkpoint's 2 "
                                                  "experts") as info:
                load_layer_experts(ckpt, moe, 0, mod, plan, 0, held)
            assert info.value.code == "LR120"
        rw = load_layer_experts(ckpt, moe, 0, mod, plan, 0, [1])  # expert 1's weights, all 0.01
        assert rw.w13.shape[0] == 1 and float(rw.w13.abs().max()) == pytest.approx(0.01)


def test_one_expert_view_reads_only_that_expert() -> None:
    """The loader's one-expert view of a fused source, over a stacked-rows (DBRX) view too:
    indexing it reads expert e's region only and drops the experts axis."""
    import torch

    from layoutc.tools.checkpoints.loader import _OneExpert
    from layoutc.tools.checkpoints.reader import _Unflattened

    fused = torch.arange(4 * 6 * 5, dtype=torch.float32).reshape(4, 6, 5)
    view = _OneExpert(fused, 2)
    assert view.get_shape() == [6, 5]
    assert torch.equal(view[(slice(1, 4), slice(0, 5))], fused[2, 1:4])
    reads: list[tuple[int, int]] = []

    class Stacked:  # [E * rows, cols], recording the rows each read asks for
        def __getitem__(self, index: tuple[slice, slice]) -> torch.Tensor:
            reads.append((index[0].start, index[0].stop))
            return fused.reshape(24, 5)[index]

    stacked = _OneExpert(_Unflattened(Stacked(), 4, 6, 5), 3)
    assert stacked.get_shape() == [6, 5]
    assert torch.equal(stacked[(slice(0, 6), slice(2, 5))], fused[3, :, 2:5]) and reads == [(18, 24)]
    whole = _Unflattened(Stacked(), 4, 6, 5)  # a slice's step and an empty range are kept, as a tensor keeps them
    for first in (slice(0, 4, 2), slice(3, 0, -1), slice(1, 4, 3), slice(2, 2), slice(3, 1), slice(None)):
        experts = list(range(*first.indices(4)))  # (torch's own slices take no negative step)
        assert torch.equal(whole[first, 1:5, 0:3], fused[experts][:, 1:5, 0:3]), first
    assert torch.equal(whole[1], fused[1])


def test_a_repeated_degree_runs_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--ep 2,2` / `--tp 1,1`: each (tp, ep) pair reaches the EP checks once, in the order
    given (before, every repeat ran and printed its rows again)."""
    import layoutc.tools.run as run

    seen: list[list[tuple[int, int]]] = []

    def stop(num_experts: int, pairs: list[tuple[int, int]], placement: str, world: int | None) -> None:
        seen.append(pairs)
        raise run.RunError("LR104", "stop here")

    monkeypatch.setattr(run, "check_ep_options", stop)
    ckpt = make_qwen3(tmp_path / "m")
    code, _, err, s = run_cli(str(ckpt), "--tp", "1,1,2", "--ep", "2,1,2")
    assert code == 2 and "stop here" in err, (code, err, s)
    assert seen == [[(1, 2), (2, 2), (1, 1), (2, 1)]], seen


def test_gloo_runner_refuses_ep_above_the_experts_before_any_rank(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """run_tp_checkpoint(ep_size=4) on a 2-expert checkpoint: EP01 from config.json, no rank
    spawned (before, 4 ranks started and each raised EP01: 89 s at ep 16 on 8 experts)."""
    import layoutc.tools.tp.checkpoint as tp_checkpoint
    from layoutc.runtime.experts import ExpertParallelError

    def no_ranks(*args: object, **kwargs: object) -> None:
        raise AssertionError("a rank was started")

    monkeypatch.setattr(tp_checkpoint, "launch_ranks", no_ranks)
    ckpt = make_qwen3(tmp_path / "m")
    with pytest.raises(ExpertParallelError, match=rf"\[EP01\] ep_size=4 exceeds the {E} experts"):
        tp_checkpoint.run_tp_checkpoint(str(ckpt), tp_size=1, ep_size=4, use_transformers=False)


@pytest.mark.conformance
def test_round_robin_on_a_model_vllm_places_linearly_is_noted() -> None:
    """vLLM 0.32 keeps round_robin only with more than one expert group (determine_expert_placement_strategy,
    called here as the oracle); the run's note says so exactly where vLLM would fall back."""
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_placement_strategy

    from layoutc.tools.ep_run import vllm_placement_note

    parallel = types.SimpleNamespace(use_all2all_kernels=False, needs_round_robin_routing_tables=False)
    for config in ({"model_type": "qwen3_moe"}, {"n_group": 1}, {"n_group": 8}, {"text_config": {"n_group": 4}},
                   {"num_expert_group": 2}, {"n_group": True}):
        inner = config.get("text_config", config)
        groups = next((inner[k] for k in ("n_group", "num_expert_group") if k in inner), None)
        groups = None if isinstance(groups, bool) else groups
        served = determine_expert_placement_strategy("round_robin", parallel, groups, 0, False)
        note = vllm_placement_note(config, "round_robin")
        assert (note is None) == (served == "round_robin"), (config, served, note)
        assert vllm_placement_note(config, "linear") is None
