# Copied by `layoutc compile` from layoutc/runtime/plans.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""Validation of `Plan` objects before any generated function uses one.

A generated module's `Plan` is a frozen dataclass. Before a plan is used it is
re-derived from its parameters with the module's own `plan()` arithmetic and
compared field by field, so a plan built by hand or changed with
`dataclasses.replace` is refused. Each distinct plan is re-derived once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

from .errors import LayoutContractError

P = TypeVar("P", bound=Hashable)
T = TypeVar("T")

_LIMIT = 256  # distinct plans remembered per module before the memo is cleared
# True while a PlanChecker re-derives a plan: `fall_back` logs no warning then (the caller's
# own `plan()` call logged it once); a context variable, so other threads still warn.
_REDERIVING: ContextVar[bool] = ContextVar("layoutc_rederiving", default=False)


def replanner(plan: Callable[..., Any], names: tuple[str, ...]) -> Callable[[Any], Any]:
    """`rederive(p)` for a PlanChecker: `plan(**{name: p.name for name in names})` (names: every
    parameter `plan()` takes, in order), under which `fall_back` stays silent."""

    def rederive(p: Any) -> Any:
        token = _REDERIVING.set(True)
        try:
            return plan(**{name: getattr(p, name) for name in names})
        finally:
            _REDERIVING.reset(token)

    return rederive


def fall_back(module: str, reason: str, fallback: str | None) -> None:
    """Log that `plan()` of the module named `module` falls back (policy `fallback`): one warning
    on the module's logger, none while a PlanChecker re-derives the plan."""
    if not _REDERIVING.get():
        logging.getLogger(module).warning("%s; falling back to %s", reason, fallback)


class PlanChecker(Generic[P]):
    """Re-derives and remembers validated plans of one contract module.

    `rederive(plan)` must rebuild the plan from its parameters (raising
    LayoutContractError when they are not admitted). `memo(key, plan, make)`
    caches per-plan values (shapes, kernel configs) for validated plans only.
    """

    def __init__(self, who: str, plan_type: type, rederive: Callable[[Any], Any]) -> None:
        self.who = who
        self.plan_type = plan_type
        self.rederive = rederive
        self.validated: dict[Any, bool] = {}
        self.seen: dict[int, Any] = {}
        self.cache: dict[tuple[str, int], Any] = {}

    def require(self, plan: object) -> None:
        """Raise LayoutContractError unless `plan` is a genuine, supported plan of this module."""
        if plan is not None and self.seen.get(id(plan)) is plan:  # (None is the .get default)
            return
        if not isinstance(plan, self.plan_type):
            raise LayoutContractError(f"{self.who}: expected a Plan from {self.who}.plan(), "
                                      f"got {type(plan).__name__}")
        if self.validated.get(plan):
            self.seen[id(plan)] = plan
            return
        try:
            fresh = self.rederive(plan)
        except LayoutContractError as exc:
            raise LayoutContractError(f"{self.who}: this Plan was not made by plan(): {exc}") from None
        if fresh != plan:
            raise LayoutContractError(f"{self.who}: this Plan's derived sizes do not match its parameters "
                                      "(was it modified with dataclasses.replace?); make it with plan()")
        if not getattr(plan, "supported", True):
            raise LayoutContractError(f"{self.who}: plan is not supported: {getattr(plan, 'reason', None)}")
        if len(self.validated) > _LIMIT:
            self.validated.clear()
            self.seen.clear()
            self.cache.clear()
        self.validated[plan] = True
        self.seen[id(plan)] = plan

    def memo(self, key: str, plan: object, make: Callable[[], T]) -> T:
        """`make()` once per (key, validated plan object); call `require(plan)` first."""
        slot = (key, id(plan))
        if slot in self.cache:
            cached: T = self.cache[slot]
            return cached
        value = make()
        self.cache[slot] = value
        return value
