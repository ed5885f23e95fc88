"""Checking tensors: axes, `when` alternatives, storage, fills and the w13/w2 structure."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.base import _FLOATS, _STORAGE_BITS, AXIS_NAMES, DTYPES, _float_exact, _suggest
from layoutc.compiler.check.exprs import ExprChecks
from layoutc.compiler.diagnostics import Related, Span
from layoutc.compiler.evaluate import EvalError, TooLarge, eval_real, finite_values


class TensorChecks(ExprChecks):
    """Tensor declarations into ``ir.Tensor``s."""

    # ---- tensors ----
    def tensor(self, d: A.TensorDecl) -> None:
        self.poisoned.add(d.name)  # until it is registered
        if not self.define(d.name, d.span):
            return
        ok = True
        if d.projection not in ("w13", "w2"):
            self.err("LC406", d.span, f"`{d.projection}` is not a projection; use `w13` or `w2`",
                     help=_suggest(d.projection, ["w13", "w2"]))
            ok = False
        axes: list[ir.Axis] = []
        guarded: list[ir.GuardedAxis] = []
        seen: dict[str, Span] = {}
        for ax in d.axes:
            if ax.name not in AXIS_NAMES:
                self.err("LC401", ax.span, f"unknown axis `{ax.name}`; axes are experts, n (outputs), k (reduction)",
                         help=_suggest(ax.name, list(AXIS_NAMES)))
                ok = False
                continue
            if ax.when is not None:
                alternative = self.guarded_axis(ax)
                if alternative is None:
                    ok = False
                else:
                    guarded.append(alternative)
                continue
            if ax.name in seen:
                self.err("LC401", ax.span, f"axis `{ax.name}` is declared twice",
                         related=(Related(seen[ax.name], "first declared here"),))
                ok = False
                continue
            seen[ax.name] = ax.span
            axis = self.axis(ax)
            if axis is None:
                ok = False
            else:
                axes.append(axis)
        if len(d.fill) != 1:
            span = d.fill[1].span if d.fill else d.span
            self.err("LC407", span, f"tensor `{d.name}` needs exactly one `fill` clause")
            ok = False
        if len(d.tail_fill) > 1:
            self.err("LC415", d.tail_fill[1].span, f"tensor `{d.name}` has more than one `tail fill` clause")
            ok = False
        elif d.tail_fill and d.tail_fill[0].kind == "uninit":
            self.err("LC415", d.tail_fill[0].span, f"`tail fill uninit` on `{d.name}`: a short rank's tail is read "
                     "by the kernel like live rows, so it must hold a value; write `tail fill N` or "
                     "`tail fill decoded V` (or drop the clause: the tail then holds the `fill`)")
            ok = False
        if len(d.storage) != 1:
            span = d.storage[1][1] if d.storage else d.span
            self.err("LC407", span, f"tensor `{d.name}` needs exactly one `storage` clause")
            ok = False
        if len(d.code) > 1 or len(d.decode) > 1:
            self.err("LC202", d.span, f"tensor `{d.name}` has more than one `code` or `decode` clause")
            ok = False
        storage = self.storage(d.storage[0]) if len(d.storage) == 1 else None
        code_range = None
        if d.code:
            lo, hi, span = d.code[0]
            if lo > hi or hi - lo >= 4096:
                self.err("LC302", span, f"code range {lo}..{hi} is empty or wider than 4096 codes")
                ok = False
            code_range = (lo, hi)
        decode = None
        if d.decode:
            decode = self.expr(d.decode[0], decode=d.name)
            if decode is not None and not isinstance(decode.type, (ir.RealT, ir.IntT)):
                self.err("LC408", decode.span, f"decode must be a number, found {decode.type}")
                decode = None
            if decode is None:
                ok = False
            elif code_range is None and d.kind not in ("scale", "zero"):
                self.err("LC407", d.span, f"tensor `{d.name}` has `decode` but no `code lo..hi` range")
                ok = False
        for part in (d.decode[0] if d.decode else None,):
            if part is not None and decode is not None:
                for node in ir.walk(decode):
                    if isinstance(node, ir.TensorValue) and node.tensor == d.name:
                        self.err("LC408", node.span, "a decode expression cannot refer to its own tensor; use `code`")
                        ok = False
        if not ok or storage is None:
            return
        packed = [a for a in axes if a.pack > 1]
        if packed:
            bits = _STORAGE_BITS.get(storage)
            if bits is None or any(bits % a.pack for a in packed):
                self.err("LC411", d.storage[0][1], f"`pack {packed[0].pack}` needs an integer storage type whose "
                         f"width is a multiple of the pack factor (int32, int16, int8, uint8); found "
                         f"`{storage.removeprefix('param:')}`")
                return
        guarded += self.tied_alternatives(d, axes)
        names = {a.name for a in axes}
        for alt in guarded:
            if alt.axis.name not in names:
                self.err("LC413", alt.axis.span, f"axis `{alt.axis.name}` has `when` alternatives but no unguarded "
                         "declaration: add one without `when` for the configurations no guard covers")
                return
        fill = d.fill[0]
        kind = d.kind
        tail = d.tail_fill[0] if d.tail_fill else None
        self.poisoned.discard(d.name)
        self.tensors[d.name] = ir.Tensor(d.name, kind, d.projection,  # type: ignore[arg-type]
                                         d.optional, tuple(axes), fill.kind, fill.value, storage,
                                         code_range, decode, d.span, tuple(guarded),
                                         tail.kind if tail else None, tail.value if tail else None)  # type: ignore[arg-type]
        self.fill_spans[d.name] = fill.span
        if tail is not None:
            self.tail_spans[d.name] = tail.span

    def guarded_axis(self, ax: A.AxisDecl) -> ir.GuardedAxis | None:
        """`axis NAME = LAYOUT when GUARD`: GUARD is a bool over finite parameters only."""
        assert ax.when is not None
        if isinstance(ax.spec, (A.LikeAxis, A.GroupsAxis)):
            self.err("LC413", ax.span, "`when` applies to plain, `pad`, `halves`, `concat` and `interleave` axes; "
                     "a `like` or `groups` axis follows its reference's alternatives")
            return None
        guard = self.expr(ax.when)
        if guard is None or not self.expect(guard, ir.BOOL):
            return None
        for node in ir.walk(guard):
            if isinstance(node, ir.Ref) and (node.kind != "param" or not self.params[node.name].finite):
                self.err("LC413", node.span, f"a layout guard reads only finite parameters (enum, bool or "
                         f"int sets); `{node.name}` is not one")
                return None
        axis = self.axis(ax)
        return None if axis is None else ir.GuardedAxis(guard, axis)

    def tied_alternatives(self, d: A.TensorDecl, axes: list[ir.Axis]) -> list[ir.GuardedAxis]:
        """A `like T.a` or `groups(T.a, g)` axis follows the `when` alternatives of T.a."""
        out: list[ir.GuardedAxis] = []
        for ax in d.axes:
            if ax.when is not None or not isinstance(ax.spec, (A.LikeAxis, A.GroupsAxis)):
                continue
            ref = self.tensors.get(ax.spec.tensor)
            mine = next((a for a in axes if a.name == ax.name), None)
            if ref is None or mine is None:
                continue
            for alt in ref.guarded:
                if alt.axis.name != ax.spec.axis:
                    continue
                a = alt.axis
                out.append(ir.GuardedAxis(alt.guard, replace(mine, layout=a.layout, roles=a.roles,
                                                             logical=a.logical, padded=a.padded,
                                                             pack=a.pack if mine.kind != "groups" else 1)))
        return out

    def storage(self, item: tuple[str, Span]) -> str | None:
        name, span = item
        if name in DTYPES:
            return name
        param = self.params.get(name)
        if param is not None and isinstance(param.type, ir.EnumT):
            bad = [m for m in param.type.members if m not in DTYPES]
            if not bad:
                return f"param:{name}"
            self.err("LC301", span, f"storage parameter `{name}` has members that are not dtypes: {', '.join(bad)}")
            return None
        self.err("LC301", span, f"`{name}` is not a dtype or a dtype parameter",
                 help=_suggest(name, sorted(DTYPES)))
        return None

    def axis(self, ax: A.AxisDecl) -> ir.Axis | None:
        spec = ax.spec
        if isinstance(spec, A.PlainAxis):
            size = self.expr(spec.size)
            if size is None or not self.expect(size, ir.INT):
                return None
            return ir.Axis(ax.name, "plain", "none", (), size, size, 1, None, None, ax.span)
        if isinstance(spec, A.PaddedAxis):
            logical = self.expr(spec.logical)
            padded = self.expr(spec.padded)
            if logical is None or padded is None:
                return None
            if not (self.expect(logical, ir.INT) and self.expect(padded, ir.INT)):
                return None
            if spec.roles and (sorted(spec.roles) != ["gate", "up"]):
                self.err("LC403", spec.span, f"roles must be `gate` and `up` (in either order), found "
                         f"{' | '.join(spec.roles)}")
                return None
            if spec.pack < 1 or spec.pack > 64:
                self.err("LC308", spec.span, f"pack factor {spec.pack} is outside 1..64")
                return None
            return ir.Axis(ax.name, "padded", spec.layout, spec.roles, logical, padded, spec.pack,
                           None, None, ax.span)
        ref = self.axis_ref(spec.tensor, spec.axis, spec.span)
        if ref is None:
            return None
        if isinstance(spec, A.LikeAxis):
            return ir.Axis(ax.name, ref.kind, ref.layout, ref.roles, ref.logical, ref.padded, ref.pack,
                           ref.group_of, ref.group_size, ax.span)
        if ref.kind == "groups":
            self.err("LC402", spec.span, "cannot group an axis that is itself a groups axis")
            return None
        g = self.expr(spec.group_size)
        if g is None or not self.expect(g, ir.INT):
            return None
        try:
            values = finite_values(g, self.params, self.lets, spent=self.enum_work)
        except TooLarge:
            self.err("LC307", g.span, "too much work to enumerate this group size's values")
            return None
        if values is None or any(not isinstance(v, int) or (v <= 0 and v != -1) for v in values):
            self.err("LC303", g.span, "a group size must range over a finite set of positive values "
                     "(or -1 for one group over the whole axis)")
            return None
        return ir.Axis(ax.name, "groups", ref.layout, ref.roles, ref.logical, ref.padded, 1,
                       (spec.tensor, spec.axis), g, ax.span)

    def axis_ref(self, tensor: str, axis: str, span: Span) -> ir.Axis | None:
        t = self.tensors.get(tensor)
        if t is None and tensor in self.poisoned:
            return None
        if t is None:
            self.err("LC201", span, f"unknown tensor `{tensor}` (declare it before this one)",
                     help=_suggest(tensor, list(self.tensors)))
            return None
        for a in t.axes:
            if a.name == axis:
                return a
        self.err("LC401", span, f"tensor `{tensor}` has no axis `{axis}`",
                 help=_suggest(axis, [a.name for a in t.axes]))
        return None

    def resolve_fills(self) -> None:
        """Resolve every `fill decoded V` and `tail fill decoded V` to the stored code."""
        for name in list(self.tensors):
            t = self.tensors[name]
            if t.fill_kind == "decoded":
                code = self._resolve_decoded(name, t, t.fill, self.fill_spans[name], "fill decoded")
                if code is not None:
                    self.tensors[name] = t = _replace_fill(t, code)
            if t.tail_fill_kind == "decoded" and t.tail_fill is not None:
                code = self._resolve_decoded(name, t, t.tail_fill, self.tail_spans[name], "tail fill decoded")
                if code is not None:
                    self.tensors[name] = replace(t, tail_fill=code)

    def _resolve_decoded(self, name: str, t: ir.Tensor, want: int, span: Span, clause: str) -> int | None:
        """The first code of t's `code lo..hi` whose decode is `want` (the tensors it reads at
        their own pad values), or None after a diagnostic."""
        if t.decode is None:
            self.err("LC407", span, f"`{clause}` on `{name}` needs a `decode = ...` clause and a `code lo..hi` "
                     f"range; for an unquantized tensor write `{clause.removesuffix(' decoded')} N`")
            return None
        if any(isinstance(n, ir.Ref) for n in ir.walk(t.decode)):
            self.err("LC404", span, f"`{clause}` on `{name}` needs a decode that does not depend on parameters; "
                     f"write the stored code with `{clause.removesuffix(' decoded')} N`")
            return None
        refs: dict[str, Fraction] = {}
        for node in ir.walk(t.decode):
            if isinstance(node, ir.TensorValue):
                other = self.tensors.get(node.tensor)
                if other is None or other.fill_kind == "uninit" or other.decode is not None:
                    self.err("LC404", span, f"cannot resolve `{clause}` of `{name}`: `{node.tensor}` must be a "
                             "declared tensor with a numeric fill")
                    return None
                refs[node.tensor] = Fraction(other.fill)
        if t.code_range is None:
            self.err("LC407", span, f"`{clause}` on `{name}` needs a `code lo..hi` range")
            return None
        lo, hi = t.code_range
        self.fill_work += (hi - lo + 1) * sum(1 for _ in ir.walk(t.decode))
        if self.fill_work > 200_000:
            self.err("LC307", span, f"too much work to resolve `{clause}` codes; use smaller code ranges or "
                     f"simpler decode expressions, or write the code with `{clause.removesuffix(' decoded')} N`")
            return None
        try:
            for c in range(lo, hi + 1):
                if eval_real(t.decode, {}, Fraction(c), refs) == want:
                    return c
        except EvalError:
            pass
        self.err("LC404", span, f"no code in {lo}..{hi} of `{name}` decodes to {want} when the tensors it "
                 "reads hold their own pad values")
        return None

    def check_fill_ranges(self) -> None:
        """A stored pad code (and a `tail fill` code) must fit the storage type (per packed
        element when packed), and a float storage must represent it exactly."""
        for name, t in self.tensors.items():
            if t.fill_kind != "uninit":
                self._check_code(name, t, t.fill, self.fill_spans[name], "pad")
            if t.tail_fill is not None:
                self._check_code(name, t, t.tail_fill, self.tail_spans[name], "tail")

    def _check_code(self, name: str, t: ir.Tensor, code: int, span: Span, what: str) -> None:
        floats = [t.storage] if t.storage in _FLOATS else \
            [m for m in self.params[t.storage[6:]].values if isinstance(m, str) and m in _FLOATS] \
            if t.storage.startswith("param:") and t.storage[6:] in self.params else []
        for dtype in floats:
            if not _float_exact(code, *_FLOATS[dtype]):
                self.err("LC308", span, f"{what} value {code} of `{name}` is not exactly representable in {dtype}")
                return
        bits = _STORAGE_BITS.get(t.storage)
        if bits is None:
            return
        pack = max((a.pack for a in t.axes), default=1)
        width = bits // pack
        low = -(1 << (width - 1)) if t.storage != "uint8" or pack > 1 else 0
        high = (1 << width) - 1 if pack > 1 or t.storage == "uint8" else (1 << (width - 1)) - 1
        if not low <= code <= high:
            where = f"{width}-bit packed elements" if pack > 1 else t.storage
            self.err("LC308", span, f"{what} code {code} of `{name}` does not fit {where} ({low}..{high})")

    def check_tail_fills(self, shard: ir.Shard | None) -> None:
        """A `tail fill` needs a block shard (`shard ... in blocks of B`, the only shard with
        short ranks) and a tensor with an axis split over ranks (its intermediate axis)."""
        for name, span in self.tail_spans.items():
            t = self.tensors.get(name)
            if t is None:
                continue
            if shard is None or shard.blocks is None:
                self.err("LC415", span, f"`tail fill` on `{name}`: only a block shard (`shard FULL over tp_size in "
                         "blocks of B`) has ranks shorter than L; this contract's ranks all hold whole slices, so "
                         "there is no tail (remove the clause, or declare the block shard)")
            elif not any(ir.is_split(t, a) for a in t.axes):
                self.err("LC415", span, f"`tail fill` on `{name}`: it has no axis split over ranks (no intermediate "
                         f"axis: {t.projection}.{'n' if t.projection == 'w13' else 'k'}), so every rank holds it whole "
                         "and it has no tail")

    # ---- projection structure ----
    def structure(self, span: Span) -> None:
        for proj, inter, hidden in (("w13", "n", "k"), ("w2", "k", "n")):
            weights = [t for t in self.tensors.values() if t.kind == "weight" and t.projection == proj]
            if len(weights) != 1:
                self.err("LC409", span if not weights else weights[1].span,
                         f"the contract needs exactly one `weight {proj}` tensor, found {len(weights)}")
                continue
            w = weights[0]
            names = {a.name for a in w.axes}
            if not {inter, hidden} <= names:
                self.err("LC410", w.span, f"weight `{w.name}` needs axes `{inter}` and `{hidden}`")
                continue
            iax = w.axis(inter)
            if proj == "w2" and iax.segments != 1:
                self.err("LC410", iax.span, "w2's k axis holds one segment; use `pad(L -> P)` or a plain size")
            if iax.kind == "groups" or w.axis(hidden).kind == "groups":
                self.err("LC410", w.span, f"weight `{w.name}` cannot have a groups axis")
        seen_bias: dict[str, ir.Tensor] = {}
        for t in self.tensors.values():
            if t.kind == "bias":
                if t.projection in seen_bias:
                    self.err("LC412", t.span, f"`{t.name}` is a second bias of {t.projection}; a projection has at most "
                             "one bias", related=(Related(seen_bias[t.projection].span, "first bias here"),))
                seen_bias[t.projection] = t
        for t in self.tensors.values():
            if t.kind == "bias" and {a.name for a in t.axes} - {"experts", "n"}:
                self.err("LC410", t.span, f"bias `{t.name}` has only `experts` and `n` axes")
            if t.kind in ("scale", "zero") and t.decode is not None:
                for node in ir.walk(t.decode):
                    if isinstance(node, ir.TensorValue):
                        self.err("LC408", node.span, f"the decode of {t.kind} `{t.name}` reads only its own `code` "
                                 f"(a format such as `e8m0(code)`), not `{node.tensor}`")
                        break


def _replace_fill(t: ir.Tensor, code: int) -> ir.Tensor:
    return replace(t, fill=code)
