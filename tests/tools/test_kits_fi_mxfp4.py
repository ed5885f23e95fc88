"""The FlashInfer TRT-LLM MXFP4 kit (`layoutc kit contracts/flashinfer_trtllm_mxfp4_moe.moe --path
flashinfer_trtllm_mxfp4`): vLLM's gpt-oss MXFP4 path, every rank, up to FlashInfer's
`get_w2_permute_indices_with_cache` (the first device-only op), written into a temp dir and run by
pytest in a child against the installed vLLM 0.32. It passes on the release its contract models, and
fails naming the tensor, the rank and the rows when a conftest.py beside the kit mutates vLLM's own
functions: the padded size, the E8M0 scales' pad fill, the gate / up pair order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.tools.test_kits import _run_kit, _write_kit

pytestmark = [pytest.mark.conformance, pytest.mark.engine, pytest.mark.slow]

METHOD = "vllm.model_executor.layers.quantization.mxfp4"

# pad count: the TRT-LLM round-up, where it pads the intermediate, pads 128 more
MUTATE_PAD_COUNT = f"""
import importlib
mod = importlib.import_module({METHOD!r})
original = mod.GptOssMxfp4MoEMethod.maybe_roundup_sizes
def mutated(self, hidden_size, intermediate_size_per_partition, act_dtype, moe_parallel_config):
    h, i = original(self, hidden_size, intermediate_size_per_partition, act_dtype, moe_parallel_config)
    return h, (i + 128 if i != intermediate_size_per_partition else i)
mod.GptOssMxfp4MoEMethod.maybe_roundup_sizes = mutated
"""

# fill: create_weights allocates the w13 E8M0 scales filled with 127 (2^0) instead of zeros
MUTATE_SCALE_FILL = f"""
import importlib
mod = importlib.import_module({METHOD!r})
original = mod.GptOssMxfp4MoEMethod.create_weights
def mutated(self, layer, *args, **kwargs):
    original(self, layer, *args, **kwargs)
    layer.w13_weight_scale.data.fill_(127)
mod.GptOssMxfp4MoEMethod.create_weights = mutated
"""

# order: gpt-oss's loader takes the checkpoint's (gate, up) row pairs as (up, gate)
MUTATE_ORDER = """
import importlib
gpt_oss = importlib.import_module("vllm.model_executor.models.gpt_oss")
original = gpt_oss.GptOssModel._load_weights_mxfp4
def swapped(name, w):
    if "w13" not in name:
        return w
    pairs = w.unflatten(1, (-1, 2))
    return pairs.flip(2).flatten(1, 2).contiguous()
def mutated(self, ep_rank_end, ep_rank_start, heads_per_rank, head_start, weights, stacked_params_mapping):
    weights = [(n, swapped(n, w)) for n, w in weights]
    return original(self, ep_rank_end, ep_rank_start, heads_per_rank, head_start, weights, stacked_params_mapping)
gpt_oss.GptOssModel._load_weights_mxfp4 = mutated
"""


def test_flashinfer_trtllm_mxfp4_kit_passes_on_the_release_its_contract_models(tmp_path: Path) -> None:
    kit = _write_kit(tmp_path, "flashinfer_trtllm_mxfp4_moe", "flashinfer_trtllm_mxfp4")
    assert "blocks of 32: short last rank, padded" in kit.read_text()
    done = _run_kit(kit, args=("-rx",))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", done.stdout) and not re.search(r"\d+ (failed|error|xfailed)", done.stdout), \
        done.stdout[-2000:]


@pytest.mark.parametrize("mutation, expect", [
    (MUTATE_PAD_COUNT, r"w13_weight rank 0 \(at get_w2_permute_indices_with_cache\): engine \(\d+, \d+, \d+\) "
                       r"torch.uint8, contract"),
    (MUTATE_SCALE_FILL, r"w13_weight_scale rank \d+ \(at get_w2_permute_indices_with_cache\): \d+ of \d+ elements "
                        r"differ \(dim \d indices \[?\d+.*engine bytes \[127\], contract bytes \[0\]"),
    (MUTATE_ORDER, r"w13_weight rank 0 \(at get_w2_permute_indices_with_cache\): \d+ of \d+ elements differ"),
], ids=["pad_count", "scale_fill", "order"])
def test_flashinfer_trtllm_mxfp4_kit_fails_naming_rows_on_a_mutated_engine(tmp_path: Path, mutation: str,
                                                                          expect: str) -> None:
    """vLLM's TRT-LLM MXFP4 round-up padding 128 more, its E8M0 scales allocated as 127 (the pad then 1.0,
    not the contract's 0), or the loader swapping gate and up: the kit fails naming the tensor, rank and rows."""
    kit = _write_kit(tmp_path, "flashinfer_trtllm_mxfp4_moe", "flashinfer_trtllm_mxfp4")
    done = _run_kit(kit, mutation, ("-k", "test_engine_pads_like_the_contract"))
    assert done.returncode == 1, done.stdout[-4000:]
    assert "vllm 0.32.0 differs from contract flashinfer_trtllm_mxfp4_moe" in done.stdout, done.stdout[-4000:]
    assert re.search(expect, done.stdout), done.stdout[-4000:]
