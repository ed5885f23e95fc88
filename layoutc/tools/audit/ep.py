"""``layoutc audit --ep``: per model, contract, variant and EP degree, each rank's experts,
its memory and whether the intermediate pad is needed, next to the TP rows.

Under ``--enable-expert-parallel`` vLLM 0.32 flattens every device of the MoE layer into the
EP group and gives the layer tensor-parallel size 1 (config.py ``FusedMoEParallelConfig.make``;
``layoutc.runtime.experts.parallel_config``): every rank holds whole experts, and the
intermediate is not split. So an EP row is the contract evaluated at ``tp_size = 1`` and
``ep_size = degree`` (its lets, requires, admits and kernel aligns, as the TP rows:
``verdict.evaluate_row``); its widths are the contract's ``intermediate_size_per_partition``
and ``..._padded`` there (a contract with ``intermediate unpadded`` states in its lets that the
pad is skipped, vllm#51131), its experts axis the contract's ``local_num_experts`` let, each
rank's experts ``layoutc.runtime.experts.held`` (the arithmetic of the generated modules'
``local_experts``, vLLM's ``determine_expert_map``), and its memory the contract's declared
tensors at their padded shapes (``engines.rank_bytes``) times the MoE layers.

A degree above the model's (physical) experts is refused with the runtime's own EP01 message
(``experts.check_ep``); a contract with no ``experts ... over`` declaration serves no EP
degree above 1. Pure: no I/O, no solver, no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from layoutc.compiler import ir
from layoutc.compiler.evaluate import EvalError, Value
from layoutc.runtime.experts import ExpertParallelError, check_ep, held
from layoutc.tools.audit.engines import rank_bytes
from layoutc.tools.audit.formats import checkpoint_format, method_left_out, takes
from layoutc.tools.audit.params import contract_values, domain_text, fmt_value, in_domain, model_values, rule_name
from layoutc.tools.audit.report import Models, _model_entries, split_params
from layoutc.tools.audit.rows import AuditReport, AuditRow
from layoutc.tools.audit.verdict import _lets, evaluate_row, prepare, variants
from layoutc.tools.hfconfig import MoEModelConfig

LOCAL_EXPERTS = "local_num_experts"


@dataclass(frozen=True)
class EpRow:
    """One (model, contract, variant, ep) verdict at the layer's tp 1. Sizes are elements.

    local_num_experts: the contract's experts axis, the most experts a rank holds (None when
    refused before the lets). experts_by_rank: per placement the contract serves, each
    rank's global expert ids in local-id order. rank_bytes: one rank's declared tensors
    (weights and scales, optional biases left out) as padded, all MoE layers. pad_needed:
    padded != I_pp. code: the runtime's EP code (EP01) when the degree is refused for it.
    """

    model: str
    model_name: str
    contract: str
    variant: dict[str, Value] = field(hash=False)
    ep_size: int
    num_experts: int
    admitted: bool
    rule: str | None
    reason: str | None
    code: str | None = None
    placements: tuple[str, ...] = ()
    local_num_experts: int | None = None
    experts_by_rank: dict[str, tuple[tuple[int, ...], ...]] = field(hash=False, default_factory=dict)
    intermediate_size_per_partition: int | None = None
    intermediate_size_per_partition_padded: int | None = None
    rank_bytes: int | None = None
    num_moe_layers: int = 0

    @property
    def pad_needed(self) -> bool | None:
        """Whether the kernel's intermediate is wider than the checkpoint's (None: unknown)."""
        i_pp, padded = self.intermediate_size_per_partition, self.intermediate_size_per_partition_padded
        return None if i_pp is None or padded is None else padded != i_pp

    @property
    def min_local_experts(self) -> int | None:
        """The fewest experts a rank holds (the last ranks when the count does not divide)."""
        counts = [len(r) for ranks in self.experts_by_rank.values() for r in ranks]
        return min(counts) if counts else None

    def fast_path(self) -> str:
        """``yes`` (admitted, no pad), ``yes, padded`` (admitted with a pad), or ``NO ...``."""
        if not self.admitted:
            return f"NO  {self.rule}: {self.reason}"
        return "yes, padded" if self.pad_needed else "yes"

    def variant_text(self) -> str:
        """The enumerated parameters as ``name=value, ...``; ``-`` when there are none."""
        return ", ".join(f"{k}={fmt_value(v)}" for k, v in self.variant.items()) or "-"

    def experts_text(self) -> str:
        """``64`` when every rank holds as many, ``3/2`` (most/fewest) otherwise, ``-`` unknown."""
        if self.local_num_experts is None:
            return "-"
        low = self.min_local_experts
        return str(self.local_num_experts) if low in (None, self.local_num_experts) else \
            f"{self.local_num_experts}/{low}"

    def to_json(self) -> dict[str, Any]:
        """The row as ``layoutc audit --ep --format json`` writes it (fields: docs/audit.md)."""
        return {
            "model": self.model, "model_name": self.model_name, "contract": self.contract,
            "variant": dict(self.variant), "ep_size": self.ep_size, "tp_size": 1, "num_experts": self.num_experts,
            "placements": list(self.placements), "local_num_experts": self.local_num_experts,
            "min_local_experts": self.min_local_experts,
            "experts_by_rank": {p: [list(r) for r in ranks] for p, ranks in self.experts_by_rank.items()},
            "intermediate_size_per_partition": self.intermediate_size_per_partition,
            "intermediate_size_per_partition_padded": self.intermediate_size_per_partition_padded,
            "pad_needed": self.pad_needed, "rank_bytes": self.rank_bytes, "num_moe_layers": self.num_moe_layers,
            "admitted": self.admitted, "fast_path": "no" if not self.admitted else
            ("padded" if self.pad_needed else "yes"),
            "rule": self.rule, "reason": self.reason, "code": self.code,
        }


def ep_report(models: Models, eps: Sequence[int], contracts: Sequence[ir.Contract]) -> list[EpRow]:
    """One :class:`EpRow` per model x contract x variant x EP degree (the pairs the TP audit
    skips for their checkpoint format are skipped here too, without a row).

    Args:
        models: as :func:`layoutc.tools.audit.audit_report`.
        eps: EP degrees (positive ints), in the order rows should list them.
        contracts: checked contracts (``source.load``).
    Rows are ordered model, contract, variant, EP. Pure: no I/O, no solver.
    """
    rows: list[EpRow] = []
    for label, model in _model_entries(models):
        fmt = checkpoint_format(model)
        other = method_left_out([c for c in contracts if not isinstance(takes(c, fmt), str)], fmt)
        for contract in contracts:
            taken = takes(contract, fmt)
            if isinstance(taken, str) or contract.name in other:
                continue
            split = split_params(model, contract, model_values(model, taken))
            if isinstance(split, str):
                continue
            rows.extend(_pair_rows(label, model, contract, split.fixed, split.free, split.refusal, eps))
    return rows


def _pair_rows(label: str, model: MoEModelConfig, contract: ir.Contract, fixed: dict[str, Any],
               free: list[ir.Param], refusal: tuple[str, str] | None, eps: Sequence[int]) -> list[EpRow]:
    ep = contract.ep
    ep_names = {ep.count, *([ep.redundant] if ep and ep.redundant else [])} if ep else set()
    placement_param = ep.placement[0] if ep is not None and ep.placement_param else None
    free = [p for p in free if p.name not in ep_names and p.name != placement_param]
    base = EpRow(label, model.name, contract.name, {}, 0, model.num_experts, False, None, None,
                 num_moe_layers=model.num_moe_layers)

    def refused(d: int, rule: str, reason: str, code: str | None = None) -> EpRow:
        return _replace(base, ep_size=d, rule=rule, reason=reason, code=code)

    out: list[EpRow] = []
    if refusal is not None:
        return [refused(d, *refusal) for d in eps]
    prep = prepare(contract)
    combos = variants(prep, free, contract_values(fixed))
    params = {p.name: p for p in contract.params}
    for variant in combos:
        out.extend(_degree_row(base, prep, model, fixed, variant, d, params) for d in eps)
    return out


def _replace(row: EpRow, **changes: Any) -> EpRow:
    return dataclasses.replace(row, **changes)


def _degree_row(base: EpRow, prep: Any, model: MoEModelConfig, fixed: dict[str, Any], variant: dict[str, Value],
                d: int, params: dict[str, ir.Param]) -> EpRow:
    """The row of one variant at EP degree ``d`` (tp_size 1)."""
    contract: ir.Contract = prep.contract
    ep = contract.ep
    row = _replace(base, variant=dict(variant), ep_size=d)
    config: dict[str, Value] = {**contract_values(fixed), **variant}
    if "tp_size" in params:
        config["tp_size"] = 1
    if ep is None:
        if d > 1:
            where = rule_name("contract", contract.span.line)
            return _replace(row, rule=where, reason=f"{contract.name} states no expert parallelism (no `experts "
                            "... over` declaration): every rank holds every expert")
        placements: tuple[str, ...] = ()
        physical = model.num_experts
    else:
        count = params[ep.count]
        if not in_domain(count, d):
            return _replace(row, rule=rule_name("param", count.span.line),
                            reason=f"{ep.count} = {d} is outside this contract's domain {domain_text(count)}")
        config[ep.count] = d
        served = params[ep.placement[0]].values if ep.placement_param else ep.placement
        placements = tuple(str(p) for p in served)
        redundant = config.get(ep.redundant, 0) if ep.redundant else 0
        physical = model.num_experts + int(redundant)
        try:
            check_ep(model.num_experts, d, placements[0], int(redundant))
        except ExpertParallelError as exc:
            return _replace(row, rule=f"runtime {exc.code}", reason=str(exc).removeprefix(f"[{exc.code}] "),
                            code=exc.code, placements=placements)
    if ep is not None and ep.placement_param:
        config[ep.placement[0]] = placements[0]
    # as the TP rows: a clamping model and a contract that cannot state its clamp is unconfirmed
    unstated = [("swiglu_limit", model.swiglu_limit)] if model.swiglu_limit is not None and not (
        {"swiglu_limit", "swiglu_limit_milli"} & set(params)) else []
    verdict = evaluate_row(prep, config, model.num_moe_layers, model.activation, unstated)
    rule, reason = verdict.violations[0] if verdict.violations else (None, None)
    row = _replace(row, admitted=not verdict.violations, rule=rule, reason=reason, placements=placements,
                   intermediate_size_per_partition=verdict.intermediate_size_per_partition,
                   intermediate_size_per_partition_padded=verdict.intermediate_size_per_partition_padded)
    if rule is not None and verdict.intermediate_size_per_partition is None:
        return row  # a broken require: the lets are not sizes
    env = _lets(contract, config)
    local = env.get(LOCAL_EXPERTS, physical if ep is None else None)
    by_rank = {p: tuple(tuple(held(r, physical, d, p)) for r in range(d)) for p in placements} if d > 1 else {}
    try:
        per_layer = rank_bytes(contract, env)
    except EvalError:
        per_layer = None
    return _replace(row, local_num_experts=local if isinstance(local, int) else None, experts_by_rank=by_rank,
                    rank_bytes=None if per_layer is None else per_layer * model.num_moe_layers)


@dataclass(frozen=True)
class Topology:
    """One (model, contract, variant, degree) with its TP row (``--tp`` degree, the
    intermediate split) and its EP row (``--ep`` degree, whole experts at tp 1) side by side;
    either is None when the degree is not in that list. tp_rank_bytes: the TP row's declared
    tensors as padded, one rank, all MoE layers (``engines.rank_bytes``; None unknown)."""

    model: str
    contract: str
    variant: dict[str, Value] = field(hash=False)
    degree: int
    tp: AuditRow | None
    tp_rank_bytes: int | None
    ep: EpRow | None

    def to_json(self) -> dict[str, Any]:
        """The pair as ``"topology"`` entries of ``layoutc audit --ep --format json`` write it."""
        tp = self.tp
        return {"model": self.model, "contract": self.contract, "variant": dict(self.variant), "degree": self.degree,
                "tp": None if tp is None else {"fast_path": tp_fast_path(tp), "rank_bytes": self.tp_rank_bytes,
                                               "intermediate_size_per_partition": tp.intermediate_size_per_partition,
                                               "intermediate_size_per_partition_padded":
                                                   tp.intermediate_size_per_partition_padded},
                "ep": None if self.ep is None else {"fast_path": self.ep.to_json()["fast_path"],
                                                    "rank_bytes": self.ep.rank_bytes,
                                                    "local_num_experts": self.ep.local_num_experts}}


def tp_fast_path(row: AuditRow) -> str:
    """A TP row's fast path in the EP rows' words: ``yes``, ``padded`` or ``no``."""
    if not row.admitted:
        return "no"
    i_pp, padded = row.intermediate_size_per_partition, row.intermediate_size_per_partition_padded
    return "padded" if i_pp is not None and padded is not None and padded != i_pp else "yes"


def topology(report: AuditReport, ep_rows: Sequence[EpRow], contracts: Sequence[ir.Contract],
             tps: Sequence[int], eps: Sequence[int]) -> list[Topology]:
    """TP and EP rows paired by (model, contract, variant) at every degree of ``--tp`` or
    ``--ep`` (ascending), for the contracts that state expert parallelism. The TP row of a
    configuration refused before its variants (variant ``{}``) stands for every variant."""
    by_name = {c.name: c for c in contracts}
    keys: list[tuple[str, str, tuple[tuple[str, Value], ...]]] = []
    for e in ep_rows:
        key = (e.model, e.contract, tuple(e.variant.items()))
        if by_name[e.contract].ep is not None and key not in keys:
            keys.append(key)
    out: list[Topology] = []
    for model, name, variant in keys:
        for d in sorted(set(tps) | set(eps)):
            tp_row = None
            if d in tps:
                tp_row = next((r for r in report.rows if r.model == model and r.contract == name and r.tp_size == d
                               and tuple(r.variant.items()) in (variant, ())), None)
            ep_row = next((e for e in ep_rows if e.model == model and e.contract == name and e.ep_size == d
                           and tuple(e.variant.items()) == variant), None) if d in eps else None
            memory = None
            if tp_row is not None and tp_row.admitted:
                per_layer = rank_bytes(by_name[name], _lets(by_name[name], contract_values(tp_row.params)))
                memory = None if per_layer is None else per_layer * tp_row.num_moe_layers
            out.append(Topology(model, name, dict(variant), d, tp_row, memory, ep_row))
    return out


@dataclass(frozen=True)
class EpSection:
    """What ``--ep`` adds to a report: the EP rows and the TP/EP side-by-side pairs."""

    rows: tuple[EpRow, ...]
    topology: tuple[Topology, ...]


def ep_section(report: AuditReport, eps: Sequence[int], contracts: Sequence[ir.Contract],
               tps: Sequence[int]) -> EpSection:
    """The EP rows of ``report``'s models at ``eps`` and their pairing with its TP rows."""
    rows = ep_report(list(report.models), eps, contracts)
    return EpSection(tuple(rows), tuple(topology(report, rows, contracts, tps, eps)))
