"""Parse contract text into the AST (``syntax.py``) with lark's LALR parser.

``parse(text, file)`` never raises on bad input: it returns ``(module | None,
diagnostics)``. Limits (file size, nesting depth, literal size, declaration
count) are checked here so later recursive passes stay shallow.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal, TypeVar, assert_never, get_args

import lark
from lark import Token, Tree
from lark import lexer as lark_lexer

from layoutc.compiler import syntax as A
from layoutc.compiler.diagnostics import Diagnostic, Span, error
from layoutc.runtime.algebra import ViewWord, Word

MAX_BYTES = 1 << 20  # 1 MiB
MAX_DEPTH = 64  # nesting of the parse tree below one declaration
MAX_DECLS = 2000
MAX_TOKENS = 100_000  # real contracts have a few thousand; this bounds parse time
_TOKENISH = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|[A-Za-z0-9_]+|\S')
MAX_INT = 1 << 62

_EXPECTED_NAMES = {
    "NAME": "a name", "INT": "an integer", "STRING": "a string", "MINUS": "'-'", "PLUS": "'+'",
    "MUL": "'*', '/' or '%'", "CMP": "a comparison", "LPAR": "'('", "RPAR": "')'",
    "LBRACE": "'{'", "RBRACE": "'}'", "COMMA": "','", "COLON": "':'", "DOT": "'.'",
    "EQUAL": "'='", "VBAR": "'|'", "$END": "end of file",
}


_LARK_OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": True}


@functools.cache
def _parser() -> lark.Lark:
    """The LALR parser of grammar.lark. Building it takes 0.2-0.4 s, so the built tables are
    kept like bytecode: in layoutc/__pycache__, keyed by the grammar, lark's version, the
    options and Python's version, written atomically; a missing, unreadable or damaged file
    is rebuilt (it only ever saves time)."""
    grammar = resources.files("layoutc.compiler").joinpath("grammar.lark").read_text(encoding="utf-8")
    key = hashlib.sha256(f"{lark.__version__}\0{sys.version_info[:2]}\0{sorted(_LARK_OPTIONS.items())}\0"
                         f"{grammar}".encode()).hexdigest()[:24]
    path = Path(__file__).resolve().parent / "__pycache__" / f"grammar.{key}.lark-tables"
    try:
        with open(path, "rb") as fh:
            parser = lark.Lark.load(fh)
        if isinstance(parser, lark.Lark):
            return parser
    except Exception:  # missing or damaged: rebuilt below
        pass
    # lark checks the terminals' regexes for collisions with interegular, when installed: a
    # grammar-author's warning that costs half the build; the parser is the same without it.
    saved = getattr(lark_lexer, "has_interegular", False)
    lark_lexer.has_interegular = False
    try:
        parser = lark.Lark(grammar, **_LARK_OPTIONS)
    finally:
        lark_lexer.has_interegular = saved
    _save_tables(parser, path)
    return parser


def _save_tables(parser: lark.Lark, path: Path) -> None:
    try:
        path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".grammar-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                parser.save(fh)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except Exception:  # a read-only install, a full disk: no cache
        return


def _expected(names: Iterable[str]) -> str:
    shown = sorted({_EXPECTED_NAMES.get(n, _literal(n)) for n in names})
    if len(shown) > 8:
        shown = [*shown[:8], "..."]
    return ", ".join(shown)


def _literal(terminal: str) -> str:
    try:
        pattern = _parser().get_terminal(terminal).pattern
    except KeyError:
        return terminal.lower()
    if pattern.type == "str":
        return repr(pattern.value).replace('"', "'")
    return terminal.lower()


def _depth_ok(tree: Node) -> bool:
    stack: list[tuple[Node, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        for child in node.children:
            if isinstance(child, Tree):
                stack.append((child, depth + 1))
    return True


def _deepest(tree: Node) -> Node:
    best, best_depth = tree, 0
    stack: list[tuple[Node, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > best_depth:
            best, best_depth = node, depth
        for child in node.children:
            if isinstance(child, Tree):
                stack.append((child, depth + 1))
    return best


def _hidden_in_comments(text: str, file: str) -> list[Diagnostic]:
    """LC109 for each comment holding a control or unprintable character other than a tab.

    The parser ends a comment at `\n` only; an editor or a web view may break the line at U+2028,
    U+2029 or U+0085, or reorder it at a bidi control (U+202A-U+202E, U+2066-U+2069), and so show
    text after it (a `require`) that the parser reads as comment (Trojan Source, CVE-2021-42574).
    Strings refuse the same characters (LC108)."""
    out: list[Diagnostic] = []
    for m in _TOKENISH.finditer(text):
        if not m.group().startswith("#"):
            continue
        for offset, ch in enumerate(m.group()):
            if ch != "\t" and not ch.isprintable():
                pos = m.start() + offset
                line = text.count("\n", 0, pos) + 1
                col = pos - (text.rfind("\n", 0, pos) + 1) + 1
                out.append(error("LC109", Span(file, line, col, line, col + 1),
                                 f"comment contains the control or unprintable character U+{ord(ch):04X}, which "
                                 "an editor may show as a line break or a reordering of what follows",
                                 help="delete it: a comment may hold any printable text"))
                break
    return out


def parse(text: str, file: str) -> tuple[A.Module | None, list[Diagnostic]]:
    """Parse one contract. Returns the module, or None with at least one error."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        return None, [error("LC105", Span(file, 1, 1, 1, 1),
                            f"contract file is larger than {MAX_BYTES} bytes")]
    tokens = sum(1 for m in _TOKENISH.finditer(text) if not m.group().startswith("#"))
    if tokens > MAX_TOKENS:
        return None, [error("LC105", Span(file, 1, 1, 1, 1),
                            f"contract has more than {MAX_TOKENS} tokens; real contracts have a few thousand")]
    hidden = _hidden_in_comments(text, file)
    if hidden:
        return None, hidden
    try:
        tree = _parser().parse(text)
    except lark.UnexpectedCharacters as exc:
        span = Span(file, exc.line, exc.column, exc.line, exc.column + 1)
        pos = exc.pos_in_stream
        char = text[pos] if pos is not None and 0 <= pos < len(text) else "?"
        hint = None
        if not char.isascii():
            hint = "names are ASCII only: [A-Za-z_][A-Za-z0-9_]*"
        return None, [error("LC101", span, f"unexpected character {char!r}", help=hint)]
    except lark.UnexpectedEOF as exc:
        lines = text.splitlines() or [""]
        span = Span(file, len(lines), len(lines[-1]) + 1, len(lines), len(lines[-1]) + 1)
        return None, [error("LC103", span, f"unexpected end of file; expected {_expected(exc.expected)}")]
    except lark.UnexpectedToken as exc:
        tok = exc.token
        if tok.type == "$END":
            lines = text.splitlines() or [""]
            span = Span(file, len(lines), len(lines[-1]) + 1, len(lines), len(lines[-1]) + 1)
            return None, [error("LC103", span,
                                f"unexpected end of file; expected {_expected(exc.expected)}")]
        line = tok.line or 1
        col = tok.column or 1
        span = Span(file, line, col, tok.end_line or line, tok.end_column or col + 1)
        return None, [error("LC102", span,
                            f"unexpected {str(tok)!r}; expected {_expected(exc.expected)}")]
    except RecursionError:  # pragma: no cover - lark's LALR parser is iterative
        return None, [error("LC104", Span(file, 1, 1, 1, 1), "contract is nested too deeply")]
    if len(tree.children) > MAX_DECLS:
        return None, [error("LC107", Span(file, 1, 1, 1, 1),
                            f"more than {MAX_DECLS} declarations in one contract")]
    for decl in tree.children:
        if isinstance(decl, Tree) and not _depth_ok(decl):
            deep = _deepest(decl)
            span = _span(file, deep) if deep.meta and not deep.meta.empty else _span(file, decl)
            return None, [error("LC104", span,
                                f"nesting deeper than {MAX_DEPTH} levels; split the expression with `let`")]
    builder = _Builder(file)
    decls = tuple(builder.decl(d) for d in tree.children)
    if builder.diags:
        return None, builder.diags
    return A.Module(file, decls), []


