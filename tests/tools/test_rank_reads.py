"""The per-rank loader reads exactly the bytes the rank owns (issue 44 item 5, the field's bar:
never read what the rank does not own).

A gemma-4 checkpoint (bench/wide_checkpoint.py: transformers' own `revert_weight_conversion`, so
the fused `gate_up_proj` [E, 2I, H] and `down_proj` [E, H, I] are as gemma-4 stores them) is loaded
by `checkpoints.loader.load_layer_rank` through vllm_cpu_grouped_gemm's generated `load_*` at
tp 1, 2 and 4, every rank; every byte the reader asks the kernel for (`os.preadv`, counted at the
call) is summed and held to the rank's own gate / up rows and down columns. Old code: down's
column block of every row was read as its whole span (staging buffer), so a rank read tp times
its down bytes: 1.33x at tp 2, 2.0x at tp 4.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.transformers, pytest.mark.slow]


def _wide() -> Any:
    spec = importlib.util.spec_from_file_location("wide_checkpoint", ROOT / "bench" / "wide_checkpoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory: pytest.TempPathFactory) -> str:
    wide = _wide()
    cfg = wide.config_for("gemma4", 1, width=0.05, experts=8)
    cfg["vocab_size"] = 256
    return str(wide.write(str(tmp_path_factory.mktemp("g4")), cfg))


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    count = [0]
    real = os.preadv

    def preadv(fd: int, buffers: list[Any], offset: int) -> int:
        got = real(fd, buffers, offset)
        count[0] += got
        return got

    monkeypatch.setattr(os, "preadv", preadv)
    return count


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_fused_gemma4_rank_reads_only_its_bytes(gemma4: str, tp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from layoutc.tools.checkpoints import reader
    from layoutc.tools.checkpoints.formats import FORMATS, describe
    from layoutc.tools.checkpoints.loader import load_layer_rank
    from layoutc.tools.runplan import checkpoint_plan

    mod = importlib.import_module("layoutc_generated.vllm_cpu_grouped_gemm")
    with reader.Checkpoint(gemma4) as ckpt:
        moe = describe(ckpt.config, FORMATS.get(ckpt.config["model_type"]), ckpt.weight_map)
        assert moe.format.fused and not moe.format.transposed  # gate_up [E, 2I, H], down [E, H, I]
        layer = moe.moe_layers[0]
        plan = checkpoint_plan(mod, moe, tp, "bfloat16", "vec")
        per = moe.intermediate_size // tp
        owned = moe.num_experts * 3 * per * moe.hidden_size * 2  # gate, up rows and down columns, bf16
        ranks = []
        for rank in range(tp):
            count = _counted(monkeypatch)
            ranks.append(load_layer_rank(ckpt, moe, layer, mod, plan, rank))
            monkeypatch.undo()
            assert count[0] == owned, f"tp {tp} rank {rank}: read {count[0]} bytes, owns {owned}"
        assert ckpt.bytes_read == tp * owned  # the reader's own count says the same
        down = ckpt.tensor(moe.format.names(layer)["down"])
        for rank, got in enumerate(ranks):  # and what was read is the rank's own columns
            assert torch.equal(got.w2[:, : moe.hidden_size, :per], down[:, :, rank * per : (rank + 1) * per])


def test_column_block_reads_each_run_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader alone: a column block of every row of a 3-D tensor (and a row block of each
    expert, and a block strided in its innermost dim) equals torch's own indexing of the tensor;
    the two with contiguous innermost runs read exactly their elements' bytes."""
    from safetensors.torch import save_file

    from layoutc.tools.checkpoints import reader

    full = torch.arange(4 * 6 * 10, dtype=torch.float32).reshape(4, 6, 10).to(torch.bfloat16)
    save_file({"w": full}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text("{}")
    with reader.Checkpoint(str(tmp_path)) as ckpt:
        src = ckpt.slice("w")
        for index, exact in (
            ((slice(1, 3), slice(None), slice(2, 5)), True),
            ((slice(None), slice(1, 4), slice(None)), True),
            ((slice(0, 2), slice(0, 3), slice(1, 2)), True),
            ((slice(None), slice(None), slice(0, 10, 3)), False),
        ):
            count = _counted(monkeypatch)
            part = src[index]
            monkeypatch.undo()
            assert torch.equal(part, full[index])
            if exact:
                assert count[0] == part.numel() * 2, index
