"""Render a checked contract into a standalone Python module (jinja2).

Python prepares a view model of safe strings: identifiers were validated by the
checker, every literal goes through ``repr``, expressions are rendered here.
The template only loops and interpolates (``StrictUndefined``).
"""

from __future__ import annotations

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


def render_expr(e: ir.Expr, prefix: str) -> str:
    """Python source for `e`; parameters and lets are read as `{prefix}name`."""
    match e:
        case ir.Const():
            return repr(e.value)
        case ir.Ref():
            return f"{prefix}{e.name}"
        case ir.Cond():
            return (f"({render_expr(e.then, prefix)} if {render_expr(e.cond, prefix)} "
                    f"else {render_expr(e.orelse, prefix)})")
        case ir.Select():
            subject = render_expr(e.subject, prefix)
            if e.default is None and all(isinstance(v, ir.Const) for _, v in e.cases):
                table = ", ".join(f"{m!r}: {render_expr(v, prefix)}" for m, v in e.cases)
                return f"{{{table}}}[{subject}]"
            out = render_expr(e.default, prefix) if e.default is not None else render_expr(e.cases[-1][1], prefix)
            cases = e.cases if e.default is not None else e.cases[:-1]
            for member, value in reversed(cases):
                out = f"({render_expr(value, prefix)} if {subject} == {member!r} else {out})"
            return out
        case ir.Op():
            spelling = python_spelling(e.op)
            args = [render_expr(a, prefix) for a in e.args]
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


def render_negated(e: ir.Expr, prefix: str) -> str:
    """Python source for `not e`, with comparisons flipped rather than wrapped in `not`."""
    if isinstance(e, ir.Op) and e.op in _NEGATE:
        left, right = (render_expr(a, prefix) for a in e.args)
        return f"({left} {python_spelling(_NEGATE[e.op])} {right})"
    if isinstance(e, ir.Op) and e.op is Op.NOT:
        return render_expr(e.args[0], prefix)
    return f"(not {render_expr(e, prefix)})"


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
    `_layout.FormatCode`, which layout.write_code stores through the integer view. Otherwise a
    float storage, or a dtype parameter (its members may be floats), takes a float (the value);
    an integer storage an int; a packed one (always a fixed integer dtype, LC411) the word."""
    value = tensor.fill if code is None else code
    pack = max(a.pack for a in tensor.axes) if tensor.axes else 1
    dtype = DTYPES[tensor.storage.dtype] if isinstance(tensor.storage, ir.FixedStorage) else None
    stored = (dtype.name,) if dtype is not None else members
    if value != 0 and any(holds_byte(m, ir.reads_format(tensor.decode)) for m in stored if m in DTYPES):
        return f"_layout.FormatCode({int(value)})"
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


def _axis_call(tensor: ir.Tensor, axis: ir.Axis, has_tp: bool, indent: int,
               full: ir.Expr | None = None) -> list[str]:
    """`Axis(...)` for one axis, broken over lines when it would be long. `full`: a block
    shard's full checkpoint length (values), given to its sharded axes in storage units."""
    pack = axis.pack
    logical = render_expr(axis.logical, "plan.")
    padded = render_expr(axis.padded, "plan.")
    whole = render_expr(full, "plan.") if full is not None else None
    if axis.group_size is not None:
        g = render_expr(axis.group_size, "plan.")
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
    parts = [repr(axis.name).replace("'", '"'), f'"{axis.layout.value}"', str(axis.segments),
             logical, padded, sharded]
    if whole is not None and sharded != "False":
        parts.append(f"full={whole}")
    pad = " " * indent
    one = f"{pad}Axis({', '.join(parts)}),"
    if len(one) <= 99:
        return [one]
    inner = " " * (indent + 4)
    return [f"{pad}Axis(", *(f"{inner}{part}," for part in parts), f"{pad}),"]


