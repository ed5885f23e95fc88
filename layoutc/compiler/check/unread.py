"""LC309: a parameter that nothing the contract states reads (issue 39, item 3).

A `param` is a fact about the kernel's configuration. The verifier can only hold a
parameter to what the contract states with it: a tensor (its axes, storage, fills,
decode), the kernel block (views, aligns, activation, arguments), the glue's arguments,
the shard and the expert parallelism. A parameter none of those reads changes nothing
the proof sees (the bound glue's activation constants are read by the binding, LC530),
so if it changes what the kernel computes (GPTQ `act_order`: the groups
follow `g_idx`, not `k // g`) that change is proved away. It is refused unless

- a rule ties it to what is stated: a `require` or `admit` that reads it together with a
  stated parameter, and whose truth depends on it (over finite parameters this is
  evaluated: some assignment of the rule's other parameters admits some of its values
  and not others; a rule that also reads an integer range is taken as a tie),
  `require not act_order or group_size == -1`;
- the rules pin it to one value (it cannot vary: `admit swiglu_alpha_milli == 1702`),
  or its domain has one value;
- or its values are all model dtypes (vocab.MODEL_DTYPES): the activation dtype, over
  which every property is proved (the verifier's bounds hold in each compute dtype,
  docs/verification.md), so the proof does not depend on it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from layoutc.compiler import glues, ir
from layoutc.compiler.cases import MAX_ASSIGNMENTS
from layoutc.compiler.check.admitted import admitted
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.evaluate import EvalError, eval_expr, needed_lets, param_deps
from layoutc.runtime.vocab import MODEL_DTYPES


def check_unread_params(scope: Scope, sink: Sink) -> None:
    """Pass (on the built contract): LC309 for every parameter nothing stated reads, that no
    rule ties to a stated one or pins (see the module docstring)."""
    c = scope.contract
    if c is None:
        return
    lets = {let.name: let for let in c.lets}
    stated = stated_params(c)
    for p in c.params:
        if p.name in stated or _constant(p) or (p.values and all(str(v) in MODEL_DTYPES for v in p.values)):
            continue
        if any(_ties(c, lets, rule, p, stated) for rule in c.rules) or _pinned(c, p):
            continue
        sink.error("LC309", p.span, f"parameter `{p.name}` is read by no tensor, decode, kernel or glue argument, "
                   "shard or expert placement, and no `require` ties it to one: whatever it changes in the kernel "
                   "is invisible to the proof",
                   help=f"state what `{p.name}` changes (a tensor, decode or argument that reads it), or tie it "
                        "with a rule to the parameters that do (as marlin_moe_wna16's `require not act_order or "
                        "group_size == -1`), or remove it")


def stated_params(c: ir.Contract) -> set[str]:
    """The parameters the contract's statements read (tensors, kernel, glue, shard, experts),
    directly, by name (a `storage P`, a shard count, a constant the bound glue's kernel fixes
    for an activation: the binding holds it, LC530) or through lets."""
    names: set[str] = set()
    for part in (c.tensors, c.kernel, c.glue, c.shard, c.ep):
        _names(part, names)
    bound = glues.registry().get(c.glue.kind) if c.glue is not None else None
    if bound is not None:  # the constants the glue's kernel fixes, held to the contract's parameters (LC530)
        names |= {n for a in bound.interface.activations for n, _ in a.constants}
    lets = {let.name: let for let in c.lets}
    out = {n for n in names if n in {p.name for p in c.params}}
    for name in names & set(lets):
        out |= param_deps(ir.Ref(name, "let", lets[name].type, lets[name].span), lets)
    return out


#: The string fields of the IR that name a parameter (every other read is an expression's `Ref`).
#: A message, a tensor, axis, role, glue or kernel name is no read: `align ... : "act_order"`
#: once made `act_order` "stated".
_PARAM_FIELDS: dict[type, tuple[str, ...]] = {
    ir.ParamStorage: ("param",),
    ir.Shard: ("count",),
    ir.ExpertParallel: ("experts", "count", "redundant"),
}


def _names(obj: object, acc: set[str]) -> None:
    """Every parameter name `obj` reads: references in expressions, and the string fields that
    name a parameter (`_PARAM_FIELDS`: a storage parameter, a shard or EP count, an EP
    placement parameter)."""
    if isinstance(obj, ir.Ref):
        acc.add(obj.name)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for name in _PARAM_FIELDS.get(type(obj), ()):
            value = getattr(obj, name)
            if isinstance(value, str):
                acc.add(value)
        if isinstance(obj, ir.ExpertParallel) and obj.placement_param:
            acc.update(obj.placement)
        for f in dataclasses.fields(obj):
            if f.name != "span":
                _names(getattr(obj, f.name), acc)
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            _names(x, acc)


def _constant(p: ir.Param) -> bool:
    return (p.finite and len(p.values) == 1) or (p.kind == "range" and p.low == p.high)


def _ties(c: ir.Contract, lets: dict[str, ir.Let], rule: ir.Rule, p: ir.Param, stated: set[str]) -> bool:
    """Whether `rule` reads `p` and a stated parameter, and its truth depends on `p`."""
    deps = param_deps(rule.cond, lets)
    if p.name not in deps or not deps & stated:
        return False
    others = sorted(deps - {p.name})
    params = [c.param(n) for n in others]
    if not all(q.finite for q in params) or not p.finite \
            or math.prod(len(q.values) for q in params) * len(p.values) > MAX_ASSIGNMENTS:
        return True  # an integer range in the rule: taken as a tie (it cannot be enumerated)
    needed = needed_lets(rule.cond, lets)
    for combo in itertools.product(*(q.values for q in params)):
        truth = set()
        for v in p.values:
            env = {**dict(zip(others, combo, strict=True)), p.name: v}
            try:
                for let in needed:
                    env[let.name] = eval_expr(let.value, env)
                truth.add(eval_expr(rule.cond, env) is True)
            except EvalError:
                continue
        if len(truth) == 2:
            return True
    return False


def _pinned(c: ir.Contract, p: ir.Param) -> bool:
    """Whether the rules over finite parameters admit at most one value of `p`."""
    if not p.finite:
        return False
    envs = admitted(c, {p.name}, ())
    if envs is None:
        return False
    seen = set()
    for env in envs:
        seen.add(env[p.name])
        if len(seen) > 1:
            return False
    return True
