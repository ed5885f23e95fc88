"""The generated loaders (alloc_* / load_*) of marlin_moe_awq, flashinfer_trtllm_mxfp4_moe and
flashinfer_nvfp4_moe on inputs a caller really passes: an nn.Parameter as the destination (it
requires grad by default), a source that requires grad (a transformers module's parameter) and a
meta tensor (an empty-weights model). Each either loads the same bytes as a plain tensor does,
leaving the destination a leaf with no autograd graph (as vLLM's weight loaders write
`param.data`), or raises the module's LayoutContractError naming the tensor; never torch's
RuntimeError / NotImplementedError. The three are the contracts issue 22 touched (AWQ's pack
order and channelwise groups, the fused gate/up source of an (up, gate) contract).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
import torch

from generated import flashinfer_nvfp4_moe, flashinfer_trtllm_mxfp4_moe, marlin_moe_awq

CASES: dict[str, tuple[ModuleType, dict[str, Any]]] = {
    "awq_channelwise": (marlin_moe_awq, {"num_experts": 2, "hidden_size": 256, "intermediate_size": 192, "tp_size": 2,
                                         "group_size": -1, "activation": "silu", "dtype": "float16"}),
    "awq_g32": (marlin_moe_awq, {"num_experts": 2, "hidden_size": 256, "intermediate_size": 192, "tp_size": 2,
                                 "group_size": 32, "activation": "silu", "dtype": "bfloat16"}),
    "mxfp4": (flashinfer_trtllm_mxfp4_moe, {"num_experts": 2, "hidden_size": 256, "intermediate_size": 320,
                                            "tp_size": 2, "activation": "swigluoai"}),
    "nvfp4": (flashinfer_nvfp4_moe, {"num_experts": 2, "hidden_size": 256, "intermediate_size": 320, "tp_size": 2,
                                     "activation": "silu", "dtype": "bfloat16"}),
}
TENSORS = [(case, name[len("load_"):]) for case, (module, _) in CASES.items()
           for name in sorted(dir(module)) if name.startswith("load_")]


def _source(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random stored values of `dtype` (floats from a normal, codes and packed words from bytes)."""
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point and dtype.itemsize >= 2:
        return torch.randn(shape, generator=gen).to(dtype)
    raw = torch.randint(0, 256, (*shape, dtype.itemsize), dtype=torch.uint8, generator=gen)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize(("case", "tensor"), TENSORS, ids=[f"{c}-{t}" for c, t in TENSORS])
def test_loader_writes_a_parameter_like_a_plain_tensor(case: str, tensor: str) -> None:
    module, config = CASES[case]
    plan = module.plan(**config)
    alloc, load = getattr(module, f"alloc_{tensor}"), getattr(module, f"load_{tensor}")
    full = tuple(getattr(module, f"{tensor}_full_shape")(plan))
    for rank in range(plan.tp_size):
        plain = alloc(plan, rank)
        src = _source(full, plain.dtype, seed=rank)
        load(plain, src, plan, rank)
        assert plain.requires_grad is False and plain.grad_fn is None
        if plain.dtype.is_floating_point:  # an nn.Parameter requires grad by default
            param = torch.nn.Parameter(torch.full_like(plain, 7))
            assert param.requires_grad
            assert alloc(plan, rank, out=param) is param
            load(param, src.clone().requires_grad_(src.dtype.itemsize >= 2), plan, rank)
            assert param.is_leaf and param.requires_grad and param.grad_fn is None
            assert torch.equal(param.detach().view(torch.uint8), plain.view(torch.uint8)), (tensor, rank)
        if src.dtype.is_floating_point and src.dtype.itemsize >= 2:  # a transformers parameter as the source
            into = alloc(plan, rank)
            load(into, torch.nn.Parameter(src.clone()), plan, rank)
            assert into.grad_fn is None and not into.requires_grad
            assert torch.equal(into.view(torch.uint8), plain.view(torch.uint8)), (tensor, rank)


@pytest.mark.parametrize(("case", "tensor"), TENSORS, ids=[f"{c}-{t}" for c, t in TENSORS])
def test_loader_refuses_a_meta_source_by_name(case: str, tensor: str) -> None:
    module, config = CASES[case]
    plan = module.plan(**config)
    dst = getattr(module, f"alloc_{tensor}")(plan, 0)
    full = tuple(getattr(module, f"{tensor}_full_shape")(plan))
    with pytest.raises(module.LayoutContractError, match=f"the source for {tensor} is a meta tensor"):
        getattr(module, f"load_{tensor}")(dst, torch.empty(full, dtype=dst.dtype, device="meta"), plan, 0)