def _axis_table(tensor: ir.Tensor, has_tp: bool, full: ir.Expr | None = None) -> list[str]:
    """The body of `_<tensor>_axes(plan)`: one `Axis` per dimension, `when` alternatives as if/elif."""
    lines: list[str] = []
    entries: list[str] = []
    for axis in tensor.axes:
        alternatives = [g for g in tensor.guarded if g.axis.name == axis.name]
        if not alternatives:
            entries += _axis_call(tensor, axis, has_tp, 8, full)
            continue
        var = f"{axis.name}_axis"
        for k, alt in enumerate(alternatives):
            keyword = "if" if k == 0 else "elif"
            lines += wrap_code(f"{keyword} ", render_expr(alt.guard, "plan."), f":  # line {alt.axis.span.line}")
            call = _axis_call(tensor, alt.axis, has_tp, 8, full)
            lines += [f"        {var} = " + call[0].strip().removesuffix(","), *call[1:]] if len(call) == 1 \
                else [f"        {var} = Axis(", *call[1:-1], "        )"]
        call = _axis_call(tensor, axis, has_tp, 8, full)
        lines.append("    else:")
        lines += [f"        {var} = " + call[0].strip().removesuffix(",")] if len(call) == 1 \
            else [f"        {var} = Axis(", *call[1:-1], "        )"]
        entries.append(f"        {var},")
    return [*lines, "    return (", *entries, "    )"]


def _dtype_expr(tensor: ir.Tensor) -> str:
    """The torch dtype of `tensor` under `plan`: a fixed one, or the plan's dtype parameter's
    (looked up in the runtime's table, runtime/dtypes.py)."""
    match tensor.storage:
        case ir.FixedStorage(dtype=dtype):
            return f"torch.{dtype}"
        case ir.ParamStorage(param=param):
            return f"_DTYPES[plan.{param}]"
        case _:
            assert_never(tensor.storage)


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


def _rule_view(rule: ir.Rule | ir.Align, file: str) -> dict[str, Any]:
    return {
        "code": render_expr(rule.cond, ""),
        "negated": render_negated(rule.cond, ""),
        "require_lines": wrap_code("if ", render_negated(rule.cond, ""), ":"),
        "admit_lines": wrap_code("if reason is None and ", render_negated(rule.cond, ""), ":"),
        "message": repr(rule.message),
        "where": repr(f"{file}:{rule.span.line}"),
        "names": [repr(n) for n in _names(rule.cond)],
        "name_refs": _names(rule.cond),
    }


def _params(contract: ir.Contract, dtype_params: list[str]) -> list[dict[str, Any]]:
    params = []
    for p in contract.params:
        if p.kind == "range":
            check = f"_p.check_int(CONTRACT, {p.name!r}, {p.name}, {p.low!r}, {p.high!r}, SOURCE_FILE)"
            annotation = "int"
        elif p.kind == "set":
            check = f"_p.check_choice(CONTRACT, {p.name!r}, {p.name}, {p.values!r}, SOURCE_FILE)"
            annotation = "int"
        elif p.kind == "bool":
            check = f"_p.check_bool(CONTRACT, {p.name!r}, {p.name})"
            annotation = "bool"
        elif p.name in dtype_params:
            check = f"_p.check_dtype(CONTRACT, {p.name!r}, {p.name}, {p.values!r}, SOURCE_FILE)"
            annotation = "str | torch.dtype"
        else:
            check = f"_p.check_member(CONTRACT, {p.name!r}, {p.name}, {p.values!r}, SOURCE_FILE)"
            annotation = "str"
        field_type = {"range": "int", "set": "int", "bool": "bool"}.get(p.kind, "str")
        if p.default is not None:
            annotation = f"{annotation} = {p.default!r}"
        one = f"    {p.name} = {check}"
        if len(one) > 99:
            head, _, args = check.partition("(")
            parts = [a.strip() for a in _split_args(args.removesuffix(")"))]
            lines = [f"    {p.name} = {head}(", *(f"        {a}," for a in parts), "    )"]
        else:
            lines = [one]
        params.append({"name": p.name, "check": check, "check_lines": lines, "annotation": annotation,
                       "field_type": field_type, "domain": _domain_doc(p)})
    return params


