"""Render a checked contract into a standalone Python module (jinja2).

Python prepares a view model of safe strings: identifiers were validated by the
checker, every literal goes through ``repr``, expressions are rendered here.
The template only loops and interpolates (``StrictUndefined``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import textwrap
from importlib import resources
from typing import Any, assert_never

import jinja2

from layoutc import __version__
from layoutc.compiler import glues, ir
from layoutc.compiler.cases import glue_activation
from layoutc.compiler.emit.ep import ep_params, ep_view
from layoutc.compiler.emit.pyfmt import (
    WIDTH,
    _bare,
    _item,
    call,
    literal,
    packed,
    statement,
    wrap_code,
)
from layoutc.compiler.emit.pyfmt import _one_group as _one_group  # re-exported: tests/compiler/test_emit_unit.py
from layoutc.compiler.emit.pyfmt import _split_args as _split_args
from layoutc.compiler.emit.views import GlueView, KernelArgView, ModuleView, ParamView, TensorView
from layoutc.runtime.vocab import DTYPES, Op, OpKind, holds_byte

VERSION_PREFIX = "# layoutc-version: "


@functools.cache
def _env() -> jinja2.Environment:
    loader = jinja2.FunctionLoader(_template_source)
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, autoescape=False,
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)


def _template_source(name: str) -> str:
    return resources.files("layoutc.compiler.emit").joinpath("templates", name).read_text(encoding="utf-8")


# ---- expressions ---------------------------------------------------------------

def python_spelling(op: Op) -> str:
    """How a generated module spells `op`: the Python operator, or the function it calls (the
    runtime's `vocab` helpers through `_p`, layoutc/runtime/params.py, so the generated
    `plan()` computes as the evaluator does). Division and `%` are Python's `//` and `%`,
    which agree with `vocab.floordiv` and `vocab.mod` on every divisor the checker admits
    (positive, LC303). Raises ValueError for a byte format (decode expressions are never
    rendered)."""
    match op:
        case Op.DIV:
            return "//"
        case Op.NEG:
            return "-"
        case Op.ROUND_UP | Op.ROUND_DOWN | Op.CDIV | Op.LCM:
            return f"_p.{op.value}"
        case Op.GCD:
            return "math.gcd"
        case (Op.ADD | Op.SUB | Op.MUL | Op.MOD | Op.EQ | Op.NE | Op.LT | Op.LE | Op.GT | Op.GE | Op.AND
              | Op.OR | Op.NOT | Op.MIN | Op.MAX):
            return op.value
        case Op.E8M0 | Op.E4M3FN | Op.E5M2 | Op.E2M1:
            raise ValueError(f"cannot render the byte format {op.value} in a generated module")
        case _:
            assert_never(op)


def render_expr(e: ir.Expr, prefix: str, code: bool = False) -> str:
    """Python source for `e`; parameters and lets are read as `{prefix}name`. `code`: string
    literals as the generated code writes them (`literal`); otherwise `repr` (docstrings)."""
    lit = literal if code else repr

    def r(x: ir.Expr) -> str:
        return render_expr(x, prefix, code)

    match e:
        case ir.Const():
            return lit(e.value)
        case ir.Ref():
            return f"{prefix}{e.name}"
        case ir.Cond():
            return f"({r(e.then)} if {r(e.cond)} else {r(e.orelse)})"
        case ir.Select():
            subject = r(e.subject)
            if e.default is None and all(isinstance(v, ir.Const) for _, v in e.cases):
                table = ", ".join(f"{lit(m)}: {r(v)}" for m, v in e.cases)
                return f"{{{table}}}[{subject}]"
            out = r(e.default) if e.default is not None else r(e.cases[-1][1])
            cases = e.cases if e.default is not None else e.cases[:-1]
            for member, value in reversed(cases):
                out = f"({r(value)} if {subject} == {lit(member)} else {out})"
            return out
        case ir.Op():
            spelling = python_spelling(e.op)
            args = [r(a) for a in e.args]
            if e.op.arity == 1:
                return f"({spelling} {args[0]})" if e.op is Op.NOT else f"({spelling}{args[0]})"
            if e.op.kind is OpKind.FUNCTION:
                return f"{spelling}({', '.join(args)})"
            return f"({args[0]} {spelling} {args[1]})"
        case ir.AxisSize() | ir.TensorValue() | ir.Code():
            # only in kernel rules and decode expressions, which generated modules never evaluate
            raise ValueError(f"cannot render {type(e).__name__} in a generated module")
        case _:
            assert_never(e)


_NEGATE = {Op.EQ: Op.NE, Op.NE: Op.EQ, Op.LT: Op.GE, Op.LE: Op.GT, Op.GT: Op.LE, Op.GE: Op.LT}


def render_negated(e: ir.Expr, prefix: str, code: bool = False) -> str:
    """Python source for `not e`, with comparisons flipped rather than wrapped in `not`."""
    if isinstance(e, ir.Op) and e.op in _NEGATE:
        left, right = (render_expr(a, prefix, code) for a in e.args)
        return f"({left} {python_spelling(_NEGATE[e.op])} {right})"
    if isinstance(e, ir.Op) and e.op is Op.NOT:
        return render_expr(e.args[0], prefix, code)
    return f"(not {render_expr(e, prefix, code)})"


def _names(e: ir.Expr) -> list[str]:
    seen: list[str] = []
    for node in ir.walk(e):
        if isinstance(node, ir.Ref) and node.name not in seen:
            seen.append(node.name)
    return seen


# ---- view model ----------------------------------------------------------------

def _fill_word(tensor: ir.Tensor, code: int | None = None, members: tuple[str, ...] = ()) -> str:
    """The stored fill code (or `code`, e.g. the tail fill) as the runtime writes it, replicated
    across packed sub-elements.

    A nonzero code that is a byte on some storage the tensor may have (vocab.holds_byte: a
    1-byte float read through a number format; `members`: a dtype parameter's members) is a
    `FormatCode` (runtime/layout.py), which layout.write_code stores through the integer view. Otherwise a
    float storage, or a dtype parameter (its members may be floats), takes a float (the value);
    an integer storage an int; a packed one (always a fixed integer dtype, LC411) the word."""
    value = tensor.fill if code is None else code
    pack = max(a.pack for a in tensor.axes) if tensor.axes else 1
    dtype = DTYPES[tensor.storage.dtype] if isinstance(tensor.storage, ir.FixedStorage) else None
    stored = (dtype.name,) if dtype is not None else members
    if value != 0 and any(holds_byte(m, ir.reads_format(tensor.decode)) for m in stored if m in DTYPES):
        return f"FormatCode({int(value)})"
    if pack == 1:
        return repr(float(value)) if dtype is None or dtype.floating else repr(int(value))
    if dtype is None or dtype.floating:
        raise ValueError(f"{tensor.name}: a packed tensor needs a fixed integer storage (LC411)")
    bits = dtype.bits // pack
    mask = (1 << bits) - 1
    word = 0
    for j in range(pack):
        word |= (value & mask) << (bits * j)
    if dtype.signed and word >= 1 << (dtype.bits - 1):
        word -= 1 << dtype.bits
    return repr(word)


def _axis_args(tensor: ir.Tensor, axis: ir.Axis, has_tp: bool, full: ir.Expr | None = None) -> list[str]:
    """The arguments of `axis(...)` (runtime/wrappers.py) for one axis, by keyword. `full`: a
    block shard's full checkpoint length (values), given to its sharded axes in storage units."""
    pack = axis.pack
    logical = render_expr(axis.logical, "plan.", True)
    padded = render_expr(axis.padded, "plan.", True)
    whole = render_expr(full, "plan.", True) if full is not None else None
    if axis.group_size is not None:
        g = render_expr(axis.group_size, "plan.", True)
        logical = f"_p.groups({logical}, {g})"
        padded = f"_p.groups({padded}, {g})"
        whole = f"_p.groups({whole}, {g})" if whole is not None else None
        sharded = repr(axis.group_size.value != -1) if isinstance(axis.group_size, ir.Const) else f"{g} != -1"
    else:
        sharded = "True"
    if pack > 1:
        logical = f"{logical} // {pack}"
        padded = f"{padded} // {pack}"
        whole = f"{whole} // {pack}" if whole is not None else None
    intermediate = ir.is_intermediate(tensor, axis)
    sharded = sharded if intermediate and has_tp else "False"
    args = [literal(axis.name), f"Word.{axis.layout.name}", f"logical={_bare(logical)}"]
    if padded != logical:
        args.append(f"padded={_bare(padded)}")
    if axis.segments != 1:
        args.append(f"segments={axis.segments}")
    if sharded != "False":
        args.append(f"sharded={sharded}")
    if whole is not None and sharded != "False":
        args.append(f"full={_bare(whole)}")
    return args


def _axis_table(tensor: ir.Tensor, has_tp: bool, full: ir.Expr | None = None) -> list[str]:
    """The body of `_<tensor>_axes(plan)`: one `axis` per dimension, `when` alternatives as if/elif."""
    lines: list[str] = []
    entries: list[str] = []
    for axis in tensor.axes:
        alternatives = [g for g in tensor.guarded if g.axis.name == axis.name]
        if not alternatives:
            entries += call("axis", _axis_args(tensor, axis, has_tp, full), 8, ",")
            continue
        merged = _merged_axis(tensor, axis, alternatives, has_tp, full)
        if merged is not None:
            entries += merged
            continue
        var = f"{axis.name}_axis"
        for k, alt in enumerate(alternatives):
            keyword = "if" if k == 0 else "elif"
            lines += statement(f"{keyword} ", render_expr(alt.guard, "plan.", True), f":  # line {alt.axis.span.line}")
            lines += call(f"{var} = axis", _axis_args(tensor, alt.axis, has_tp, full), 8)
        lines.append("    else:")
        lines += call(f"{var} = axis", _axis_args(tensor, axis, has_tp, full), 8)
        entries.append(f"        {var},")
    if len(entries) == 1 and len(entries[0]) - 4 + len("return (),") <= WIDTH:  # a one-item tuple on one line
        return [*lines, f"    return ({entries[0].strip().removesuffix(',')},)"]
    return [*lines, "    return (", *entries, "    )"]


def _merged_axis(tensor: ir.Tensor, axis: ir.Axis, alternatives: list[ir.GuardedAxis], has_tp: bool,
                 full: ir.Expr | None) -> list[str] | None:
    """One `axis(...)` entry whose word is chosen by the `when` guards (`Word.A if GUARD else
    Word.B`), where the alternatives differ from the unguarded axis in their word only; None
    where they differ otherwise, or a guard is not a plain comparison or the line would not fit."""
    base = _axis_args(tensor, axis, has_tp, full)
    word = base[1]
    for alt in reversed(alternatives):
        args = _axis_args(tensor, alt.axis, has_tp, full)
        if args[:1] + args[2:] != base[:1] + base[2:] or not isinstance(alt.guard, ir.Op) \
                or alt.guard.op.kind is OpKind.FUNCTION or alt.guard.op.arity == 1:
            return None
        word = f"{args[1]} if {_bare(render_expr(alt.guard, 'plan.', True))} else {word}"
    lines = call("axis", [base[0], word, *base[2:]], 8, ",")
    at = 0 if len(lines) == 1 else 2  # the word's line
    lines[at] += "  # line" + ("s " if len(alternatives) > 1 else " ") + ", ".join(
        str(alt.axis.span.line) for alt in alternatives)
    return lines if all(len(line) <= WIDTH for line in lines) else None


def _shape_doc(contract: ir.Contract, tensor: ir.Tensor, which: str) -> str:
    parts = []
    for axis in tensor.axes:
        size = axis.logical if which == "logical" else axis.padded
        text = _src(size)
        if axis.group_size is not None:
            text = f"{text} / {_src(axis.group_size)}"
        if axis.segments > 1:
            text = f"{axis.segments} * {text}"
        if axis.pack > 1:
            text = f"{text} / {axis.pack}"
        parts.append(text)
    return "[" + ", ".join(parts) + "]"


def _src(e: ir.Expr) -> str:
    return render_expr(e, "")


def _params(contract: ir.Contract, dtype_params: list[str]) -> list[ParamView]:
    """Each declared parameter: its check in `_plan` (`_check`: its domain is the module's
    `_PARAMS` row), its annotation in `plan()` and its field type in `Plan`."""
    params = []
    for p in contract.params:
        annotation = {"range": "int", "set": "int", "bool": "bool"}.get(p.kind, "str")
        if p.name in dtype_params:
            annotation = "str | torch.dtype"
        field_type = {"range": "int", "set": "int", "bool": "bool"}.get(p.kind, "str")
        if p.default is not None:
            annotation = f"{annotation} = {literal(p.default)}"
        check = "_check.dtype" if p.name in dtype_params else "_check"  # typed `str` for mypy
        params.append(ParamView(p.name, [f"    {p.name} = {check}({literal(p.name)}, {p.name})"],
                                annotation, field_type, _domain_doc(p)))
    return params


def _block_shard_doc(shard: ir.Shard | None) -> str | None:
    """Where the contract declares its block shard, for the shard functions' docstrings."""
    if shard is None or shard.blocks is None:
        return None
    return f"`shard ... in blocks of {_src(shard.blocks)}`, line {shard.span.line}"


def _members(contract: ir.Contract, t: ir.Tensor) -> tuple[str, ...]:
    """The dtypes a tensor stored as a dtype parameter may have (its members); () for a fixed storage."""
    if isinstance(t.storage, ir.ParamStorage):
        return tuple(str(v) for v in contract.param(t.storage.param).values)
    return ()


def _var(t: ir.Tensor) -> str:
    """The module's private name of a tensor (`_W13`: runtime/wrappers.py `Tensor`, its row and functions)."""
    return f"_{t.name.upper()}"


def _tensor_view(contract: ir.Contract, t: ir.Tensor, has_tp: bool) -> TensorView:
    """One tensor: its axis table's body, its row (`_MODULE.tensor(...)`, runtime/wrappers.py) and
    the names its functions are bound to."""
    # a decoded value only where the contract declares it (`fill decoded V`, which the verifier
    # proves at every pad lane); `fill N` on a quantized tensor is a code, not a value
    fill_doc = "left uninitialised" if t.fill_kind == "uninit" else f"stored code {t.fill}" + (
        f" (`fill decoded {t.fill_value}`: decodes to {t.fill_value})" if t.fill_value is not None else "")
    fill = "None" if t.fill_kind == "uninit" else _fill_word(t, members=_members(contract, t))
    dtype = f"torch.{t.storage.dtype}" if isinstance(t.storage, ir.FixedStorage) else literal(str(t.storage))
    roles, roles_doc = _roles_view(t)
    args = [f"name={literal(t.name)}", f"kind={literal(t.kind)}", f"projection={literal(t.projection)}",
            f"line={t.span.line}", f"axis_names={literal(tuple(a.name for a in t.axes))}",
            f"axes=_{t.name}_axes", f"dtype={dtype}", f"fill={fill}",
            f"shape_docs={literal(tuple(_doc_safe(_shape_doc(contract, t, w)) for w in ('logical', 'padded')))}"]
    if _doc_safe(fill_doc) != _read_off_fill(fill):  # else the runtime reads it off `fill` (Row.fill_text)
        args.append(f"fill_doc={literal(_doc_safe(fill_doc))}")
    if roles != "()":
        args.append(f"roles={roles}")
    if roles_doc is not None:  # a `when` alternative orders the roles otherwise: the runtime cannot read them off
        args.append(f"roles_doc={literal(_doc_safe(roles_doc))}")
    if t.optional:
        args.append("optional=True")
    if t.tail_fill is not None:
        tail_doc = f"stored code {t.tail_fill}" + (
            " (resolved from `tail fill decoded`)" if t.tail_fill_kind == "decoded" else "")
        args += [f"tail_fill={_fill_word(t, t.tail_fill, _members(contract, t))}",
                 f"tail_doc={literal(_doc_safe(tail_doc))}"]
    n = t.name
    names = [f"{n}_shapes", f"pad_{n}", f"unpad_{n}"]
    if has_tp:
        names += [f"{n}_full_shape", f"shard_{n}"]
    names += [f"alloc_{n}", f"load_{n}"]
    var = _var(t)
    return TensorView(
        name=n,
        table=_axis_table(t, has_tp, contract.block_shard.full if contract.block_shard else None),
        row=call(f"{var} = _MODULE.tensor", args, 0),
        binds=_binds(names, var),
    )


def _read_off_fill(fill: str) -> str | None:
    """What runtime/wrappers.py `Row.fill_text` says of a row whose `fill` is the literal `fill`
    and that states no fill_doc (None: a fill it does not read, a `FormatCode`)."""
    if fill == "None":
        return "left uninitialised"
    for number in (int, float):
        try:
            return f"stored code {int(number(fill))}"
        except ValueError:
            continue
    return None


def _binds(names: list[str], var: str) -> list[str]:
    """`a, b, c = VAR` binding a tensor's functions (runtime/wrappers.py `Tensor`, in its order) to
    the module's names: on one line where it fits, else in slices (`a, b = VAR[:2]`; one name:
    `c = VAR[2]`) of as many names as fit a line."""
    if len(f"{', '.join(names)} = {var}") <= WIDTH:
        return [f"{', '.join(names)} = {var}"]
    lines: list[str] = []
    start = 0
    while start < len(names):
        end = start + 1
        while end < len(names) and len(f"{', '.join(names[start:end + 1])} = {var}[{start}:{end + 1}]") <= WIDTH:
            end += 1
        if end - start == 1:  # one name: its function by index
            lines.append(f"{names[start]} = {var}[{start}]")
        else:
            lines.append(f"{', '.join(names[start:end])} = {var}[{start or ''}:{end if end < len(names) else ''}]")
        start = end
    return lines


def _roles_view(t: ir.Tensor) -> tuple[str, str | None]:
    """The segment roles of `t`'s segmented axis, as a Python expression (a function of the
    plan where a `when` alternative names them in another order), and, for such a function, the
    docstring phrase (None: the runtime reads it off the roles)."""
    seg = next((a for a in t.axes if a.segments > 1), None)
    if seg is None:
        return "()", None
    expr = literal(tuple(seg.roles))
    conditional = False
    for alt in reversed([g for g in t.guarded if g.axis.name == seg.name]):
        if alt.axis.roles != seg.roles:
            conditional = True
            expr = f"({literal(tuple(alt.axis.roles))} if {render_expr(alt.guard, 'plan.', True)} else {expr})"
    names = ", ".join(f'"{r}"' for r in seg.roles)
    if not conditional:
        return expr, None  # the runtime reads the phrase off the roles (wrappers.Row.roles_text)
    return f"lambda plan: {_bare(expr)}", f"one of {names} (one segment), or None / \"gate_up\" (all)"


def _glue_view(contract: ir.Contract, ep: dict[str, Any] | None) -> GlueView | None:
    """The glue section: `_MODULE.kernel(...)` (runtime/wrappers.py), given what the kernel
    configuration reads of a plan: the activation, the glue's arguments and, under EP, the
    degree's plan field and the rank's experts axis."""
    g = contract.glue
    if g is None:
        return None
    entry = glues.registry()[g.kind]
    interface = entry.interface
    w13, w2 = contract.weight("w13"), contract.weight("w2")
    act = glue_activation(contract)
    activation = render_expr(act, "plan.", True) if act is not None else literal(interface.activations[0].name)
    items = [f"({literal(k)}, {_bare(render_expr(v, 'plan.', True))})" for k, v in g.args if k != "activation"]
    args = ["_glue", _var(w13), _var(w2)]
    biases = [_var(t) for t in contract.tensors if t.kind == "bias"]
    if biases:
        args.append(f"biases=({', '.join(biases)}{',' if len(biases) == 1 else ''})")
    args += [f"activation=lambda plan: {_bare(activation)}",
             f"args=lambda plan: ({', '.join(items)}{',' if len(items) == 1 else ''})"]
    if ep:
        args.append(f"ep=({literal(ep['count'])}, lambda plan: {_bare(ep['axis'])})")
    return GlueView(
        module=entry.module, summary=interface.summary,
        reexports=sorted((n for n in entry.public if n != "load_kernel"), key=_natural),
        kernel=call("_KERNEL = _MODULE.kernel", args, 0),
    )


def _plan_param(p: ir.Param) -> list[str]:
    """`PlanParam(...)` of one contract parameter, at 4 columns."""
    args = [literal(p.name), literal(p.kind)]
    if p.kind == "range":
        args += [f"low={p.low!r}", f"high={p.high!r}"]
    elif len(f"        values={literal(tuple(p.values))},") > WIDTH:
        args.append(f"values={_values_name(p)}")  # a long domain: its own constant (`_values_lines`)
    else:
        args.append(f"values={literal(tuple(p.values))}")
    if p.default is not None:
        args.append(f"default={literal(p.default)}")
    return call("PlanParam", args, 4, ",")


def _values_name(p: ir.Param) -> str:
    return f"_{p.name.upper()}_VALUES"


def _values_lines(contract: ir.Contract) -> list[str]:
    """The domains too long for their `PlanParam` line, each a module constant (`pyfmt.packed`)."""
    lines: list[str] = []
    for p in contract.params:
        if p.kind != "range" and len(f"        values={literal(tuple(p.values))},") > WIDTH:
            lines += packed(f"{_values_name(p)} = (", [literal(v) for v in p.values], ")")
    return lines


def condition_source(e: ir.Expr) -> str:
    """`Condition(...)` source of a `models ... when` condition (runtime/interface.py): data a tool
    evaluates on a parameter dict. The checker admits constants, parameters and operators only."""
    match e:
        case ir.Const():
            return f"Condition.const({literal(e.value)})"
        case ir.Ref():
            return f"Condition.param({literal(e.name)})"
        case ir.Op():
            args = ", ".join(condition_source(a) for a in e.args)
            return f'Condition("{e.op.value}", ({args}{"," if len(e.args) == 1 else ""}))'
        case _:
            raise ValueError(f"a `models ... when` holds a {type(e).__name__} (the checker admits none)")


def _models_lines(contract: ir.Contract) -> list[str]:
    """`ModelsEntry(...)` of each `models` line for the module's LAYOUT (as ruff writes it: one
    field per line). Engines, releases and targets are checked to hold no quote or backslash
    (check/models.py)."""
    lines: list[str] = []
    for m in contract.models:
        args = [literal(m.engine), literal(tuple(m.releases)), literal(m.target)]
        if m.when is not None:
            args.append(f"when={condition_source(m.when)}")
        args.append(f"contract_line={m.span.line}")
        lines += ["        ModelsEntry(", *(line for a in args for line in _item(a, 12)), "        ),"]
    return lines


def _routes_lines(contract: ir.Contract) -> list[str]:
    """`RouteEntry(...)` of each `route` line for the module's LAYOUT (one field per line, as ruff
    writes it). Routes and formats are names from interface.ROUTES / CHECKPOINT_FORMATS (check/routes.py)."""
    lines: list[str] = []
    for r in contract.routes:
        args = [literal(r.route), literal(tuple(r.formats)), f"rank={r.rank}", f"contract_line={r.span.line}"]
        lines += ["        RouteEntry(", *(line for a in args for line in _item(a, 12)), "        ),"]
    return lines


def _natural(name: str) -> tuple[int, list[object]]:
    """ruff's isort-style order for `__all__`: CONSTANTS, then Classes, then functions; digits by value."""
    category = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return category, [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _exports(contract: ir.Contract, glue: GlueView | None, has_tp: bool) -> list[str]:
    names = ["CONTRACT", "LAYOUT", "KernelUnavailableError", "LayoutContractError", "Plan", "plan"]
    if contract.kernel is not None and contract.kernel.args:
        names.append("kernel_args")
    for t in contract.tensors:
        names += [f"{t.name}_shapes", f"pad_{t.name}", f"unpad_{t.name}"] + (
            [f"{t.name}_full_shape", f"shard_{t.name}"] if has_tp else [])
        names += [f"alloc_{t.name}", f"load_{t.name}"]
    if contract.ep is not None:
        names.append("local_experts")
    if glue is not None:
        names += ["INTERFACE", "OPS", "PackedWeight", "fused_moe", "load_kernel", "prepack", "prepack_padded", *glue.reexports]
    return packed("__all__ = [", [f'"{n}"' for n in sorted(names, key=_natural)], "]")


def _imports(contract: ir.Contract, glue: GlueView | None, format_code: bool) -> list[str]:
    """The module's runtime imports, in ruff's isort order."""
    lines = []
    if contract.ep is not None:
        lines.append("from ._runtime import experts as _ep")
    lines += ["from ._runtime import params as _p", "from ._runtime import wrappers as _w",
              "from ._runtime.algebra import Word",
              "from ._runtime.errors import KernelUnavailableError, LayoutContractError"]
    if glue is not None:
        lines.append(f"from ._runtime.glue import {glue.module} as _glue")
        if glue.reexports:
            lines.append(f"from ._runtime.glue.{glue.module} import {', '.join(glue.reexports)}")
    names = ["PlanParam"]
    names += ["ModelsEntry"] if contract.models else []
    names += ["Condition"] if any(m.when is not None for m in contract.models) else []
    names += ["RouteEntry"] if contract.routes else []
    lines += _import_lines("._runtime.interface", sorted(names, key=_natural))
    lines.append("from ._runtime.layout import Axis" + (", FormatCode" if format_code else ""))
    if glue is not None:
        lines.append("from ._runtime.packed import PackedWeight")
    lines.append("from ._runtime.wrappers import axis")
    return lines


def _import_lines(module: str, names: list[str]) -> list[str]:
    """`from module import names` on one line when it fits, else one name per line with a
    trailing comma (which ruff's isort and formatter keep as written)."""
    line = f"from {module} import {', '.join(names)}"
    return [line] if len(line) <= WIDTH else [f"from {module} import (", *(f"    {n}," for n in names), ")"]


def _rule_lines(rule: ir.Rule | ir.Align, file: str, kind: str) -> list[str]:
    """`if <broken>:` and the refusal of one `require` (raise) or `admit` (the reason)."""
    names = _names(rule.cond)
    values = "{" + ", ".join(f"{literal(n)}: {n}" for n in names) + "}"
    where, message = literal(f"{file}:{rule.span.line}"), literal(rule.message)
    negated = render_negated(rule.cond, "", True)
    if kind == "require":
        return [*statement("if ", negated, ":"), *call("raise _check.refused", [where, message, values], 8)]
    return [*statement("if reason is None and ", negated, ":"),
            *call("reason = _check.not_admitted", [where, message, values], 8)]


def _plan_body(contract: ir.Contract, rel_path: str, params: list[ParamView], ep: dict[str, Any] | None
               ) -> list[str]:
    """The body of `plan()`: the checks of every parameter (`_check`, runtime/params.py `checker`,
    over the module's `_PARAMS`), the derived sizes, the `require` rules (a refusal) and the
    `admit` rules (the reason a plan is not supported). A PlanChecker re-derives a plan by
    calling `plan()` itself (runtime/plans.py `replanner`), under which `_p.fall_back` is silent."""
    names = [p.name for p in params]
    body: list[str] = []
    for p in params:
        body += p.check_lines
    if ep is not None:
        body.append(ep["check_line"])
    for let in contract.lets:
        body += statement(f"{let.name} = ", render_expr(let.value, "", True))
    for r in contract.requires:
        body += _rule_lines(r, rel_path, "require")
    body.append("    reason: str | None = None")
    for r in contract.admits:
        body += _rule_lines(r, rel_path, "admit")
    body.append("    if reason is not None:")
    if contract.policy == "error":
        body.append("        raise LayoutContractError(reason)")
    else:
        body.append("        _p.fall_back(__name__, reason, FALLBACK)")
    fields = [*names, *(let.name for let in contract.lets)]
    body += packed("    return Plan(", [*(f"{n}={n}" for n in fields), "supported=reason is None", "reason=reason"],
                   "    )", 8)
    return body


def _ep_lines(contract: ir.Contract, ep: dict[str, Any] | None) -> list[str]:
    if ep is None:
        return []
    redundant = literal(contract.ep.redundant) if contract.ep is not None and contract.ep.redundant else "None"
    return call("local_experts = _w.local_experts", [
        "_MODULE", literal(ep["experts"]), literal(ep["count"]), literal(ep["placement"]), redundant], 0)


def view_model(contract: ir.Contract, rel_path: str, proved: tuple[str, ...]) -> ModuleView:
    dtype_params = sorted({t.storage.param for t in contract.tensors if isinstance(t.storage, ir.ParamStorage)})
    has_tp = any(p.name == "tp_size" for p in contract.params)
    params = _params(contract, dtype_params) + [
        ParamView(e["name"], e["check_lines"], e["annotation"], e["field_type"], e["domain"])
        for e in ep_params(contract)]
    ep = ep_view(contract, lambda e, prefix: render_expr(e, prefix, True))
    kernel_args, returns = [], []
    if contract.kernel is not None:
        for arg in contract.kernel.args:
            kernel_args.append(KernelArgView(textwrap.wrap(
                f"{arg.name}: trims {render_expr(arg.trim_count, 'plan.')} trailing positions of each segment of "
                + ", ".join(f"{a}.{b}" for a, b in arg.trims) + f" (contract line {arg.span.line}).", 88,
                break_long_words=False, subsequent_indent="    ")))
            returns.append((arg.name, render_expr(arg.value, "plan.", True)))
    glue = _glue_view(contract, ep)
    digest = hashlib.sha256(contract.source_text.encode("utf-8")).hexdigest()
    tensors = [_tensor_view(contract, t, has_tp) for t in contract.tensors]
    format_code = any("FormatCode(" in line for t in tensors for line in t.row)
    block = _block_shard_doc(contract.block_shard)
    count = contract.shard.count if contract.shard is not None else "tp_size"
    module_args = ["__name__", "CONTRACT", "SOURCE_FILE", "plan", "Plan", "_PARAMS",
                   f"tp_param={literal(count) if has_tp else 'None'}"]
    if block is not None:
        module_args.append(f"block_shard={literal(_doc_safe(block))}")
    return ModuleView(
        name=contract.name, file=rel_path, file_literal=literal(rel_path), sha256=digest,
        version_line=f"{VERSION_PREFIX}{__version__}",
        proved_lines=textwrap.wrap("properties proved: " + (", ".join(proved) if proved else
                                   "none (compiled without verification)"), 88,
                                   initial_indent="# ", subsequent_indent="#   "),
        sources_doc=[line for src in contract.sources
                     for line in textwrap.wrap(src, 88, initial_indent="- ", subsequent_indent="  ")],
        imports=_imports(contract, glue, format_code),
        all_names=_exports(contract, glue, has_tp),
        sources=[literal(s) for s in contract.sources],
        proved_lines_code=packed("PROVED: tuple[str, ...] = (", [literal(x) for x in proved],
                                 ",)" if len(proved) == 1 else ")"),
        policy=contract.policy, fallback=literal(contract.fallback),
        values_lines=_values_lines(contract),
        params_table=[line for p in contract.params for line in _plan_param(p)]
        + [line for e in ep_params(contract) for line in call("PlanParam", [
            literal(e["name"]), '"enum"', f"values={literal(tuple(e['served']))}", f"default={literal(e['served'][0])}"],
            4, ",")],
        checker=call("_check = _p.checker", ["CONTRACT", "SOURCE_FILE", "_PARAMS"]
                     + ([f"dtypes={literal(tuple(dtype_params))}"] if dtype_params else []), 0),
        plan_fields=[f"{p.name}: {p.field_type}" for p in params]
        + [f"{let.name}: {_let_type(let)}" for let in contract.lets],
        params=params,
        plan_body=_plan_body(contract, rel_path, params, ep),
        module_lines=call("_MODULE = _w.module", module_args, 0),
        ep_lines=_ep_lines(contract, ep),
        kernel_args=kernel_args, kernel_args_return=_kernel_args_return(returns),
        tensors=tensors, glue=glue,
        layout_lines=_layout_lines(contract, glue is not None),
        uses_math=_uses(contract, (Op.GCD,)),
    )


def _layout_lines(contract: ir.Contract, glued: bool) -> list[str]:
    """`LAYOUT = _MODULE.layout(...)` (runtime/wrappers.py `Module.layout`): the tensors in
    declaration order, the kernel, `local_experts`, the `models` lines and the `route` lines."""
    names = [_var(t) for t in contract.tensors]
    args = ["(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"]
    args += ["kernel=_KERNEL"] if glued else []
    args += ["local_experts=local_experts"] if contract.ep is not None else []
    models, routes = _models_lines(contract), _routes_lines(contract)
    if not models and not routes:
        return call("LAYOUT = _MODULE.layout", args, 0)
    lines = ["LAYOUT = _MODULE.layout(", *(line for a in args for line in _item(a, 4))]
    lines += ["    models=(", *models, "    ),"] if models else []
    lines += _routes_arg(contract, routes)
    return [*lines, ")"]


def _routes_arg(contract: ir.Contract, exploded: list[str]) -> list[str]:
    """`routes=(...)` on one line where it fits (as ruff joins it: no magic trailing comma but a
    one-element tuple's), else one `RouteEntry` field per line; [] without routes."""
    if not contract.routes:
        return []
    entries = [f"RouteEntry({literal(r.route)}, {literal(tuple(r.formats))}, rank={r.rank}, "
               f"contract_line={r.span.line})" for r in contract.routes]
    line = f"    routes=({', '.join(entries)}{',' if len(entries) == 1 else ''}),"
    return [line] if len(line) <= WIDTH else ["    routes=(", *exploded, "    ),"]


def _let_type(let: ir.Let) -> str:
    return "bool" if let.type == ir.BOOL else ("str" if isinstance(let.type, ir.EnumT) else "int")


def _kernel_args_return(returns: list[tuple[str, str]]) -> list[str]:
    """`return {...}` of `kernel_args`; an entry too long for one line keeps the emitter's
    wrapping and the statement is marked `# fmt: skip`."""
    lines, skip = ["    return {"], False
    for name, expr in returns:
        one = f"        {literal(name)}: {_bare(expr)},"
        if len(one) <= WIDTH:
            lines.append(one)
            continue
        skip = True
        lines += wrap_code(f"{literal(name)}: ", expr, ",", 8)
    lines.append("    }" + ("  # fmt: skip" if skip else ""))
    return lines


def _uses(contract: ir.Contract, ops: tuple[Op, ...]) -> bool:
    exprs: list[ir.Expr] = [let.value for let in contract.lets] + [r.cond for r in contract.rules]
    for t in contract.tensors:
        exprs += [g.guard for g in t.guarded]
        for a in [*t.axes, *(g.axis for g in t.guarded)]:
            exprs += [a.logical, a.padded] + ([a.group_size] if a.group_size is not None else [])
    if contract.kernel is not None:
        exprs += [e for arg in contract.kernel.args for e in (arg.value, arg.trim_count)]
    if contract.glue is not None:
        exprs += [e for _, e in contract.glue.args]
    return any(isinstance(n, ir.Op) and n.op in ops for e in exprs for n in ir.walk(e))


def _domain_doc(p: ir.Param) -> str:
    """A parameter's domain for `plan`'s docstring, where it follows 8 spaces and the name:
    wrapped under the name so that generated lines stay under 100 columns."""
    default = f" (default {p.default})" if p.default is not None else ""
    if p.kind == "range":
        return f"int in {p.low}..{p.high}{default}"
    text = "one of " + ", ".join(repr(v) for v in p.values) + default
    return "\n".join(textwrap.wrap(text, width=96 - 10 - len(p.name), subsequent_indent=" " * 12,
                                    break_long_words=False, break_on_hyphens=False))


def _doc_safe(text: str) -> str:
    """Text for a docstring or comment: printable, no quotes that could close it."""
    cleaned = "".join(c if c.isprintable() else " " for c in text)
    return cleaned.replace("\\", "\\\\").replace('"""', "'''")


def render(contract: ir.Contract, rel_path: str, proved: tuple[str, ...]) -> str:
    """The generated module's source text (byte-stable for the same input)."""
    env = _env()
    env.filters["doc"] = _doc_safe
    model = view_model(contract, rel_path, proved)
    return env.get_template("module.py.j2").render(**{f.name: getattr(model, f.name) for f in dataclasses.fields(model)})


def render_init(names: list[str]) -> str:
    env = _env()
    return env.get_template("init.py.j2").render(modules=sorted(names),
                                                 version_line=f"{VERSION_PREFIX}{__version__}")
