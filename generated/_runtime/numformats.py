# Copied by `layoutc compile` from layoutc/runtime/numformats.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""Byte-encoded number formats that a scale or zero-point `decode` may name.

A stored byte decodes to an exact rational, or to None when it is NaN or an
infinity. Used by the checker (`fill decoded`), by the verifier (pad scales
must decode to finite, neutral values) and by tests. No solver, no torch.

Sources: OCP Microscaling Formats (MX) v1.0, section 5.4 (E8M0: 8 exponent
bits, bias 127, 0xFF is NaN, no zero, no sign) and section 5.3 / OCP 8-bit
floating point v1.0 (E4M3FN: bias 7, no infinities, 0x7F and 0xFF are NaN;
E5M2: bias 15, IEEE-like, exponent 31 is inf or NaN). These match torch's
`float8_e8m0fnu`, `float8_e4m3fn` and `float8_e5m2`.

E2M1 (FP4, the MXFP4 element format: OCP MX v1.0 section 5.3.3) is a 4-bit code, not a
byte: 1 sign bit, 2 exponent bits (bias 1), 1 mantissa bit, no infinities and no NaN, so
every nibble is finite (0..6 in magnitude). It is in NIBBLE_FORMATS, not FORMATS (FORMATS
holds the byte formats). DECODERS holds both: every format a contract's `decode` may name
(`decode = e2m1(code) * scale`), and CODES the codes each one decodes (the checker holds a
tensor's declared `code lo..hi` to it, LC416). The checker (`fill decoded`), the verifier
(pad values) and the quantized-checkpoint dequantizer (layoutc/tools/checkpoints/quant/
dequant.py, which builds its torch lookup tables from DECODERS) all read these functions:
one definition.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction


def e8m0(byte: int) -> Fraction | None:
    """E8M0 scale byte (MXFP4/MXFP8 block scales, stored as uint8): 2^(b - 127); 0xFF is NaN."""
    _byte(byte)
    if byte == 0xFF:
        return None
    return Fraction(2) ** (byte - 127)


def e4m3fn(byte: int) -> Fraction | None:
    """float8_e4m3fn byte (NVFP4 block scales viewed as uint8): 0x7F and 0xFF are NaN."""
    _byte(byte)
    sign = -1 if byte & 0x80 else 1
    exp, mant = (byte >> 3) & 0xF, byte & 0x7
    if exp == 0xF and mant == 0x7:
        return None
    if exp == 0:
        return sign * Fraction(mant, 8) * Fraction(2) ** -6
    return sign * (1 + Fraction(mant, 8)) * Fraction(2) ** (exp - 7)


def e5m2(byte: int) -> Fraction | None:
    """float8_e5m2 byte: exponent 31 is +-inf (mantissa 0) or NaN."""
    _byte(byte)
    sign = -1 if byte & 0x80 else 1
    exp, mant = (byte >> 2) & 0x1F, byte & 0x3
    if exp == 0x1F:
        return None
    if exp == 0:
        return sign * Fraction(mant, 4) * Fraction(2) ** -14
    return sign * (1 + Fraction(mant, 4)) * Fraction(2) ** (exp - 15)


def e2m1(nibble: int) -> Fraction:
    """FP4 E2M1 nibble (MXFP4 elements, two a byte, low nibble first): bias 1, exponent 0
    is subnormal (m / 2); every code is finite. 0x8 is -0, returned as 0 (a Fraction has
    no sign of zero). Raises ValueError for a value outside 0..15."""
    if not 0 <= nibble <= 0xF:
        raise ValueError(f"{nibble} is not a nibble (0..15)")
    sign = -1 if nibble & 0x8 else 1
    exp, mant = (nibble >> 1) & 0x3, nibble & 0x1
    if exp == 0:
        return sign * Fraction(mant, 2)
    return sign * (1 + Fraction(mant, 2)) * Fraction(2) ** (exp - 1)


def _byte(byte: int) -> None:
    if not 0 <= byte <= 0xFF:
        raise ValueError(f"{byte} is not a byte (0..255)")


FORMATS = {"e8m0": e8m0, "e4m3fn": e4m3fn, "e5m2": e5m2}
#: 4-bit codes (two a byte when packed).
NIBBLE_FORMATS = {"e2m1": e2m1}
#: Every format a contract's `decode` may name: `fmt(code)`.
DECODERS: dict[str, Callable[[int], Fraction | None]] = {**FORMATS, **NIBBLE_FORMATS}
#: The byte format of each 1-byte float storage (vocab.DTYPES): a decode on that storage that
#: reads its code through a format must read it through this one (the kernel reads the byte so; LC416).
STORAGE_FORMATS = {"float8_e4m3fn": "e4m3fn", "float8_e5m2": "e5m2"}
#: The codes each format decodes (inclusive): a tensor's `code lo..hi` must lie inside (LC416).
CODES = {"e8m0": (0, 0xFF), "e4m3fn": (0, 0xFF), "e5m2": (0, 0xFF), "e2m1": (0, 0xF)}
NAN_NOTE = {"e8m0": "E8M0 0xFF is NaN", "e4m3fn": "float8_e4m3fn 0x7F/0xFF are NaN",
            "e5m2": "float8_e5m2 exponent 31 is inf or NaN", "e2m1": "E2M1 has no NaN"}


def decode_byte(fmt: str, byte: int) -> Fraction | None:
    """Decode `byte` in format `fmt` (a key of FORMATS). Raises ValueError for a non-byte."""
    return FORMATS[fmt](byte)


def fits(fmt: str, code: int) -> bool:
    """Whether `code` is one of the codes format `fmt` (a key of DECODERS) decodes."""
    lo, hi = CODES[fmt]
    return lo <= code <= hi


def decode_code(fmt: str, code: int) -> Fraction | None:
    """The value of `code` in format `fmt` (a key of DECODERS): an exact rational, or None
    where it is NaN or infinite, or where the code is outside CODES[fmt] (no value)."""
    return DECODERS[fmt](code) if fits(fmt, code) else None
