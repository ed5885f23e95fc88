"""Expert parallelism in the runtime: placement arithmetic, the expert map, routing to local ids.

vLLM's own functions are compared in tests/conformance/test_expert_parallel.py; here the
arithmetic is held to itself (owner, local id and held lists agree) and the errors are named.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch

from layoutc.runtime import experts as X
from layoutc.runtime.expert_map import local_experts, local_pairs, refuse_global, run_local


@pytest.mark.parametrize("placement", X.PLACEMENTS)
def test_every_expert_on_exactly_one_rank(placement: str) -> None:
    for num, ep in itertools.product((1, 5, 8, 60, 257), (1, 2, 3, 4, 7, 16)):
        if ep > num:
            continue
        seen: dict[int, int] = {}
        for rank in range(ep):
            mine = X.held(rank, num, ep, placement)
            assert len(mine) == X.local_count(num, ep, rank)
            for local, expert in enumerate(mine):
                assert expert not in seen
                seen[expert] = rank
                assert X.owner(expert, num, ep, placement) == rank
                assert X.local_id(expert, num, ep, placement) == local
        assert sorted(seen) == list(range(num))


def test_linear_gives_the_last_ranks_one_fewer() -> None:
    assert [X.local_count(10, 4, r) for r in range(4)] == [3, 3, 2, 2]
    assert X.held(3, 10, 4, "linear") == [8, 9]
    assert X.held(1, 10, 4, "round_robin") == [1, 5, 9]


def test_errors_are_coded() -> None:
    plan = SimpleNamespace(num_experts=8, ep_size=16, expert_placement="linear")
    with pytest.raises(X.ExpertParallelError, match=r"\[EP01\] ep_size=16 exceeds the 8 experts"):
        local_experts(0, plan)
    with pytest.raises(X.ExpertParallelError, match=r"\[EP03\] expert placement 'striped'"):
        local_experts(0, SimpleNamespace(num_experts=8, ep_size=2, expert_placement="striped"))
    with pytest.raises(X.ExpertParallelError, match=r"\[EP06\] EP rank 2 is outside 0..1"):
        local_experts(2, SimpleNamespace(num_experts=8, ep_size=2, expert_placement="linear"))
    with pytest.raises(X.ExpertParallelError, match=r"\[EP02\] ep_size=2 x tp_size=2 = 4 does not match the world of 3"):
        X.world_ranks(3, 2, 2)
    assert X.world_ranks(4, 2, 2) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_redundant_experts_replicate_logical_ones() -> None:
    assert X.physical_to_logical(4, 2) == [0, 1, 2, 3, 0, 1]
    count, emap = local_experts(1, SimpleNamespace(num_experts=4, ep_size=2, expert_placement="linear",
                                                   num_redundant_experts=2))
    assert count == 3 and emap is not None and emap.tolist() == [-1, -1, -1, 0, 1, 2]


def test_local_pairs_hand_the_kernel_only_routed_local_pairs() -> None:
    """Issue 39: a foreign pair is never computed, not even at weight 0 on some local expert."""
    _, emap = local_experts(1, SimpleNamespace(num_experts=6, ep_size=2, expert_placement="round_robin"))
    assert emap is not None and emap.tolist() == [-1, 0, -1, 1, -1, 2]
    ids = torch.tensor([[1, 2], [4, 5], [0, 2]])
    weights = torch.tensor([[0.25, 0.75], [0.5, 0.5], [0.125, 0.875]])
    pairs = local_pairs("m", weights, ids, emap)
    assert pairs.rows is not None and pairs.rows.tolist() == [0, 1] and pairs.tokens == 3
    assert pairs.ids.dtype == torch.int32 and pairs.ids.tolist() == [[0], [2]]
    assert pairs.weights.tolist() == [[0.25], [0.5]]
    x = torch.arange(6.0).reshape(3, 2)
    assert pairs.gather(x).tolist() == [[0.0, 1.0], [2.0, 3.0]]
    # the rank's sum per token; token 2 has no pair here and is exactly 0
    assert pairs.scatter(torch.tensor([[1.0, 2.0], [3.0, 4.0]])).tolist() == [[1.0, 2.0], [3.0, 4.0], [0.0, 0.0]]
    seen = []

    def kernel(xs: torch.Tensor, w: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        seen.append(i.tolist())
        return xs * w
    assert run_local("m", kernel, x, weights, ids, emap).tolist() == [[0.0, 0.25], [1.0, 1.5], [0.0, 0.0]]
    assert seen == [[[0], [2]]]
    # zentorch refuses rows reaching one expert: a spare all-zero row, weight 0, on another local
    # expert, which is no token's (scatter drops it)
    one = local_pairs("m", weights, torch.tensor([[1, 2], [0, 1], [4, 2]]), emap)
    xs, ws, ids_spare = one.with_spare(one.gather(x), 3)
    assert ids_spare.tolist() == [[0], [0], [1]] and ws.tolist() == [[0.25], [0.5], [0.0]]
    assert xs[:2].tolist() == one.gather(x).tolist() and xs[2].tolist() == [0.0, 0.0]
    assert one.scatter(torch.ones(3, 2)).tolist() == [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    assert pairs.with_spare(pairs.gather(x), 3)[2] is pairs.ids  # two experts active: unchanged
    every = local_pairs("m", weights, torch.tensor([[1, 3], [5, 1], [3, 3]]), emap)  # all local: fast path
    assert every.rows is None and every.ids.tolist() == [[0, 1], [2, 0], [1, 1]] and every.weights is weights
    with pytest.raises(ValueError, match=r"global topk_ids must lie in \[0, 6\)"):
        local_pairs("m", weights, torch.tensor([[1, 6], [0, 0], [0, 0]]), emap)
    with pytest.raises(ValueError, match=r"topk_weights the same shape"):
        local_pairs("m", weights[:2], ids, emap)
    with pytest.raises(ValueError, match=r"apply_router_weight_on_input needs top_k == 1, got top_k 2"):
        local_pairs("m", weights, ids, emap, input_weighted=True)
    with pytest.raises(ValueError, match=r"hidden_states must be \[tokens, hidden_size\] with the router's 3"):
        run_local("m", kernel, x[:2], weights, ids, emap)
    with pytest.raises(X.ExpertParallelError, match=r"\[EP05\] m: expert id 5 reaches a kernel"):
        refuse_global("m", ids, 3, 2)
    refuse_global("m", pairs.ids, 3, 2)  # remapped ids pass


def test_parallel_config_flattens() -> None:
    on = X.parallel_config(2, 2, 1, True, tp_rank=1, dp_rank=1)
    assert (on.tp_size, on.ep_size, on.ep_rank, on.use_ep) == (1, 4, 3, True)
    off = X.parallel_config(2, 2, 2, False, tp_rank=1, dp_rank=1, pcp_rank=1)
    assert (off.tp_size, off.tp_rank, off.ep_size, off.use_ep) == (8, 7, 1, False)
    assert not X.parallel_config(1, 1, 1, True).use_ep  # one device: EP is never used


# ---- the language: `experts NUM over EP placement ...` ------------------------------------

_CONTRACT = """contract t
source "test"
policy error
param num_experts: int in 1..64
param ep_size: int in {1, 2, 4} = 1
param hidden_size: int in 1..64
param intermediate_size: int in 1..64
param tp_size: int in {1}
DECL
let local = cdiv(num_experts, ep_size)
tensor w13: weight w13 {
  axis experts = local
  axis n = halves(gate | up, intermediate_size -> intermediate_size)
  axis k = hidden_size
  storage bfloat16
  fill 0
}
tensor w2: weight w2 {
  axis experts = local
  axis n = hidden_size
  axis k = intermediate_size
  storage bfloat16
  fill 0
}
"""


def _load(decl: str):  # type: ignore[no-untyped-def]
    from layoutc.compiler.source import load

    contract, diags, _ = load("t.moe", _CONTRACT.replace("DECL", decl))
    return contract, [(d.code, d.message) for d in diags if d.severity == "error"]


def test_ep_declaration_reaches_the_ir() -> None:
    contract, errors = _load("experts num_experts over ep_size placement linear, round_robin "
                             "load stride num_experts / ep_size foreign raw intermediate unpadded")
    assert errors == [] and contract is not None and contract.ep is not None
    ep = contract.ep
    assert (ep.experts, ep.count, ep.placement, ep.placement_param) == ("num_experts", "ep_size",
                                                                        ("linear", "round_robin"), False)
    assert ep.stride is not None and ep.foreign == "raw" and ep.unpadded and ep.redundant is None


@pytest.mark.parametrize(("decl", "message"), [
    ("experts num_experts over ep_size placement striped", "`striped` is a placement vLLM 0.32 does not know"),
    ("experts num_experts over ep_size placement linear, linear", "a placement is repeated"),
    ("experts num_experts over hidden_size placement linear", "must range over a finite set"),
    ("experts local over ep_size placement linear", "the expert count `local` must be an int parameter"),
    ("experts num_experts over ep_size placement linear redundant nope", "`nope` must be an int parameter"),
])
def test_a_malformed_ep_declaration_is_lc440(decl: str, message: str) -> None:
    contract, errors = _load(decl)
    assert contract is None and [c for c, _ in errors] == ["LC440"] and message in errors[0][1], errors


def test_a_second_ep_declaration_is_lc206() -> None:
    _, errors = _load("experts num_experts over ep_size placement linear\n"
                      "experts num_experts over ep_size placement round_robin")
    assert [c for c, _ in errors] == ["LC206"]


@pytest.mark.parametrize(("mode", "status"), [("dropped", "proved"), ("masked", "counterexample"),
                                              ("raw", "counterexample"), ("sentinel", "counterexample")])
def test_expert_coverage_reads_the_glues_declared_foreign_pairs(monkeypatch: pytest.MonkeyPatch, mode: str,
                                                                 status: str) -> None:
    """Issue 39: `expert-coverage` models the pairs a rank's kernel computes from the bound glue's
    declared `foreign_pairs`; a glue that would hand it a foreign pair (weight 0 on local id 0,
    a raw id, or a mode it does not model) is refused with a counterexample naming the pair."""
    import dataclasses

    from layoutc.compiler import glues
    from layoutc.compiler.source import load
    from layoutc.compiler.verify.prove import verify
    from tests.conftest import ROOT

    shipped = glues.registry()
    assert {g.interface.foreign_pairs for g in shipped.values()} == {"dropped"}
    patched = {k: dataclasses.replace(g, interface=dataclasses.replace(g.interface, foreign_pairs=mode))
               for k, g in shipped.items()}
    monkeypatch.setattr(glues, "registry", lambda: patched)
    contract, diags, _ = load(str(ROOT / "contracts" / "vllm_cpu_grouped_gemm.moe"))
    assert contract is not None, diags
    verdict = next(v for v in verify(contract) if v.property == "expert-coverage")
    assert verdict.status == status, (verdict.status, verdict.detail)
    if status == "counterexample":
        assert verdict.counterexample is not None
        message = verdict.counterexample.message
        assert "every computed pair is routed and local" in verdict.detail, verdict.detail
        assert ("does not model" if mode == "sentinel" else "never routed to it") in message, message
        if mode == "masked":
            assert "local id 0 at weight 0 (glue vllm_cpu_moe's declared foreign_pairs)" in message, message
