"""The audit itself: every model x contract x variant x TP degree, as rows and skipped pairs.

For each (model, contract) pair whose checkpoint format the contract takes, the
model config fixes the parameters it determines; the others are enumerated (their
variants); each variant is evaluated at each TP degree (``verdict.evaluate_row``).
The rules are in docs/audit.md. Pure: no I/O, no solver.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from layoutc.compiler import ir
from layoutc.compiler.evaluate import Value
from layoutc.runtime.interface import release_key
from layoutc.tools.audit.formats import CheckpointFormat, checkpoint_format, method_left_out, takes
from layoutc.tools.audit.params import (
    SWIGLU_PARAMS,
    ModelValue,
    contract_values,
    domain_text,
    fmt_value,
    in_domain,
    kernel_activation_refusal,
    model_values,
    param_sources,
    rule_name,
)
from layoutc.tools.audit.rows import AuditReport, AuditRow, Skipped
from layoutc.tools.audit.verdict import Prepared, RowVerdict, Violation, evaluate_row, prepare, variants
from layoutc.tools.checkpoints.quant.methods import gated_by_own
from layoutc.tools.hfconfig import MoEModelConfig

MAX_VARIANTS = 4096  # per (model, contract): the product of the enumerated domains

Models = Mapping[str, MoEModelConfig] | Sequence[MoEModelConfig | tuple[str, MoEModelConfig]]


def audit_report(models: Models, tps: Sequence[int], contracts: Sequence[ir.Contract]) -> AuditReport:
    """Rows and skipped pairs for every model x contract x variant x TP degree.

    Args:
        models: configs from ``hfconfig.load_model_config``, each labelled by
            ``config.name``; or (label, config) pairs; or a {label: config} map.
            The label is the row's ``model`` field (the CLI uses the argument as typed).
        tps: TP degrees (positive ints), in the order rows should list them.
        contracts: checked contracts (``source.load``), in the order to list them.

    Rows are ordered model, contract, variant, TP. Pure: no I/O, no solver.
    """
    rows: list[AuditRow] = []
    skipped: list[Skipped] = []
    prepared = [prepare(c) for c in contracts]
    entries = _model_entries(models)
    for label, model in entries:
        fmt = checkpoint_format(model)
        found = {prep.contract.name: takes(prep.contract, fmt) for prep in prepared}
        other = method_left_out([p.contract for p in prepared if not isinstance(found[p.contract.name], str)], fmt)
        first = len(rows)
        for prep in prepared:
            taken = other.get(prep.contract.name) or found[prep.contract.name]
            if isinstance(taken, str):
                skipped.append(Skipped(label, model.name, prep.contract.name, taken))
                continue
            rows.extend(_audit_pair(label, model, prep, model_values(model, taken), tps, skipped))
        rows[first:] = _gate_by_own_method(rows[first:], prepared, found, other, fmt)
    engines = list(dict.fromkeys(m.engine for c in contracts for m in c.models))
    held = tuple((e, tuple(sorted({r for c in contracts for m in c.models if m.engine == e for r in m.releases},
                                  key=release_key))) for e in engines)
    return AuditReport(tuple(rows), tuple(skipped), tuple(entries), held)


def _gate_by_own_method(rows: list[AuditRow], prepared: Sequence[Prepared], found: Mapping[str, object],
                        other: Mapping[str, str], fmt: CheckpointFormat) -> list[AuditRow]:
    """One model's rows, with a kernel-only contract's rows (checkpoints/quant/methods.py gated_by_own)
    refused at the TP degrees where the contract of the checkpoint's own method refuses: the kernel
    gets the checkpoint only as that method loads it (compressed-tensors W4A16 group 128 at I 1408, tp 2:
    CompressedTensorsWNA16MoEMethod refuses, so torch_int4pack_gptq_moe's padded 768 is not reached)."""
    if fmt.scheme is None:
        return rows
    taking = [p.contract for p in prepared if not isinstance(found[p.contract.name], str) and p.contract.name not in other]
    gates = gated_by_own({c.name: [(m.engine, m.target) for m in c.models] for c in taking}, fmt.scheme.method)
    if not gates:
        return rows
    refused: dict[int, AuditRow] = {}
    for r in rows:
        if not r.admitted and r.tp_size not in refused and any(r.contract in g for g in gates.values()):
            refused[r.tp_size] = r
    out = []
    for r in rows:
        own = refused.get(r.tp_size)
        if r.contract in gates and r.admitted and own is not None:
            r = dataclasses.replace(r, admitted=False, rule=own.rule, pad_fraction=None, extra_bytes=None,
                                    extra_flops_pct=None,
                                    reason=f"quant_method {fmt.scheme.method!r} loads this checkpoint through "
                                           f"{own.contract}'s method, which refuses this degree: {own.reason}")
        out.append(r)
    return out


def audit(models: Models, tps: Sequence[int], contracts: Sequence[ir.Contract]) -> list[AuditRow]:
    """One :class:`AuditRow` per (model, contract, variant, tp); see :func:`audit_report`."""
    return list(audit_report(models, tps, contracts).rows)


def _model_entries(models: Models) -> list[tuple[str, MoEModelConfig]]:
    if isinstance(models, Mapping):
        return list(models.items())
    out: list[tuple[str, MoEModelConfig]] = []
    for entry in models:
        if isinstance(entry, MoEModelConfig):
            out.append((entry.name, entry))
        else:
            label, model = entry
            out.append((label, model))
    return out


@dataclass
class ParamSplit:
    """A contract's parameters for one model: the values the config fixes, the ones to
    enumerate, and the refusal (rule, reason) that holds for every variant and TP degree."""

    fixed: dict[str, ModelValue]
    free: list[ir.Param]
    refusal: Violation | None


def split_params(model: MoEModelConfig, contract: ir.Contract,
                 determined: Mapping[str, ModelValue]) -> ParamSplit | str:
    """Which of the contract's parameters (``tp_size`` aside) the model config fixes, and which
    are enumerated; a str (the skipped pair's reason) when one can be neither."""
    swigluoai = model.activation == "swigluoai"
    split = ParamSplit({}, [], kernel_activation_refusal(contract, model))
    for p in contract.params:
        if p.name == "tp_size":
            continue
        value = _determined_value(p, determined, swigluoai)
        if value is None and p.name in SWIGLU_PARAMS and swigluoai and split.refusal is None:
            # the model runs swigluoai but its config states no such constant
            split.refusal = (rule_name("param", p.span.line),
                             f"the model's config states no {p.name}, and this contract's kernel needs one of "
                             f"{domain_text(p)}")
        if value is None and p.name in SWIGLU_PARAMS and not swigluoai:
            split.free.append(_one_value(p))
            continue
        if value is None:
            if not p.finite:
                return (f"parameter {p.name} ({domain_text(p)}) is not determined by the model "
                        "config and is not a finite set to enumerate")
            split.free.append(p)
            continue
        split.fixed[p.name] = value
        if split.refusal is None and not in_domain(p, value):
            split.refusal = _domain_refusal(p, value)
    return split


def _determined_value(p: ir.Param, determined: Mapping[str, ModelValue], swigluoai: bool) -> ModelValue | None:
    """The value the model config gives ``p``, else the contract's default, else None (enumerate it)."""
    value = determined.get(p.name)
    if p.name == "dtype" and value is not None and not in_domain(p, value):
        value = None  # the model's dtype is not one this kernel takes: enumerate the enum
    if value is None and p.default is not None and (p.name not in SWIGLU_PARAMS or not swigluoai):
        value = p.default  # the contract's own default (0: "this model states no such constant")
    return value


def _one_value(p: ir.Param) -> ir.Param:
    """A SwiGLU constant means nothing to this model's activation: one value (the domain's
    first) stands for all, shown in the row's variant, instead of one row per value (or a
    skipped pair, for a range)."""
    first = p.low if p.kind == "range" else p.values[0]
    if p.kind == "range":
        return dataclasses.replace(p, kind="set", values=(first,), low=int(first), high=int(first))
    return dataclasses.replace(p, values=(first,))


def _domain_refusal(p: ir.Param, value: ModelValue) -> Violation:
    where = rule_name("param", p.span.line)
    if p.name == "activation":
        return where, f"activation {value} not supported by this kernel (supported: {', '.join(map(str, p.values))})"
    return where, f"{p.name} = {fmt_value(value)} is outside this contract's domain {domain_text(p)}"


@dataclass(frozen=True)
class _Pair:
    """What every row of one (model, contract) pair shares."""

    label: str
    model: MoEModelConfig
    contract: ir.Contract
    fixed: dict[str, ModelValue]
    sources: dict[str, str]
    tp_param: ir.Param | None

    def refused(self, tp: int, rule: str, reason: str) -> AuditRow:
        """The row of a configuration refused before any rule is evaluated."""
        params = dict(self.fixed)
        if self.tp_param is not None:
            params["tp_size"] = tp
        return AuditRow(self.label, self.model.name, self.contract.name, {}, tp, self.model.intermediate_size,
                        None, None, False, rule, reason, None, None, None, self.model.num_moe_layers, params,
                        ((rule, reason),), dict(self.sources))

    def evaluated(self, variant: dict[str, Value], tp: int, verdict: RowVerdict) -> AuditRow:
        """The row of one evaluated configuration."""
        rule, reason = verdict.violations[0] if verdict.violations else (None, None)
        costs = verdict.costs
        return AuditRow(
            model=self.label, model_name=self.model.name, contract=self.contract.name, variant=dict(variant),
            tp_size=tp, intermediate_size=self.model.intermediate_size,
            intermediate_size_per_partition=verdict.intermediate_size_per_partition,
            intermediate_size_per_partition_padded=verdict.intermediate_size_per_partition_padded,
            admitted=not verdict.violations, rule=rule, reason=reason,
            pad_fraction=None if costs is None else costs.pad_fraction,
            extra_bytes=None if costs is None else costs.extra_bytes,
            extra_flops_pct=None if costs is None else costs.extra_flops_pct,
            num_moe_layers=self.model.num_moe_layers, params=dict(verdict.params),
            violations=verdict.violations, sources=dict(self.sources),
        )


def _audit_pair(label: str, model: MoEModelConfig, prep: Prepared, determined: Mapping[str, ModelValue],
                tps: Sequence[int], skipped: list[Skipped]) -> list[AuditRow]:
    """The rows of one (model, contract) pair; appends to ``skipped`` instead when it has none."""
    contract = prep.contract
    split = split_params(model, contract, determined)
    if isinstance(split, str):
        skipped.append(Skipped(label, model.name, contract.name, split))
        return []
    count = 1
    for p in split.free:
        count *= max(1, len(p.values))
    if count > MAX_VARIANTS and split.refusal is None:
        skipped.append(Skipped(label, model.name, contract.name,
                               f"{count} combinations of the parameters the config does not determine "
                               f"({', '.join(p.name for p in split.free)}); audit enumerates at most {MAX_VARIANTS}"))
        return []
    sources = param_sources(model, split.fixed)
    if model.source_of("num_moe_layers"):
        sources["num_moe_layers"] = str(model.source_of("num_moe_layers"))
    pair = _Pair(label, model, contract, split.fixed, sources,
                 next((p for p in contract.params if p.name == "tp_size"), None))
    if split.refusal is not None:
        return [pair.refused(tp, *split.refusal) for tp in tps]
    return _evaluated_rows(pair, prep, variants(prep, split.free, contract_values(split.fixed)), tps)


def _evaluated_rows(pair: _Pair, prep: Prepared, combos: list[dict[str, Value]], tps: Sequence[int]) -> list[AuditRow]:
    """One row per variant and TP degree; a TP degree outside the contract's domain gets one
    row (variant {}), listed with the first variant's."""
    model, tp_param = pair.model, pair.tp_param
    fixed = contract_values(pair.fixed)
    # The clamp is a config key (swiglu_limit): a contract that cannot say which clamp its
    # kernel applies cannot be confirmed for a model that clamps.
    declared = {p.name for p in prep.contract.params}
    unstated = [("swiglu_limit", model.swiglu_limit)] if model.swiglu_limit is not None and not (
        {"swiglu_limit", "swiglu_limit_milli"} & declared) else []
    rows: list[AuditRow] = []
    for variant in combos:
        for tp in tps:
            if tp_param is not None and not in_domain(tp_param, tp):
                if variant is combos[0]:
                    rows.append(pair.refused(tp, rule_name("param", tp_param.span.line),
                                             f"tp_size = {tp} is outside this contract's domain "
                                             f"{domain_text(tp_param)}"))
                continue
            config = {**fixed, **variant}
            if tp_param is not None:
                config["tp_size"] = tp
            rows.append(pair.evaluated(variant, tp, evaluate_row(prep, config, model.num_moe_layers,
                                                                 model.activation, unstated)))
    return rows
