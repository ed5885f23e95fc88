"""Unit tests of the emitter's pure helpers (layoutc/compiler/emit/render.py) on small IR.

The oracle for expressions is the compiler's own evaluator (`evaluate.eval_expr`): the
Python that `render_expr` writes, run with the runtime's helpers (`_p`), must compute the
same value on every point of a small grid. No kernels; torch only through `_p`.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import keyword
import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from layoutc.compiler import ir
from layoutc.compiler.diagnostics import Span
from layoutc.compiler.emit import render as R
from layoutc.compiler.emit.compile import render_all
from layoutc.compiler.evaluate import eval_expr
from layoutc.compiler.source import load
from layoutc.runtime import params as runtime_params
from layoutc.runtime import wrappers
from layoutc.runtime.vocab import FUNCTIONS, Op, OpKind
from tests.conftest import ROOT

SPAN = Span("unit.moe", 1, 1, 1, 2)
ACT = ir.EnumT("activation", ("silu", "gelu", "swigluoai"))
HOSTILE = "it's \"quoted\" \\ back\\slash\n{{ 7 * 7 }} \u00e9 \x00 '''"


def ref(name: str, type_: ir.Type = ir.INT) -> ir.Ref:
    return ir.Ref(name, "param", type_, SPAN)


def const(value: int | bool | str, type_: ir.Type = ir.INT) -> ir.Const:
    return ir.Const(value, type_, SPAN)


def op(name: str, *args: ir.Expr, type_: ir.Type = ir.INT) -> ir.Op:
    return ir.Op(Op.parse(name), args, type_, SPAN)


def run(e: ir.Expr, env: dict[str, Any]) -> Any:
    """The rendered expression, evaluated as a generated module evaluates it."""
    return eval(R.render_expr(e, ""), {"_p": runtime_params, "math": math}, dict(env))


def agrees(e: ir.Expr, envs: list[dict[str, Any]]) -> None:
    for env in envs:
        assert run(e, env) == eval_expr(e, env), (R.render_expr(e, ""), env)


INTS = [{"a": a, "b": b} for a, b in itertools.product((-7, 0, 1, 5, 12, 176), (1, 2, 3, 8, 32))]
BOOLS = [{"p": p, "q": q} for p, q in itertools.product((False, True), repeat=2)]


@pytest.mark.parametrize("name", ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">="])
def test_each_integer_operator_renders_to_python_that_agrees_with_the_evaluator(name: str) -> None:
    e = op(name, ref("a"), ref("b"), type_=ir.BOOL if Op.parse(name).kind is OpKind.COMPARE else ir.INT)
    text = R.render_expr(e, "plan.")
    assert text == f"(plan.a {'//' if name == '/' else name} plan.b)"
    agrees(e, INTS)


@pytest.mark.parametrize("name", ["and", "or"])
def test_logic_operators(name: str) -> None:
    e = op(name, ref("p", ir.BOOL), ref("q", ir.BOOL), type_=ir.BOOL)
    assert R.render_expr(e, "") == f"(p {name} q)"
    agrees(e, BOOLS)


def test_unary_operators() -> None:
    assert R.render_expr(op("not", ref("p", ir.BOOL), type_=ir.BOOL), "") == "(not p)"
    assert R.render_expr(op("neg", ref("a")), "") == "(-a)"
    agrees(op("not", ref("p", ir.BOOL), type_=ir.BOOL), BOOLS)
    agrees(op("neg", op("neg", ref("a"))), INTS)
    agrees(op("neg", const(-5)), [{}])  # "(--5)": a negative literal under a minus


@pytest.mark.parametrize("name", sorted(f.value for f in FUNCTIONS))
def test_each_builtin_renders_to_its_runtime_helper(name: str) -> None:
    e = op(name, ref("a"), ref("b"))
    spelling = R.python_spelling(Op.parse(name))
    assert R.render_expr(e, "").startswith(f"{spelling}(")
    if spelling.startswith("_p."):  # the vocabulary's own helper, the one the evaluator applies
        from layoutc.runtime import vocab
        assert getattr(runtime_params, name) is getattr(vocab, name)
    envs = [env for env in INTS if name != "lcm" or env["a"] > 0]  # lcm of a non-positive value is refused
    agrees(e, envs)


def test_nesting_keeps_the_evaluators_grouping() -> None:
    # a - (b - a), (a + b) * b / 2, -(a % b): Python must not re-associate any of them
    for e in (op("-", ref("a"), op("-", ref("b"), ref("a"))),
              op("/", op("*", op("+", ref("a"), ref("b")), ref("b")), const(2)),
              op("neg", op("%", ref("a"), ref("b")))):
        agrees(e, INTS)


def test_if_renders_a_conditional_expression() -> None:
    e = ir.Cond(op(">", ref("a"), const(4), type_=ir.BOOL), ref("b"), op("*", ref("b"), const(2)), ir.INT, SPAN)
    assert R.render_expr(e, "plan.") == "(plan.b if (plan.a > 4) else (plan.b * 2))"
    agrees(e, INTS)


def _match(default: ir.Expr | None, cases: tuple[tuple[str, ir.Expr], ...]) -> ir.Select:
    return ir.Select(ref("activation", ACT), cases, default, ir.INT, SPAN)


def test_match_of_constants_without_a_default_is_a_table() -> None:
    e = _match(None, (("silu", const(32)), ("gelu", const(16)), ("swigluoai", const(64))))
    assert R.render_expr(e, "plan.") == "{'silu': 32, 'gelu': 16, 'swigluoai': 64}[plan.activation]"
    agrees(e, [{"activation": m} for m in ACT.members])


def test_match_with_a_default_or_computed_arms_is_a_chain() -> None:
    with_default = _match(const(1), (("silu", op("+", ref("b"), const(1))),))
    assert R.render_expr(with_default, "") == "((b + 1) if activation == 'silu' else 1)"
    computed = _match(None, (("silu", ref("b")), ("gelu", op("*", ref("b"), const(2))), ("swigluoai", const(0))))
    text = R.render_expr(computed, "")
    assert "[" not in text and text.count(" if ") == 2  # the last arm is the final else
    envs = [{"activation": m, "b": b} for m in ACT.members for b in (0, 3)]
    agrees(with_default, envs)
    agrees(computed, envs)


@pytest.mark.parametrize("node", [ir.AxisSize("w13", "n", SPAN), ir.TensorValue("w13", SPAN), ir.Code(SPAN)])
def test_kernel_only_expressions_are_refused(node: ir.Expr) -> None:
    with pytest.raises(ValueError, match="cannot render"):
        R.render_expr(op("+", node, const(1)), "")


def test_negation_flips_comparisons_and_drops_double_nots() -> None:
    for name, flipped in R._NEGATE.items():
        e = op(name.value, ref("a"), ref("b"), type_=ir.BOOL)
        assert R.render_negated(e, "") == f"(a {flipped.value} b)"
        for env in INTS:
            assert run(e, env) is not eval(R.render_negated(e, ""), {}, dict(env))
    p = ref("p", ir.BOOL)
    assert R.render_negated(op("not", p, type_=ir.BOOL), "") == "p"
    assert R.render_negated(op("and", p, p, type_=ir.BOOL), "") == "(not (p and p))"


def test_references_are_the_prefix_and_the_checked_name() -> None:
    assert R.render_expr(ref("intermediate_size"), "plan.") == "plan.intermediate_size"
    names = R._names(op("+", ref("a"), op("*", ref("b"), ref("a"))))
    assert names == ["a", "b"]  # in first-use order, once each


# ---- literals -------------------------------------------------------------------


@pytest.mark.parametrize("value", [HOSTILE, "", "silu", "\"\"\"", "\\"])
def test_string_literals_read_back_exactly(value: str) -> None:
    text = R.render_expr(const(value, ACT), "")
    assert ast.literal_eval(text) == value


@pytest.mark.parametrize("value", [0, -1, 2**62, True, False])
def test_number_and_bool_literals_read_back_exactly(value: int | bool) -> None:
    text = R.render_expr(const(value, ir.BOOL if isinstance(value, bool) else ir.INT), "")
    assert ast.literal_eval(text) == value and type(ast.literal_eval(text)) is type(value)


def test_rule_messages_and_locations_are_repr_safe() -> None:
    rule = ir.Rule("require", op(">", ref("a"), const(0), type_=ir.BOOL), HOSTILE, SPAN)
    lines = R._rule_lines(rule, "dir/it's \"x\".moe", "require")
    assert lines[0] == "    if a <= 0:"  # as ruff writes it: no redundant parentheses
    tree = ast.parse("def f(a):\n" + "\n".join(lines))
    refusal = next(n for n in ast.walk(tree) if isinstance(n, ast.Call))
    where, message, values = refusal.args
    assert ast.literal_eval(message) == HOSTILE
    assert ast.literal_eval(where) == "dir/it's \"x\".moe:1"
    assert isinstance(values, ast.Dict) and [ast.literal_eval(k) for k in values.keys if k] == ["a"]


def test_doc_text_cannot_close_a_docstring() -> None:
    safe = R._doc_safe(HOSTILE)
    assert '"""' not in safe and all(c.isprintable() for c in safe)
    # inside a docstring it reads back as the text, with `\"\"\"` -> `'''` and controls -> spaces
    read = ast.literal_eval('"""' + safe + '\n"""')
    assert read == HOSTILE.replace("\n", " ").replace("\x00", " ").replace('"""', "'''") + "\n"


