"""Axes that must agree, judged by what they denote, not their spelling (issue 20).

A w13 bias adds to w13's output lanes, so its `n` axis must follow `w13.n` row for row
(LC522); every tensor's experts axis bounds the expert ids with w13's, and the two weights
are batched over one experts axis (LC528). Two axes agree when, for every admitted
assignment of the finite parameters their guards and sizes read, the alternative that
applies on each side has the same layout word, roles and packing, and the same sizes.

Sizes are compared in three steps. Lets inlined, finite parameters substituted, constants
folded and commutative operators ordered: equal there, they agree. Else the admitted
sample configurations of `admitted.samples` are tried: one where the sizes differ is a
real counterexample, and the checker reports it. Else the checker cannot tell (`cdiv(I,
tp)` against `I / tp` under `I % tp == 0`): the verifier proves the agreement (placement,
"agrees with"), or refutes it with a counterexample.
"""

from __future__ import annotations

from dataclasses import dataclass

from layoutc.compiler import ir
from layoutc.compiler.check.admitted import admitted, samples
from layoutc.compiler.evaluate import EvalError, Value, eval_expr, param_deps
from layoutc.runtime.algebra import Word
from layoutc.runtime.vocab import Op

_COMMUTATIVE = frozenset({Op.ADD, Op.MUL, Op.EQ, Op.NE, Op.AND, Op.OR, Op.MIN, Op.MAX, Op.LCM, Op.GCD})


def alternatives(t: ir.Tensor, name: str) -> list[ir.Axis]:
    """Every declared alternative of axis `name` of `t` (the default first)."""
    return [a for a in t.axes if a.name == name] + [g.axis for g in t.guarded if g.axis.name == name]


def chosen(t: ir.Tensor, name: str, env: dict[str, Value]) -> ir.Axis:
    """The alternative of `t.name` that applies under `env` (the first `when` that holds, else the default)."""
    for g in t.guarded:
        if g.axis.name == name and eval_expr(g.guard, env) is True:
            return g.axis
    return t.axis(name)


class _Normal:
    """`e`'s structure with the finite parameters of `env` substituted, lets inlined, every
    fully known part evaluated and the operands of commutative operators in a fixed order:
    equal for two spellings of one size under that assignment."""

    def __init__(self, env: dict[str, Value], lets: dict[str, ir.Let], deps: dict[int, set[str]]) -> None:
        self.env, self.lets = env, lets
        self.deps = deps  # id(expr) -> its parameters, shared over the assignments of one comparison

    def known(self, e: ir.Expr) -> bool:
        key = id(e)
        if key not in self.deps:
            self.deps[key] = param_deps(e, self.lets)
        return self.deps[key] <= self.env.keys()

    def __call__(self, e: ir.Expr) -> object:
        if self.known(e):
            try:
                return ("const", eval_expr(e, self.env))
            except EvalError:
                pass
        match e:
            case ir.Ref() if e.kind == "let" and e.name in self.lets:
                return self(self.lets[e.name].value)
            case ir.Op():
                args = [self(a) for a in e.args]
                if e.op in _COMMUTATIVE:
                    args.sort(key=repr)
                return ("op", e.op, *args)
            case ir.Cond():
                cond = self(e.cond)
                if cond in (("const", True), ("const", False)):
                    return self(e.then if cond == ("const", True) else e.orelse)
                return ("if", cond, self(e.then), self(e.orelse))
            case ir.Select():
                subject = self(e.subject)
                if isinstance(subject, tuple) and subject[0] == "const":
                    arm = next((v for m, v in e.cases if m == subject[1]), e.default)
                    if arm is not None:
                        return self(arm)
                return ("match", subject, *((m, self(v)) for m, v in e.cases),
                        None if e.default is None else self(e.default))
            case _:
                return ir.shape(e)


def show_axis(a: ir.Axis) -> str:
    """A layout in words, for a message."""
    if a.layout is Word.NONE:
        return "a plain axis"
    roles = " | ".join(a.roles)
    packed = f" pack {a.pack}" if a.pack > 1 else ""
    if a.pack > 1 and a.pack_order != tuple(range(a.pack)):
        packed += f" order ({', '.join(map(str, a.pack_order))})"
    return f"{a.layout}({roles + ', ' if roles else ''}...){packed}"


