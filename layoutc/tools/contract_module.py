"""The one place the tools look a generated contract module's functions up by a built name.

A generated module (``layoutc_generated.<contract>``, written by ``layoutc compile``) has,
for each tensor ``<t>`` its contract declares (``w13``, ``w2``, ``w13_bias``, ...):
``<t>_shapes(plan)``, ``pad_<t>``, ``unpad_<t>``, ``shard_<t>``, ``alloc_<t>``, ``load_<t>``
and the private ``_<t>_axes(plan)``; and the private ``_config(plan)``, the kernel
configuration ``prepack_padded`` records. The tools build those names here and nowhere
else, so that a typed interface exported by the generated module can replace these
lookups in one edit. Whole-module names (``plan``, ``prepack``, ``fused_moe``,
``CONTRACT``, ``LayoutContractError``) are plain attributes and are read directly.

Only the standard library is imported: the generated module itself is imported by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, Literal

__all__ = [
    "GENERATED_PACKAGE",
    "MissingFunctionError",
    "TensorFunction",
    "find_tensor_function",
    "import_contract_module",
    "kernel_config",
    "layout_runtime",
    "module_path",
    "tensor_function",
]

GENERATED_PACKAGE = "layoutc_generated"

#: What a per-tensor function does: ``shapes`` (logical, padded), ``axes`` (the layout of
#: each dim, private), ``pad``/``unpad``, ``shard`` (one rank's rows of a full tensor),
#: ``alloc``/``load`` (a rank's padded parameter, filled from a checkpoint slice).
TensorFunction = Literal["shapes", "axes", "pad", "unpad", "shard", "alloc", "load"]


class MissingFunctionError(AttributeError):
    """A generated module lacks a per-tensor function (compiled by an older layoutc, or the
    contract does not declare the tensor). Attributes: ``module``, ``name``."""

    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"contract module {module} has no {name}()")
        self.module = module
        self.name = name


def module_path(module_name: str) -> str:
    """``layoutc_generated.<module_name>``, or ``module_name`` itself when it is dotted."""
    return module_name if "." in module_name else f"{GENERATED_PACKAGE}.{module_name}"


def import_contract_module(module_name: str) -> ModuleType:
    """Import the generated module :func:`module_path` names; raises ImportError as importlib does."""
    return importlib.import_module(module_path(module_name))


def function_name(kind: TensorFunction, tensor: str) -> str:
    """The generated name of ``kind`` for ``tensor``: ``pad_w13``, ``w13_shapes``, ``_w13_axes``."""
    if kind == "shapes":
        return f"{tensor}_shapes"
    if kind == "axes":
        return f"_{tensor}_axes"
    return f"{kind}_{tensor}"


def find_tensor_function(mod: ModuleType, kind: TensorFunction, tensor: str) -> Callable[..., Any] | None:
    """``mod``'s ``kind`` function of ``tensor``, or None when the module has none."""
    fn = getattr(mod, function_name(kind, tensor), None)
    return fn if callable(fn) else None


def tensor_function(mod: ModuleType, kind: TensorFunction, tensor: str) -> Callable[..., Any]:
    """``mod``'s ``kind`` function of ``tensor``; raises :class:`MissingFunctionError` when absent."""
    fn = find_tensor_function(mod, kind, tensor)
    if fn is None:
        raise MissingFunctionError(mod.__name__, function_name(kind, tensor))
    return fn


def kernel_config(mod: ModuleType, plan: Any) -> Any:
    """The kernel configuration of ``plan`` as ``prepack_padded`` records it (``_config``, private:
    what a packed weight assembled outside ``prepack_padded`` must carry)."""
    return mod._config(plan)


def layout_runtime(mod: ModuleType) -> ModuleType:
    """The ``_runtime.layout`` module of the package ``mod`` was generated into (the code the
    module's axes come from: ``copies``, ``fills``)."""
    return importlib.import_module(f"{mod.__package__}._runtime.layout")
