"""How the tools reach a generated contract module: import it by name, then read its `LAYOUT`.

A generated module (``layoutc_generated.<contract>``, written by ``layoutc compile``) exports
``LAYOUT``, a ``ModuleLayout`` (layoutc/runtime/interface.py): every tensor the contract
declares, by role (``weight w13``, ``bias w2``, ...), with its functions (``shapes``,
``axis_table``, ``pad``, ``unpad``, ``shard``, ``alloc``, ``load``); the ``plan()`` parameters;
the shard count parameter; and the kernel functions where a glue is bound. The tools look
tensors up there by role, never by a name built from the contract's tensor name, so a
contract that names its tensors otherwise (``tensor gate_up: weight w13``) runs unchanged.
:func:`layout_of` is the one place that checks a module has a LAYOUT this layoutc reads.

Only the standard library is imported: the generated module itself is imported by name.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import cast

from layoutc.runtime.interface import LAYOUT_VERSION, GeneratedModule, KernelEntry, ModuleLayout, TensorEntry

__all__ = [
    "GENERATED_PACKAGE",
    "MissingTensorError",
    "NoKernelError",
    "StaleModuleError",
    "generated",
    "import_contract_module",
    "kernel_of",
    "layout_of",
    "layout_runtime",
    "module_path",
    "tensor_of",
]

GENERATED_PACKAGE = "layoutc_generated"


class StaleModuleError(Exception):
    """A generated module without a LAYOUT this layoutc reads: compiled by an older (or newer)
    layoutc. Attribute: ``module`` (its dotted name)."""

    def __init__(self, module: str, message: str) -> None:
        super().__init__(message)
        self.module = module


class MissingTensorError(LookupError):
    """The module's contract declares no tensor of the role a tool needs (e.g. ``bias w13`` for
    a checkpoint with expert biases). Attributes: ``contract``, ``role``."""

    def __init__(self, contract: str, role: str, why: str) -> None:
        super().__init__(f"contract {contract} declares no `{role}` tensor{why}")
        self.contract = contract
        self.role = role


class NoKernelError(LookupError):
    """The module's contract binds no glue, so it has no kernel to prepack for or to run.
    Attribute: ``contract``."""

    def __init__(self, contract: str) -> None:
        super().__init__(f"contract {contract} binds no glue: it has no kernel to run "
                         "(add a `glue KIND { ... }` block, or use a contract that has one)")
        self.contract = contract


def module_path(module_name: str) -> str:
    """``layoutc_generated.<module_name>``, or ``module_name`` itself when it is dotted."""
    return module_name if "." in module_name else f"{GENERATED_PACKAGE}.{module_name}"


def import_contract_module(module_name: str) -> ModuleType:
    """Import the generated module :func:`module_path` names; raises ImportError as importlib does."""
    return importlib.import_module(module_path(module_name))


def layout_of(mod: object) -> ModuleLayout:
    """``mod.LAYOUT``, the generated module's typed interface.

    The module's LAYOUT is an instance of its own package's copy of ``ModuleLayout``
    (``<package>._runtime.interface``), the same code as ``layoutc.runtime.interface`` when
    its ``version`` is this layoutc's ``LAYOUT_VERSION``. Raises :class:`StaleModuleError`
    when the module has no LAYOUT (compiled by an older layoutc) or another version.
    """
    name = str(getattr(mod, "__name__", type(mod).__name__))
    layout = getattr(mod, "LAYOUT", None)
    if layout is None:
        raise StaleModuleError(name, f"contract module {name} was compiled by an older layoutc (it exports "
                                     "no LAYOUT): recompile it with `layoutc compile`")
    version = getattr(layout, "version", None)
    if version != LAYOUT_VERSION:
        raise StaleModuleError(name, f"contract module {name} exports a LAYOUT of version {version!r}, but this "
                                     f"layoutc reads version {LAYOUT_VERSION}: recompile it with `layoutc compile`")
    return cast(ModuleLayout, layout)


def generated(mod: object) -> GeneratedModule:
    """``mod`` typed as a generated module, once :func:`layout_of` accepts its LAYOUT (raises as it)."""
    layout_of(mod)
    return cast(GeneratedModule, mod)


def tensor_of(layout: ModuleLayout, kind: str, projection: str, why: str = "") -> TensorEntry:
    """The tensor of role ``kind projection``; raises :class:`MissingTensorError` (its message
    ends with ``why``) when the contract declares none."""
    found = layout.tensor(kind, projection)
    if found is None:
        raise MissingTensorError(layout.contract, f"{kind} {projection}", why)
    return found


def kernel_of(layout: ModuleLayout) -> KernelEntry:
    """The module's kernel functions; raises :class:`NoKernelError` when its contract binds no glue."""
    if layout.kernel is None:
        raise NoKernelError(layout.contract)
    return layout.kernel


def layout_runtime(mod: ModuleType) -> ModuleType:
    """The ``_runtime.layout`` module of the package ``mod`` was generated into (the code the
    module's axes come from: ``copies``, ``fills``)."""
    return importlib.import_module(f"{mod.__package__}._runtime.layout")