def wrap_code(prefix: str, expr: str, suffix: str = "", indent: int = 4) -> list[str]:
    """`prefix + expr + suffix` as lines of at most 99 columns: a long `expr` goes in its own
    parentheses, broken between tokens (rendered expressions have no spaces inside literals)."""
    pad = " " * indent
    one = f"{pad}{prefix}{expr}{suffix}"
    if len(one) <= 99:
        return [one]
    inner = " " * (indent + 4)
    if _one_group(expr):
        expr = expr[1:-1]  # already parenthesised: its own parentheses allow the breaks
    body = textwrap.wrap(expr, 99 - len(inner), break_long_words=False, break_on_hyphens=False)
    return [f"{pad}{prefix}(", *(inner + b for b in body), f"{pad}){suffix}"]


def _one_group(expr: str) -> bool:
    """Whether `expr` is one parenthesised group: `(` ... its matching `)` at the very end."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return False
    depth = 0
    for i, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return i == len(expr) - 1
    return False


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments of a rendered call (brackets and quotes respected)."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote and text[i - 1] != "\\" else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


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


def _tensor_view(contract: ir.Contract, t: ir.Tensor, has_tp: bool) -> dict[str, Any]:
    # a decoded value only where the contract declares it (`fill decoded V`, which the verifier
    # proves at every pad lane); `fill N` on a quantized tensor is a code, not a value
    fill = "left uninitialised" if t.fill_kind == "uninit" else f"stored code {t.fill}" + (
        f" (`fill decoded {t.fill_value}`: decodes to {t.fill_value})" if t.fill_value is not None else "")
    return {
        "name": t.name, "kind": t.kind, "projection": t.projection, "optional": t.optional,
        "table": _axis_table(t, has_tp, contract.block_shard.full if contract.block_shard else None),
        "fill": "None" if t.fill_kind == "uninit" else _fill_word(t, members=_members(contract, t)),
        "dtype": _dtype_expr(t),
        # `tail fill`: the value past a short rank's slice, passed only where declared
        "tail_fill": None if t.tail_fill is None else _fill_word(t, t.tail_fill, _members(contract, t)),
        "tail_doc": None if t.tail_fill is None else f"stored code {t.tail_fill}" + (
            " (resolved from `tail fill decoded`)" if t.tail_fill_kind == "decoded" else ""),
        "logical_doc": _shape_doc(contract, t, "logical"), "padded_doc": _shape_doc(contract, t, "padded"),
        "storage_doc": str(t.storage), "fill_doc": fill, "line": t.span.line,
        "once": repr(t.kind == "bias" and t.projection == "w2"),
        # loading section (runtime/loading.py)
        "once_flag": repr(t.kind == "bias" and t.projection == "w2"),
        "is_once": t.kind == "bias" and t.projection == "w2",
        "tp": "plan.tp_size" if has_tp else "1",
        **_roles_view(t),
        # the module's LAYOUT entry (runtime/interface.py TensorEntry)
        "axis_names": _tuple_literal([a.name for a in t.axes]),
        "declaration": f'"tensor {t.name}: {t.kind} {t.projection}{" optional" if t.optional else ""}"',  # identifiers
    }


def _roles_view(t: ir.Tensor) -> dict[str, str]:
    """The segment roles of `t`'s segmented axis, as a Python expression over `plan`
    (a `when` alternative may name them in another order), and a docstring phrase."""
    seg = next((a for a in t.axes if a.segments > 1), None)
    if seg is None:
        return {"roles": "()", "roles_doc": '"down" or None (the whole tensor)'}
    expr = repr(tuple(seg.roles)).replace("'", '"')
    for alt in reversed([g for g in t.guarded if g.axis.name == seg.name]):
        if alt.axis.roles != seg.roles:
            expr = (f"({tuple(alt.axis.roles)!r} if {render_expr(alt.guard, 'plan.')} "
                    f"else {expr})").replace("'", '"')
    names = ", ".join(f'"{r}"' for r in seg.roles)
    return {"roles": expr, "roles_doc": f"one of {names} (one segment), or None / \"gate_up\" (all)"}


def _glue_view(contract: ir.Contract) -> dict[str, Any] | None:
    g = contract.glue
    if g is None:
        return None
    entry = glues.registry()[g.kind]
    interface = entry.interface
    w13, w2 = contract.weight("w13"), contract.weight("w2")
    act = glue_activation(contract)
    activation = render_expr(act, "plan.") if act is not None else repr(interface.activations[0].name)
    shapes = [("w13", w13.name), ("w2", w2.name)]
    for t in contract.tensors:
        if t.kind == "bias":
            shapes.append((f"{t.projection}_bias", t.name))
    biases = any(s.kind == "bias" for s in interface.tensors)
    keywords = (["w13_bias: torch.Tensor | None = None", "w2_bias: torch.Tensor | None = None"] if biases else []) \
        + [f"{o}: bool = False" for o in interface.forward_options]
    names = (["w13_bias", "w2_bias"] if biases else []) + list(interface.forward_options)
    views = "{" + ", ".join(f"{a.name!r}: {a.view!r}" for a in interface.activations).replace("'", '"') + "}"
    return {
        "module": entry.module, "summary": interface.summary, "views": views, "activation": activation,
        "ops": "{\n" + "".join(f'    "{k}": "{v}",\n' for k, v in interface.ops) + "}",
        "reexports": sorted((n for n in entry.public if n != "load_kernel"), key=_natural),
        "num_experts": f"{w13.name}_shapes(plan)[0][0]",  # logical: a padded expert is never routed
        "hidden_size": f"{w13.name}_shapes(plan)[1][2]",
        "intermediate_padded": f"{w13.name}_shapes(plan)[1][1] // 2",
        "dtype": _dtype_expr(w13),
        "shapes": shapes,
        "args": [(k, render_expr(v, "plan.")) for k, v in g.args if k != "activation"],
        "keywords": keywords, "keyword_names": names, "biases": biases,
        # under EP, run_local refuses input weighting above the top_k the kernel computes it at
        "input_weighted": "apply_router_weight_on_input" if "apply_router_weight_on_input" in interface.forward_options
        and interface.router_weight_input_top_k == 1 else None,
        "w13_doc": _shape_doc(contract, w13, "padded"), "w2_doc": _shape_doc(contract, w2, "padded"),
        "w13_logical": _shape_doc(contract, w13, "logical"), "w2_logical": _shape_doc(contract, w2, "logical"),
    }


def _literal(value: int | bool | str) -> str:
    """A Python literal of `value`; identifiers in double quotes, as the rest of the module."""
    return f'"{value}"' if isinstance(value, str) and value.isidentifier() else repr(value)


def _tuple_literal(values: list[Any] | tuple[Any, ...]) -> str:
    items = [_literal(v) for v in values]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _wrap_items(items: list[str], width: int) -> list[str]:
    """`items` joined by ", " into lines of at most `width` columns with their trailing comma,
    broken only between items."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 2 + len(item) + 1 <= width:
            lines[-1] += f", {item}"
        else:
            lines.append(item)
    return [line + "," for line in lines]


