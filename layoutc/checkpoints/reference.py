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

from .formats import ModelMoE
from .reader import Checkpoint


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
    config = transformers.AutoConfig.from_pretrained(ckpt.folder)
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
    return module.eval()


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


def reference(ckpt: Checkpoint, moe: ModelMoE, layer: int, x: torch.Tensor, weights: torch.Tensor,
              ids: torch.Tensor, *, use_transformers: bool = True) -> tuple[torch.Tensor, str]:
    """(float32 [T, H] output, the reference's name)."""
    module = transformers_experts(ckpt, moe, layer) if use_transformers else None
    if module is not None:
        return transformers_forward(module, x, weights, ids).to(torch.float32), \
            f"transformers {type(module).__name__}"
    return loop_reference(ckpt, moe, layer, x, weights, ids), "float32 per-expert loop"
