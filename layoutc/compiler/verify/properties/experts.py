"""The `expert-coverage` property: under expert parallelism every expert is served by its rank.

For a contract with `experts NUM over EP placement ...` (docs/verification.md,
expert-coverage), at each EP degree of the finite EP parameter, each placement it serves, and
every admitted configuration with at least as many physical experts as ranks (plan() refuses
fewer, EP01):

- local ids are below the kernel's experts axis: the local id vLLM's expert map gives physical
  expert p on its rank is below every tensor's experts axis (otherwise p is dropped);
- the routed slot holds the expert: the slot p is routed to holds p's bytes (a `load stride`
  loader can put another expert there);
- no expert on a second rank: no rank but p's own holds p in a slot of its experts axis
  (redundant experts are other physical experts, each on the rank of its own slot);
- every computed pair is routed and local: for a token routed to physical expert p, the pair
  rank b's kernel computes is (token, local slot s) only where b holds p at s. What the kernel
  is handed for a foreign pair is modelled from the bound glue's declared
  `GlueInterface.foreign_pairs` (a contract's `foreign raw|masked` states it instead):
  "dropped" (the generated fused_moe hands the kernel the rank's routed, local pairs only,
  runtime/expert_map.py `run_local`) computes nothing; "masked" computes local slot 0 at
  weight 0, an expert the token was never routed to (0 x a non-finite activation is NaN, not
  0: the same rule floating-point inertness holds pad lanes to; issue 39); "raw" computes slot
  p, a wrong slot or out of bounds. Weight 0 is never counted as adding 0;
- `intermediate unpadded`: at every degree above 1 the intermediate axes hold no pad (vllm#51131).

The placement arithmetic is `layoutc.runtime.experts`'s, written here over z3 terms with the
degree and the rank constant, so every formula is linear.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import z3  # type: ignore[import-untyped]

from layoutc.compiler import glues, ir
from layoutc.compiler.verify.obligations import Obligation, decide
from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Verdict


@dataclass
class _Terms:
    """The placement's terms at one degree. Each is built once and reused (z3 hash-conses
    terms, so a rebuilt one is the same term: the memo changes no formula, only the Python
    time of building them, which was most of this property's cost: issue 26)."""

    run: Run
    ep: ir.ExpertParallel
    degree: int
    placement: str
    physical: z3.ArithRef
    _memo: dict[tuple[object, ...], tuple[object, ...]] = field(default_factory=dict)

    def _cached(self, key: tuple[object, ...], alive: tuple[z3.ExprRef, ...], make: Callable[[], z3.ExprRef]) -> Any:
        # `alive` (the terms whose ids are in the key) is held with the value, so no id is reused
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = (make(), *alive)
        return hit[0]

    def base(self) -> z3.ArithRef:
        return self._cached(("base",), (), lambda: self.physical / self.degree)

    def extra(self) -> z3.ArithRef:
        return self._cached(("extra",), (), lambda: self.physical % self.degree)

    def count(self, rank: int) -> z3.ArithRef:
        return self._cached(("count", rank), (), lambda: self.base() + z3.If(rank < self.extra(), 1, 0))

    def start(self, rank: int) -> z3.ArithRef:
        return self._cached(("start", rank), (), lambda: rank * self.base()
                            + z3.If(rank < self.extra(), rank, self.extra()))

    def routed(self, p: z3.ArithRef, rank: int, slot: z3.ArithRef) -> z3.BoolRef:
        """vLLM's expert map on `rank` gives physical expert p local id `slot`."""
        return self._cached(("routed", p.get_id(), rank, slot.get_id()), (p, slot), lambda: self._routed(p, rank, slot))

    def _routed(self, p: z3.ArithRef, rank: int, slot: z3.ArithRef) -> z3.BoolRef:
        if self.placement == "round_robin":
            return z3.And(p % self.degree == rank, slot == p / self.degree)
        return z3.And(slot == p - self.start(rank), slot >= 0, slot < self.count(rank))

    def owns(self, p: z3.ArithRef, rank: int) -> z3.BoolRef:
        """vLLM's expert map on `rank` holds physical expert p (not -1)."""
        return self._cached(("owns", p.get_id(), rank), (p,), lambda: self._owns(p, rank))

    def _owns(self, p: z3.ArithRef, rank: int) -> z3.BoolRef:
        if self.placement == "round_robin":
            return p % self.degree == rank
        return z3.And(p >= self.start(rank), p < self.start(rank) + self.count(rank))

    def loaded(self, rank: int, slot: z3.ArithRef) -> z3.ArithRef:
        """The physical expert the loader puts in `slot` of `rank` (-1: none, a pad)."""
        return self._cached(("loaded", rank, slot.get_id()), (slot,), lambda: self._loaded(rank, slot))

    def _loaded(self, rank: int, slot: z3.ArithRef) -> z3.ArithRef:
        if self.ep.stride is not None:
            first = rank * self.run.enc.expr(self.ep.stride)
            return z3.If(z3.And(slot >= 0, first + slot < self.physical), first + slot, -1)
        held = slot * self.degree + rank if self.placement == "round_robin" else self.start(rank) + slot
        return z3.If(z3.And(slot >= 0, slot < self.count(rank)), held, -1)


