"""`layoutc kit CONTRACT --path DRIVER --out FILE`: write one self-contained pytest module.

The kit = the literals computed here (the configurations z3 picked over the contract's
parameters, inside the driver's SCOPE; the engine, its releases and targets) + the text of
`base.py` + the text of the driver's shared helpers + the driver's text. It imports torch,
pytest, the engine and the generated module, never layoutc. Written atomically.

A driver names the engine objects it drives (`MODELS`, with `ENGINE`; `SERVES`: checkpoint formats
the contract's `route` lines must also serve) and drives the contracts whose `models` lines name
every one of them (:func:`drives`): no driver names a contract.

Errors are `KitError(code, message)`: LR180 (no such driver, or the driver does not drive this
contract), LR181 (the contract does not load or check), LR182 (the output cannot be
written), LR183 (no padded and no refused configuration: the kit would see no pad bug), LR184 (the
contract has no `models` line for the driver's engine: it does not say which releases it models).
"""

from __future__ import annotations

import importlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layoutc import __version__
from layoutc.tools.kit import configs

HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "drivers"


class KitError(Exception):
    """A kit that cannot be written: `code` is its LR code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Driver:
    """One engine path a kit can drive (a module of layoutc/tools/kit/drivers/)."""

    name: str
    models: tuple[str, ...]
    engine: str
    scope: dict[str, tuple[Any, ...]]
    shared: tuple[str, ...]
    doc: str
    serves: tuple[str, ...] = ()

    def drives(self, models: Any, formats: Any) -> bool:
        """Whether the driver drives a contract with these `models` lines ((engine, target) pairs) and
        these `route` formats: one line of ENGINE names each of MODELS, and the routes serve SERVES."""
        named = {target for engine, target in models if engine == self.engine}
        return bool(self.models) and set(self.models) <= named and set(self.serves) <= set(formats)

    def what(self) -> str:
        """What the driver drives, in words (LR180's message)."""
        serves = f" and serve {', '.join(self.serves)}" if self.serves else ""
        return f"the contracts whose `models {self.engine}` lines name {', '.join(self.models)}{serves}"


def driven(driver: Driver, package: str | None = None) -> tuple[str, ...]:
    """The generated contract modules (names, sorted) `driver` drives, read from each module's
    `LAYOUT.models` and `LAYOUT.routes` (layoutc.runtime.models: torch only)."""
    from layoutc.runtime.models import contract_modules

    out = []
    for name in contract_modules(package):
        layout = getattr(importlib.import_module(name), "LAYOUT", None)
        models = [(m.engine, m.target) for m in getattr(layout, "models", ())]
        formats = {f for r in getattr(layout, "routes", ()) for f in r.formats}
        if driver.drives(models, formats):
            out.append(name.rpartition(".")[2])
    return tuple(out)


def drivers() -> dict[str, Driver]:
    """Every driver by name, read from its module's literals."""
    out = {}
    for path in sorted(DRIVERS.glob("*.py")):
        if path.stem.startswith("_") or path.stem.endswith("_common"):
            continue
        mod = importlib.import_module(f"layoutc.tools.kit.drivers.{path.stem}")
        out[path.stem] = Driver(path.stem, tuple(mod.MODELS), mod.ENGINE,
                                dict(getattr(mod, "SCOPE", {})), tuple(getattr(mod, "SHARED", ())),
                                (mod.__doc__ or "").strip(), tuple(getattr(mod, "SERVES", ())))
    return out


def _body(path: Path) -> str:
    """A source file's text after its docstring and `from __future__` line (the kit has one of each)."""
    text = path.read_text()
    import ast

    tree = ast.parse(text)
    start = 0
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(getattr(tree.body[0], "value", None),
                                                                         ast.Constant):
        start = tree.body[0].end_lineno or 0
    lines = text.splitlines()[start:]
    kept = [line for line in lines if line.strip() != "from __future__ import annotations"]
    return f"# ---- from layoutc/tools/kit/{path.relative_to(HERE)} " + "-" * 20 + "\n" + "\n".join(kept).strip() + "\n"


def _literal(items: list[tuple[tuple[str, ...], dict[str, Any]]]) -> str:
    """One configuration per entry: its labels, then its parameters on one line."""
    return "[\n" + "".join(f"    ({labels!r},\n     {params!r}),\n" for labels, params in items) + "]"


def _scoped(picks: configs.Picks) -> str:
    lines = [f"#   {label}" for label in picks.empty] or ["#   (none)"]
    unknown = [f"#   {label}" for label in picks.unknown] or ["#   (none)"]
    return ("# Goals no configuration in the driver's scope meets (unsat: the class is empty there):\n"
            + "\n".join(lines) + "\n# Goals the solver could not decide (unknown: never a configuration):\n"
            + "\n".join(unknown) + "\n")


def render(contract_path: str, driver_name: str, generated: str | None = None) -> str:
    """The kit's text for `contract_path` driven by `driver_name`."""
    from layoutc.compiler import source

    table = drivers()
    if driver_name not in table:
        raise KitError("LR180", f"no kit driver {driver_name!r}; drivers: {', '.join(sorted(table))}")
    driver = table[driver_name]
    contract, diags, _ = source.load(contract_path)
    if contract is None:
        first = next((str(d.message) for d in diags), "it does not load")
        raise KitError("LR181", f"{contract_path}: the contract does not load or check ({first})")
    releases = tuple(dict.fromkeys(r for m in contract.models if m.engine == driver.engine for r in m.releases))
    if not releases:
        raise KitError("LR184", f"{contract.name} has no `models {driver.engine}` line: the contract does not say "
                                f"which {driver.engine} releases it models, so no kit can hold {driver.engine} to it")
    if not driver.drives([(m.engine, m.target) for m in contract.models],
                         {f for r in contract.routes for f in r.formats}):
        raise KitError("LR180", f"driver {driver_name} drives {driver.what()}; {contract.name} is not one of them")
    for name in driver.scope:
        if name not in {p.name for p in contract.params}:
            raise KitError("LR180", f"driver {driver_name} scopes parameter {name!r}, which {contract.name} lacks")
    generated = generated or f"layoutc_generated.{contract.name}"
    picks = configs.pick(contract, driver.scope)
    pads = any(any(lb.startswith("unaligned") or lb.endswith(", padded") for lb in p.labels) for p in picks.admitted)
    if not pads and not picks.refused:
        raise KitError("LR183", f"{contract.name} under driver {driver_name}: no admitted configuration pads "
                                "and none is refused (the kit would see no pad bug)")
    admitted = [(p.labels, p.params) for p in picks.admitted]
    refused = [(p.labels, p.params) for p in picks.refused]
    head = (
        f"# Generated by `layoutc kit {contract_path} --path {driver_name}` (layoutc {__version__}).\n"
        "# DO NOT EDIT: regenerate it. It needs torch, pytest, the engine and the generated module\n"
        f"# {generated} (layoutc compile's output); it never imports layoutc. docs/kits.md says what it checks.\n"
        "# ruff: noqa\n# mypy: ignore-errors\n"
        f'"""Test kit: {driver.engine}\'s own code against layout contract `{contract.name}`.\n\n'
        + driver.doc.replace('"""', "'''") + "\n\n"
        "Configurations were picked by z3 over the contract's parameters when the kit was written:\n"
        "ADMITTED (one per admitted class) must give the contract's bytes, with clean and with\n"
        "poisoned (0xFF) memory; REFUSED (just outside admission, one per rule) must be refused.\n"
        '"""\n\nfrom __future__ import annotations\n\n'
        + _scoped(picks)
        + f"MARKS = {tuple(getattr(importlib.import_module(f'layoutc.tools.kit.drivers.{driver_name}'), 'MARKS', ()))!r}\n"
        + f"CONTRACT_PADS = {pads!r}  # False: no admitted configuration pads; the refusals are the kit's edge\n"
        + f"GENERATED = {generated!r}\nCONTRACT = {contract.name!r}\nENGINE = {driver.engine!r}\n"
        + f"RELEASES = {releases!r}  # the contract's `models {driver.engine}` lines; LAYOUT.models wins at run time\n"
        + "ADMITTED = " + _literal(admitted) + "\nREFUSED = " + _literal(refused) + "\n\n"
    )
    parts = [_body(HERE / "base.py")] + [_body(DRIVERS / f"{s}.py") for s in driver.shared]
    parts.append(_body(DRIVERS / f"{driver_name}.py"))
    return head + "\n\n".join(parts)


def write(contract_path: str, driver_name: str, out: str, generated: str | None = None) -> str:
    """Render and write the kit atomically to `out`; returns the path written."""
    text = render(contract_path, driver_name, generated)
    target = Path(out)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except OSError as exc:
        raise KitError("LR182", f"{out}: the kit cannot be written ({exc.strerror or exc})") from None
    return str(target)
