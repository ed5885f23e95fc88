"""One float32 reference MoE forward for the tests, written from the definition.

out[t] = sum_k weights[t, k] * w2[e] @ (act(gate) * up), e = ids[t, k], where
h = w13[e] @ x[t] (+ bias) and gate = h[:intermediate], up = h[intermediate:].
"""

from __future__ import annotations

import torch

ACTIVATIONS = {
    "silu": torch.nn.functional.silu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh"),
}


def moe_reference(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor,
                  intermediate: int, act: str = "silu", w13_bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, H], w13 [E, 2 * intermediate, H] ([gate | up]), w2 [E, H, intermediate]; returns float32 [T, H]."""
    fn = ACTIVATIONS[act]
    out = torch.zeros(x.shape[0], w2.shape[1])
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            h = w13[e].float() @ x[t].float()
            if w13_bias is not None:
                h = h + w13_bias[e].float()
            out[t] += float(weights[t, k]) * (w2[e].float() @ (fn(h[:intermediate]) * h[intermediate:]))
    return out
