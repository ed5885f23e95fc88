"""layoutc/runtime/numformats.py against torch's own float8 dtypes (every byte)."""

from __future__ import annotations

import math

import pytest

from layoutc.runtime.numformats import decode_byte

torch = pytest.importorskip("torch")

DTYPES = {"e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2", "e8m0": "float8_e8m0fnu"}


@pytest.mark.parametrize("fmt", sorted(DTYPES))
def test_every_byte_decodes_as_torch_does(fmt: str) -> None:
    dtype = getattr(torch, DTYPES[fmt], None)
    if dtype is None:
        pytest.skip(f"torch {torch.__version__} has no {DTYPES[fmt]}")
    values = torch.arange(256, dtype=torch.uint8).view(dtype).to(torch.float64).tolist()
    for byte, want in enumerate(values):
        got = decode_byte(fmt, byte)
        if math.isfinite(want):
            assert got is not None and float(got) == want, (fmt, byte, got, want)
        else:
            assert got is None, (fmt, byte, got, want)


def test_the_nan_codes_named_in_the_issue() -> None:
    assert decode_byte("e8m0", 0xFF) is None and decode_byte("e8m0", 0) == 2.0 ** -127
    assert decode_byte("e4m3fn", 0x7F) is None and decode_byte("e4m3fn", 0xFF) is None
    assert decode_byte("e4m3fn", 0x7E) == 448 and decode_byte("e4m3fn", 0) == 0
    with pytest.raises(ValueError):
        decode_byte("e8m0", 256)
