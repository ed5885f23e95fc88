"""The independent reference of a quantized checkpoint: transformers' own sparse-MoE block,
loaded by transformers from the checkpoint (the same block, and the same routed-output rule,
as the unquantized path: layoutc/tools/checkpoints/reference.py).

- gpt-oss MXFP4: `from_pretrained(..., quantization_config=Mxfp4Config(dequantize=True))`:
  transformers dequantizes (transformers 5.19 integrations/mxfp4.py, on CPU without
  accelerate), then the model is cast to float32 (bf16 -> float32 is exact).
- Any per-expert method (GPTQ, AWQ, FP8, NVFP4): transformers' own loaders need gptqmodel,
  autoawq or accelerate, which are absent here. Instead, one layer at a time
  (checkpoints/stream.py `StreamingOracle`, on config.json minus `quantization_config`), every
  module of the layer's block that has the scheme's scale tensor is dequantized on its own by
  the independent dequantizer (checkpoints/quant/dequant.py, held to vLLM's unpackers in
  tests/tools/test_quant_formats.py) under its own name (`<module>.weight`), beside the checkpoint's
  other float tensors, and transformers' own key renaming and weight conversion load them
  into the block; the block is freed before the next layer. Which tensor is gate, up or down, its orientation, fusing and the block's
  routing, weighting and scaling are transformers' decisions: the declared format (or a
  --format-file) is not read, so a wrong declaration is caught.

Anything else (a fused method on another family, transformers absent or unable to load):
no independent reference; the rows are "unchecked" (exit 1).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.checkpoints.quant import scheme as S
from layoutc.tools.checkpoints.reader import Checkpoint
from layoutc.tools.checkpoints.reference import Oracle

if TYPE_CHECKING:
    import torch

    from layoutc.tools.checkpoints.stream import StreamingOracle

MXFP4_HOW = "transformers' own MXFP4 dequantization (from_pretrained, Mxfp4Config(dequantize=True))"
PER_TENSOR_HOW = (
    "each quantized module dequantized on its own, under its own name, by the independent dequantizer "
    "(checkpoints/quant/dequant.py), "
    "the folder loaded by transformers' from_pretrained: the declared format is not read"
)


def independent_oracle(
    ckpt: Checkpoint, moe: MoEModelConfig, scheme: S.QuantScheme, layers: list[int], tap: Tap | None = None
) -> tuple[Oracle | StreamingOracle, str]:
    """(transformers' blocks of `layers`, how the weights were dequantized). The Oracle's
    `missing` says why a layer has none (never raises for that). tap: given every module the
    per-expert path dequantizes (`dequantized_source`), as it is dequantized. Raises FormatError
    (LR112, LR153-LR157) for a quantized module the dequantizer refuses."""
    from layoutc.tools.checkpoints.reference import transformers_oracle

    if scheme.method == "mxfp4" and moe.format.model_type == "gpt_oss":
        try:
            from transformers import Mxfp4Config  # type: ignore[attr-defined]
        except ImportError:
            return Oracle(missing="transformers has no Mxfp4Config"), MXFP4_HOW
        return transformers_oracle(
            str(ckpt.folder), layers, quantization_config=Mxfp4Config(dequantize=True), experts_implementation="eager"
        ), MXFP4_HOW
    if scheme.layout != "per_expert":
        return Oracle(
            missing=f"transformers cannot dequantize {scheme.name} for model_type "
            f"{moe.format.model_type!r} here, and the per-tensor dequantizer holds per-expert "
            "modules only"
        ), ""
    from layoutc.tools.checkpoints.stream import StreamingOracle

    return StreamingOracle(
        str(ckpt.folder), dequantized_source(ckpt, scheme, tap), plain_config(ckpt.config)
    ), PER_TENSOR_HOW


@dataclass(frozen=True)
class QuantOracle:
    """A quantized run's reference, built once for the proof of a --format-file or proposal and the rows:
    the oracle (None under --no-transformers / --no-from-pretrained), how its weights were dequantized,
    and `taps`: gate/up module name -> the layer's ReachMeter, filled by the runner while a layer is
    dequantized (the input reach is measured from the weights the reference dequantizes)."""

    oracle: Any
    how: str
    taps: dict[str, Any]


def quant_oracle(
    ckpt: Checkpoint, moe: MoEModelConfig, scheme: S.QuantScheme, layers: list[int], wanted: bool
) -> QuantOracle:
    """`independent_oracle` of `layers` with a tap into the returned `taps` (an empty QuantOracle when not
    `wanted`). Raises as `independent_oracle`."""
    taps: dict[str, Any] = {}

    def tap(module: str, w: Any) -> None:
        meter = taps.get(module)
        if meter is not None:
            meter.add(module, w)

    oracle, how = independent_oracle(ckpt, moe, scheme, layers, tap) if wanted else (None, "")
    return QuantOracle(oracle, how, taps)


#: safetensors dtypes transformers loads as floats (a float8 weight without a scale is left out)
_FLOATS = ("F16", "BF16", "F32", "F64")


#: (module name, e.g. "model.layers.0.mlp.experts.3.gate_proj", its dequantized float32 [out, in] weight)
Tap = Callable[[str, "torch.Tensor"], None]


def dequantized_source(ckpt: Checkpoint, scheme: S.QuantScheme, tap: Tap | None = None) -> Any:
    """The checkpoint as float32 tensors, read one layer at a time (`stream.TensorSource`): every
    module that has the scheme's scale tensor as `<module>.weight`, dequantized on read by the
    independent dequantizer (float32 `[out, in]`); every other float tensor of 2 bytes or more
    under its own name; the other quantization tensors, and any other non-float tensor, left out.
    The names are decided from the headers alone; nothing is read until transformers asks.
    tap: called with each module's name and weight as it is dequantized (the runner measures its
    inputs' reach there, so a layer is dequantized once: issue 44 item 5)."""
    import torch

    from layoutc.tools.checkpoints.quant.dequant import dequantize
    from layoutc.tools.checkpoints.stream import TensorSource

    wspec, sspec = scheme.weight(), scheme.spec("scale")
    assert sspec is not None
    suffixes = tuple(t.suffix for t in scheme.tensors)
    modules: dict[str, dict[str, str]] = {}  # "<module>.weight" -> role -> stored name
    used: set[str] = set()
    for name in ckpt.weight_map:
        if not name.endswith(wspec.suffix):
            continue
        module = name[: -len(wspec.suffix)]
        if not ckpt.has(module + sspec.suffix):
            continue
        roles = {t.role: module + t.suffix for t in scheme.tensors if ckpt.has(module + t.suffix)}
        modules[module + ".weight"] = roles
        used.update(roles.values())
    plain = [
        n
        for n in ckpt.weight_map
        if n not in used
        and n not in modules
        and ckpt.dtype(n) in _FLOATS
        and not (n.endswith(suffixes) and not n.endswith(".weight"))
    ]

    def dequantized(key: str) -> torch.Tensor:
        roles, module = modules[key], key.removesuffix(".weight")
        w = dequantize(scheme, {r: ckpt.tensor(n) for r, n in roles.items()}, name=module)
        w = w.to(torch.float32).contiguous()
        if tap is not None:
            tap(module, w)
        return w

    def read(keys: list[str]) -> dict[str, Any]:
        # a quantized module is dequantized when transformers' loader materializes it (`[...]`, as it
        # reads a safetensors slice), not here: the layer is never held dequantized whole beside the
        # parameters transformers merges it into
        return {
            key: _Deferred(key, dequantized) if key in modules else ckpt.tensor(key).to(torch.float32) for key in keys
        }

    return TensorSource((*modules, *plain), read)


class _Deferred:
    """A dequantized module weight as a safetensors-slice-like object (`get_dtype()`, `[index]`): it is
    dequantized when indexed (transformers/core_model_loading.py `_materialize_copy` does `tensor[...]`)."""

    def __init__(self, key: str, make: Callable[[str], Any]) -> None:
        self.key, self._make = key, make

    def get_dtype(self) -> str:
        return "F32"

    def __getitem__(self, index: Any) -> Any:
        return self._make(self.key)[index]


def plain_config(config: dict[str, Any]) -> dict[str, Any]:
    """config.json without `quantization_config` (at the top and in text_config)."""
    out = json.loads(json.dumps(config))
    out.pop("quantization_config", None)
    if isinstance(out.get("text_config"), dict):
        out["text_config"].pop("quantization_config", None)
    return out
