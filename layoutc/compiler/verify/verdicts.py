"""Verdicts of `layoutc verify` and the solver options they depend on (no z3 here).

The properties (layoutc/compiler/verify/properties/) compute them; the driver
(layoutc/compiler/verify/driver.py, through entries.py) stores and reloads them;
layoutc/compiler/verify/report.py renders them. Keeping these types free of z3 lets a
fully cached run skip importing the solver. Schema: docs/verification.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from layoutc.compiler.diagnostics import Span

if TYPE_CHECKING:
    from layoutc.compiler.evaluate import Value

Status = Literal["proved", "counterexample", "inconclusive", "vacuous", "info"]

STATUSES: tuple[Status, ...] = ("proved", "counterexample", "inconclusive", "vacuous", "info")


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


class Named(Protocol):
    """What a report needs of a contract: its name (an `ir.Contract`, or the driver's
    `CachedContract` when the verdicts came from the cache and nothing was parsed)."""

    @property
    def name(self) -> str: ...


Result = tuple[str, Named, list[Verdict]]  # (path, contract, one verdict per property id)
