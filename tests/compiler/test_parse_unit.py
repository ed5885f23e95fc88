"""The AST builder of parse.py on its own: every grammar rule has a dispatcher case, an unknown
rule is an internal error (never a silent default), and each kind of clause builds its node."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from lark import Token, Tree

from layoutc.compiler import syntax as A
from layoutc.compiler.diagnostics import Span
from layoutc.compiler.parse import DISPATCHED, STRUCTURAL, GrammarError, _Builder, _parser, _TensorParts, parse

FILE = "mem.moe"


def _grammar_tree_names() -> set[str]:
    """The names a tree of this grammar can carry: aliases and the rules lark keeps as nodes
    (a `?rule` alternative without an alias has one child and is inlined)."""
    names: set[str] = set()
    for rule in _parser().rules:
        origin = str(rule.origin.name)
        if rule.alias is not None:
            names.add(str(rule.alias))
        elif not origin.startswith("_") and not rule.options.expand1:
            names.add(origin)
    return names


def test_every_grammar_rule_has_a_dispatcher() -> None:
    handled = set().union(*DISPATCHED.values()) | STRUCTURAL
    assert _grammar_tree_names() - handled == set()


def test_every_dispatched_rule_is_in_the_grammar() -> None:
    handled = set().union(*DISPATCHED.values()) | STRUCTURAL
    assert handled - _grammar_tree_names() == set()


def _glue(builder: _Builder, node: Tree[Token]) -> object:
    return builder.glue(Tree("glue_decl", [Token("NAME", "g"), node]))


DISPATCHERS: dict[str, Callable[[_Builder, Tree[Token]], object]] = {
    "declaration": _Builder.decl,
    "domain": _Builder.domain,
    "tensor kind": _Builder.tensor_kind,
    "tensor clause": lambda b, node: b.tensor_clause(node, _TensorParts()),
    "fill value": _Builder.fill,
    "axis spec": _Builder.axis_spec,
    "layout": _Builder.layout,
    "kernel clause": _Builder.kernel_clause,
    "view": _Builder.view,
    "glue clause": _glue,
    "expression": _Builder.expr,
    "ep clause": lambda b, node: b.ep("e", "ep", ("linear",), Span(FILE, 1, 1, 1, 1), [node]),
}

def test_every_dispatcher_is_tested() -> None:
    assert set(DISPATCHERS) == set(DISPATCHED)


@pytest.mark.parametrize("what", sorted(DISPATCHERS))
def test_an_unknown_rule_is_an_internal_error(what: str) -> None:
    builder = _Builder(FILE)
    with pytest.raises(GrammarError, match=f"unknown {what} rule `not_a_rule`"):
        DISPATCHERS[what](builder, Tree("not_a_rule", []))
    assert builder.diags == []


def test_a_rule_of_another_dispatcher_is_an_internal_error() -> None:
    with pytest.raises(GrammarError, match="unknown expression rule `fill_uninit`"):
        _Builder(FILE).expr(Tree("fill_uninit", []))


def test_a_bare_token_where_a_tree_belongs_is_an_internal_error() -> None:
    with pytest.raises(GrammarError, match="expected a subtree"):
        _Builder(FILE).expr(Token("INT", "3"))
    with pytest.raises(GrammarError, match="expected a token"):
        _Builder(FILE).int_token(Tree("int_lit", []))


def _module(text: str) -> A.Module:
    module, diags = parse(text, FILE)
    assert module is not None and diags == [], diags
    return module


def test_tensor_clauses() -> None:
    module = _module("tensor t: scale w13 optional {\n  axis n = interleave(up | gate, 4 -> 8) pack 2\n"
                     "  axis k = 4 when b\n  axis experts = groups(w.k, 2)\n  fill decoded -1\n  tail fill uninit\n"
                     "  storage int8\n  code 0..3\n  decode = code\n}\n")
    (t,) = module.decls
    assert isinstance(t, A.TensorDecl)
    assert (t.kind, t.projection, t.optional) == ("scale", "w13", True)
    n, k, experts = t.axes
    assert isinstance(n.spec, A.PaddedAxis) and (n.spec.layout, n.spec.roles, n.spec.pack) == \
        ("interleave", ("up", "gate"), 2)
    assert isinstance(k.spec, A.PlainAxis) and isinstance(k.when, A.Name)
    assert isinstance(experts.spec, A.GroupsAxis) and (experts.spec.tensor, experts.spec.axis) == ("w", "k")
    assert [(f.kind, f.value) for f in t.fill] == [("decoded", -1)]
    assert [(f.kind, f.span.line) for f in t.tail_fill] == [("uninit", 6)]
    assert [s for s, _ in t.storage] == ["int8"] and [(lo, hi) for lo, hi, _ in t.code] == [(0, 3)]
    assert isinstance(t.decode[0], A.Name)


def test_kernel_and_glue_clauses() -> None:
    module = _module("kernel k {\n  view w.n linear\n  view w.k halves(gate | up)\n  align w.n % 2 == 0 : \"a\"\n"
                     "  activation silu\n  arg m = 1 trims w.n, w.k by m\n}\n"
                     "glue g {\n  package \"p\"\n  op f = \"a::b\"\n  arg x = 1\n}\n")
    kernel, glue = module.decls
    assert isinstance(kernel, A.KernelDecl) and isinstance(glue, A.GlueDecl)
    linear, halves, align, activation, arg = kernel.clauses
    assert isinstance(linear, A.ViewClause) and (linear.view, linear.roles) == ("linear", ())
    assert isinstance(halves, A.ViewClause) and (halves.view, halves.roles) == ("halves", ("gate", "up"))
    assert isinstance(align, A.AlignClause) and align.message == "a"
    assert isinstance(activation, A.ActivationClause)
    assert isinstance(arg, A.ArgClause) and [(r.tensor, r.axis) for r in arg.trims] == [("w", "n"), ("w", "k")]
    assert [p for p, _ in glue.package] == ["p"] and [(o, t) for o, t, _ in glue.ops] == [("f", "a::b")]
    assert [n for n, _, _ in glue.args] == ["x"]


def test_declarations_and_domains() -> None:
    module = _module("contract c\nsource \"s\"\npolicy fallback other\nparam r: int in -2..3 = 1\n"
                     "param s: int in {1, 2,}\nparam e: enum {a, b}\nparam b: bool\nlet l = -r\n"
                     "require not b : \"m\"\nadmit r >= 0 or b and true : \"n\"\nshard l over tp_size in blocks of 2\n")
    kinds = [type(d).__name__ for d in module.decls]
    assert kinds == ["ContractDecl", "SourceDecl", "PolicyDecl", "ParamDecl", "ParamDecl", "ParamDecl",
                     "ParamDecl", "LetDecl", "RuleDecl", "RuleDecl", "ShardDecl"]
    r, s, e, b = module.decls[3:7]
    assert isinstance(r, A.ParamDecl) and isinstance(r.domain, A.RangeDomain) and r.default == 1
    assert isinstance(s, A.ParamDecl) and isinstance(s.domain, A.SetDomain) and s.domain.values == (1, 2)
    assert isinstance(e, A.ParamDecl) and isinstance(e.domain, A.EnumDomain) and e.domain.members == ("a", "b")
    assert isinstance(b, A.ParamDecl) and isinstance(b.domain, A.BoolDomain)
    shard = module.decls[-1]
    assert isinstance(shard, A.ShardDecl) and isinstance(shard.blocks, A.IntLit)


def test_expressions() -> None:
    module = _module("let x = if a then match e { p => f(1, 2), _ => -t.n } else 3 * 4 + 5 != 6\n")
    (let,) = module.decls
    assert isinstance(let, A.LetDecl) and isinstance(let.value, A.If)
    chosen = let.value.then
    assert isinstance(chosen, A.Match) and chosen.subject.name == "e"
    call, neg = (arm.value for arm in chosen.arms)
    assert isinstance(call, A.Call) and len(call.args) == 2
    assert isinstance(neg, A.Unary) and isinstance(neg.operand, A.AxisSize)
    compare = let.value.orelse
    assert isinstance(compare, A.Binary) and compare.op == "!="


def test_literal_limits_are_diagnostics() -> None:
    module, diags = parse("param p: int in 0..99999999999999999999 = 99999999999999999999\n", FILE)
    assert module is None and [d.code for d in diags] == ["LC106", "LC106"]
    assert [d.span.column for d in diags] == [43, 20]  # the default is read before the domain
    module, diags = parse('source "a\\u0007"\nsource "\x01"\n', FILE)
    assert module is None and [d.code for d in diags] == ["LC108"]
