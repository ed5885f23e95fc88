"""Hostile inputs to `layoutc run` on quantized checkpoints (issue 22): a stored tensor the
contract cannot hold is a coded refusal naming the tensor, never a bare shape complaint.

Oracle: the contracts' own IR (the `pack N` axes compiled from contracts/*.moe) against the
schemes' declared packing (checkpoints/quant/scheme.py, held to vLLM 0.32's unpackers in
tests/tools/test_quant_formats.py).
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from layoutc.tools.checkpoints.quant import ct_mxfp4
from layoutc.tools.checkpoints.quant import scheme as S
from layoutc.tools.checkpoints.quant.wna16 import ct_wna16
from layoutc.tools.quant_run import padded
from layoutc.tools.routes import route_contracts
from layoutc.tools.runplan import RunError

#: every scheme the runner declares, as its reader builds it
SCHEMES = {
    "gptq_int4": S.gptq(4, 64, sym=True, act_order=False),
    "gptq_int8": S.gptq(8, 64, sym=True, act_order=False),
    "awq_int4": S.awq(64),
    "fp8_block": S.fp8("block", block=(128, 128)),
    "mxfp4": S.mxfp4(),
    "nvfp4": S.nvfp4(),
    "mxfp4_ct": ct_mxfp4.scheme(),
    "ct_wna16_int4": ct_wna16(4, 128),  # compressed-tensors W4A16 (quant/wna16.py)
    "ct_wna16_int8": ct_wna16(8, -1),  # compressed-tensors W8A16
}


def _tensors(contract: str) -> list:
    ir = padded.contract_ir(importlib.import_module(f"layoutc_generated.{contract}"))
    return [t for t in ir.tensors if t.kind in padded._ROLE]


@pytest.mark.parametrize(("scheme", "contract"), sorted((s, c) for s in SCHEMES
                                                        for c in route_contracts("reference", s)))
def test_every_reference_contract_holds_its_schemes_packing(scheme: str, contract: str) -> None:
    """The pairs `layoutc run` loads through: no tensor of them is refused for its packing."""
    for t in _tensors(contract):
        padded._packing(SCHEMES[scheme], t)


@pytest.mark.parametrize("scheme", ["gptq_int8", "awq_int4", "mxfp4"])
def test_packed_words_on_a_one_code_an_element_contract_are_lr161(scheme: str) -> None:
    """torch_int4pack_gptq_moe holds one int4 code an int32 (its glue unpacks GPTQ / AWQ int4
    itself, quant_run/codes.py); `--contract torch_int4pack_gptq_moe` on a GPTQ int8 checkpoint
    used to reach the generated loader and be refused with a bare `source ... has shape`
    message. Now: LR161 naming the contract tensor and the scheme's packing."""
    w13 = next(t for t in _tensors("torch_int4pack_gptq_moe") if t.name == "w13_qweight")
    with pytest.raises(RunError, match=r"w13_qweight holds one value an element, but .* packs \d+ values") as exc:
        padded._packing(SCHEMES[scheme], w13)
    assert exc.value.code == "LR161"


def test_an_unpacked_scheme_on_an_unpacked_contract_passes() -> None:
    w13 = next(t for t in _tensors("torch_int4pack_gptq_moe") if t.name == "w13_qweight")
    assert padded._packing(SCHEMES["fp8_block"], w13) == (-1, None)


# --------------------------------------------------------------------------- config vs tensors (LR157)

GATE = {"out": 704, "in": 256}  # a gate projection [I, H] at the test checkpoints' I = 704, H = 256


