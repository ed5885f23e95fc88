# Copied by `layoutc compile` from layoutc/runtime/glue/_loop.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""The per-expert loop shared by the glues whose kernel computes one projection at a time."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..activations import gated
from ..packed import KernelConfig


def expert_loop(cfg: KernelConfig, hidden_states: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor,
                project: Callable[[int, str, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """out[t] = sum_k weights[t, k] * w2[e] @ act(w13[e] @ x[t]) with e = ids[t, k].

    `project(e, "w13" | "w2", x)` runs the real kernel for expert e. The activation
    reads w13's output with cfg.w13_view (activations.gated). Accumulates in
    float32; returns [tokens, hidden_size] of hidden_states.dtype.
    """
    out = torch.zeros(hidden_states.shape[0], cfg.hidden_size, dtype=torch.float32)
    for e in torch.unique(ids).tolist():
        rows, slots = (ids == e).nonzero(as_tuple=True)
        h = project(e, "w13", hidden_states.index_select(0, rows).contiguous())
        act = gated(h, cfg.activation, cfg.w13_view)
        y = project(e, "w2", act).float() * weights[rows, slots].unsqueeze(1)
        out.index_add_(0, rows, y)
    return out.to(hidden_states.dtype)
