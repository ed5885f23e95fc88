"""Semantic checks: resolve names, type expressions, validate tensors and kernel
clauses, and build the typed IR (``ir.py``).

``check(module, text)`` returns ``(contract | None, diagnostics)``; it never
raises on bad input.
"""

from __future__ import annotations

from dataclasses import replace

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.base import MAX_ENUM, MAX_PARAMS, TP_ALIASES
from layoutc.compiler.check.kernel import KernelChecks
from layoutc.compiler.diagnostics import Diagnostic, Related, Span, error, warning
from layoutc.compiler.evaluate import MAX_MAGNITUDE, TooLarge, finite_values, int_bounds, param_deps


class _Checker(KernelChecks):
    """Parameters, lets, rules and the shard declaration; the rest comes from its bases."""

    # ---- declarations ----
    def param(self, d: A.ParamDecl) -> None:
        if len(self.params) >= MAX_PARAMS:
            self.err("LC307", d.span, f"more than {MAX_PARAMS} parameters")
            self.poisoned.add(d.name)
            return
        if not self.define(d.name, d.span):
            self.poisoned.add(d.name)
            return
        self.poisoned.add(d.name)  # removed again below once the domain is valid
        dom = d.domain
        if isinstance(dom, A.RangeDomain):
            if dom.low > dom.high:
                self.err("LC302", dom.span, f"empty range {dom.low}..{dom.high}")
                return
            p = ir.Param(d.name, "range", ir.INT, (), dom.low, dom.high, d.span)
        elif isinstance(dom, A.SetDomain):
            if len(set(dom.values)) != len(dom.values):
                self.err("LC202", dom.span, "a value is listed twice in the set")
                return
            p = ir.Param(d.name, "set", ir.INT, tuple(sorted(dom.values)), min(dom.values),
                         max(dom.values), d.span)
        elif isinstance(dom, A.EnumDomain):
            if len(dom.members) > MAX_ENUM:
                self.err("LC307", dom.span, f"an enum may have at most {MAX_ENUM} members")
                return
            enum = ir.EnumT(d.name, dom.members)
            listed: dict[str, Span] = {}
            for member, span in zip(dom.members, dom.member_spans, strict=False):
                if member in listed:
                    self.err("LC202", span, f"enum member `{member}` is listed twice",
                             related=(Related(listed[member], "first listed here"),))
                    return
                listed[member] = span
            for member, span in zip(dom.members, dom.member_spans, strict=False):
                if not self.check_name(member, span):
                    return
                if member != member.lower():  # generated plan() matches values case-insensitively (issue 16)
                    self.err("LC204", span, f"enum member `{member}` must be lowercase: generated modules "
                             "compare values case-insensitively, so it could never be selected")
                    return
                if member in self.members or member in self.defined_at:
                    first = self.defined_at.get(member) or self.member_at[member]
                    self.err("LC207", span, f"enum member `{member}` clashes with another name",
                             related=(Related(first, "first defined here"),))
                    return
                self.members[member] = enum
                self.member_at[member] = span
            p = ir.Param(d.name, "enum", enum, dom.members, 0, len(dom.members) - 1, d.span)
        else:
            p = ir.Param(d.name, "bool", ir.BOOL, (False, True), 0, 1, d.span)
        if d.default is not None:
            if p.type != ir.INT or not (p.low <= d.default <= p.high if p.kind == "range" else d.default in p.values):
                self.err("LC302", d.span, f"default {d.default} of `{d.name}` is not an int in its domain")
                return
            p = replace(p, default=d.default)
        self.params[d.name] = p
        if p.type == ir.INT:
            self.bounds[d.name] = (p.low, p.high)
        self.poisoned.discard(d.name)

    def let(self, d: A.LetDecl) -> None:
        value = self.expr(d.value)
        if not self.define(d.name, d.span) or value is None:
            self.poisoned.add(d.name)
            return
        if value.type == ir.INT:
            bounds = int_bounds(value, self.bounds)
            if bounds is None or max(abs(bounds[0]), abs(bounds[1])) > MAX_MAGNITUDE:
                self.err("LC308", d.span, f"`{d.name}` can exceed 2**62 in magnitude for some configuration; "
                         "sizes never get there")
                self.poisoned.add(d.name)
                return
            self.bounds[d.name] = bounds
        self.lets[d.name] = ir.Let(d.name, value, value.type, d.span)

    def rule(self, d: A.RuleDecl) -> ir.Rule | None:
        cond = self.expr(d.cond)
        if cond is None or not self.expect(cond, ir.BOOL):
            return None
        return ir.Rule(d.kind, cond, d.message, d.span)

    def shard(self, d: A.ShardDecl | None, span: Span) -> ir.Shard | None:
        """`shard FULL over tp_size`, or the default `shard intermediate_size over tp_size`."""
        if d is None:
            if "tp_size" not in self.params:
                alias = next((p for p in TP_ALIASES if p in self.params), None)
                if alias is not None:
                    self.err("LC414", self.params[alias].span, f"parameter `{alias}` looks like the tensor-parallel "
                             "degree, but only `tp_size` is sharded over: with it named otherwise, no `shard_*` is "
                             "generated and no coverage is proved. Name it `tp_size`")
                    return None
                self.unsharded_per_rank()
                return None
            if "intermediate_size" not in self.params and "intermediate_size" not in self.lets:
                self.err("LC414", span, "the contract shards over `tp_size` but has no `intermediate_size`: "
                         "declare the full checkpoint size of the sharded axes with `shard FULL over tp_size`")
                return None
            full = self.expr(A.Name("intermediate_size", span))
            return None if full is None else ir.Shard(full, "tp_size", span, implicit=True)
        if d.count != "tp_size" or "tp_size" not in self.params:
            self.err("LC414", d.span, f"`shard ... over {d.count}`: the generated shard functions split over "
                     "the `tp_size` parameter (pass the effective shard count, e.g. dp * tp for MoE, as tp_size)")
            return None
        full = self.expr(A.Name(d.full, d.span))
        if full is None or not self.expect(full, ir.INT):
            return None
        if "tp_size" in param_deps(full, self.lets):
            self.err("LC414", d.span, f"`shard {d.full} over tp_size`: FULL is the whole checkpoint's size of the "
                     f"sharded axes, the same at every TP degree, but `{d.full}` depends on tp_size (a per-rank "
                     "size?): name the unsharded size, e.g. `intermediate_size`")
            return None
        blocks = None
        if d.blocks is not None:
            blocks = self.expr(d.blocks)
            if blocks is None or not self.expect(blocks, ir.INT):
                return None
            try:
                values = finite_values(blocks, self.params, self.lets, spent=self.enum_work)
            except TooLarge:
                values = None
            bad = sorted(v for v in values if not isinstance(v, int) or v < 1) if values is not None else None
            if bad is None or bad:
                which = f": it can be {bad[0]}" if bad else ": it depends on an integer range parameter"
                self.err("LC414", d.blocks.span, "`shard ... in blocks of B`: B must be a positive integer that "
                         f"ranges over finite parameters only{which}")
                return None
        return ir.Shard(full, "tp_size", d.span, blocks=blocks)


    def unsharded_per_rank(self) -> None:
        """LC414 when a contract with no shard still sizes its intermediate axes per rank.

        Without a shard, the generated module has no ranks: no `shard_*`, no coverage proof,
        and the glue adds the whole w2 bias. A logical intermediate size that divides by a
        parameter (`intermediate_size / tensor_model_parallel_size`) is one rank's slice,
        whatever the parameter is called: each rank would pad its own slice and add the full
        bias, which the rank sum counts tp times (issue 20: rel err 0.96-1.18 at tp 4).
        """
        for t in self.tensors.values():
            for axis in (*t.axes, *(g.axis for g in t.guarded)):
                if not ir.is_intermediate(t, axis) or axis.kind == "groups":
                    continue  # a groups axis divides by its group size; its weight axis is checked
                found = per_rank_divisors(axis.logical, self.lets)
                if found:
                    names = ", ".join(f"`{n}`" for n in sorted(found))
                    self.err("LC414", axis.span, f"`{t.name}.{axis.name}` is sized per rank (its logical size "
                             f"divides by {names}), but the contract states no shard: without one nothing is "
                             "sharded or proved covered, and every rank would add the whole w2 bias",
                             help="name the degree `tp_size` (the default `shard intermediate_size over "
                             "tp_size`), or state `shard FULL over tp_size`")
                    return


