"""The typed view model of a generated module: what `templates/module.py.j2` interpolates.

Every field is text the emitter (render.py) already wrote as ruff formats it (pyfmt.py):
a name, a literal, or the lines of one construct. The template only loops and prints them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParamView:
    """One `plan()` parameter: its check in `_plan`, its annotation, field type and domain."""

    name: str
    check_lines: list[str]
    annotation: str
    field_type: str
    domain: str


@dataclass(frozen=True)
class TensorView:
    """One tensor: the body of `_<name>_axes(plan)`, the call that makes its functions from its
    row (`_MODULE.tensor(...)`) and the lines that bind them to the module's names."""

    name: str
    table: list[str]
    row: list[str]
    binds: list[str]


@dataclass(frozen=True)
class KernelArgView:
    """One `kernel_args` entry's docstring lines."""

    doc: list[str]


@dataclass(frozen=True)
class GlueView:
    """The glue section: the glue module, its summary, the names the module re-exports from it and
    the call that makes the kernel functions (`_MODULE.kernel(...)`)."""

    module: str
    summary: str
    reexports: list[str]
    kernel: list[str]


@dataclass(frozen=True)
class ModuleView:
    """A whole module, in the template's order."""

    name: str
    file: str
    file_literal: str
    sha256: str
    version_line: str
    proved_lines: list[str]
    sources_doc: list[str]
    imports: list[str]
    all_names: list[str]
    sources: list[str]
    proved_lines_code: list[str]
    policy: str
    fallback: str
    values_lines: list[str]
    params_table: list[str]
    checker: list[str]
    plan_fields: list[str]
    params: list[ParamView]
    plan_body: list[str]
    module_lines: list[str]
    ep_lines: list[str]
    kernel_args: list[KernelArgView]
    kernel_args_return: list[str]
    tensors: list[TensorView]
    glue: GlueView | None
    layout_lines: list[str]
    uses_math: bool
