"""The pad-value passes: resolve `fill decoded V` to a stored code, check that every code fits
its storage, and that a `tail fill` has a tail to fill."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import assert_never

from layoutc.compiler import ir
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.diagnostics import Span
from layoutc.compiler.evaluate import EvalError, eval_real
from layoutc.runtime.numformats import CODES, fits
from layoutc.runtime.vocab import DTYPES, OpKind, Value, holds_byte

MAX_FILL_WORK = 200_000  # decode evaluations spent resolving one contract's `fill decoded` codes


def resolve_fills(scope: Scope, sink: Sink) -> None:
    """Pass: replace every `fill decoded V` and `tail fill decoded V` by the stored code that decodes to V."""
    for name in list(scope.tensors):
        t = scope.tensors[name]
        if t.fill_kind == "decoded":
            code = _resolve_decoded(scope, sink, name, t, t.fill, scope.fill_spans[name], "fill decoded")
            if code is not None:
                scope.tensors[name] = t = replace(t, fill=code, fill_value=t.fill)
        if t.tail_fill_kind == "decoded" and t.tail_fill is not None:
            code = _resolve_decoded(scope, sink, name, t, t.tail_fill, scope.tail_spans[name], "tail fill decoded")
            if code is not None:
                scope.tensors[name] = replace(t, tail_fill=code)


def _resolve_decoded(scope: Scope, sink: Sink, name: str, t: ir.Tensor, want: int, span: Span,
                     clause: str) -> int | None:
    """The first code of t's `code lo..hi` whose decode is `want` (the tensors it reads at
    their own pad values), or None after a diagnostic."""
    plain = clause.removesuffix(" decoded")
    if t.decode is None:
        sink.error("LC407", span, f"`{clause}` on `{name}` needs a `decode = ...` clause and a `code lo..hi` "
                   f"range; for an unquantized tensor write `{plain} N`")
        return None
    if any(isinstance(n, ir.Ref) for n in ir.walk(t.decode)):
        sink.error("LC404", span, f"`{clause}` on `{name}` needs a decode that does not depend on parameters; "
                   f"write the stored code with `{plain} N`")
        return None
    choices = _pad_refs(scope, t.decode)
    if isinstance(choices, str):
        sink.error("LC404", span, f"cannot resolve `{clause}` of `{name}`: `{choices}` must be a "
                   "declared tensor with a numeric fill (and a finite pad value: a decode of its own code "
                   "over finite parameters)")
        return None
    if t.code_range is None:
        sink.error("LC407", span, f"`{clause}` on `{name}` needs a `code lo..hi` range")
        return None
    lo, hi = t.code_range
    scope.fill_work += (hi - lo + 1) * sum(1 for _ in ir.walk(t.decode)) * len(choices)
    if scope.fill_work > MAX_FILL_WORK:
        sink.error("LC307", span, f"too much work to resolve `{clause}` codes; use smaller code ranges or "
                   f"simpler decode expressions, or write the code with `{plain} N`")
        return None
    for c in range(lo, hi + 1):
        try:
            if all(eval_real(t.decode, {}, Fraction(c), refs) == want for refs in choices):
                return c
        except EvalError:
            continue
    sink.error("LC404", span, f"no code in {lo}..{hi} of `{name}` decodes to {want} when the tensors it "
               "reads hold their own pad values")
    return None


def _pad_refs(scope: Scope, decode: ir.Expr) -> list[dict[str, Fraction]] | str:
    """The values of the tensors `decode` reads at their own pad codes, one dict per
    configuration of the finite parameters their own decodes read (`match scale_dtype
    {float32 => code, uint8 => e8m0(code)}`: two); the name of one that has no such value."""
    names = list(dict.fromkeys(n.tensor for n in ir.walk(decode) if isinstance(n, ir.TensorValue)))
    envs: list[dict[str, Value]] = [{}]
    for name in names:
        other = scope.tensors.get(name)
        if other is None or other.fill_kind == "uninit":
            return name
        for ref in (n.name for n in ir.walk(other.decode) if isinstance(n, ir.Ref)) if other.decode else ():
            param = scope.params.get(ref)
            if param is None or not param.finite:
                return name
            if all(ref not in env for env in envs):
                envs = [{**env, ref: v} for env in envs for v in param.values]
    out: list[dict[str, Fraction]] = []
    for env in envs:
        refs: dict[str, Fraction] = {}
        for name in names:
            other = scope.tensors[name]
            try:
                refs[name] = eval_real(other.decode, env, Fraction(other.fill), {}) if other.decode is not None \
                    else Fraction(other.fill)
            except EvalError:  # a pad that is not finite (e8m0 0xFF) has no value
                return name
        out.append(refs)
    return out


def check_fill_ranges(scope: Scope, sink: Sink) -> None:
    """Pass: a stored pad code (and a `tail fill` code) must fit the storage type (per packed
    element when packed): a byte on a 1-byte float read through a number format (vocab.holds_byte),
    and on any other float storage a value it represents exactly (LC308)."""
    for name, t in scope.tensors.items():
        if t.fill_kind != "uninit":
            _check_code(scope, sink, name, t, t.fill, scope.fill_spans[name], "pad")
        if t.tail_fill is not None:
            _check_code(scope, sink, name, t, t.tail_fill, scope.tail_spans[name], "tail")


def _check_code(scope: Scope, sink: Sink, name: str, t: ir.Tensor, code: int, span: Span, what: str) -> None:
    match t.storage:
        case ir.FixedStorage(dtype=fixed):
            names = [fixed]
        case ir.ParamStorage(param=param):
            names = [m for m in scope.params[param].values if isinstance(m, str)] if param in scope.params else []
        case _:
            assert_never(t.storage)
    byte = ir.reads_format(t.decode)
    for fmt in _formats(t.decode):
        if not fits(fmt, code):
            lo, hi = CODES[fmt]
            sink.error("LC308", span, f"{what} code {code} of `{name}` is not a code of {fmt} ({lo}..{hi}), which "
                       "its decode reads: no stored bits stand for it")
            return
    for dtype in (n for n in names if n in DTYPES and DTYPES[n].floating):
        if holds_byte(dtype, byte):  # the code is the stored byte (e4m3fn(code)), written as that byte
            if not 0 <= code <= 0xFF:
                sink.error("LC308", span, f"{what} code {code} of `{name}` is not a byte (0..255): its decode reads "
                           f"the code through a number format, so {dtype} stores it as its byte")
                return
        elif not DTYPES[dtype].exact(code):
            sink.error("LC308", span, f"{what} value {code} of `{name}` is not exactly representable in {dtype}")
            return
    pack = max((a.pack for a in t.axes), default=1)  # packed: a fixed integer storage (LC411)
    for stored in (DTYPES[n] for n in names if n in DTYPES and not DTYPES[n].floating):
        width = stored.bits // pack  # every integer member, a dtype parameter's too (fill_ would overflow)
        low = -(1 << (width - 1)) if stored.signed or pack > 1 else 0
        high = (1 << width) - 1 if pack > 1 or not stored.signed else (1 << (width - 1)) - 1
        if not low <= code <= high:
            where = f"{width}-bit packed elements" if pack > 1 else stored.name
            sink.error("LC308", span, f"{what} code {code} of `{name}` does not fit {where} ({low}..{high})")
            return


def _formats(decode: ir.Expr | None) -> list[str]:
    """The number formats `decode` reads the code through (`e2m1(code)`), in any arm."""
    if decode is None:
        return []
    return list(dict.fromkeys(str(n.op.value) for n in ir.walk(decode) if isinstance(n, ir.Op)
                              and n.op.kind is OpKind.DECODE and isinstance(n.args[0], ir.Code)))


def check_tail_fills(scope: Scope, sink: Sink) -> None:
    """Pass (after the shard): a `tail fill` needs a block shard (`shard ... in blocks of B`, the
    only shard with short ranks) and a tensor with an axis split over ranks (LC415)."""
    shard = scope.shard
    for name, span in scope.tail_spans.items():
        t = scope.tensors.get(name)
        if t is None:
            continue
        if shard is None or shard.blocks is None:
            sink.error("LC415", span, f"`tail fill` on `{name}`: only a block shard (`shard FULL over tp_size in "
                       "blocks of B`) has ranks shorter than L; this contract's ranks all hold whole slices, so "
                       "there is no tail (remove the clause, or declare the block shard)")
        elif not any(ir.is_split(t, a) for a in t.axes):
            sink.error("LC415", span, f"`tail fill` on `{name}`: it has no axis split over ranks (no intermediate "
                       f"axis: {t.projection}.{'n' if t.projection == 'w13' else 'k'}), so every rank holds it whole "
                       "and it has no tail")