def _placements(run: Run, ep: ir.ExpertParallel) -> list[tuple[str, z3.BoolRef]]:
    if not ep.placement_param:
        return [(name, z3.BoolVal(True, run.ctx)) for name in ep.placement]
    values = run.contract.param(ep.placement[0]).values
    return [(str(v), run.enc.vars[ep.placement[0]] == run.enc.param_value(ep.placement[0], v)) for v in values]


def _experts_axes(run: Run) -> list[tuple[str, z3.ArithRef]]:
    return [(t.name, run.sizes[(t.name, a.name)][1]) for t in run.contract.tensors for a in t.axes
            if a.name == "experts"]


def obligations(run: Run) -> list[Obligation]:
    """The rules above as refutation goals, one per rule, degree and placement."""
    ep = run.contract.ep
    if ep is None:
        return []
    enc, ctx = run.enc, run.ctx
    physical = enc.vars[ep.experts] + (enc.vars[ep.redundant] if ep.redundant else 0)
    p, slot, other = z3.Int("ep_expert", ctx), z3.Int("ep_slot", ctx), z3.Int("ep_other_slot", ctx)
    obs: list[Obligation] = []
    for degree in sorted(int(v) for v in run.contract.param(ep.count).values):
        if degree < 2:
            continue
        for placement, chosen in _placements(run, ep):
            terms = _Terms(run, ep, degree, placement, physical)
            here = z3.And(run.admitted, chosen, enc.vars[ep.count] == degree, physical >= degree, p >= 0,
                          p < physical)
            tag = f"ep_size {degree}, {placement}"
            obs += _rank_obligations(run, terms, here, tag, p, slot, other)
            obs.append(_computed_pairs(run, terms, here, tag, p, slot))
    if ep.unpadded:
        obs += _unpadded(run, ep)
    return obs


def _rank_obligations(run: Run, terms: _Terms, here: z3.BoolRef, tag: str, p: z3.ArithRef,
                      slot: z3.ArithRef, other: z3.ArithRef) -> list[Obligation]:
    ep = terms.ep
    obs: list[Obligation] = []
    for tensor, axis in _experts_axes(run):
        dropped = z3.Or([z3.And(terms.routed(p, r, slot), slot >= axis) for r in range(terms.degree)])

        def explain_dropped(m, tensor=tensor, axis=axis):  # type: ignore[no-untyped-def]
            e, s = run.val(m, p), run.val(m, slot)
            r = next(r for r in range(terms.degree) if z3.is_true(m.eval(terms.routed(z3.IntVal(e, run.ctx), r,
                                                                                        z3.IntVal(s, run.ctx)))))
            return (f"rank {r}: expert {e} has local id {s}, but {tensor}'s experts axis holds "
                    f"{run.val(m, axis)}: expert {e} is dropped ({tag})", "experts")
        obs.append(Obligation(f"local id below the experts axis ({tag})", ep.span, z3.And(here, dropped),
                              explain_dropped, tensor))
    axis = _experts_axes(run)[0][1] if _experts_axes(run) else None
    if axis is None or ep.stride is None:
        # The map loader reads exactly the experts the map routes, in local-id order: the
        # next two rules hold by construction there and are obligations of `load stride` only.
        return obs
    twice = z3.Or([z3.And(other >= 0, other < axis, terms.loaded(b, other) == p, z3.Not(terms.routed(p, b, other)))
                   for b in range(terms.degree)])

    def explain_twice(m):  # type: ignore[no-untyped-def]
        e, j = run.val(m, p), run.val(m, other)
        b = next(b for b in range(terms.degree) if z3.is_true(m.eval(z3.And(terms.loaded(b, other) == p,
                                                                             z3.Not(terms.routed(p, b, other))))))
        own = next((r for r in range(terms.degree) if z3.is_true(m.eval(terms.owns(p, r)))), None)
        return (f"expert {e} is on rank {b} (local id {j}) and on its own rank {own}: an expert on two "
                "ranks", "experts")
    obs.append(Obligation(f"no expert on a second rank ({tag})", ep.span, z3.And(here, twice), explain_twice))
    wrong = z3.Or([z3.And(terms.routed(p, r, slot), slot < axis, terms.loaded(r, slot) != p)
                   for r in range(terms.degree)])

    def explain_wrong(m):  # type: ignore[no-untyped-def]
        e, s = run.val(m, p), run.val(m, slot)
        for r in range(terms.degree):
            if z3.is_true(m.eval(z3.And(terms.routed(p, r, slot), terms.loaded(r, slot) != p))):
                got = run.val(m, terms.loaded(r, slot))
                return (f"rank {r}: expert {e} is routed to local id {s}, which holds "
                        f"{'no expert (a pad)' if got < 0 else f'expert {got}'}", "experts")
        return f"expert {e} is routed to a slot that holds another expert", "experts"
    obs.append(Obligation(f"the routed slot holds the expert ({tag})", ep.span, z3.And(here, wrong), explain_wrong))
    return obs


