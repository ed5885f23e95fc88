"""The independent reference of a quantized checkpoint: transformers' own sparse-MoE block,
loaded by transformers from the checkpoint (the same block, and the same routed-output rule,
as the unquantized path: layoutc/tools/checkpoints/reference.py).

- gpt-oss MXFP4: `from_pretrained(..., quantization_config=Mxfp4Config(dequantize=True))`:
  transformers dequantizes (transformers 5.19 integrations/mxfp4.py, on CPU without
  accelerate), then the model is cast to float32 (bf16 -> float32 is exact).
- Any per-expert method (GPTQ, AWQ, FP8, NVFP4): transformers' own loaders need gptqmodel,
  autoawq or accelerate, which are absent here. Instead, every module of the first
  max(layers) + 1 decoder layers that has the scheme's scale tensor is dequantized on its own
  by the independent dequantizer (checkpoints/quant/dequant.py, held to vLLM's unpackers in
  tests/test_quant_formats.py) and written under its own name (`<module>.weight`), beside the
  checkpoint's other float tensors, into a temporary folder with config.json minus
  `quantization_config`; `from_pretrained` loads that folder through transformers' own weight
  conversion. Which tensor is gate, up or down, its orientation, fusing and the block's
  routing, weighting and scaling are transformers' decisions: the declared format (or a
  --format-file) is not read, so a wrong declaration is caught.

Anything else (a fused method on another family, transformers absent or unable to load):
no independent reference; the rows are "unchecked" (exit 1).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any

from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.checkpoints.quant import scheme as S
from layoutc.tools.checkpoints.reader import Checkpoint
from layoutc.tools.checkpoints.reference import Oracle

#: a decoder layer's index in a tensor name (`model.layers.3.`, DBRX's `transformer.blocks.3.`)
_LAYER = re.compile(r"(?:^|\.)(?:layers|blocks)\.(\d+)\.")
MXFP4_HOW = "transformers' own MXFP4 dequantization (from_pretrained, Mxfp4Config(dequantize=True))"
PER_TENSOR_HOW = (
    "each quantized module dequantized on its own, under its own name, by the independent dequantizer "
    "(checkpoints/quant/dequant.py), "
    "the folder loaded by transformers' from_pretrained: the declared format is not read"
)


def independent_oracle(
    ckpt: Checkpoint, moe: MoEModelConfig, scheme: S.QuantScheme, layers: list[int]
) -> tuple[Oracle, str]:
    """(transformers' blocks of `layers`, how the weights were dequantized). The Oracle's
    `missing` says why a layer has none (never raises for that). Raises FormatError (LR112,
    LR153-LR157) for a quantized module the dequantizer refuses."""
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
    with tempfile.TemporaryDirectory(prefix="layoutc-dequant-") as folder:
        write_dequantized(ckpt, scheme, max(layers) + 1, folder)
        return transformers_oracle(folder, layers), PER_TENSOR_HOW


def write_dequantized(ckpt: Checkpoint, scheme: S.QuantScheme, keep: int, folder: str) -> None:
    """Write `folder`/model.safetensors and config.json: the checkpoint's first `keep` decoder
    layers (and its tensors outside any layer) with every module that has the scheme's scale
    tensor dequantized to float32 `[out, in]` as `<module>.weight`; the other quantization
    tensors, and any other non-float tensor, left out. config.json: the checkpoint's, without
    `quantization_config` (at the top and in text_config)."""
    import torch
    from safetensors.torch import save_file

    from layoutc.tools.checkpoints.quant.dequant import dequantize

    wspec, sspec = scheme.weight(), scheme.spec("scale")
    assert sspec is not None
    suffixes = tuple(t.suffix for t in scheme.tensors)
    names = [n for n in ckpt.weight_map if (m := _LAYER.search(n)) is None or int(m.group(1)) < keep]
    out: dict[str, Any] = {}
    used: set[str] = set()
    for name in names:
        if not name.endswith(wspec.suffix):
            continue
        module = name[: -len(wspec.suffix)]
        if not ckpt.has(module + sspec.suffix):
            continue
        roles = {t.role: module + t.suffix for t in scheme.tensors if ckpt.has(module + t.suffix)}
        out[module + ".weight"] = (
            dequantize(scheme, {r: ckpt.tensor(n) for r, n in roles.items()}, name=module)
            .to(torch.float32)
            .contiguous()
        )
        used.update(roles.values())
    for name in names:
        if name in used or name in out:
            continue
        t = ckpt.tensor(name)
        if (
            not t.is_floating_point()
            or t.element_size() < 2
            or (name.endswith(suffixes) and not name.endswith(".weight"))
        ):
            continue  # a float8 weight without a scale, a stray scale: nothing transformers should load
        out[name] = t.to(torch.float32).contiguous()
    save_file(out, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    config = json.loads(json.dumps(ckpt.config))
    config.pop("quantization_config", None)
    if isinstance(config.get("text_config"), dict):
        config["text_config"].pop("quantization_config", None)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
