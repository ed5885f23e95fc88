"""What `layoutc run` checks of a checkpoint before it builds any model or loads a weight.

From the safetensors headers alone (no torch): every expert tensor the format names is
present (LR112), has the shape the format and config.json give it (LR116, naming the
tensor and both shapes), and all of them share one dtype (LR113, else `--dtype` decides).
With torch, `check_finite` reads each layer's expert and router tensors one expert at a
time and names the first tensor holding a NaN or an infinity (LR114).

Shapes, relative to the contract's `[out, in]` order (layoutc.tools.checkpoints.formats):
per expert gate / up `[I, H]` and down `[H, I]`; fused gate_up `[E, 2I, H]` and down
`[E, H, I]` (separate fused gate and up `[E, I, H]` each; a non-gated format's up alone, `[I, H]`
or `[E, I, H]`); a `transposed` source swaps the
last two axes; `experts_flattened` stacks the experts along the rows (`[E * rows, cols]`);
fused biases are `[E, 2I]` and `[E, H]`. Source: each family's transformers module (the `source` of its format).
"""

from __future__ import annotations

from typing import Any

from layoutc.tools.checkpoints.formats import FormatError
from layoutc.tools.checkpoints.header import FLOAT_NAMES
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig


def expected_shapes(moe: MoEModelConfig, layer: int) -> dict[str, tuple[int, ...]]:
    """Each routed-expert tensor of `layer` the format names -> the shape it must have."""
    fmt, e, i, h = moe.format, moe.num_experts, moe.intermediate_size, moe.hidden_size

    def oriented(out: int, inp: int, transposed: bool) -> tuple[int, int]:
        return (inp, out) if transposed else (out, inp)

    want: dict[str, tuple[int, ...]] = {}
    if fmt.fused:
        n = fmt.names(layer)

        def stacked(rows: int, cols: int) -> tuple[int, ...]:
            return (e * rows, cols) if fmt.experts_flattened else (e, rows, cols)

        if "gate_up" in n:
            want[n["gate_up"]] = stacked(*oriented(2 * i, h, fmt.transposed))
        else:  # separate fused gate and up (DBRX's w1, v1), or a non-gated format's up alone
            for role in ("gate", "up") if fmt.gated else ("up",):
                want[n[role]] = stacked(*oriented(i, h, fmt.transposed))
        want[n["down"]] = stacked(*oriented(h, i, fmt.down_transposed))
        if "gate_up_bias" in n:
            want[n["gate_up_bias"]] = (e, 2 * i)
        if "down_bias" in n:
            want[n["down_bias"]] = (e, h)
        return want
    for x in range(e):
        n = fmt.names(layer, x)
        for role in ("gate", "up") if fmt.gated else ("up",):  # non-gated (Nemotron-H): up alone
            want[n[role]] = oriented(i, h, fmt.transposed)
        want[n["down"]] = oriented(h, i, fmt.down_transposed)
    return want


def check_experts(ckpt: Any, moe: MoEModelConfig, layers: list[int]) -> dict[str, str]:
    """Every expert tensor of `layers` against its expected shape, from the headers.

    Returns name -> safetensors dtype ("BF16", ...). Raises FormatError LR112 for an
    absent tensor, LR116 for a tensor whose shape is not the one the format and config.json
    give (both shapes and the sizes they come from are named).
    """
    dtypes: dict[str, str] = {}
    for layer in layers:
        for name, want in expected_shapes(moe, layer).items():
            got = ckpt.shape(name)
            if got != want:
                raise FormatError("LR116", f"{ckpt.folder}: tensor {name!r} has shape {list(got)}, but the "
                                  f"format {moe.format.model_type!r} and config.json (experts {moe.num_experts}, "
                                  f"hidden {moe.hidden_size}, expert intermediate {moe.intermediate_size}) give "
                                  f"{list(want)}; check the config's sizes or the format's orientation")
            dtypes[name] = ckpt.dtype(name)
    return dtypes


def config_dtype(config: dict[str, Any]) -> str | None:
    """config.json's `dtype` (transformers 5) or `torch_dtype` (4.x), when it names one."""
    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if isinstance(value, str):
            return value
    text = config.get("text_config")
    if isinstance(text, dict):
        return config_dtype(text)
    return None


def run_dtype(ckpt: Any, dtypes: dict[str, str], requested: str | None) -> tuple[str, str | None]:
    """The dtype a run computes in, and a warning to print (or None).

    dtypes: the expert tensors' safetensors dtypes (`check_experts`). requested: `--dtype`.
    One stored dtype: it (or `requested`), with a warning when config.json's `dtype` /
    `torch_dtype` names another float dtype (the tensors decide what is computed; a config
    that disagrees is reported, not refused: transformers itself casts to the config's dtype
    only under dtype="auto"). Mixed dtypes: `requested` with a warning, else
    FormatError LR113 naming one tensor of each dtype and config.json's dtype. A dtype that
    is not a float dtype a run computes in: LR102 unless `requested`.
    """
    kinds: dict[str, str] = {}
    for name, dt in dtypes.items():
        kinds.setdefault(dt, name)
    if len(kinds) > 1:
        which = "; ".join(f"{name!r} is {dt}" for dt, name in sorted(kinds.items()))
        declared = config_dtype(ckpt.config)
        if requested is None:
            hint = f" (config.json says {declared})" if declared else ""
            raise FormatError("LR113", f"{ckpt.folder}: the expert tensors have mixed dtypes: {which}; a run "
                              f"computes in one dtype: pass --dtype{hint}")
        return requested, f"warning: the expert tensors have mixed dtypes ({which}); running in --dtype {requested}"
    stored = next(iter(kinds), "F32")
    if requested is not None:
        return requested, None
    if stored not in FLOAT_NAMES or FLOAT_NAMES[stored] == "float64":
        raise FormatError("LR102", f"{ckpt.folder}: the expert tensors are stored as {stored}, not bfloat16, "
                          "float16 or float32; pass --dtype")
    declared = (config_dtype(ckpt.config) or "").removeprefix("torch.")
    if declared in FLOAT_NAMES.values() and declared != FLOAT_NAMES[stored]:
        return FLOAT_NAMES[stored], (f"warning: config.json's dtype is {declared}, but the expert tensors are "
                                     f"stored as {stored}: running in {FLOAT_NAMES[stored]}, the stored dtype "
                                     f"(pass --dtype {declared} to run as the config says)")
    return FLOAT_NAMES[stored], None


def check_finite(ckpt: Any, moe: MoEModelConfig, layer: int) -> None:
    """FormatError LR114 naming the first expert or router tensor of `layer` that holds a NaN
    or an infinity (read one expert at a time, so memory stays one expert's weights)."""
    import torch

    names = list(expected_shapes(moe, layer))
    router, router_bias = moe.format.router_names(layer)
    names += [n for n in (router, router_bias) if n is not None and ckpt.has(n)]
    for name in names:
        src = ckpt.slice(name)
        shape = list(src.get_shape())
        parts = range(shape[0]) if len(shape) == 3 else [None]  # a 2-D tensor is read whole
        for part in parts:
            t = src[part:part + 1][0] if part is not None else src[:]
            bad = ~torch.isfinite(t)
            if bool(bad.any()):
                where = [int(v) for v in bad.nonzero()[0].tolist()]
                at = [part, *where] if part is not None else where
                raise FormatError("LR114", f"{ckpt.folder}: tensor {name!r} holds a non-finite value "
                                  f"({float(t[tuple(where)])} at index {at}); the checkpoint is damaged or "
                                  "was saved from a diverged model")
