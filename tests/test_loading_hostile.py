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
from typing import Any, Self

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


class _SliceOf:
    """A slice object over a tensor (get_shape / get_dtype / [index]), as the checkpoint loader's
    `_OneExpert` / `_ExpertRange` wrap a fused tensor: its reads are views of that tensor."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def get_shape(self) -> list[int]:
        return list(self.t.shape)

    def get_dtype(self) -> str:
        return {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}[self.t.dtype]

    def __getitem__(self, index: Any) -> torch.Tensor:
        return self.t[index]


def _float_tensor(case: str, tensor: str) -> bool:
    module, config = CASES[case]
    dtype = getattr(module, f"alloc_{tensor}")(module.plan(**config), 0).dtype
    return bool(dtype.is_floating_point and dtype.itemsize >= 2)


FLOAT_TENSORS = [(c, t) for c, t in TENSORS if _float_tensor(c, t)]  # codes and packed storage never require grad


@pytest.mark.parametrize(("case", "tensor"), FLOAT_TENSORS, ids=[f"{c}-{t}" for c, t in FLOAT_TENSORS])
def test_a_slice_object_whose_reads_require_grad_leaves_no_graph(case: str, tensor: str) -> None:
    """The source is not a tensor, but what it reads requires grad (a slice object over a
    transformers parameter): the destination stays a plain tensor with no graph to it, as for a
    tensor source (before the fix: dst.grad_fn was CopySlices, dst no longer a leaf)."""
    module, config = CASES[case]
    plan = module.plan(**config)
    alloc, load = getattr(module, f"alloc_{tensor}"), getattr(module, f"load_{tensor}")
    plain = alloc(plan, 0)
    src = _source(tuple(getattr(module, f"{tensor}_full_shape")(plan)), plain.dtype, seed=5)
    load(plain, src, plan, 0)
    into = alloc(plan, 0)
    load(into, _SliceOf(torch.nn.Parameter(src.clone())), plan, 0)
    assert into.is_leaf and not into.requires_grad and into.grad_fn is None
    assert torch.equal(into.view(torch.uint8), plain.view(torch.uint8))


@pytest.mark.parametrize(("case", "tensor"), TENSORS, ids=[f"{c}-{t}" for c, t in TENSORS])
def test_loader_refuses_a_meta_source_by_name(case: str, tensor: str) -> None:
    module, config = CASES[case]
    plan = module.plan(**config)
    dst = getattr(module, f"alloc_{tensor}")(plan, 0)
    full = tuple(getattr(module, f"{tensor}_full_shape")(plan))
    with pytest.raises(module.LayoutContractError, match=f"the source for {tensor} is a meta tensor"):
        getattr(module, f"load_{tensor}")(dst, torch.empty(full, dtype=dst.dtype, device="meta"), plan, 0)


class _Slice:
    """A foreign slice object: get_shape/get_dtype as safetensors' PySafeSlice, reads `data`."""

    def __init__(self, data: torch.Tensor, dtype_name: str) -> None:
        self.data, self.dtype_name = data, dtype_name

    def get_shape(self) -> list[int]:
        return list(self.data.shape)

    def get_dtype(self) -> str:
        return self.dtype_name

    def __getitem__(self, index: Any) -> torch.Tensor:
        return self.data[index]


