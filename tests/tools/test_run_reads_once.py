"""`layoutc run` reads and dequantizes each layer once (issue 44 item 5).

- The inputs' reach (runcompare.run_inputs) reads only the layer's gate and up, in their stored
  dtype, a few experts at a time (checkpoints/reach.py): every byte the reader asks the kernel
  for (`os.preadv`, counted at the call) is gate's and up's, and the scale is the one the whole
  float32 gate/up gives (reference.input_reach). Old code: gate, up and down read whole in
  float32 (`_full_w13_w2`), 1.5x the bytes.
- A GPTQ int4 run dequantizes each expert projection once per layer: the inputs' reach is
  measured as the streaming reference dequantizes the layer (quant_run/oracle.py's tap), the rank
  side reads codes only. Old code: every projection twice (`runner.dequantized` for the reach,
  then the reference's source).
"""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.tiny_run import make, run

pytestmark = [pytest.mark.transformers]


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    count = [0]
    real = os.preadv

    def preadv(fd: int, buffers: list[Any], offset: int) -> int:
        got = real(fd, buffers, offset)
        count[0] += got
        return got

    monkeypatch.setattr(os, "preadv", preadv)
    return count


@pytest.mark.parametrize("family", ["qwen3_moe", "gemma4"])
def test_run_inputs_reads_gate_and_up_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family: str) -> None:
    from layoutc.tools.checkpoints import reader
    from layoutc.tools.checkpoints.formats import FORMATS, describe
    from layoutc.tools.checkpoints.reference import input_reach
    from layoutc.tools.runcompare import hidden_states, run_inputs

    folder = make(tmp_path / family, "--family", family, "--dtype", "bfloat16")
    with reader.Checkpoint(str(folder)) as ckpt:
        moe = describe(ckpt.config, FORMATS.get(ckpt.config["model_type"]), ckpt.weight_map)
        layer = moe.moe_layers[0]
        fmt = moe.format
        if fmt.fused:
            names = [fmt.names(layer)["gate_up"]]
        else:
            names = [fmt.names(layer, e)[p] for e in range(moe.num_experts) for p in ("gate", "up")]
        gate_up_bytes = sum(ckpt.tensors[n].end - ckpt.tensors[n].start for n in names)
        count = _counted(monkeypatch)
        x, scale, reach = run_inputs(ckpt, moe, layer, 16, 0, "bfloat16")
        monkeypatch.undo()
        assert count[0] == gate_up_bytes, f"read {count[0]} bytes; gate and up are {gate_up_bytes}"
        # the same scale as the whole layer's gate/up in float32 gives
        if fmt.fused:
            whole = ckpt.tensor(names[0]).to(torch.float32)
        else:
            gates = [ckpt.tensor(fmt.names(layer, e)["gate"]) for e in range(moe.num_experts)]
            ups = [ckpt.tensor(fmt.names(layer, e)["up"]) for e in range(moe.num_experts)]
            whole = torch.cat([torch.stack(gates), torch.stack(ups)], dim=1).to(torch.float32)
        x1 = hidden_states(moe, layer, 16, 0, "bfloat16")
        want = input_reach(x1, whole, bool(fmt.transposed), moe.text_config, layer)
        assert scale == pytest.approx(want.scale, rel=1e-5) and reach.median == pytest.approx(want.median, rel=1e-5)
        assert torch.equal(x[:16], x1)


@pytest.mark.kernel  # aten::_weight_int4pack_mm_for_cpu
@pytest.mark.slow
def test_a_gptq_layer_is_dequantized_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from layoutc.tools.checkpoints.quant import dequant

    folder = make(tmp_path / "gptq", "--quant", "gptq4", "--group-size", "64", "--layers", "2")
    calls: collections.Counter[str] = collections.Counter()
    real = dequant.dequantize

    def counting(scheme: Any, tensors: Any, *, name: str = "") -> Any:
        calls[name] += 1
        return real(scheme, tensors, name=name)

    monkeypatch.setattr(dequant, "dequantize", counting)
    code, out, err = run(str(folder), "--tp", "1,2", "--format", "json")
    assert code == 0, out + err
    experts = {n: c for n, c in calls.items() if ".experts." in n}
    assert len(experts) == 2 * 4 * 3, sorted(experts)  # 2 layers x 4 experts x gate, up, down
    assert set(experts.values()) == {1}, {n: c for n, c in experts.items() if c != 1}
