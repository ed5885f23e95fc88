"""Memory of `layoutc run`'s streaming path, as properties (issue 44): what is read, in which dtype
transformers loads it, what is kept; never a timing.

- An int4 rank reads only its slice of each expert's codes (quant_run/codes.py `PackedCodes`):
  over the ranks of one TP degree, every `.qweight` byte is read once (every rank's scales, zero
  points and g_idx are read whole, as before). Old code: each rank read and unpacked every code of
  every expert (`ckpt.tensor`), tp times the codes over the ranks.
- `PackedCodes[region]` is `unpack` of the whole stored weight, then the region, for GPTQ (packed
  along in) and AWQ (packed along out, AutoAWQ's nibble order), on regions that start and end
  inside a pack.
- The streaming reference (checkpoints/stream.py) loads a bf16 layer whose conversions only move
  elements in bf16 and casts it after (`load_dtype`), with the same float32 values as
  `from_pretrained(dtype=float32)`; a conversion that computes, or a float32 / mixed source, loads
  in float32. Old code: always float32, so Qwen3-MoE's 128 x 3 per-expert tensors were each
  copied to float32, then stacked, then concatenated (issue 44: 9.3 GiB at the Qwen3-30B-A3B shape).
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.tiny_run import make

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.transformers]


def _layer_codes(folder: Path) -> tuple[Any, Any, Any]:
    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.quant.config import read_quantization
    from layoutc.tools.checkpoints.reader import Checkpoint

    ckpt = Checkpoint(str(folder))
    moe, scheme = describe(ckpt.config), read_quantization(ckpt.config)
    assert scheme is not None
    return ckpt, moe, scheme


@pytest.mark.parametrize("tp", [2, 4])
def test_an_int4_rank_reads_only_its_slice_of_the_codes(tmp_path: Path, tp: int) -> None:
    from layoutc.tools.quant_run import rank as rank4
    from layoutc.tools.quant_run.codes import LayerCodes
    from layoutc.tools.quant_run.runner import _int4_plan
    from layoutc.tools.runplan import module_layout

    folder = make(tmp_path / "gptq", "--quant", "gptq4", "--group-size", "32")
    ckpt, moe, scheme = _layer_codes(folder)
    with ckpt:
        experts = [n for n in ckpt.tensors if ".experts." in n]
        codes = sum(ckpt.tensors[n].end - ckpt.tensors[n].start for n in experts if n.endswith(".qweight"))
        other = sum(ckpt.tensors[n].end - ckpt.tensors[n].start for n in experts if not n.endswith(".qweight"))
        assert codes > 4 * other  # the property below is about the codes, not the small tensors
        layout = module_layout(importlib.import_module("layoutc_generated.torch_int4pack_gptq_moe"))
        plan = _int4_plan(layout, moe, scheme, tp, "float32")
        read = []
        for r in range(tp):
            before = ckpt.bytes_read
            rank4.load_rank(layout, plan, r, LayerCodes(ckpt, moe, scheme, 0), torch.float32)
            read.append(ckpt.bytes_read - before - other)  # scales and zero points: whole, every rank
        assert sum(read) == codes, (read, codes)
        assert all(0 < n < codes for n in read), read


@pytest.mark.parametrize("quant", ["gptq4", "awq4"])
def test_packed_codes_read_by_region_are_the_whole_unpack_cut(tmp_path: Path, quant: str) -> None:
    from layoutc.tools.checkpoints.quant import scheme as S
    from layoutc.tools.checkpoints.quant.unpack import unpack
    from layoutc.tools.quant_run.codes import PackedCodes, _out_in, expert_codes

    folder = make(tmp_path / quant, "--quant", quant, "--group-size", "32")
    ckpt, moe, scheme = _layer_codes(folder)
    with ckpt:
        ex = expert_codes(ckpt, moe, scheme, 0, 1)
        for proj, p in (("gate", ex.gate), ("down", ex.down)):
            assert isinstance(p.codes, PackedCodes)
            name = S.tensor_names(scheme, moe.format, 0, 1)[proj]["weight"]
            whole = _out_in(unpack(scheme.weight(), ckpt.tensor(name)), scheme.weight()).to(torch.int32)
            assert tuple(p.codes.get_shape()) == tuple(whole.shape)
            assert torch.equal(p.codes.full(), whole)
            out, inn = whole.shape
            for rows, cols in (
                (slice(0, out), slice(3, 61)),
                (slice(5, 37), slice(0, inn)),
                (slice(out // 2, out), slice(9, 10)),
                (slice(7, 8), slice(inn - 5, inn)),
            ):
                before = ckpt.bytes_read
                got = p.codes[rows, cols]
                assert got.dtype == torch.int32 and torch.equal(got, whole[rows, cols]), (proj, rows, cols)
                assert ckpt.bytes_read - before < ckpt.tensors[name].end - ckpt.tensors[name].start


def _wide() -> Any:
    spec = importlib.util.spec_from_file_location("wide_checkpoint", ROOT / "bench" / "wide_checkpoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("family", ["qwen3_moe", "gemma4"])
def test_the_streaming_reference_loads_bf16_and_gives_from_pretrained_values(
    tmp_path: Path, family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers
    from transformers import core_model_loading

    from layoutc.tools.checkpoints import stream

    wide = _wide()
    cfg = wide.config_for(family, 2, width=0.05, experts=8)
    cfg["vocab_size"] = 256
    folder = wide.write(str(tmp_path / family), cfg)
    seen: list[Any] = []
    real = core_model_loading.convert_and_load_state_dict_in_model

    def spy(model: Any, state_dict: Any, config: Any, *a: Any, **k: Any) -> Any:
        seen.append(config.dtype)
        return real(model, state_dict, config, *a, **k)

    monkeypatch.setattr(core_model_loading, "convert_and_load_state_dict_in_model", spy)
    oracle = stream.StreamingOracle(folder)
    entry = oracle.layers.get(1)
    assert entry is not None, oracle.why(1)
    assert seen == [torch.bfloat16]  # loaded as stored: no float32 copy of each source tensor
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    want = model.state_dict()
    got = entry.module.state_dict()
    assert got
    for key, value in got.items():
        assert value.dtype == torch.float32, key
        assert torch.equal(value, want[f"{entry.path}.{key}"]), key


def test_load_dtype_loads_in_float32_unless_every_source_is_narrow_and_every_conversion_moves() -> None:
    from transformers.core_model_loading import Concatenate, MergeModulelist, PermuteForRope, WeightConverter

    from layoutc.tools.checkpoints.stream import load_dtype

    bf16 = {"a": torch.zeros(2, dtype=torch.bfloat16), "b": torch.zeros(2, dtype=torch.bfloat16)}
    moves = [WeightConverter(["x.*.a", "x.*.b"], "x.ab", [MergeModulelist(0), Concatenate(1)])]
    assert load_dtype(bf16, moves) == torch.bfloat16
    assert load_dtype({**bf16, "c": torch.zeros(2)}, moves) == torch.float32  # a float32 source
    assert load_dtype({**bf16, "c": torch.zeros(2, dtype=torch.float16)}, moves) == torch.float32  # mixed
    computes = [*moves, WeightConverter("q", "q", [PermuteForRope()])]  # not in MOVE_OPS: not trusted
    assert load_dtype(bf16, computes) == torch.float32
    assert load_dtype({}, moves) == torch.float32
