"""References for one MoE layer read from a checkpoint: transformers' own experts
module when transformers is installed, else an independent float32 per-expert loop.

Both read the full (unsharded, unpadded) experts of the layer and run in float32.
`route` computes the routing once from the checkpoint's router weight; the same
ids and weights go to the reference and to the kernel, so what is compared is
the experts computation (padding, sharding, orientation, gate/up order).
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from layoutc.tools.checkpoints.formats import ModelMoE
from layoutc.tools.checkpoints.reader import Checkpoint


def route(ckpt: Checkpoint, moe: ModelMoE, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(topk_weights float32 [T, top_k], topk_ids int32 [T, top_k]) from the router of `layer`."""
    wname, bname = moe.format.router_names(layer)
    w = ckpt.tensor(wname).to(torch.float32)
    logits = x.to(torch.float32) @ w.T
    if bname is not None:
        logits = logits + ckpt.tensor(bname).to(torch.float32)
    k = moe.top_k
    if moe.format.routing == "topk_softmax":
        vals, ids = torch.topk(logits, k, dim=-1)
        weights = torch.softmax(vals, dim=-1)
    elif moe.format.routing == "sigmoid_topk":
        vals, ids = torch.topk(logits, k, dim=-1)
        weights = torch.sigmoid(vals)
    else:
        probs = torch.softmax(logits, dim=-1)
        weights, ids = torch.topk(probs, k, dim=-1)
        if moe.norm_topk_prob:
            weights = weights / weights.sum(-1, keepdim=True)
    return weights.contiguous(), ids.to(torch.int32).contiguous()


def _full_w13_w2(ckpt: Checkpoint, moe: ModelMoE, layer: int) -> dict[str, torch.Tensor]:
    """transformers' in-memory layout: gate_up_proj [E, 2I, H] ([gate | up]) and down_proj [E, H, I],
    or for transposed formats [E, H, 2I] / [E, I, H]; float32."""
    fmt = moe.format
    if fmt.fused:
        n = fmt.names(layer)
        out = {"gate_up_proj": ckpt.tensor(n["gate_up"]).to(torch.float32),
               "down_proj": ckpt.tensor(n["down"]).to(torch.float32)}
        if fmt.gate_up_bias is not None:
            out["gate_up_proj_bias"] = ckpt.tensor(n["gate_up_bias"]).to(torch.float32)
            out["down_proj_bias"] = ckpt.tensor(n["down_bias"]).to(torch.float32)
        return out
    gates, ups, downs = [], [], []
    for e in range(moe.num_experts):
        n = fmt.names(layer, e)
        gates.append(ckpt.tensor(n["gate"]).to(torch.float32))
        ups.append(ckpt.tensor(n["up"]).to(torch.float32))
        downs.append(ckpt.tensor(n["down"]).to(torch.float32))
    return {"gate_up_proj": torch.cat([torch.stack(gates), torch.stack(ups)], dim=1),
            "down_proj": torch.stack(downs)}


def transformers_experts(ckpt: Checkpoint, moe: ModelMoE, layer: int) -> torch.nn.Module | None:
    """transformers' experts module of this family with the layer's weights (float32), or None
    when transformers is absent or the format names no experts class."""
    if moe.format.experts_class is None:
        return None
    try:
        import transformers
    except ImportError:
        return None
    modname, cls_name = moe.format.experts_class.split(":")
    cls = getattr(importlib.import_module(f"transformers.models.{modname}"), cls_name)
    try:
        config = transformers.AutoConfig.from_pretrained(ckpt.folder)
    except (ValueError, KeyError, OSError):  # a model_type transformers does not know
        return None
    if moe.format.text_config:
        config = config.get_text_config()
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"
    module = cls(config).to(torch.float32)
    params = _full_w13_w2(ckpt, moe, layer)
    with torch.no_grad():
        for name, value in params.items():
            target = getattr(module, name)
            if tuple(target.shape) != tuple(value.shape):
                raise ValueError(f"{cls_name}.{name} has shape {tuple(target.shape)}, checkpoint "
                                 f"{tuple(value.shape)}")
            target.copy_(value)
    out: torch.nn.Module = module.eval()
    return out


