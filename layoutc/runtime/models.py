"""What the generated contract modules model: query their `models` declarations at run time.

Each contract states the engine object it stands for, and the releases, in `models` lines
(docs/language.md, "What a contract models"); its generated module carries them as
``LAYOUT.models`` (``interface.ModelsEntry``). A tool picks a contract by asking here which
modules model an engine's class or function in a release, never by a table of contract names:

* :func:`contract_modules`: every generated contract module of the package (found by
  ``pkgutil``, so a vendored package that holds a few modules answers for those);
* :func:`declarations`: every `models` line of every module, as :class:`Declared`;
* :func:`modelling`: the ones that model an engine (and a target, a release, a parameter dict);
* :func:`releases`: the releases the contracts (or one contract) model for an engine;
* :func:`is_modelled`: whether some contract models a release of an engine;
* :func:`target_of`: the "module:Qualified.name" target of a class or function;
* :func:`routed`: the modules whose `route` lines serve a checkpoint format on a route (`run`,
  `reference`, `audit`), in rank order; :class:`RouteConflictError` (LR125) when two modules
  claim one format on one ranked route at one rank.

Standard library only; importing a contract module imports torch (and nothing else: no lark,
no z3). The package is ``layoutc_generated`` where layoutc imports this module, and the
package this copy sits in where it is a generated package's ``_runtime/models.py``.
"""

from __future__ import annotations

import importlib
import itertools
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .interface import RANKED_ROUTES, ModelsEntry, RouteEntry, release_key

__all__ = [
    "DEFAULT_PACKAGE",
    "Declared",
    "RouteConflictError",
    "Routed",
    "contract_modules",
    "declarations",
    "is_modelled",
    "modelling",
    "releases",
    "routed",
    "target_of",
]

# `layoutc.runtime.models` -> layoutc_generated; `<pkg>._runtime.models` -> <pkg>.
_OWNER = __name__.rpartition("._runtime.")[0] if "._runtime." in __name__ else ""
DEFAULT_PACKAGE = _OWNER or "layoutc_generated"


@dataclass(frozen=True)
class Declared:
    """One `models` line of one generated contract module.

    module: the module's dotted name (`layoutc_generated.vllm_cpu_int8_moe`); contract: its
    contract's name; entry: the line (engine, releases, target, when, contract_line);
    source_file: the contract file, so `where` can point at the line.
    """

    module: str
    contract: str
    source_file: str
    entry: ModelsEntry

    @property
    def where(self) -> str:
        """`contracts/<c>.moe:<line>` of the `models` line."""
        return f"{self.source_file}:{self.entry.contract_line}"


