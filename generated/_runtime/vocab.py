# Copied by `layoutc compile` from layoutc/runtime/vocab.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""The contract vocabulary, defined once: operators, storage dtypes and activations.

The compiler (checker, evaluator, SMT encoder, emitter), the runtime, the generated
modules and the tools all read these tables; nothing else spells them. Standard
library only: the compiler imports it without torch, and `layoutc compile` copies it
into every generated package.

- `Op`: every operator and builtin of the expression language (docs/language.md,
  section 3), with its arity, its kind and its integer semantics (`apply`), and the
  number formats a `decode` may name (`e8m0(code)`, `e2m1(code)`: layoutc/runtime/numformats.py).
  Division is floor division and `%` its remainder, as in Python, for a positive
  divisor; a divisor <= 0 has no value (the finite-divisor rule, docs/language.md
  section 4.5: the checker admits only positive divisors, LC303). The generated
  `plan()` computes with the same helpers the checker evaluates with.
- `DTYPES`: the storage dtypes a tensor may have, with their bit width and, for
  floats, mantissa bits and largest finite value (IEEE 754 binary32/binary16,
  bfloat16; OCP 8-bit floating point v1.0 for float8_e4m3fn / float8_e5m2);
  `MODEL_DTYPES` those a model computes in, and `HF_DTYPES` how configs spell them.
- `ACTIVATIONS`: the activations a contract may name: gated or not, and the offset H
  adds to up (swigluoai: (up + 1), gpt-oss); `HF_ACTIVATIONS` maps the names
  Hugging Face configs use (`hidden_act`) to these.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

#: Integer results past this magnitude are refused: sizes never get there, and a
#: contract that does is rejected rather than computing astronomically large ints.
MAX_MAGNITUDE = 2**62


class OpError(ValueError):
    """An operator applied where it has no value (a division by a divisor <= 0, lcm of a
    non-positive value, a result past MAX_MAGNITUDE, a byte format outside a decode)."""


class OpKind(enum.Enum):
    ARITH = "arith"
    COMPARE = "compare"
    LOGIC = "logic"
    FUNCTION = "function"
    DECODE = "decode"  # a number format of a `decode` expression: `e8m0(code)`, `e2m1(code)`


class Op(enum.Enum):
    """The operators and builtins; the value is the spelling in a contract."""

    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    MOD = "%"
    NEG = "neg"
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    AND = "and"
    OR = "or"
    NOT = "not"
    ROUND_UP = "round_up"
    ROUND_DOWN = "round_down"
    CDIV = "cdiv"
    LCM = "lcm"
    GCD = "gcd"
    MIN = "min"
    MAX = "max"
    E8M0 = "e8m0"
    E4M3FN = "e4m3fn"
    E5M2 = "e5m2"
    E2M1 = "e2m1"

    @classmethod
    def parse(cls, text: str) -> Op:
        """The operator spelled `text`; ValueError for any other spelling."""
        return cls(text)

    @property
    def kind(self) -> OpKind:
        return _KIND[self]

    @property
    def arity(self) -> int:
        return 1 if self in (Op.NEG, Op.NOT) or self.kind is OpKind.DECODE else 2

    @property
    def is_function(self) -> bool:
        """A builtin called as `name(a, b)` in a contract."""
        return self.kind is OpKind.FUNCTION


_KIND = {
    **{o: OpKind.ARITH for o in (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MOD, Op.NEG)},
    **{o: OpKind.COMPARE for o in (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)},
    **{o: OpKind.LOGIC for o in (Op.AND, Op.OR, Op.NOT)},
    **{o: OpKind.FUNCTION for o in (Op.ROUND_UP, Op.ROUND_DOWN, Op.CDIV, Op.LCM, Op.GCD, Op.MIN, Op.MAX)},
    **{o: OpKind.DECODE for o in (Op.E8M0, Op.E4M3FN, Op.E5M2, Op.E2M1)},
}
FUNCTIONS = tuple(o for o in Op if o.is_function)
#: The number formats a decode names (the keys of layoutc/runtime/numformats.py's DECODERS).
DECODES = tuple(o for o in Op if o.kind is OpKind.DECODE)


def floordiv(a: int, b: int) -> int:
    """a // b (floor division); OpError for b <= 0."""
    if b <= 0:
        raise OpError(f"division by {b}")
    return a // b


