"""The configurations a kit runs: picked by z3 over a contract's parameters at kit-writing time.

Each goal is a class of configuration the contract's own formulas define (no table of
contract names): for every pair of `let X` / `let X_padded` the aligned class (no pad), the
short-pad class (one element below the next boundary) and the long-pad class (one past a
boundary: the largest pad found); each TP degree class of the `tp_size` domain (1, 2, an odd
degree, 8); each value of each enum parameter; for `ep_size`, a short and an empty last rank;
for a `shard ... in blocks of B`, a short last rank of blocks. Refused configurations are,
for each `require` and `admit` rule, one that satisfies every other rule and the domains but
not that one: the first configuration just outside admission by that rule.

Sizes are kept small (CPU tensors): each goal is asked under growing bounds on the range
parameters (`num_experts` first at 1..4) and the first bound that answers sat wins. A goal
the solver cannot decide (unknown) is reported as such and is never a configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import z3  # type: ignore[import-untyped]

from layoutc.compiler import ir
from layoutc.compiler.verify.smt import Encoder

# Upper bounds tried, in turn, on hidden_size / intermediate_size (and every other range param).
BOUNDS = (64, 256, 1024, 4096, 16384, 65536, 262144)
EXPERT_BOUNDS = (4, 16, 1024)
TIMEOUT_MS = 4000
TP_CLASSES = (1, 2, 3, 8)


@dataclass(frozen=True)
class Picked:
    """One configuration: `labels` are the goals it stands for, `params` every plan() parameter
    (enum values by name), `rule` the refused rule's message (refused configurations only)."""

    labels: tuple[str, ...]
    params: dict[str, Any]
    rule: str = ""
    line: int = 0


@dataclass
class Picks:
    admitted: list[Picked] = field(default_factory=list)
    refused: list[Picked] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)  # goals no admitted configuration meets (unsat)
    unknown: list[str] = field(default_factory=list)  # goals the solver could not decide


class _Solver:
    def __init__(self, contract: ir.Contract, scope: dict[str, tuple[Any, ...]]) -> None:
        self.c = contract
        self.enc = Encoder(contract)
        within = [z3.Or([self.var(k) == self.value(k, x) for x in values]) for k, values in scope.items()]
        self.base = z3.And(self.enc.domain(), *within)
        self.rules = [(r, self.enc.expr(r.cond)) for r in contract.rules]

    def var(self, name: str) -> z3.ExprRef:
        return self.enc.vars[name]

    def value(self, name: str, value: Any) -> z3.ExprRef:
        return self.enc.param_value(name, value)

    def admitted(self) -> z3.BoolRef:
        return z3.And([f for _, f in self.rules]) if self.rules else z3.BoolVal(True, self.enc.ctx)

    def _bounds(self, limit: int, experts: int) -> list[z3.BoolRef]:
        out = []
        for p in self.c.params:
            if p.kind == "range":
                high = experts if p.name == "num_experts" else limit
                out.append(self.var(p.name) <= max(p.low, min(high, p.high)))
            elif p.kind == "set" and limit < 16384 and any(isinstance(x, int) and x <= 8 for x in p.values):
                out.append(self.var(p.name) <= 8)  # small degrees first (tp_size, ep_size): fewer ranks to run
        return out

    def pick(self, goal: z3.BoolRef) -> tuple[str, dict[str, Any] | None]:
        """("sat", config) under the smallest bound that admits one, ("unsat", None), or ("unknown", None)."""
        last = "unsat"
        for experts in EXPERT_BOUNDS:
            for limit in BOUNDS:
                s = z3.Solver(ctx=self.enc.ctx)
                s.set("timeout", TIMEOUT_MS)
                s.add(self.base, *self.enc.aux, goal, *self._bounds(limit, experts))
                s.add(*self.enc.aux)  # definitions made while encoding `goal`
                answer = s.check()
                if answer == z3.sat:
                    return "sat", self._decode(s.model())
                if answer == z3.unknown:
                    last = "unknown"
        return last, None

    def _decode(self, model: z3.ModelRef) -> dict[str, Any]:
        config = self.enc.decode_config(model)
        return {k: (int(v) if isinstance(v, int) and not isinstance(v, bool) else v) for k, v in config.items()}

    def evaluate(self, config: dict[str, Any], name: str) -> int:
        s = z3.Solver(ctx=self.enc.ctx)
        s.add(self.base, *self.enc.aux, *[self.var(k) == self.value(k, v) for k, v in config.items()])
        assert s.check() == z3.sat
        return self.enc.evaluate(s.model(), self.var(name)).as_long()  # type: ignore[attr-defined, no-any-return]


def _padded_pairs(contract: ir.Contract) -> list[tuple[str, str]]:
    names = {let.name for let in contract.lets} | {p.name for p in contract.params}
    return [(let.name[: -len("_padded")], let.name) for let in contract.lets
            if let.name.endswith("_padded") and let.name[: -len("_padded")] in names]


