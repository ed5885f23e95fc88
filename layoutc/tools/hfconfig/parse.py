"""Reduce a parsed ``config.json`` to a :class:`MoEModelConfig`: sizes, activation, dtype, SwiGLU.

The MoE layers are ``layers.moe_layers``; the quantization settings are
``quantization.read_quantization``. Every field's origin is recorded in ``sources``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from layoutc.tools.checkpoints.errors import ModelConfigError
from layoutc.tools.checkpoints.formats import FORMATS, GENERIC
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.hfconfig.keys import (
    ACTIVATIONS,
    DTYPE_ALIASES,
    FIXED_ACTIVATIONS,
    GPT_OSS_SWIGLU_ALPHA,
    HIDDEN_ACT_ALIASES,
    HIDDEN_SIZE_ALIASES,
    INTERMEDIATE_SIZE_ALIASES,
    NON_GATED,
    NUM_EXPERTS_ALIASES,
    NUM_EXPERTS_PER_TOK_ALIASES,
    NUM_HIDDEN_LAYERS_ALIASES,
    Scopes,
    is_gpt_oss,
    model_type,
)
from layoutc.tools.hfconfig.layers import merged_scopes, moe_layers
from layoutc.tools.hfconfig.quantization import read_quantization

MAX_LAYERS = 100_000  # decoder depth; layers are counted one by one


def parse_model_config(
    raw: Mapping[str, Any],
    *,
    source: str = "<dict>",
    default_name: str | None = None,
) -> MoEModelConfig:
    """Reduce an already-parsed ``config.json`` dict to a :class:`MoEModelConfig`.

    Args:
        raw: the config as ``json.load`` returns it.
        source: what to call it in error messages (a path, usually).
        default_name: the name to use when the config has no ``_name_or_path``.

    Raises:
        ModelConfigError: as for :func:`load_model_config`, minus file errors.
    """
    scopes = Scopes(raw, source)
    sizes = _read_sizes(scopes)
    hidden_act, activation = _read_activation(scopes)
    layers = moe_layers(scopes, sizes.num_hidden_layers)
    quant = read_quantization(raw, expert_modules=sizes.num_hidden_layers * sizes.num_experts, source=source)
    if quant.where is not None:
        scopes.used["quant_method"] = quant.where
    dtype_found = scopes.find(DTYPE_ALIASES, "dtype")
    for label, scope in scopes.entries:  # transformers builds with it: a list is an IndexError there
        for alias in DTYPE_ALIASES:
            if (value := scope.get(alias)) is not None and not isinstance(value, str):
                where = alias if label == "top level" else f"{label}.{alias}"
                raise ModelConfigError(f"{source}: {where} = {value!r} is not a dtype name (a string such as "
                                       '"bfloat16")', source=source, field="dtype", aliases=DTYPE_ALIASES)
    swiglu_limit, swiglu_alpha = _read_swiglu(scopes, activation)
    settings = merged_scopes(scopes)
    # where the config does not say: the family's default (Qwen2-MoE: false), else the generic one
    default_norm = FORMATS.get(str(raw.get("model_type")), GENERIC).renormalize
    name = raw.get("_name_or_path")
    if not isinstance(name, str) or not name:
        name = default_name or source
    return MoEModelConfig(
        name=name,
        hidden_size=sizes.hidden_size,
        intermediate_size=sizes.intermediate_size,
        num_experts=sizes.num_experts,
        num_experts_per_tok=sizes.num_experts_per_tok,
        num_hidden_layers=sizes.num_hidden_layers,
        moe_layers=layers,
        hidden_act=hidden_act,
        activation=activation,
        dtype=str(dtype_found[1]) if dtype_found else None,
        is_gated=activation not in NON_GATED,
        format=GENERIC,
        norm_topk_prob=norm if isinstance(norm := settings.get("norm_topk_prob"), bool) else default_norm,
        text_config=settings,
        group_size=quant.group_size,
        act_order=quant.act_order,
        block_size=quant.block_size,
        quant_method=quant.quant_method,
        bits=quant.bits,
        swiglu_limit=swiglu_limit,
        swiglu_alpha=swiglu_alpha,
        quant_scheme=quant.scheme,
        quant_error=quant.error,
        sources=tuple(scopes.used.items()),
    )


@dataclass(frozen=True)
class _Sizes:
    """H, I, E, top-k and the decoder depth, as the config states them (elements, experts, layers)."""

    hidden_size: int
    intermediate_size: int
    num_experts: int
    num_experts_per_tok: int
    num_hidden_layers: int


def _read_sizes(scopes: Scopes) -> _Sizes:
    """The required sizes, each >= 1; at most MAX_LAYERS layers and top-k <= E."""
    source = scopes.source
    sizes = _Sizes(
        hidden_size=scopes.require_int("hidden_size", HIDDEN_SIZE_ALIASES),
        intermediate_size=scopes.require_int("intermediate_size", INTERMEDIATE_SIZE_ALIASES),
        num_experts=scopes.require_int("num_experts", NUM_EXPERTS_ALIASES),
        num_experts_per_tok=scopes.require_int("num_experts_per_tok", NUM_EXPERTS_PER_TOK_ALIASES),
        num_hidden_layers=scopes.require_int("num_hidden_layers", NUM_HIDDEN_LAYERS_ALIASES),
    )
    if sizes.num_hidden_layers > MAX_LAYERS:
        raise ModelConfigError(
            f"{source}: {sizes.num_hidden_layers} hidden layers is not a real model "
            f"(at most {MAX_LAYERS})",
            source=source,
            field="num_hidden_layers",
            aliases=NUM_HIDDEN_LAYERS_ALIASES,
        )
    if sizes.num_experts_per_tok > sizes.num_experts:
        raise ModelConfigError(
            f"{source}: {sizes.num_experts_per_tok} experts per token "
            f"but only {sizes.num_experts} experts",
            source=source,
            field="num_experts_per_tok",
        )
    return sizes


def _read_swiglu(scopes: Scopes, activation: str) -> tuple[float | None, float | None]:
    """(swiglu_limit, swiglu_alpha) where stated; gpt-oss's alpha is transformers' constant."""
    swiglu_limit = _optional_number(scopes, "swiglu_limit", ("swiglu_limit",))
    swiglu_alpha = _optional_number(scopes, "swiglu_alpha", ("swiglu_alpha",))
    if swiglu_alpha is None and activation == "swigluoai" and is_gpt_oss(scopes):
        swiglu_alpha = GPT_OSS_SWIGLU_ALPHA
        scopes.used["swiglu_alpha"] = ("gpt-oss default 1.702 (transformers GptOssExperts.alpha, used when the config "
                                       "states no swiglu_alpha)")
    return swiglu_limit, swiglu_alpha


def _optional_number(scopes: Scopes, field: str, aliases: tuple[str, ...]) -> float | None:
    """A finite int or float field, or None when absent."""
    found = scopes.find(aliases, field)
    if found is None:
        return None
    alias, value = found
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or value in (float("inf"), float("-inf")):
        raise ModelConfigError(
            f"{scopes.source}: {alias} = {value!r} is not a finite number (reading {field})",
            source=scopes.source, field=field, aliases=aliases,
        )
    return float(value)



def _read_activation(scopes: Scopes) -> tuple[str, str]:
    """(hidden_act as written, contract activation)."""
    found = scopes.find(HIDDEN_ACT_ALIASES, "hidden_act")
    hidden_act: str | None = None
    if found is not None:
        alias, value = found
        # DBRX writes {"name": "silu"}.
        if isinstance(value, Mapping):
            value = value.get("name")
        if not isinstance(value, str):
            raise ModelConfigError(
                f"{scopes.source}: {alias} = {found[1]!r} is not an activation name",
                source=scopes.source,
                field="hidden_act",
                aliases=HIDDEN_ACT_ALIASES,
            )
        hidden_act = value

    # gpt-oss configs say "silu", but its experts run the clamped, interleaved
    # swiglu that vLLM calls "swigluoai" (alpha 1.702, swiglu_limit).
    if is_gpt_oss(scopes):
        scopes.used["activation"] = "model_type gpt_oss (its experts run swigluoai whatever hidden_act says)"
        return hidden_act or "swigluoai", "swigluoai"

    fixed = FIXED_ACTIVATIONS.get(model_type(scopes) or "")
    if hidden_act is None and fixed is not None:
        scopes.used["activation"] = f"model_type {model_type(scopes)}: {fixed[1]}"
        return fixed[0], fixed[0]

    if hidden_act is None:
        raise ModelConfigError(
            f"{scopes.source}: missing hidden_act: "
            f"tried {', '.join(HIDDEN_ACT_ALIASES)} "
            f"(looked in: {scopes.where()})",
            source=scopes.source,
            field="hidden_act",
            aliases=HIDDEN_ACT_ALIASES,
        )
    activation = ACTIVATIONS.get(hidden_act.lower())
    if activation is None:
        raise ModelConfigError(
            f"{scopes.source}: unsupported activation {hidden_act!r}; "
            f"known: {', '.join(sorted(ACTIVATIONS))}",
            source=scopes.source,
            field="hidden_act",
            aliases=HIDDEN_ACT_ALIASES,
        )
    return hidden_act, activation
