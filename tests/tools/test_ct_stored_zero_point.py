"""A compressed-tensors pack-quantized checkpoint whose config says symmetric but which stores
`weight_zero_point` tensors (an asymmetric checkpoint, its config edited or written by hand):
compressed-tensors' compressor writes them only for asymmetric weights (0.17 / 0.19
compressors/pack_quantized/base.py compress_weight, _remove_symmetric_zp) and vLLM's uint4b8 /
uint8b128 kernels read none, so both vLLM and the reference would drop them and `layoutc run`
said "ok" (red team F1). Refused by name before any kernel runs: LR157."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from layoutc.tools.checkpoints.formats import FormatError
from layoutc.tools.checkpoints.quant.config import read_quantization
from layoutc.tools.checkpoints.quant.dequant import dequantize
from layoutc.tools.checkpoints.quant.validate import validate
from layoutc.tools.checkpoints.reader import Checkpoint
from tests.tools.test_quant_formats import H, I, _config
from tests.tools.test_quant_wna16_config import _ct

G = 32


def _module(out: int, inp: int, zero: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(out + inp)
    t = {
        ".weight_packed": torch.randint(0, 2**31 - 1, (out, inp // 8), generator=g, dtype=torch.int32),
        ".weight_scale": torch.rand(out, inp // G, generator=g) + 0.5,
        ".weight_shape": torch.tensor([out, inp], dtype=torch.int64),
    }
    if zero:
        t[".weight_zero_point"] = torch.randint(0, 2**31 - 1, (out // 8, inp // G), generator=g, dtype=torch.int32)
    return t


def _folder(tmp_path: Path, zero: bool) -> Path:
    from safetensors.torch import save_file

    tensors = {}
    for e in range(8):
        for proj, (out, inp) in {"gate_proj": (I, H), "up_proj": (I, H), "down_proj": (H, I)}.items():
            base = f"model.layers.0.mlp.experts.{e}.{proj}"
            tensors |= {base + k: v for k, v in _module(out, inp, zero).items()}
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps(_config("qwen3_moe", _ct(group_size=G))))
    return tmp_path


@pytest.mark.parametrize("zero", [False, True])
def test_validate_refuses_a_stored_zero_point_under_symmetric(tmp_path: Path, zero: bool) -> None:
    folder = _folder(tmp_path, zero)
    scheme = read_quantization(json.loads((folder / "config.json").read_text()))
    assert scheme is not None and scheme.name == "ct_wna16_int4"
    with Checkpoint(str(folder)) as ckpt:
        if not zero:
            validate(scheme, ckpt, 0)  # the symmetric checkpoint compressed-tensors writes
            return
        with pytest.raises(FormatError) as info:
            validate(scheme, ckpt, 0)
    assert info.value.code == "LR157", str(info.value)
    assert "experts.0.gate_proj.weight_zero_point" in str(info.value) and "symmetric" in str(info.value)


def test_dequantize_refuses_a_stored_zero_point_under_symmetric() -> None:
    scheme = read_quantization(_config("qwen3_moe", _ct(group_size=G)))
    assert scheme is not None
    stored = {k.removeprefix(".weight_").replace("packed", "weight"): v for k, v in _module(I, H, True).items()}
    tensors = {"weight": stored["weight"], "scale": stored["scale"], "zero": stored["zero_point"]}
    dequantize(scheme, {r: t for r, t in tensors.items() if r != "zero"}, name="m")  # symmetric: reads
    with pytest.raises(FormatError) as info:
        dequantize(scheme, tensors, name="m")
    assert info.value.code == "LR157" and "m.weight_zero_point" in str(info.value), str(info.value)