# ---- building the AST --------------------------------------------------------------
#
# Each dispatcher names the rules it handles as a Literal type: mypy checks that its
# `match` covers every one (`assert_never`), and `_rule` checks at run time that the node
# is one of them. A rule of grammar.lark that no dispatcher knows is a GrammarError (a bug
# in layoutc, never bad input), not a silent default.

Node = Tree[Token]
RuleT = TypeVar("RuleT", bound=str)

DeclRule = Literal["contract_decl", "source_decl", "models_decl", "route_decl", "shard_decl", "ep_decl", "policy_error", "policy_fallback", "param_decl",
                   "let_decl", "require_decl", "admit_decl", "tensor_decl", "kernel_decl", "glue_decl"]
DomainRule = Literal["range_domain", "set_domain", "enum_domain", "bool_domain"]
KindRule = Literal["kind_weight", "kind_scale", "kind_zero", "kind_bias"]
TensorClauseRule = Literal["axis_clause", "fill_clause", "tail_fill_clause", "storage_clause", "code_clause",
                           "decode_clause"]
FillRule = Literal["fill_number", "fill_decoded", "fill_uninit"]
AxisSpecRule = Literal["plain_axis", "pad_axis", "segmented_axis", "groups_axis", "like_axis"]
LayoutRule = Literal["layout_halves", "layout_concat", "layout_interleave"]
KernelClauseRule = Literal["view_clause", "align_clause", "activation_clause", "arg_clause"]
ViewRule = Literal["view_halves", "view_interleave", "view_linear"]
GlueClauseRule = Literal["package_clause", "op_clause", "glue_arg_clause"]
ExprRule = Literal["int_lit", "true_lit", "false_lit", "name", "axis_size", "call", "neg", "not_op", "binary",
                   "compare", "and_op", "or_op", "if_expr", "match_expr"]

