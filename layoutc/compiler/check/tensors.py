"""Checking `tensor` declarations: axes, `when` alternatives, storage, code range and decode.

A tensor that passes joins ``scope.tensors`` (and its `fill`/`tail fill` spans the
scope's span tables); one that fails stays poisoned, so nothing later reports it again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import assert_never

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.exprs import Where, expect, expr
from layoutc.compiler.check.names import define, suggest
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.diagnostics import Related, Span
from layoutc.compiler.evaluate import TooLarge, finite_values
from layoutc.runtime.algebra import Word
from layoutc.runtime.numformats import CODES, STORAGE_FORMATS
from layoutc.runtime.vocab import DTYPES, OpKind, holds_byte

AXIS_NAMES = ("experts", "n", "k")


def declare_tensor(scope: Scope, sink: Sink, d: A.TensorDecl) -> None:
    """`tensor NAME: KIND PROJECTION [optional] { ... }` into ``scope.tensors``."""
    scope.poisoned.add(d.name)  # until it is registered
    if not define(scope, sink, d.name, d.span):
        return
    ok = True
    if d.projection not in ("w13", "w2"):
        sink.error("LC406", d.span, f"`{d.projection}` is not a projection; use `w13` or `w2`",
                   help=suggest(d.projection, ["w13", "w2"]))
        ok = False
    axes, guarded, axes_ok = _axes(scope, sink, d)
    ok = _clause_counts(sink, d) and axes_ok and ok
    storage = _storage(scope, sink, d.storage[0]) if len(d.storage) == 1 else None
    code_range = None
    if d.code:
        lo, hi, span = d.code[0]
        if lo > hi or hi - lo >= 4096:
            sink.error("LC302", span, f"code range {lo}..{hi} is empty or wider than 4096 codes")
            ok = False
        code_range = (lo, hi)
    decode, decode_ok = _decode(scope, sink, d, code_range)
    decode_ok = decode_ok and _codes_fit(sink, d, decode, code_range, axes, storage)
    decode_ok = decode_ok and _own_format(scope, sink, d, decode, storage)
    if not (ok and decode_ok) or storage is None:
        return
    _register(scope, sink, d, axes, guarded, storage, code_range, decode)


def _axes(scope: Scope, sink: Sink, d: A.TensorDecl) -> tuple[list[ir.Axis], list[ir.GuardedAxis], bool]:
    """The tensor's unguarded axes and `when` alternatives, and whether every one checked."""
    ok = True
    axes: list[ir.Axis] = []
    guarded: list[ir.GuardedAxis] = []
    seen: dict[str, Span] = {}
    for ax in d.axes:
        if ax.name not in AXIS_NAMES:
            sink.error("LC401", ax.span, f"unknown axis `{ax.name}`; axes are experts, n (outputs), k (reduction)",
                       help=suggest(ax.name, list(AXIS_NAMES)))
            ok = False
            continue
        if ax.when is not None:
            alternative = _guarded_axis(scope, sink, ax, ax.when)
            if alternative is None:
                ok = False
            else:
                guarded.append(alternative)
            continue
        if ax.name in seen:
            sink.error("LC401", ax.span, f"axis `{ax.name}` is declared twice",
                       related=(Related(seen[ax.name], "first declared here"),))
            ok = False
            continue
        seen[ax.name] = ax.span
        axis = _axis(scope, sink, ax)
        if axis is None:
            ok = False
        else:
            axes.append(axis)
    return axes, guarded, ok


def _clause_counts(sink: Sink, d: A.TensorDecl) -> bool:
    """One `fill` and one `storage` (LC407), at most one `tail fill` holding a value (LC415),
    at most one `code` and one `decode` (LC202)."""
    ok = True
    if len(d.fill) != 1:
        span = d.fill[1].span if d.fill else d.span
        sink.error("LC407", span, f"tensor `{d.name}` needs exactly one `fill` clause")
        ok = False
    if len(d.tail_fill) > 1:
        sink.error("LC415", d.tail_fill[1].span, f"tensor `{d.name}` has more than one `tail fill` clause")
        ok = False
    elif d.tail_fill and d.tail_fill[0].kind == "uninit":
        sink.error("LC415", d.tail_fill[0].span, f"`tail fill uninit` on `{d.name}`: a short rank's tail is read "
                   "by the kernel like live rows, so it must hold a value; write `tail fill N` or "
                   "`tail fill decoded V` (or drop the clause: the tail then holds the `fill`)")
        ok = False
    if len(d.storage) != 1:
        span = d.storage[1][1] if d.storage else d.span
        sink.error("LC407", span, f"tensor `{d.name}` needs exactly one `storage` clause")
        ok = False
    if len(d.code) > 1 or len(d.decode) > 1:
        sink.error("LC202", d.span, f"tensor `{d.name}` has more than one `code` or `decode` clause")
        ok = False
    return ok