def _plan_param_lines(p: ir.Param) -> list[str]:
    """`PlanParam(...)` of one contract parameter for the module's LAYOUT, over several lines
    when one would pass 99 columns (a long set of values)."""
    head = [_literal(p.name), _literal(p.kind)]
    tail = [f"default={p.default!r}"] if p.default is not None else []
    if p.kind == "range":
        one = ", ".join([*head, f"low={p.low!r}", f"high={p.high!r}", *tail])
        return [f"        PlanParam({one}),"]
    line = f"        PlanParam({', '.join([*head, f'values={_tuple_literal(p.values)}', *tail])}),"
    if len(line) <= 99:
        return [line]
    values = [" " * 16 + line for line in _wrap_items([_literal(v) for v in p.values], 99 - 16)]
    return ["        PlanParam(", f"            {', '.join(head)},", "            values=(", *values,
            "            ),", *(f"            {t}," for t in tail), "        ),"]


def condition_source(e: ir.Expr) -> str:
    """`Condition(...)` source of a `models ... when` condition (runtime/interface.py): data a tool
    evaluates on a parameter dict. The checker admits constants, parameters and operators only."""
    match e:
        case ir.Const():
            return f'Condition("const", value={_literal(e.value)})'
        case ir.Ref():
            return f'Condition("param", value={_literal(e.name)})'
        case ir.Op():
            args = ", ".join(condition_source(a) for a in e.args)
            return f'Condition("{e.op.value}", ({args}{"," if len(e.args) == 1 else ""}))'
        case _:
            raise ValueError(f"a `models ... when` holds a {type(e).__name__} (the checker admits none)")


