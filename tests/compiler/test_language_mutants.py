"""Issue 39, items 1 and 3: the language mutants (tests/support/regen_mutants.py LANG_MUTANTS), pinned.

Their kernels (Marlin, FlashInfer) need a GPU, so a proved mutant is held to the bytes its
generated module writes, decoded by torch's own float8 (`Tensor.float()` of a float8_e4m3fn
tensor, not layoutc's numformats): every pad and tail position must hold the byte the checker
resolved and decode to the value the verifier proved (`fill decoded 0` -> 0). Before the fix
(issue 39) the module wrote `fill_(128.0)`: byte 0x70, 128.0. A refused mutant must carry its code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from layoutc.cli import main
from layoutc.compiler.source import load
from tests.conftest import ROOT
from tests.support.loading import load_generated
from tests.support.regen_mutants import LANG_MUTANTS, render

CORPUS = ROOT / "tests" / "cases" / "mutants"
# name -> "decodes" (proved, and the written bytes decode as proved) or ("check", code)
EXPECTED: dict[str, Any] = {
    "mfp8_rt_pad_code1": "decodes",
    "nvfp4_rt_scale_fill128": "decodes",
    "wna16_rt_no_act_order_require": ("check", "LC309"),
}


def test_every_language_mutant_is_pinned_and_written() -> None:
    assert set(EXPECTED) == {m.name for m in LANG_MUTANTS}
    for mut in LANG_MUTANTS:
        assert (CORPUS / f"{mut.name}.moe").read_text(encoding="utf-8") == render(mut), \
            f"{mut.name}: run python -m tests.support.regen_mutants"


@pytest.mark.parametrize("name", [n for n, e in EXPECTED.items() if isinstance(e, tuple)])
def test_refused_mutants_carry_their_code(name: str) -> None:
    contract, diags, _ = load(str(CORPUS / f"{name}.moe"))
    assert contract is None
    assert [d.code for d in diags if d.severity == "error"] == [EXPECTED[name][1]], diags


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The proved mutants, compiled (compile verifies first: exit 0 means every property proved)."""
    out = tmp_path_factory.mktemp("lang_mutants")
    paths = [str(CORPUS / f"{n}.moe") for n, e in EXPECTED.items() if e == "decodes"]
    assert main(["compile", *paths, "--out", str(out)]) == 0
    return out


def _f8(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Finite float8_e4m3fn values (no NaN byte), none of them zero."""
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) + 0.5).to(torch.float8_e4m3fn)


def _pad_is_negative_zero(t: torch.Tensor, where: torch.Tensor) -> None:
    """Every element of `t` where `where` holds byte 0x80, which torch decodes to 0 (-0.0)."""
    assert where.any()
    assert bool((t.view(torch.uint8)[where] == 0x80).all()), t.view(torch.uint8)[where].unique()
    assert bool((t.float()[where] == 0).all()) and bool(torch.signbit(t.float()[where]).all())


def test_marlin_fp8_code1_pad_and_tail_decode_to_zero(compiled: Path) -> None:
    """`code 1..255`: `fill decoded 0` resolves to 128 = byte 0x80 (-0.0). The issue's case: block
    FP8 at I 768, tp 4, where rank 3 holds no live row (all tail), and MXFP8's pad at tp 2."""
    mod = load_generated(compiled, "mfp8_rt_pad_code1")
    block = mod.plan(num_experts=2, hidden_size=128, intermediate_size=768, tp_size=4, scheme="fp8_block128",
                     scale_dtype="float32", activation="silu")
    full = _f8(mod.w13_weight_full_shape(block), 0)
    rank3 = mod.shard_w13_weight(full, 3, block)
    _pad_is_negative_zero(rank3, torch.ones(rank3.shape, dtype=torch.bool))
    w2 = mod.shard_w2_weight(_f8(mod.w2_weight_full_shape(block), 1), 3, block)
    _pad_is_negative_zero(w2, torch.ones(w2.shape, dtype=torch.bool))
    alloc = mod.alloc_w13_weight(block, 3)
    _pad_is_negative_zero(alloc, torch.ones(alloc.shape, dtype=torch.bool))
    mx = mod.plan(num_experts=2, hidden_size=128, intermediate_size=64, tp_size=2, scheme="mxfp8",
                  scale_dtype="uint8", activation="silu")
    logical, padded = mod.w2_weight_shapes(mx)
    out = mod.pad_w2_weight(_f8(logical, 2), mx)
    assert tuple(out.shape) == padded and padded[2] > logical[2]
    pad = torch.zeros(padded, dtype=torch.bool)
    pad[:, :, logical[2]:] = True
    _pad_is_negative_zero(out, pad)
    assert bool((out.float()[~pad] != 0).all())  # live values untouched


def test_nvfp4_block_scale_fill128_pad_decodes_to_negative_zero(compiled: Path) -> None:
    """w13's float8 block scale with `fill 128`: the pad rows hold byte 0x80 (-0.0), so a pad weight
    (e2m1 code 0) times its scale is 0, as the verifier proved; 128.0 was written before."""
    mod = load_generated(compiled, "nvfp4_rt_scale_fill128")
    p = mod.plan(num_experts=2, hidden_size=256, intermediate_size=32, tp_size=1, activation="silu", dtype="bfloat16")
    logical, padded = mod.w13_weight_scale_shapes(p)
    out = mod.pad_w13_weight_scale(_f8(logical, 3), p)
    half_l, half_p = logical[1] // 2, padded[1] // 2
    assert half_p > half_l
    pad = torch.zeros(padded, dtype=torch.bool)
    pad[:, half_l:half_p] = True
    pad[:, half_p + half_l:] = True
    _pad_is_negative_zero(out, pad)
    assert bool((out.float()[~pad] != 0).all())