def target_of(obj: Any) -> str:
    """The "module:Qualified.name" a `models` line names `obj` (a class or function) by: where it
    is defined (`__module__`, `__qualname__`). Raises TypeError for an object without them."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise TypeError(f"{obj!r} has no __module__ and __qualname__: pass a class or a function")
    return f"{module}:{qualname}"


def contract_modules(package: str | None = None) -> tuple[str, ...]:
    """The dotted names of the generated contract modules in `package` (default
    DEFAULT_PACKAGE), sorted; modules whose name starts with `_` (the runtime) are not contracts.
    Raises ImportError when the package cannot be imported."""
    pkg = importlib.import_module(package or DEFAULT_PACKAGE)
    paths = getattr(pkg, "__path__", None)
    if paths is None:
        raise ImportError(f"{pkg.__name__} is a module, not a package of generated contract modules")
    found = (f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(paths)
             if not m.ispkg and not m.name.startswith("_"))
    return tuple(sorted(found))


def declarations(package: str | None = None) -> tuple[Declared, ...]:
    """Every `models` line of every contract module in `package`, by module then line. A module
    without a LAYOUT, or with a LAYOUT that carries no `models` (an older layoutc), declares none.
    Raises what importing a module raises (ImportError; torch must be installed)."""
    out: list[Declared] = []
    for name in contract_modules(package):
        layout = getattr(importlib.import_module(name), "LAYOUT", None)
        for entry in getattr(layout, "models", ()):
            out.append(Declared(name, str(getattr(layout, "contract", name)),
                                str(getattr(layout, "source_file", "")), entry))
    return tuple(out)


def modelling(engine: str, target: Any = None, release: str | None = None, *,
              params: Mapping[str, Any] | None = None, package: str | None = None) -> tuple[Declared, ...]:
    """The `models` lines of `engine` (e.g. "vllm") in `package`, narrowed to:

    target: a "module:Qualified.name" string, or the class or function itself (:func:`target_of`);
    release: a release the line names ("0.32.0"; a local part, "0.32.0+cpu", is ignored);
    params: plan() parameters under which the line's `when` holds (a line without `when` always
    does). Raises interface.ConditionError when `params` lacks a parameter a `when` reads.
    """
    wanted = None if target is None else target if isinstance(target, str) else target_of(target)
    out: list[Declared] = []
    for d in declarations(package):
        e = d.entry
        if e.engine != engine or (wanted is not None and e.target != wanted):
            continue
        if release is not None and not e.models_release(release):
            continue
        if params is not None and not e.applies(params):
            continue
        out.append(d)
    return tuple(out)


def releases(engine: str, contract: str | None = None, *, package: str | None = None) -> tuple[str, ...]:
    """Every release of `engine` the contracts model (only `contract`'s, by contract or module
    name, when given), sorted by version (interface.release_key)."""
    found = {r for d in declarations(package) if d.entry.engine == engine
             and (contract is None or contract in (d.contract, d.module, d.module.rpartition(".")[2]))
             for r in d.entry.releases}
    return tuple(sorted(found, key=release_key))


def is_modelled(engine: str, release: str, *, package: str | None = None) -> bool:
    """Whether some contract in `package` models `release` of `engine` (a local part is ignored)."""
    return bool(modelling(engine, release=release, package=package))


@dataclass(frozen=True)
class Routed:
    """One `route` line of one generated contract module: module (dotted name), contract (its
    name), source_file (the contract file), entry (route, formats, rank, contract_line)."""

    module: str
    contract: str
    source_file: str
    entry: RouteEntry

    @property
    def where(self) -> str:
        """`contracts/<c>.moe:<line>` of the `route` line."""
        return f"{self.source_file}:{self.entry.contract_line}"


class RouteConflictError(LookupError):
    """Two generated modules serve one checkpoint format on one ranked route at one rank, so a
    tool could pick either (the compiler's LC241, met at run time in a package compiled from
    files checked apart). The message starts with `LR125`; attribute ``claims``: the two Routed."""

    def __init__(self, route: str, fmt: str, claims: tuple[Routed, Routed]) -> None:
        a, b = claims
        super().__init__(f"LR125: contracts {a.contract} ({a.where}) and {b.contract} ({b.where}) both serve "
                         f"{fmt!r} on route {route} at rank {a.entry.rank}: give one of them another `rank N` "
                         "and recompile")
        self.claims = claims


def routed(route: str, fmt: str, *, package: str | None = None) -> tuple[Routed, ...]:
    """The `route` lines of `package`'s modules that serve checkpoint format `fmt` on `route`
    ("run", "reference", "audit"; interface.ROUTES), lowest rank first (then by module name).
    Raises RouteConflictError when two modules claim `fmt` on a ranked route at one rank, and
    what importing a module raises (ImportError)."""
    found: list[Routed] = []
    for name in contract_modules(package):
        layout = getattr(importlib.import_module(name), "LAYOUT", None)
        for entry in getattr(layout, "routes", ()):
            if entry.serves(route, fmt):
                found.append(Routed(name, str(getattr(layout, "contract", name)),
                                    str(getattr(layout, "source_file", "")), entry))
    found.sort(key=lambda r: (r.entry.rank, r.module))
    if route in RANKED_ROUTES:
        for a, b in itertools.pairwise(found):
            if a.entry.rank == b.entry.rank:
                raise RouteConflictError(route, fmt, (a, b))
    return tuple(found)