def test_fill_words_replicate_the_code_over_packed_lanes() -> None:
    def tensor(storage: str, pack: int, fill: int) -> ir.Tensor:
        axis = ir.Axis("k", "reduction", "pad", (), const(8), const(8), pack, None, None, SPAN)  # type: ignore[arg-type]
        return ir.Tensor("w", "weight", "w13", False, (axis,), "value", fill, ir.FixedStorage(storage), None, None,
                         SPAN)

    assert R._fill_word(tensor("bfloat16", 1, 0)) == "0.0"
    assert R._fill_word(tensor("int8", 1, -3)) == "-3"
    assert R._fill_word(tensor("uint8", 2, 0xF)) == "255"
    assert R._fill_word(tensor("int32", 8, 8)) == str(0x88888888 - 2**32)  # signed storage wraps
    assert R._fill_word(tensor("int32", 8, 8), code=0) == "0"  # a tail code replaces the fill
    by_param = dataclasses.replace(tensor("int8", 1, 2), storage=ir.ParamStorage("dtype"))
    assert R._fill_word(by_param) == "2.0"
    # its storage is the plan's dtype parameter's, which the runtime looks up (the emitter's
    # _dtype_expr wrote `_DTYPES[plan.dtype]` until the runtime made the kernel configuration)
    dtype_of = wrappers.storage_dtype(wrappers.Row("w", "weight", "w13", 1, ("k",), lambda p: (), "dtype", 2.0,
                                                   ("[8]", "[8]"), "stored code 2"))
    assert dtype_of(SimpleNamespace(dtype="int8")) is torch.int8
    assert dtype_of(SimpleNamespace(dtype="bfloat16")) is torch.bfloat16
    fixed = wrappers.storage_dtype(wrappers.Row("w", "weight", "w13", 1, ("k",), lambda p: (), torch.int8, -3,
                                                ("[8]", "[8]"), "stored code -3"))
    assert fixed(SimpleNamespace(dtype="bfloat16")) is torch.int8  # a fixed storage ignores the plan's dtype