def _computed(mode: str, terms: _Terms, p: z3.ArithRef, rank: int, slot: z3.ArithRef) -> z3.BoolRef:
    """Rank `rank`'s kernel computes local slot `slot` for a token routed to physical expert p."""
    if mode == "dropped":  # expert_map.local_pairs: a pair is handed on only where the map holds it
        return z3.And(terms.owns(p, rank), terms.routed(p, rank, slot))
    if mode == "masked":  # the pre-issue-39 glue: a foreign pair goes to local id 0 at weight 0
        return z3.If(terms.owns(p, rank), terms.routed(p, rank, slot), slot == 0)
    if mode == "raw":  # the router's global id, unmapped
        return slot == p
    return z3.BoolVal(True, terms.run.ctx)  # a mode the verifier does not model computes anything


def _computed_pairs(run: Run, terms: _Terms, here: z3.BoolRef, tag: str, p: z3.ArithRef,
                    slot: z3.ArithRef) -> Obligation:
    mode, who = glues.foreign_pairs(run.contract)
    rank = z3.Int("ep_rank", run.ctx)
    bad = z3.Or([z3.And(rank == b, _computed(mode, terms, p, b, slot),
                        z3.Not(z3.And(terms.owns(p, b), terms.routed(p, b, slot)))) for b in range(terms.degree)])

    def explain(m):  # type: ignore[no-untyped-def]
        e, b, s = run.val(m, p), run.val(m, rank), run.val(m, slot)
        held = run.val(m, terms.loaded(b, z3.IntVal(s, run.ctx)))
        owner = next((r for r in range(terms.degree) if z3.is_true(m.eval(terms.owns(z3.IntVal(e, run.ctx), r)))), None)
        what = f"expert {held}" if held >= 0 else "no expert (a pad, or past the experts axis)"
        if mode not in glues.FOREIGN_PAIRS:
            return (f"{who} is {mode!r}, which the verifier does not model (it knows "
                    f"{', '.join(glues.FOREIGN_PAIRS)}): no computed pair is proved routed ({tag})", "routing")
        how = {"masked": "local id 0 at weight 0", "raw": f"its global id {e} unmapped"}.get(mode, f"local id {s}")
        where = "foreign to it" if owner != b else "held by it at another local id"
        why = ("; weight 0 does not make that pair add 0: 0 x a non-finite activation is NaN" if mode == "masked"
               else " at the router's weight")
        return (f"rank {b}: a token routed to expert {e} (on rank {owner}, {where}) is handed to the kernel as "
                f"{how} ({who}): the kernel computes local slot {s}, {what}, on a token never routed to it{why} "
                f"({tag})", "routing")
    return Obligation(f"every computed pair is routed and local ({tag})", terms.ep.span, z3.And(here, bad), explain)


def _unpadded(run: Run, ep: ir.ExpertParallel) -> list[Obligation]:
    obs: list[Obligation] = []
    for t in run.contract.tensors:
        for a in t.axes:
            if not ir.is_intermediate(t, a):
                continue
            logical, padded, _ = run.sizes[(t.name, a.name)]

            def explain(m, t=t, a=a, logical=logical, padded=padded):  # type: ignore[no-untyped-def]
                return (f"ep_size {run.val(m, run.enc.vars[ep.count])}: `{t.name}.{a.name}` is padded "
                        f"{run.val(m, logical)} -> {run.val(m, padded)}, but the contract states the "
                        "intermediate unpadded under EP (vllm#51131)", t.name)
            goal = z3.And(run.admitted, run.enc.vars[ep.count] > 1, padded != logical)
            obs.append(Obligation(f"intermediate unpadded under EP ({t.name}.{a.name})", ep.span, goal, explain, t.name))
    return obs


def check(run: Run, earlier: Mapping[str, Verdict]) -> Verdict:
    """The `expert-coverage` verdict; a contract without expert parallelism has nothing to prove."""
    if run.contract.ep is None:
        return Verdict("expert-coverage", "proved", "nothing to prove (no expert parallelism)", 0.0, 0,
                       run.contract.span)
    return decide(run, "expert-coverage", obligations(run), run.contract.ep.span)
