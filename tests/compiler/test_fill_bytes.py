"""The bytes a pad holds are the bytes the proof assumed (issue 39, item 1).

For every storage x decode x packing x fill the language admits, enumerated from the vocabulary
tables (vocab.DTYPES, numformats.DECODERS: a new storage or format is covered automatically), a
one-tensor contract goes through the checker; where it is admitted, the fill word the emitter
renders (render._fill_word) is written by the runtime's one write (layout.fill_runs ->
layout.write_code, and layout.scatter, whose one-pass pad `_masked_rows` takes the zero fill),
and the written bytes are held to the verifier's model:

- the stored code: the byte (a 1-byte float read through a format, vocab.holds_byte), each packed
  slot, the integer, or the float value, equals the code the checker resolved (IR `fill`);
- the value: what the kernel reads from those bytes, decoded by torch where torch has the format
  (`Tensor.float()` of a float storage; a uint8 byte viewed as torch's float8_e4m3fn / e5m2 /
  e8m0fnu), equals the decode the checker and verifier evaluate (evaluate.eval_real), NaN for
  a non-finite one.

Before the fix, `code 1..255` of `e4m3fn(code)` on float8_e4m3fn with code 128 wrote 0x70 (128.0).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layoutc.compiler import ir
from layoutc.compiler.emit import render as R
from layoutc.compiler.evaluate import EvalError, eval_real
from layoutc.compiler.source import load
from layoutc.runtime import layout
from layoutc.runtime.dtypes import TORCH
from layoutc.runtime.numformats import CODES, DECODERS, NIBBLE_FORMATS, STORAGE_FORMATS, decode_code
from layoutc.runtime.vocab import DTYPES, holds_byte

STORAGES = tuple(DTYPES)
DECODES: tuple[str | None, ...] = (None, "code", *DECODERS)  # none, the code read bare, each format
KINDS = ("fixed", "param")  # `storage S`, or `storage sd` with `param sd: enum {S, other}`
# torch's own decode of a byte format, where torch has the dtype (an oracle layoutc did not write)
TORCH_FORMAT = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e8m0": torch.float8_e8m0fnu}
EDGE_CODES = (0, 1, 8, 15, 16, 124, 127, 128, 252, 255, 256, -1, -128, 448)


def _packs(storage: str) -> tuple[int, ...]:
    """1, and for an integer storage the 4-bit slots (`pack bits/4`: nibbles, MXFP4 / int4 words)."""
    d = DTYPES[storage]
    return (1,) if d.floating else (1, d.bits // 4)


def _code_range(storage: str, decode: str | None, pack: int) -> tuple[int, int] | None:
    if decode is None:
        return None
    if decode in CODES:
        return CODES[decode]
    if pack > 1:
        return (0, 15)
    d = DTYPES[storage]
    if not d.floating and d.signed:
        return (-128, 127) if d.bits == 8 else (-2048, 2047)
    return (0, 255)


def combinations() -> list[tuple[str, str | None, int, str]]:
    """Every storage x decode x packing x storage kind the enumeration tries."""
    return [(s, dec, p, k) for s in STORAGES for dec in DECODES for p in _packs(s) for k in KINDS
            if not (k == "param" and p > 1)]  # a packed tensor needs a fixed integer storage (LC411)


def _other(storage: str) -> str:
    return "float32" if storage != "float32" else "bfloat16"


def contract_text(storage: str, decode: str | None, pack: int, kind: str, fill: int) -> str:
    """A one-subject contract: w2 stored as `storage` (or a dtype parameter with it), `fill`."""
    rng = _code_range(storage, decode, pack)
    if decode is None:
        body = ""
    else:
        read = "code" if decode == "code" else f"{decode}(code)"
        if kind == "param" and decode != "code":  # a format reads the byte only where it is a byte
            read = f"match sd {{ {storage} => {read}, {_other(storage)} => code }}"
        body = f"  code {rng[0]}..{rng[1]}\n  decode = {read}\n"  # type: ignore[index]
    stored = storage if kind == "fixed" else "sd"
    param = f"param sd: enum {{{storage}, {_other(storage)}}}\n" if kind == "param" else ""
    packed = f" pack {pack}" if pack > 1 else ""
    return f"""contract fillbytes
