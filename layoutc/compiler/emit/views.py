"""The typed view model of a generated module: what `templates/module.py.j2` interpolates.

Every field is text the emitter (render.py) already wrote as ruff formats it (pyfmt.py):
a name, a literal, or the lines of one construct. The template only loops and prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    """One tensor: the body of `_<name>_axes(plan)`, its `Row`, the call that makes its
    functions, the module names they are bound to and its `LAYOUT` entry."""

    name: str
    table: list[str]
    row: list[str]
    functions: str
    binds: list[str]
    entry: str


@dataclass(frozen=True)
class KernelArgView:
    """One `kernel_args` entry's docstring lines."""

    doc: list[str]


@dataclass(frozen=True)
class GlueView:
    """The glue section: the glue module, its views and ops, `_config`'s fields, the kernel
    functions' call and `fused_moe`'s keywords and body."""

    module: str
    summary: str
    views: str
    activation: str
    ops: str
    reexports: list[str]
    num_experts: str
    hidden_size: str
    intermediate_padded: str
    dtype: str
    shapes: list[tuple[str, str]]
    args: list[str]
    keywords: list[str]
    biases: bool
    kernel: list[str]
    fused_body: list[str]


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
    module_line: str
    ep_lines: list[str]
    ep: dict[str, Any] | None
    kernel_args: list[KernelArgView]
    kernel_args_return: list[str]
    tensors: list[TensorView]
    glue: GlueView | None
    shard_count: str
    models_lines: list[str]
    uses_math: bool
