"""Checking expressions: names, axis sizes, operators, calls and `match`, typed into ``ir`` nodes.

Every function returns None after reporting an error (or when a poisoned name makes the
expression meaningless), so callers only test for None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.names import suggest
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.diagnostics import Related, Span
from layoutc.compiler.evaluate import TooLarge, finite_values
from layoutc.runtime.vocab import FUNCTIONS, Op, OpKind


@dataclass(frozen=True)
class Where:
    """What an expression may refer to where it stands.

    axes: axis sizes (`tensor.axis`), in `kernel` clauses only.
    decode: the tensor whose `decode = ...` this is: `code`, the other tensors' values
        and number formats (`e8m0(code)`) are then in scope.
    self_arg: (name, value) of the kernel argument whose `by` count this is.
    """

    axes: bool = False
    decode: str | None = None
    self_arg: tuple[str, ir.Expr] | None = None


PLAIN = Where()


def _side(what: str) -> str:
    return "arguments" if what == "lcm" else ("second argument" if what.isidentifier() else "right side")


def expr(scope: Scope, sink: Sink, node: A.Expr, where: Where = PLAIN) -> ir.Expr | None:
    """Type `node` into an ``ir`` expression, or None after reporting why it is wrong."""
    match node:
        case A.IntLit():
            return ir.Const(node.value, ir.INT, node.span)
        case A.BoolLit():
            return ir.Const(node.value, ir.BOOL, node.span)
        case A.Name():
            return name(scope, sink, node, where.decode, where.self_arg)
        case A.AxisSize():
            if not where.axes:
                sink.error("LC301", node.span, "axis sizes (`tensor.axis`) are only allowed in `kernel` clauses")
                return None
            return axis_size(scope, sink, node)
        case A.Unary():
            return _unary(scope, sink, node, where)
        case A.Binary():
            return _binary(scope, sink, node, where)
        case A.Call():
            return _call(scope, sink, node, where)
        case A.If():
            return _if(scope, sink, node, where)
        case A.Match():
            return _match(scope, sink, node, where)
        case _:
            assert_never(node)


def expect(sink: Sink, e: ir.Expr, t: ir.Type) -> bool:
    """Whether `e` has type `t`; LC301 when not."""
    if e.type != t:
        sink.error("LC301", e.span, f"expected {t}, found {e.type}")
        return False
    return True


def name(scope: Scope, sink: Sink, node: A.Name, decode: str | None,
         self_arg: tuple[str, ir.Expr] | None) -> ir.Expr | None:
    """A name: a parameter, let, enum member, or (in a decode) `code` or a tensor's value."""
    n = node.name
    if self_arg is not None and n == self_arg[0]:
        return self_arg[1]
    if n in scope.params:
        return ir.Ref(n, "param", scope.params[n].type, node.span)
    if n in scope.lets:
        return ir.Ref(n, "let", scope.lets[n].type, node.span)
    if n in scope.members:
        return ir.Const(n, scope.members[n], node.span)
    if decode is not None:
        if n == "code":
            return ir.Code(node.span)
        if n in scope.tensor_names:
            return ir.TensorValue(n, node.span)
    if n in scope.poisoned:
        return None
    if n in scope.later_lets:
        sink.error("LC208", node.span, f"`{n}` is used before its `let` is defined")
        return None
    if sink.full():
        return None
    candidates = list(scope.params) + list(scope.lets) + list(scope.members)
    if decode is not None:
        candidates += ["code", *scope.tensor_names]
    sink.error("LC201", node.span, f"unknown name `{n}`", help=suggest(n, candidates))
    return None


def axis_size(scope: Scope, sink: Sink, node: A.AxisSize) -> ir.Expr | None:
    """`tensor.axis`: a declared tensor's declared axis."""
    tensor = scope.tensors.get(node.tensor)
    if tensor is None and node.tensor in scope.poisoned:
        return None
    if tensor is None:
        sink.error("LC201", node.span, f"unknown tensor `{node.tensor}`",
                   help=suggest(node.tensor, list(scope.tensors)))
        return None
    if node.axis not in {a.name for a in tensor.axes}:
        sink.error("LC401", node.span, f"tensor `{node.tensor}` has no axis `{node.axis}`",
                   help=suggest(node.axis, [a.name for a in tensor.axes]))
        return None
    return ir.AxisSize(node.tensor, node.axis, node.span)