# The rules each dispatcher handles, and the ones read in place by their parent.
DISPATCHED: dict[str, frozenset[str]] = {
    "declaration": frozenset(get_args(DeclRule)), "domain": frozenset(get_args(DomainRule)),
    "tensor kind": frozenset(get_args(KindRule)), "tensor clause": frozenset(get_args(TensorClauseRule)),
    "fill value": frozenset(get_args(FillRule)), "axis spec": frozenset(get_args(AxisSpecRule)),
    "layout": frozenset(get_args(LayoutRule)), "kernel clause": frozenset(get_args(KernelClauseRule)),
    "view": frozenset(get_args(ViewRule)), "glue clause": frozenset(get_args(GlueClauseRule)),
    "expression": frozenset(get_args(ExprRule)),
}
EpClauseRule = Literal["ep_redundant", "ep_load_stride", "ep_foreign_raw", "ep_foreign_masked", "ep_unpadded"]
DISPATCHED["ep clause"] = frozenset(get_args(EpClauseRule))
STRUCTURAL = frozenset({"start", "signed", "model_releases", "shard_blocks", "ep_placements", "optional", "pack", "pack_order", "axis_refs", "axis_ref", "arm"})


class GrammarError(AssertionError):
    """The lark tree holds a rule or child the AST builder does not know: grammar.lark and
    parse.py disagree. A bug in layoutc, never a property of the input."""


def _rule(node: Node, what: str, rules: Mapping[str, RuleT]) -> RuleT:
    """`node`'s rule name, one of `rules` (the `what` dispatcher's), else GrammarError."""
    rule = rules.get(node.data)
    if rule is None:
        raise GrammarError(f"unknown {what} rule `{node.data}` (grammar.lark and parse.py disagree)")
    return rule


