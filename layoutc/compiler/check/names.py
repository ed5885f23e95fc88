"""Name rules: what a declared name may be (LC204, LC203), defining it once (LC202), suggestions."""

from __future__ import annotations

import builtins
import difflib
import keyword
import re

from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.diagnostics import Related, Span

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_NAME = 64
# Names the generated module uses itself, plus the layer-level names it binds.
KEYWORDS = frozenset({
    "contract", "source", "policy", "param", "let", "require", "admit", "tensor", "kernel", "glue",
    "if", "then", "else", "and", "or", "not", "match", "true", "false", "in", "int", "enum", "when",
    "shard", "over", "blocks", "of", "models",
})
RESERVED = frozenset({
    "plan", "Plan", "torch", "math", "logging", "itertools", "dataclass", "dataclasses", "Any", "self", "cls",
    "config", "out", "rank", "full", "reason", "supported", "LayoutContractError", "KernelUnavailableError",
    "CONTRACT", "SOURCE_FILE", "SOURCE_SHA256", "SOURCES", "PROVED", "POLICY", "FALLBACK", "PACKAGE",
    "WORKAROUND_ENV", "code", "true", "false",
})


def suggest(name: str, candidates: list[str]) -> str | None:
    """`did you mean X?` among names of similar length (bounded work on huge inputs)."""
    near = [c for c in candidates if abs(len(c) - len(name)) <= 3][:400]
    close = difflib.get_close_matches(name[:MAX_NAME], near, n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None


def check_name(sink: Sink, name: str, span: Span) -> bool:
    """Whether `name` may name something in a contract: an identifier of at most MAX_NAME
    characters, not starting with `_` (LC204), and not a keyword, builtin or a name the
    generated module uses (LC203). Reports why not."""
    if not IDENT.match(name) or len(name) > MAX_NAME or name.startswith("_"):
        sink.error("LC204", span, f"`{name[:80]}` is not a valid name: use [A-Za-z][A-Za-z0-9_]*, "
                   f"at most {MAX_NAME} characters, not starting with `_`")
        return False
    if keyword.iskeyword(name) or keyword.issoftkeyword(name) or name in RESERVED or name in KEYWORDS \
            or name in dir(builtins):
        sink.error("LC203", span, f"`{name}` is reserved (a layoutc keyword, a Python keyword or builtin, or a name "
                   "the generated module uses)")
        return False
    return True


def define(scope: Scope, sink: Sink, name: str, span: Span) -> bool:
    """Declare `name` (a param, let or tensor) at `span`: a valid name defined once (LC202)."""
    if not check_name(sink, name, span):
        return False
    if name in scope.defined_at:
        sink.error("LC202", span, f"`{name}` is already defined",
                   related=(Related(scope.defined_at[name], "first defined here"),))
        return False
    scope.defined_at[name] = span
    return True