def _unary(scope: Scope, sink: Sink, node: A.Unary, where: Where) -> ir.Expr | None:
    operand = expr(scope, sink, node.operand, where)
    if operand is None:
        return None
    if node.op == "not":
        return ir.Op(Op.NOT, (operand,), ir.BOOL, node.span) if expect(sink, operand, ir.BOOL) else None
    if isinstance(operand.type, ir.RealT):
        return ir.Op(Op.NEG, (operand,), ir.REAL, node.span)
    return ir.Op(Op.NEG, (operand,), ir.INT, node.span) if expect(sink, operand, ir.INT) else None


def _if(scope: Scope, sink: Sink, node: A.If, where: Where) -> ir.Expr | None:
    cond = expr(scope, sink, node.cond, where)
    then = expr(scope, sink, node.then, where)
    orelse = expr(scope, sink, node.orelse, where)
    if cond is None or then is None or orelse is None or not expect(sink, cond, ir.BOOL):
        return None
    if then.type != orelse.type:
        sink.error("LC301", node.span, f"`if` branches have different types: {then.type} and {orelse.type}")
        return None
    return ir.Cond(cond, then, orelse, then.type, node.span)


def _binary(scope: Scope, sink: Sink, node: A.Binary, where: Where) -> ir.Expr | None:
    left = expr(scope, sink, node.left, where)
    right = expr(scope, sink, node.right, where)
    if left is None or right is None:
        return None
    op = Op.parse(node.op)
    if op.kind is OpKind.LOGIC:
        if expect(sink, left, ir.BOOL) and expect(sink, right, ir.BOOL):
            return ir.Op(op, (left, right), ir.BOOL, node.span)
        return None
    if op in (Op.EQ, Op.NE):
        if left.type != right.type or isinstance(left.type, ir.RealT):
            sink.error("LC301", node.span, f"cannot compare {left.type} with {right.type}")
            return None
        return ir.Op(op, (left, right), ir.BOOL, node.span)
    if op.kind is OpKind.COMPARE:
        if expect(sink, left, ir.INT) and expect(sink, right, ir.INT):
            return ir.Op(op, (left, right), ir.BOOL, node.span)
        return None
    # arithmetic
    if isinstance(left.type, ir.RealT) or isinstance(right.type, ir.RealT):
        if op not in (Op.ADD, Op.SUB, Op.MUL):
            sink.error("LC408", node.span, f"`{op.value}` is not allowed in a decode expression (use + - *)")
            return None
        for side in (left, right):
            if not isinstance(side.type, (ir.RealT, ir.IntT)):
                sink.error("LC301", side.span, f"expected a number, found {side.type}")
                return None
        return ir.Op(op, (left, right), ir.REAL, node.span)
    if not (expect(sink, left, ir.INT) and expect(sink, right, ir.INT)):
        return None
    if op in (Op.DIV, Op.MOD) and not positive_divisor(scope, sink, right, op.value):
        return None
    return ir.Op(op, (left, right), ir.INT, node.span)


def positive_divisor(scope: Scope, sink: Sink, e: ir.Expr, what: str) -> bool:
    """Whether the divisor `e` of `what` (`/`, `%`, `cdiv`, ...) is positive for every value of
    the finite parameters it reads (LC303), within the enumeration budget (LC307)."""
    if any(isinstance(n, ir.AxisSize) for n in ir.walk(e)):
        # axis sizes are symbolic; allow a literal divisor only
        if isinstance(e, ir.Const) and isinstance(e.value, int) and e.value > 0:
            return True
        sink.error("LC303", e.span, f"the {_side(what)} of `{what}` must be a positive constant here")
        return False
    try:
        values = finite_values(e, scope.params, scope.lets, spent=scope.enum_work)
    except TooLarge:
        if not scope.reported_too_large:
            sink.error("LC307", e.span, "too much work to enumerate this divisor's values over the contract's "
                       "finite parameters; use fewer or smaller finite domains")
            scope.reported_too_large = True
        return False
    if values is None:
        sink.error("LC303", e.span, f"the {_side(what)} of `{what}` must range over a finite set of "
                   "positive values (it depends on an integer range parameter)",
                   help="take the divisor from a finite `int in {...}` or enum parameter, or a table")
        return False
    bad = sorted(v for v in values if not isinstance(v, int) or v <= 0)
    if bad or not values:
        hint = "guard it, e.g. `if group_size == -1 then 1 else group_size`" \
            if any(isinstance(n, ir.Ref) and "group" in n.name for n in ir.walk(e)) else \
            "make every value of the divisor positive"
        sink.error("LC303", e.span, f"the {_side(what)} of `{what}` can be {bad[0] if bad else 'undefined'}, "
                   "which is not positive", help=hint)
        return False
    return True


