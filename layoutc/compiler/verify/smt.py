"""Encode IR expressions and configurations into z3 terms.

Only the verifier imports this module (and so z3). Sizes stay symbolic: an
integer-range parameter is a bounded z3 Int. Division, modulo and rounding by
a non-numeral divisor d (the checker guarantees it has a finite value set) are
encoded with a quotient and a remainder variable per (numerator, divisor) pair,
defined by `a == q * d + r, 0 <= r < d` (floor division, d > 0 on every value):
those definitions are `Encoder.aux`, which every query must carry (they only
name q and r, so adding all of them to a query changes no answer). A divisor
whose value set holds 0 or a negative number is expanded over its values
instead (an `If` per value, each dividing by a numeral).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import assert_never

import z3  # type: ignore[import-untyped]

from layoutc.compiler import ir
from layoutc.compiler.evaluate import Value, finite_values, param_deps
from layoutc.runtime.vocab import Op


class Encoder:
    """z3 variables for one contract's parameters and `let` values."""

    def __init__(self, contract: ir.Contract, ctx: z3.Context | None = None) -> None:
        self.contract = contract
        self.ctx = ctx or z3.Context()
        self.params = {p.name: p for p in contract.params}
        self.lets = {let.name: let for let in contract.lets}
        self.vars: dict[str, z3.ExprRef] = {}
        self.defs: list[z3.BoolRef] = []
        self._finite: dict[int, frozenset[Value] | None] = {}
        self._memo: dict[int, tuple[ir.Expr, z3.ExprRef]] = {}
        self._divisors: dict[tuple[int, bool], tuple[ir.Expr, list[int], list[z3.BoolRef]]] = {}
        # Quotient and remainder variables of each division by a non-numeral divisor, by the
        # z3 ids of numerator and divisor (kept alive with them, so no id is reused), and
        # their defining constraints (`aux`).
        self._divmods: dict[tuple[int, int], tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef, z3.ArithRef]] = {}
        self.aux: list[z3.BoolRef] = []
        self._completions: dict[int, tuple[z3.ModelRef, list[tuple[z3.ExprRef, z3.ExprRef]]]] = {}
        # Finite parameters that feed a divisor or a table: the verifier splits on them.
        self.split_params: set[str] = set()
        for p in contract.params:
            if p.kind == "bool":
                self.vars[p.name] = z3.Bool(p.name, self.ctx)
            else:
                self.vars[p.name] = z3.Int(p.name, self.ctx)
        for let in contract.lets:
            var = z3.Bool(f"let.{let.name}", self.ctx) if let.type == ir.BOOL else z3.Int(f"let.{let.name}", self.ctx)
            self.vars[let.name] = var
            self.defs.append(var == self.expr(let.value))

    # ---- domains ----
    def domain(self) -> z3.BoolRef:
        """The parameters' domains and the `let` definitions, as one conjunction."""
        parts: list[z3.BoolRef] = []
        for p in self.contract.params:
            v = self.vars[p.name]
            match p.kind:
                case "range":
                    parts += [v >= p.low, v <= p.high]
                case "set":
                    parts.append(z3.Or([v == x for x in p.values]))
                case "enum":
                    parts += [v >= 0, v < len(p.values)]
                case "bool":
                    pass
                case _:
                    assert_never(p.kind)
        return z3.And(parts + self.defs) if parts or self.defs else z3.BoolVal(True, self.ctx)

    def rules(self, kind: str) -> list[tuple[ir.Rule, z3.BoolRef]]:
        return [(r, self.expr(r.cond)) for r in self.contract.rules if r.kind == kind]

    def int(self, value: int) -> z3.ArithRef:
        return z3.IntVal(value, self.ctx)

    # ---- expressions ----
    def finite(self, e: ir.Expr) -> frozenset[Value] | None:
        key = id(e)
        if key not in self._finite:
            self._finite[key] = finite_values(e, self.params, self.lets)
        return self._finite[key]

    def expr(self, e: ir.Expr, axis_sizes: Mapping[tuple[str, str], z3.ArithRef] | None = None) -> z3.ExprRef:
        """The z3 term of `e` (memoised per IR node outside kernel clauses: the IR is immutable,
        and the node is kept alive with its term, so its id is never reused)."""
        if axis_sizes is not None:
            return self._expr(e, axis_sizes)
        hit = self._memo.get(id(e))
        if hit is None:
            hit = self._memo[id(e)] = (e, self._expr(e, None))
        return hit[1]

    def _expr(self, e: ir.Expr, axis_sizes: Mapping[tuple[str, str], z3.ArithRef] | None) -> z3.ExprRef:
        match e:
            case ir.Const():
                return self._const(e)
            case ir.Ref(name=name):
                return self.vars[name]
            case ir.AxisSize(tensor=tensor, axis=axis):
                if axis_sizes is None:
                    raise ValueError("axis size outside a kernel clause")
                return axis_sizes[(tensor, axis)]
            case ir.Cond():
                return z3.If(self.expr(e.cond, axis_sizes), self.expr(e.then, axis_sizes),
                             self.expr(e.orelse, axis_sizes))
            case ir.Select():
                return self._select(e, axis_sizes)
            case ir.Op():
                return self.op(e, axis_sizes)
            case ir.TensorValue() | ir.Code():  # decode-only terms (properties/pad_values.py decodes them)
                raise ValueError(f"cannot encode {type(e).__name__}")
            case _:
                assert_never(e)

    def _const(self, e: ir.Const) -> z3.ExprRef:
        match e.value:
            case bool(flag):
                return z3.BoolVal(flag, self.ctx)
            case str(member):
                assert isinstance(e.type, ir.EnumT)
                return self.int(e.type.members.index(member))
            case int(number):
                return self.int(number)
            case _:
                assert_never(e.value)

    def _select(self, e: ir.Select, axis_sizes: Mapping[tuple[str, str], z3.ArithRef] | None) -> z3.ExprRef:
        subject = self.expr(e.subject, axis_sizes)
        assert isinstance(e.subject.type, ir.EnumT)
        members = e.subject.type.members
        result = self.expr(e.default, axis_sizes) if e.default is not None \
            else self.expr(e.cases[-1][1], axis_sizes)
        cases = e.cases if e.default is not None else e.cases[:-1]
        for member, value in reversed(cases):
            result = z3.If(subject == members.index(member), self.expr(value, axis_sizes), result)
        return result

    def by_values(self, divisor: ir.Expr, build, axis_sizes):  # type: ignore[no-untyped-def]
        """Expand `build(numeral)` over the finite values of `divisor`."""
        if isinstance(divisor, ir.Const) and isinstance(divisor.value, int):
            return build(divisor.value)
        key = (id(divisor), axis_sizes is None)
        cached = self._divisors.get(key) if axis_sizes is None else None
        if cached is None:
            self.split_params |= param_deps(divisor, self.lets)
            values = sorted(int(v) for v in (self.finite(divisor) or ()))
            if not values:
                raise ValueError("divisor without a finite value set")
            d = self.expr(divisor, axis_sizes)
            cached = (divisor, values, [d == v for v in values])
            if axis_sizes is None:
                self._divisors[key] = cached
        _, values, tests = cached
        result = build(values[-1])
        for v, test in zip(reversed(values[:-1]), reversed(tests[:-1]), strict=True):
            result = z3.If(test, build(v), result)
        return result

    def _divided(self, op: Op, a: z3.ArithRef, divisor: ir.Expr, axis_sizes):  # type: ignore[no-untyped-def]
        """`op` (/, %, round_up, round_down, cdiv) of `a` by a non-numeral `divisor` through its
        quotient q and remainder r: a / d = q, a % d = r, round_down = a - r, and with
        a' = a + d - 1: cdiv = q', round_up = a' - r'. None where a divisor value is <= 0."""
        values = self.finite(divisor)
        if not values or min(int(v) for v in values) <= 0:
            return None
        self.split_params |= param_deps(divisor, self.lets)
        d = self.expr(divisor, axis_sizes)
        if op in (Op.ROUND_UP, Op.CDIV):
            a = a + d - 1
        q, r = self._divmod(a, d)
        if op in (Op.DIV, Op.CDIV):
            return q
        if op is Op.MOD:
            return r
        return a - r

    def _divmod(self, a: z3.ArithRef, d: z3.ArithRef) -> tuple[z3.ArithRef, z3.ArithRef]:
        """The quotient and remainder variables of a by d (d > 0), defined once in `aux`."""
        key = (a.get_id(), d.get_id())
        hit = self._divmods.get(key)
        if hit is None:
            n = len(self._divmods)
            q, r = z3.Int(f"div.{n}.q", self.ctx), z3.Int(f"div.{n}.r", self.ctx)
            self.aux.append(z3.And(a == q * d + r, r >= 0, r < d))
            hit = self._divmods[key] = (a, d, q, r)
        return hit[2], hit[3]

    def op(self, e: ir.Op, axis_sizes: Mapping[tuple[str, str], z3.ArithRef] | None) -> z3.ExprRef:
        """The z3 term of an operator or builtin function (layoutc/runtime/vocab.py's `Op`)."""
        match e.op:
            case Op.NOT:
                return z3.Not(self.expr(e.args[0], axis_sizes))
            case Op.NEG:
                return -self.expr(e.args[0], axis_sizes)
            case Op.LCM | Op.GCD:
                if self.finite(e) is None:
                    raise ValueError(f"{e.op.value} of non-finite arguments")
                return self._tabulate(e, axis_sizes)
            case Op.DIV | Op.MOD | Op.ROUND_UP | Op.ROUND_DOWN | Op.CDIV:
                return self._division(e, axis_sizes)
            case Op.MUL:
                # left to z3 as a product; a finite side is split on if the whole domain is not
                # settled (the case split substitutes it, which leaves the product linear)
                a, b = self.expr(e.args[0], axis_sizes), self.expr(e.args[1], axis_sizes)
                for side in e.args:
                    if not isinstance(side, ir.Const) and self.finite(side) is not None:
                        self.split_params |= param_deps(side, self.lets)
                return a * b
            case Op.E8M0 | Op.E4M3FN | Op.E5M2 | Op.E2M1:  # decode-only (properties/pad_values.py decodes them)
                raise ValueError(f"cannot encode operator {e.op.value!r}")
            case (Op.ADD | Op.SUB | Op.EQ | Op.NE | Op.LT | Op.LE | Op.GT | Op.GE | Op.AND | Op.OR
                  | Op.MIN | Op.MAX):
                return self._binary(e.op, self.expr(e.args[0], axis_sizes), self.expr(e.args[1], axis_sizes))
            case _:
                assert_never(e.op)

    def _binary(self, op: Op, a: z3.ExprRef, b: z3.ExprRef) -> z3.ExprRef:
        match op:
            case Op.ADD:
                return a + b
            case Op.SUB:
                return a - b
            case Op.EQ:
                return a == b
            case Op.NE:
                return a != b
            case Op.LT:
                return a < b
            case Op.LE:
                return a <= b
            case Op.GT:
                return a > b
            case Op.GE:
                return a >= b
            case Op.AND:
                return z3.And(a, b)
            case Op.OR:
                return z3.Or(a, b)
            case Op.MIN:
                return z3.If(a <= b, a, b)
            case Op.MAX:
                return z3.If(a >= b, a, b)
            case _:
                raise ValueError(f"cannot encode operator {op.value!r}")

    def _division(self, e: ir.Op, axis_sizes: Mapping[tuple[str, str], z3.ArithRef] | None) -> z3.ExprRef:
        """/, %, round_up, round_down or cdiv (floor semantics): through quotient and remainder
        variables for a non-numeral divisor whose values are all positive, else expanded over
        the divisor's values, each a division by a numeral."""
        op = e.op
        a = self.expr(e.args[0], axis_sizes)
        numeral = isinstance(e.args[1], ir.Const) and isinstance(e.args[1].value, int)
        divided = None if numeral else self._divided(op, a, e.args[1], axis_sizes)
        if divided is not None:
            return divided

        def build(v: int) -> z3.ArithRef:
            match op:
                case Op.DIV:
                    return a / v
                case Op.MOD:
                    return a % v
                case Op.ROUND_UP:
                    return ((a + (v - 1)) / v) * v
                case Op.ROUND_DOWN:
                    return (a / v) * v
            return (a + (v - 1)) / v  # cdiv
        return self.by_values(e.args[1], build, axis_sizes)

    def _tabulate(self, e: ir.Expr, axis_sizes):  # type: ignore[no-untyped-def]
        """Encode a finite-valued expression as a table over its parameters."""
        import itertools

        from layoutc.compiler.evaluate import EvalError, eval_expr, needed_lets
        deps = sorted(param_deps(e, self.lets))
        self.split_params |= set(deps)
        rows: list[tuple[z3.BoolRef, int]] = []
        for combo in itertools.product(*(self.params[d].values for d in deps)):
            env: dict[str, Value] = dict(zip(deps, combo, strict=False))
            try:
                for let in needed_lets(e, self.lets):
                    with contextlib.suppress(EvalError):
                        env[let.name] = eval_expr(let.value, env)
                value = int(eval_expr(e, env))
            except EvalError:
                continue
            cond = z3.And([self.vars[d] == self.param_value(d, v) for d, v in zip(deps, combo, strict=False)])
            rows.append((cond, value))
        if not rows:
            raise ValueError("empty table")
        result: z3.ExprRef = self.int(rows[-1][1])
        for cond, value in reversed(rows[:-1]):
            result = z3.If(cond, self.int(value), result)
        return result

    def param_value(self, name: str, value: Value) -> z3.ExprRef:
        p = self.params[name]
        if p.kind == "enum":
            return self.int(p.values.index(value))
        if p.kind == "bool":
            return z3.BoolVal(bool(value), self.ctx)
        return self.int(int(value))

    def evaluate(self, model: z3.ModelRef, term: z3.ExprRef) -> z3.ExprRef:
        """The value of `term` in `model`, completed: every quotient and remainder variable is
        recomputed from its definition (in creation order, so a numerator's own quotients come
        first) instead of read from the model, which leaves unconstrained any variable whose
        definition the query did not carry (a term built after the query)."""
        subs = self._completion(model)
        return model.eval(z3.substitute(term, *subs) if subs else term, model_completion=True)

    def _completion(self, model: z3.ModelRef) -> list[tuple[z3.ExprRef, z3.ExprRef]]:
        cached = self._completions.get(id(model))
        if cached is None or cached[0] is not model:
            cached = self._completions[id(model)] = (model, [])
        subs = cached[1]
        for a, d, q, r in list(self._divmods.values())[len(subs) // 2:]:
            av, dv = (model.eval(z3.substitute(x, *subs) if subs else x, model_completion=True).as_long()  # type: ignore[attr-defined]
                      for x in (a, d))
            # a model outside the domain (never one of a query's) has no quotient to give
            subs += [(q, self.int(av // dv if dv > 0 else 0)), (r, self.int(av % dv if dv > 0 else 0))]
        return subs

    def decode_config(self, model: z3.ModelRef) -> dict[str, Value]:
        """Concrete parameter values of a z3 model, in the contract's order."""
        out: dict[str, Value] = {}
        for p in self.contract.params:
            v = model.eval(self.vars[p.name], model_completion=True)
            if p.kind == "enum":
                out[p.name] = p.values[v.as_long()]  # type: ignore[attr-defined]
            elif p.kind == "bool":
                out[p.name] = z3.is_true(v)
            else:
                out[p.name] = v.as_long()  # type: ignore[attr-defined]
        return out
