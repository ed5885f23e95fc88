"""The registry of kernel glues, read from the runtime's source without importing torch.

Each `layoutc/runtime/glue/<module>.py` declares `INTERFACE = GlueInterface(...)`
with literals only. This module parses that assignment with Python's `ast` and
builds the same frozen dataclasses from `layoutc.runtime.interface` (which needs
no torch), so the checker can hold contracts to the interface of the code that
really runs. A test imports each glue and compares.
"""

from __future__ import annotations

import ast as pyast
import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

from layoutc.compiler.gluefiles import interface_files
from layoutc.runtime import interface as iface

_CONSTRUCTORS: dict[str, Any] = {"GlueInterface": iface.GlueInterface, "TensorSlot": iface.TensorSlot,
                                 "Activation": iface.Activation}
_NAMES: dict[str, Any] = {"WEIGHTS": iface.WEIGHTS, "BIASES": iface.BIASES,
                          "SWIGLUOAI_CONSTANTS": iface.SWIGLUOAI_CONSTANTS,
                          "GATED_HALVES": iface.GATED_HALVES, "SWIGLUOAI_PAIRS": iface.SWIGLUOAI_PAIRS}


@dataclass(frozen=True)
class Glue:
    """One registered glue: its runtime module name (`glue/<module>.py`), interface and
    the names a generated module re-exports from it (`PUBLIC`)."""

    module: str
    interface: iface.GlueInterface
    public: tuple[str, ...] = ()


class InterfaceError(Exception):
    """A glue module's INTERFACE is not a literal declaration this reader understands."""


def _value(node: pyast.expr) -> Any:
    if isinstance(node, pyast.Constant):
        return node.value
    if isinstance(node, pyast.Tuple):
        items: list[Any] = []
        for e in node.elts:
            if isinstance(e, pyast.Starred):
                items.extend(_value(e.value))
            else:
                items.append(_value(e))
        return tuple(items)
    if isinstance(node, pyast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, pyast.BinOp) and isinstance(node.op, pyast.Add):
        left, right = _value(node.left), _value(node.right)
        if isinstance(left, tuple) and isinstance(right, tuple):
            return left + right
    if isinstance(node, pyast.Call) and isinstance(node.func, pyast.Name) and node.func.id in _CONSTRUCTORS:
        args = [_value(a) for a in node.args]
        kwargs = {k.arg: _value(k.value) for k in node.keywords if k.arg is not None}
        return _CONSTRUCTORS[node.func.id](*args, **kwargs)
    raise InterfaceError(f"line {node.lineno}: not a literal: {pyast.dump(node)[:80]}")


def _assigned(source: str, name: str) -> Any:
    for stmt in pyast.parse(source).body:
        if isinstance(stmt, pyast.Assign) and any(isinstance(t, pyast.Name) and t.id == name for t in stmt.targets):
            return _value(stmt.value)
    raise InterfaceError(f"no {name} assignment")


def read_interface(source: str) -> iface.GlueInterface:
    """The `INTERFACE = GlueInterface(...)` declared in a glue module's source text."""
    value = _assigned(source, "INTERFACE")
    if not isinstance(value, iface.GlueInterface):
        raise InterfaceError("INTERFACE is not a GlueInterface")
    return value


@functools.cache
def registry() -> dict[str, Glue]:
    """kind -> Glue for every glue module shipped in layoutc/runtime/glue."""
    out: dict[str, Glue] = {}
    for path in interface_files():
        text = path.read_text(encoding="utf-8")
        interface = read_interface(text)
        public = _assigned(text, "PUBLIC")
        out[interface.kind] = Glue(path.name.removesuffix(".py"), interface, tuple(public))
    return out


FOREIGN_PAIRS = ("dropped", "masked", "raw")


def foreign_pairs(contract: Any) -> tuple[str, str]:
    """(mode, who states it) of what an EP rank's kernel is handed for a foreign pair.

    The contract's `foreign raw|masked` if it states one, else its bound glue's declared
    `GlueInterface.foreign_pairs`; a contract that binds no glue runs no kernel ("dropped").
    """
    ep = contract.ep
    if ep is not None and ep.foreign is not None:
        return ep.foreign, f"the contract's `foreign {ep.foreign}`"
    glue = registry().get(contract.glue.kind) if contract.glue is not None else None
    if glue is None:
        return "dropped", "no glue is bound"
    return glue.interface.foreign_pairs, f"glue {glue.interface.kind}'s declared foreign_pairs"


def runtime_files() -> list[tuple[str, str]]:
    """(relative path, text) of every runtime source file, for `layoutc compile` to copy."""
    root = resources.files("layoutc").joinpath("runtime")
    files: list[tuple[str, str]] = []
    for sub in ("", "glue"):
        folder = root.joinpath(sub) if sub else root
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".py"):
                rel = f"{sub}/{entry.name}" if sub else entry.name
                files.append((rel, entry.read_text(encoding="utf-8")))
    return files
