"""``quantization_config``: GPTQ/AWQ groups and bits, FP8 weight blocks, compressed-tensors groups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from layoutc.tools.hfconfig.keys import Scopes, check_int
from layoutc.tools.hfconfig.model import ModelConfigError


@dataclass(frozen=True)
class Quantization:
    """What ``quantization_config`` says about the weights (all None/False when unquantized)."""

    quant_method: str | None = None
    group_size: int | None = None
    bits: int | None = None
    act_order: bool = False
    block_size: tuple[int, ...] | None = None


def read_quantization(scopes: Scopes) -> Quantization:
    """Read ``quantization_config``: GPTQ/AWQ groups, FP8 blocks, compressed-tensors."""
    source = scopes.source
    found = scopes.find(("quantization_config",), "quant_method")
    if found is None:
        return Quantization()
    quant = found[1]
    if not isinstance(quant, Mapping):
        raise ModelConfigError(
            f"{source}: quantization_config = {quant!r} is not an object",
            source=source,
            field="quantization_config",
            aliases=("quantization_config",),
        )
    method = quant.get("quant_method")
    method = str(method) if method is not None else None

    if method == "compressed-tensors":
        return _read_compressed_tensors(quant, source)

    group_size = _optional_int(quant, "group_size", minimum=-1, source=source)
    bits = _optional_int(quant, "bits", minimum=1, source=source)
    desc_act = quant.get("desc_act")
    if desc_act is not None and not isinstance(desc_act, bool):
        raise ModelConfigError(
            f"{source}: quantization_config.desc_act = {desc_act!r} is not true/false",
            source=source,
            field="act_order",
            aliases=("desc_act",),
        )
    block = quant.get("weight_block_size")
    return Quantization(
        quant_method=method,
        group_size=group_size,
        bits=bits,
        act_order=bool(desc_act),
        block_size=_block_size(block, source, "weight_block_size")
        if block is not None
        else None,
    )


def _read_compressed_tensors(quant: Mapping[str, Any], source: str) -> Quantization:
    """compressed-tensors keeps its settings per config group; all must agree."""
    groups = quant.get("config_groups")
    seen: set[tuple[Any, ...]] = set()
    if isinstance(groups, Mapping):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if not isinstance(weights, Mapping):
                continue
            group_size = weights.get("group_size")
            if group_size is None and weights.get("strategy") == "channel":
                group_size = -1
            actorder = weights.get("actorder")
            block = weights.get("block_structure")
            seen.add(
                (
                    group_size,
                    weights.get("num_bits"),
                    actorder not in (None, False),
                    tuple(block) if isinstance(block, list) else block,
                )
            )
    if len(seen) > 1:
        raise ModelConfigError(
            f"{source}: compressed-tensors config_groups disagree on "
            "(group_size, num_bits, actorder, block_structure): "
            f"{sorted(map(repr, seen))}",
            source=source,
            field="group_size",
            aliases=("config_groups",),
        )
    if not seen:
        return Quantization(quant_method="compressed-tensors")
    group_size, bits, act_order, block = seen.pop()
    return Quantization(
        quant_method="compressed-tensors",
        group_size=check_int(
            group_size,
            minimum=-1,
            source=source,
            field="group_size",
            alias="group_size",
        )
        if group_size is not None
        else None,
        bits=check_int(bits, minimum=1, source=source, field="bits", alias="num_bits")
        if bits is not None
        else None,
        act_order=act_order,
        block_size=_block_size(list(block), source, "block_structure")
        if block is not None
        else None,
    )


def _optional_int(
    quant: Mapping[str, Any], key: str, *, minimum: int, source: str
) -> int | None:
    value = quant.get(key)
    if value is None:
        return None
    return check_int(
        value,
        minimum=minimum,
        source=source,
        field=key,
        alias=f"quantization_config.{key}",
    )


def _block_size(value: Any, source: str, key: str) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
        )
    ):
        raise ModelConfigError(
            f"{source}: {key} = {value!r} is not a list of positive integers",
            source=source,
            field="block_size",
            aliases=(key,),
        )
    return tuple(value)
