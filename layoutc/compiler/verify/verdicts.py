"""Verdicts of `layoutc verify` and the solver options they depend on (no z3 here).

`layoutc/compiler/verify/properties.py` computes them; `layoutc/compiler/verify/cache.py` stores and reloads
them; `layoutc/compiler/verify/report.py` renders them. Keeping these types free of z3
lets a fully cached run skip importing the solver. Schema: docs/verification.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from layoutc.compiler.diagnostics import Span

if TYPE_CHECKING:
    from layoutc.compiler.evaluate import Value

Status = Literal["proved", "counterexample", "inconclusive", "vacuous", "info"]

PROPERTIES: tuple[tuple[str, str], ...] = (
    ("vacuity", "the contract admits at least one configuration"),
    ("alignment", "every kernel divisibility rule holds on the padded sizes"),
    ("placement", "the kernel finds every logical element at its own role and index"),
    ("roundtrip", "pad is injective into the padded tensor and unpad inverts it"),
    ("inertness", "every padded lane adds exactly 0 to the layer output"),
    ("groups", "groups and packed elements stay whole and never straddle the pad boundary"),
    ("kernel-arguments", "pad counts passed to the kernel describe padding that really exists"),
    ("coverage", "over all ranks, every element of the full checkpoint is read by exactly one rank"),
    ("admission", "no admitted configuration breaks a kernel rule or a layout assumption"),
    ("waste", "worst-case pad fraction over the domain (informational)"),
)
PROPERTY_IDS = tuple(p for p, _ in PROPERTIES)


@dataclass(frozen=True)
class Options:
    timeout_ms: int = 2000
    rlimit: int = 20_000_000
    quick_rlimit: int = 300_000
    max_cases: int = 512
    budget_s: float = 8.0  # wall-time budget per contract; past it every query is inconclusive
    seed: int = 0
    minimize: bool = True


@dataclass(frozen=True)
class Counterexample:
    config: dict[str, Value]
    derived: dict[str, Value]
    message: str
    where: str
    picture: tuple[str, ...] = ()
    rule: str = ""  # the obligation that broke (stable: corpus expectations pin it)

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config, "derived": self.derived, "message": self.message,
                "where": self.where, "picture": list(self.picture)}


@dataclass(frozen=True)
class Verdict:
    property: str
    status: Status
    detail: str
    seconds: float
    queries: int
    span: Span
    counterexample: Counterexample | None = None
    warnings: tuple[str, ...] = ()