def _tree(child: object) -> Node:
    if not isinstance(child, Tree):
        raise GrammarError(f"expected a subtree, found {child!r}")
    return child


def _token(child: object) -> Token:
    if not isinstance(child, Token):
        raise GrammarError(f"expected a token, found {child!r}")
    return child


def _span(file: str, node: Node | Token) -> Span:
    if isinstance(node, Token):
        line = node.line or 1
        col = node.column or 1
        return Span(file, line, col, node.end_line or line, node.end_column or col + 1)
    meta = node.meta
    if meta.empty:
        return Span(file, 1, 1, 1, 1)
    return Span(file, meta.line, meta.column, meta.end_line, meta.end_column)


_DECL_RULES: dict[str, DeclRule] = {r: r for r in get_args(DeclRule)}
_DOMAIN_RULES: dict[str, DomainRule] = {r: r for r in get_args(DomainRule)}
_KIND_RULES: dict[str, KindRule] = {r: r for r in get_args(KindRule)}
_TENSOR_CLAUSE_RULES: dict[str, TensorClauseRule] = {r: r for r in get_args(TensorClauseRule)}
_FILL_RULES: dict[str, FillRule] = {r: r for r in get_args(FillRule)}
_AXIS_SPEC_RULES: dict[str, AxisSpecRule] = {r: r for r in get_args(AxisSpecRule)}
_LAYOUT_RULES: dict[str, LayoutRule] = {r: r for r in get_args(LayoutRule)}
_KERNEL_CLAUSE_RULES: dict[str, KernelClauseRule] = {r: r for r in get_args(KernelClauseRule)}
_VIEW_RULES: dict[str, ViewRule] = {r: r for r in get_args(ViewRule)}
_GLUE_CLAUSE_RULES: dict[str, GlueClauseRule] = {r: r for r in get_args(GlueClauseRule)}
_EXPR_RULES: dict[str, ExprRule] = {r: r for r in get_args(ExprRule)}
_EP_CLAUSE_RULES: dict[str, EpClauseRule] = {r: r for r in get_args(EpClauseRule)}


