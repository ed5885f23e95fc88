"""Layout cases: a contract whose layout depends on finite parameters, one layout at a time.

A contract's layout can change with its parameters in two ways: an axis declared
with `when` alternatives, and a glue whose kernel reads w13 with a different view
per activation (its declared interface). Both depend on finite parameters only,
so the configurations split into finitely many *layout cases*, in each of which
every axis and the kernel's view are fixed. `layout_cases` enumerates them and
`specialise` builds, for each, an ordinary contract (no alternatives, the view the
kernel really reads, and a `require` that restricts it to the case), which the
verifier proves like any other. A configuration belongs to exactly one case.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace

from layoutc.compiler import glues, ir
from layoutc.compiler.diagnostics import Span
from layoutc.compiler.evaluate import EvalError, Value, eval_expr, needed_lets, param_deps
from layoutc.runtime.algebra import ViewWord
from layoutc.runtime.vocab import Op

MAX_ASSIGNMENTS = 4096


@dataclass(frozen=True)
class LayoutCase:
    """One layout case: the parameter assignments it covers and its specialised contract."""

    label: str
    assignments: tuple[tuple[tuple[str, Value], ...], ...]
    contract: ir.Contract


class TooManyCases(ValueError):
    """The layout-selecting parameters have more than MAX_ASSIGNMENTS combinations."""


def selectors(contract: ir.Contract) -> list[str]:
    """The finite parameters the layout depends on (guards, and the glue's activation)."""
    lets = {let.name: let for let in contract.lets}
    names: set[str] = set()
    for t in contract.tensors:
        for alt in t.guarded:
            names |= param_deps(alt.guard, lets)
    act = glue_activation(contract)
    if act is not None:
        names |= param_deps(act, lets)
    return sorted(n for n in names if contract.param(n).finite)


def glue_activation(contract: ir.Contract) -> ir.Expr | None:
    """The expression the glue passes as its activation, if it binds one."""
    if contract.glue is None:
        return None
    bound = next((e for name, e in contract.glue.args if name == "activation"), None)
    if bound is None and contract.kernel is not None:
        return contract.kernel.activation  # a glue that computes the activation itself
    return bound


def _env(contract: ir.Contract, assignment: Mapping[str, Value], expr: ir.Expr) -> dict[str, Value]:
    env: dict[str, Value] = dict(assignment)
    for let in needed_lets(expr, {let.name: let for let in contract.lets}):
        env[let.name] = eval_expr(let.value, env)
    return env


def resolve(tensor: ir.Tensor, env: Mapping[str, Value]) -> ir.Tensor:
    """`tensor` with each axis's first `when` alternative that holds under `env`, else its default."""
    if not tensor.guarded:
        return tensor
    axes = []
    for axis in tensor.axes:
        chosen = axis
        for alt in tensor.guarded:
            if alt.axis.name == axis.name and eval_expr(alt.guard, env) is True:
                chosen = alt.axis
                break
        axes.append(chosen)
    return replace(tensor, axes=tuple(axes), guarded=())


def kernel_view(contract: ir.Contract, env: Mapping[str, Value]) -> ir.View | None:
    """The w13 view the bound glue's kernel reads under `env` (None: no glue, or not computed)."""
    act = glue_activation(contract)
    if act is None or contract.glue is None:
        return None
    glue = glues.registry().get(contract.glue.kind)
    if glue is None:
        return None
    name = eval_expr(act, _env(contract, env, act))
    declared = glue.interface.activation(str(name))
    if declared is None:
        return None
    w13 = contract.weight("w13")
    return ir.View(w13.name, "n", ViewWord.parse(declared.view), declared.roles, contract.glue.span)


def specialise(contract: ir.Contract, env: Mapping[str, Value], restrict: ir.Expr | None = None,
               label: str = "") -> ir.Contract:
    """The contract with every alternative resolved under `env` and the glue's view as the kernel's.

    `restrict` (a bool expression) is added as a `require`, so the result speaks of
    that case's configurations only.
    """
    tensors = tuple(resolve(t, env) for t in contract.tensors)
    kernel = contract.kernel
    view = kernel_view(contract, env)
    if kernel is not None and view is not None:
        others = tuple(v for v in kernel.views if (v.tensor, v.axis) != (view.tensor, view.axis))
        kernel = replace(kernel, views=(*others, view))
    rules = contract.rules
    if restrict is not None:
        rules = (*rules, ir.Rule("require", restrict, f"layout case {label}", contract.span))
    return replace(contract, tensors=tensors, kernel=kernel, rules=rules)


def _literal(param: ir.Param, value: Value) -> ir.Expr:
    ref = ir.Ref(param.name, "param", param.type, param.span)
    const = ir.Const(value, param.type, param.span)
    return ir.Op(Op.EQ, (ref, const), ir.BOOL, param.span)


def _join(op: Op, parts: list[ir.Expr], span: Span) -> ir.Expr:
    out = parts[0]
    for p in parts[1:]:
        out = ir.Op(op, (out, p), ir.BOOL, span)
    return out


def _signature(contract: ir.Contract, env: Mapping[str, Value]) -> tuple[object, ...]:
    picks: list[object] = []
    for t in contract.tensors:
        for alt in t.guarded:
            picks.append(eval_expr(alt.guard, env) is True)
    view = kernel_view(contract, env)
    picks.append(None if view is None else (view.view, view.roles))
    return tuple(picks)


def layout_cases(contract: ir.Contract) -> list[LayoutCase]:
    """Every layout case of `contract`, in a fixed order (one case when nothing varies).

    Raises TooManyCases when the selecting parameters have too many combinations.
    """
    names = selectors(contract)
    params = [contract.param(n) for n in names]
    total = 1
    for p in params:
        total *= len(p.values)
    if total > MAX_ASSIGNMENTS:
        raise TooManyCases(f"the layout depends on {', '.join(names)}: {total} combinations "
                           f"(at most {MAX_ASSIGNMENTS})")
    groups: dict[tuple[object, ...], list[tuple[tuple[str, Value], ...]]] = {}
    for combo in itertools.product(*(p.values for p in params)):
        env = dict(zip(names, combo, strict=True))
        try:
            key = _signature(contract, env)
        except EvalError:
            continue
        groups.setdefault(key, []).append(tuple(env.items()))
    if len(groups) <= 1:
        env = dict(next(iter(groups.values()))[0]) if groups else {}
        return [LayoutCase("", tuple(next(iter(groups.values()), [()])), specialise(contract, env))]
    cases = []
    for assignments in groups.values():
        by_param = {n: sorted({dict(a)[n] for a in assignments}, key=str) for n in names}
        label = ", ".join(f"{n} in {{{', '.join(str(v) for v in vs)}}}" for n, vs in by_param.items()
                          if len(vs) < len(contract.param(n).values))
        disjuncts = [_join(Op.AND, [_literal(contract.param(n), v) for n, v in a], contract.span)
                     for a in assignments]
        restrict = _join(Op.OR, disjuncts, contract.span)
        cases.append(LayoutCase(label, tuple(assignments),
                                specialise(contract, dict(assignments[0]), restrict, label)))
    return cases


def specialise_for(contract: ir.Contract, config: Mapping[str, Value]) -> ir.Contract:
    """The specialised contract for one concrete configuration (explain, audit, pictures)."""
    names = selectors(contract)
    return specialise(contract, {n: config[n] for n in names if n in config})