# ---- layout of the output ----------------------------------------------------------


def test_long_code_is_wrapped_under_100_columns_and_still_parses() -> None:
    long = R.render_expr(op("and", *[op("<", ref(f"name_{i}"), const(10**12), type_=ir.BOOL) for i in range(2)],
                            type_=ir.BOOL), "plan.")
    long = f"({long} or {long} or {long})"
    lines = R.wrap_code("if ", long, ":")
    assert len(lines) > 1 and all(len(line) <= 99 for line in lines)
    ast.parse("def f(plan):\n" + "\n".join(lines) + "\n        pass\n")
    assert R.wrap_code("if ", "(a)", ":") == ["    if (a):"]


def test_helpers_for_splitting_rendered_code() -> None:
    assert R._one_group("(a + (b))") and not R._one_group("(a) + (b)") and not R._one_group("a")
    assert R._split_args("CONTRACT, 'x, y', (1, 2), [3, 4]") == ["CONTRACT", " 'x, y'", " (1, 2)", " [3, 4]"]
    assert sorted(["plan", "Plan", "CONTRACT", "pad_w2", "pad_w13", "pad_w10"], key=R._natural) == \
        ["CONTRACT", "Plan", "pad_w2", "pad_w10", "pad_w13", "plan"]


# ---- one contract, end to end through render ---------------------------------------------


def _contract(name: str) -> ir.Contract:
    contract, diags, _ = load(str(ROOT / "contracts" / f"{name}.moe"))
    assert contract is not None, diags
    return contract


def test_a_contract_compiled_twice_is_byte_identical() -> None:
    first = R.render(_contract("torch_grouped_mm"), "contracts/torch_grouped_mm.moe", ("placement",))
    again = R.render(_contract("torch_grouped_mm"), "contracts/torch_grouped_mm.moe", ("placement",))
    assert first == again
    files, code, diags = render_all([("contracts/torch_grouped_mm.moe", _contract("torch_grouped_mm"))],
                                    verify_first=False)
    files2, _, _ = render_all([("contracts/torch_grouped_mm.moe", _contract("torch_grouped_mm"))], verify_first=False)
    assert code == 0 and not diags and files == files2
    assert files is not None and {"__init__.py", "torch_grouped_mm.py"} <= set(files)


def test_exported_names_are_identifiers_the_module_defines() -> None:
    source = R.render(_contract("vllm_cpu_grouped_gemm"), "contracts/vllm_cpu_grouped_gemm.moe", ())
    tree = ast.parse(source)
    exported = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets))
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    defined |= {e.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Tuple)
                for e in t.elts if isinstance(e, ast.Name)}  # `w13_shapes, pad_w13, ... = _W13`
    defined |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    defined |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert exported and len(exported) == len(set(exported))
    for name in exported:
        assert name.isidentifier() and not keyword.iskeyword(name), name
        assert name in defined, name