def test_an_e8m0_safetensors_slice_is_refused_not_cast(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An MXFP4 scale stored as safetensors F8_E8M0 (torch.float8_e8m0fnu) into the contract's
    uint8 E8M0 codes: refused by name with the .view(torch.uint8) that loads it. It was not in the
    loader's dtype table, so the copy cast 2^(code - 127) to uint8 (code 110 stored as 0); the
    bytes through .view are the codes, as the uint8 path loads them."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    module = flashinfer_trtllm_mxfp4_moe
    plan = module.plan(**CASES["mxfp4"][1])
    full = tuple(module.w13_weight_scale_full_shape(plan))
    codes = torch.randint(100, 140, full, dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    save_file({"scale": codes.view(torch.float8_e8m0fnu)}, str(tmp_path / "s.safetensors"))
    want = module.alloc_w13_weight_scale(plan, 1)
    module.load_w13_weight_scale(want, codes, plan, 1)
    with safe_open(str(tmp_path / "s.safetensors"), framework="pt") as f:
        sl = f.get_slice("scale")
        assert sl.get_dtype() == "F8_E8M0"
        dst = module.alloc_w13_weight_scale(plan, 1)
        with pytest.raises(module.LayoutContractError, match=r"w13_weight_scale has dtype torch.float8_e8m0fnu, "
                                                             r"expected torch.uint8.*\.view\(torch.uint8\)"):
            module.load_w13_weight_scale(dst, sl, plan, 1)
        module.load_w13_weight_scale(dst, sl[:].view(torch.uint8), plan, 1)
    assert torch.equal(dst, want)


@pytest.mark.parametrize("name", ["F4", "I32"])
def test_a_slice_is_judged_by_what_it_reads(name: str) -> None:
    """A slice whose get_dtype() names no known dtype ("F4"), or names the right one ("I32" for
    int32 words) but reads another, is refused on its first read, never cast into the codes."""
    module, config = CASES["awq_g32"]
    plan = module.plan(**config)
    full = tuple(module.w13_qweight_full_shape(plan))
    dst = module.alloc_w13_qweight(plan, 0)
    source = _Slice(torch.ones(full, dtype=torch.float32), name)
    with pytest.raises(module.LayoutContractError, match=r"w13_qweight has dtype torch\.float32, expected torch\.int32"):
        module.load_w13_qweight(dst, source, plan, 0)


def _in_place_case() -> tuple[Any, Any, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """vllm_cpu_grouped_gemm's w13 at I = 200, tp 1, float32: (module, plan, checkpoint, its load
    from its own tensor, a destination holding the checkpoint in its first rows, those rows)."""
    from generated import vllm_cpu_grouped_gemm as module

    plan = module.plan(num_experts=2, hidden_size=256, intermediate_size=200, tp_size=1, dtype="float32",
                       isa="vec", activation="silu")
    full = tuple(module.w13_full_shape(plan))
    checkpoint = torch.randn(full, generator=torch.Generator().manual_seed(0))
    want = module.alloc_w13(plan, 0)
    module.load_w13(want, checkpoint, plan, 0)
    dst = module.alloc_w13(plan, 0)
    dst[:, :full[1]] = checkpoint
    return module, plan, checkpoint, want, dst, full[1]


def test_a_source_sharing_the_destinations_memory_is_refused() -> None:
    """Padding in place (the checkpoint copied into the parameter's first rows, then loaded from
    that view) overwrote source rows before reading them: 102,400 of vllm_cpu_grouped_gemm's
    w13 values at I = 200, tp 1 differed from a load of the same checkpoint from its own
    tensor. pad_*(out=) already refuses an overlapping buffer (layout.check_out); load_* now too."""
    module, plan, _, want, dst, rows = _in_place_case()
    with pytest.raises(module.LayoutContractError, match="the source for w13 shares memory with its destination"):
        module.load_w13(dst, dst[:, :rows], plan, 0)
    source = dst[:, :rows].clone()  # the way that works: a separate source, the pads rewritten by alloc(out=)
    assert module.alloc_w13(plan, 0, out=dst) is dst
    module.load_w13(dst, source, plan, 0)
    assert torch.equal(dst, want)


def test_a_slice_object_reading_the_destinations_memory_is_refused() -> None:
    """The same in-place padding through a slice object (its reads are views of the
    destination, as `_SliceOf` wraps a fused tensor): the source is not a tensor, so its memory
    is only known once read; each read is checked before it is copied."""
    module, plan, checkpoint, want, dst, rows = _in_place_case()
    with pytest.raises(module.LayoutContractError,
                       match="a read of the source slice for w13 shares memory with its destination"):
        module.load_w13(dst, _SliceOf(dst[:, :rows]), plan, 0)
    into = module.alloc_w13(plan, 0)  # a slice over a separate tensor loads as the tensor does
    module.load_w13(into, _SliceOf(checkpoint), plan, 0)
    assert torch.equal(into, want)


class _Wrapper(torch.Tensor):
    """A wrapper tensor subclass (as torch's FakeTensor / DTensor and functional tensors are made):
    its operations run on the tensor it wraps, and it has no storage of its own whose address
    can be read (`untyped_storage().data_ptr()` raises torch's RuntimeError)."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Self:
        made = torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device,
                                                   strides=inner.stride())
        made.inner = inner
        return made  # type: ignore[no-any-return]

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch.utils._pytree import tree_map

        def unwrap(x: Any) -> Any:
            return x.inner if isinstance(x, _Wrapper) else x

        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))


class _Reads(_Slice):
    """A slice object whose every read is `make(region)` (a region of `data`)."""

    def __init__(self, data: torch.Tensor, make: Any) -> None:
        super().__init__(data, "F32")
        self.make = make

    def __getitem__(self, index: Any) -> torch.Tensor:
        return self.make(self.data[index])  # type: ignore[no-any-return]


def _w2_case() -> tuple[Any, Any, torch.Tensor]:
    """vllm_cpu_grouped_gemm's w2 at I = 200 (padded to 224), tp 1, float32, and a checkpoint."""
    from generated import vllm_cpu_grouped_gemm as module

    plan = module.plan(num_experts=2, hidden_size=256, intermediate_size=200, tp_size=1, dtype="float32",
                       isa="vec", activation="silu")
    return module, plan, torch.randn(tuple(module.w2_full_shape(plan)), generator=torch.Generator().manual_seed(1))


# what each source or read is, and what the refusal says; before the fix the address-less ones
# raised torch's RuntimeError from the memory-sharing check, the others NotImplementedError
HOSTILE = {
    "zero-tensor": (lambda t: torch._efficientzerotensor(tuple(t.shape)), "torch's zero tensor of shape"),
    "wrapper-subclass": (lambda t: _Wrapper(t.contiguous()), r"a _Wrapper \(tensor subclass\) of shape"),
    "sparse": (lambda t: t.to_sparse(), "layout torch.sparse_coo"),
    "mkldnn": (lambda t: t.contiguous().to_mkldnn(), "layout torch._mkldnn"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("through", ["tensor", "slice"])
def test_a_source_that_is_not_a_plain_dense_tensor_is_refused_by_name(kind: str, through: str) -> None:
    """A source (or a slice object's read) that is sparse, mkldnn, torch's zero tensor or a wrapper
    subclass: whether it shares the destination's memory cannot be told, or the copy cannot be
    made; each is refused with the module's LayoutContractError, and the destination keeps the
    pads alloc wrote. A plain tensor of the same values then loads."""
    module, plan, checkpoint = _w2_case()
    make, says = HOSTILE[kind]
    dst = module.alloc_w2(plan, 0)
    pads = dst.clone()
    source: Any = make(checkpoint) if through == "tensor" else _Reads(checkpoint, make)
    with pytest.raises(module.LayoutContractError, match=says):
        module.load_w2(dst, source, plan, 0)
    assert torch.equal(dst[..., 200:], pads[..., 200:])  # the pads are as alloc wrote them
    module.load_w2(dst, checkpoint.clone(), plan, 0)
    assert torch.equal(dst[..., :200], checkpoint)


@pytest.mark.parametrize("kind", ["zero-tensor", "wrapper-subclass"])
def test_a_pad_whose_input_address_cannot_be_read_refuses_out(kind: str) -> None:
    """pad_w2(t, out=): out= must share no memory with t, which cannot be told for t without a
    readable address: refused by name (before: torch's RuntimeError), out= left as it was.
    Without out= the pad reads it as any tensor (a fresh output cannot alias it)."""
    module, plan, checkpoint = _w2_case()
    make, says = HOSTILE[kind]
    out = torch.full(tuple(module.w2_shapes(plan)[1]), 7.0)
    with pytest.raises(module.LayoutContractError, match=f"out= for w2 and its input: {says}"):
        module.pad_w2(make(checkpoint), plan, out=out)
    assert bool((out == 7).all())
    assert torch.equal(module.pad_w2(make(checkpoint), plan), module.pad_w2(make(checkpoint).clone(), plan))


def test_a_zero_tensor_out_is_refused_as_unwritable() -> None:
    module, plan, checkpoint = _w2_case()
    padded = tuple(module.w2_shapes(plan)[1])
    with pytest.raises(module.LayoutContractError, match="out= for w2 is torch's zero tensor, which cannot be written"):
        module.pad_w2(checkpoint, plan, out=torch._efficientzerotensor(padded))
    with pytest.raises(module.LayoutContractError, match="out= for w2 is torch's zero tensor"):
        module.alloc_w2(plan, 0, out=torch._efficientzerotensor(padded))


def test_an_inference_tensor_is_loaded_only_inside_inference_mode() -> None:
    """alloc_w2(out=) and load_w2(dst) on a tensor made under torch.inference_mode(), called
    outside it: refused by name before anything is written (before: torch's RuntimeError
    'Inplace update to inference tensor outside InferenceMode', after alloc had begun). Inside
    inference mode both work and load what a plain tensor loads."""
    module, plan, checkpoint = _w2_case()
    want = module.alloc_w2(plan, 0)
    module.load_w2(want, checkpoint, plan, 0)
    with torch.inference_mode():
        made = torch.full(tuple(want.shape), 7.0)
    with pytest.raises(module.LayoutContractError, match=r"out= for w2 was made under torch\.inference_mode\(\)"):
        module.alloc_w2(plan, 0, out=made)
    with pytest.raises(module.LayoutContractError, match=r"destination for w2 was made under torch\.inference_mode\(\)"):
        module.load_w2(made, checkpoint, plan, 0)
    assert bool((made == 7).all())
    with torch.inference_mode():
        assert module.alloc_w2(plan, 0, out=made) is made
        module.load_w2(made, checkpoint, plan, 0)
    assert torch.equal(made, want)
