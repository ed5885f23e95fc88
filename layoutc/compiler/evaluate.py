"""Concrete evaluation of IR expressions in Python (no solver).

Used by the checker (finite domains, `fill decoded`), by `audit` and `explain`,
and by tests. The generated modules carry their own rendering of the same
expressions (``emit.py``); a test checks that both agree.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from fractions import Fraction

from layoutc.compiler import ir
from layoutc.runtime.numformats import FORMATS, NAN_NOTE

Value = int | bool | str
Env = Mapping[str, Value]


class TooLarge(Exception):
    """Enumerating a finite domain would exceed the work budget."""


class EvalError(ValueError):
    """A value is undefined here (division by zero, negative divisor)."""


def _floordiv(a: int, b: int) -> int:
    if b <= 0:
        raise EvalError(f"division by {b}")
    return a // b


def _mod(a: int, b: int) -> int:
    if b <= 0:
        raise EvalError(f"modulo by {b}")
    return a % b


MAX_MAGNITUDE = 1 << 62


def apply_op(op: str, args: list[Value]) -> Value:
    """Apply one operator or builtin to already-evaluated arguments.

    Integer results beyond 2**62 in magnitude raise EvalError (sizes never get there;
    a contract that does is rejected instead of computing astronomically large ints).
    """
    result = _apply(op, args)
    if isinstance(result, int) and not isinstance(result, bool) and abs(result) > MAX_MAGNITUDE:
        raise EvalError(f"value exceeds 2**62 in `{op}`")
    return result


def _apply(op: str, args: list[Value]) -> Value:
    if op == "not":
        return not args[0]
    if op == "neg":
        return -int(args[0])
    a, b = args
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == "and":
        return bool(a) and bool(b)
    if op == "or":
        return bool(a) or bool(b)
    x, y = int(a), int(b)
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "/":
        return _floordiv(x, y)
    if op == "%":
        return _mod(x, y)
    if op == "<":
        return x < y
    if op == "<=":
        return x <= y
    if op == ">":
        return x > y
    if op == ">=":
        return x >= y
    if op == "round_up":
        return _floordiv(x + y - 1, y) * y if y > 0 else _floordiv(x, y)
    if op == "round_down":
        return _floordiv(x, y) * y
    if op == "cdiv":
        return -_floordiv(-x, y)
    if op == "lcm":
        if x <= 0 or y <= 0:
            raise EvalError(f"lcm({x}, {y}) of a non-positive value")
        return math.lcm(x, y)
    if op == "gcd":
        return math.gcd(x, y)
    if op == "min":
        return min(x, y)
    if op == "max":
        return max(x, y)
    raise AssertionError(op)


def eval_expr(expr: ir.Expr, env: Env, axis_sizes: Mapping[tuple[str, str], int] | None = None) -> Value:
    """Evaluate `expr` with parameter and let values from `env`."""
    if isinstance(expr, ir.Const):
        return expr.value
    if isinstance(expr, ir.Ref):
        if expr.name not in env:
            raise EvalError(f"{expr.name} is undefined here")
        return env[expr.name]
    if isinstance(expr, ir.AxisSize):
        if axis_sizes is None or (expr.tensor, expr.axis) not in axis_sizes:
            raise EvalError(f"{expr.tensor}.{expr.axis} is undefined here")
        return axis_sizes[(expr.tensor, expr.axis)]
    if isinstance(expr, ir.Cond):
        branch = expr.then if eval_expr(expr.cond, env, axis_sizes) else expr.orelse
        return eval_expr(branch, env, axis_sizes)
    if isinstance(expr, ir.Select):
        subject = eval_expr(expr.subject, env, axis_sizes)
        for member, value in expr.cases:
            if member == subject:
                return eval_expr(value, env, axis_sizes)
        assert expr.default is not None
        return eval_expr(expr.default, env, axis_sizes)
    if isinstance(expr, ir.Op):
        if expr.op in ("and", "or"):  # short-circuit, as the generated code does
            left = bool(eval_expr(expr.args[0], env, axis_sizes))
            if expr.op == "and" and not left:
                return False
            if expr.op == "or" and left:
                return True
            return bool(eval_expr(expr.args[1], env, axis_sizes))
        return apply_op(expr.op, [eval_expr(a, env, axis_sizes) for a in expr.args])
    raise EvalError(f"{type(expr).__name__} has no concrete value")


def eval_real(expr: ir.Expr, env: Env, code: Fraction, tensors: Mapping[str, Fraction]) -> Fraction:
    """Evaluate a `decode` expression exactly (rationals).

    A byte format (`e8m0(code)`, layoutc/runtime/numformats.py) whose byte is NaN or inf raises EvalError.
    """
    if isinstance(expr, ir.Code):
        return code
    if isinstance(expr, ir.TensorValue):
        return tensors[expr.tensor]
    if isinstance(expr, ir.Cond) and expr.type == ir.REAL:
        branch = expr.then if eval_expr(expr.cond, env) else expr.orelse
        return eval_real(branch, env, code, tensors)
    if isinstance(expr, ir.Select) and expr.type == ir.REAL:
        subject = eval_expr(expr.subject, env)
        chosen = next((v for m, v in expr.cases if m == subject), expr.default)
        assert chosen is not None
        return eval_real(chosen, env, code, tensors)
    if isinstance(expr, ir.Op) and expr.op in FORMATS:
        if code.denominator != 1 or not 0 <= code <= 255:
            raise EvalError(f"{expr.op}: code {code} is not a byte")
        value = FORMATS[expr.op](int(code))
        if value is None:
            raise EvalError(f"{expr.op}({code}) is not finite ({NAN_NOTE[expr.op]})")
        return value
    if isinstance(expr, ir.Op) and expr.type == ir.REAL:
        if expr.op == "neg":
            return -eval_real(expr.args[0], env, code, tensors)
        a = eval_real(expr.args[0], env, code, tensors)
        b = eval_real(expr.args[1], env, code, tensors)
        if expr.op == "+":
            return a + b
        if expr.op == "-":
            return a - b
        if expr.op == "*":
            return a * b
        raise AssertionError(expr.op)
    return Fraction(int(eval_expr(expr, env)))


def refs(expr: ir.Expr) -> set[str]:
    return {n.name for n in ir.walk(expr) if isinstance(n, ir.Ref)}


def param_deps(expr: ir.Expr, lets: Mapping[str, ir.Let]) -> set[str]:
    """Parameters `expr` depends on, through `let`s."""
    out: set[str] = set()
    seen: set[str] = set()
    todo = list(refs(expr))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in lets:
            todo.extend(refs(lets[name].value))
        else:
            out.add(name)
    return out


def needed_lets(expr: ir.Expr, lets: Mapping[str, ir.Let]) -> list[ir.Let]:
    """The `let`s `expr` reads, directly or not, in declaration order."""
    seen: set[str] = set()
    todo = [n for n in refs(expr) if n in lets]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(n for n in refs(lets[name].value) if n in lets)
    return [let for let in lets.values() if let.name in seen]


def finite_values(expr: ir.Expr, params: Mapping[str, ir.Param], lets: Mapping[str, ir.Let],
                  limit: int = 4096, budget: int = 200_000,
                  spent: list[int] | None = None) -> frozenset[Value] | None:
    """Every value `expr` can take, when it depends on finite parameters only.

    Returns None when a dependency ranges over an integer interval, the product of
    domains exceeds `limit`, or the evaluation work (combinations times `let`s to
    evaluate) exceeds `budget`. Combinations where `expr` is undefined (EvalError)
    are skipped. `spent` ([work so far, limit]) bounds the work over many calls:
    past its limit, TooLarge is raised.
    """
    deps = sorted(param_deps(expr, lets))
    if any(not params[d].finite for d in deps):
        return None
    order = needed_lets(expr, lets)
    work = sum(1 for _ in ir.walk(expr)) + sum(sum(1 for _ in ir.walk(let.value)) for let in order)
    total = 1
    for d in deps:
        total *= len(params[d].values)
        if total > limit or total * work > budget:
            return None
    if spent is not None and deps:
        spent[0] += total * work
        if spent[0] > spent[1]:
            raise TooLarge(f"enumerating finite domains took more than {spent[1]} evaluations")
    out: set[Value] = set()
    for combo in itertools.product(*(params[d].values for d in deps)):
        env: dict[str, Value] = dict(zip(deps, combo, strict=False))
        for let in order:
            try:
                env[let.name] = eval_expr(let.value, env)
            except EvalError:
                continue
        try:
            out.add(eval_expr(expr, env))
        except EvalError:
            continue
    return frozenset(out)


def eval_lets(contract: ir.Contract, config: Env) -> dict[str, Value]:
    """Parameters plus every `let`, in declaration order. Raises EvalError."""
    env: dict[str, Value] = dict(config)
    for let in contract.lets:
        env[let.name] = eval_expr(let.value, env)
    return env


def axis_sizes(contract: ir.Contract, env: Env) -> dict[tuple[str, str], int]:
    """Padded size in values of every tensor axis (what `tensor.axis` means)."""
    sizes: dict[tuple[str, str], int] = {}
    for tensor in contract.tensors:
        for axis in tensor.axes:
            sizes[(tensor.name, axis.name)] = axis.segments * int(eval_expr(axis.padded, env))
    return sizes


Interval = tuple[int, int]


def int_bounds(expr: ir.Expr, known: Mapping[str, Interval]) -> Interval | None:
    """A sound interval for an integer expression (None when it is not an int).

    `known` holds intervals of integer parameters and lets. Used by the checker to
    refuse lets that could exceed 2**62 (the generated code would compute huge ints).
    """
    if isinstance(expr, ir.Const):
        return (expr.value, expr.value) if isinstance(expr.value, int) and not isinstance(expr.value, bool) else None
    if isinstance(expr, ir.Ref):
        return known.get(expr.name)
    if isinstance(expr, ir.Cond):
        a, b = int_bounds(expr.then, known), int_bounds(expr.orelse, known)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if isinstance(expr, ir.Select):
        parts = [int_bounds(v, known) for _, v in expr.cases]
        if expr.default is not None:
            parts.append(int_bounds(expr.default, known))
        if any(p is None for p in parts) or not parts:
            return None
        return (min(p[0] for p in parts if p), max(p[1] for p in parts if p))
    if not isinstance(expr, ir.Op) or expr.type != ir.INT:
        return None
    args = [int_bounds(a, known) for a in expr.args]
    if any(a is None for a in args):
        return None
    if expr.op == "neg":
        lo, hi = args[0]  # type: ignore[misc]
        return (-hi, -lo)
    (alo, ahi), (blo, bhi) = args  # type: ignore[misc]
    if expr.op == "+":
        return (alo + blo, ahi + bhi)
    if expr.op == "-":
        return (alo - bhi, ahi - blo)
    if expr.op in ("*", "lcm"):
        products = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
        return (min([*products, 0]) if expr.op == "lcm" else min(products), max(products))
    if expr.op in ("/", "round_down", "cdiv", "round_up"):
        m = max(abs(alo), abs(ahi)) + max(abs(blo), abs(bhi))
        return (-m, m)
    if expr.op in ("%", "gcd"):
        m = max(abs(blo), abs(bhi), abs(alo), abs(ahi))
        return (-m, m)
    if expr.op == "min":
        return (min(alo, blo), min(ahi, bhi))
    if expr.op == "max":
        return (max(alo, blo), max(ahi, bhi))
    return None