def mod(a: int, b: int) -> int:
    """a % b (in 0..b-1); OpError for b <= 0."""
    if b <= 0:
        raise OpError(f"modulo by {b}")
    return a % b


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of `multiple` >= value; OpError for multiple <= 0."""
    return floordiv(value + multiple - 1, multiple) * multiple


def round_down(value: int, multiple: int) -> int:
    """The largest multiple of `multiple` <= value; OpError for multiple <= 0."""
    return floordiv(value, multiple) * multiple


def cdiv(value: int, divisor: int) -> int:
    """Ceiling division; OpError for divisor <= 0."""
    return -floordiv(-value, divisor)


def lcm(a: int, b: int) -> int:
    """Least common multiple of two positive ints; OpError otherwise."""
    if a <= 0 or b <= 0:
        raise OpError(f"lcm({a}, {b}) of a non-positive value")
    return math.lcm(a, b)


Value = int | bool | str


def apply(op: Op, args: list[Value]) -> Value:
    """`op` applied to already-evaluated arguments (ints, bools, enum members as str).

    Raises OpError as the helpers above, for an int result past MAX_MAGNITUDE, and for a
    byte format (it decodes a stored byte to a rational, which is no integer value).
    """
    result = _apply(op, args)
    if isinstance(result, int) and not isinstance(result, bool) and abs(result) > MAX_MAGNITUDE:
        raise OpError(f"value exceeds 2**62 in `{op.value}`")
    return result


def _apply(op: Op, args: list[Value]) -> Value:
    if op.kind is OpKind.DECODE:
        raise OpError(f"`{op.value}` decodes a stored code; it has no integer value")
    if op is Op.NOT:
        return not args[0]
    if op is Op.NEG:
        return -int(args[0])
    a, b = args
    if op is Op.EQ:
        return a == b
    if op is Op.NE:
        return a != b
    if op is Op.AND:
        return bool(a) and bool(b)
    if op is Op.OR:
        return bool(a) or bool(b)
    return _INT_OPS[op](int(a), int(b))


_INT_OPS: dict[Op, Callable[[int, int], int | bool]] = {
    Op.ADD: lambda x, y: x + y, Op.SUB: lambda x, y: x - y, Op.MUL: lambda x, y: x * y,
    Op.DIV: floordiv, Op.MOD: mod, Op.LT: lambda x, y: x < y, Op.LE: lambda x, y: x <= y,
    Op.GT: lambda x, y: x > y, Op.GE: lambda x, y: x >= y, Op.ROUND_UP: round_up,
    Op.ROUND_DOWN: round_down, Op.CDIV: cdiv, Op.LCM: lcm, Op.GCD: math.gcd, Op.MIN: min, Op.MAX: max,
}


@dataclass(frozen=True)
class DType:
    """A storage dtype: its name (torch's attribute name), bits, and for floats the mantissa
    bits and largest finite value (every integer up to 2**(mantissa + 1) is exact)."""

    name: str
    bits: int
    floating: bool
    mantissa: int = 0
    largest: float = 0.0
    signed: bool = True

    @property
    def bytes(self) -> int:
        return self.bits // 8

    def exact(self, value: int) -> bool:
        """Whether the integer `value` is stored exactly (a fill, a decoded code)."""
        if not self.floating:
            low, high = (-(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1) if self.signed else (0, (1 << self.bits) - 1)
            return low <= value <= high
        if value == 0:
            return True
        if abs(value) > self.largest:
            return False
        odd = abs(value)
        while odd % 2 == 0:
            odd //= 2
        return odd < (1 << (self.mantissa + 1))


DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("float32", 32, True, 23, 3.4028234663852886e38),
    DType("bfloat16", 16, True, 7, 3.3895313892515355e38),
    DType("float16", 16, True, 10, 65504.0),
    DType("float8_e4m3fn", 8, True, 3, 448.0),
    DType("float8_e5m2", 8, True, 2, 57344.0),
    DType("int32", 32, False),
    DType("int16", 16, False),
    DType("int8", 8, False),
    DType("uint8", 8, False, signed=False),
)}


def holds_byte(dtype: str, reads_format: bool) -> bool:
    """What a stored code is on storage `dtype` (a key of DTYPES): the one rule (docs/language.md 5.4).

    A code is the stored byte (its bit pattern, 0..255) when `dtype` is a 1-byte float
    (float8_e4m3fn, float8_e5m2) and the tensor's decode reads the code through a number format
    (`decode = e4m3fn(code) * scale`, `reads_format`); otherwise it is the stored value: an
    integer storage holds the code as its integer (its bit pattern too, two's complement for a
    signed one; a packed storage holds it in each slot), and a float storage read bare (`code *
    scale`, or no decode) holds the float whose value is the code (LC308: exactly). The checker
    (which codes fit), the verifier (what a pad decodes to) and the runtime's one write
    (layout.write_code: the byte through the storage's integer view) all read this.
    Raises KeyError for a dtype that is not in DTYPES."""
    d = DTYPES[dtype]
    return d.floating and d.bits == 8 and reads_format


#: The dtypes a model's activations and unquantized weights come in.
MODEL_DTYPES = ("bfloat16", "float16", "float32")
#: How Hugging Face configs spell a model dtype (`torch_dtype`, lower-cased) -> its DTYPES name.
HF_DTYPES: dict[str, str] = {
    "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
    "float32": "float32", "fp32": "float32", "float": "float32",
}


@dataclass(frozen=True)
class Activation:
    """An activation a contract may name: gated ones compute F(gate) * H(up), F(0) == 0;
    H(up) = up + up_offset (1 for swigluoai, gpt-oss's (up + 1))."""

    name: str
    gated: bool
    up_offset: int = 0


ACTIVATIONS: dict[str, Activation] = {a.name: a for a in (
    Activation("silu", True), Activation("gelu", True), Activation("gelu_tanh", True),
    Activation("swigluoai", True, 1), Activation("relu2", False), Activation("silu_no_mul", False),
    Activation("gelu_no_mul", False),
)}
#: Hugging Face `hidden_act` names (transformers' ACT2FN keys) -> contract activations.
HF_ACTIVATIONS: dict[str, str] = {
    "silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh", "swigluoai": "swigluoai", "relu2": "relu2",
}