def _decode(scope: Scope, sink: Sink, d: A.TensorDecl,
            code_range: tuple[int, int] | None) -> tuple[ir.Expr | None, bool]:
    """The tensor's `decode = ...` (a number over `code` and other tensors' values), and
    whether it checked; a decode needs a `code lo..hi` range unless it is a scale or zero."""
    if not d.decode:
        return None, True
    ok = True
    decode = expr(scope, sink, d.decode[0], Where(decode=d.name))
    if decode is not None and not isinstance(decode.type, (ir.RealT, ir.IntT)):
        sink.error("LC408", decode.span, f"decode must be a number, found {decode.type}")
        decode = None
    if decode is None:
        return None, False
    if code_range is None and d.kind not in ("scale", "zero"):
        sink.error("LC407", d.span, f"tensor `{d.name}` has `decode` but no `code lo..hi` range")
        ok = False
    for node in ir.walk(decode):
        if isinstance(node, ir.TensorValue) and node.tensor == d.name:
            sink.error("LC408", node.span, "a decode expression cannot refer to its own tensor; use `code`")
            ok = False
    return decode, ok


def _codes_fit(sink: Sink, d: A.TensorDecl, decode: ir.Expr | None, code_range: tuple[int, int] | None,
               axes: list[ir.Axis], storage: ir.Storage | None) -> bool:
    """LC416: every number format the decode names (`e2m1(code)`) decodes the declared
    `code lo..hi` (its codes: layoutc/runtime/numformats.py CODES), and a packed integer
    storage's element (bits / pack) holds every one of them, and every declared code (as
    unsigned or as two's-complement signed), whatever the decode: AWQ's `(code - z) * s`
    names no format, and its `code 0..15` needs the 4-bit slots of `pack 8` of int32."""
    pack = max((a.pack for a in axes), default=1)
    dtype = DTYPES[storage.dtype] if isinstance(storage, ir.FixedStorage) else None
    width = dtype.bits // pack if dtype is not None else None
    ok = True
    for node in ir.walk(decode) if decode is not None else ():
        if not (isinstance(node, ir.Op) and node.op.kind is OpKind.DECODE):
            continue
        lo, hi = CODES[node.op.value]
        if code_range is not None and not (lo <= code_range[0] and code_range[1] <= hi):
            sink.error("LC416", node.span, f"`{node.op.value}(code)` decodes codes {lo}..{hi}, but `{d.name}` "
                       f"declares `code {code_range[0]}..{code_range[1]}`",
                       help=f"declare `code {lo}..{hi}` (the stored codes, not the values they stand for)")
            ok = False
        elif width is not None and pack > 1 and hi.bit_length() > width:
            sink.error("LC416", node.span, f"`{node.op.value}(code)` needs {hi.bit_length()}-bit codes, but "
                       f"`{d.name}` packs {pack} per {storage.dtype if isinstance(storage, ir.FixedStorage) else ''}"
                       f" ({width} bits each)")
            ok = False
    # the declared codes themselves, whatever the decode (`(code - z) * s` names no format)
    if ok and code_range is not None and pack > 1 and dtype is not None and not dtype.floating \
            and dtype.bits % pack == 0 and width is not None:  # else LC411, in _register
        lo, hi = code_range
        if not (lo >= 0 and hi < 2 ** width) and not (-(2 ** (width - 1)) <= lo and hi < 2 ** (width - 1)):
            sink.error("LC416", d.code[0][2], f"`{d.name}` declares `code {lo}..{hi}`, but it packs {pack} per "
                       f"{storage.dtype if isinstance(storage, ir.FixedStorage) else ''} ({width} bits each: codes 0..{2 ** width - 1}, or "
                       f"{-(2 ** (width - 1))}..{2 ** (width - 1) - 1} signed)",
                       help=f"declare the codes a {width}-bit element holds, or pack fewer per element")
            ok = False
    return ok