@pytest.mark.parametrize(("scheme", "shape", "layout"), [
    (S.gptq(4, 64, sym=True, act_order=False), (256, 88), "awq_int4"),   # AutoAWQ's qweight [K, N / 8]
    (S.gptq(8, 64, sym=True, act_order=False), (256, 88), "awq_int4"),
    (S.awq(64), (32, 704), "gptq_int4"),                                  # GPTQ's qweight [K / 8, N]
])
def test_a_weight_packed_as_the_other_method_packs_is_lr157(scheme: S.QuantScheme, shape: tuple[int, int],
                                                           layout: str) -> None:
    """An AWQ checkpoint whose config says gptq (or the reverse): the qweight's shape is the
    other method's int32 packing of the same [out, in] (vLLM 0.32 auto_gptq.py / auto_awq.py
    create_weights), so the config disagrees with the tensors: LR157, not LR154's byte count."""
    from layoutc.tools.checkpoints.formats import FormatError
    from layoutc.tools.checkpoints.quant.validate import check_stored

    name = "model.layers.0.mlp.experts.1.gate_proj.qweight"
    with pytest.raises(FormatError, match=rf"qweight: shape \[{shape[0]}, {shape[1]}\] is {layout}'s layout") as exc:
        check_stored(scheme, scheme.weight(), name, "int32", shape, GATE)
    assert exc.value.code == "LR157"


def test_a_wrong_byte_count_is_still_lr154() -> None:
    from layoutc.tools.checkpoints.formats import FormatError
    from layoutc.tools.checkpoints.quant.validate import check_stored

    scheme = S.gptq(4, 64, sym=True, act_order=False)
    with pytest.raises(FormatError) as exc:
        check_stored(scheme, scheme.weight(), "x.qweight", "int32", (31, 704), GATE)
    assert exc.value.code == "LR154"


def _ckpt(folder: Any, tensors: dict[str, Any]) -> Any:
    import json

    from safetensors.torch import save_file

    from layoutc.tools.checkpoints.reader import Checkpoint

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    save_file(tensors, str(folder / "model.safetensors"))
    return Checkpoint(str(folder))


@pytest.mark.parametrize(("scheme", "stored", "absent"), [
    (S.fp8("block", block=(128, 128)), ".weight_scale", ".weight_scale_inv"),   # weight_block_size over per-tensor
    (S.fp8("tensor", scale_suffix=".weight_scale"), ".weight_scale_inv", ".weight_scale"),  # ... left out
])
def test_a_scale_under_another_formats_name_is_lr157(tmp_path: Any, scheme: S.QuantScheme, stored: str,
                                                     absent: str) -> None:
    """config.json says block FP8 (weight_scale_inv) over AutoFP8's per-tensor weight_scale, or
    the reverse: the scale is there under the other format's name, so the config disagrees
    with the tensors (LR157 naming both), where it was LR112 "no tensor"."""
    import torch

    from layoutc.tools.checkpoints.formats import FormatError
    from layoutc.tools.checkpoints.quant.validate import _missing

    base = "model.layers.0.mlp.experts.0.gate_proj"
    ckpt = _ckpt(tmp_path / "c", {base + ".weight": torch.zeros(8, 8, dtype=torch.float8_e4m3fn),
                                  base + stored: torch.ones(())})
    roles = {"weight": base + ".weight", "scale": base + absent}
    with pytest.raises(FormatError, match=rf"{base + absent}: absent.*holds {base + stored} instead") as exc:
        _missing(scheme, ckpt, base + absent, roles)
    assert exc.value.code == "LR157"


def test_a_scale_absent_under_every_name_is_still_lr112(tmp_path: Any) -> None:
    import torch

    from layoutc.tools.checkpoints.formats import FormatError
    from layoutc.tools.checkpoints.quant.validate import _missing

    base = "model.layers.0.mlp.experts.0.gate_proj"
    ckpt = _ckpt(tmp_path / "c", {base + ".weight": torch.zeros(8, 8, dtype=torch.float8_e4m3fn)})
    with pytest.raises(FormatError) as exc:
        _missing(S.fp8("block", block=(128, 128)), ckpt, base + ".weight_scale_inv",
                 {"weight": base + ".weight", "scale": base + ".weight_scale_inv"})
    assert exc.value.code == "LR112" and base + ".weight_scale_inv" in str(exc.value)