def per_rank_divisors(expr: ir.Expr, lets: dict[str, ir.Let]) -> set[str]:
    """The parameters that divide `expr` (`/` or `cdiv` by a parameter-dependent divisor),
    looking through `let`s: a size that divides by a parameter is a share of something."""
    found: set[str] = set()
    seen: set[str] = set()
    todo = [expr]
    while todo:
        for node in ir.walk(todo.pop()):
            if isinstance(node, ir.Ref) and node.kind == "let" and node.name in lets and node.name not in seen:
                seen.add(node.name)
                todo.append(lets[node.name].value)
            elif isinstance(node, ir.Op) and node.op in ("/", "cdiv"):
                found |= param_deps(node.args[1], lets)
    return found


def check(module: A.Module, text: str) -> tuple[ir.Contract | None, list[Diagnostic]]:
    """Check one parsed module and build its IR."""
    c = _Checker(module, text)
    c.member_at = {}
    c.fill_spans = {}
    c.tail_spans = {}
    contract: A.ContractDecl | None = None
    policy: A.PolicyDecl | None = None
    sources: list[str] = []
    rules: list[ir.Rule] = []
    kernel: ir.Kernel | None = None
    glue: ir.Glue | None = None
    kernel_decl: A.KernelDecl | None = None
    glue_decl: A.GlueDecl | None = None
    shard_decl: A.ShardDecl | None = None
    c.tensor_names = [d.name for d in module.decls if isinstance(d, A.TensorDecl)]
    for d in module.decls:
        if isinstance(d, A.ContractDecl):
            if contract is not None:
                c.err("LC206", d.span, "more than one `contract` declaration",
                      related=(Related(contract.span, "first declared here"),))
            else:
                contract = d
                c.check_name(d.name, d.span)
        elif isinstance(d, A.SourceDecl):
            sources.append(d.text)
        elif isinstance(d, A.ShardDecl):
            if shard_decl is not None:
                c.err("LC206", d.span, "more than one `shard` declaration",
                      related=(Related(shard_decl.span, "first declared here"),))
            else:
                shard_decl = d
        elif isinstance(d, A.PolicyDecl):
            if policy is not None:
                c.err("LC206", d.span, "more than one `policy` declaration",
                      related=(Related(policy.span, "first declared here"),))
            else:
                policy = d
                if d.fallback is not None:
                    c.check_name(d.fallback, d.span)
        elif isinstance(d, A.ParamDecl):
            c.param(d)
        elif isinstance(d, A.LetDecl):
            c.let(d)
        elif isinstance(d, A.RuleDecl):
            rule = c.rule(d)
            if rule is not None:
                rules.append(rule)
        elif isinstance(d, A.TensorDecl):
            c.tensor(d)
        elif isinstance(d, A.KernelDecl):
            if kernel_decl is not None:
                c.err("LC206", d.span, "more than one `kernel` declaration",
                      related=(Related(kernel_decl.span, "first declared here"),))
            else:
                kernel_decl = d
        elif isinstance(d, A.GlueDecl):
            if glue_decl is not None:
                c.err("LC206", d.span, "more than one `glue` declaration",
                      related=(Related(glue_decl.span, "first declared here"),))
            else:
                glue_decl = d
    top = Span(module.file, 1, 1, 1, 1)
    if contract is None:
        c.err("LC205", top, "missing `contract NAME` declaration")
    if not sources:
        c.err("LC209", contract.span if contract else top,
              "missing `source \"...\"`: every contract names the kernel file or PR it follows")
    c.resolve_fills()
    c.check_fill_ranges()
    if not any(d.severity == "error" for d in c.diags):
        c.structure(contract.span if contract else top)
    if kernel_decl is not None:
        kernel = c.kernel(kernel_decl)
    if glue_decl is not None:
        glue = c.glue(glue_decl)
    if glue is not None and kernel is not None:
        c.glue_matches_kernel(glue, kernel)
    if policy is None and contract is not None:
        c.diags.append(warning("LC210", contract.span, "no `policy` declared; using `policy error`"))
    shard = c.shard(shard_decl, contract.span if contract else top)
    c.check_tail_fills(shard)
    if any(d.severity == "error" for d in c.diags) or contract is None:
        return None, c.diags
    built = ir.Contract(
        name=contract.name, file=module.file, source_text=text, sources=tuple(sources),
        policy=policy.kind if policy else "error", fallback=policy.fallback if policy else None,
        params=tuple(c.params.values()), lets=tuple(c.lets.values()), rules=tuple(rules),
        tensors=tuple(c.tensors.values()), kernel=kernel, glue=glue, span=contract.span,
        enum_members=dict(c.members), shard=shard,
    )
    return _bound(built, c.diags)


