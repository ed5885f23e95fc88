"""Prove pad-soundness properties of a contract with z3, by refutation.

Each property is a set of obligations. An obligation asks z3 for a
configuration (and, where needed, an index or a value) that is admitted by the
contract yet breaks the rule: `unsat` proves it, `sat` is a counterexample,
`unknown` is inconclusive (never a pass). Every query gets a fresh solver with
a fixed seed, a timeout and a resource limit. Sizes stay symbolic; see
docs/verification.md for each property's encoding.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import z3
from z3 import z3core

from layoutc.compiler import ir
from layoutc.compiler.diagnostics import Span
from layoutc.compiler.evaluate import EvalError, Value, eval_lets
from layoutc.runtime.numformats import FORMATS, NAN_NOTE
from layoutc.compiler.picture import find_view, tensor_picture
from layoutc.compiler.verify.smt import Encoder
from layoutc.compiler.verify.verdicts import PROPERTIES, PROPERTY_IDS, Counterexample, Options, Status, Verdict

__all__ = ["PROPERTIES", "PROPERTY_IDS", "Counterexample", "Options", "Status", "Verdict", "verify"]

ROLE_ID = {"gate": 0, "up": 1, "": 0}
MINIMIZE_QUERIES = 16
# z3's arith.solver for the whole-domain attempt and, in turn, for each case (None: z3's
# default). The older solver (2) settles these size formulas (div/mod by numerals) fastest;
# a case it gives up on is asked again with the default one.
QUICK_ARITH: tuple[int | None, ...] = (2,)
CASE_ARITH: tuple[int | None, ...] = (2, None)
# The first attempt at every query: z3's SMT core alone (SimpleSolver), arith.solver 2.
CORE_ARITH: int | None = 2
CORE_RLIMIT_FACTOR = 10
# How deep a query's And/Or structure is searched for the terms the shared solver holds.
SHAPE_DEPTH = 5


@dataclass
class _Obligation:
    name: str
    span: Span
    goal: z3.BoolRef  # satisfiable iff the rule is broken
    explain: Any  # callable(model) -> (message, where)
    tensor: str | None = None


@dataclass
class _Run:
    contract: ir.Contract
    options: Options
    fixed: dict[str, Value] = field(default_factory=dict)
    enc: Encoder = field(init=False)
    queries: int = 0

    def __post_init__(self) -> None:
        self.enc = Encoder(self.contract)
        self.ctx = self.enc.ctx
        self.base = self.enc.domain()
        self.requires = [f for _, f in self.enc.rules("require")]
        self.admits = self.enc.rules("admit")
        pins = [self.enc.vars[k] == self.enc.param_value(k, v) for k, v in self.fixed.items()]
        self.base = z3.And(self.base, *pins)
        self.admitted = z3.And([self.base, *self.requires, *[f for _, f in self.admits]])
        self.sizes = self._axis_sizes()
        self._cases: list[list[tuple[z3.ExprRef, z3.ExprRef]]] | None = None
        self._shared: z3.Solver | None = None
        self._held = _Held()
        self._aux_held = 0  # how many of enc.aux the shared solver holds in its current scopes
        self.deadline = time.perf_counter() + self.options.budget_s

    # ---- solving ----
    def cases(self) -> list[list[tuple[z3.ExprRef, z3.ExprRef]]]:
        """Substitutions for every combination of the finite parameters that feed a divisor
        or a table: each case leaves only numerals as divisors (sizes stay symbolic)."""
        if self._cases is None:
            names = sorted(self.enc.split_params)
            domains = [[(self.enc.vars[n], self.enc.param_value(n, v)) for v in self.contract.param(n).values]
                       for n in names]
            self._cases = [list(combo) for combo in itertools.product(*domains)]
        return self._cases

    def solve(self, goal: z3.BoolRef, extra: list[z3.BoolRef] | None = None,
              quick_only: bool = False) -> tuple[str, z3.ModelRef | None]:
        """Decide `goal` (and `extra`) over the whole domain: ("sat", model), ("unsat", None),
        or ("unknown (why)", None), which is never a pass.

        The attempts, in turn, until one answers sat or unsat (each answer is z3's own, so
        their order only decides the time taken and which model a sat query returns):
        1. z3's SMT core alone (SimpleSolver: no preprocessing tactics, which these
           div/mod-by-numeral formulas mostly defeat): first the run's shared incremental
           solver, which holds the domain and the requires every query shares (a query
           inside a push), then a fresh one;
        2. the tactic solver on the whole domain under `quick_rlimit`;
        3. unless `quick_only` (informational queries), one solver per case (every
           combination of the finite parameters that feed a divisor), specialised to
           numerals: sat in any case is a counterexample (the first, in a fixed order),
           unknown in any case (and sat in none) is inconclusive.
        Every solver also gets the definitions of the encoder's quotient and remainder
        variables (`Encoder.aux`): the shared one holds those made so far, the query the rest.
        """
        formula = z3.And(goal, *(extra or []))
        if self.remaining_ms() <= 0:
            return f"unknown (the contract's verification budget of {self.options.budget_s:g} s is spent)", None
        status, model = self._shared_core(formula)
        # every other solver gets the quotient/remainder definitions with the query
        formula = z3.And(formula, *self.enc.aux)
        if status == "unknown":
            status, model = self._core(formula)
        if status != "unknown":
            return status, model
        if self.remaining_ms() <= 0:
            return f"unknown (the contract's verification budget of {self.options.budget_s:g} s is spent)", None
        # Then the whole domain at once under a small, deterministic resource budget, with
        # the solvers of QUICK_ARITH in turn (arith.solver=2 settles most size formulas with
        # div/mod by numerals fastest); only if that is not enough, case by case.
        for arith in QUICK_ARITH:
            solver = z3.Solver(ctx=self.ctx)
            if arith is not None:
                solver.set("arith.solver", arith)
            solver.set("rlimit", self.options.quick_rlimit)
            solver.set("timeout", min(self.options.timeout_ms, self.remaining_ms()))
            solver.set("random_seed", self.options.seed)
            solver.add(formula)
            self.queries += 1
            result = solver.check()
            if result == z3.sat:
                return "sat", solver.model()
            if result == z3.unsat:
                return "unsat", None
        unknown = None
        if quick_only:
            return f"unknown (whole domain: {solver.reason_unknown()})", None
        cases = self.cases()
        if len(cases) > self.options.max_cases:
            return (f"unknown (whole domain: {solver.reason_unknown()}; {len(cases)} cases exceed the "
                    f"case-split limit {self.options.max_cases})"), None
        deadline = time.perf_counter() + 4 * self.options.timeout_ms / 1000
        for case in cases:
            if time.perf_counter() > deadline:
                return f"unknown (case split ran past {4 * self.options.timeout_ms} ms)", None
            budget = self.remaining_ms()
            if budget <= 0:
                return f"unknown (the contract's verification budget of {self.options.budget_s:g} s is spent)", None
            specialised = z3.simplify(z3.substitute(formula, *case)) if case else formula
            # the solvers of one case share one per-query timeout; only the last gets the
            # full resource limit
            case_end = time.perf_counter() + self.options.timeout_ms / 1000
            result, reason = z3.unknown, f"timeout ({self.options.timeout_ms} ms per query)"
            for n, arith in enumerate(CASE_ARITH):  # the next solver only where the previous one gave up
                left = min(int((case_end - time.perf_counter()) * 1000), self.remaining_ms())
                if left <= 0:
                    break
                solver = z3.Solver(ctx=self.ctx)
                if arith is not None:
                    solver.set("arith.solver", arith)
                solver.set("timeout", left)
                solver.set("rlimit", self.options.rlimit if n == len(CASE_ARITH) - 1
                           else min(self.options.rlimit, 10 * self.options.quick_rlimit))
                solver.set("random_seed", self.options.seed)
                solver.add(specialised, *(var == value for var, value in case))
                self.queries += 1
                result = solver.check()
                if result == z3.sat:
                    return "sat", solver.model()
                if result != z3.unknown:
                    break
                reason = solver.reason_unknown()
            if result != z3.unsat and unknown is None:
                unknown = f"unknown ({reason})"
        if unknown is not None:
            return unknown, None
        return "unsat", None

    def _core_solver(self) -> z3.Solver:
        solver = z3.SimpleSolver(ctx=self.ctx)
        if CORE_ARITH is not None:
            solver.set("arith.solver", CORE_ARITH)
        solver.set("random_seed", self.options.seed)
        return solver

    def _core_limits(self, solver: z3.Solver) -> None:
        solver.set("rlimit", min(self.options.rlimit, CORE_RLIMIT_FACTOR * self.options.quick_rlimit))
        solver.set("timeout", max(1, min(self.options.timeout_ms, self.remaining_ms())))

    def _core(self, formula: z3.BoolRef) -> tuple[str, z3.ModelRef | None]:
        """A fresh SimpleSolver (z3's SMT core, arith.solver CORE_ARITH) on the whole domain,
        under min(rlimit, CORE_RLIMIT_FACTOR * quick_rlimit) and the query timeout."""
        solver = self._core_solver()
        self._core_limits(solver)
        solver.add(formula)
        self.queries += 1
        result = solver.check()
        if result == z3.sat:
            return "sat", solver.model()
        if result == z3.unsat:
            return "unsat", None
        return "unknown", None

    def _shared_solver(self) -> z3.Solver:
        if self._shared is None:
            self._shared = self._core_solver()
            self._held.push([self.base, *self.requires])
            self._shared.add(self.base, *self.requires)
        self._shared.add(*self.enc.aux[self._aux_held:])
        self._aux_held = len(self.enc.aux)
        return self._shared

    @contextlib.contextmanager
    def holding(self, *parts: z3.BoolRef) -> Iterator[None]:
        """The shared solver holds `parts` too (in a scope) while the block runs: for a run of
        queries that all entail them, so that they are internalised once."""
        solver = self._shared_solver()
        solver.push()
        aux_held = self._aux_held
        solver.add(*parts)
        self._held.push(list(parts))
        try:
            yield
        finally:
            self._held.pop()
            solver.pop()
            self._aux_held = aux_held

    def _shared_core(self, formula: z3.BoolRef) -> tuple[str, z3.ModelRef | None]:
        """`formula` in the run's incremental SMT-core solver, inside a push, when it entails
        everything that solver holds (the domain, the pins and the requires at its base, and
        what `holding` adds: each a conjunct of the formula, so holding it changes nothing);
        else "unknown"."""
        solver = self._shared_solver()  # first: it holds the base from its creation on
        if not self._held.entailed_by(formula):
            return "unknown", None
        self._core_limits(solver)
        solver.push()
        try:
            solver.add(formula, *self.enc.aux[self._aux_held:])
            self.queries += 1
            result = solver.check()
            model = solver.model() if result == z3.sat else None
        finally:
            solver.pop()
        if result == z3.sat:
            return "sat", model
        if result == z3.unsat:
            return "unsat", None
        return "unknown", None

    def remaining_ms(self) -> int:
        return int((self.deadline - time.perf_counter()) * 1000)

    def minimize(self, goal: z3.BoolRef, model: z3.ModelRef) -> z3.ModelRef:
        """Shrink the range parameters' sum while the goal stays satisfiable, by bisection.

        The search region is [lo, ceiling): no model below lo (proved unsat), none tried at
        or above the best one. An `unknown` answer never ends the search: the other half is
        tried instead, and the region shrinks. At most MINIMIZE_QUERIES solver calls.
        """
        if not self.options.minimize:
            return model
        ranged = [p for p in self.contract.params if p.kind == "range"]
        if not ranged:
            return model
        total = z3.Sum([self.enc.vars[p.name] for p in ranged])
        lo = sum(p.low for p in ranged)
        ceiling = self.val(model, total)
        calls = 0
        while lo < ceiling and calls < MINIMIZE_QUERIES:
            mid = (lo + ceiling - 1) // 2
            calls += 1
            status, better = self.solve(goal, [total >= lo, total <= mid])
            if status == "unsat":
                lo = mid + 1
                continue
            if status != "sat":  # unknown below mid: try the upper half, then narrower windows below
                calls += 1
                status, better = self.solve(goal, [total > mid, total < ceiling])
                if status != "sat":
                    ceiling = mid + 1 if mid + 1 < ceiling else ceiling - 1
                    continue
            assert better is not None
            model = better
            ceiling = self.val(model, total)
        return model

    # ---- sizes ----
    def _axis_sizes(self) -> dict[tuple[str, str], tuple[z3.ArithRef, z3.ArithRef, int]]:
        out = {}
        for t in self.contract.tensors:
            for a in t.axes:
                out[(t.name, a.name)] = (self.enc.expr(a.logical), self.enc.expr(a.padded), a.segments)
        return out

    def kernel_sizes(self) -> dict[tuple[str, str], z3.ArithRef]:
        return {key: seg * p for key, (_, p, seg) in self.sizes.items()}

    def grouped(self, axis: ir.Axis, value: z3.ArithRef) -> z3.ArithRef:
        """Size in groups of a groups axis (-1: one group)."""
        if axis.group_size is None:
            return value
        g = axis.group_size
        return self.enc._by_values(g, lambda v: self.enc.int(1) if v == -1 else value / v, None)

    def concrete(self, model: z3.ModelRef) -> tuple[dict[str, Value], dict[str, Value]]:
        config = self.enc.decode_config(model)
        try:
            env = eval_lets(self.contract, config)
        except EvalError:
            env = dict(config)
        derived = {k: v for k, v in env.items() if k not in config}
        return config, derived

    def counterexample(self, ob: _Obligation, model: z3.ModelRef) -> Counterexample:
        model = self.minimize(ob.goal, model)
        config, derived = self.concrete(model)
        explained = ob.explain(model)
        message, where = explained[0], explained[1]
        rule = f"{ob.name}: {explained[2]}" if len(explained) > 2 else ob.name
        picture: list[str] = []
        if ob.tensor is not None:
            try:
                env = {**config, **derived}
                picture = tensor_picture(self.contract, self.contract.tensor(ob.tensor), env)
            except (EvalError, ZeroDivisionError, KeyError):
                picture = []
        return Counterexample(config, derived, message, where, tuple(picture), rule)

    def val(self, model: z3.ModelRef, term: z3.ExprRef) -> int:
        return self.enc.evaluate(model, term).as_long()  # type: ignore[attr-defined]


class _Held:
    """The terms the shared solver holds, scope by scope, and for each the held terms it
    entails by its shape (so that a query need only show the outermost ones)."""

    def __init__(self) -> None:
        self.scopes: list[list[int]] = []
        self.implied: dict[int, frozenset[int]] = {}

    def push(self, parts: list[z3.BoolRef]) -> None:
        ids = []
        for p in parts:
            key = p.get_id()
            found = _shape_entails(p, self.implied, skip=key)
            self.implied[key] = frozenset((key,)).union(*(self.implied[f] for f in found))
            ids.append(key)
        self.scopes.append(ids)

    def pop(self) -> None:
        for key in self.scopes.pop():
            if not any(key in scope for scope in self.scopes):
                self.implied.pop(key, None)

    def entailed_by(self, formula: z3.BoolRef) -> bool:
        """Whether `formula` entails every held term by its shape alone (the caller makes
        sure the base scope is pushed before asking)."""
        found = _shape_entails(formula, self.implied)
        closure = frozenset().union(*(self.implied[f] for f in found))
        return all(key in closure for scope in self.scopes for key in scope)


def _shape_entails(formula: z3.BoolRef, targets: dict[int, frozenset[int]], skip: int = -1) -> frozenset[int]:
    """The keys (AST ids) of `targets` that are conjuncts of `formula` (through nested
    `And`s), or of every disjunct of an `Or` in that position. The walk stops at a target
    and looks at the top SHAPE_DEPTH levels only (the goals are And(admitted, ...) and Ors
    of those), through z3's C API (no Python wrapper per node)."""
    ctx = formula.ctx_ref()
    memo: dict[int, frozenset[int]] = {}

    def walk(ast: Any, depth: int) -> frozenset[int]:
        key = z3core.Z3_get_ast_id(ctx, ast)
        if key in targets and key != skip:
            return frozenset((key,))
        if key not in memo:
            found: frozenset[int] = frozenset()
            if depth < SHAPE_DEPTH and z3core.Z3_get_ast_kind(ctx, ast) == z3.Z3_APP_AST:
                kind = z3core.Z3_get_decl_kind(ctx, z3core.Z3_get_app_decl(ctx, ast))
                if kind in (z3.Z3_OP_AND, z3.Z3_OP_OR):
                    subs = [walk(z3core.Z3_get_app_arg(ctx, ast, n), depth + 1)
                            for n in range(z3core.Z3_get_app_num_args(ctx, ast))]
                    if kind == z3.Z3_OP_AND:
                        found = found.union(*subs)
                    elif subs:
                        found = frozenset.intersection(*subs)
            memo[key] = found
        return memo[key]
    return walk(formula.as_ast(), 0)


def _layout_phys(layout: str, k: int, i: z3.ArithRef, logical: z3.ArithRef, padded: z3.ArithRef) -> z3.ArithRef:
    if layout in ("none", "pad"):
        return i
    if layout == "halves":
        return k * padded + i
    if layout == "concat":
        return k * logical + i
    return 2 * i + k  # interleave


def _view(view: ir.View | None, j: z3.ArithRef, size: z3.ArithRef, roles: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """(role id, index) the kernel assigns to physical position j."""
    if view is None or view.view == "linear":
        return z3.IntVal(ROLE_ID[roles[0] if roles else ""], j.ctx), j
    r0, r1 = ROLE_ID[view.roles[0]], ROLE_ID[view.roles[1]]
    if view.view == "halves":
        half = size / 2
        first = j < half
        return z3.If(first, r0, r1), z3.If(first, j, j - half)
    return z3.If(j % 2 == 0, r0, r1), j / 2


# ---- properties ---------------------------------------------------------------


def _alignment(run: _Run) -> list[_Obligation]:
    kernel = run.contract.kernel
    if kernel is None:
        return []
    ks = run.kernel_sizes()
    obs = []
    for rule in kernel.aligns:
        cond = run.enc.expr(rule.cond, ks)
        sizes = [n for n in ir.walk(rule.cond) if isinstance(n, ir.AxisSize)]

        def explain(model, rule=rule, sizes=sizes):  # type: ignore[no-untyped-def]
            shown = ", ".join(f"{s.tensor}.{s.axis} = {run.val(model, ks[(s.tensor, s.axis)])}" for s in sizes)
            return f"kernel rule broken: {rule.message}" + (f" ({shown})" if shown else ""), "kernel"
        obs.append(_Obligation(f"align line {rule.span.line}", rule.span, z3.And(run.admitted, z3.Not(cond)),
                               explain, sizes[0].tensor if sizes else None))
    return obs


def _tied_reference(contract: ir.Contract, tensor: ir.Tensor, axis: ir.Axis) -> ir.Axis | None:
    weight = contract.weight(tensor.projection)
    if weight is tensor:
        return None
    try:
        return weight.axis(axis.name)
    except KeyError:
        return None


def _agreement(run: _Run, a: tuple[str, str], b: tuple[str, str], why: str) -> _Obligation:
    """Two weight axes that are the same model dim have the same logical and padded sizes."""
    la, pa, _ = run.sizes[a]
    lb, pb, _ = run.sizes[b]
    name_a, name_b = ".".join(a), ".".join(b)

    def explain(model):  # type: ignore[no-untyped-def]
        return (f"{name_a} holds {run.val(model, la)} -> {run.val(model, pa)} per segment but {name_b} holds "
                f"{run.val(model, lb)} -> {run.val(model, pb)}: {why}", name_a)
    span = run.contract.tensor(a[0]).axis(a[1]).span
    return _Obligation(f"{name_a} agrees with {name_b}", span,
                       z3.And(run.admitted, z3.Or(la != lb, pa != pb)), explain, a[0])


def _placement(run: _Run) -> list[_Obligation]:
    c = run.contract
    w13, w2 = c.weight("w13").name, c.weight("w2").name
    obs = [_agreement(run, (w2, "k"), (w13, "n"), "the kernel contracts w2's columns with w13's lanes one by one"),
           _agreement(run, (w13, "k"), (w2, "n"), "both are the model's hidden dim")]
    for t in c.tensors:
        for axis in t.axes:
            ref = _tied_reference(c, t, axis)
            if not axis.is_padded and (ref is None or not ref.is_padded):
                continue
            obs.extend(_axis_placement(run, t, axis, ref))
    return obs


def _axis_placement(run: _Run, t: ir.Tensor, axis: ir.Axis, ref: ir.Axis | None) -> list[_Obligation]:
    c = run.contract
    logical, padded, segs = run.sizes[(t.name, axis.name)]
    layout, roles = axis.layout, axis.roles
    if layout == "none" and ref is not None and ref.segments == 2:
        # a plain axis tied to a segmented weight axis holds the checkpoint's [r0 | r1] unpadded
        layout, roles = "concat", ref.roles
        logical = padded = logical / 2
        segs = 2
    logical_g = run.grouped(axis, logical)
    padded_g = run.grouped(axis, padded)
    size_t = segs * padded_g
    if ref is not None:
        _rl, rp, rs = run.sizes[(c.weight(t.projection).name, axis.name)]
        size_k = run.grouped(axis, rs * rp) if axis.group_size is None else rs * run.grouped(axis, rp)
    else:
        size_k = size_t
    view = find_view(c, t, axis.name)
    obs: list[_Obligation] = []
    label = f"{t.name}.{axis.name}"
    if ref is not None:
        def shape(model):  # type: ignore[no-untyped-def]
            return (f"{label} has {run.val(model, size_t)} positions but the kernel reads it with "
                    f"{c.weight(t.projection).name}'s geometry, {run.val(model, size_k)} positions", label)
        obs.append(_Obligation(f"{label} shape", axis.span, z3.And(run.admitted, size_t != size_k), shape, t.name))
    ctx = run.ctx
    i = z3.Int(f"i.{label}", ctx)
    for k, role in enumerate(roles or ("",)):
        j = _layout_phys(layout, k, i, logical_g, padded_g)
        vrole, vidx = _view(view, j, size_k, roles or ("",))
        broken = z3.Or(vrole != ROLE_ID[role], vidx != i, j < 0, j >= size_k)
        goal = z3.And(run.admitted, i >= 0, i < logical_g, broken)

        def explain(model, j=j, vrole=vrole, vidx=vidx, role=role):  # type: ignore[no-untyped-def]
            names = {0: "gate", 1: "up"} if roles else {0: ""}
            jj, ii = run.val(model, j), run.val(model, i)
            got = f"{names.get(run.val(model, vrole), '?')}[{run.val(model, vidx)}]"
            want = f"{role}[{ii}]" if role else f"[{ii}]"
            unit = "group " if axis.kind == "groups" else ""
            return (f"{label}: logical {unit}{want} is stored at position {jj}, where the kernel reads "
                    f"{got}" + (f" (the kernel's axis has {run.val(model, size_k)} positions)"
                                if jj >= run.val(model, size_k) else ""), f"{label}[{jj}]")
        obs.append(_Obligation(f"{label} {role or 'values'}", axis.span, goal, explain, t.name))
    return obs


def _roundtrip(run: _Run) -> list[_Obligation]:
    obs: list[_Obligation] = []
    for t in run.contract.tensors:
        for axis in t.axes:
            logical, padded, _segs = run.sizes[(t.name, axis.name)]
            label = f"{t.name}.{axis.name}"

            def sizes(model, label=label, logical=logical, padded=padded):  # type: ignore[no-untyped-def]
                return (f"{label}: logical size {run.val(model, logical)} and padded size "
                        f"{run.val(model, padded)}: sizes must be >= 0 and padding never shrinks", label)
            obs.append(_Obligation(f"{label} sizes", axis.span,
                                   z3.And(run.admitted, z3.Or(logical < 0, padded < logical)), sizes, t.name))
            if not axis.is_padded:
                continue
            lg, pg = run.grouped(axis, logical), run.grouped(axis, padded)
            # "some logical position lies outside the padded axis, or two share one" reduces,
            # for every layout's phys(), to L > 0 and L > P (tests/test_verify_encoding.py
            # checks the index formula below, `_injective_broken`, against it).
            broken = z3.And(lg > 0, lg > pg)
            def explain(model, label=label, lg=lg, pg=pg):  # type: ignore[no-untyped-def]
                return (f"{label}: {run.val(model, lg)} logical positions per segment do not fit "
                        f"injectively into {run.val(model, pg)} padded ones; unpad cannot invert pad", label)
            obs.append(_Obligation(f"{label} injective", axis.span, z3.And(run.admitted, broken),
                                   explain, t.name))
    return obs


def _injective_broken(layout: str, roles: int, lg: z3.ArithRef, pg: z3.ArithRef, segs: int,
                      i1: z3.ArithRef, i2: z3.ArithRef) -> z3.BoolRef:
    """The index form of a roundtrip violation: a logical (role, i) stored outside the padded
    axis, or two distinct ones stored at one position (pad's phys() per layout)."""
    ctx = i1.ctx
    cases = []
    for k1 in range(roles):
        j1 = _layout_phys(layout, k1, i1, lg, pg)
        cases.append(z3.And(i1 >= 0, i1 < lg, z3.Or(j1 < 0, j1 >= segs * pg)))
        for k2 in range(roles):
            j2 = _layout_phys(layout, k2, i2, lg, pg)
            same = i1 == i2 if k1 == k2 else z3.BoolVal(False, ctx)
            cases.append(z3.And(i1 >= 0, i1 < lg, i2 >= 0, i2 < lg, j1 == j2, z3.Not(same)))
    return z3.Or(cases)


def _groups(run: _Run) -> list[_Obligation]:
    obs: list[_Obligation] = []
    for t in run.contract.tensors:
        for axis in t.axes:
            label = f"{t.name}.{axis.name}"
            logical, padded, _segs = run.sizes[(t.name, axis.name)]
            if axis.kind == "groups" and axis.group_size is not None:
                g = run.enc.expr(axis.group_size)

                def by(v: int, value: z3.ArithRef):  # type: ignore[no-untyped-def]
                    return z3.BoolVal(False, run.ctx) if v == -1 else value % v != 0
                straddle = run.enc._by_values(axis.group_size, lambda v, size=logical: by(v, size), None)
                partial = run.enc._by_values(axis.group_size, lambda v, size=padded: by(v, size), None)

                def explain(model, label=label, g=g, logical=logical, padded=padded, axis=axis):  # type: ignore[no-untyped-def]
                    gv, lv, pv = run.val(model, g), run.val(model, logical), run.val(model, padded)
                    if lv % gv:
                        first = lv // gv * gv
                        of = ".".join(axis.group_of) if axis.group_of else "the axis"
                        return (f"{label}: group {lv // gv} covers positions {first}..{first + gv - 1} of {of}, "
                                f"but only {first}..{lv - 1} are live: the group straddles the pad boundary "
                                f"(logical {lv}, group {gv})", label)
                    return f"{label}: padded size {pv} is not a whole number of groups of {gv}", label
                obs.append(_Obligation(f"{label} groups", axis.span,
                                       z3.And(run.admitted, z3.Or(straddle, partial)), explain, t.name))
            if axis.pack > 1:
                f = axis.pack
                whole_l = logical * (2 if axis.layout in ("concat", "interleave") else 1)
                whole_p = padded * (2 if axis.layout in ("concat", "interleave") else 1)

                def pexplain(model, label=label, f=f, whole_l=whole_l, whole_p=whole_p):  # type: ignore[no-untyped-def]
                    return (f"{label}: {run.val(model, whole_l)} -> {run.val(model, whole_p)} values do not fill whole "
                            f"storage elements of {f}: a packed element would mix data and pad", label)
                packing = z3.Or(whole_l % f != 0, whole_p % f != 0)
                obs.append(_Obligation(f"{label} packing", axis.span, z3.And(run.admitted, packing),
                                       pexplain, t.name))
    return obs


def _kernel_arguments(run: _Run) -> list[_Obligation]:
    kernel = run.contract.kernel
    if kernel is None:
        return []
    obs: list[_Obligation] = []
    for arg in kernel.args:
        value = run.enc.expr(arg.value)
        count = run.enc.expr(arg.trim_count)
        for tname, aname in arg.trims:
            logical, padded, _ = run.sizes[(tname, aname)]
            pad = padded - logical

            def explain(model, arg=arg, tname=tname, aname=aname, logical=logical, padded=padded,
                        value=value, count=count):  # type: ignore[no-untyped-def]
                lv, pv, cv = run.val(model, logical), run.val(model, padded), run.val(model, count)
                told = run.val(model, value)
                segment = "each segment" if run.contract.tensor(tname).axis(aname).segments > 1 else "the axis"
                if cv > pv - lv:
                    return (f"padded {pv}, pad {pv - lv} per segment; kernel told {arg.name}={told}, so it skips "
                            f"the last {cv} positions of {segment} of {tname}.{aname}: positions "
                            f"{max(0, pv - cv)}..{lv - 1} are live and dropped", f"{tname}.{aname}")
                return f"kernel told {arg.name}={told}: a negative trim of {cv}", f"{tname}.{aname}"
            wrong = z3.Or(count > pad, count < 0)
            obs.append(_Obligation(f"{arg.name} on {tname}.{aname}", arg.span,
                                   z3.And(run.admitted, wrong), explain, tname))
    return obs


# The smallest largest-finite value among the compute dtypes an activation may take
# (float16 65504 < bfloat16 < float32): a bound proved against it holds in all three.
COMPUTE_MAX = 65504

Pair = tuple[z3.ArithRef, z3.BoolRef]  # a decoded value and "it is finite"


def sharded_axes(contract: ir.Contract) -> list[tuple[ir.Tensor, ir.Axis]]:
    """The axes `shard_*` splits over ranks: the intermediate axis of every tensor (w13.n, w2.k
    and the biases, scales and zero-points tied to them), except a groups axis of one group
    (group size -1), which every rank holds whole. The same rule as the emitter's axis tables."""
    if contract.shard is None:
        return []
    return [(t, a) for t in contract.tensors for a in t.axes if ir.is_split(t, a)]


def _split_here(run: _Run, t: ir.Tensor, axis: ir.Axis) -> z3.BoolRef:
    """Whether `shard_*` splits `t`'s `axis` over ranks (a groups axis whose group size may be
    -1 is split only where it is not one group)."""
    if (t, axis) not in sharded_axes(run.contract):
        return z3.BoolVal(False, run.ctx)
    if axis.group_size is not None and not isinstance(axis.group_size, ir.Const):
        return z3.Not(run.enc._by_values(axis.group_size, lambda v: z3.BoolVal(v == -1, run.ctx), None))
    return z3.BoolVal(True, run.ctx)


def short_ranks(run: _Run) -> z3.BoolRef:
    """Whether some rank's slice is shorter than the per-rank logical size L (a block shard
    with tp_size * L > FULL): that rank holds the tensors' fill past its slice."""
    shard = run.contract.block_shard
    if shard is None:
        return z3.BoolVal(False, run.ctx)
    w13 = run.contract.weight("w13")
    logical, _, _ = run.sizes[(w13.name, "n")]
    return run.enc.vars[shard.count] * logical > run.enc.expr(shard.full)


def _coverage(run: _Run) -> list[_Obligation]:
    """Rank r of tp_size reads [min(r * L, FULL), min((r + 1) * L, FULL)) of each segment (a
    block of pairs for interleave): the slices are disjoint and ordered, so every element of
    the full axis is read exactly once iff tp_size * L >= FULL. An even shard (no `blocks`)
    must have no short rank either: tp_size * L == FULL. A block shard (`in blocks of B`)
    must start every rank on a block boundary (L % B == 0), and the last rank's slice,
    FULL - r * L, must be whole groups and whole packed elements (FULL % G == 0,
    FULL % pack == 0) (docs/verification.md, coverage). Tensors without a sharded axis are
    read whole by every rank, or (a w2 bias) by rank 0 only."""
    shard = run.contract.shard
    if shard is None:
        return []
    full = run.enc.expr(shard.full)
    tp = run.enc.vars[shard.count]
    obs: list[_Obligation] = []
    for t, a in sharded_axes(run.contract):
        logical, _, _ = run.sizes[(t.name, a.name)]
        label = f"{t.name}.{a.name}"
        source = "the default `shard intermediate_size over tp_size`" if shard.implicit else "the `shard` clause"
        if shard.blocks is None:
            wrong = tp * logical != full
        else:
            # rank 1 starts at L: misaligned only where rank 1 exists and holds data
            misaligned = z3.And(tp >= 2, logical < full,
                                run.enc._by_values(shard.blocks, lambda v, n=logical: n % v != 0, None))
            ragged: list[z3.BoolRef] = []
            if a.kind == "groups" and a.group_size is not None:
                ragged.append(run.enc._by_values(
                    a.group_size, lambda v: z3.BoolVal(False, run.ctx) if v == -1 else full % v != 0, None))
            if a.pack > 1:
                ragged.append(full % a.pack != 0)
            wrong = z3.Or(tp * logical < full, misaligned, *ragged)
        wrong = z3.And(_split_here(run, t, a), wrong)

        def explain(model, label=label, logical=logical, source=source, a=a):  # type: ignore[no-untyped-def]
            lv, tv, fv = run.val(model, logical), run.val(model, tp), run.val(model, full)
            head = f"{label}: {tv} ranks each read {lv} of the full {fv} ({source})"
            if tv * lv < fv:
                return f"{head}: entries {tv * lv}..{fv - 1} are never read (dropped)", label
            if shard.blocks is None:
                return f"{head}: ranks read up to entry {tv * lv - 1}, past the checkpoint's {fv}", label
            bv = run.val(model, run.enc.expr(shard.blocks))
            if lv % bv and tv >= 2 and lv < fv:
                return (f"{head}: rank 1 starts at entry {lv}, inside block {lv // bv} of {bv} entries "
                        "(a block shard gives each rank whole blocks)"), label
            unit = run.val(model, run.enc.expr(a.group_size)) if a.kind == "groups" and a.group_size is not None \
                else a.pack
            last = next(r for r in range(tv) if (r + 1) * lv >= fv)
            return (f"{head}: the last rank with data (rank {last}) reads entries {last * lv}..{fv - 1}, "
                    f"{fv - last * lv} entries, not a whole number of {unit}-entry "
                    f"{'groups' if a.kind == 'groups' else 'packed elements'}"), label
        obs.append(_Obligation(f"{label} coverage", a.span, z3.And(run.admitted, wrong), explain, t.name))
    return obs


class _Values:
    """Decoded values of the tensors at one pad lane, each a (real, finite) pair
    (docs/verification.md, inertness). Pad positions hold the fill, decoded by the
    tensor's own format (`e8m0(code)`, ...) where it has one; live positions hold a
    free finite value (the checkpoint's)."""

    def __init__(self, run: _Run, lane: z3.ArithRef, tag: str, tail: bool = False) -> None:
        self.run = run
        self.lane = lane
        self.tag = tag
        # tail: the lane lies past a short rank's slice (a block shard, docs/verification.md,
        # coverage), where every sharded tensor holds its fill and replicated ones are live
        self.tail = tail
        self.count = 0
        self.notes: list[tuple[z3.BoolRef, str]] = []  # (this pad is finite, what it is)

    def fresh(self, what: str) -> z3.ArithRef:
        self.count += 1
        return z3.Real(f"{self.tag}.{what}.{self.count}", self.run.ctx)

    def true(self) -> z3.BoolRef:
        return z3.BoolVal(True, self.run.ctx)

    def pad_value(self, t: ir.Tensor, refs: dict[str, Pair] | None = None) -> Pair:
        """t's decoded value where t holds its pad (at a tail lane: its `tail fill`, which
        defaults to the fill)."""
        word = "pad code"
        if self.tail and t.tail_fill is not None:
            t, word = t.at_tail(), "tail fill code"
        if t.fill_kind == "uninit":
            self.count += 1
            finite = z3.Bool(f"{self.tag}.finite.{t.name}.{self.count}", self.run.ctx)
            self.notes.append((finite, f"{t.name}'s pad is uninitialised memory (torch.empty): it may hold NaN "
                                       "or inf"))
            return self.fresh(f"{t.name}.uninit"), finite
        if t.decode is not None and (t.kind in ("scale", "zero") or refs is not None):
            value, finite = self.decode(t.decode, t, refs or {})
            if not z3.is_true(z3.simplify(finite)):
                self.notes.append((finite, f"{t.name}'s {word} {t.fill} decodes to a non-finite value "
                                           f"({_format_note(t.decode, t.fill)})"))
            return value, finite
        if t.kind == "scale" and t.decode is None:
            stored = self.undeclared_bytes(t)
            if stored is not None:
                return stored
        return z3.RealVal(t.fill, self.run.ctx), self.true()

    def undeclared_bytes(self, t: ir.Tensor) -> Pair | None:
        """A scale stored as uint8 without a declared format may be any byte format: an
        integer, E8M0 (MX block scales) or float8_e4m3fn bytes; its pad must be finite and
        neutral in each. The format is one free choice per tensor (the same in every use)."""
        ctx = self.run.ctx
        if t.storage == "uint8":
            is_byte: z3.BoolRef = z3.BoolVal(True, ctx)
        elif t.storage.startswith("param:"):
            param = self.run.contract.param(t.storage[6:])
            if "uint8" not in param.values:
                return None
            is_byte = self.run.enc.vars[param.name] == param.values.index("uint8")
        else:
            return None
        fmt = z3.Int(f"byte_format.{t.name}", ctx)
        value: z3.ArithRef = z3.RealVal(t.fill, ctx)
        finite: z3.BoolRef = self.true()
        for n, name in enumerate(("e8m0", "e4m3fn"), start=1):
            decoded = FORMATS[name](t.fill) if 0 <= t.fill <= 255 else None
            chosen = z3.And(fmt == n)
            value = z3.If(chosen, z3.RealVal(decoded if decoded is not None else 0, ctx), value)
            finite = z3.If(chosen, z3.BoolVal(decoded is not None, ctx), finite)
        value = z3.If(is_byte, value, z3.RealVal(t.fill, ctx))
        finite = z3.Or(z3.Not(is_byte), finite)
        if not z3.is_true(z3.simplify(finite)):
            self.notes.append((finite, f"{t.name} is stored as uint8 bytes without a declared format; its pad "
                                       f"byte {t.fill} is not finite in every byte format ({_byte_notes(t.fill)}): "
                                       "declare it, e.g. `decode = e8m0(code)`"))
        return value, finite

    def in_pad(self, t: ir.Tensor, axis_name: str) -> z3.BoolRef | None:
        """Whether `t`'s element at intermediate lane `self.lane` lies in t's pad region."""
        try:
            axis = t.axis(axis_name)
        except KeyError:
            return None  # no intermediate axis: a per-tensor or per-expert value, always live
        logical, _, _ = self.run.sizes[(t.name, axis_name)]
        if self.tail:
            return _split_here(self.run, t, axis)
        if axis.kind == "groups" and axis.group_size is not None:
            def live_groups(v: int):  # type: ignore[no-untyped-def]
                if v == -1:
                    return z3.BoolVal(False, self.run.ctx)
                return self.lane / v >= (logical + (v - 1)) / v
            return self.run.enc._by_values(axis.group_size, live_groups, None)
        if not axis.is_padded:
            return z3.BoolVal(False, self.run.ctx)
        return self.lane >= logical

    def at_lane(self, t: ir.Tensor, axis_name: str) -> Pair:
        """t's decoded value at the lane: its pad value in its pad region, else a free live value."""
        pad = self.in_pad(t, axis_name)
        if pad is None or z3.is_false(pad):
            return self.fresh(f"{t.name}.live"), self.true()
        value, finite = self.pad_value(t)
        if z3.is_true(pad):
            return value, finite
        return z3.If(pad, value, self.fresh(f"{t.name}.live")), z3.Or(z3.Not(pad), finite)

    def value(self, t: ir.Tensor, axis_name: str) -> Pair:
        """Decoded value of weight or bias `t` at the lane, which lies in t's pad region."""
        if t.decode is None:
            return self.pad_value(t)
        names = list(dict.fromkeys(n.tensor for n in ir.walk(t.decode) if isinstance(n, ir.TensorValue)))
        others = [self.run.contract.tensor(name) for name in names]
        refs = {o.name: self.at_lane(o, axis_name) for o in others}
        value, finite = self.pad_value(t, refs)
        # A dequantized pad is computed in the activation dtype: where every tensor the decode
        # reads holds its pad too, the value is a constant, and one beyond float16's largest
        # value is inf in a float16 kernel (then 0 * inf is NaN).
        pads = [self.in_pad(o, axis_name) for o in others]
        all_pad = z3.And([p if p is not None else z3.BoolVal(False, self.run.ctx) for p in pads])
        constant, constant_finite = self.pad_value(t, {o.name: self.pad_value(o) for o in others})
        big = z3.And(all_pad, constant_finite, _abs(constant) > COMPUTE_MAX)
        if z3.is_false(z3.simplify(big)):
            return value, finite
        fits = z3.And(finite, z3.Not(big))
        self.notes.append((fits, f"{t.name}'s pad dequantizes to a value beyond {COMPUTE_MAX} (float16's largest), "
                                 "which is inf in a float16 kernel"))
        return value, fits

    def decode(self, e: ir.Expr, t: ir.Tensor, refs: dict[str, Pair]) -> Pair:
        """A decode expression over t's pad code (and the values of the tensors it reads)."""
        ctx = self.run.ctx
        if isinstance(e, ir.Code):
            return z3.RealVal(t.fill, ctx), self.true()
        if isinstance(e, ir.TensorValue):
            return refs[e.tensor]
        if isinstance(e, ir.Op) and e.op in FORMATS:
            decoded = FORMATS[e.op](t.fill) if 0 <= t.fill <= 255 else None
            if decoded is None:
                return z3.RealVal(0, ctx), z3.BoolVal(False, ctx)
            return z3.RealVal(decoded, ctx), self.true()
        if isinstance(e, ir.Cond) and e.type == ir.REAL:
            cond = self.run.enc.expr(e.cond)
            (a, fa), (b, fb) = self.decode(e.then, t, refs), self.decode(e.orelse, t, refs)
            return z3.If(cond, a, b), z3.If(cond, fa, fb)
        if isinstance(e, ir.Select) and e.type == ir.REAL:
            assert isinstance(e.subject.type, ir.EnumT)
            members = e.subject.type.members
            subject = self.run.enc.expr(e.subject)
            cases = list(e.cases) if e.default is not None else list(e.cases[:-1])
            value, finite = self.decode(e.default if e.default is not None else e.cases[-1][1], t, refs)
            for member, arm in reversed(cases):
                av, af = self.decode(arm, t, refs)
                hit = subject == members.index(member)
                value, finite = z3.If(hit, av, value), z3.If(hit, af, finite)
            return value, finite
        if isinstance(e, ir.Op) and e.type == ir.REAL:
            if e.op == "neg":
                v, f = self.decode(e.args[0], t, refs)
                return -v, f
            (a, fa), (b, fb) = (self.decode(x, t, refs) for x in e.args)
            return {"+": a + b, "-": a - b, "*": a * b}[e.op], z3.And(fa, fb)
        return z3.ToReal(self.run.enc.expr(e)), self.true()

    def has_pad(self, t: ir.Tensor) -> z3.BoolRef:
        """Whether any of t's axes has a pad region (t's fill is then written somewhere)."""
        parts: list[z3.BoolRef] = []
        for axis in t.axes:
            logical, padded, _ = self.run.sizes[(t.name, axis.name)]
            if axis.kind == "groups" and axis.group_size is not None:
                parts.append(self.run.enc._by_values(
                    axis.group_size, lambda v, lo=logical, hi=padded: z3.BoolVal(False, self.run.ctx) if v == -1
                    else (hi + (v - 1)) / v > (lo + (v - 1)) / v, None))
            elif axis.is_padded:
                parts.append(padded > logical)
        return z3.Or(parts) if parts else z3.BoolVal(False, self.run.ctx)


def _format_note(e: ir.Expr, code: int) -> str:
    fmts = sorted({n.op for n in ir.walk(e) if isinstance(n, ir.Op) and n.op in FORMATS})
    bad = [f for f in fmts if not 0 <= code <= 255 or FORMATS[f](code) is None]
    return "; ".join(f"{f}({code}): " + (NAN_NOTE[f] if 0 <= code <= 255 else "not a byte") for f in bad) \
        or "a non-finite input"


def _show_real(v: z3.ExprRef) -> str:
    """A decoded value for a message: an integer, 2^k, or a short decimal."""
    q = _numeral(v)
    if q is None:
        return str(v)
    if q.denominator == 1 and abs(q.numerator) < 10**12:
        return str(q.numerator)
    if abs(q.numerator) == 1 and q.denominator & (q.denominator - 1) == 0:
        return f"{'-' if q < 0 else ''}2^-{q.denominator.bit_length() - 1}"
    return f"{float(q):.6g}"


def _byte_notes(code: int) -> str:
    bad = [f for f in ("e8m0", "e4m3fn") if not 0 <= code <= 255 or FORMATS[f](code) is None]
    return "; ".join(f"{f}({code}): {NAN_NOTE[f]}" for f in bad) or "none"


def _abs(x: z3.ArithRef) -> z3.ArithRef:
    return z3.If(x >= 0, x, -x)


def _numeral(x: z3.ExprRef) -> Fraction | None:
    s = z3.simplify(x)
    if z3.is_rational_value(s):
        return Fraction(s.numerator_as_long(), s.denominator_as_long())  # type: ignore[attr-defined]
    return None


def _lane_obligation(run: _Run, tail: bool) -> _Obligation:
    """A pad lane of w13.n (lanes [L, P)) is inert; `tail`: so is a lane past a short rank's
    slice, where every sharded tensor holds its fill (docs/verification.md, inertness)."""
    c = run.contract
    ctx = run.ctx
    w13, w2 = c.weight("w13"), c.weight("w2")
    lane = z3.Int("tail_lane" if tail else "lane", ctx)
    logical, padded, _ = run.sizes[(w13.name, "n")]
    vals = _Values(run, lane, "tail" if tail else "pad", tail=tail)
    w_gate, f_gate = vals.value(w13, "n")
    w_up, f_up = vals.value(w13, "n") if c.gated else (z3.RealVal(0, ctx), vals.true())
    biases = [t for t in c.tensors if t.kind == "bias" and t.projection == "w13"]
    zero = (z3.RealVal(0, ctx), vals.true())
    b_gate, f_bgate = vals.value(biases[0], "n") if biases else zero
    b_up, f_bup = vals.value(biases[0], "n") if biases and c.gated else zero
    column, f_column = vals.value(w2, "k")
    offset = _up_offset(run)
    finite = z3.And(f_gate, f_up, f_bgate, f_bup, f_column)
    # A non-zero pad row meets every finite hidden state x: its pre-activation row . x is
    # unbounded, so the lane can overflow to inf, and inf * 0 is NaN. Only exactly-zero rows
    # leave the lane at act(b_gate) * (b_up + c), a constant.
    rows_zero = z3.And(w_gate == 0, w_up == 0)
    if c.gated:
        lane_zero = z3.And(rows_zero, z3.Or(b_gate == 0, b_up + offset == 0))
        bg, bu, off = _numeral(b_gate), _numeral(b_up), _numeral(offset)
        bound = abs(bg) * (abs(bu) + abs(off)) if None not in (bg, bu, off) else None  # type: ignore[operator,arg-type]
    else:
        lane_zero = z3.And(rows_zero, b_gate == 0)
        bg = _numeral(b_gate)
        bound = abs(bg) * (abs(bg) + 1) if bg is not None else None
    if bound is None:
        # the biases are not constants: offset depends on the activation; bound each case
        bound_ok = z3.And(_abs(b_gate) <= COMPUTE_MAX, _abs(b_up) <= COMPUTE_MAX,
                          _abs(b_gate) * (_abs(b_up) + _abs(offset)) <= COMPUTE_MAX) if c.gated \
            else z3.BoolVal(False, ctx)
    else:
        bound_ok = z3.BoolVal(bound <= COMPUTE_MAX, ctx)
    bounded = z3.And(rows_zero, bound_ok)
    inert = z3.And(finite, z3.Or(lane_zero, z3.And(bounded, column == 0)))
    if tail:  # a short rank's lanes past its slice: any lane of L can be one (empty ranks)
        goal = z3.And(run.admitted, short_ranks(run), lane >= 0, lane < logical, z3.Not(inert))
    else:
        goal = z3.And(run.admitted, lane >= logical, lane < padded, z3.Not(inert))

    def explain(model):  # type: ignore[no-untyped-def]
        lv = run.val(model, lane)

        def show(term):  # type: ignore[no-untyped-def]
            return _show_real(run.enc.evaluate(model, term))
        parts = ", ".join(f"{name} = {show(term)}" for name, term in (
            ("gate row", w_gate), ("up row", w_up), ("gate bias", b_gate), ("up bias", b_up), ("w2 column", column)))
        nonfinite = [what for fin, what in vals.notes if z3.is_false(run.enc.evaluate(model, fin))]
        if nonfinite:
            kind = "non-finite pad"
            why = f"{'; '.join(dict.fromkeys(nonfinite))}, and 0 * inf or 0 * NaN is not 0"
        elif z3.is_false(run.enc.evaluate(model, rows_zero)):
            kind = "non-zero pad row"
            row, value = ("gate", w_gate) if z3.is_false(run.enc.evaluate(model, w_gate == 0)) \
                else ("up", w_up)
            why = (f"its {row} row decodes to {show(value)}, not exactly 0: over all finite hidden states x the "
                   f"pre-activation {show(value)} * x is unbounded, so act(gate) * up can overflow to inf (a "
                   f"float16 activation does past {COMPUTE_MAX}), and inf * 0 is NaN even where its w2 column is 0")
        elif z3.is_true(run.enc.evaluate(model, column == 0)):
            kind = "activation not provably finite"
            why = (f"its activation act(gate bias) * (up bias + {show(offset)}) is not provably finite (bound "
                   f"{COMPUTE_MAX}, float16), and inf * 0 (its zero w2 column) is NaN")
        else:
            kind = "non-zero lane and non-zero w2 column"
            why = "the lane's activation is non-zero and its w2 column does not decode to 0"
        held = "the `tail fill`" if any(t.tail_fill is not None for t in c.tensors) else "the fill"
        where = (f"on a rank whose slice is shorter than L (a block shard: tp_size * L > FULL), lane {lv} "
                 f"holds {held}" if tail else f"pad lane {lv}")
        return f"{where} and adds to the output: {why}; {parts}", f"lane {lv}", kind
    name = "short-rank tail lanes" if tail else "intermediate pad lanes"
    return _Obligation(name, w13.span, goal, explain, w13.name)


def _inertness(run: _Run) -> list[_Obligation]:
    c = run.contract
    ctx = run.ctx
    w13 = c.weight("w13")
    lane = z3.Int("lane", ctx)
    obs: list[_Obligation] = []
    # Every scale or zero-point pad that is written must decode to a finite value, and so
    # must its `tail fill`, where short ranks can occur.
    sv = _Values(run, lane, "scalepad")
    for t in c.tensors:
        if t.kind not in ("scale", "zero"):
            continue
        sharded = any((t, a) in sharded_axes(c) for a in t.axes)
        if t.tail_fill is not None and sharded:
            obs += _scale_tail_finite(run, t)
        value, finite = sv.pad_value(t)
        if z3.is_true(z3.simplify(finite)):
            continue
        # a short rank's tail holds the fill too (unless it has its own `tail fill`),
        # whether or not the tensor is padded
        has_pad = z3.Or(sv.has_pad(t), short_ranks(run)) if sharded and t.tail_fill is None \
            else sv.has_pad(t)

        def sexplain(model, t=t, value=value):  # type: ignore[no-untyped-def]
            note = _format_note(t.decode, t.fill) if t.decode is not None else "uninitialised memory" \
                if t.fill_kind == "uninit" else (f"stored as uint8 bytes without a declared format, and "
                                                 f"{_byte_notes(t.fill)}; declare it, e.g. `decode = e8m0(code)`")
            return (f"{t.name}'s pad holds code {t.fill if t.fill_kind != 'uninit' else '(uninit)'}, which decodes "
                    f"to a non-finite value ({note}); every weight it scales in the pad is then NaN, and the "
                    "kernel adds NaN * 0 = NaN to the output", t.name)
        obs.append(_Obligation(f"{t.name} pad is finite", t.span, z3.And(run.admitted, has_pad, z3.Not(finite)),
                               sexplain, t.name))
    obs.append(_lane_obligation(run, tail=False))
    if run.contract.block_shard is not None:
        obs.append(_lane_obligation(run, tail=True))
    try:
        hidden = w13.axis("k")
    except KeyError:
        return obs
    if hidden.is_padded:
        hl, hp, _ = run.sizes[(w13.name, "k")]
        col = z3.Int("hidden", ctx)
        hv = _Values(run, col, "hpad")
        value, hfinite = hv.value(w13, "k")
        hgoal = z3.And(run.admitted, col >= hl, col < hp, z3.Not(z3.And(hfinite, value == 0)))

        def hexplain(model):  # type: ignore[no-untyped-def]
            return (f"w13 hidden pad column {run.val(model, col)} decodes to "
                    f"{run.enc.evaluate(model, value)} or may be non-finite", "w13.k")
        obs.append(_Obligation("hidden pad columns", hidden.span, hgoal, hexplain, w13.name))
    return obs


def _scale_tail_finite(run: _Run, t: ir.Tensor) -> list[_Obligation]:
    """A scale's or zero-point's `tail fill` decodes to a finite value wherever a short rank
    holds it (a block shard with tp_size * L > FULL, on an axis split there)."""
    tv = _Values(run, z3.Int("lane", run.ctx), "scaletail", tail=True)
    _, finite = tv.pad_value(t)
    if z3.is_true(z3.simplify(finite)):
        return []
    split = z3.Or([_split_here(run, t, a) for a in t.axes if (t, a) in sharded_axes(run.contract)])
    tail = t.at_tail()

    def explain(model):  # type: ignore[no-untyped-def]
        note = _format_note(tail.decode, tail.fill) if tail.decode is not None else (
            f"stored as uint8 bytes without a declared format, and {_byte_notes(tail.fill)}; declare it, "
            "e.g. `decode = e8m0(code)`")
        return (f"{t.name}'s `tail fill` holds code {tail.fill} past a short rank's slice (a block shard: "
                f"tp_size * L > FULL), which decodes to a non-finite value ({note}); every weight it scales "
                "there is then NaN, and the kernel adds NaN * 0 = NaN to the output", t.name)
    goal = z3.And(run.admitted, short_ranks(run), split, z3.Not(finite))
    return [_Obligation(f"{t.name} tail is finite", t.span, goal, explain, t.name)]


def _up_offset(run: _Run) -> z3.ArithRef:
    kernel = run.contract.kernel
    act = kernel.activation if kernel is not None else None
    if act is None:
        return z3.RealVal(0, run.ctx)
    assert isinstance(act.type, ir.EnumT)
    if isinstance(act, ir.Const):
        return z3.RealVal(ir.ACTIVATIONS[str(act.value)][1], run.ctx)
    subject = run.enc.expr(act)
    result: z3.ArithRef = z3.RealVal(0, run.ctx)
    for idx, member in enumerate(act.type.members):
        result = z3.If(subject == idx, z3.RealVal(ir.ACTIVATIONS[member][1], run.ctx), result)
    return result


# ---- driver -------------------------------------------------------------------


def _decide(run: _Run, prop: str, obligations: list[_Obligation], span: Span) -> Verdict:
    start = time.perf_counter()
    q0 = run.queries
    unknown: list[str] = []
    if len(obligations) > 1:
        # One query for the whole property first: unsat proves every obligation at once.
        status, _ = run.solve(z3.Or([ob.goal for ob in obligations]))
        if status == "unsat":
            return Verdict(prop, "proved", f"{len(obligations)} obligation(s) proved", time.perf_counter() - start,
                           run.queries - q0, span)
    for ob in obligations:
        status, model = run.solve(ob.goal)
        if status == "sat":
            assert model is not None
            cex = run.counterexample(ob, model)
            return Verdict(prop, "counterexample", f"{ob.name}: {cex.message}", time.perf_counter() - start,
                           run.queries - q0, ob.span, cex)
        if status != "unsat":
            unknown.append(f"{ob.name}: {status}")
    seconds = time.perf_counter() - start
    if unknown:
        return Verdict(prop, "inconclusive", "; ".join(unknown), seconds, run.queries - q0, span)
    detail = f"{len(obligations)} obligation(s) proved" if obligations else "nothing to prove"
    return Verdict(prop, "proved", detail, seconds, run.queries - q0, span)


def _admission(run: _Run, verdicts: dict[str, Verdict]) -> Verdict:
    start = time.perf_counter()
    q0 = run.queries
    for prop in ("alignment", "groups", "kernel-arguments", "placement", "coverage"):
        v = verdicts[prop]
        if v.status == "counterexample":
            return Verdict("admission", "counterexample",
                           f"the gates admit a configuration that breaks {prop}: {v.detail}",
                           time.perf_counter() - start, 0, v.span, v.counterexample)
        if v.status == "inconclusive":
            return Verdict("admission", "inconclusive", f"{prop} is inconclusive", 0.0, 0, v.span)
    # A gate is reported only when removing it provably changes nothing, even together with
    # every other gate reported: it is implied by the domains and the requires alone. A gate
    # that rejects something may protect a fact outside the model (a checkpoint layout, the
    # runtime, coverage), so "stricter than needed" is never claimed.
    warnings: list[str] = []
    for rule, formula in run.admits:
        status, _ = run.solve(z3.And(run.base, *run.requires, z3.Not(formula)), quick_only=True)
        if status == "unsat":
            warnings.append(f"line {rule.span.line}: the gate \"{rule.message}\" never rejects anything: the "
                            "parameter domains and the requires already imply it")
    return Verdict("admission", "proved", "every admitted configuration meets the kernel's rules",
                   time.perf_counter() - start, run.queries - q0, run.contract.span, None, tuple(warnings))


def _waste(run: _Run) -> Verdict:
    start = time.perf_counter()
    q0 = run.queries
    w13 = run.contract.weight("w13")
    logical, padded, _ = run.sizes[(w13.name, "n")]
    lo, hi, best, gave_up = 0, 100, None, None
    # The first query (is there padding at all?) is decided in full; the bisection above it
    # uses the quick whole-domain attempt only: a witness raises the bound to its own
    # fraction, an unknown lowers the search like an unsat but is reported. The result is
    # always a lower bound with its witness. After each new witness, one probe just above
    # it first (is it the worst case?): the witness is often already the maximum, and one
    # refutation there settles what bisection would take several (harder) ones for.
    probe = False
    with run.holding(run.admitted, padded > 0):
        while lo < hi:
            mid = 1 if best is None else lo + 1 if probe else (lo + hi + 1) // 2
            probing, probe = probe, False
            status, model = run.solve(z3.And(run.admitted, padded > 0, (padded - logical) * 100 >= mid * padded),
                                      quick_only=best is not None)
            if status == "sat":
                assert model is not None
                pv, lv = run.val(model, padded), run.val(model, logical)
                lo, best = max(mid, (pv - lv) * 100 // pv), model  # the witness may beat mid by far
                probe = not probing
            elif status == "unsat":
                hi = mid - 1
            else:
                gave_up = status
                if best is None:
                    break
                if not probing:  # an unknown probe only hands over to the bisection
                    hi = mid - 1
    tail = _short_rank_note(run)
    seconds = time.perf_counter() - start
    if best is None:
        detail = f"not determined: the solver gave up ({gave_up})" if gave_up else \
            "no padding anywhere in the domain" if not tail else "no pad past any rank's logical size"
        return Verdict("waste", "info", detail + tail, seconds, run.queries - q0, run.contract.span)
    config, derived = run.concrete(best)
    lv, pv = run.val(best, logical), run.val(best, padded)
    where = ", ".join(f"{k}={v}" for k, v in config.items())
    unsettled = " (higher fractions not settled by the quick solver)" if gave_up else ""
    return Verdict("waste", "info", f"worst-case pad fraction >= {lo}% of the intermediate dim "
                   f"({lv} -> {pv}) at {where}{unsettled}{tail}", seconds, run.queries - q0, run.contract.span,
                   Counterexample(config, derived, "worst case", "w13.n"))


def _short_rank_note(run: _Run) -> str:
    """For a block shard: whether some admitted configuration leaves ranks empty (all fill),
    with one such configuration (the pad fraction above counts one rank's pad only)."""
    shard = run.contract.block_shard
    if shard is None:
        return ""
    logical, _, _ = run.sizes[(run.contract.weight("w13").name, "n")]
    tp, full = run.enc.vars[shard.count], run.enc.expr(shard.full)
    status, model = run.solve(z3.And(run.admitted, (tp - 1) * logical >= full, logical > 0), quick_only=True)
    if status != "sat" or model is None:
        return "; block shard: no admitted configuration leaves a rank empty" if status == "unsat" else ""
    tv, lv, fv = run.val(model, tp), run.val(model, logical), run.val(model, full)
    config, _ = run.concrete(model)
    where = ", ".join(f"{k}={v}" for k, v in config.items())
    empty = tv - -(-fv // lv)
    return (f"; block shard: ranks can be empty, holding only fill ({empty} of {tv} ranks at {where}, "
            f"{lv} rows each)")


def verify_case(contract: ir.Contract, options: Options | None = None,
                fixed: dict[str, Value] | None = None) -> list[Verdict]:
    """Check every property of one contract with a single layout. Returns one verdict per property id.

    `fixed` pins parameters to values (the verdict then speaks of those configurations
    only); tests use it to compare the verifier with the generated code at run time.
    """
    run = _Run(contract, options or Options(), dict(fixed or {}))
    start = time.perf_counter()
    status, _model = run.solve(run.admitted)
    vac_seconds = time.perf_counter() - start
    if status == "unsat":
        detail = "no configuration satisfies the domains, requires and admits together"
        return [Verdict(p, "vacuous", detail, vac_seconds if p == "vacuity" else 0.0, 1 if p == "vacuity" else 0,
                        contract.span) for p in PROPERTY_IDS]
    if status != "sat":
        return [Verdict(p, "inconclusive", f"vacuity check: {status}", vac_seconds, 1, contract.span)
                for p in PROPERTY_IDS]
    verdicts: dict[str, Verdict] = {"vacuity": Verdict("vacuity", "proved", "at least one configuration is admitted",
                                                       vac_seconds, 1, contract.span)}
    builders = {"alignment": _alignment, "placement": _placement, "roundtrip": _roundtrip,
                "inertness": _inertness, "groups": _groups, "kernel-arguments": _kernel_arguments,
                "coverage": _coverage}
    with run.holding(run.admitted):  # every obligation's goal is admitted and more
        for prop, build in builders.items():
            verdicts[prop] = _decide(run, prop, build(run), contract.span)
    verdicts["admission"] = _admission(run, verdicts)
    verdicts["waste"] = _waste(run)
    return [verdicts[p] for p in PROPERTY_IDS]


def verify(contract: ir.Contract, options: Options | None = None,
           fixed: dict[str, Value] | None = None) -> list[Verdict]:
    """Check every property of one contract. Returns one verdict per property id.

    A contract whose layout depends on finite parameters (`when` alternatives, or a
    glue whose kernel reads w13 differently per activation) is proved once per
    layout case (cases.layout_cases), each against the view its kernel reads; a
    property is proved only when it is proved in every case that admits a
    configuration. `fixed` pins parameters to values (tests compare the verifier
    with the generated code at run time).
    """
    from layoutc.compiler.cases import layout_cases

    cases = layout_cases(contract)
    runs = [(case.label, verify_case(case.contract, options, fixed)) for case in cases]
    verdicts = runs[0][1] if len(runs) == 1 else _combine(runs, contract.span)
    if contract.glue is None and contract.kernel is not None and contract.kernel.views:
        verdicts = [replace(v, detail=v.detail + "; the kernel's view is the contract's own declaration "
                            "(no glue binds it): trusted, not checked against code")
                    if v.property == "placement" and v.status == "proved" else v for v in verdicts]
    return verdicts


_RANK = {"counterexample": 0, "inconclusive": 1, "proved": 2, "info": 2, "vacuous": 3}


def _combine(runs: list[tuple[str, list[Verdict]]], span: Span) -> list[Verdict]:
    """One verdict per property over the layout cases: the worst status of the cases that admit
    something (vacuous cases admit nothing, so they prove nothing and refute nothing)."""
    out: list[Verdict] = []
    for index, prop in enumerate(PROPERTY_IDS):
        live = [(label, vs[index]) for label, vs in runs if vs[index].status != "vacuous"]
        seconds = sum(vs[index].seconds for _, vs in runs)
        queries = sum(vs[index].queries for _, vs in runs)
        if not live:
            out.append(replace(runs[0][1][index], seconds=seconds, queries=queries))
            continue
        label, worst = min(live, key=lambda lv: _RANK[lv[1].status])
        # a gate is redundant only if it is redundant in every case: each case's own
        # `require` (its layout-case restriction) can make a gate look implied there alone
        warnings = tuple(w for w in live[0][1].warnings if all(w in v.warnings for _, v in live[1:]))
        if worst.status in ("proved", "info") and prop != "waste":
            detail = f"{worst.detail} in each of {len(live)} layout cases"
        else:
            detail = f"[layout case {label}] {worst.detail}" if label else worst.detail
        out.append(replace(worst, detail=detail, seconds=seconds, queries=queries, warnings=warnings))
    return out
