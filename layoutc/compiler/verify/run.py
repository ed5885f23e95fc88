"""One contract's verification run: its encoding, its solvers and its budget.

Each property is a set of obligations. An obligation asks z3 for a configuration (and,
where needed, an index or a value) that is admitted by the contract yet breaks the
rule: `unsat` proves it, `sat` is a counterexample, `unknown` is inconclusive (never a
pass). :meth:`Run.solve` decides one query; every solver it makes has a fixed seed, a
timeout and a resource limit, and the run as a whole a wall-time budget
(`Options.budget_s`). Sizes stay symbolic; see docs/verification.md, "Solving".
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import z3  # type: ignore[import-untyped]

from layoutc.compiler import ir
from layoutc.compiler.evaluate import EvalError, Value, eval_lets
from layoutc.compiler.verify.held import Held
from layoutc.compiler.verify.smt import Encoder
from layoutc.compiler.verify.verdicts import Options

# z3's arith.solver for the whole-domain attempt and, in turn, for each case (None: z3's
# default). The older solver (2) settles these size formulas (div/mod by numerals) fastest;
# a case it gives up on is asked again with the default one.
QUICK_ARITH: tuple[int | None, ...] = (2,)
CASE_ARITH: tuple[int | None, ...] = (2, None)
# The first attempt at every query: z3's SMT core alone (SimpleSolver), arith.solver 2.
CORE_ARITH: int | None = 2
CORE_RLIMIT_FACTOR = 10

Answer = tuple[str, "z3.ModelRef | None"]  # ("sat", model), ("unsat", None) or ("unknown (why)", None)
Case = list[tuple[z3.ExprRef, z3.ExprRef]]  # (parameter variable, numeral) substitutions


@dataclass
class Run:
    """The encoding of one contract (one layout case) and the solvers deciding its queries.

    `base` is the domain with the pins of `fixed`; `admitted` adds the requires and the
    admits; `sizes[(tensor, axis)]` is (logical, padded, segments) as Int terms.
    """

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
        self._cases: list[Case] | None = None
        self._shared: z3.Solver | None = None
        self._held = Held()
        self._aux_held = 0  # how many of enc.aux the shared solver holds in its current scopes
        self.deadline = time.perf_counter() + self.options.budget_s
        # An admitted configuration (vacuity's model), held for the run's lifetime. z3 reuses
        # the ids of freed terms and the terms it makes while solving take those ids, so
        # the models later queries return depend on when each model is freed: freeing this
        # one early changes counterexamples (tests/support/verdict_snapshot.py shows which).
        self.witness: z3.ModelRef | None = None

    # ---- solving ----
    def cases(self) -> list[Case]:
        """Substitutions for every combination of the finite parameters that feed a divisor
        or a table: each case leaves only numerals as divisors (sizes stay symbolic)."""
        if self._cases is None:
            names = sorted(self.enc.split_params)
            domains = [[(self.enc.vars[n], self.enc.param_value(n, v)) for v in self.contract.param(n).values]
                       for n in names]
            self._cases = [list(combo) for combo in itertools.product(*domains)]
        return self._cases

    def solve(self, goal: z3.BoolRef, extra: list[z3.BoolRef] | None = None, quick_only: bool = False) -> Answer:
        """Decide `goal` (and `extra`) over the whole domain: ("sat", model), ("unsat", None),
        or ("unknown (why)", None), which is never a pass.

        The attempts, in turn, until one answers sat or unsat (each answer is z3's own, so
        their order only decides the time taken and which model a sat query returns):
        1. z3's SMT core alone (SimpleSolver: no preprocessing tactics, which these
           div/mod-by-numeral formulas mostly defeat): first the run's shared incremental
           solver, which holds the domain and the requires every query shares (a query
           inside a push), then a fresh one;
        2. the tactic solver on the whole domain under `quick_rlimit` (:meth:`_quick`);
        3. unless `quick_only` (informational queries), one solver per case (every
           combination of the finite parameters that feed a divisor), specialised to
           numerals (:meth:`_case_split`).
        Every solver also gets the definitions of the encoder's quotient and remainder
        variables (`Encoder.aux`): the shared one holds those made so far, the query the rest.
        """
        formula = z3.And(goal, *(extra or []))
        if self.remaining_ms() <= 0:
            return self._spent(), None
        status, model = self._shared_core(formula)
        # every other solver gets the quotient/remainder definitions with the query
        formula = z3.And(formula, *self.enc.aux)
        if status == "unknown":
            status, model = self._core(formula)
        if status != "unknown":
            return status, model
        if self.remaining_ms() <= 0:
            return self._spent(), None
        status, model, why = self._quick(formula)
        if status != "unknown":
            return status, model
        if quick_only:
            return f"unknown (whole domain: {why})", None
        return self._case_split(formula, why)

    def _spent(self) -> str:
        return f"unknown (the contract's verification budget of {self.options.budget_s:g} s is spent)"

    def _quick(self, formula: z3.BoolRef) -> tuple[str, z3.ModelRef | None, str]:
        """The whole domain at once under a small, deterministic resource budget, with the
        solvers of QUICK_ARITH in turn (arith.solver=2 settles most size formulas with
        div/mod by numerals fastest). ("unknown", None, z3's reason) where none decides."""
        reason = ""
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
                return "sat", solver.model(), ""
            if result == z3.unsat:
                return "unsat", None, ""
            reason = solver.reason_unknown()
        return "unknown", None, reason

    def _case_split(self, formula: z3.BoolRef, why: str) -> Answer:
        """One query per case, in a fixed order, within 4 query timeouts in all: sat in any
        case is a counterexample (the first), unknown in any case (and sat in none) is
        inconclusive, unsat in every case proves it. `why`: the whole domain's reason."""
        cases = self.cases()
        if len(cases) > self.options.max_cases:
            return (f"unknown (whole domain: {why}; {len(cases)} cases exceed the "
                    f"case-split limit {self.options.max_cases})"), None
        deadline = time.perf_counter() + 4 * self.options.timeout_ms / 1000
        unknown = None
        for case in cases:
            if time.perf_counter() > deadline:
                return f"unknown (case split ran past {4 * self.options.timeout_ms} ms)", None
            if self.remaining_ms() <= 0:
                return self._spent(), None
            result, model, reason = self._one_case(formula, case)
            if result == z3.sat:
                return "sat", model
            if result != z3.unsat and unknown is None:
                unknown = f"unknown ({reason})"
        if unknown is not None:
            return unknown, None
        return "unsat", None

    def _one_case(self, formula: z3.BoolRef, case: Case) -> tuple[z3.CheckSatResult, z3.ModelRef | None, str]:
        """`formula` with the case's numerals substituted, by the solvers of CASE_ARITH in turn
        (the next only where the previous gave up); they share one query timeout and only
        the last gets the full resource limit. (z3's answer, model if sat, reason if unknown)."""
        specialised = z3.simplify(z3.substitute(formula, *case)) if case else formula
        case_end = time.perf_counter() + self.options.timeout_ms / 1000
        result, reason = z3.unknown, f"timeout ({self.options.timeout_ms} ms per query)"
        for n, arith in enumerate(CASE_ARITH):
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
                return result, solver.model(), reason
            if result != z3.unknown:
                break
            reason = solver.reason_unknown()
        return result, None, reason

    def _core_solver(self) -> z3.Solver:
        solver = z3.SimpleSolver(ctx=self.ctx)
        if CORE_ARITH is not None:
            solver.set("arith.solver", CORE_ARITH)
        solver.set("random_seed", self.options.seed)
        return solver

    def _core_limits(self, solver: z3.Solver) -> None:
        solver.set("rlimit", min(self.options.rlimit, CORE_RLIMIT_FACTOR * self.options.quick_rlimit))
        solver.set("timeout", max(1, min(self.options.timeout_ms, self.remaining_ms())))

    def _core(self, formula: z3.BoolRef) -> Answer:
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

    def _shared_core(self, formula: z3.BoolRef) -> Answer:
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
        """Milliseconds left of the run's budget (negative once spent)."""
        return int((self.deadline - time.perf_counter()) * 1000)

    # ---- sizes and models ----
    def _axis_sizes(self) -> dict[tuple[str, str], tuple[z3.ArithRef, z3.ArithRef, int]]:
        out = {}
        for t in self.contract.tensors:
            for a in t.axes:
                out[(t.name, a.name)] = (self.enc.expr(a.logical), self.enc.expr(a.padded), a.segments)
        return out

    def kernel_sizes(self) -> dict[tuple[str, str], z3.ArithRef]:
        """Each axis's size as the kernel sees it: segments * padded (values, before packing)."""
        return {key: seg * p for key, (_, p, seg) in self.sizes.items()}

    def grouped(self, axis: ir.Axis, value: z3.ArithRef) -> z3.ArithRef:
        """Size in groups of a groups axis (-1: one group)."""
        if axis.group_size is None:
            return value
        g = axis.group_size
        return self.enc.by_values(g, lambda v: self.enc.int(1) if v == -1 else value / v, None)

    def concrete(self, model: z3.ModelRef) -> tuple[dict[str, Value], dict[str, Value]]:
        """(parameter values, derived `let` values) of a model; no derived values where the
        contract's lets cannot be evaluated there."""
        config = self.enc.decode_config(model)
        try:
            env = eval_lets(self.contract, config)
        except EvalError:
            env = dict(config)
        derived = {k: v for k, v in env.items() if k not in config}
        return config, derived

    def val(self, model: z3.ModelRef, term: z3.ExprRef) -> int:
        """The integer value of `term` in `model` (quotients and remainders recomputed)."""
        return int(self.enc.evaluate(model, term).as_long())