def _own_format(scope: Scope, sink: Sink, d: A.TensorDecl, decode: ir.Expr | None,
                storage: ir.Storage | None) -> bool:
    """LC416: on a 1-byte float storage whose decode reads the code through a number format, the
    code is the stored byte (vocab.holds_byte) and the kernel reads that byte in the storage's own
    format, so every read of `code` (in the arm a `match` on the storage parameter picks for that
    dtype) is that format: `e4m3fn(code)` on float8_e4m3fn, never `e5m2(code)` or a bare `code`.
    A wider float (float16, bfloat16, float32) holds the code as its value, so no format reads it
    there (`match scale_dtype { float32 => code, uint8 => e8m0(code) }` is the way to say both)."""
    if decode is None or storage is None or not ir.reads_format(decode):
        return True
    match storage:
        case ir.FixedStorage(dtype=fixed):
            members, subject = [fixed], None
        case ir.ParamStorage(param=name):
            param = scope.params.get(name)
            members, subject = ([str(v) for v in param.values] if param is not None else []), name
        case _:
            assert_never(storage)
    for member in (m for m in members if m in DTYPES and DTYPES[m].floating):
        reads = _code_reads(decode, subject, member)
        if not holds_byte(member, True):  # a wider float holds the code as its value: no format reads it
            fmt, span = next(((f, sp) for f, sp in reads if f is not None), (None, None))
            if fmt is not None and span is not None:
                sink.error("LC416", span, f"`{d.name}` may be stored as {member}, which holds the code as its "
                           f"value, not as a byte: `{fmt}(code)` would read the value as a {fmt} byte",
                           help=f"store {fmt} codes as uint8 (or their own 1-byte float), or read the value bare")
                return False
            continue
        own = STORAGE_FORMATS[member]
        for fmt, span in reads:
            if fmt != own:
                read = "a bare `code`" if fmt is None else f"`{fmt}(code)`"
                sink.error("LC416", span, f"`{d.name}` is stored as {member} and its decode reads the code through "
                           f"a number format, so the code is the stored byte, which the kernel reads as {own}; "
                           f"{read} reads it otherwise", help=f"read the byte as `{own}(code)`")
                return False
    return True


def _code_reads(e: ir.Expr, subject: str | None, member: str) -> list[tuple[str | None, Span]]:
    """Every read of `code` in `e`: (the format it is read through, or None for a bare `code`; where),
    following only `member`'s arm of a `match` on parameter `subject`."""
    match e:
        case ir.Code():
            return [(None, e.span)]
        case ir.Op() if e.op.kind is OpKind.DECODE and isinstance(e.args[0], ir.Code):
            return [(e.op.value, e.span)]
        case ir.Select() if subject is not None and isinstance(e.subject, ir.Ref) and e.subject.name == subject:
            arm = next((v for m, v in e.cases if m == member), e.default)
            return [] if arm is None else _code_reads(arm, subject, member)
    return [r for c in ir.children(e) for r in _code_reads(c, subject, member)]