def _bound(contract: ir.Contract, diags: list[Diagnostic]) -> tuple[ir.Contract | None, list[Diagnostic]]:
    """Hold the contract to its glue's interface and check that its layout cases are enumerable."""
    from layoutc.compiler.cases import TooManyCases, layout_cases
    from layoutc.compiler.check.binding import check_binding

    found = check_binding(contract)
    if not found:
        try:
            layout_cases(contract)
        except TooManyCases as exc:
            found.append(error("LC413", contract.span, str(exc)))
    if found:
        return None, diags + found
    return contract, diags


def load(path: str, text: str | None = None) -> tuple[ir.Contract | None, list[Diagnostic], str | None]:
    """Read, parse and check one contract file. Returns (contract, diagnostics, text)."""
    from layoutc.compiler.parse import MAX_BYTES, parse
    if text is None:
        from layoutc.compiler.safeio import ReadError, read_bounded
        try:  # bounded and non-blocking: FIFOs, devices and /proc files are refused (issue 16)
            raw = read_bounded(path, MAX_BYTES)
        except ReadError as exc:
            if exc.too_large:
                return None, [error("LC105", Span(path, 1, 1, 1, 1), f"contract file is larger than {MAX_BYTES} bytes")], None
            return None, [error("LC100", Span(path, 1, 1, 1, 1), f"cannot read contract: {exc.reason}")], None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[:exc.start].count(b"\n") + 1
            column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
            return None, [error("LC100", Span(path, line, column, line, column + 1),
                                f"contract is not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}")], None
        text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark is not part of the contract
    module, diags = parse(text, path)
    if module is None:
        return None, diags, text
    contract, more = check(module, text)
    return contract, diags + more, text

