"""A hand-declared format (`layoutc run --format-file FILE`) proved in float32 against
transformers' own block before any kernel row runs (issue 45, red-team finding F2a).

The kernel rows compare at the run dtype's tolerance (bfloat16: 2e-2), so a declared field that
is off by less than that (a `routed_scale` key whose config value is 1.015 on a block that
applies no scale) passed as "ok". A proposed format is proved in float32 at 1e-4 against the
block (`layoutc.tools.run._prove`); a declared one now is too, the same way: the float32 loop over
the layer's weights read through the declared format (`reference.loop_reference`), through the
block step it states (`block.combine`), against transformers' block's routed output
(`reference.reference` with the run's oracle: one layer's module, built by the streaming oracle,
which the rows then reuse). Where they differ by more than `TOLERANCE`, the field at fault is
found by changing one declared field at a time (gate/up order, orientations, the routed-output
scale, the shared combination, where the routing weight multiplies) and the run stops with
FormatError LR143 naming the field, its declared value, what the block measures, and the
measured errors; never "ok".

Only torch (and the format); transformers is reached through the oracle the caller built.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from layoutc.runtime.algebra import Word
from layoutc.tools.checkpoints.errors import FormatError

#: the float32 proof's bound, as a proposed format's (`layoutc.tools.run._prove`)
TOLERANCE = 1e-4


@dataclass(frozen=True)
class DeclaredProof:
    """A declared format that agrees with the block: `rel` the float32 relative error on `layer`,
    `reference` the block in words (reference.Reference.name)."""

    layer: int
    rel: float
    reference: str
    #: the block's routed output on `layer` is zero on the drawn tokens: nothing is proved there (a zero
    #: reference matches any scale); the caller goes on to the next layer
    degenerate: bool = False


def _rel(out: Any, ref: Any) -> float:
    import torch

    num = float(torch.linalg.vector_norm(out.to(torch.float64) - ref.to(torch.float64)))
    den = float(torch.linalg.vector_norm(ref.to(torch.float64)))
    return num / den if den else (0.0 if num == 0.0 else math.inf)


def _variants(fmt: Any) -> list[tuple[str, str, str, Any]]:
    """One-field changes of a declared format: (field, declared value, changed value, format)."""
    out: list[tuple[str, str, str, Any]] = []
    if fmt.gated and fmt.fused and fmt.gate_up:
        other = Word.INTERLEAVE.value if fmt.gate_up_layout == Word.HALVES.value else Word.HALVES.value
        out.append(("gate_up_layout", fmt.gate_up_layout, other, replace(fmt, gate_up_layout=other)))
    if fmt.gated and fmt.gate and fmt.up:  # per-expert or separate fused names: gate and up swapped
        out.append(
            ("gate / up", f"{fmt.gate} / {fmt.up}", f"{fmt.up} / {fmt.gate}", replace(fmt, gate=fmt.up, up=fmt.gate))
        )
    out.append(
        (
            "transposed",
            str(fmt.transposed).lower(),
            str(not fmt.transposed).lower(),
            replace(fmt, transposed=not fmt.transposed),
        )
    )
    out.append(
        (
            "down_transposed",
            str(fmt.down_transposed).lower(),
            str(not fmt.down_transposed).lower(),
            replace(fmt, down_transposed=not fmt.down_transposed),
        )
    )
    if fmt.routed_scale:
        out.append(("routed_scale", repr(list(fmt.routed_scale)), "[] (no scale)", replace(fmt, routed_scale=())))
    other = "sum" if fmt.shared_combination == "average" else "average"
    out.append(
        ("shared_combination", repr(fmt.shared_combination), repr(other), replace(fmt, shared_combination=other))
    )
    flip = "input" if fmt.router_weight == "output" else "output"
    out.append(("router_weight", repr(fmt.router_weight), repr(flip), replace(fmt, router_weight=flip)))
    return out


#: the float32 loop over a layer's experts read through a format: (moe, x, weights, ids) -> [T, H]
Loop = Callable[[Any, Any, Any, Any], Any]


def _measure(moe: Any, x: Any, ref: Any, loop: Loop) -> Any:
    """The float32 loop through `moe`'s format and block step ([T, H])."""
    from layoutc.tools.checkpoints.block import block_ops, combine, kernel_routing

    weights, ids = kernel_routing(ref.weights, ref.ids, moe.num_experts)
    out = loop(moe, x, weights, ids)
    return combine(out, x, ref.weights, ref.ids, block_ops(moe), moe.num_experts)