def transformers_forward(module: torch.nn.Module, x: torch.Tensor, weights: torch.Tensor,
                         ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return module(x.to(torch.float32), ids.to(torch.int64), weights.to(torch.float32))  # type: ignore[no-any-return]


def _act(gate: torch.Tensor, up: torch.Tensor, moe: ModelMoE) -> torch.Tensor:
    if moe.activation == "silu":
        return F.silu(gate) * up
    if moe.activation == "gelu":
        return F.gelu(gate) * up
    if moe.activation == "gelu_tanh":
        return F.gelu(gate, approximate="tanh") * up
    alpha, limit = moe.swiglu_alpha or 1.702, moe.swiglu_limit or 7.0
    g = gate.clamp(max=limit)
    return (up.clamp(-limit, limit) + 1) * g * torch.sigmoid(alpha * g)


def loop_reference(ckpt: Checkpoint, moe: ModelMoE, layer: int, x: torch.Tensor, weights: torch.Tensor,
                   ids: torch.Tensor) -> torch.Tensor:
    """An independent float32 per-expert loop (no transformers, no layoutc runtime). Returns [T, H]."""
    p = _full_w13_w2(ckpt, moe, layer)
    fmt = moe.format
    xf = x.to(torch.float32)
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32)
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        w13 = p["gate_up_proj"][e]
        h = xf[tok] @ w13 if fmt.transposed else xf[tok] @ w13.T
        if "gate_up_proj_bias" in p:
            h = h + p["gate_up_proj_bias"][e]
        if fmt.gate_up_layout == "interleave":
            gate, up = h[:, 0::2], h[:, 1::2]
        else:
            gate, up = h.chunk(2, dim=-1)
        a = _act(gate, up, moe)
        w2 = p["down_proj"][e]
        y = a @ w2 if fmt.down_transposed else a @ w2.T
        if "down_proj_bias" in p:
            y = y + p["down_proj_bias"][e]
        out.index_add_(0, tok, y * weights[tok, slot, None])
    return out


def transformers_oracle(folder: str, layers: list[int]) -> dict[int, torch.nn.Module] | None:
    """transformers' own experts modules of `layers`, loaded by `from_pretrained` through
    transformers' weight conversion (independent of the declared formats), float32.

    Only the first max(layers) + 1 decoder layers are built. None when transformers is
    absent, does not know the model_type, or the experts module of a layer has no
    (hidden, top_k_index, top_k_weights) forward (e.g. Llama-4's bmm experts).
    """
    try:
        import transformers
    except ImportError:
        return None
    try:
        config = transformers.AutoConfig.from_pretrained(folder)
    except (ValueError, KeyError, OSError):
        return None
    text = config.get_text_config()
    keep = max(layers) + 1
    if getattr(text, "num_hidden_layers", keep) > keep:
        text.num_hidden_layers = keep
        if isinstance(getattr(text, "layer_types", None), list):
            text.layer_types = text.layer_types[:keep]
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, config=config, dtype=torch.float32)
    except (ValueError, KeyError, OSError):
        return None
    found: dict[int, torch.nn.Module] = {}
    for name, module in model.named_modules():
        parts = name.split(".")
        if type(module).__name__.endswith("Experts") and "layers" in parts:
            i = parts.index("layers")
            if i + 1 < len(parts) and parts[i + 1].isdigit() and int(parts[i + 1]) in layers:
                found.setdefault(int(parts[i + 1]), module.eval())
    if sorted(found) != sorted(layers) or any("Llama4" in type(m).__name__ for m in found.values()):
        return None
    return found


def reference(ckpt: Checkpoint, moe: ModelMoE, layer: int, x: torch.Tensor, weights: torch.Tensor,
              ids: torch.Tensor, *, use_transformers: bool = True,
              oracle: dict[int, torch.nn.Module] | None = None) -> tuple[torch.Tensor, str]:
    """(float32 [T, H] output, the reference's name).

    oracle: from `transformers_oracle` (weights as transformers itself loads them: a wrong
    declared format is caught). Without it, transformers' experts module is filled from
    the checkpoint through the declared format (checks padding, sharding and the kernel,
    not the declaration), or without transformers an independent float32 loop.
    """
    if oracle is not None and layer in oracle:
        loaded = oracle[layer]
        return transformers_forward(loaded, x, weights, ids).to(torch.float32), \
            f"transformers {type(loaded).__name__} (from_pretrained)"
    module = transformers_experts(ckpt, moe, layer) if use_transformers else None
    if module is not None:
        return transformers_forward(module, x, weights, ids).to(torch.float32), \
            f"transformers {type(module).__name__} (declared format)"
    return loop_reference(ckpt, moe, layer, x, weights, ids), "float32 per-expert loop (declared format)"