def _condition_lines(e: ir.Expr, indent: int, head: str, width: int = 99) -> list[str]:
    """`head` + the condition's source + ",", on one line when it fits in `width` columns, else
    with each operator's arguments on lines of their own, indented by 4."""
    one = " " * indent + head + condition_source(e) + ","
    if len(one) <= width or not isinstance(e, ir.Op):
        return [one]
    lines = [" " * indent + f'{head}Condition("{e.op.value}", (']
    for a in e.args:
        lines += _condition_lines(a, indent + 4, "")
    return [*lines, " " * indent + ")),"]


def _models_lines(contract: ir.Contract) -> list[str]:
    """`ModelsEntry(...)` of each `models` line for the module's LAYOUT, one field per line.
    Engines, releases and targets are checked to hold no quote or backslash (check/models.py)."""
    lines: list[str] = []
    for m in contract.models:
        releases = ", ".join(f'"{r}"' for r in m.releases) + ("," if len(m.releases) == 1 else "")
        lines += ["        ModelsEntry(", f'            "{m.engine}",', f"            ({releases}),",
                  f'            "{m.target}",']
        if m.when is not None:
            lines += _condition_lines(m.when, 12, "when=")
        lines += [f"            contract_line={m.span.line},", "        ),"]
    return lines


def _interface_import(contract: ir.Contract) -> str:
    """The module's import from `_runtime.interface`, its names in ruff's isort order, on one line
    when it fits 100 columns (generated lines stay short), else one name per line with a trailing
    comma (which ruff's isort keeps as written)."""
    names = ["LAYOUT_VERSION", "ModuleLayout", "PlanParam", "TensorEntry"]
    names += ["KernelEntry"] if contract.glue is not None else []
    names += ["ModelsEntry"] if contract.models else []
    names += ["Condition"] if any(m.when is not None for m in contract.models) else []
    names.sort(key=_natural)
    line = f"from ._runtime.interface import {', '.join(names)}"
    return line if len(line) <= 100 else "\n".join(["from ._runtime.interface import (", *(f"    {n}," for n in names), ")"])


def _layout_view(contract: ir.Contract, has_tp: bool) -> dict[str, Any]:
    """The parts of the module's `LAYOUT` that are not per tensor: its plan parameters and the
    parameter the shard functions split over (None: nothing is sharded)."""
    count = contract.shard.count if contract.shard is not None else "tp_size"
    return {
        "param_lines": [line for p in contract.params for line in _plan_param_lines(p)]
        + [f"        PlanParam({_literal(e['name'])}, {_literal('enum')}, values={_tuple_literal(e['served'])}, "
           f"default={_literal(e['served'][0])}),"
           for e in ep_params(contract)],
        "shard_count": _literal(count) if has_tp else "None",
        "models_lines": _models_lines(contract),
        "interface_import": _interface_import(contract),
    }


