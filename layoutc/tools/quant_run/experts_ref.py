"""The float32 reference a quantized layer's ranks are compared with: transformers' experts
module of the family, filled with dequantized (or decoded padded) weights, else a float32 loop
over the declared format (`reference_output`).

Used by the quantized runner (runner.py, the whole layer and each rank's unpadded slice) and by
the padded reference path (padded.py, each rank's decoded padded tensors); it imports neither.
"""

from __future__ import annotations

from typing import Any

from layoutc.runtime.algebra import Word
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.checkpoints.reader import Checkpoint

#: what the reference's weights were decoded by, when the caller does not say (its name in the report)
DEQUANTIZER = "the independent dequantizer (checkpoints/quant/dequant.py)"


def reference_output(
    ckpt: Checkpoint,
    moe: MoEModelConfig,
    params: dict[str, Any],
    x: Any,
    weights: Any,
    ids: Any,
    use_transformers: bool,
    source: str = DEQUANTIZER,
) -> tuple[Any, str]:
    """(float32 [T, H] routed output, its name): transformers' experts module of the family filled
    with `params` (built at `moe`'s intermediate size, so a rank's padded shapes run through it
    too), or a float32 loop (no experts class, a parameter it has no place for, or
    --no-transformers). params: gate_up_proj [E, 2I, H] ([gate | up]), down_proj [E, H, I],
    optionally gate_up_proj_bias [E, 2I] and down_proj_bias [E, H] (float32); source: what
    `params` were decoded by, for the name."""
    import torch

    from layoutc.tools.checkpoints.reference import _act, transformers_forward

    module = _experts_module(ckpt, moe, params) if use_transformers else None
    if module is not None:
        return (transformers_forward(module, x, weights, ids), f"transformers {type(module).__name__} over {source}")
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32)
    gu_bias, down_bias = params.get("gate_up_proj_bias"), params.get("down_proj_bias")
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        h = x[tok].to(torch.float32) @ params["gate_up_proj"][e].T
        if gu_bias is not None:
            h = h + gu_bias[e]
        gate, up = h.chunk(2, dim=-1)
        y = _act(gate, up, moe) @ params["down_proj"][e].T
        if down_bias is not None:
            y = y + down_bias[e]
        out.index_add_(0, tok, y * weights[tok, slot, None].to(torch.float32))
    return out, f"a float32 loop over {source}"


def _module_layout(moe: MoEModelConfig, name: str, value: Any) -> Any:
    """A [gate | up] / [out, in] parameter in the family's own layout: gate_up's rows interleaved
    (gate, up) pairs where the format says `interleave`, weights [in, out] where it says
    `transposed` (gpt-oss: gate_up_proj [E, H, 2I], down_proj [E, I, H])."""
    import torch

    fmt = moe.format
    if name.startswith("gate_up") and fmt.gate_up_layout == Word.INTERLEAVE.value:
        gate, up = value.chunk(2, dim=1)
        value = torch.stack([gate, up], dim=2).flatten(1, 2)
    if name in ("gate_up_proj", "down_proj") and (fmt.transposed if name == "gate_up_proj" else fmt.down_transposed):
        value = value.transpose(1, 2)
    return value


def _experts_module(ckpt: Checkpoint, moe: MoEModelConfig, params: dict[str, Any]) -> Any:
    """transformers' experts class of the family with `params` copied in (in the family's layout,
    `_module_layout`), built at `moe`'s intermediate size; None without one, or where a
    parameter has no place in it."""
    import importlib

    import torch

    if moe.format.experts_class is None:
        return None
    try:
        import transformers

        modname, cls_name = moe.format.experts_class.split(":")
        cls = getattr(importlib.import_module(f"transformers.models.{modname}"), cls_name)
        config = transformers.AutoConfig.from_pretrained(ckpt.folder)
    except (ImportError, AttributeError, ValueError, KeyError, OSError):
        return None
    if moe.format.text_config:
        config = config.get_text_config()
    for key in moe.format.intermediate_size:  # a rank's (padded) intermediate size, not the model's
        if "." not in key and hasattr(config, key):
            setattr(config, key, moe.intermediate_size)
    if hasattr(config, "hidden_size") and moe.hidden_size != config.hidden_size:
        return None
    config.quantization_config = None
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"
    module = cls(config).to(torch.float32)
    with torch.no_grad():
        for name, value in params.items():
            target = getattr(module, name, None)
            value = _module_layout(moe, name, value)
            if target is None or tuple(target.shape) != tuple(value.shape):
                return None
            target.copy_(value)
    for name, _ in module.named_parameters():
        if name not in params:  # e.g. gpt-oss's biases where the caller gave none
            return None
    return module.eval()