class _Builder:
    """Turns the lark tree into AST nodes (depth is bounded by MAX_DEPTH)."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.diags: list[Diagnostic] = []

    def sp(self, node: Node | Token) -> Span:
        return _span(self.file, node)

    def int_token(self, child: object) -> int:
        tok = _token(child)
        text = str(tok)
        value = int(text) if len(text) <= 30 else MAX_INT + 1  # never convert huge digit strings
        if value > MAX_INT:
            self.diags.append(error("LC106", self.sp(tok), f"integer literal exceeds {MAX_INT}"))
            return 0
        return value

    def signed(self, child: object) -> int:
        sign, num = _tree(child).children
        value = self.int_token(num)
        return -value if sign is not None else value

    def string(self, child: object) -> str:
        tok = _token(child)
        raw = str(tok)[1:-1]
        out: list[str] = []
        i = 0
        while i < len(raw):
            c = raw[i]
            if c == "\\" and i + 1 < len(raw):
                nxt = raw[i + 1]
                out.append({"n": "\n", "t": "\t", '"': '"', "\\": "\\"}.get(nxt, "\\" + nxt))
                i += 2
                continue
            out.append(c)
            i += 1
        text = "".join(out)
        if any(not ch.isprintable() for ch in text):
            self.diags.append(error("LC108", self.sp(tok),
                                    "string literal contains a control or unprintable character"))
        return text

    # ---- declarations ----
    def decl(self, child: object) -> A.Decl:
        node = _tree(child)
        c = node.children
        span = self.sp(node)
        rule = _rule(node, "declaration", _DECL_RULES)
        match rule:
            case "contract_decl":
                return A.ContractDecl(str(c[0]), span)
            case "source_decl":
                return A.SourceDecl(self.string(c[0]), span)
            case "models_decl":
                releases = tuple((self.string(t), self.sp(_token(t))) for t in _tree(c[1]).children)
                return A.ModelsDecl(str(c[0]), releases, self.string(c[2]), self.sp(_token(c[2])),
                                    self.expr(c[3]) if c[3] is not None else None, span)
            case "route_decl":
                formats = tuple((self.string(t), self.sp(_token(t))) for t in _tree(c[1]).children)
                return A.RouteDecl(str(c[0]), formats, self.int_token(c[2]) if c[2] is not None else None, span)
            case "shard_decl":
                blocks = self.expr(_tree(c[2]).children[0]) if len(c) > 2 and c[2] is not None else None
                return A.ShardDecl(str(c[0]), str(c[1]), span, blocks)
            case "ep_decl":
                names = tuple(str(n) for n in _tree(c[2]).children)
                return self.ep(str(c[0]), str(c[1]), names, span, c[3:])
            case "policy_error":
                return A.PolicyDecl("error", None, span)
            case "policy_fallback":
                return A.PolicyDecl("fallback", str(c[0]), span)
            case "param_decl":
                default = self.signed(c[2]) if len(c) > 2 and c[2] is not None else None
                return A.ParamDecl(str(c[0]), self.domain(c[1]), span, default)
            case "let_decl":
                return A.LetDecl(str(c[0]), self.expr(c[1]), span)
            case "require_decl":
                return A.RuleDecl("require", self.expr(c[0]), self.string(c[1]), span)
            case "admit_decl":
                return A.RuleDecl("admit", self.expr(c[0]), self.string(c[1]), span)
            case "tensor_decl":
                return self.tensor(node)
            case "kernel_decl":
                return A.KernelDecl(str(c[0]), tuple(self.kernel_clause(k) for k in c[1:]), span)
            case "glue_decl":
                return self.glue(node)
            case _:
                assert_never(rule)

    def domain(self, child: object) -> A.Domain:
        node = _tree(child)
        span = self.sp(node)
        rule = _rule(node, "domain", _DOMAIN_RULES)
        match rule:
            case "range_domain":
                return A.RangeDomain(self.signed(node.children[0]), self.signed(node.children[1]), span)
            case "set_domain":
                return A.SetDomain(tuple(self.signed(v) for v in node.children), span)
            case "enum_domain":
                members = [_token(t) for t in node.children]
                return A.EnumDomain(tuple(str(t) for t in members), tuple(self.sp(t) for t in members), span)
            case "bool_domain":
                return A.BoolDomain(span)
            case _:
                assert_never(rule)

    def tensor(self, node: Node) -> A.TensorDecl:
        name, kind, projection, optional, *clauses = node.children
        parts = _TensorParts()
        for cl in clauses:
            self.tensor_clause(_tree(cl), parts)
        return A.TensorDecl(str(name), self.tensor_kind(kind), str(projection),
                            optional is not None, tuple(parts.axes), tuple(parts.fills), tuple(parts.storage),
                            tuple(parts.code), tuple(parts.decode), self.sp(node), tuple(parts.tails))

    def tensor_kind(self, child: object) -> Literal["weight", "scale", "zero", "bias"]:
        rule = _rule(_tree(child), "tensor kind", _KIND_RULES)
        match rule:
            case "kind_weight":
                return "weight"
            case "kind_scale":
                return "scale"
            case "kind_zero":
                return "zero"
            case "kind_bias":
                return "bias"
            case _:
                assert_never(rule)

    def tensor_clause(self, cl: Node, parts: _TensorParts) -> None:
        span = self.sp(cl)
        c = cl.children
        rule = _rule(cl, "tensor clause", _TENSOR_CLAUSE_RULES)
        match rule:
            case "axis_clause":
                guard = c[2] if len(c) > 2 else None
                parts.axes.append(A.AxisDecl(str(c[0]), self.axis_spec(c[1]), span,
                                             self.expr(guard) if guard is not None else None))
            case "fill_clause":
                parts.fills.append(self.fill(c[0]))
            case "tail_fill_clause":
                parts.tails.append(self.fill(c[0], span))
            case "storage_clause":
                parts.storage.append((str(c[0]), span))
            case "code_clause":
                parts.code.append((self.signed(c[0]), self.signed(c[1]), span))
            case "decode_clause":
                parts.decode.append(self.expr(c[0]))
            case _:
                assert_never(rule)

    def fill(self, child: object, span: Span | None = None) -> A.Fill:
        """A `fill` value; `span`: where to point at it (the whole `tail fill` clause)."""
        node = _tree(child)
        span = self.sp(node) if span is None else span
        rule = _rule(node, "fill value", _FILL_RULES)
        match rule:
            case "fill_uninit":
                return A.Fill("uninit", 0, span)
            case "fill_decoded":
                return A.Fill("decoded", self.signed(node.children[0]), span)
            case "fill_number":
                return A.Fill("value", self.signed(node.children[0]), span)
            case _:
                assert_never(rule)

    def axis_spec(self, child: object) -> A.AxisSpec:
        node = _tree(child)
        span = self.sp(node)
        c = node.children
        rule = _rule(node, "axis spec", _AXIS_SPEC_RULES)
        match rule:
            case "plain_axis":
                return A.PlainAxis(self.expr(c[0]), span)
            case "pad_axis":
                return A.PaddedAxis(Word.PAD, (), self.expr(c[0]), self.expr(c[1]), *self.pack(c[2]), span)
            case "segmented_axis":
                return A.PaddedAxis(self.layout(c[0]), (str(c[1]), str(c[2])),
                                    self.expr(c[3]), self.expr(c[4]), *self.pack(c[5]), span)
            case "groups_axis":
                return A.GroupsAxis(str(c[0]), str(c[1]), self.expr(c[2]), span)
            case "like_axis":
                return A.LikeAxis(str(c[0]), str(c[1]), span)
            case _:
                assert_never(rule)

    def layout(self, child: object) -> Word:
        rule = _rule(_tree(child), "layout", _LAYOUT_RULES)
        match rule:
            case "layout_halves":
                return Word.HALVES
            case "layout_concat":
                return Word.CONCAT
            case "layout_interleave":
                return Word.INTERLEAVE
            case _:
                assert_never(rule)

    def pack(self, child: object) -> tuple[int, tuple[int, ...] | None, Span | None]:
        """`pack N [order (...)]`: (N, the stated slot order or None, the order's span)."""
        if child is None:
            return 1, None, None
        factor, order = _tree(child).children
        if order is None:
            return self.int_token(factor), None, None
        node = _tree(order)
        return self.int_token(factor), tuple(self.int_token(t) for t in node.children), self.sp(node)

    def kernel_clause(self, child: object) -> A.KernelClause:
        node = _tree(child)
        span = self.sp(node)
        c = node.children
        rule = _rule(node, "kernel clause", _KERNEL_CLAUSE_RULES)
        match rule:
            case "view_clause":
                view = _tree(c[2])
                return A.ViewClause(str(c[0]), str(c[1]), self.view(view), tuple(str(r) for r in view.children), span)
            case "align_clause":
                return A.AlignClause(self.expr(c[0]), self.string(c[1]), span)
            case "activation_clause":
                return A.ActivationClause(self.expr(c[0]), span)
            case "arg_clause":
                refs = tuple(A.AxisRef(str(r.children[0]), str(r.children[1]), self.sp(r))
                             for r in map(_tree, _tree(c[2]).children))
                return A.ArgClause(str(c[0]), self.expr(c[1]), refs, self.expr(c[3]), span)
            case _:
                assert_never(rule)

    def view(self, node: Node) -> ViewWord:
        rule = _rule(node, "view", _VIEW_RULES)
        match rule:
            case "view_halves":
                return ViewWord.HALVES
            case "view_interleave":
                return ViewWord.INTERLEAVE
            case "view_linear":
                return ViewWord.LINEAR
            case _:
                assert_never(rule)

    def glue(self, node: Node) -> A.GlueDecl:
        kind, *clauses = node.children
        package: list[tuple[str, Span]] = []
        ops: list[tuple[str, str, Span]] = []
        args: list[tuple[str, A.Expr, Span]] = []
        for cl in map(_tree, clauses):
            span = self.sp(cl)
            c = cl.children
            rule = _rule(cl, "glue clause", _GLUE_CLAUSE_RULES)
            match rule:
                case "package_clause":
                    package.append((self.string(c[0]), span))
                case "op_clause":
                    ops.append((str(c[0]), self.string(c[1]), span))
                case "glue_arg_clause":
                    args.append((str(c[0]), self.expr(c[1]), span))
                case _:
                    assert_never(rule)
        return A.GlueDecl(str(kind), tuple(package), tuple(ops), tuple(args), self.sp(node))

    def ep(self, experts: str, count: str, placement: tuple[str, ...], span: Span, clauses: Sequence[object]) -> A.EpDecl:
        """`experts NUM over EP placement P` and its clauses (the first of a repeated one counts)."""
        redundant: str | None = None
        stride: A.Expr | None = None
        foreign: Literal["raw", "masked"] | None = None
        unpadded = False
        for cl in map(_tree, clauses):
            rule = _rule(cl, "ep clause", _EP_CLAUSE_RULES)
            match rule:
                case "ep_redundant":
                    redundant = redundant or str(cl.children[0])
                case "ep_load_stride":
                    stride = stride or self.expr(cl.children[0])
                case "ep_foreign_raw":
                    foreign = foreign or "raw"
                case "ep_foreign_masked":
                    foreign = foreign or "masked"
                case "ep_unpadded":
                    unpadded = True
                case _:
                    assert_never(rule)
        return A.EpDecl(experts, count, placement, span, redundant, stride, foreign, unpadded)

    # ---- expressions ----
    def expr(self, child: object) -> A.Expr:
        node = _tree(child)  # every atom is aliased: a bare token here is a grammar bug
        span = self.sp(node)
        c = node.children
        rule = _rule(node, "expression", _EXPR_RULES)
        match rule:
            case "int_lit":
                return A.IntLit(self.int_token(c[0]), span)
            case "true_lit":
                return A.BoolLit(True, span)
            case "false_lit":
                return A.BoolLit(False, span)
            case "name":
                return A.Name(str(c[0]), span)
            case "axis_size":
                return A.AxisSize(str(c[0]), str(c[1]), span)
            case "call":
                return A.Call(str(c[0]), tuple(self.expr(a) for a in c[1:] if a is not None), span)
            case "neg":
                return A.Unary("-", self.expr(c[1]), span)
            case "not_op":
                return A.Unary("not", self.expr(c[0]), span)
            case "binary" | "compare":
                return A.Binary(str(c[1]), self.expr(c[0]), self.expr(c[2]), span)
            case "and_op":
                return A.Binary("and", self.expr(c[0]), self.expr(c[1]), span)
            case "or_op":
                return A.Binary("or", self.expr(c[0]), self.expr(c[1]), span)
            case "if_expr":
                return A.If(self.expr(c[0]), self.expr(c[1]), self.expr(c[2]), span)
            case "match_expr":
                subject = _token(c[0])
                arms = tuple(A.MatchArm(str(a.children[0]), self.expr(a.children[1]), self.sp(a))
                             for a in map(_tree, c[1:]))
                return A.Match(A.Name(str(subject), self.sp(subject)), arms, span)
            case _:
                assert_never(rule)


@dataclass
class _TensorParts:
    """A tensor declaration's clauses, sorted by kind as they are read (in source order)."""

    axes: list[A.AxisDecl] = field(default_factory=list)
    fills: list[A.Fill] = field(default_factory=list)
    tails: list[A.Fill] = field(default_factory=list)
    storage: list[tuple[str, Span]] = field(default_factory=list)
    code: list[tuple[int, int, Span]] = field(default_factory=list)
    decode: list[A.Expr] = field(default_factory=list)
