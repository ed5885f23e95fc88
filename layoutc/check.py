"""Semantic checks: resolve names, type expressions, validate tensors and kernel
clauses, and build the typed IR (``ir.py``).

``check(module, text)`` returns ``(contract | None, diagnostics)``; it never
raises on bad input.
"""

from __future__ import annotations

import builtins
import difflib
import keyword
import re
from dataclasses import dataclass, replace
from fractions import Fraction

from . import glues, ir
from . import syntax as A
from .diagnostics import Diagnostic, Related, Span, error, warning
from .evaluate import MAX_MAGNITUDE, EvalError, Interval, TooLarge, eval_real, finite_values, int_bounds
from .formats import FORMATS

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_NAME = 64
MAX_ENUM = 64
MAX_PARAMS = 64
MAX_ERRORS = 100  # per contract; the rest would only repeat the first causes
# Names the generated module uses itself, plus the layer-level names it binds.
KEYWORDS = frozenset({
    "contract", "source", "policy", "param", "let", "require", "admit", "tensor", "kernel", "glue",
    "if", "then", "else", "and", "or", "not", "match", "true", "false", "in", "int", "enum", "when",
    "shard", "over", "blocks", "of",
})
RESERVED = frozenset({
    "plan", "Plan", "torch", "math", "logging", "itertools", "dataclass", "dataclasses", "Any", "self", "cls",
    "config", "out", "rank", "full", "reason", "supported", "LayoutContractError", "KernelUnavailableError",
    "CONTRACT", "SOURCE_FILE", "SOURCE_SHA256", "SOURCES", "PROVED", "POLICY", "FALLBACK", "PACKAGE",
    "WORKAROUND_ENV", "code", "true", "false",
})
AXIS_NAMES = ("experts", "n", "k")
# Names integrators give the TP degree; `shard_*` and coverage read `tp_size` only (LC414).
TP_ALIASES = ("tp", "tp_degree", "tp_world_size", "tensor_parallel_size", "tensor_parallel", "world_size",
              "num_ranks", "n_ranks", "ranks", "num_shards", "shards")
_STORAGE_BITS = {"int32": 32, "int16": 16, "int8": 8, "uint8": 8}
# float dtype -> (mantissa bits, largest finite value)
_FLOATS = {"float32": (23, 3.4028234663852886e38), "bfloat16": (7, 3.3895313892515355e38),
           "float16": (10, 65504.0), "float8_e4m3fn": (3, 448.0), "float8_e5m2": (2, 57344.0)}


def _float_exact(value: int, mantissa: int, largest: float) -> bool:
    """Whether the integer `value` is exactly representable with `mantissa` fraction bits."""
    if value == 0:
        return True
    if abs(value) > largest:
        return False
    odd = abs(value)
    while odd % 2 == 0:
        odd //= 2
    return odd < (1 << (mantissa + 1))
DTYPES = frozenset({"bfloat16", "float16", "float32", "int32", "int8", "uint8", "int16",
                    "float8_e4m3fn", "float8_e5m2"})


@dataclass(frozen=True)
class GlueSpec:
    """The op slots and argument roles of one glue kind (from its declared interface)."""

    ops: tuple[str, ...]
    args: tuple[str, ...]
    summary: str


def _glue_kinds() -> dict[str, GlueSpec]:
    return {kind: GlueSpec(tuple(slot for slot, _ in g.interface.ops), g.interface.args, g.interface.summary)
            for kind, g in glues.registry().items()}


GLUE_KINDS: dict[str, GlueSpec] = _glue_kinds()


def _side(what: str) -> str:
    return "arguments" if what == "lcm" else ("second argument" if what.isidentifier() else "right side")