def _natural(name: str) -> tuple[int, list[object]]:
    """ruff's isort-style order for `__all__`: CONSTANTS, then Classes, then functions; digits by value."""
    category = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return category, [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _exports(contract: ir.Contract, glue: dict[str, Any] | None, has_tp: bool) -> list[str]:
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
        names += ["INTERFACE", "OPS", "PackedWeight", "fused_moe", "load_kernel", "prepack", "prepack_padded", *glue["reexports"]]
    return [f'"{n}",' for n in sorted(names, key=_natural)]


def view_model(contract: ir.Contract, rel_path: str, proved: tuple[str, ...]) -> dict[str, Any]:
    dtype_params = sorted({t.storage.param for t in contract.tensors if isinstance(t.storage, ir.ParamStorage)})
    lets = [{"name": let.name, "code": render_expr(let.value, ""),
             "lines": wrap_code(f"{let.name} = ", render_expr(let.value, "")),
             "field_type": "bool" if let.type == ir.BOOL else ("str" if isinstance(let.type, ir.EnumT) else "int")}
            for let in contract.lets]
    has_tp = any(p.name == "tp_size" for p in contract.params)
    kernel_args = []
    if contract.kernel is not None:
        for arg in contract.kernel.args:
            kernel_args.append({"name": arg.name, "code": render_expr(arg.value, "plan."),
                                "lines": wrap_code(f'"{arg.name}": ', render_expr(arg.value, "plan."), ",", 8),
                                "doc": textwrap.wrap(f"{arg.name}: trims {render_expr(arg.trim_count, 'plan.')} "
                                                     "trailing positions of each segment of "
                                                     + ", ".join(f"{a}.{b}" for a, b in arg.trims)
                                                     + f" (contract line {arg.span.line}).", 88,
                                                     break_long_words=False, subsequent_indent="    "),
                                "trims": ", ".join(f"{a}.{b}" for a, b in arg.trims),
                                "count": render_expr(arg.trim_count, "plan."), "line": arg.span.line})
    glue = _glue_view(contract)
    digest = hashlib.sha256(contract.source_text.encode("utf-8")).hexdigest()
    return {
        "name": contract.name, "file": rel_path, "file_repr": repr(rel_path), "sha256": digest,
        "version_line": f"{VERSION_PREFIX}{__version__}", "proved": list(proved),
        "proved_repr": repr(tuple(proved)),
        "sources": [repr(s) for s in contract.sources],
        "sources_doc": [line for src in contract.sources
                        for line in textwrap.wrap(src, 88, initial_indent="- ", subsequent_indent="  ")],
        "proved_lines": textwrap.wrap("properties proved: " + (", ".join(proved) if proved else
                                      "none (compiled without verification)"), 88,
                                      initial_indent="# ", subsequent_indent="#   "),
        "policy": contract.policy, "fallback": repr(contract.fallback),
        "params": _params(contract, dtype_params) + ep_params(contract), "lets": lets, "ep": ep_view(contract, render_expr),
        "requires": [_rule_view(r, rel_path) for r in contract.requires],
        "admits": [_rule_view(r, rel_path) for r in contract.admits],
        "tensors": [_tensor_view(contract, t, has_tp) for t in contract.tensors],
        "kernel_args": kernel_args, "glue": glue, "has_tp": has_tp, "tp_param": "tp_size",
        "block_shard": _block_shard_doc(contract.block_shard),
        "uses_math": _uses(contract, (Op.GCD,)), "dtype_table": bool(dtype_params),
        "all_names": _exports(contract, glue, has_tp),
        "w13": contract.weight("w13").name, "w2": contract.weight("w2").name,
        "layout": _layout_view(contract, has_tp),
    }


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
    return env.get_template("module.py.j2").render(**model)


def render_init(names: list[str]) -> str:
    env = _env()
    return env.get_template("init.py.j2").render(modules=sorted(names),
                                                 version_line=f"{VERSION_PREFIX}{__version__}")
