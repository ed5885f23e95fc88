"""What padding costs one rank: the pad fraction, the extra GEMM arithmetic and the zero bytes.

Under a block shard (``shard ... in blocks of B``) the last ranks hold fewer live rows
than I_pp, so the live width in these costs is the mean over the ranks, I / tp_size
(docs/audit.md, "costs").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import assert_never

from layoutc.compiler import ir
from layoutc.compiler.evaluate import EvalError, Value, eval_expr
from layoutc.runtime.vocab import DTYPES

#: Bytes per stored element, by storage dtype name (``tensor ... storage``; vocab.DTYPES).
DTYPE_BYTES: dict[str, int] = {name: dtype.bytes for name, dtype in DTYPES.items()}


@dataclass(frozen=True)
class PadCosts:
    """The padding's cost at one admitted configuration (None where the contract does not say).

    pad_fraction: (P - I_pp) / P, the share of the kernel's intermediate dim that is zeros.
    extra_flops_pct: (P - I_pp) / I_pp * 100, the extra MoE GEMM arithmetic (percent).
    extra_bytes: zero padding added to every declared tensor of one rank, all MoE layers (bytes).
    """

    pad_fraction: float | None
    extra_flops_pct: float | None
    extra_bytes: int | None


def pad_costs(contract: ir.Contract, env: Mapping[str, Value], i_pp: int | None, padded: int | None,
              num_moe_layers: int) -> PadCosts:
    """The costs of one admitted configuration ``env`` (parameters and lets evaluated).

    i_pp / padded: ``intermediate_size_per_partition`` and its padded width (elements), None
    when the contract has no such let; the live width is the block shard's mean where the
    contract shards in blocks (the w2 ``k`` axis). Raises nothing: a tensor size that cannot
    be evaluated gives ``extra_bytes`` None.
    """
    pad_fraction: float | None = None
    extra_flops_pct: float | None = None
    if i_pp is not None and padded is not None:
        live = mean_live(contract, contract.weight("w2"), contract.weight("w2").axis("k"), env)
        mean = float(live) if live is not None else i_pp
        pad_fraction = (padded - mean) / padded if padded > 0 else None
        extra_flops_pct = (padded - mean) / mean * 100 if mean > 0 else None
    try:
        per_layer = padding_bytes(contract, env)
    except EvalError:
        per_layer = None
    return PadCosts(pad_fraction, extra_flops_pct, None if per_layer is None else per_layer * num_moe_layers)


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ``b``, in integers."""
    return -(-a // b)


def storage_bytes(tensor: ir.Tensor, env: Mapping[str, Value]) -> int | None:
    """Bytes of one storage element of `tensor` under `env` (a dtype parameter read from it);
    None for a dtype of no whole bytes or a parameter `env` does not bind."""
    match tensor.storage:
        case ir.FixedStorage(dtype=storage):
            pass
        case ir.ParamStorage(param=param):
            storage = str(env.get(param, ""))
        case _:
            assert_never(tensor.storage)
    return DTYPE_BYTES.get(storage)


def padding_bytes(contract: ir.Contract, env: Mapping[str, Value]) -> int | None:
    """Bytes of padding over every declared tensor for one layer of one rank.

    Per axis, sizes are in storage elements: a segmented axis counts all its
    segments, a groups axis counts groups (one when the group size is -1), and a
    packed axis counts packed storage elements (rounded up).
    """
    total = Fraction(0)
    for tensor in contract.tensors:
        width = storage_bytes(tensor, env)
        if width is None:
            return None
        logical: Fraction = Fraction(1)
        padded = 1
        for axis in tensor.axes:
            lo: Fraction = Fraction(int(eval_expr(axis.logical, env)))
            pa = int(eval_expr(axis.padded, env))
            mean = mean_live(contract, tensor, axis, env)
            if mean is not None:
                lo = mean
            if axis.group_size is not None:
                group = int(eval_expr(axis.group_size, env))
                if group == -1:
                    lo, pa = Fraction(1), 1
                else:
                    lo = Fraction(cdiv(int(lo), group)) if mean is None else lo / group
                    pa = cdiv(pa, group)
            lo *= axis.segments
            pa *= axis.segments
            if axis.pack > 1:
                lo = Fraction(cdiv(int(lo), axis.pack)) if mean is None else lo / axis.pack
                pa = cdiv(pa, axis.pack)
            logical *= lo
            padded *= pa
        total += (padded - logical) * width
    return round(total)


def mean_live(contract: ir.Contract, tensor: ir.Tensor, axis: ir.Axis, env: Mapping[str, Value]) -> Fraction | None:
    """The mean live width of a block-sharded intermediate axis over the ranks, FULL / tp_size
    (values; every full entry is on exactly one rank, the coverage property), or None."""
    shard = contract.block_shard
    if shard is None or not ir.is_intermediate(tensor, axis):
        return None
    tp = env.get(shard.count)
    full = eval_expr(shard.full, env)
    if not isinstance(tp, int) or not isinstance(full, int) or tp <= 0:
        return None
    return Fraction(full, tp)

