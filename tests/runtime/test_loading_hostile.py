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


def _nested(t: torch.Tensor) -> torch.Tensor:
    """A strided nested tensor of `t`'s experts: it reports layout torch.strided and has no `.shape`."""
    return torch.nested.nested_tensor(list(t.contiguous()))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_a_nested_tensor_is_refused_by_name() -> None:
    """A strided nested tensor reports layout torch.strided, and its `.shape` raises torch's
    RuntimeError ("NestedTensorImpl doesn't support sizes"), which every tensor function hit
    before: as pad's input, as out=, as load's source and as a slice object's read."""
    module, plan, checkpoint = _w2_case()
    logical, padded = (tuple(s) for s in module.w2_shapes(plan))
    with pytest.raises(module.LayoutContractError, match="w2 is a nested tensor"):
        module.pad_w2(_nested(torch.randn(logical)), plan)
    with pytest.raises(module.LayoutContractError, match="out= for w2 is a nested tensor"):
        module.pad_w2(torch.randn(logical), plan, out=_nested(torch.empty(padded)))
    dst = module.alloc_w2(plan, 0)
    with pytest.raises(module.LayoutContractError, match="the source for w2 is a nested tensor"):
        module.load_w2(dst, _nested(checkpoint), plan, 0)
    with pytest.raises(module.LayoutContractError, match=r"reading the slice \[0:2, 0:256, 0:200\] gave a nested"):
        module.load_w2(dst, _Reads(checkpoint, lambda part: _nested(part)), plan, 0)


def test_a_tensor_whose_storage_was_freed_is_refused_by_name() -> None:
    """A parameter whose storage was resized to 0 after it was made (FSDP frees one so) or to a
    quarter: every read or write would run past its memory; torch raised a RuntimeError
    ("out of bounds for storage") from inside the copy. Refused by name before anything runs."""
    module, plan, checkpoint = _w2_case()
    logical = tuple(module.w2_shapes(plan)[0])
    for keep in (0, 4096):
        dst = module.alloc_w2(plan, 0)
        dst.untyped_storage().resize_(keep)
        with pytest.raises(module.LayoutContractError, match=f"destination for w2 reaches byte .* of a storage of "
                                                             f"{keep} bytes"):
            module.load_w2(dst, checkpoint, plan, 0)
        with pytest.raises(module.LayoutContractError, match="out= for w2 reaches byte"):
            module.alloc_w2(plan, 0, out=dst)
        with pytest.raises(module.LayoutContractError, match="out= for w2 reaches byte"):
            module.pad_w2(torch.randn(logical), plan, out=dst)
        with pytest.raises(module.LayoutContractError, match=r"vllm_cpu_grouped_gemm: w2 reaches byte"):
            module.pad_w2(_freed(torch.randn(logical), keep), plan)
        with pytest.raises(module.LayoutContractError, match="the source for w2 reaches byte"):
            module.load_w2(module.alloc_w2(plan, 0), _freed(checkpoint, keep), plan, 0)


def _freed(t: torch.Tensor, keep: int) -> torch.Tensor:
    made = t.clone()
    made.untyped_storage().resize_(keep)
    return made


def test_out_is_a_buffer_written_without_a_graph() -> None:
    """pad_w2 / shard_w2 with out= and a source that requires grad (a module's weight): out= is
    written under no_grad, as load_* writes its destination. Before, the copy ran with grad
    on: out= became part of a graph (grad_fn CopySlices), and an out= that is one of several
    views (`chunk`) or a view made under inference mode raised torch's RuntimeError."""
    module, plan, checkpoint = _w2_case()
    logical, padded = (tuple(s) for s in module.w2_shapes(plan))
    weight = torch.nn.Parameter(torch.randn(logical, generator=torch.Generator().manual_seed(2)))
    want = module.pad_w2(weight.detach().clone(), plan)
    base = torch.zeros(padded)
    with torch.inference_mode():
        inference_view = base.view(padded)
    for out in (torch.empty(padded), torch.empty(2 * padded[0], *padded[1:]).chunk(2)[0], inference_view):
        assert module.pad_w2(weight, plan, out=out) is out
        assert out.grad_fn is None and not out.requires_grad
        assert torch.equal(out, want)
    full = torch.nn.Parameter(checkpoint.clone())
    shard = torch.empty(2 * padded[0], *padded[1:]).chunk(2)[1]
    assert module.shard_w2(full, 0, plan, out=shard) is shard
    assert shard.grad_fn is None and torch.equal(shard, module.shard_w2(checkpoint, 0, plan))


def test_fake_tensors_are_refused_by_name() -> None:
    """torch's FakeTensor (a shape with no data): outside its mode torch raised an
    AssertionError from the pad; inside it every pair of storages sits at address 0, so an
    out= was refused as overlapping its input, which it does not. Both are now named."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    module, plan, _ = _w2_case()
    logical, padded = (tuple(s) for s in module.w2_shapes(plan))
    mode = FakeTensorMode()
    with mode:
        fake_in, fake_out = torch.empty(logical), torch.empty(padded)
    with pytest.raises(module.LayoutContractError, match="w2 is a fake tensor"):
        module.pad_w2(fake_in, plan)
    with pytest.raises(module.LayoutContractError, match="destination for w2 is a fake tensor"):
        module.load_w2(fake_out, torch.randn(tuple(module.w2_full_shape(plan))), plan, 0)
    with mode, pytest.raises(module.LayoutContractError, match="w2 is a fake tensor"):
        module.pad_w2(fake_in, plan, out=fake_out)


def test_vmap_is_refused_by_name() -> None:
    """torch.func.vmap over pad_w2 / shard_w2: the result is a new tensor written in place,
    which vmap cannot batch (torch's RuntimeError from a batching rule before)."""
    module, plan, checkpoint = _w2_case()
    logical = tuple(module.w2_shapes(plan)[0])
    with pytest.raises(module.LayoutContractError, match=r"w2 is batched by torch\.func\.vmap"):
        torch.func.vmap(lambda t: module.pad_w2(t, plan))(torch.randn(3, *logical))
    with pytest.raises(module.LayoutContractError, match=r"full w2 is batched by torch\.func\.vmap"):
        torch.func.vmap(lambda t: module.shard_w2(t, 0, plan))(torch.stack([checkpoint] * 2))


def test_an_allocation_the_machine_refuses_is_a_memory_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.empty's CPU allocator refusal ("can't allocate memory", a RuntimeError) becomes a
    MemoryError naming the tensor and the bytes (the real case: plan() admits a w2 of 8 TiB)."""
    module, plan, checkpoint = _w2_case()
    real = torch.empty

    def refuse(*args: Any, **kwargs: Any) -> torch.Tensor:
        if isinstance(args[0], tuple) and len(args[0]) == 3:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory")
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "empty", refuse)
    padded = tuple(module.w2_shapes(plan)[1])
    nbytes = padded[0] * padded[1] * padded[2] * 4
    with pytest.raises(MemoryError, match=rf"w2 of shape \(2, 256, 224\) \(torch.float32\) needs {nbytes} bytes"):
        module.alloc_w2(plan, 0)
    with pytest.raises(MemoryError, match="padded w2 of shape"):
        module.pad_w2(checkpoint, plan)
    with pytest.raises(MemoryError, match="unpadded w2 of shape"):
        module.unpad_w2(real(padded), plan)
