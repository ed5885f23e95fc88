"""Render a checked contract into a standalone Python module (jinja2).

Python prepares a view model of safe strings: identifiers were validated by the
checker, every literal goes through ``repr``, expressions are rendered here.
The template only loops and interpolates (``StrictUndefined``).
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from typing import Any

import jinja2

from . import __version__, ir
from .check import GLUE_KINDS

VERSION_PREFIX = "# layoutc-version: "


@functools.cache
def _env() -> jinja2.Environment:
    loader = jinja2.FunctionLoader(_template_source)
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, autoescape=False,
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)


def _template_source(name: str) -> str:
    return resources.files("layoutc").joinpath("templates", name).read_text(encoding="utf-8")


# ---- expressions ---------------------------------------------------------------

_PY_OPS = {"+": "+", "-": "-", "*": "*", "/": "//", "%": "%", "==": "==", "!=": "!=", "<": "<",
           "<=": "<=", ">": ">", ">=": ">=", "and": "and", "or": "or"}
_PY_FUNCS = {"round_up": "_round_up", "round_down": "_round_down", "cdiv": "_cdiv", "lcm": "math.lcm",
             "gcd": "math.gcd", "min": "min", "max": "max"}


def render_expr(e: ir.Expr, prefix: str) -> str:
    """Python source for `e`; parameters and lets are read as `{prefix}name`."""
    if isinstance(e, ir.Const):
        return repr(e.value)
    if isinstance(e, ir.Ref):
        return f"{prefix}{e.name}"
    if isinstance(e, ir.Cond):
        return (f"({render_expr(e.then, prefix)} if {render_expr(e.cond, prefix)} "
                f"else {render_expr(e.orelse, prefix)})")
    if isinstance(e, ir.Select):
        subject = render_expr(e.subject, prefix)
        if e.default is None and all(isinstance(v, ir.Const) for _, v in e.cases):
            table = ", ".join(f"{m!r}: {render_expr(v, prefix)}" for m, v in e.cases)
            return f"{{{table}}}[{subject}]"
        out = render_expr(e.default, prefix) if e.default is not None else render_expr(e.cases[-1][1], prefix)
        cases = e.cases if e.default is not None else e.cases[:-1]
        for member, value in reversed(cases):
            out = f"({render_expr(value, prefix)} if {subject} == {member!r} else {out})"
        return out
    if isinstance(e, ir.Op):
        args = [render_expr(a, prefix) for a in e.args]
        if e.op == "not":
            return f"(not {args[0]})"
        if e.op == "neg":
            return f"(-{args[0]})"
        if e.op in _PY_FUNCS:
            return f"{_PY_FUNCS[e.op]}({', '.join(args)})"
        return f"({args[0]} {_PY_OPS[e.op]} {args[1]})"
    raise ValueError(f"cannot render {type(e).__name__} in a generated module")


_NEGATE = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def render_negated(e: ir.Expr, prefix: str) -> str:
    """Python source for `not e`, with comparisons flipped rather than wrapped in `not`."""
    if isinstance(e, ir.Op) and e.op in _NEGATE:
        left, right = (render_expr(a, prefix) for a in e.args)
        return f"({left} {_NEGATE[e.op]} {right})"
    if isinstance(e, ir.Op) and e.op == "not":
        return render_expr(e.args[0], prefix)
    return f"(not {render_expr(e, prefix)})"


def _names(e: ir.Expr) -> list[str]:
    seen: list[str] = []
    for node in ir.walk(e):
        if isinstance(node, ir.Ref) and node.name not in seen:
            seen.append(node.name)
    return seen


# ---- view model ----------------------------------------------------------------

_BITS = {"int32": 32, "uint8": 8, "int8": 8, "int16": 16}


def _fill_word(tensor: ir.Tensor) -> str:
    """The stored fill value, replicated across packed sub-elements."""
    pack = max(a.pack for a in tensor.axes) if tensor.axes else 1
    if pack == 1:
        if tensor.storage.startswith("param:") or tensor.storage.startswith("float") \
                or tensor.storage == "bfloat16":
            return repr(float(tensor.fill))
        return repr(int(tensor.fill))
    bits = _BITS[tensor.storage] // pack
    mask = (1 << bits) - 1
    word = 0
    for j in range(pack):
        word |= (tensor.fill & mask) << (bits * j)
    width = _BITS[tensor.storage]
    if tensor.storage.startswith("int") and word >= 1 << (width - 1):
        word -= 1 << width
    return repr(word)


def _axis_view(tensor: ir.Tensor, axis: ir.Axis, has_tp: bool) -> dict[str, Any]:
    pack = axis.pack
    logical = render_expr(axis.logical, "plan.")
    padded = render_expr(axis.padded, "plan.")
    if axis.group_size is not None:
        g = render_expr(axis.group_size, "plan.")
        logical = f"_groups({logical}, {g})"
        padded = f"_groups({padded}, {g})"
        sharded = repr(axis.group_size.value != -1) if isinstance(axis.group_size, ir.Const) else f"{g} != -1"
    else:
        sharded = "True"
    if pack > 1:
        logical = f"{logical} // {pack}"
        padded = f"{padded} // {pack}"
    intermediate = (tensor.projection, axis.name) in (("w13", "n"), ("w2", "k"))
    layout = axis.layout
    segments = axis.segments
    return {
        "name": axis.name,
        "layout": repr(layout),
        "segments": segments,
        "logical": logical,
        "padded": padded,
        "sharded": sharded if intermediate and has_tp else "False",
    }


def _dtype_expr(tensor: ir.Tensor) -> str:
    if tensor.storage.startswith("param:"):
        return f"_DTYPES[plan.{tensor.storage.removeprefix('param:')}]"
    return f"torch.{tensor.storage}"


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
        "message": repr(rule.message),
        "where": repr(f"{file}:{rule.span.line}"),
        "names": [repr(n) for n in _names(rule.cond)],
        "name_refs": _names(rule.cond),
    }


def view_model(contract: ir.Contract, rel_path: str, proved: tuple[str, ...]) -> dict[str, Any]:
    dtype_params = sorted({t.storage.removeprefix("param:") for t in contract.tensors
                           if t.storage.startswith("param:")})
    params = []
    for p in contract.params:
        if p.kind == "range":
            check = f"_check_int({p.name!r}, {p.name}, {p.low!r}, {p.high!r})"
            annotation = "int"
        elif p.kind == "set":
            check = f"_check_choice({p.name!r}, {p.name}, {p.values!r})"
            annotation = "int"
        elif p.kind == "bool":
            check = f"_check_bool({p.name!r}, {p.name})"
            annotation = "bool"
        elif p.name in dtype_params:
            check = f"_check_dtype({p.name!r}, {p.name}, {p.values!r})"
            annotation = "str | torch.dtype"
        else:
            check = f"_check_member({p.name!r}, {p.name}, {p.values!r})"
            annotation = "str"
        field_type = {"range": "int", "set": "int", "bool": "bool"}.get(p.kind, "str")
        params.append({"name": p.name, "check": check, "annotation": annotation, "field_type": field_type,
                       "domain": _domain_doc(p)})
    lets = [{"name": let.name, "code": render_expr(let.value, ""),
             "field_type": "bool" if let.type == ir.BOOL else ("str" if isinstance(let.type, ir.EnumT) else "int")}
            for let in contract.lets]
    has_tp = any(p.name == "tp_size" for p in contract.params)
    tensors = []
    for t in contract.tensors:
        tensors.append({
            "name": t.name, "kind": t.kind, "projection": t.projection, "optional": t.optional,
            "axes": [_axis_view(t, a, has_tp) for a in t.axes],
            "fill": _fill_word(t), "uninit": t.fill_kind == "uninit", "dtype": _dtype_expr(t),
            "logical_doc": _shape_doc(contract, t, "logical"), "padded_doc": _shape_doc(contract, t, "padded"),
            "storage_doc": t.storage.removeprefix("param:"),
            "fill_doc": "left uninitialised" if t.fill_kind == "uninit" else f"stored code {t.fill}"
            + (f" (decodes to {t.fill if t.fill_kind == 'value' else 'the declared value'})" if t.decode else ""),
            "line": t.span.line,
        })
    kernel_args = []
    if contract.kernel is not None:
        for arg in contract.kernel.args:
            kernel_args.append({"name": arg.name, "code": render_expr(arg.value, "plan."),
                                "trims": ", ".join(f"{a}.{b}" for a, b in arg.trims),
                                "count": render_expr(arg.trim_count, "plan."), "line": arg.span.line})
    glue = None
    if contract.glue is not None:
        g = contract.glue
        glue = {"kind": g.kind, "package": repr(g.package), "ops": {k: repr(v) for k, v in g.ops},
                "args": {k: render_expr(v, "plan.") for k, v in g.args},
                "summary": GLUE_KINDS[g.kind].summary, "template": f"glue/{g.kind}.py.j2",
                "activation": render_expr(contract.kernel.activation, "plan.")
                if contract.kernel is not None and contract.kernel.activation is not None else "'silu'"}
    digest = hashlib.sha256(contract.source_text.encode("utf-8")).hexdigest()
    return {
        "name": contract.name, "file": rel_path, "file_repr": repr(rel_path), "sha256": digest,
        "version_line": f"{VERSION_PREFIX}{__version__}", "proved": list(proved),
        "proved_repr": repr(tuple(proved)),
        "sources": [repr(s) for s in contract.sources], "sources_doc": [s for s in contract.sources],
        "policy": contract.policy, "fallback": repr(contract.fallback),
        "params": params, "lets": lets,
        "requires": [_rule_view(r, rel_path) for r in contract.requires],
        "admits": [_rule_view(r, rel_path) for r in contract.admits],
        "tensors": tensors, "kernel_args": kernel_args, "glue": glue,
        "has_tp": has_tp,
        "uses_math": _uses(contract, ("lcm", "gcd")),
        "dtype_params": dtype_params,
        "w13": contract.weight("w13").name, "w2": contract.weight("w2").name,
        "gated": contract.gated,
        "w13_bias": next((t.name for t in contract.tensors if t.kind == "bias" and t.projection == "w13"), None),
        "w2_bias": next((t.name for t in contract.tensors if t.kind == "bias" and t.projection == "w2"), None),
    }


def _uses(contract: ir.Contract, ops: tuple[str, ...]) -> bool:
    exprs: list[ir.Expr] = [let.value for let in contract.lets] + [r.cond for r in contract.rules]
    for t in contract.tensors:
        for a in t.axes:
            exprs += [a.logical, a.padded] + ([a.group_size] if a.group_size is not None else [])
    if contract.kernel is not None:
        exprs += [e for arg in contract.kernel.args for e in (arg.value, arg.trim_count)]
    if contract.glue is not None:
        exprs += [e for _, e in contract.glue.args]
    return any(isinstance(n, ir.Op) and n.op in ops for e in exprs for n in ir.walk(e))


def _domain_doc(p: ir.Param) -> str:
    if p.kind == "range":
        return f"int in {p.low}..{p.high}"
    return "one of " + ", ".join(repr(v) for v in p.values)


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
