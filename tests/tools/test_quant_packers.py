"""Checkpoints written by the outside packers (issue 45 item 5): llm-compressor 0.14.0's
compressed-tensors `pack-quantized` W4A16 / W8A16 (group 32, 128, channelwise) and auto-round
0.16.1's native format (int4 group 128, int8 channelwise), each packed by the tool itself from a
bf16 checkpoint transformers wrote (tests/support/packers.py; LAYOUTC_PACKERS_PATH, as .ci/run installs it).

- The config is read as the declared scheme and every tensor validates.
- The decode is held to the packer's own input: the dequantized experts against the bf16 weights the
  packer quantized, in units of each element's stored scale (round-to-nearest leaves at most half a
  step, except the clamped extremes); a wrong zero point, nibble order, packing axis or orientation is
  a whole step or more off almost everywhere (`test_a_wrong_zero_point_is_caught`).
- `layoutc run` at tp 1, 2, 4, 8 against transformers' own Qwen3MoeSparseMoeBlock (from_pretrained):
  int4 grouped on torch's int4pack kernel and int8 channelwise on int8pack, from the checkpoint's own
  codes read per rank through the contracts' generated loaders (rows ok, exit 0); int4 channelwise and
  int8 grouped, which no CPU kernel here takes (vLLM 0.32's CPU path refuses them too), through the
  Marlin contracts' loaders, reference only (rows matched, "unchecked", exit 1).
Bit-equality of the per-rank tensors with vLLM 0.32's own loaders: tests/conformance/test_vllm_packers_loading.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
import torch

from tests.support import packers

pytestmark = [pytest.mark.transformers]

#: case -> (scheme name, method, group size, the route `layoutc run` takes)
EXPECTED = {
    "ct_w4a16_g128": ("ct_wna16_int4", "compressed-tensors", 128, "int4pack"),
    "ct_w4a16_g32": ("ct_wna16_int4", "compressed-tensors", 32, "int4pack"),
    "ct_w4a16_channel": ("ct_wna16_int4", "compressed-tensors", -1, "marlin_moe_wna16"),
    "ct_w8a16_channel": ("ct_wna16_int8", "compressed-tensors", -1, "int8pack"),
    "ct_w8a16_g128": ("ct_wna16_int8", "compressed-tensors", 128, "marlin_moe_gptq_int8"),
    "autoround_int4_g128": ("gptq_int4", "auto-round", 128, "int4pack"),
    "autoround_int8_channel": ("gptq_int8", "auto-round", -1, "int8pack"),
}
BLOCK = "transformers Qwen3MoeSparseMoeBlock (from_pretrained, model.layers.N.mlp): its routed output"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Any:
    packers.packers_path()
    return lambda case: packers.checkpoint(case, tmp_path_factory)


def _steps(scheme: Any, folder: Any, skip: tuple[str, ...] = ()) -> torch.Tensor:
    """|dequantized - the packer's bf16 input| / scale, every element of every routed projection;
    the stored tensors of the roles in `skip` are left unread."""
    from safetensors import safe_open

    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.quant import scheme as S
    from layoutc.tools.checkpoints.quant.dequant import dequantize
    from layoutc.tools.checkpoints.reader import Checkpoint

    ckpt = Checkpoint(folder)
    moe = describe(ckpt.config)
    base = safe_open(str(packers.base_of(folder) / "model.safetensors"), "pt")
    sspec = scheme.spec("scale")
    out = []
    for e in range(moe.num_experts):
        for roles in S.tensor_names(scheme, moe.format, 0, e).values():
            stored = {r: ckpt.tensor(n) for r, n in roles.items() if r not in skip and ckpt.has(n)}
            got = dequantize(scheme, stored, name=roles["weight"])
            want = base.get_tensor(roles["weight"].rsplit(".", 1)[0] + ".weight").to(torch.float32)
            s = stored["scale"].to(torch.float32)
            s = s.T if sspec.dims[0].axis == "in" else s
            s = s.repeat_interleave(-(-want.shape[1] // s.shape[1]), dim=1)[:, : want.shape[1]]
            out.append(((got - want).abs() / s).flatten())
    return torch.cat(out)


def _assert_rounded(steps: torch.Tensor, case: str) -> None:
    """Round-to-nearest: within half a step (int8: plus the bf16 rounding of the stored scale times up
    to 128 codes, a quarter step) but at the clamped extremes (at most one element a group or row: the
    largest, which the packers clamp to the top code), and less than a third of a step on average."""
    over = float((steps > (0.8 if "8" in case.split("_")[1] else 0.55)).to(torch.float32).mean())
    assert over <= 0.01 and float(steps.mean()) <= 0.3, (case, over, float(steps.mean()), float(steps.max()))


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_packer_checkpoint_reads_and_decodes_to_the_packers_input(written: Any, case: str) -> None:
    from layoutc.tools.checkpoints.quant.config import read_quantization
    from layoutc.tools.checkpoints.quant.validate import validate
    from layoutc.tools.checkpoints.reader import Checkpoint

    folder = written(case)
    scheme = read_quantization(json.loads((folder / "config.json").read_text()))
    name, method, group, _ = EXPECTED[case]
    assert scheme is not None and (scheme.name, scheme.method, scheme.group_size) == (name, method, group)
    validate(scheme, Checkpoint(folder), 0)
    _assert_rounded(_steps(scheme, folder), case)


@pytest.mark.parametrize("case", ["ct_w4a16_g32", "autoround_int4_g128"])
def test_a_wrong_zero_point_is_caught(written: Any, case: str) -> None:
    """The decode check can fail: the same codes read with a zero point one off (7 for 8) are a step
    off almost everywhere. The stored qzeros (auto-round's GPTQ format holds the symmetric constant
    there) are left unread, or the checks LR157/LR166 would refuse the altered scheme before any
    decode."""
    from layoutc.tools.checkpoints.quant.config import read_quantization

    folder = written(case)
    scheme = read_quantization(json.loads((folder / "config.json").read_text()))
    assert scheme is not None
    with pytest.raises(AssertionError):
        _assert_rounded(_steps(replace(scheme, zero_point=scheme.zero_point - 1), folder, skip=("zero",)), case)


@pytest.mark.kernel  # aten::_weight_int4pack_mm_for_cpu / aten::_weight_int8pack_mm
@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_run_at_tp_1_2_4_8_against_transformers(written: Any, capsys: pytest.CaptureFixture[str], case: str) -> None:
    from layoutc.cli import main

    folder = written(case)
    capsys.readouterr()
    code = main(["run", str(folder), "--tp", "1,2,4,8", "--dtype", "float32", "--tokens", "16", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    name, _, _, route = EXPECTED[case]
    rows = report["rows"]
    assert report["quantization"] == name and not report["refused"], report
    assert [r["tp_size"] for r in rows] == [1, 2, 4, 8], rows
    for r in rows:
        assert r["matched"] and r["independent"] and BLOCK in r["reference"], r
    if route in ("int4pack", "int8pack"):
        assert code == 0 and report["ok"], report
        contract = f"torch_{route}_gptq_moe"
        assert all(r["result"] == "ok" and r["kernel_ran"] and contract in r["kernel"] for r in rows), rows
    else:  # no kernel here takes it: the Marlin contract's loaders, reference only
        assert code == 1 and not report["ok"], report
        assert all(
            not r["kernel_ran"]
            and r["result"].startswith("unchecked: no kernel ran")
            and f"padded by {route}'s loaders" in r["kernel"]
            for r in rows
        ), rows