def _register(scope: Scope, sink: Sink, d: A.TensorDecl, axes: list[ir.Axis], guarded: list[ir.GuardedAxis],
              storage: ir.Storage, code_range: tuple[int, int] | None, decode: ir.Expr | None) -> None:
    """The last checks that need the whole tensor (packing LC411, `when` coverage LC413); then it is declared."""
    packed = [a for a in axes if a.pack > 1]
    if packed:
        dtype = DTYPES[storage.dtype] if isinstance(storage, ir.FixedStorage) else None
        bits = dtype.bits if dtype is not None and not dtype.floating else None
        if bits is None or any(bits % a.pack for a in packed):
            sink.error("LC411", d.storage[0][1], f"`pack {packed[0].pack}` needs an integer storage type whose "
                       f"width is a multiple of the pack factor (int32, int16, int8, uint8); found "
                       f"`{storage}`")
            return
    guarded = guarded + _tied_alternatives(scope, d, axes)
    names = {a.name for a in axes}
    for alt in guarded:
        if alt.axis.name not in names:
            sink.error("LC413", alt.axis.span, f"axis `{alt.axis.name}` has `when` alternatives but no unguarded "
                       "declaration: add one without `when` for the configurations no guard covers")
            return
    fill = d.fill[0]
    tail = d.tail_fill[0] if d.tail_fill else None
    scope.poisoned.discard(d.name)
    scope.tensors[d.name] = ir.Tensor(d.name, d.kind, d.projection,  # type: ignore[arg-type]
                                      d.optional, tuple(axes), fill.kind, fill.value, storage,
                                      code_range, decode, d.span, tuple(guarded),
                                      tail.kind if tail else None, tail.value if tail else None)  # type: ignore[arg-type]
    scope.fill_spans[d.name] = fill.span
    if tail is not None:
        scope.tail_spans[d.name] = tail.span


def _guarded_axis(scope: Scope, sink: Sink, ax: A.AxisDecl, when: A.Expr) -> ir.GuardedAxis | None:
    """`axis NAME = LAYOUT when GUARD`: GUARD is a bool over finite parameters only."""
    if isinstance(ax.spec, (A.LikeAxis, A.GroupsAxis)):
        sink.error("LC413", ax.span, "`when` applies to plain, `pad`, `halves`, `concat` and `interleave` axes; "
                   "a `like` or `groups` axis follows its reference's alternatives")
        return None
    guard = expr(scope, sink, when)
    if guard is None or not expect(sink, guard, ir.BOOL):
        return None
    for node in ir.walk(guard):
        if isinstance(node, ir.Ref) and (node.kind != "param" or not scope.params[node.name].finite):
            sink.error("LC413", node.span, f"a layout guard reads only finite parameters (enum, bool or "
                       f"int sets); `{node.name}` is not one")
            return None
    axis = _axis(scope, sink, ax)
    return None if axis is None else ir.GuardedAxis(guard, axis)


def _tied_alternatives(scope: Scope, d: A.TensorDecl, axes: list[ir.Axis]) -> list[ir.GuardedAxis]:
    """A `like T.a` or `groups(T.a, g)` axis follows the `when` alternatives of T.a."""
    out: list[ir.GuardedAxis] = []
    for ax in d.axes:
        if ax.when is not None or not isinstance(ax.spec, (A.LikeAxis, A.GroupsAxis)):
            continue
        ref = scope.tensors.get(ax.spec.tensor)
        mine = next((a for a in axes if a.name == ax.name), None)
        if ref is None or mine is None:
            continue
        for alt in ref.guarded:
            if alt.axis.name != ax.spec.axis:
                continue
            a = alt.axis
            out.append(ir.GuardedAxis(alt.guard, replace(mine, layout=a.layout, roles=a.roles,
                                                         logical=a.logical, padded=a.padded,
                                                         pack=a.pack if mine.kind != "groups" else 1,
                                                         pack_order=a.pack_order if mine.kind != "groups" else (0,))))
    return out


def _storage(scope: Scope, sink: Sink, item: tuple[str, Span]) -> ir.Storage | None:
    """`storage DTYPE` (a dtype of vocab.DTYPES), or `storage P` for an enum parameter P of dtypes."""
    name, span = item
    if name in DTYPES:
        return ir.FixedStorage(name)
    param = scope.params.get(name)
    if param is not None and isinstance(param.type, ir.EnumT):
        bad = [m for m in param.type.members if m not in DTYPES]
        if not bad:
            return ir.ParamStorage(name)
        sink.error("LC301", span, f"storage parameter `{name}` has members that are not dtypes: {', '.join(bad)}")
        return None
    sink.error("LC301", span, f"`{name}` is not a dtype or a dtype parameter",
               help=suggest(name, sorted(DTYPES)))
    return None


