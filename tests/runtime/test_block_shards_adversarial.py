"""Adversarial review of block shards (issue 12 item 4): mutated contracts, hostile calls.

Oracles: the real vLLM CPU kernel summed over every rank against an unsharded float64 loop
(as tests/runtime/test_block_shards_kernel.py), and the documented slice rule
[min(r * L, FULL), min((r + 1) * L, FULL)) written out by hand. The last five
pin defects the review found (all fixed: a None plan, a waste note for empty ranks, a block
counterexample at tp_size = 1, loader source dtypes, slice reads of the wrong shape).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from layoutc.cli import main
from tests.conftest import ROOT
from tests.runtime.test_block_shards_kernel import (
    all_ranks_error,
    block_sharded_text,
    compiled_on_the_kernel,
    gpt_oss_layer,
)
from tests.support.loading import load_generated

SS = "let shard_size = cdiv(intermediate_size, 32 * tp_size) * 32\n"
W2K = "axis k = pad(shard_size -> intermediate_size_per_partition_padded)"
REQUIRE = 'require intermediate_size % tp_size == 0 : "intermediate_size must split evenly over tp_size"\n'


def uneven_text() -> str:
    """The block-sharded CPU variant without `intermediate_size % tp_size == 0` (I = 2881 at tp 6)."""
    text = block_sharded_text()
    assert REQUIRE in text
    return text.replace(REQUIRE, "").replace("let intermediate_size_per_partition = intermediate_size / tp_size\n", "")


def _verify(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], name: str = "x") -> tuple[int, str]:
    path = tmp_path / f"{name}.moe"
    path.write_text(text)
    rc = main(["verify", str(path), "--no-cache"])
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_a_different_block_size_on_w2_than_on_w13_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """w13 in 32-row blocks, w2 in 64-column blocks: each covers its axis, but rank r's w13 rows
    and w2 columns are different intermediate entries."""
    text = block_sharded_text().replace(SS, SS + "let shard2 = cdiv(intermediate_size, 64 * tp_size) * 64\n"
                                        "let shard2_padded = round_up(shard2, intermediate_alignment)\n")
    text = text.replace(W2K, "axis k = pad(shard2 -> shard2_padded)")
    rc, out = _verify(tmp_path, text, capsys)
    assert rc == 1 and "w2.k agrees with w13.n" in out


@pytest.mark.parametrize("fill_line, where", [("w13", "w13's pad is uninitialised"), ("w2", "w2's pad is uninitialised")])
def test_an_uninit_fill_past_a_short_ranks_slice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            fill_line: str, where: str) -> None:
    text = block_sharded_text()
    if fill_line == "w13":
        text = text.replace("  storage dtype\n  fill 0\n}\n\n# w2", "  storage dtype\n  fill uninit\n}\n\n# w2")
    else:
        text = text.replace(W2K + "\n  storage dtype\n  fill 0", W2K + "\n  storage dtype\n  fill uninit")
    rc, out = _verify(tmp_path, text, capsys)
    assert rc == 1 and "short-rank tail lanes" in out and where in out


@pytest.mark.parametrize("blocks, code", [("0", "LC414"), ("-32", "LC414"), ("true", "LC301"), ("isa", "LC301"),
                                          ("1000000000000000000000000", "LC106"), ("nosuchname", "LC201"),
                                          ("hidden_size", "LC414"), ("32 / 0", "LC303"), ("32.5", "LC102"),
                                          ("w13.n", "LC301"), ("if isa == vec then 32 else 0", "LC414")])
def test_odd_block_sizes_are_located_diagnostics(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 blocks: str, code: str) -> None:
    text = block_sharded_text().replace("in blocks of 32", f"in blocks of {blocks}")
    rc, out = _verify(tmp_path, text, capsys, "odd")
    assert rc == 1 and "Traceback" not in out
    assert re.search(rf"odd\.moe:\d+:\d+: error\[{code}\]", out), out


@pytest.fixture(scope="module")
def uneven(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return compiled_on_the_kernel(tmp_path_factory, "vllm_cpu_block_sharded", uneven_text())


@pytest.mark.kernel
@pytest.mark.parametrize("activation, tp, I", [("silu", 6, 2881), ("swigluoai", 64, 96), ("swigluoai", 16, 100)])
def test_an_uneven_intermediate_size_runs_right_on_every_rank(uneven, activation: str, tp: int, I: int) -> None:  # type: ignore[no-untyped-def]  # noqa: E741
    """I not a multiple of tp_size (nor of 32): the last rank with data holds a partial block."""
    plan, layer = gpt_oss_layer(uneven, activation, tp, seed=I, I=I)
    assert all_ranks_error(uneven, plan, activation, *layer) < 1e-4


@pytest.mark.kernel
def test_empty_ranks_load_safetensors_slices_by_the_slice_rule(uneven, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """tp 64, I 96: ranks 3-63 are empty. Every rank's loaded w2 (per expert, from a
    memory-mapped slice) is the hand-written slice rule; a source at the old tp * L width is refused."""
    safetensors = pytest.importorskip("safetensors")
    from safetensors.torch import save_file
    m = uneven
    E, H, I, tp = 3, 32, 96, 64  # noqa: E741
    plan = m.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, isa="vec", activation="silu",
                  dtype="float32")
    full2 = torch.arange(E * H * I, dtype=torch.float32).reshape(E, H, I) + 1
    save_file({f"w2_{e}": full2[e].clone() for e in range(E)}, str(tmp_path / "ck.safetensors"))
    f = safetensors.safe_open(str(tmp_path / "ck.safetensors"), framework="pt")
    L = 32
    for r in range(tp):
        d = m.alloc_w2(plan, r)
        for e in range(E):
            m.load_w2(d, f.get_slice(f"w2_{e}"), plan, r, expert=e)
        s, n = min(r * L, I), min(L, I - min(r * L, I))
        expected = torch.zeros(E, H, L)
        expected[:, :, :n] = full2[:, :, s:s + n]
        assert torch.equal(d, expected), r
    with pytest.raises(_runtime_error(m), match="expected"):
        m.shard_w2(torch.zeros(E, H, tp * L), tp - 1, plan)


def _runtime_error(m):  # type: ignore[no-untyped-def]
    import sys
    return sys.modules[m.__name__.rsplit(".", 1)[0] + "._runtime.errors"].LayoutContractError


def test_plan_none_is_a_named_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["compile", str(ROOT / "contracts" / "vllm_cpu_mxfp4_gpt_oss_moe.moe"), "--out", str(out),
                 "--no-cache"]) == 0
    m = load_generated(out, "vllm_cpu_mxfp4_gpt_oss_moe")
    error = _runtime_error(m)
    for call in (lambda: m.w13_weight_full_shape(None), lambda: m.w13_weight_shapes(None),
                 lambda: m.shard_w2_weight(torch.zeros(1, dtype=torch.uint8), 0, None),
                 lambda: m.alloc_w2_weight(None, 0)):
        with pytest.raises(error):
            call()


def test_waste_does_not_call_a_domain_with_empty_ranks_pad_free(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _verify(tmp_path, block_sharded_text(), capsys)
    assert rc == 0
    assert "no padding anywhere in the domain" not in out


def test_a_block_counterexample_names_only_ranks_that_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = re.sub(r"param tp_size: int in \{[^}]*\}", "param tp_size: int in {1}", uneven_text())
    text = text.replace("in blocks of 32", "in blocks of 64")
    _, out = _verify(tmp_path, text, capsys)
    assert "rank 1 starts" not in out


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("gpt_oss") / "out"
    assert main(["compile", str(ROOT / "contracts" / "vllm_cpu_mxfp4_gpt_oss_moe.moe"), "--out", str(out),
                 "--no-cache"]) == 0
    return load_generated(out, "vllm_cpu_mxfp4_gpt_oss_moe")


def test_load_refuses_a_source_dtype_that_shard_refuses(gpt_oss) -> None:  # type: ignore[no-untyped-def]
    m = gpt_oss
    error = _runtime_error(m)
    plan = m.plan(num_experts=1, hidden_size=64, intermediate_size=2880, tp_size=8)
    src = torch.full(m.w2_weight_scale_full_shape(plan), 2.0, dtype=torch.float8_e4m3fn)
    with pytest.raises(error):
        m.shard_w2_weight_scale(src, 7, plan)
    with pytest.raises(error):
        m.load_w2_weight_scale(m.alloc_w2_weight_scale(plan, 7), src, plan, 7)


def test_a_slice_read_of_the_wrong_shape_is_refused(gpt_oss) -> None:  # type: ignore[no-untyped-def]
    m = gpt_oss
    plan = m.plan(num_experts=1, hidden_size=64, intermediate_size=2880, tp_size=8)
    full = m.w2_weight_full_shape(plan)

    class LyingSlice:  # get_shape as a safetensors slice; every read a single byte
        def get_shape(self) -> list[int]:
            return list(full)

        def __getitem__(self, index: object) -> torch.Tensor:
            return torch.full((1,), 9, dtype=torch.uint8)

    with pytest.raises(_runtime_error(m)):
        m.load_w2_weight(m.alloc_w2_weight(plan, 7), LyingSlice(), plan, 7)