_FUNCTIONS = {f.value: f for f in FUNCTIONS}
_DECODES = {f.value: f for f in Op if f.kind is OpKind.DECODE}


def _call(scope: Scope, sink: Sink, node: A.Call, where: Where) -> ir.Expr | None:
    if where.decode is not None and node.func in _DECODES:
        # a number format (layoutc/runtime/numformats.py DECODERS): `e8m0(code)`, `e2m1(code)`
        if len(node.args) != 1 or not (isinstance(node.args[0], A.Name) and node.args[0].name == "code"):
            sink.error("LC408", node.span, f"`{node.func}` decodes this tensor's stored code: write `{node.func}(code)`")
            return None
        return ir.Op(_DECODES[node.func], (ir.Code(node.args[0].span),), ir.REAL, node.span)
    func = _FUNCTIONS.get(node.func)
    if func is None:
        sink.error("LC305", node.span, f"unknown function `{node.func}`",
                   help=suggest(node.func, list(_FUNCTIONS)))
        return None
    arity = func.arity
    if len(node.args) != arity:
        sink.error("LC304", node.span, f"`{node.func}` takes {arity} arguments, given {len(node.args)}")
        return None
    args = [expr(scope, sink, a, where) for a in node.args]
    if any(a is None for a in args):
        return None
    typed = [a for a in args if a is not None]
    if not all(expect(sink, a, ir.INT) for a in typed):
        return None
    if func in (Op.ROUND_UP, Op.ROUND_DOWN, Op.CDIV) and not positive_divisor(scope, sink, typed[1], node.func):
        return None
    if func is Op.LCM and not all(positive_divisor(scope, sink, a, "lcm") for a in typed):
        return None
    return ir.Op(func, tuple(typed), ir.INT, node.span)


def _match(scope: Scope, sink: Sink, node: A.Match, where: Where) -> ir.Expr | None:
    subject = name(scope, sink, node.subject, None, None)
    if subject is None:
        return None
    if not isinstance(subject.type, ir.EnumT):
        sink.error("LC301", node.subject.span, f"`match` needs an enum, `{node.subject.name}` is {subject.type}")
        return None
    enum = subject.type
    cases: list[tuple[str, ir.Expr]] = []
    default: ir.Expr | None = None
    seen: dict[str, Span] = {}
    ok = True
    for arm in node.arms:
        value = expr(scope, sink, arm.value, where)
        if arm.member in seen:
            sink.error("LC202", arm.span, f"`{arm.member}` already has an arm",
                       related=(Related(seen[arm.member], "first arm here"),))
            ok = False
            continue
        seen[arm.member] = arm.span
        if arm.member != "_" and arm.member not in enum.members:
            sink.error("LC301", arm.span, f"`{arm.member}` is not a member of {enum}",
                       help=suggest(arm.member, list(enum.members)))
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
    return _select(sink, node, subject, enum, cases, default, seen)


def _select(sink: Sink, node: A.Match, subject: ir.Expr, enum: ir.EnumT, cases: list[tuple[str, ir.Expr]],
            default: ir.Expr | None, seen: dict[str, Span]) -> ir.Expr | None:
    """The `match` of well-formed arms: one type (LC301), every member covered (LC306)."""
    types = {v.type for _, v in cases} | ({default.type} if default is not None else set())
    if len(types) != 1:
        sink.error("LC301", node.span, "`match` arms have different types: "
                   + ", ".join(sorted(str(t) for t in types)))
        return None
    missing = [m for m in enum.members if m not in seen]
    if missing and default is None:
        sink.error("LC306", node.span, f"`match` does not cover {', '.join(missing)}",
                   help="add the missing arms or a `_ => ...` arm")
        return None
    return ir.Select(subject, tuple(cases), default if missing else None, types.pop(), node.span)
