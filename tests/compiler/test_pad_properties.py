"""Property tests of every generated module and every tensor it declares.

For configurations drawn by hypothesis (and admitted by the contract):
- pad places each logical element where an independent index map (written here from
  the contract's axis layouts, not from the generated code) says, and every other
  position holds the contract's pad code;
- unpad(pad(x)) == x, and pad with `out=` writes the same bytes;
- shard_* over all ranks, unpadded, reassembles the full logical tensor;
- nothing-to-pad returns the input itself.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import itertools
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from layoutc.compiler import ir
from layoutc.compiler.cases import specialise_for
from layoutc.compiler.evaluate import eval_expr
from layoutc.compiler.source import load
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

CONTRACTS = sorted(p.stem for p in (ROOT / "contracts").glob("*.moe"))
BITS = {"int32": 32, "uint8": 8, "int8": 8, "int16": 16}


@functools.cache  # parsed once a session, not once per hypothesis example (the IR is frozen dataclasses)
def contract_ir(name: str) -> ir.Contract:
    contract, diags, _ = load(str(ROOT / "contracts" / f"{name}.moe"))
    assert contract is not None, diags
    return contract


def storage_units(axis: ir.Axis, env: dict[str, object]) -> tuple[int, int]:
    """(logical, padded) per segment in storage elements, from the IR."""
    logical = int(eval_expr(axis.logical, env))  # type: ignore[arg-type]
    padded = int(eval_expr(axis.padded, env))  # type: ignore[arg-type]
    if axis.group_size is not None:
        g = int(eval_expr(axis.group_size, env))  # type: ignore[arg-type]
        if g == -1:
            return 1, 1
        logical, padded = logical // g, padded // g
    return logical // axis.pack, padded // axis.pack


def index_map(axis: ir.Axis, logical: int, padded: int) -> list[int]:
    """Physical index of each logical storage element along one axis (independent of emit)."""
    segments = max(1, len(axis.roles))
    if axis.layout in ("none", "pad"):
        return list(range(logical))
    if axis.layout == "halves":
        return [k * padded + i for k in range(segments) for i in range(logical)]
    # concat and interleave both keep the logical elements as one prefix
    return list(range(segments * logical))


def fill_word(tensor: ir.Tensor) -> float | int:
    pack = max((a.pack for a in tensor.axes), default=1)
    if pack == 1:
        return tensor.fill
    assert isinstance(tensor.storage, ir.FixedStorage)
    storage = tensor.storage.dtype
    width = BITS[storage] // pack
    word = 0
    for j in range(pack):
        word |= (tensor.fill & ((1 << width) - 1)) << (width * j)
    if storage.startswith("int") and word >= 1 << (BITS[storage] - 1):
        word -= 1 << BITS[storage]
    return word


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=gen).to(dtype)


@st.composite
def configs(draw, contract: ir.Contract):  # type: ignore[no-untyped-def]
    config: dict[str, object] = {}
    for p in contract.params:
        if p.name == "hidden_size":
            config[p.name] = draw(st.sampled_from([v for v in (128, 256, 384, 2880) if p.low <= v <= p.high]))
        elif p.name in ("num_experts", "num_redundant_experts"):  # a few experts keep the tensors small
            config[p.name] = draw(st.integers(max(p.low, 1 if p.name == "num_experts" else 0), max(p.low, 3)))
        elif p.kind == "range":
            config[p.name] = draw(st.integers(p.low, min(p.high, p.low + 600)))
        else:
            config[p.name] = draw(st.sampled_from(list(p.values)))
    if "intermediate_size" in config and "tp_size" in config:
        per_rank = draw(st.one_of(st.integers(1, 200), st.sampled_from([128, 176, 192, 256, 360, 704, 768])))
        config["intermediate_size"] = per_rank * int(config["tp_size"])  # type: ignore[call-overload]
        _shrink(contract, config, per_rank)
    return config


#: Largest logical w13 drawn, in elements (2 * intermediate_size * hidden_size * num_experts): 8 Mi, 32 MiB
#: in float32. Unbounded draws reached 10^8 elements (10 GB RSS) with tp 128 x per-rank 704 x hidden 2880,
#: sizes no property needs: every per-rank size and residue above is still drawn, at a smaller tp degree.
MAX_ELEMENTS = 1 << 23


def _shrink(contract: ir.Contract, config: dict[str, object], per_rank: int) -> None:
    """Within MAX_ELEMENTS: fewer experts first, then the largest smaller tp degree the contract allows
    (the per-rank size, and so its alignment class, is kept)."""
    def size() -> int:
        return 2 * int(config["intermediate_size"]) * int(config.get("hidden_size", 1)) * int(config.get("num_experts", 1))  # type: ignore[call-overload]

    experts = next((p for p in contract.params if p.name == "num_experts"), None)
    while size() > MAX_ELEMENTS and experts is not None and int(config["num_experts"]) > max(1, experts.low):  # type: ignore[call-overload]
        config["num_experts"] = int(config["num_experts"]) - 1  # type: ignore[call-overload]
    tp = next(p for p in contract.params if p.name == "tp_size")
    degrees = sorted(tp.values) if tp.kind != "range" else list(range(tp.low, min(tp.high, 128) + 1))
    for t in reversed([d for d in degrees if isinstance(d, int) and d < int(config["tp_size"])]):  # type: ignore[call-overload]
        if size() <= MAX_ELEMENTS:
            break
        config["tp_size"], config["intermediate_size"] = t, per_rank * t


@pytest.mark.parametrize("name", CONTRACTS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_pad_unpad_shard(name: str, data: st.DataObject) -> None:
    module = importlib.import_module(f"layoutc_generated.{name}")
    contract = contract_ir(name)
    config = data.draw(configs(contract))
    # half the examples pad in blocks of one expert (the blocked path of `scatter`, which the
    # small tensors drawn here never reach at the default BLOCK_BYTES)
    runtime_layout = importlib.import_module("layoutc_generated._runtime.layout")
    block_bytes = runtime_layout.BLOCK_BYTES
    runtime_layout.BLOCK_BYTES = data.draw(st.sampled_from([block_bytes, 1]), label="BLOCK_BYTES")
    try:
        _check_pad_unpad_shard(module, contract, config, data)
    finally:
        runtime_layout.BLOCK_BYTES = block_bytes


def _check_pad_unpad_shard(module: Any, contract: ir.Contract, config: dict[str, object],
                           data: st.DataObject) -> None:
    try:
        plan = module.plan(**config)
    except module.LayoutContractError:
        assume(False)
        return
    env = dataclasses.asdict(plan)
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    for tensor in specialise_for(contract, env).tensors:  # the layout this configuration selects
        logical_shape, padded_shape = getattr(module, f"{tensor.name}_shapes")(plan)
        units = [storage_units(a, env) for a in tensor.axes]
        assert logical_shape == tuple(max(1, len(a.roles)) * lo for a, (lo, _) in zip(tensor.axes, units, strict=False))
        assert padded_shape == tuple(max(1, len(a.roles)) * pa for a, (_, pa) in zip(tensor.axes, units, strict=False))
        name = tensor.storage.dtype if isinstance(tensor.storage, ir.FixedStorage) else env[tensor.storage.param]
        dtype = getattr(torch, str(name))
        x = random_tensor(logical_shape, dtype, gen)
        pad = getattr(module, f"pad_{tensor.name}")
        unpad = getattr(module, f"unpad_{tensor.name}")
        padded = pad(x, plan)
        if logical_shape == padded_shape:
            assert padded is x  # documented: nothing to pad returns the input itself
        # placement against the independent index map, pad positions hold the pad code
        expected = torch.full(padded_shape, fill_word(tensor), dtype=torch.float64 if dtype.is_floating_point
                              else torch.int64)
        maps = [torch.tensor(index_map(a, lo, pa), dtype=torch.long) for a, (lo, pa) in zip(tensor.axes, units, strict=False)]
        expected[torch.meshgrid(*maps, indexing="ij")] = x.to(expected.dtype)
        assert torch.equal(padded.to(expected.dtype), expected), tensor.name
        assert torch.equal(unpad(padded, plan), x)
        out = torch.full(padded_shape, 7, dtype=dtype)
        assert pad(x, plan, out=out) is out and torch.equal(out.to(expected.dtype), expected)
        # shards reassemble the full logical checkpoint tensor
        shard = getattr(module, f"shard_{tensor.name}", None)
        if shard is None:
            continue
        tp = plan.tp_size
        sharded = [i for i, a in enumerate(tensor.axes)
                   if (tensor.projection, a.name) in (("w13", "n"), ("w2", "k"))
                   and not (a.group_size is not None and eval_expr(a.group_size, env) == -1)]
        full_shape = tuple(s * (tp if i in sharded else 1) for i, s in enumerate(logical_shape))
        block = contract.block_shard is not None
        if block:  # a block shard: the declared full length, ranks may be short (docs/language.md)
            full_shape = getattr(module, f"{tensor.name}_full_shape")(plan)
        full = random_tensor(full_shape, dtype, gen)
        pieces = [unpad(shard(full, rank, plan), plan) for rank in range(tp)]
        if tensor.kind == "bias" and tensor.projection == "w2":
            # a row-parallel output bias is added after the all-reduce: rank 0 holds it, the others 0
            assert pieces[0].equal(full) and all(not p.any() for p in pieces[1:]), tensor.name
            continue
        assert reassemble(pieces, tensor, sharded, full_shape).equal(full), tensor.name


def reassemble(pieces: list[torch.Tensor], tensor: ir.Tensor, sharded: list[int],
               full_shape: tuple[int, ...]) -> torch.Tensor:
    """Inverse of sharding along the intermediate axis: per segment for halves/concat,
    whole pairs for interleave. Rank r's slice of each segment is [min(r * L, F), min((r + 1)
    * L, F)) of the full segment length F (the `shard` declaration's rule), so only its first
    min(L, F - min(r * L, F)) entries per segment are live."""
    if not sharded:
        assert all(torch.equal(p, pieces[0]) for p in pieces)
        return pieces[0]
    (dim,) = sharded
    axis = tensor.axes[dim]
    segments = max(1, len(axis.roles))
    F = full_shape[dim] // segments
    L = pieces[0].shape[dim] // segments
    lives = [min(L, F - min(r * L, F)) for r in range(len(pieces))]
    if axis.layout == "interleave" or segments == 1:
        return torch.cat([p.narrow(dim, 0, segments * n) for p, n in zip(pieces, lives, strict=True)], dim=dim)
    parts = [piece.chunk(segments, dim=dim) for piece in pieces]
    return torch.cat([torch.cat([p[k].narrow(dim, 0, n) for p, n in zip(parts, lives, strict=True)], dim=dim)
                      for k in range(segments)], dim=dim)


@pytest.mark.parametrize("name", CONTRACTS)
def test_wrong_inputs_name_the_tensor(name: str) -> None:
    """Every pad/unpad/shard refuses a wrong shape, dtype, device kind or rank with the tensor's name."""
    module = importlib.import_module(f"layoutc_generated.{name}")
    contract = contract_ir(name)
    plan = None
    for combo in itertools.product(*[([128, 256] if p.name == "hidden_size" else [176 * 4, 256 * 4] if p.name ==
                                      "intermediate_size" else [4] if p.name == "tp_size" else [2] if p.name ==
                                      "num_experts" else list(p.values) if p.finite else [p.low])
                                     for p in contract.params]):
        try:
            plan = module.plan(**dict(zip([p.name for p in contract.params], combo, strict=False)))
            break
        except module.LayoutContractError:
            continue
    assert plan is not None, f"no admitted configuration found for {name}"
    for tensor in contract.tensors:
        logical_shape, padded_shape = getattr(module, f"{tensor.name}_shapes")(plan)
        pad = getattr(module, f"pad_{tensor.name}")
        with pytest.raises(module.LayoutContractError, match=f"{tensor.name} has layout torch.sparse_coo"):
            pad(torch.zeros(logical_shape).to_sparse(), plan)  # a sparse tensor gets a named error
        with pytest.raises(module.LayoutContractError, match=tensor.name):
            pad(torch.zeros(tuple(s + 1 for s in logical_shape)), plan)
        with pytest.raises(module.LayoutContractError, match=tensor.name):
            pad(torch.zeros(logical_shape, dtype=torch.complex64), plan)
        with pytest.raises(module.LayoutContractError, match=tensor.name):
            pad("not a tensor", plan)
        with pytest.raises(module.LayoutContractError, match=tensor.name):
            getattr(module, f"unpad_{tensor.name}")(torch.zeros(tuple(s + 1 for s in padded_shape)), plan)
        shard = getattr(module, f"shard_{tensor.name}", None)
        if shard is not None:
            with pytest.raises(module.LayoutContractError, match="rank"):
                shard(torch.zeros(1), plan.tp_size, plan)
        with pytest.raises(module.LayoutContractError, match="Plan"):
            pad(torch.zeros(logical_shape), object())