def _axis(scope: Scope, sink: Sink, ax: A.AxisDecl) -> ir.Axis | None:
    spec = ax.spec
    match spec:
        case A.PlainAxis():
            size = expr(scope, sink, spec.size)
            if size is None or not expect(sink, size, ir.INT):
                return None
            return ir.Axis(ax.name, "plain", Word.NONE, (), size, size, 1, None, None, ax.span)
        case A.PaddedAxis():
            return _padded_axis(scope, sink, ax, spec)
        case A.LikeAxis():
            ref = axis_ref(scope, sink, spec.tensor, spec.axis, spec.span)
            if ref is None:
                return None
            return ir.Axis(ax.name, ref.kind, ref.layout, ref.roles, ref.logical, ref.padded, ref.pack,
                           ref.group_of, ref.group_size, ax.span, ref.pack_order)
        case A.GroupsAxis():
            return _groups_axis(scope, sink, ax, spec)
        case _:
            assert_never(spec)


def _padded_axis(scope: Scope, sink: Sink, ax: A.AxisDecl, spec: A.PaddedAxis) -> ir.Axis | None:
    logical = expr(scope, sink, spec.logical)
    padded = expr(scope, sink, spec.padded)
    if logical is None or padded is None:
        return None
    if not (expect(sink, logical, ir.INT) and expect(sink, padded, ir.INT)):
        return None
    if spec.roles and (sorted(spec.roles) != ["gate", "up"]):
        sink.error("LC403", spec.span, f"roles must be `gate` and `up` (in either order), found "
                   f"{' | '.join(spec.roles)}")
        return None
    if spec.pack < 1 or spec.pack > 64:
        sink.error("LC308", spec.span, f"pack factor {spec.pack} is outside 1..64")
        return None
    order = spec.pack_order
    if order is not None and sorted(order) != list(range(spec.pack)):
        shown = ", ".join(map(str, order[:spec.pack + 1])) + (f", ... ({len(order)} in all)"
                                                              if len(order) > spec.pack + 1 else "")
        sink.error("LC417", spec.order_span or spec.span,
                   f"`pack {spec.pack} order ({shown})` is not a permutation of "
                   f"0..{spec.pack - 1}: each slot of a storage element holds exactly one of its {spec.pack} values",
                   help=f"list each of 0..{spec.pack - 1} once, slot 0 first (AWQ's int4: `pack 8 order "
                   "(0, 2, 4, 6, 1, 3, 5, 7)`)")
        return None
    return ir.Axis(ax.name, "padded", spec.layout, spec.roles, logical, padded, spec.pack,
                   None, None, ax.span, order or ())


def _groups_axis(scope: Scope, sink: Sink, ax: A.AxisDecl, spec: A.GroupsAxis) -> ir.Axis | None:
    """`groups(T.a, G)`: one entry per G rows of T.a; G over finite positive values (or -1)."""
    ref = axis_ref(scope, sink, spec.tensor, spec.axis, spec.span)
    if ref is None:
        return None
    if ref.kind == "groups":
        sink.error("LC402", spec.span, "cannot group an axis that is itself a groups axis")
        return None
    g = expr(scope, sink, spec.group_size)
    if g is None or not expect(sink, g, ir.INT):
        return None
    try:
        values = finite_values(g, scope.params, scope.lets, spent=scope.enum_work)
    except TooLarge:
        sink.error("LC307", g.span, "too much work to enumerate this group size's values")
        return None
    if values is None or any(not isinstance(v, int) or (v <= 0 and v != -1) for v in values):
        sink.error("LC303", g.span, "a group size must range over a finite set of positive values "
                   "(or -1 for one group over the whole axis)")
        return None
    return ir.Axis(ax.name, "groups", ref.layout, ref.roles, ref.logical, ref.padded, 1,
                   (spec.tensor, spec.axis), g, ax.span)


def axis_ref(scope: Scope, sink: Sink, tensor: str, axis: str, span: Span) -> ir.Axis | None:
    """`tensor.axis` of a tensor declared earlier (LC201) that has that axis (LC401)."""
    t = scope.tensors.get(tensor)
    if t is None and tensor in scope.poisoned:
        return None
    if t is None:
        sink.error("LC201", span, f"unknown tensor `{tensor}` (declare it before this one)",
                   help=suggest(tensor, list(scope.tensors)))
        return None
    for a in t.axes:
        if a.name == axis:
            return a
    sink.error("LC401", span, f"tensor `{tensor}` has no axis `{axis}`",
               help=suggest(axis, [a.name for a in t.axes]))
    return None