def _factor_words(moe: Any, c: float) -> str:
    """What a constant ratio c (block / declared) says about the declared scale fields."""
    from layoutc.tools.checkpoints.block import block_ops, explain_ratio

    cfg = moe.text_config if isinstance(moe.text_config, dict) else {}
    return explain_ratio(c, cfg, block_ops(moe), moe.format.routed_scale)


def prove_declared(
    ckpt: Any, moe: Any, layer: int, x: Any, oracle: Any, loop: Loop | None = None
) -> DeclaredProof | None:
    """Prove the declared format `moe.format` on `layer` in float32 against transformers' block.

    ckpt: the open checkpoint; moe: describe()'s MoEModelConfig of the declared format; x: float32
    hidden states [T, H] (runcompare.hidden_states); oracle: `reference.transformers_oracle`'s
    (its layer is built once and reused by the rows); loop: the float32 loop over the layer's
    experts read through a format, (moe, x, weights, ids) -> [T, H] (default
    `reference.loop_reference` over the stored floats; a quantized run passes its loop over the
    dequantized weights, `layoutc.tools.run._declared_loop`). Returns None when the oracle has no
    independent reference for `layer` (the rows then say "unchecked", as before), else the proof
    (`degenerate` where the block's output is zero on `layer`: proved nothing, try another layer).

    Raises FormatError LR143 when the float32 loop through the declared format differs from the
    block by more than TOLERANCE (1e-4): the message names the field whose change makes it agree
    (its declared and its matching value), or, for a constant ratio, the declared scale and what
    the block measures, with the measured relative errors; LR112 for a named tensor that is absent.
    """
    from layoutc.tools.checkpoints.block import fit_ratio
    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.reference import reference

    if oracle is None:
        return None
    if loop is None:
        from layoutc.tools.checkpoints.reference import loop_reference

        def loop(m: Any, xs: Any, w: Any, i: Any) -> Any:
            return loop_reference(ckpt, m, layer, xs, w, i)

    ref = reference(ckpt, moe, layer, x, oracle=oracle)
    if not ref.independent:
        return None
    import torch

    if float(torch.linalg.vector_norm(ref.output.to(torch.float64))) == 0.0:
        return DeclaredProof(layer, 0.0, ref.name, degenerate=True)
    out = _measure(moe, x, ref, loop)
    rel = _rel(out, ref.output)
    if rel <= TOLERANCE:
        return DeclaredProof(layer, rel, ref.name)
    head = (
        f"the declared format (--format-file) of model_type {moe.format.model_type!r} disagrees with "
        f"{ref.name} on layer {layer} in float32: rel error {rel:.2e} (the proof's bound {TOLERANCE:g}, "
        "before any kernel row)"
    )
    c, residual = fit_ratio(out, ref.output)
    if residual <= TOLERANCE:  # a scale outside the experts: name the declared scale fields and the block's
        raise FormatError(
            "LR143",
            f"{head}. It is a constant factor x{c:.4g} on every token: {_factor_words(moe, c)}"
            ". Fix routed_scale / shared_combination in the format file (docs/formats.md)",
        )
    tried = []
    for name, declared, changed, fmt in _variants(moe.format):
        try:
            other = _rel(_measure(describe(ckpt.config, fmt, ckpt.weight_map), x, ref, loop), ref.output)
        except (FormatError, RuntimeError, ValueError):  # shapes that do not multiply, a key the config lacks
            continue
        if other <= TOLERANCE:
            raise FormatError(
                "LR143",
                f"{head}. The field at fault is {name}: declared {declared}; with "
                f"{changed} the loop matches the block (rel error {other:.1e}). Fix {name} in the "
                "format file",
            )
        tried.append(f"{name} {changed}: {other:.2e}")
    raise FormatError(
        "LR143",
        f"{head}. No single field explains it (each changed alone: {'; '.join(tried)}): "
        "check the tensor names, the activation and the expert layout against the block's source",
    )
