"""Concrete evaluation of IR expressions in Python (no solver).

Used by the checker (finite domains, `fill decoded`), by `audit` and `explain`,
and by tests. The generated modules carry their own rendering of the same
expressions (``emit.py``); a test checks that both agree.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from fractions import Fraction
from typing import assert_never

from layoutc.compiler import ir
from layoutc.runtime import vocab
from layoutc.runtime.numformats import CODES, DECODERS, NAN_NOTE, fits
from layoutc.runtime.vocab import Op, OpKind

Value = vocab.Value
Env = Mapping[str, Value]


class TooLarge(Exception):
    """Enumerating a finite domain would exceed the work budget."""


class EvalError(ValueError):
    """A value is undefined here (division by zero, negative divisor)."""


MAX_MAGNITUDE = vocab.MAX_MAGNITUDE


def apply_op(op: Op, args: list[Value]) -> Value:
    """Apply one operator or builtin to already-evaluated arguments: `vocab.apply`, the
    semantics the generated `plan()` shares (layoutc/runtime/vocab.py).

    Raises EvalError where the operator has no value (a divisor <= 0, lcm of a non-positive
    value, an integer result beyond 2**62 in magnitude: sizes never get there, and a
    contract that does is rejected instead of computing astronomically large ints).
    """
    try:
        return vocab.apply(op, args)
    except vocab.OpError as e:
        raise EvalError(str(e)) from None


def eval_expr(expr: ir.Expr, env: Env, axis_sizes: Mapping[tuple[str, str], int] | None = None) -> Value:
    """Evaluate `expr` with parameter and let values from `env`."""
    match expr:
        case ir.Const():
            return expr.value
        case ir.Ref():
            if expr.name not in env:
                raise EvalError(f"{expr.name} is undefined here")
            return env[expr.name]
        case ir.AxisSize():
            if axis_sizes is None or (expr.tensor, expr.axis) not in axis_sizes:
                raise EvalError(f"{expr.tensor}.{expr.axis} is undefined here")
            return axis_sizes[(expr.tensor, expr.axis)]
        case ir.Cond():
            branch = expr.then if eval_expr(expr.cond, env, axis_sizes) else expr.orelse
            return eval_expr(branch, env, axis_sizes)
        case ir.Select():
            subject = eval_expr(expr.subject, env, axis_sizes)
            for member, value in expr.cases:
                if member == subject:
                    return eval_expr(value, env, axis_sizes)
            assert expr.default is not None
            return eval_expr(expr.default, env, axis_sizes)
        case ir.Op(op=Op.AND | Op.OR):  # short-circuit, as the generated code does
            left = bool(eval_expr(expr.args[0], env, axis_sizes))
            if expr.op is Op.AND and not left:
                return False
            if expr.op is Op.OR and left:
                return True
            return bool(eval_expr(expr.args[1], env, axis_sizes))
        case ir.Op():
            return apply_op(expr.op, [eval_expr(a, env, axis_sizes) for a in expr.args])
        case ir.TensorValue() | ir.Code():
            raise EvalError(f"{type(expr).__name__} has no concrete value")
        case _:
            assert_never(expr)


def eval_real(expr: ir.Expr, env: Env, code: Fraction, tensors: Mapping[str, Fraction]) -> Fraction:
    """Evaluate a `decode` expression exactly (rationals).

    A number format (`e8m0(code)`, `e2m1(code)`: layoutc/runtime/numformats.py) whose code is NaN or
    inf, or outside the format's codes, raises EvalError.
    """
    match expr:
        case ir.Code():
            return code
        case ir.TensorValue():
            return tensors[expr.tensor]
        case ir.Cond() if expr.type == ir.REAL:
            branch = expr.then if eval_expr(expr.cond, env) else expr.orelse
            return eval_real(branch, env, code, tensors)
        case ir.Select() if expr.type == ir.REAL:
            subject = eval_expr(expr.subject, env)
            chosen = next((v for m, v in expr.cases if m == subject), expr.default)
            assert chosen is not None
            return eval_real(chosen, env, code, tensors)
        case ir.Op() if expr.op.kind is OpKind.DECODE:
            fmt = expr.op.value
            if code.denominator != 1 or not fits(fmt, int(code)):
                raise EvalError(f"{fmt}: code {code} is outside its codes {CODES[fmt][0]}..{CODES[fmt][1]}")
            value = DECODERS[fmt](int(code))
            if value is None:
                raise EvalError(f"{fmt}({code}) is not finite ({NAN_NOTE[fmt]})")
            return value
        case ir.Op() if expr.type == ir.REAL:
            return _real_op(expr, env, code, tensors)
        case ir.Const() | ir.Ref() | ir.AxisSize() | ir.Cond() | ir.Select() | ir.Op():
            return Fraction(int(eval_expr(expr, env)))
        case _:
            assert_never(expr)


def _real_op(expr: ir.Op, env: Env, code: Fraction, tensors: Mapping[str, Fraction]) -> Fraction:
    """+, -, * or negation of decoded values (the only operators a decode allows, LC408)."""
    if expr.op is Op.NEG:
        return -eval_real(expr.args[0], env, code, tensors)
    a = eval_real(expr.args[0], env, code, tensors)
    b = eval_real(expr.args[1], env, code, tensors)
    match expr.op:
        case Op.ADD:
            return a + b
        case Op.SUB:
            return a - b
        case Op.MUL:
            return a * b
        case _:
            raise AssertionError(expr.op)


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
    match expr:
        case ir.Const():
            value = expr.value
            return (value, value) if isinstance(value, int) and not isinstance(value, bool) else None
        case ir.Ref():
            return known.get(expr.name)
        case ir.Cond():
            a, b = int_bounds(expr.then, known), int_bounds(expr.orelse, known)
            return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
        case ir.Select():
            parts = [int_bounds(v, known) for _, v in expr.cases]
            if expr.default is not None:
                parts.append(int_bounds(expr.default, known))
            if any(p is None for p in parts) or not parts:
                return None
            return (min(p[0] for p in parts if p), max(p[1] for p in parts if p))
        case ir.Op() if expr.type == ir.INT:
            bounds = [int_bounds(a, known) for a in expr.args]
            args = [b for b in bounds if b is not None]
            return _op_bounds(expr.op, args) if len(args) == len(bounds) else None
        case ir.Op() | ir.AxisSize() | ir.TensorValue() | ir.Code():
            return None
        case _:
            assert_never(expr)


def _op_bounds(op: Op, args: list[Interval]) -> Interval | None:
    """A sound interval of `op` over arguments in the intervals `args`."""
    if op is Op.NEG:
        lo, hi = args[0]
        return (-hi, -lo)
    (alo, ahi), (blo, bhi) = args
    match op:
        case Op.ADD:
            return (alo + blo, ahi + bhi)
        case Op.SUB:
            return (alo - bhi, ahi - blo)
        case Op.MUL | Op.LCM:
            products = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
            return (min([*products, 0]) if op is Op.LCM else min(products), max(products))
        case Op.DIV | Op.ROUND_DOWN | Op.CDIV | Op.ROUND_UP:
            m = max(abs(alo), abs(ahi)) + max(abs(blo), abs(bhi))
            return (-m, m)
        case Op.MOD | Op.GCD:
            m = max(abs(blo), abs(bhi), abs(alo), abs(ahi))
            return (-m, m)
        case Op.MIN:
            return (min(alo, blo), min(ahi, bhi))
        case Op.MAX:
            return (max(alo, blo), max(ahi, bhi))
        case _:
            return None