source "tests/compiler/test_fill_bytes.py"
policy error
param hidden_size: int in {{128}}
param inter: int in 1..4096
{param}let padded = round_up(inter, 64)
tensor w13: weight w13 {{
  axis experts = 2
  axis n = halves(gate | up, inter -> padded)
  axis k = hidden_size
  storage float32
  fill 0
}}
tensor w2: weight w2 {{
  axis experts = 2
  axis n = hidden_size
  axis k = pad(inter -> padded){packed}
  storage {stored}
{body}  fill {fill}
}}
kernel k {{
  view w13.n halves(gate | up)
  activation silu
}}
"""


def admitted(storage: str, decode: str | None, pack: int, kind: str, fill: int) -> tuple[ir.Contract, ir.Tensor] | None:
    contract, diags, _ = load("fillbytes.moe", contract_text(storage, decode, pack, kind, fill))
    if contract is None:
        assert any(d.severity == "error" for d in diags)
        return None
    return contract, next(t for t in contract.tensors if t.name == "w2")


def _written(word: str, storage: str, zero_path: bool) -> torch.Tensor:
    """A [2, 16] tensor of `storage` whose every element the runtime wrote as the pad `word`:
    through fill_runs (all pad), or through scatter (a live column, then the pad in the
    one-pass `_masked_rows` where it applies)."""
    fill: Any = eval(word, {"FormatCode": layout.FormatCode})  # the generated module's literal, in its namespace
    dtype = TORCH[storage]
    dst = torch.empty((2, 16), dtype=dtype)
    if not zero_path:
        layout.fill_runs(dst, [([(0, 0, 2)], [], []), ([], [(0, 16)], [])], fill)
        return dst
    src = torch.ones((2, 16), dtype=torch.float32).to(dtype) if dtype.is_floating_point else \
        torch.ones((2, 16), dtype=dtype)
    layout.scatter(src, dst, [([(0, 0, 2)], [], []), ([(0, 0, 1)], [(1, 16)], [])], fill)
    return dst[:, 1:]


def _kernel_values(t: torch.Tensor, storage: str, decode: str | None, pack: int, code: int) -> list[float]:
    """What a kernel reads from the written elements: torch's decode where torch has the format."""
    d = DTYPES[storage]
    if pack > 1:
        width = d.bits // pack
        raw = t.to(torch.int64) & ((1 << d.bits) - 1)
        slots = [int(((raw >> (width * j)) & ((1 << width) - 1)).unique().item()) for j in range(pack)]
        assert slots == [code & ((1 << width) - 1)] * pack, (slots, code)
        assert decode is None or decode == "code" or decode in NIBBLE_FORMATS
        if decode in NIBBLE_FORMATS:  # torch has no CPU float4 decode: numformats, checked in test_numformats
            return [float(DECODERS[decode](s)) for s in slots]  # type: ignore[arg-type]
        return [float(code)]
    if d.floating:
        if holds_byte(storage, decode in DECODERS):
            assert int(t.view(torch.uint8).unique().item()) == code  # the stored byte is the resolved code
        return t.float().flatten().tolist()
    assert int(t.unique().item()) == code  # an integer storage holds the code
    if decode in TORCH_FORMAT and d.bits == 8:
        return t.view(torch.uint8).view(TORCH_FORMAT[decode]).float().flatten().tolist()
    if decode in DECODERS:
        value = decode_code(decode, code)  # a format torch lacks (e2m1 in a byte): numformats
        return [math.nan if value is None else float(value)]
    return [float(code)]


def _model(t: ir.Tensor) -> float:
    """The verifier's value of the pad: the resolved code, decoded (NaN where not finite)."""
    if t.decode is None:
        return float(t.fill)
    try:
        return float(eval_real(t.decode, {}, Fraction(t.fill), {}))
    except (EvalError, ValueError):  # a code outside its format's codes has no value (decode_code: None)
        return math.nan


def check_combination(storage: str, decode: str | None, pack: int, kind: str, fill: int) -> bool:
    """Hold the written bytes to the model; False where the checker does not admit the combination."""
    got = admitted(storage, decode, pack, kind, fill)
    if got is None:
        return False
    contract, t = got
    assert t.fill == fill
    word = R._fill_word(t, members=R._members(contract, t))
    for zero_path in (False, True):
        values = _kernel_values(_written(word, storage, zero_path), storage, decode, pack, fill)
        want = _model(t) if kind == "fixed" or decode in (None, "code") else _model_in(contract, t, storage)
        for v in values:
            # the model has no value for a non-finite code (NaN stands for it: e5m2's 0x7C is +inf)
            assert (not math.isfinite(v) and math.isnan(want)) or v == want, \
                (storage, decode, pack, kind, fill, word, v, want)
    return True