def _goals(sv: _Solver) -> list[tuple[str, z3.BoolRef]]:
    c, v = sv.c, sv.var
    ok = sv.admitted()
    goals: list[tuple[str, z3.BoolRef]] = []
    pairs = _padded_pairs(c)
    for base, padded in pairs:
        goals.append((f"aligned: {padded} == {base}", z3.And(ok, v(padded) == v(base))))
        goals.append((f"unaligned, short pad: {padded} - {base} == 1", z3.And(ok, v(padded) - v(base) == 1)))
    names = {p.name for p in c.params}
    if "tp_size" in names:
        domain = c.param("tp_size").values or tuple(range(c.param("tp_size").low, c.param("tp_size").high + 1))
        for tp in [t for t in TP_CLASSES if t in domain]:
            pads = [v(p) != v(b) for b, p in pairs]
            padded_goal = z3.And(ok, v("tp_size") == tp, z3.Or(pads)) if pads else None
            goals.append((f"tp_size == {tp}" + (", padded" if pads else ""), padded_goal if pads else
                          z3.And(ok, v("tp_size") == tp)))
    for p in c.params:
        if p.kind == "enum":
            for value in p.values:
                goals.append((f"{p.name} == {value}", z3.And(ok, v(p.name) == sv.value(p.name, value))))
    if "ep_size" in names and "num_experts" in names:
        e, ep = v("num_experts"), v("ep_size")
        per_rank = (e + ep - 1) / ep
        goals.append(("ep: short last rank", z3.And(ok, ep > 1, e % ep != 0, e > (ep - 1) * per_rank)))
        goals.append(("ep: empty last rank", z3.And(ok, ep > 1, e <= (ep - 1) * per_rank)))
    block = c.block_shard
    if block is not None and block.blocks is not None and block.count in names:
        # B and FULL are the contract's own expressions (a literal, a parameter or a let); units = FULL / B
        size, full, tp = sv.enc.expr(block.blocks), sv.enc.expr(block.full), v(block.count)
        units, shown = full / size, _shown(block.blocks)
        per_rank = (units + tp - 1) / tp
        goals.append((f"blocks of {shown}: short last rank, padded",
                      z3.And(ok, size > 0, tp > 1, units % tp != 0)))
        goals.append((f"blocks of {shown}: empty last rank, padded",
                      z3.And(ok, size > 0, tp > 1, units <= (tp - 1) * per_rank)))
    return goals


def _shown(e: ir.Expr) -> str:
    """A block size as the contract writes it: the literal or the name."""
    return str(getattr(e, "value", None) if getattr(e, "value", None) is not None else getattr(e, "name", e))


def _long_pad(sv: _Solver, base: str, padded: str) -> tuple[str, dict[str, Any] | None]:
    """The largest pad under the bounds (one past an alignment boundary), grown a few times."""
    v, ok = sv.var, sv.admitted()
    status, best = sv.pick(z3.And(ok, v(padded) - v(base) >= 2))
    for _ in range(6):
        if best is None:
            break
        gap = sv.evaluate(best, padded) - sv.evaluate(best, base)
        status2, more = sv.pick(z3.And(ok, v(padded) - v(base) > gap, v(base) <= 4 * max(1, sv.evaluate(best, base))))
        if status2 != "sat":
            break
        best = more
    return status, best


def pick(contract: ir.Contract, scope: dict[str, tuple[Any, ...]] | None = None) -> Picks:
    """Every goal's configuration (deduplicated: one configuration carries every label it
    meets), then one refused configuration per rule; every one inside `scope` (parameter ->
    the values the engine path takes)."""
    sv = _Solver(contract, scope or {})
    out = Picks()
    found: dict[tuple[tuple[str, Any], ...], list[str]] = {}
    configs: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}

    def add(label: str, status: str, config: dict[str, Any] | None) -> None:
        if status == "unknown":
            out.unknown.append(label)
        elif config is None:
            out.empty.append(label)
        else:
            key = tuple(sorted(config.items()))
            found.setdefault(key, []).append(label)
            configs[key] = config

    for label, goal in _goals(sv):
        add(label, *sv.pick(goal))
    for base, padded in _padded_pairs(contract):
        add(f"unaligned, long pad: largest {padded} - {base} found", *_long_pad(sv, base, padded))
    out.admitted = [Picked(tuple(labels), configs[key]) for key, labels in found.items()]
    for i, (rule, formula) in enumerate(sv.rules):
        others = [f for j, (_, f) in enumerate(sv.rules) if j != i]
        status, config = sv.pick(z3.And(*others, z3.Not(formula)))
        label = f"{rule.kind} line {rule.span.line}: {rule.message}"
        if status == "unknown":
            out.unknown.append(label)
        elif config is None:
            out.empty.append(label)
        else:
            out.refused.append(Picked((label,), config, rule.message, rule.span.line))
    return out
