"""The seeded inputs every runner feeds a layer, and how its output is compared with the
reference: `hidden_states`, `run_inputs` (the 1x and the scaled half), `halves_error`,
`TOLERANCE` per model dtype, and the report's words for the scaled half (`reach_words`).

Shared by `layoutc run` (layoutc.tools.run), the quantized runner (layoutc.tools.quant_run)
and the TP launcher (layoutc.tools.tp); it imports no runner, so each imports it downward.
"""

from __future__ import annotations

from typing import Any

from layoutc.runtime.vocab import MODEL_DTYPES

#: Relative tolerance of the kernel's output against the reference, per model dtype
#: (vocab.MODEL_DTYPES: bfloat16, float16, float32).
TOLERANCE: dict[str, float] = dict(zip(MODEL_DTYPES, (2e-2, 5e-3, 1e-5), strict=True))


def rel_error(out: Any, ref: Any) -> float:
    """||out - ref||_F / ||ref||_F in float32."""
    import torch

    diff = out.to(torch.float32) - ref.to(torch.float32)
    norm = float(ref.to(torch.float32).norm())
    return float(diff.norm()) / norm if norm else float(diff.norm())


def hidden_states(moe: Any, layer: int, tokens: int, seed: int, dtype: str) -> Any:
    """Seeded hidden states of one layer: [tokens, hidden_size] ~ N(0, 1), in `dtype`."""
    import torch

    gen = torch.Generator().manual_seed(seed + layer)
    return torch.randn(tokens, moe.hidden_size, generator=gen).to(getattr(torch, dtype))


def run_inputs(
    ckpt: Any, moe: Any, layer: int, tokens: int, seed: int, dtype: str, gate_up: Any = None, reach: Any = None
) -> tuple[Any, float, Any]:
    """(hidden states [2 * tokens, H] in `dtype`, s, reach): the seeded `hidden_states`, then the
    same times s, where s brings the median |gate/up pre-activation| to reach.REACH, or past
    CLAMP_MARGIN times the largest clamp limit config.json states for the layer
    (checkpoints/reach.py, activation.clamp_limits), so every branch of a clamped activation is
    reached. reach: the `InputReach` (its `text()` says what was reached and against which limit).
    How the reach is measured: `reach` when given (an InputReach the caller measured on these
    hidden states, e.g. while its reference dequantized the layer), else `gate_up` (the layer's
    float [E, 2I, H] weights), else the layer's gate and up read through the declared format in
    their stored dtype, a few experts at a time (reach.layer_reach: down is never read, no float32
    copy of the layer is made)."""
    import torch

    from layoutc.tools.checkpoints.reach import layer_reach
    from layoutc.tools.checkpoints.reference import input_reach

    x = hidden_states(moe, layer, tokens, seed, dtype)
    if reach is None:
        reach = layer_reach(ckpt, moe, layer, x) if gate_up is None else \
            input_reach(x, gate_up, False, moe.text_config, layer)
    return torch.cat([x, (x.to(torch.float32) * reach.scale).to(x.dtype)]), reach.scale, reach


def reach_words(rows: list[Any]) -> str:
    """The report's words for the scaled half of every row's inputs: per layer, its factor and what
    it reached (`Row.input_reach`); layers that read alike are said once."""
    said: dict[str, list[int]] = {}
    for r in rows:
        words = f"times {r.input_scale:.3g}, " + (r.input_reach or "median |gate/up pre-activation| unrecorded")
        layers = said.setdefault(words, [])
        if r.layer not in layers:
            layers.append(r.layer)
    if len(said) == 1:
        return next(iter(said))
    return "; ".join(f"layer{'s' if len(ls) > 1 else ''} {', '.join(map(str, ls))}: {w}" for w, ls in said.items())


def halves_error(out: Any, ref: Any) -> float:
    """The larger `rel_error` of the two halves of `run_inputs`' tokens (the 1x and the scaled
    inputs): one half's error is not hidden by the other's larger norm."""
    half = out.shape[0] // 2
    if half == 0 or out.shape[0] % 2:
        return rel_error(out, ref)
    return max(rel_error(out[:half], ref[:half]), rel_error(out[half:], ref[half:]))
