"""One concrete configuration of one contract: its lets, its broken rules, its kernel checks, its costs.

Everything is evaluated in plain Python (``layoutc.compiler.evaluate``; no solver).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from layoutc.compiler import ir
from layoutc.compiler.evaluate import EvalError, Value, axis_sizes, eval_expr, needed_lets, param_deps
from layoutc.tools.audit.costs import PadCosts, pad_costs
from layoutc.tools.audit.params import rule_name

I_PP = "intermediate_size_per_partition"
I_PADDED = "intermediate_size_per_partition_padded"

Violation = tuple[str, str]  # (rule, e.g. "admit line 40"; its message)


@dataclass(frozen=True)
class Prepared:
    """Per-contract data computed once: rules split by kind, lets by name."""

    contract: ir.Contract
    lets: dict[str, ir.Let]
    requires: tuple[ir.Rule, ...]
    admits: tuple[ir.Rule, ...]


def prepare(contract: ir.Contract) -> Prepared:
    """The contract with its lets by name and its rules split into requires and admits."""
    return Prepared(contract, {let.name: let for let in contract.lets}, contract.requires, contract.admits)


@dataclass(frozen=True)
class RowVerdict:
    """What one configuration gives: every parameter, the per-rank widths, the broken rules, the costs.

    intermediate_size_per_partition / _padded: elements; None when a require is broken (the
    lets are then not sizes) or the contract has no such let. violations: empty when the
    contract admits the configuration. costs: only for an admitted configuration.
    """

    params: dict[str, Value]
    intermediate_size_per_partition: int | None
    intermediate_size_per_partition_padded: int | None
    violations: tuple[Violation, ...]
    costs: PadCosts | None = None


def variants(prep: Prepared, free: list[ir.Param], fixed: Mapping[str, Value]) -> list[dict[str, Value]]:
    """Every combination of the free parameters' values, minus the inconsistent ones.

    A combination is inconsistent with this checkpoint when it breaks a `require`
    that reads at least one free parameter and not ``tp_size`` (e.g. marlin_moe_fp8's
    scheme/scale_dtype pairing: block-FP8 scales are float32): no TP degree could
    make it hold, so it is not a configuration worth a row. If every combination
    is inconsistent, all are kept, so the rows show the broken require.
    """
    names = [p.name for p in free]
    free_names = set(names)
    pruning = []
    for rule in prep.requires:
        deps = param_deps(rule.cond, prep.lets)
        if deps & free_names and "tp_size" not in deps and deps <= free_names | set(fixed):
            pruning.append((rule, needed_lets(rule.cond, prep.lets)))
    combos: list[dict[str, Value]] = [dict(zip(names, combo, strict=True))
                                      for combo in itertools.product(*(p.values for p in free))]
    kept = [variant for variant in combos if _consistent({**fixed, **variant}, pruning)]
    return kept or combos


def _consistent(env: Mapping[str, Value], pruning: Sequence[tuple[ir.Rule, list[ir.Let]]]) -> bool:
    """Whether every pruning require holds in ``env`` (a require that cannot be evaluated does not)."""
    for rule, lets in pruning:
        local = dict(env)
        try:
            for let in lets:
                local[let.name] = eval_expr(let.value, local)
            if not eval_expr(rule.cond, local):
                return False
        except EvalError:
            return False
    return True


def evaluate_row(prep: Prepared, config: Mapping[str, Value], num_moe_layers: int, activation: str | None = None,
                 unstated: Sequence[tuple[str, float]] = ()) -> RowVerdict:
    """Lets, rules, kernel aligns and costs of one concrete configuration.

    With ``activation`` (the model's), the kernel's `activation` clause is evaluated
    in this configuration and must equal it; ``unstated`` are (name, value) SwiGLU
    constants the model has and the contract has no parameter for: a row whose
    kernel computes swigluoai cannot be confirmed and is refused.
    """
    contract = prep.contract
    env = _lets(contract, config)
    params = {p.name: config[p.name] for p in contract.params}
    violations = _broken(prep.requires, env)
    if violations:
        # Not a well-formed configuration: its lets (I_pp = I // tp) are not sizes.
        return RowVerdict(params, None, None, tuple(violations))
    i_pp, padded = _size(env, I_PP), _size(env, I_PADDED)
    violations = _broken(prep.admits, env)
    if activation is not None:
        violations = _activation_violations(contract, env, activation, unstated) + violations
    if not violations:
        violations = _align_violations(contract, env)
    if violations:
        return RowVerdict(params, i_pp, padded, tuple(violations))
    return RowVerdict(params, i_pp, padded, (), pad_costs(contract, env, i_pp, padded, num_moe_layers))


def _lets(contract: ir.Contract, config: Mapping[str, Value]) -> dict[str, Value]:
    """The configuration with every let that can be evaluated in it."""
    env = dict(config)
    for let in contract.lets:
        try:
            env[let.name] = eval_expr(let.value, env)
        except EvalError:
            continue  # a later reference reports it; a broken require usually explains it
    return env


def _broken(rules: Iterable[ir.Rule], env: Mapping[str, Value]) -> list[Violation]:
    """The rules that do not hold in ``env`` (one that cannot be evaluated does not hold)."""
    out = []
    for rule in rules:
        try:
            holds = bool(eval_expr(rule.cond, env))
            message = rule.message
        except EvalError as exc:
            holds, message = False, f"{rule.message} (undefined here: {exc})"
        if not holds:
            out.append((rule_name(rule.kind, rule.span.line), message))
    return out


def _size(env: Mapping[str, Value], name: str) -> int | None:
    value = env.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _activation_violations(contract: ir.Contract, env: Mapping[str, Value], activation: str,
                           unstated: Sequence[tuple[str, float]]) -> list[Violation]:
    """The kernel's `activation` clause at ``env`` against the model's; listed before the admits."""
    if contract.kernel is None or contract.kernel.activation is None:
        return []
    act = contract.kernel.activation
    try:
        computed: Value = eval_expr(act, env)
    except EvalError as exc:
        computed = f"<undefined: {exc}>"
    where = rule_name("kernel", act.span.line)
    if computed != activation:
        return [(where, f"the kernel computes {computed} here; the model needs {activation}")]
    if computed != "swigluoai":
        return []
    # each one goes first, so the last listed constant is reported first
    return [(where, f"the model's swigluoai uses {name} = {value:g}, and this contract "
                    f"has no {name} parameter: audit cannot confirm the kernel uses "
                    "the same constant")
            for name, value in reversed(unstated)]


def _align_violations(contract: ir.Contract, env: Mapping[str, Value]) -> list[Violation]:
    """The kernel's `align` clauses that do not hold at ``env``.

    The verifier proves these for every admitted configuration; they are checked here
    concretely so an unverified contract cannot report a false fast path.
    """
    if contract.kernel is None:
        return []
    violations: list[Violation] = []
    try:
        sizes = axis_sizes(contract, env)
        for align in contract.kernel.aligns:
            if not eval_expr(align.cond, env, sizes):
                violations.append((rule_name("align", align.span.line), align.message))
    except EvalError as exc:
        violations.append(("align", f"kernel alignment could not be evaluated: {exc}"))
    return violations
