"""Byte-encoded number formats that a scale or zero-point `decode` may name.

A stored byte decodes to an exact rational, or to None when it is NaN or an
infinity. Used by the checker (`fill decoded`), by the verifier (pad scales
must decode to finite, neutral values) and by tests. No solver, no torch.

Sources: OCP Microscaling Formats (MX) v1.0, section 5.4 (E8M0: 8 exponent
bits, bias 127, 0xFF is NaN, no zero, no sign) and section 5.3 / OCP 8-bit
floating point v1.0 (E4M3FN: bias 7, no infinities, 0x7F and 0xFF are NaN;
E5M2: bias 15, IEEE-like, exponent 31 is inf or NaN). These match torch's
`float8_e8m0fnu`, `float8_e4m3fn` and `float8_e5m2`.
"""

from __future__ import annotations

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


def _byte(byte: int) -> None:
    if not 0 <= byte <= 0xFF:
        raise ValueError(f"{byte} is not a byte (0..255)")


FORMATS = {"e8m0": e8m0, "e4m3fn": e4m3fn, "e5m2": e5m2}
NAN_NOTE = {"e8m0": "E8M0 0xFF is NaN", "e4m3fn": "float8_e4m3fn 0x7F/0xFF are NaN",
            "e5m2": "float8_e5m2 exponent 31 is inf or NaN"}


def decode_byte(fmt: str, byte: int) -> Fraction | None:
    """Decode `byte` in format `fmt` (a key of FORMATS). Raises ValueError for a non-byte."""
    return FORMATS[fmt](byte)
