"""Which generated contract a tool runs, read from the contracts' own `route` lines.

A contract states the checkpoints a tool picks it for (`route run {"unquantized"}`,
`route reference {"fp8_block"} rank 2`: docs/language.md, "Routes"); its generated module
carries the lines in `LAYOUT.routes`, and ``layoutc.runtime.models.routed`` finds them at run
time (torch only). The tools keep no table of contract names: adding a kernel route is writing
its contract (docs/architecture.md, "Add a kernel route"), and `tests/tools/test_no_contract_names.py`
fails when a contract's name appears as a string in `layoutc/tools/`.

RunError LR125 when two generated modules claim one format on one route at one rank (a package
compiled from files checked apart: `layoutc check contracts/` says LC241), LR126 when `run` needs
a route no module declares.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from layoutc.tools.contract_module import GENERATED_PACKAGE
from layoutc.tools.runplan import RunError


def route_contracts(route: str, fmt: str) -> tuple[str, ...]:
    """The generated contract modules (names in GENERATED_PACKAGE, as `--contract` takes them) whose
    `route` lines serve checkpoint format `fmt` (interface.CHECKPOINT_FORMATS) on `route` ("run",
    "reference", "audit"), lowest rank first; () when none does. RunError LR125 on a conflict."""
    from layoutc.runtime.models import RouteConflictError, routed

    try:
        found = routed(route, fmt, package=GENERATED_PACKAGE)
    except RouteConflictError as exc:
        raise RunError("LR125", str(exc).removeprefix("LR125: ")) from None
    return tuple(r.module.rpartition(".")[2] for r in found)


def run_contract(fmt: str = "unquantized") -> str:
    """The contract `layoutc run` runs a checkpoint of format `fmt` with when no `--contract` is
    given: the first whose `route run` serves it. RunError LR126 when none does, LR125 on a conflict."""
    found = route_contracts("run", fmt)
    if not found:
        raise RunError(
            "LR126",
            f'no generated contract in {GENERATED_PACKAGE} declares `route run {{"{fmt}"}}`: '
            'pass --contract, or compile a contract that serves it (docs/language.md, "Routes")',
        )
    return found[0]


def contracts_where(holds: Callable[[ModuleType], Any]) -> tuple[str, ...]:
    """The generated contract modules (names, sorted) for which `holds(module)` is true: a tool's
    suggestion read from what each module's `LAYOUT` declares, never from a list of names."""
    from layoutc.runtime.models import contract_modules

    out: list[str] = []
    for name in contract_modules(GENERATED_PACKAGE):
        if holds(importlib.import_module(name)):
            out.append(name.rpartition(".")[2])
    return tuple(out)
