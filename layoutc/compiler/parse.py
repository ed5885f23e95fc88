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
from importlib import resources
from pathlib import Path

import lark
from lark import Token, Tree
from lark import lexer as lark_lexer

from layoutc.compiler import syntax as A
from layoutc.compiler.diagnostics import Diagnostic, Span, error

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


def _expected(names: set[str] | frozenset[str]) -> str:
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


def _depth_ok(tree: Tree) -> bool:
    stack: list[tuple[Tree, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        for child in node.children:
            if isinstance(child, Tree):
                stack.append((child, depth + 1))
    return True


def _deepest(tree: Tree) -> Tree:
    best, best_depth = tree, 0
    stack: list[tuple[Tree, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > best_depth:
            best, best_depth = node, depth
        for child in node.children:
            if isinstance(child, Tree):
                stack.append((child, depth + 1))
    return best


def parse(text: str, file: str) -> tuple[A.Module | None, list[Diagnostic]]:
    """Parse one contract. Returns the module, or None with at least one error."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        return None, [error("LC105", Span(file, 1, 1, 1, 1),
                            f"contract file is larger than {MAX_BYTES} bytes")]
    tokens = sum(1 for m in _TOKENISH.finditer(text) if not m.group().startswith("#"))
    if tokens > MAX_TOKENS:
        return None, [error("LC105", Span(file, 1, 1, 1, 1),
                            f"contract has more than {MAX_TOKENS} tokens; real contracts have a few thousand")]
    try:
        tree = _parser().parse(text)
    except lark.UnexpectedCharacters as exc:
        span = Span(file, exc.line, exc.column, exc.line, exc.column + 1)
        char = text[exc.pos_in_stream] if 0 <= exc.pos_in_stream < len(text) else "?"
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


def _span(file: str, node: Tree | Token) -> Span:
    if isinstance(node, Token):
        line = node.line or 1
        col = node.column or 1
        return Span(file, line, col, node.end_line or line, node.end_column or col + 1)
    meta = node.meta
    if meta.empty:
        return Span(file, 1, 1, 1, 1)
    return Span(file, meta.line, meta.column, meta.end_line, meta.end_column)


class _Builder:
    """Turns the lark tree into AST nodes (depth is bounded by MAX_DEPTH)."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.diags: list[Diagnostic] = []

    def sp(self, node: Tree | Token) -> Span:
        return _span(self.file, node)

    def int_token(self, tok: Token) -> int:
        text = str(tok)
        value = int(text) if len(text) <= 30 else MAX_INT + 1  # never convert huge digit strings
        if value > MAX_INT:
            self.diags.append(error("LC106", self.sp(tok), f"integer literal exceeds {MAX_INT}"))
            return 0
        return value

    def signed(self, node: Tree) -> int:
        sign, num = node.children
        value = self.int_token(num)
        return -value if sign is not None else value

    def string(self, tok: Token) -> str:
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
    def decl(self, node: Tree) -> A.Decl:
        kind = node.data
        c = node.children
        span = self.sp(node)
        if kind == "contract_decl":
            return A.ContractDecl(str(c[0]), span)
        if kind == "source_decl":
            return A.SourceDecl(self.string(c[0]), span)
        if kind == "shard_decl":
            blocks = self.expr(c[2].children[0]) if len(c) > 2 and c[2] is not None else None
            return A.ShardDecl(str(c[0]), str(c[1]), span, blocks)
        if kind == "policy_error":
            return A.PolicyDecl("error", None, span)
        if kind == "policy_fallback":
            return A.PolicyDecl("fallback", str(c[0]), span)
        if kind == "param_decl":
            default = self.signed(c[2]) if len(c) > 2 and c[2] is not None else None
            return A.ParamDecl(str(c[0]), self.domain(c[1]), span, default)
        if kind == "let_decl":
            return A.LetDecl(str(c[0]), self.expr(c[1]), span)
        if kind in ("require_decl", "admit_decl"):
            rule_kind = "require" if kind == "require_decl" else "admit"
            return A.RuleDecl(rule_kind, self.expr(c[0]), self.string(c[1]), span)
        if kind == "tensor_decl":
            return self.tensor(node)
        if kind == "kernel_decl":
            return A.KernelDecl(str(c[0]), tuple(self.kernel_clause(k) for k in c[1:]), span)
        if kind == "glue_decl":
            return self.glue(node)
        raise AssertionError(f"unknown declaration {kind}")

    def domain(self, node: Tree) -> A.Domain:
        span = self.sp(node)
        if node.data == "range_domain":
            return A.RangeDomain(self.signed(node.children[0]), self.signed(node.children[1]), span)
        if node.data == "set_domain":
            return A.SetDomain(tuple(self.signed(v) for v in node.children), span)
        if node.data == "enum_domain":
            return A.EnumDomain(tuple(str(t) for t in node.children),
                                tuple(self.sp(t) for t in node.children), span)
        return A.BoolDomain(span)

    def tensor(self, node: Tree) -> A.TensorDecl:
        name, kind, projection, optional, *clauses = node.children
        axes: list[A.AxisDecl] = []
        fills: list[A.Fill] = []
        tails: list[A.Fill] = []
        storage: list[tuple[str, Span]] = []
        code: list[tuple[int, int, Span]] = []
        decode: list[A.Expr] = []
        for cl in clauses:
            span = self.sp(cl)
            if cl.data == "axis_clause":
                guard = cl.children[2] if len(cl.children) > 2 else None
                axes.append(A.AxisDecl(str(cl.children[0]), self.axis_spec(cl.children[1]), span,
                                       self.expr(guard) if guard is not None else None))
            elif cl.data == "fill_clause":
                fills.append(self.fill(cl.children[0]))
            elif cl.data == "tail_fill_clause":
                tails.append(self.fill(cl.children[0], span))
            elif cl.data == "storage_clause":
                storage.append((str(cl.children[0]), span))
            elif cl.data == "code_clause":
                code.append((self.signed(cl.children[0]), self.signed(cl.children[1]), span))
            elif cl.data == "decode_clause":
                decode.append(self.expr(cl.children[0]))
        kind_name = kind.data.removeprefix("kind_")
        return A.TensorDecl(str(name), kind_name, str(projection),  # type: ignore[arg-type]
                            optional is not None, tuple(axes), tuple(fills), tuple(storage),
                            tuple(code), tuple(decode), self.sp(node), tuple(tails))

    def fill(self, node: Tree, span: Span | None = None) -> A.Fill:
        """A `fill` value; `span`: where to point at it (the whole `tail fill` clause)."""
        span = self.sp(node) if span is None else span
        if node.data == "fill_uninit":
            return A.Fill("uninit", 0, span)
        value = self.signed(node.children[0])
        return A.Fill("decoded" if node.data == "fill_decoded" else "value", value, span)

    def axis_spec(self, node: Tree) -> A.AxisSpec:
        span = self.sp(node)
        c = node.children
        if node.data == "plain_axis":
            return A.PlainAxis(self.expr(c[0]), span)
        if node.data == "pad_axis":
            return A.PaddedAxis("pad", (), self.expr(c[0]), self.expr(c[1]), self.pack(c[2]), span)
        if node.data == "segmented_axis":
            layout = c[0].data.removeprefix("layout_")
            return A.PaddedAxis(layout, (str(c[1]), str(c[2])),  # type: ignore[arg-type]
                                self.expr(c[3]), self.expr(c[4]), self.pack(c[5]), span)
        if node.data == "groups_axis":
            return A.GroupsAxis(str(c[0]), str(c[1]), self.expr(c[2]), span)
        return A.LikeAxis(str(c[0]), str(c[1]), span)

    def pack(self, node: Tree | None) -> int:
        if node is None:
            return 1
        return self.int_token(node.children[0])

    def kernel_clause(self, node: Tree) -> A.KernelClause:
        span = self.sp(node)
        c = node.children
        if node.data == "view_clause":
            view = c[2].data.removeprefix("view_")
            roles = tuple(str(r) for r in c[2].children)
            return A.ViewClause(str(c[0]), str(c[1]), view, roles, span)  # type: ignore[arg-type]
        if node.data == "align_clause":
            return A.AlignClause(self.expr(c[0]), self.string(c[1]), span)
        if node.data == "activation_clause":
            return A.ActivationClause(self.expr(c[0]), span)
        refs = tuple(A.AxisRef(str(r.children[0]), str(r.children[1]), self.sp(r))
                     for r in c[2].children)
        return A.ArgClause(str(c[0]), self.expr(c[1]), refs, self.expr(c[3]), span)

    def glue(self, node: Tree) -> A.GlueDecl:
        kind, *clauses = node.children
        package: list[tuple[str, Span]] = []
        ops: list[tuple[str, str, Span]] = []
        args: list[tuple[str, A.Expr, Span]] = []
        for cl in clauses:
            span = self.sp(cl)
            if cl.data == "package_clause":
                package.append((self.string(cl.children[0]), span))
            elif cl.data == "op_clause":
                ops.append((str(cl.children[0]), self.string(cl.children[1]), span))
            else:
                args.append((str(cl.children[0]), self.expr(cl.children[1]), span))
        return A.GlueDecl(str(kind), tuple(package), tuple(ops), tuple(args), self.sp(node))

    # ---- expressions ----
    def expr(self, node: Tree | Token) -> A.Expr:
        span = self.sp(node)
        if isinstance(node, Token):  # pragma: no cover - every atom is aliased
            raise AssertionError(f"bare token {node!r}")
        c = node.children
        data = node.data
        if data == "int_lit":
            return A.IntLit(self.int_token(c[0]), span)
        if data == "true_lit":
            return A.BoolLit(True, span)
        if data == "false_lit":
            return A.BoolLit(False, span)
        if data == "name":
            return A.Name(str(c[0]), span)
        if data == "axis_size":
            return A.AxisSize(str(c[0]), str(c[1]), span)
        if data == "call":
            args = tuple(self.expr(a) for a in c[1:] if a is not None)
            return A.Call(str(c[0]), args, span)
        if data == "neg":
            return A.Unary("-", self.expr(c[1]), span)
        if data == "not_op":
            return A.Unary("not", self.expr(c[0]), span)
        if data in ("binary", "compare"):
            return A.Binary(str(c[1]), self.expr(c[0]), self.expr(c[2]), span)
        if data == "and_op":
            return A.Binary("and", self.expr(c[0]), self.expr(c[1]), span)
        if data == "or_op":
            return A.Binary("or", self.expr(c[0]), self.expr(c[1]), span)
        if data == "if_expr":
            return A.If(self.expr(c[0]), self.expr(c[1]), self.expr(c[2]), span)
        if data == "match_expr":
            subject = A.Name(str(c[0]), self.sp(c[0]))
            arms = tuple(A.MatchArm(str(a.children[0]), self.expr(a.children[1]), self.sp(a))
                         for a in c[1:])
            return A.Match(subject, arms, span)
        raise AssertionError(f"unknown expression node {data}")
