"""The unsharded float32 reference of one MoE layer, and the per-expert loop engines fall back to.

Shapes follow vLLM: w13 is `[E, 2*I, H]` with the gate half first (`[gate | up]`),
w2 is `[E, H, I]`, w13_bias `[E, 2*I]`, w2_bias `[E, H]`, hidden states `[T, H]`,
topk_weights float32 `[T, top_k]`, topk_ids int32 `[T, top_k]`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from layoutc.runtime.vocab import ACTIVATIONS as VOCAB_ACTIVATIONS

#: Gated activations the reference and the baseline implement (`out = act(gate) * up`): those of
#: vocab.ACTIVATIONS whose up is taken as is (silu, gelu, gelu_tanh).
ACTIVATIONS: tuple[str, ...] = tuple(a.name for a in VOCAB_ACTIVATIONS.values() if a.gated and not a.up_offset)


def act_and_mul(gate_up: torch.Tensor, activation: str) -> torch.Tensor:
    """`act(gate) * up` for gate_up `[..., 2*I]` laid out `[gate | up]`; returns `[..., I]`.

    activation: "silu", "gelu" (erf) or "gelu_tanh" (tanh approximation).
    Raises ValueError for any other activation or an odd last dimension.
    """
    if gate_up.shape[-1] % 2:
        raise ValueError(f"act_and_mul: last dim must be even ([gate | up]), got {tuple(gate_up.shape)}")
    gate, up = gate_up.chunk(2, dim=-1)
    if activation == "silu":
        return F.silu(gate) * up
    if activation == "gelu":
        return F.gelu(gate) * up
    if activation == "gelu_tanh":
        return F.gelu(gate, approximate="tanh") * up
    raise ValueError(f"act_and_mul: activation {activation!r} is not one of {ACTIVATIONS}")


def _check_moe_inputs(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                      topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                      w13_bias: torch.Tensor | None, w2_bias: torch.Tensor | None) -> tuple[int, int, int]:
    if hidden_states.dim() != 2 or w13.dim() != 3 or w2.dim() != 3:
        raise ValueError(f"expected hidden_states [T, H], w13 [E, 2*I, H], w2 [E, H, I]; got "
                         f"{tuple(hidden_states.shape)}, {tuple(w13.shape)}, {tuple(w2.shape)}")
    tokens, hidden = hidden_states.shape
    experts, two_i, k = w13.shape
    inter = two_i // 2
    if two_i % 2 or k != hidden or tuple(w2.shape) != (experts, hidden, inter):
        raise ValueError(f"inconsistent shapes: hidden_states {tuple(hidden_states.shape)}, w13 "
                         f"{tuple(w13.shape)} (want [E, 2*I, H]), w2 {tuple(w2.shape)} (want [E, H, I])")
    if topk_ids.shape != topk_weights.shape or topk_ids.dim() != 2 or topk_ids.shape[0] != tokens:
        raise ValueError(f"topk_weights {tuple(topk_weights.shape)} and topk_ids {tuple(topk_ids.shape)} "
                         f"must both be [T={tokens}, top_k]")
    if topk_ids.numel() and (int(topk_ids.min()) < 0 or int(topk_ids.max()) >= experts):
        raise ValueError(f"topk_ids must lie in [0, {experts})")
    if w13_bias is not None and tuple(w13_bias.shape) != (experts, two_i):
        raise ValueError(f"w13_bias has shape {tuple(w13_bias.shape)}, expected {(experts, two_i)}")
    if w2_bias is not None and tuple(w2_bias.shape) != (experts, hidden):
        raise ValueError(f"w2_bias has shape {tuple(w2_bias.shape)}, expected {(experts, hidden)}")
    return tokens, hidden, experts


def _expert_loop(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                 topk_weights: torch.Tensor, topk_ids: torch.Tensor, activation: str,
                 w13_bias: torch.Tensor | None, w2_bias: torch.Tensor | None,
                 compute_dtype: torch.dtype) -> torch.Tensor:
    tokens, hidden, _ = _check_moe_inputs(hidden_states, w13, w2, topk_weights, topk_ids, w13_bias, w2_bias)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {ACTIVATIONS}")
    out = torch.zeros(tokens, hidden, dtype=torch.float32)
    x = hidden_states.to(compute_dtype)
    flat_ids = topk_ids.reshape(-1).to(torch.int64)
    flat_weights = topk_weights.reshape(-1).to(torch.float32)
    token_of = torch.arange(tokens).repeat_interleave(topk_ids.shape[1])
    for e in torch.unique(flat_ids).tolist():
        slots = (flat_ids == e).nonzero(as_tuple=True)[0]
        rows = token_of[slots]
        b13 = None if w13_bias is None else w13_bias[e].to(compute_dtype)
        b2 = None if w2_bias is None else w2_bias[e].to(compute_dtype)
        h = act_and_mul(F.linear(x[rows], w13[e].to(compute_dtype), b13), activation)
        y = F.linear(h, w2[e].to(compute_dtype), b2)
        out.index_add_(0, rows, y.to(torch.float32) * flat_weights[slots, None])
    return out


def per_expert_loop(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                    topk_weights: torch.Tensor, topk_ids: torch.Tensor, activation: str, *,
                    w13_bias: torch.Tensor | None = None,
                    w2_bias: torch.Tensor | None = None) -> torch.Tensor:
    """The fallback path: a torch loop over the routed experts on *unpadded* weights.

    hidden_states: [T, H]; w13: [E, 2*I, H] ([gate | up]); w2: [E, H, I]; any I (no
    alignment needed, which is why engines fall back to it); w13_bias [E, 2*I] and
    w2_bias [E, H] optional. topk_weights: [T, top_k] floating; topk_ids: [T, top_k]
    integer in [0, E). activation: one of `ACTIVATIONS`.
    The matmuls run in hidden_states' dtype (bf16 in, bf16 GEMMs, like an engine's
    fallback); the weighted sum over top_k accumulates in float32.
    Returns a new [T, H] tensor of hidden_states' dtype.
    Raises ValueError on inconsistent shapes, out-of-range ids or an unknown activation.
    """
    out = _expert_loop(hidden_states, w13, w2, topk_weights, topk_ids, activation, w13_bias, w2_bias,
                       hidden_states.dtype)
    return out.to(hidden_states.dtype)


def reference_moe(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                  topk_weights: torch.Tensor, topk_ids: torch.Tensor, activation: str, *,
                  w13_bias: torch.Tensor | None = None,
                  w2_bias: torch.Tensor | None = None) -> torch.Tensor:
    """Unsharded, unpadded float32 reference of one MoE layer.

    Same arguments as `per_expert_loop` (full logical weights, tp_size=1), but every
    tensor is upcast to float32 (one expert at a time, so no float32 copy of the whole
    layer is made). Returns a new float32 [T, H] tensor:
    `out[t] = sum_k w[t,k] * (w2[e] @ act_and_mul(w13[e] @ x[t] + b13[e]) + b2[e])`, e = ids[t,k].
    Raises ValueError like `per_expert_loop`.
    """
    return _expert_loop(hidden_states, w13, w2, topk_weights, topk_ids, activation, w13_bias, w2_bias,
                        torch.float32)
