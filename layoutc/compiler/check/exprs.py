"""Checking expressions: names, axis sizes, operators, calls and `match`, typed into ``ir`` nodes."""

from __future__ import annotations

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.base import CheckerState, _side, _suggest
from layoutc.compiler.diagnostics import Related, Span
from layoutc.compiler.evaluate import TooLarge, finite_values
from layoutc.runtime.numformats import FORMATS


class ExprChecks(CheckerState):
    """Expression checks (every method returns None after reporting an error)."""

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
            # a byte-encoded number format (layoutc/runtime/numformats.py): `e8m0(code)`
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
