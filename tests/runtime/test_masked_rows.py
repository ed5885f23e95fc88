"""The one-pass zero pad of the innermost axis (`layout._masked_rows`, used by `scatter`).

The oracle is torch's own `torch.nn.functional.pad` (constant 0) of the rank's slice, compared
bit for bit: the AND must keep every live bit pattern (NaN payloads, -0.0, infinities) and
write +0 bits in the pad, even where the row read past its end holds NaN or -0.0.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from layoutc.runtime import algebra, layout

pytestmark = pytest.mark.fast

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int8, torch.uint8]


def hostile(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random bits of `dtype`, with NaN, -0.0 and inf planted in every row's first entries."""
    gen = torch.Generator().manual_seed(seed)
    size = torch.empty(0, dtype=dtype).element_size()
    bits = torch.randint(0, 256, (*shape[:-1], shape[-1] * size), generator=gen, dtype=torch.uint8)
    t = bits.view(dtype).clone()
    if dtype.is_floating_point:
        t[..., 0] = float("nan")
        t[..., 1] = -0.0
        t[..., 2] = float("-inf")
    return t


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def pad_plan(shape: tuple[int, ...], width: int, start: int = 0, live: int | None = None) -> list[algebra.Runs]:
    n = shape[-1] if live is None else live
    plan: list[algebra.Runs] = [([(0, 0, d)], [], []) for d in shape[:-1]]
    return [*plan, ([(start, 0, n)], [(n, width)], [])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,width", [((3, 7, 176), 192), ((2, 5, 192), 256), ((3, 4), 8), ((4, 1, 9), 10)])
def test_pad_is_torch_pad_bit_for_bit(dtype: torch.dtype, shape: tuple[int, ...], width: int) -> None:
    src = hostile(shape, dtype)
    dst = torch.full((*shape[:-1], width), 7, dtype=dtype)
    assert layout._masked_rows(src, dst, pad_plan(shape, width), 0.0, None)
    expect = F.pad(src.view(torch.uint8).view(*shape, -1), (0, 0, 0, width - shape[-1])).view(*shape[:-1], -1)
    assert same_bits(dst, expect.view(dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rank_slice_of_a_full_tensor(dtype: torch.dtype) -> None:
    """shard's case: rank r's columns [r * 44, r * 44 + 44) of a full [E, H, 176] w2, padded to 48."""
    full = hostile((3, 5, 176), dtype, seed=1)
    for rank in range(4):
        dst = torch.empty(3, 5, 48, dtype=dtype)
        assert layout._masked_rows(full, dst, pad_plan(full.shape, 48, rank * 44, 44), 0.0, None)
        live = full[..., rank * 44:(rank + 1) * 44]
        assert same_bits(dst, torch.cat([live, torch.zeros(3, 5, 4, dtype=dtype)], -1))


def test_through_scatter_and_the_public_pad() -> None:
    """scatter takes the one-pass path for w2's shape and gives what the two-pass path gives."""
    src = hostile((4, 6, 22), torch.bfloat16, seed=2)
    plan = pad_plan(src.shape, 24)
    one, two = torch.full((4, 6, 24), 3.0, dtype=torch.bfloat16), torch.full((4, 6, 24), 5.0, dtype=torch.bfloat16)
    layout.scatter(src, one, plan, 0.0)
    layout._scatter(src, two, plan, 0.0, None)
    assert same_bits(one, two)


@pytest.mark.parametrize("case", ["pad wider than a row", "non-zero fill", "fill uninit", "tail",
                                  "strided source", "outer pad", "one row", "grad", "neg view", "conj view",
                                  "bool", "inference out", "run past the row"])
def test_other_plans_are_left_to_the_general_path(case: str) -> None:
    src = hostile((2, 3, 8), torch.float32, seed=3)
    dst = torch.empty(2, 3, 12, dtype=torch.float32)
    plan, fill, tail = pad_plan(src.shape, 12), 0.0, None
    if case == "pad wider than a row":
        dst = torch.empty(2, 3, 40, dtype=torch.float32)
        plan = pad_plan(src.shape, 40)
    elif case == "non-zero fill":
        fill = 1.0
    elif case == "fill uninit":
        fill = None  # type: ignore[assignment]
    elif case == "tail":
        plan = [*plan[:-1], ([(0, 0, 6)], [(8, 12)], [(6, 8)])]
    elif case == "strided source":
        src = hostile((2, 8, 3), torch.float32).transpose(1, 2)
    elif case == "outer pad":
        dst = torch.empty(2, 4, 12, dtype=torch.float32)
        plan = [plan[0], ([(0, 0, 3)], [(3, 4)], []), plan[2]]
    elif case == "one row":
        src, dst = src[:1, :1], torch.empty(1, 1, 12)
        plan = pad_plan(src.shape, 12)
    elif case == "grad":
        src = src.clone().requires_grad_()
    elif case == "neg view":  # a lazy negation: its bits are not the values copy_ writes
        src = torch._neg_view(torch.arange(48.0).view(2, 3, 8) - 20)
    elif case == "conj view":
        src = torch.complex(torch.arange(48.0), -torch.arange(48.0)).view(2, 3, 8).conj()
        dst = torch.empty(2, 3, 12, dtype=torch.complex64)
    elif case == "bool":  # copy_ writes a bool's byte as 0/1; an AND would keep byte 2
        src = torch.tensor([2, 0, 1, 3, 2, 2, 0, 1] * 6, dtype=torch.uint8).view(torch.bool).view(2, 3, 8)
        dst = torch.empty(2, 3, 12, dtype=torch.bool)
    elif case == "inference out":  # copy_ refuses to write it outside inference mode: so must this
        with torch.inference_mode():
            dst = torch.empty(2, 3, 12, dtype=torch.float32)
    elif case == "run past the row":
        plan = [*plan[:-1], ([(2, 0, 8)], [(8, 12)], [])]
    assert not layout._masked_rows(src, dst, plan, fill, tail)
    if case in ("inference out", "run past the row"):
        return  # the general path raises for these (torch's error; a slice past the end): callers check first
    with torch.no_grad():
        layout.scatter(src, dst, plan, fill, tail)  # and the general path still runs
    if case == "pad wider than a row":
        assert same_bits(dst, F.pad(src, (0, 32)))
    if case in ("neg view", "conj view", "bool"):
        assert torch.equal(dst[..., :8], src) and not dst[..., 8:].any()


def test_reads_stay_inside_the_source() -> None:
    """A source that ends right at the end of its storage: the last row is not read past it."""
    storage = hostile((1, 2 * 10), torch.bfloat16, seed=4).view(-1)
    src = storage.view(2, 10)
    dst = torch.empty(2, 16, dtype=torch.bfloat16)
    assert layout._masked_rows(src, dst, pad_plan(src.shape, 16), 0.0, None)
    assert same_bits(dst, torch.cat([src, torch.zeros(2, 6, dtype=torch.bfloat16)], 1))
