"""Hostile inputs to `layoutc run` on quantized checkpoints (issue 22): a stored tensor the
contract cannot hold is a coded refusal naming the tensor, never a bare shape complaint.

Oracle: the contracts' own IR (the `pack N` axes compiled from contracts/*.moe) against the
schemes' declared packing (checkpoints/quant/scheme.py, held to vLLM 0.32's unpackers in
tests/test_quant_formats.py).
"""

from __future__ import annotations

import importlib

import pytest

from layoutc.tools.checkpoints.quant import scheme as S
from layoutc.tools.quant_run import padded
from layoutc.tools.runplan import RunError

#: every scheme the runner declares, as its reader builds it
SCHEMES = {
    "gptq_int4": S.gptq(4, 64, sym=True, act_order=False),
    "gptq_int8": S.gptq(8, 64, sym=True, act_order=False),
    "awq_int4": S.awq(64),
    "fp8_block": S.fp8("block", block=(128, 128)),
    "mxfp4": S.mxfp4(),
}


def _tensors(contract: str) -> list:
    ir = padded.contract_ir(importlib.import_module(f"layoutc_generated.{contract}"))
    return [t for t in ir.tensors if t.kind in padded._ROLE]


@pytest.mark.parametrize(("scheme", "contract"), sorted((s, c) for s, cs in padded.REFERENCE_CONTRACTS.items()
                                                        for c in cs))
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
