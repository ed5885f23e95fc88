"""The audit's results: one row per (model, contract, variant, tp), the skipped pairs, the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layoutc.compiler.evaluate import Value
from layoutc.tools.audit.params import ModelValue, fmt_value
from layoutc.tools.hfconfig import MoEModelConfig


@dataclass(frozen=True)
class AuditRow:
    """One (model, contract, variant, tp) verdict. Sizes are elements, bytes are bytes.

    ``variant`` holds only the parameters audit enumerated (those the model config
    does not determine); ``params`` holds every contract parameter as evaluated.
    When the model is refused before any variant matters (activation not in the
    contract, a size or ``tp_size`` outside the contract's domain), ``variant`` is
    empty and there is one row per TP degree.
    """

    model: str
    model_name: str
    contract: str
    variant: dict[str, Value] = field(hash=False)
    tp_size: int
    intermediate_size: int
    intermediate_size_per_partition: int | None
    intermediate_size_per_partition_padded: int | None
    admitted: bool
    rule: str | None
    reason: str | None
    pad_fraction: float | None
    extra_bytes: int | None
    extra_flops_pct: float | None
    num_moe_layers: int
    params: dict[str, ModelValue] = field(hash=False, default_factory=dict)
    violations: tuple[tuple[str, str], ...] = ()
    sources: dict[str, str] = field(hash=False, default_factory=dict)

    def variant_text(self) -> str:
        """The enumerated parameters as ``name=value, ...``; ``-`` when there are none."""
        return ", ".join(f"{k}={fmt_value(v)}" for k, v in self.variant.items()) or "-"

    def to_json(self) -> dict[str, Any]:
        """The row as ``layoutc audit --format json`` writes it (fields: docs/audit.md)."""
        return {
            "model": self.model,
            "model_name": self.model_name,
            "contract": self.contract,
            "variant": {k: v for k, v in self.variant.items()},
            "tp_size": self.tp_size,
            "intermediate_size": self.intermediate_size,
            "intermediate_size_per_partition": self.intermediate_size_per_partition,
            "intermediate_size_per_partition_padded": self.intermediate_size_per_partition_padded,
            "admitted": self.admitted,
            "rule": self.rule,
            "reason": self.reason,
            "pad_fraction": None if self.pad_fraction is None else round(self.pad_fraction, 6),
            "extra_bytes": self.extra_bytes,
            "extra_flops_pct": None if self.extra_flops_pct is None else round(self.extra_flops_pct, 4),
            "num_moe_layers": self.num_moe_layers,
            "params": {k: v for k, v in self.params.items()},
            "violations": [{"rule": r, "reason": m} for r, m in self.violations],
            "sources": dict(self.sources),
        }


@dataclass(frozen=True)
class Skipped:
    """A (model, contract) pair with no rows, and why (a checkpoint-format mismatch, usually)."""

    model: str
    model_name: str
    contract: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The pair as ``layoutc audit --format json`` writes it."""
        return {"model": self.model, "model_name": self.model_name, "contract": self.contract,
                "reason": self.reason}


@dataclass(frozen=True)
class AuditReport:
    """Every row and skipped pair of one audit, and the models in the order they were given;
    held: (engine, its releases) that the audited contracts' `models` lines name, in first-seen
    order (the releases sorted as versions): the releases the audit holds each engine to."""

    rows: tuple[AuditRow, ...]
    skipped: tuple[Skipped, ...]
    models: tuple[tuple[str, MoEModelConfig], ...] = ()
    held: tuple[tuple[str, tuple[str, ...]], ...] = ()