def _suggest(name: str, candidates: list[str]) -> str | None:
    """`did you mean X?` among names of similar length (bounded work on huge inputs)."""
    near = [c for c in candidates if abs(len(c) - len(name)) <= 3][:400]
    close = difflib.get_close_matches(name[:MAX_NAME], near, n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None


class _Checker:
    def __init__(self, module: A.Module, text: str) -> None:
        self.module = module
        self.text = text
        self.diags: list[Diagnostic] = []
        self.params: dict[str, ir.Param] = {}
        self.lets: dict[str, ir.Let] = {}
        self.defined_at: dict[str, Span] = {}
        self.members: dict[str, ir.EnumT] = {}
        self.tensors: dict[str, ir.Tensor] = {}
        # Names whose declaration already failed: later uses stay silent (no cascades).
        self.poisoned: set[str] = set()
        self.enum_work = [0, 2_000_000]
        self.bounds: dict[str, Interval] = {}
        self.reported_too_large = False
        self.fill_work = 0
        self.error_count = 0
        self.later_lets = {d.name for d in module.decls if isinstance(d, A.LetDecl)}

    # ---- helpers ----
    def full(self) -> bool:
        """Past MAX_ERRORS: stop doing work (suggestions) for diagnostics nobody will see."""
        return self.error_count > MAX_ERRORS

    def err(self, code: str, span: Span, msg: str, **kw: object) -> None:
        errors = self.error_count
        self.error_count += 1
        if errors < MAX_ERRORS:
            self.diags.append(error(code, span, msg, **kw))  # type: ignore[arg-type]
        elif errors == MAX_ERRORS:
            self.diags.append(error("LC107", span, f"more than {MAX_ERRORS} errors; stopping here"))

    def check_name(self, name: str, span: Span) -> bool:
        if not IDENT.match(name) or len(name) > MAX_NAME or name.startswith("_"):
            self.err("LC204", span, f"`{name[:80]}` is not a valid name: use [A-Za-z][A-Za-z0-9_]*, "
                     f"at most {MAX_NAME} characters, not starting with `_`")
            return False
        if keyword.iskeyword(name) or keyword.issoftkeyword(name) or name in RESERVED or name in KEYWORDS \
                or name in dir(builtins):
            self.err("LC203", span, f"`{name}` is reserved (a layoutc keyword, a Python keyword or builtin, or a name "
                     "the generated module uses)")
            return False
        return True

    def define(self, name: str, span: Span) -> bool:
        if not self.check_name(name, span):
            return False
        if name in self.defined_at:
            self.err("LC202", span, f"`{name}` is already defined",
                     related=(Related(self.defined_at[name], "first defined here"),))
            return False
        self.defined_at[name] = span
        return True

    # ---- expressions ----
    def expr(self, node: A.Expr, *, axes: bool = False, decode: str | None = None,
             self_arg: tuple[str, ir.Expr] | None = None) -> ir.Expr | None:
        kw = {"axes": axes, "decode": decode, "self_arg": self_arg}
        if isinstance(node, A.IntLit):
            return ir.Const(node.value, ir.INT, node.span)
        if isinstance(node, A.BoolLit):
            return ir.Const(node.value, ir.BOOL, node.span)
        if isinstance(node, A.Name):
            return self.name(node, decode, self_arg)
        if isinstance(node, A.AxisSize):
            if not axes:
                self.err("LC301", node.span, "axis sizes (`tensor.axis`) are only allowed in `kernel` clauses")
                return None
            return self.axis_size(node)
        if isinstance(node, A.Unary):
            operand = self.expr(node.operand, **kw)  # type: ignore[arg-type]
            if operand is None:
                return None
            if node.op == "not":
                return ir.Op("not", (operand,), ir.BOOL, node.span) if self.expect(operand, ir.BOOL) else None
            if isinstance(operand.type, ir.RealT):
                return ir.Op("neg", (operand,), ir.REAL, node.span)
            return ir.Op("neg", (operand,), ir.INT, node.span) if self.expect(operand, ir.INT) else None
        if isinstance(node, A.Binary):
            return self.binary(node, kw)
        if isinstance(node, A.Call):
            return self.call(node, kw)
        if isinstance(node, A.If):
            cond = self.expr(node.cond, **kw)  # type: ignore[arg-type]
            then = self.expr(node.then, **kw)  # type: ignore[arg-type]
            orelse = self.expr(node.orelse, **kw)  # type: ignore[arg-type]
            if cond is None or then is None or orelse is None or not self.expect(cond, ir.BOOL):
                return None
            if then.type != orelse.type:
                self.err("LC301", node.span, f"`if` branches have different types: {then.type} and {orelse.type}")
                return None
            return ir.Cond(cond, then, orelse, then.type, node.span)
        if isinstance(node, A.Match):
            return self.match(node, kw)
        raise AssertionError(node)

    def expect(self, e: ir.Expr, t: ir.Type) -> bool:
        if e.type != t:
            self.err("LC301", e.span, f"expected {t}, found {e.type}")
            return False
        return True

    def name(self, node: A.Name, decode: str | None, self_arg: tuple[str, ir.Expr] | None) -> ir.Expr | None:
        n = node.name
        if self_arg is not None and n == self_arg[0]:
            return self_arg[1]
        if n in self.params:
            return ir.Ref(n, "param", self.params[n].type, node.span)
        if n in self.lets:
            return ir.Ref(n, "let", self.lets[n].type, node.span)
        if n in self.members:
            return ir.Const(n, self.members[n], node.span)
        if decode is not None:
            if n == "code":
                return ir.Code(node.span)
            if n in self.tensor_names:
                return ir.TensorValue(n, node.span)
        if n in self.poisoned:
            return None
        if n in self.later_lets:
            self.err("LC208", node.span, f"`{n}` is used before its `let` is defined")
            return None
        if self.full():
            return None
        candidates = list(self.params) + list(self.lets) + list(self.members)
        if decode is not None:
            candidates += ["code", *self.tensor_names]
        self.err("LC201", node.span, f"unknown name `{n}`", help=_suggest(n, candidates))
        return None

    def axis_size(self, node: A.AxisSize) -> ir.Expr | None:
        tensor = self.tensors.get(node.tensor)
        if tensor is None and node.tensor in self.poisoned:
            return None
        if tensor is None:
            self.err("LC201", node.span, f"unknown tensor `{node.tensor}`",
                     help=_suggest(node.tensor, list(self.tensors)))
            return None
        if node.axis not in {a.name for a in tensor.axes}:
            self.err("LC401", node.span, f"tensor `{node.tensor}` has no axis `{node.axis}`",
                     help=_suggest(node.axis, [a.name for a in tensor.axes]))
            return None
        return ir.AxisSize(node.tensor, node.axis, node.span)

    def binary(self, node: A.Binary, kw: dict[str, object]) -> ir.Expr | None:
        left = self.expr(node.left, **kw)  # type: ignore[arg-type]
        right = self.expr(node.right, **kw)  # type: ignore[arg-type]
        if left is None or right is None:
            return None
        op = node.op
        if op in ("and", "or"):
            if self.expect(left, ir.BOOL) and self.expect(right, ir.BOOL):
                return ir.Op(op, (left, right), ir.BOOL, node.span)
            return None
        if op in ("==", "!="):
            if left.type != right.type or isinstance(left.type, ir.RealT):
                self.err("LC301", node.span, f"cannot compare {left.type} with {right.type}")
                return None
            return ir.Op(op, (left, right), ir.BOOL, node.span)
        if op in ("<", "<=", ">", ">="):
            if self.expect(left, ir.INT) and self.expect(right, ir.INT):
                return ir.Op(op, (left, right), ir.BOOL, node.span)
            return None
        # arithmetic
        if isinstance(left.type, ir.RealT) or isinstance(right.type, ir.RealT):
            if op not in ("+", "-", "*"):
                self.err("LC408", node.span, f"`{op}` is not allowed in a decode expression (use + - *)")
                return None
            for side in (left, right):
                if not isinstance(side.type, (ir.RealT, ir.IntT)):
                    self.err("LC301", side.span, f"expected a number, found {side.type}")
                    return None
            return ir.Op(op, (left, right), ir.REAL, node.span)
        if not (self.expect(left, ir.INT) and self.expect(right, ir.INT)):
            return None
        if op in ("/", "%") and not self.positive_divisor(right, op):
            return None
        return ir.Op(op, (left, right), ir.INT, node.span)

    def positive_divisor(self, e: ir.Expr, what: str) -> bool:
        if any(isinstance(n, ir.AxisSize) for n in ir.walk(e)):
            # axis sizes are symbolic; allow a literal divisor only
            if isinstance(e, ir.Const) and isinstance(e.value, int) and e.value > 0:
                return True
            self.err("LC303", e.span, f"the {_side(what)} of `{what}` must be a positive constant here")
            return False
        try:
            values = finite_values(e, self.params, self.lets, spent=self.enum_work)
        except TooLarge:
            if not self.reported_too_large:
                self.err("LC307", e.span, "too much work to enumerate this divisor's values over the contract's "
                         "finite parameters; use fewer or smaller finite domains")
                self.reported_too_large = True
            return False
        if values is None:
            self.err("LC303", e.span, f"the {_side(what)} of `{what}` must range over a finite set of "
                     "positive values (it depends on an integer range parameter)",
                     help="take the divisor from a finite `int in {...}` or enum parameter, or a table")
            return False
        bad = sorted(v for v in values if not isinstance(v, int) or v <= 0)
        if bad or not values:
            hint = "guard it, e.g. `if group_size == -1 then 1 else group_size`" \
                if any(isinstance(n, ir.Ref) and "group" in n.name for n in ir.walk(e)) else \
                "make every value of the divisor positive"
            self.err("LC303", e.span, f"the {_side(what)} of `{what}` can be {bad[0] if bad else 'undefined'}, "
                     "which is not positive", help=hint)
            return False
        return True

    def call(self, node: A.Call, kw: dict[str, object]) -> ir.Expr | None:
        if kw.get("decode") is not None and node.func in FORMATS:
            # a byte-encoded number format (layoutc/formats.py): `e8m0(code)`
            if len(node.args) != 1 or not (isinstance(node.args[0], A.Name) and node.args[0].name == "code"):
                self.err("LC408", node.span, f"`{node.func}` decodes this tensor's stored byte: write `{node.func}(code)`")
                return None
            return ir.Op(node.func, (ir.Code(node.args[0].span),), ir.REAL, node.span)
        if node.func not in ir.FUNCTIONS:
            self.err("LC305", node.span, f"unknown function `{node.func}`",
                     help=_suggest(node.func, list(ir.FUNCTIONS)))
            return None
        arity = ir.FUNCTIONS[node.func]
        if len(node.args) != arity:
            self.err("LC304", node.span, f"`{node.func}` takes {arity} arguments, given {len(node.args)}")
            return None
        args = [self.expr(a, **kw) for a in node.args]  # type: ignore[arg-type]
        if any(a is None for a in args):
            return None
        typed = [a for a in args if a is not None]
        if not all(self.expect(a, ir.INT) for a in typed):
            return None
        if node.func in ("round_up", "round_down", "cdiv") and not self.positive_divisor(typed[1], node.func):
            return None
        if node.func == "lcm" and not all(self.positive_divisor(a, "lcm") for a in typed):
            return None
        return ir.Op(node.func, tuple(typed), ir.INT, node.span)

    def match(self, node: A.Match, kw: dict[str, object]) -> ir.Expr | None:
        subject = self.name(node.subject, None, None)
        if subject is None:
            return None
        if not isinstance(subject.type, ir.EnumT):
            self.err("LC301", node.subject.span, f"`match` needs an enum, `{node.subject.name}` is {subject.type}")
            return None
        enum = subject.type
        cases: list[tuple[str, ir.Expr]] = []
        default: ir.Expr | None = None
        seen: dict[str, Span] = {}
        ok = True
        for arm in node.arms:
            value = self.expr(arm.value, **kw)  # type: ignore[arg-type]
            if arm.member in seen:
                self.err("LC202", arm.span, f"`{arm.member}` already has an arm",
                         related=(Related(seen[arm.member], "first arm here"),))
                ok = False
                continue
            seen[arm.member] = arm.span
            if arm.member != "_" and arm.member not in enum.members:
                self.err("LC301", arm.span, f"`{arm.member}` is not a member of {enum}",
                         help=_suggest(arm.member, list(enum.members)))
                ok = False
            if value is None:
                ok = False
                continue
            if arm.member == "_":
                default = value
            else:
                cases.append((arm.member, value))
        if not ok:
            return None
        types = {v.type for _, v in cases} | ({default.type} if default is not None else set())
        if len(types) != 1:
            self.err("LC301", node.span, "`match` arms have different types: "
                     + ", ".join(sorted(str(t) for t in types)))
            return None
        missing = [m for m in enum.members if m not in seen]
        if missing and default is None:
            self.err("LC306", node.span, f"`match` does not cover {', '.join(missing)}",
                     help="add the missing arms or a `_ => ...` arm")
            return None
        return ir.Select(subject, tuple(cases), default if missing else None, types.pop(), node.span)

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

    member_at: dict[str, Span]

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
        self.poisoned.discard(d.name)
        self.tensors[d.name] = ir.Tensor(d.name, kind, d.projection,  # type: ignore[arg-type]
                                         d.optional, tuple(axes), fill.kind, fill.value, storage,
                                         code_range, decode, d.span, tuple(guarded))
        self.fill_spans[d.name] = fill.span

    fill_spans: dict[str, Span]

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
        for name, t in list(self.tensors.items()):
            if t.fill_kind != "decoded":
                continue
            if t.decode is None:
                self.err("LC407", self.fill_spans[name], f"`fill decoded` on `{name}` needs a `decode = ...` "
                         "clause and a `code lo..hi` range; for an unquantized tensor write `fill N`")
                continue
            if any(isinstance(n, ir.Ref) for n in ir.walk(t.decode)):
                self.err("LC404", self.fill_spans[name], f"`fill decoded` on `{name}` needs a decode that does "
                         "not depend on parameters; write the stored code with `fill N`")
                continue
            refs: dict[str, Fraction] = {}
            bad = False
            for node in ir.walk(t.decode):
                if isinstance(node, ir.TensorValue):
                    other = self.tensors.get(node.tensor)
                    if other is None or other.fill_kind == "uninit" or other.decode is not None:
                        self.err("LC404", self.fill_spans[name], f"cannot resolve `fill decoded` of "
                                 f"`{name}`: `{node.tensor}` must be a declared tensor with a numeric fill")
                        bad = True
                        break
                    refs[node.tensor] = Fraction(other.fill)
            if bad:
                continue
            assert t.code_range is not None
            lo, hi = t.code_range
            self.fill_work += (hi - lo + 1) * sum(1 for _ in ir.walk(t.decode))
            if self.fill_work > 200_000:
                self.err("LC307", self.fill_spans[name], "too much work to resolve `fill decoded` codes; use "
                         "smaller code ranges or simpler decode expressions, or write the code with `fill N`")
                continue
            chosen = None
            try:
                for c in range(lo, hi + 1):
                    if eval_real(t.decode, {}, Fraction(c), refs) == t.fill:
                        chosen = c
                        break
            except EvalError:
                chosen = None
            if chosen is None:
                self.err("LC404", self.fill_spans[name], f"no code in {lo}..{hi} of `{name}` decodes to "
                         f"{t.fill} when the tensors it reads hold their own pad values")
                continue
            self.tensors[name] = _replace_fill(t, chosen)

    def check_fill_ranges(self) -> None:
        """A stored pad code must fit the storage type (per packed element when packed), and a
        float storage must represent it exactly."""
        for name, t in self.tensors.items():
            if t.fill_kind != "uninit":
                floats = [t.storage] if t.storage in _FLOATS else \
                    [m for m in self.params[t.storage[6:]].values if isinstance(m, str) and m in _FLOATS] \
                    if t.storage.startswith("param:") and t.storage[6:] in self.params else []
                for dtype in floats:
                    if not _float_exact(t.fill, *_FLOATS[dtype]):
                        self.err("LC308", self.fill_spans[name], f"pad value {t.fill} of `{name}` is not exactly "
                                 f"representable in {dtype}")
                        break
            bits = _STORAGE_BITS.get(t.storage)
            if bits is None or t.fill_kind == "uninit":
                continue
            pack = max((a.pack for a in t.axes), default=1)
            width = bits // pack
            low = -(1 << (width - 1)) if t.storage != "uint8" or pack > 1 else 0
            high = (1 << width) - 1 if pack > 1 or t.storage == "uint8" else (1 << (width - 1)) - 1
            if not low <= t.fill <= high:
                where = f"{width}-bit packed elements" if pack > 1 else t.storage
                self.err("LC308", self.fill_spans[name], f"pad code {t.fill} of `{name}` does not fit {where} "
                         f"({low}..{high})")

    # ---- kernel ----
    def kernel(self, d: A.KernelDecl) -> ir.Kernel | None:
        views: list[ir.View] = []
        aligns: list[ir.Align] = []
        args: list[ir.KernelArg] = []
        activation: ir.Expr | None = None
        seen_views: dict[tuple[str, str], Span] = {}
        arg_names: dict[str, Span] = {}
        for cl in d.clauses:
            if isinstance(cl, A.ViewClause):
                axis = self.axis_ref(cl.tensor, cl.axis, cl.span)
                if axis is None:
                    continue
                key = (cl.tensor, cl.axis)
                owner = self.tensors.get(cl.tensor)
                if owner is not None and owner.kind != "weight":
                    self.err("LC405", cl.span, f"`{cl.tensor}` is a {owner.kind} of {owner.projection}: the kernel reads "
                             f"it with its weight's view; declare the view on the `weight {owner.projection}` tensor")
                    continue
                if key in seen_views:
                    self.err("LC202", cl.span, f"`{cl.tensor}.{cl.axis}` already has a view",
                             related=(Related(seen_views[key], "first view here"),))
                    continue
                seen_views[key] = cl.span
                if cl.view != "linear" and axis.segments != 2:
                    self.err("LC405", cl.span, f"`{cl.view}` view on `{cl.tensor}.{cl.axis}`, which is not "
                             "segmented into gate and up")
                    continue
                if cl.roles and sorted(cl.roles) != ["gate", "up"]:
                    self.err("LC403", cl.span, f"the kernel's view roles must be `gate` and `up`, found "
                             f"{' | '.join(cl.roles)}")
                    continue
                if cl.view == "linear" and axis.segments == 2:
                    self.err("LC405", cl.span, f"`{cl.tensor}.{cl.axis}` is segmented; the kernel must read it "
                             "as `halves` or `interleave`")
                    continue
                views.append(ir.View(cl.tensor, cl.axis, cl.view, cl.roles, cl.span))
            elif isinstance(cl, A.AlignClause):
                cond = self.expr(cl.cond, axes=True)
                if cond is not None and self.expect(cond, ir.BOOL):
                    aligns.append(ir.Align(cond, cl.message, cl.span))
            elif isinstance(cl, A.ActivationClause):
                if activation is not None:
                    self.err("LC206", cl.span, "the kernel has more than one `activation` clause")
                    continue
                activation = self.activation(cl)
            else:
                if cl.name in arg_names or not self.check_name(cl.name, cl.span):
                    if cl.name in arg_names:
                        self.err("LC202", cl.span, f"kernel argument `{cl.name}` is defined twice",
                                 related=(Related(arg_names[cl.name], "first defined here"),))
                    continue
                arg_names[cl.name] = cl.span
                value = self.expr(cl.value)
                if value is None or not self.expect(value, ir.INT):
                    continue
                trims: list[tuple[str, str]] = []
                for ref in cl.trims:
                    axis = self.axis_ref(ref.tensor, ref.axis, ref.span)
                    if axis is None:
                        continue
                    if not axis.is_padded:
                        self.err("LC504", ref.span, f"`{ref.tensor}.{ref.axis}` is never padded, so the kernel "
                                 "cannot trim it")
                        continue
                    trims.append((ref.tensor, ref.axis))
                count = self.expr(cl.trim_count, self_arg=(cl.name, value))
                if count is None or not self.expect(count, ir.INT) or len(trims) != len(cl.trims):
                    continue
                args.append(ir.KernelArg(cl.name, value, tuple(trims), count, cl.span))
        return ir.Kernel(d.name, tuple(views), tuple(aligns), activation, tuple(args), d.span)

    def activation(self, cl: A.ActivationClause) -> ir.Expr | None:
        return self.activation_expr(cl.value, cl.span)

    def activation_expr(self, node: A.Expr, span: Span) -> ir.Expr | None:
        """An activation: a known activation name, or an enum of them."""
        if isinstance(node, A.Name) and node.name not in self.members and node.name not in self.params \
                and node.name not in self.lets and node.name not in self.poisoned:
            if node.name in ir.ACTIVATIONS:
                return ir.Const(node.name, ir.EnumT("activation", (node.name,)), span)
            self.err("LC503", node.span, f"unknown activation `{node.name}`; known: "
                     + ", ".join(sorted(ir.ACTIVATIONS)), help=_suggest(node.name, list(ir.ACTIVATIONS)))
            return None
        cl_span = span
        value = self.expr(node)
        if value is None:
            return None
        if not isinstance(value.type, ir.EnumT):
            self.err("LC503", cl_span, "the kernel's activation must be an activation name or an enum "
                     "parameter of activations")
            return None
        unknown = [m for m in value.type.members if m not in ir.ACTIVATIONS]
        if unknown:
            self.err("LC503", cl_span, f"unknown activation {', '.join(unknown)}; known: "
                     + ", ".join(sorted(ir.ACTIVATIONS)), help=_suggest(unknown[0], list(ir.ACTIVATIONS)))
            return None
        return value

    def glue(self, d: A.GlueDecl) -> ir.Glue | None:
        spec = GLUE_KINDS.get(d.kind)
        if spec is None:
            self.err("LC501", d.span, f"unknown glue kind `{d.kind}`",
                     help=_suggest(d.kind, list(GLUE_KINDS)) or f"known: {', '.join(sorted(GLUE_KINDS))}")
            return None
        ok = True
        if len(d.package) != 1:
            self.err("LC502", d.span, f"glue `{d.kind}` needs exactly one `package` clause")
            ok = False
        ops: dict[str, str] = {}
        given: dict[str, Span] = {}
        for name, target, span in d.ops:
            if name in given:
                self.err("LC502", span, f"op `{name}` is given twice", related=(Related(given[name], "first given here"),))
                ok = False
                continue
            given[name] = span
            if name not in spec.ops:
                self.err("LC502", span, f"glue `{d.kind}` has no op slot `{name}`; slots: {', '.join(spec.ops)}",
                         help=_suggest(name, list(spec.ops)))
                ok = False
                continue
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*", target):
                self.err("LC502", span, f"op `{target[:80]}` must look like `namespace::name`")
                ok = False
                continue
            ops[name] = target
        for name in spec.ops:
            if name not in given:
                self.err("LC502", d.span, f"glue `{d.kind}` needs `op {name} = \"namespace::name\"`")
                ok = False
        args: dict[str, ir.Expr] = {}
        given_args: dict[str, Span] = {}
        for name, value, span in d.args:
            if name in given_args:
                self.err("LC502", span, f"argument `{name}` is given twice",
                         related=(Related(given_args[name], "first given here"),))
                ok = False
                continue
            given_args[name] = span
            if name not in spec.args:
                self.err("LC502", span, f"glue `{d.kind}` has no argument `{name}`; arguments: "
                         f"{', '.join(spec.args) or 'none'}", help=_suggest(name, list(spec.args)))
                ok = False
                continue
            defined = isinstance(value, A.Name) and (value.name in self.params or value.name in self.lets
                                                     or value.name in self.members or value.name in self.poisoned)
            bare = name == "activation" and isinstance(value, A.Name) and not defined
            e = self.activation_expr(value, span) if bare else self.expr(value)
            if e is None:
                ok = False
                continue
            args[name] = e
        for name in spec.args:
            if name not in given_args:
                self.err("LC502", d.span, f"glue `{d.kind}` needs `arg {name} = ...`")
                ok = False
        if not ok:
            return None
        return ir.Glue(d.kind, d.package[0][0], tuple(sorted(ops.items())),
                       tuple(sorted(args.items())), d.span)

    def glue_matches_kernel(self, glue: ir.Glue, kernel: ir.Kernel) -> None:
        """The activation the glue passes to the kernel is the one the contract verified."""
        for name, value in glue.args:
            if name != "activation":
                continue
            if kernel.activation is None or ir.shape(value) != ir.shape(kernel.activation):
                self.err("LC502", glue.span, "the glue's `arg activation` must be exactly the kernel's `activation` "
                         "clause: the verifier proves the layout for the kernel's activation only",
                         related=(Related(kernel.span, "the kernel block"),))

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
    from dataclasses import replace
    return replace(t, fill=code)


def check(module: A.Module, text: str) -> tuple[ir.Contract | None, list[Diagnostic]]:
    """Check one parsed module and build its IR."""
    c = _Checker(module, text)
    c.member_at = {}
    c.fill_spans = {}
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
    from .cases import TooManyCases, layout_cases
    from .check_glue import check_binding

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
    from .parse import MAX_BYTES, parse
    if text is None:
        from .safeio import ReadError, read_bounded
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

