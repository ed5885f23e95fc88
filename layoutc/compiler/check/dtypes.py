"""The storage dtypes a tensor may have, their widths, and which pad codes they hold exactly."""

from __future__ import annotations

DTYPES = frozenset({"bfloat16", "float16", "float32", "int32", "int8", "uint8", "int16",
                    "float8_e4m3fn", "float8_e5m2"})
STORAGE_BITS = {"int32": 32, "int16": 16, "int8": 8, "uint8": 8}
# float dtype -> (mantissa bits, largest finite value)
FLOATS = {"float32": (23, 3.4028234663852886e38), "bfloat16": (7, 3.3895313892515355e38),
          "float16": (10, 65504.0), "float8_e4m3fn": (3, 448.0), "float8_e5m2": (2, 57344.0)}


def float_exact(value: int, mantissa: int, largest: float) -> bool:
    """Whether the integer `value` is exactly representable with `mantissa` fraction bits
    and magnitude at most `largest` (a float dtype of ``FLOATS``)."""
    if value == 0:
        return True
    if abs(value) > largest:
        return False
    odd = abs(value)
    while odd % 2 == 0:
        odd //= 2
    return odd < (1 << (mantissa + 1))