def _model_in(contract: ir.Contract, t: ir.Tensor, storage: str) -> float:
    try:
        return float(eval_real(t.decode, {"sd": storage}, Fraction(t.fill), {}))  # type: ignore[arg-type]
    except (EvalError, ValueError):
        return math.nan


@pytest.mark.parametrize(("storage", "decode", "pack", "kind"), combinations())
def test_edge_codes_are_written_as_proved(storage: str, decode: str | None, pack: int, kind: str) -> None:
    """Every combination at the codes where byte and value part ways (0x80, 0x7F, 0xFF, 128 ...,
    and 124, e5m2's +inf, which hypothesis once drew in an int8 storage)."""
    for code in EDGE_CODES:
        check_combination(storage, decode, pack, kind, code)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(combo=st.sampled_from(combinations()), fill=st.integers(min_value=-300, max_value=70000))
def test_any_admitted_fill_is_written_as_proved(combo: tuple[str, str | None, int, str], fill: int) -> None:
    check_combination(*combo, fill)


def test_the_enumeration_is_complete() -> None:
    """Every storage, decode and packing the language admits is enumerated, each is admitted with
    some fill, and each 1-byte float has its own format and a torch oracle."""
    assert set(STORAGES) == set(DTYPES) and set(DECODES) - {None, "code"} == set(DECODERS)
    for storage, d in DTYPES.items():
        assert TORCH[storage].itemsize * 8 == d.bits and TORCH[storage].is_floating_point == d.floating
        if d.floating and d.bits == 8:
            assert storage in STORAGE_FORMATS and STORAGE_FORMATS[storage] in TORCH_FORMAT
    assert set(STORAGE_FORMATS) == {s for s, d in DTYPES.items() if d.floating and d.bits == 8}
    tried = {(s, dec, p, k) for s, dec, p, k in combinations()}
    admitted_any = {c for c in tried if any(admitted(*c, code) for code in (0, 1, 8, 128))}
    assert {s for s, *_ in admitted_any} == set(DTYPES)  # every storage is exercised
    assert {dec for _, dec, *_ in admitted_any} == set(DECODES)  # every decode is exercised
    assert {(s, p) for s, _, p, _ in admitted_any if p > 1} == {(s, DTYPES[s].bits // 4) for s in DTYPES
                                                                if not DTYPES[s].floating}
    # the storages whose code is a byte are exactly the 1-byte floats read through their format
    assert {s for s, dec, _, _ in admitted_any if dec in DECODERS and holds_byte(s, True)} == set(STORAGE_FORMATS)


def test_the_issue_case_writes_byte_0x80() -> None:
    """marlin_moe_fp8's float8 weight, `code 1..255`, `fill decoded 0`: code 128 = byte 0x80 = -0.0."""
    text = contract_text("float8_e4m3fn", "e4m3fn", 1, "fixed", 0).replace("  code 0..255\n", "  code 1..255\n") \
        .replace("  fill 0\n}\nkernel", "  fill decoded 0\n}\nkernel")
    contract, diags, _ = load("fillbytes.moe", text)
    assert contract is not None, diags
    t = next(t for t in contract.tensors if t.name == "w2")
    assert t.fill == 128 and t.fill_value == 0
    word = R._fill_word(t)
    dst = _written(word, "float8_e4m3fn", False)
    assert bool((dst.view(torch.uint8) == 0x80).all()) and bool((dst.float() == 0).all())


def test_every_fill_goes_through_write_code() -> None:
    """The runtime's fills have one write: no other `fill_` on a destination in layout.py or loading.py."""
    import inspect

    from layoutc.runtime import loading
    assert ".fill_(" not in inspect.getsource(layout).replace(inspect.getsource(layout.write_code), "")
    assert ".fill_(" not in inspect.getsource(loading)


def test_write_code_refuses_what_is_no_byte() -> None:
    """A FormatCode outside 0..255 on a 1-byte float, or not an int, is a named error, not a wrapped byte."""
    with pytest.raises(layout.LayoutContractError, match="not a byte"):
        layout.write_code(torch.empty(4, dtype=torch.float8_e5m2), layout.FormatCode(256))
    with pytest.raises(layout.LayoutContractError, match="must be an int"):
        layout.FormatCode(True)
    t = torch.empty(4, dtype=torch.float8_e5m2)
    layout.write_code(t, layout.FormatCode(0x7C))  # e5m2 0x7C is +inf: the byte, as the verifier decodes it
    assert bool(torch.isinf(t.float()).all())