@dataclass(frozen=True)
class Side:
    """One axis of an agreement: `tensor.axis`, and which of its sizes must agree."""

    tensor: ir.Tensor
    axis: str


def disagreement(contract: ir.Contract, a: Side, b: Side, *, structure: bool = True, logical: bool = True,
                 padded: bool = True) -> str | None:
    """Why `a` and `b` may differ in some admitted configuration (a clause starting with ": "),
    "" when that cannot be enumerated and they are not spelled alike, or None when they agree or
    only the verifier can tell (see the module docstring)."""
    lets = {let.name: let for let in contract.lets}
    mine, theirs = alternatives(a.tensor, a.axis), alternatives(b.tensor, b.axis)
    guards_a = [g.guard for g in a.tensor.guarded if g.axis.name == a.axis]
    guards_b = [g.guard for g in b.tensor.guarded if g.axis.name == b.axis]
    if len(mine) == len(theirs) and all(_spelled_alike(x, y) for x, y in zip(mine, theirs, strict=True)) \
            and [ir.shape(g) for g in guards_a] == [ir.shape(g) for g in guards_b]:
        return None  # spelled alike, alternative for alternative (`like w13.n`)
    guards = guards_a + guards_b
    sizes = [e for ax in (*mine, *theirs) for e in (ax.logical, ax.padded)]
    finite = {n for e in (*guards, *sizes) for n in param_deps(e, lets) if contract.param(n).finite}
    envs = admitted(contract, finite, (*guards, *sizes))
    if envs is None:  # too many combinations: they must be spelled alike
        same = len(mine) == len(theirs) and all(_spelled_alike(x, y) for x, y in zip(mine, theirs, strict=False))
        return None if same else ""
    unsure = False
    deps: dict[int, set[str]] = {}
    for env in envs:
        try:
            x, y = chosen(a.tensor, a.axis, env), chosen(b.tensor, b.axis, env)
        except EvalError:
            continue
        if structure and (x.layout, x.roles, x.pack, x.pack_order) != (y.layout, y.roles, y.pack, y.pack_order):
            shown = ", ".join(f"{k}={env[k]}" for k in sorted(finite)) or "every configuration"
            return (f": with {shown}, `{a.tensor.name}.{a.axis}` is {show_axis(x)} and "
                    f"`{b.tensor.name}.{b.axis}` is {show_axis(y)}")
        normal = _Normal(env, lets, deps)
        unsure |= (logical and normal(x.logical) != normal(y.logical)) or \
            (padded and normal(x.padded) != normal(y.padded))
    return _refuted(contract, a, b, logical, padded) if unsure else None


def _spelled_alike(x: ir.Axis, y: ir.Axis) -> bool:
    return (x.layout, x.roles, x.pack, x.pack_order, ir.shape(x.logical), ir.shape(x.padded)) == \
        (y.layout, y.roles, y.pack, y.pack_order, ir.shape(y.logical), ir.shape(y.padded))


def _refuted(contract: ir.Contract, a: Side, b: Side, logical: bool, padded: bool) -> str | None:
    """An admitted sample configuration where the sizes differ, as a message clause, or None."""
    for env in _samples(contract):
        try:
            x, y = chosen(a.tensor, a.axis, env), chosen(b.tensor, b.axis, env)
            lx, px, ly, py = (int(eval_expr(e, env)) for e in (x.logical, x.padded, y.logical, y.padded))  # type: ignore[call-overload]
        except EvalError:
            continue
        if (logical and lx != ly) or (padded and px != py):
            shown = ", ".join(f"{p.name}={env[p.name]}" for p in contract.params)
            return (f": with {shown} (admitted), `{a.tensor.name}.{a.axis}` holds {lx} -> {px} and "
                    f"`{b.tensor.name}.{b.axis}` holds {ly} -> {py}")
    return None


_SAMPLED: dict[int, tuple[ir.Contract, list[dict[str, Value]]]] = {}


def _samples(contract: ir.Contract) -> list[dict[str, Value]]:
    """`admitted.samples` once per contract (a contract checks several agreements)."""
    hit = _SAMPLED.get(id(contract))
    if hit is None or hit[0] is not contract:
        _SAMPLED.clear()
        hit = (contract, samples(contract))
        _SAMPLED[id(contract)] = hit
    return hit[1]
