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


@pytest.mark.slow
def test_e2m1_is_the_ocp_table_the_tools_decode_with() -> None:
    """numformats.e2m1 (OCP MX v1.0 5.3.3: bias 1, exponent 0 subnormal) against the
    tables transformers 5.19 (integrations/mxfp4.py FP4_VALUES) and compressed-tensors 0.17
    (nvfp4/helpers.py FLOAT_TO_E2M1, the magnitudes) decode MXFP4 nibbles with."""
    from layoutc.runtime.numformats import NIBBLE_FORMATS, e2m1

    ocp = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    assert [float(e2m1(n)) for n in range(16)] == ocp + [-v for v in ocp]
    assert NIBBLE_FORMATS["e2m1"] is e2m1
    with pytest.raises(ValueError):
        e2m1(16)
    mxfp4 = pytest.importorskip("transformers.integrations.mxfp4")
    assert [float(e2m1(n)) for n in range(16)] == mxfp4.FP4_VALUES
    helpers = pytest.importorskip("compressed_tensors.compressors.nvfp4.helpers")
    assert [float(e2m1(n)) for n in range(8)] == helpers.FLOAT_TO_E2M1
