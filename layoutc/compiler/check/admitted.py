"""The configurations a contract admits, enumerated or sampled without a solver.

Used where the checker must judge what an expression *denotes* rather than how it is
spelled (issue 20): the glue's activation against the model's, a bias tie against its
weight axis, the experts axes against each other. `admitted` enumerates the finite
parameters; `samples` draws full configurations (range parameters too) that every rule
admits, to refute a claimed equality with a real configuration.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator

from layoutc.compiler import ir
from layoutc.compiler.cases import MAX_ASSIGNMENTS
from layoutc.compiler.evaluate import EvalError, Value, eval_expr, needed_lets, param_deps

# Range parameters are drawn from their bounds, the sizes models really have, and random values.
_SIZES = (1, 2, 3, 4, 8, 16, 32, 48, 64, 96, 100, 128, 176, 192, 256, 352, 384, 512, 704, 768, 1024, 1408, 1536,
          2048, 2816, 2880, 4096, 7168, 14336)
SAMPLE_TRIES = 4000
SAMPLES = 48


def finite_rules(contract: ir.Contract, names: set[str]) -> list[ir.Rule]:
    """The requires and admits that read only the parameters `names` (through lets)."""
    lets = {let.name: let for let in contract.lets}
    return [r for r in contract.rules if param_deps(r.cond, lets) <= names]


def closure(contract: ir.Contract, names: set[str]) -> set[str]:
    """`names` with the finite parameters of every rule that reads one of them and only
    finite parameters: a rule `admit a != x or (b == 1 and c == 2)` ties b and c to a, so
    judging a alone would admit assignments the rule refuses. Stops at MAX_ASSIGNMENTS."""
    lets = {let.name: let for let in contract.lets}
    out = set(names)
    changed = True
    while changed:
        changed = False
        for rule in contract.rules:
            deps = param_deps(rule.cond, lets)
            if deps & out and not deps <= out and all(contract.param(n).finite for n in deps):
                grown = out | deps
                if math.prod(len(contract.param(n).values) for n in grown) > MAX_ASSIGNMENTS:
                    continue
                out, changed = grown, True
    return out


def admitted(contract: ir.Contract, names: set[str], exprs: tuple[ir.Expr, ...]) -> Iterator[dict[str, Value]] | None:
    """Every assignment of the finite parameters `names` (grown by `closure`) that the rules
    reading only those parameters admit, with the lets `exprs` need that they decide
    evaluated. Rules that read other parameters are taken as satisfiable (a caller looking
    for a bad assignment errs towards finding one). None when a parameter ranges over an
    interval or the product exceeds MAX_ASSIGNMENTS."""
    lets = {let.name: let for let in contract.lets}
    if any(not contract.param(n).finite for n in names):
        return None
    names = closure(contract, names)
    order = sorted(names)
    params = [contract.param(n) for n in order]
    if math.prod(len(p.values) for p in params) > MAX_ASSIGNMENTS:
        return None
    rules = finite_rules(contract, names)
    known = {let.name for expr in exprs for let in needed_lets(expr, lets) if param_deps(let.value, lets) <= names}
    computable = [let for let in contract.lets if let.name in known]

    def generate() -> Iterator[dict[str, Value]]:
        for combo in itertools.product(*(p.values for p in params)):
            env: dict[str, Value] = dict(zip(order, combo, strict=True))
            try:
                for let in computable:
                    env[let.name] = eval_expr(let.value, env)
                if all(_holds(rule, env, lets) for rule in rules):
                    yield env
            except EvalError:
                continue

    return generate()


def _holds(rule: ir.Rule, env: dict[str, Value], lets: dict[str, ir.Let]) -> bool:
    scope = dict(env)
    for let in needed_lets(rule.cond, lets):
        if let.name not in scope:
            scope[let.name] = eval_expr(let.value, scope)
    return eval_expr(rule.cond, scope) is True


def samples(contract: ir.Contract) -> list[dict[str, Value]]:
    """Up to SAMPLES full configurations (every parameter and let) that every rule admits,
    drawn with a fixed seed from SAMPLE_TRIES candidates: the witnesses that refute an
    equality. An empty list proves nothing."""
    rng = random.Random(0)
    lets = {let.name: let for let in contract.lets}
    found: list[dict[str, Value]] = []
    for _ in range(SAMPLE_TRIES):
        env: dict[str, Value] = {}
        for p in contract.params:
            if p.finite:
                env[p.name] = rng.choice(p.values)
            else:
                pool = [v for v in (*_SIZES, p.low, p.high) if p.low <= v <= p.high]
                env[p.name] = rng.choice(pool) if pool and rng.random() < 0.97 else rng.randint(p.low, p.high)
        try:
            for let in contract.lets:
                env[let.name] = eval_expr(let.value, env)
            if all(_holds(rule, env, lets) for rule in contract.rules):
                found.append(env)
        except EvalError:
            continue
        if len(found) >= SAMPLES:
            break
    # the smallest first: a counterexample reads best with small sizes
    return sorted(found, key=lambda env: sorted((abs(v) for v in env.values() if type(v) is int), reverse=True))
