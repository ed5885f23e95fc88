"""Python text as ruff's formatter writes it, for the generated modules (emit/render.py, ep.py).

The emitter writes generated code already formatted, so `layoutc compile` and `--check`
give the same bytes with or without ruff installed (ruff is no dependency of the compiler);
tests/compiler/test_generated.py holds generated/ to `ruff format --check`. Lines stay within WIDTH
columns; a construct that does not fit is broken one item per line with a trailing comma
(ruff keeps such a construct broken under the project's 120 columns), and an expression too
long for one line keeps the emitter's own wrapping under `# fmt: skip`.
"""

from __future__ import annotations

import re
import textwrap


def literal(value: object) -> str:
    """A Python literal as ruff's formatter writes it: strings in double quotes unless that
    needs more escapes, tuples with a trailing comma only when they hold one item."""
    if isinstance(value, str):
        text = repr(value)
        return f'"{text[1:-1]}"' if text[0] == "'" and '"' not in value else text
    if isinstance(value, tuple):
        items = [literal(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return repr(value)


WIDTH = 99  # generated lines stay under 100 columns (tests/runtime/test_runtime.py)


def call(head: str, args: list[str], indent: int, suffix: str = "") -> list[str]:
    """`head(args)suffix` at `indent` as ruff formats it: on one line when it fits in WIDTH
    columns, else one argument per line with a trailing comma (which keeps ruff from joining
    the lines again under the project's 120 columns); an argument that is itself a call or a
    bracketed literal too long for its line is broken the same way."""
    pad = " " * indent
    one = f"{pad}{head}({', '.join(args)}){suffix}"
    if len(one) <= WIDTH or not args:
        return [one]
    return [f"{pad}{head}(", *(line for a in args for line in _item(a, indent + 4)), f"{pad}){suffix}"]


_OPEN = re.compile(r"^([\w.=]*)([(\[{])")
_CLOSE = {"(": ")", "[": "]", "{": "}"}


def _item(arg: str, indent: int) -> list[str]:
    """One argument (or item) with its trailing comma, broken over lines where it must be."""
    pad = " " * indent
    line = f"{pad}{arg},"
    m = _OPEN.match(arg)
    if len(line) <= WIDTH or m is None or not _closes_at_end(arg[len(m.group(1)) :]):
        return [line]
    head, bracket = m.groups()
    inner = _split_args(arg[len(head) + 1 : -1])
    if not head and bracket == "(" and len(inner) == 1 and not arg[1:-1].rstrip().endswith(","):
        # a parenthesised expression (or generator), not a tuple: a trailing comma would make it
        # one (`max((a if c else b), g)` would compare an int with a tuple), so it stays whole
        return [line]
    return [
        f"{pad}{head}{bracket}",
        *(x for part in inner for x in _item(part.strip(), indent + 4)),
        f"{pad}{_CLOSE[bracket]},",
    ]


def statement(prefix: str, expr: str, suffix: str = "", indent: int = 4) -> list[str]:
    """`prefix expr suffix` (an assignment, or an `if` header), with the redundant outer
    parentheses ruff removes dropped; an expression too long for one line keeps the emitter's
    wrapping (`wrap_code`), marked `# fmt: skip` so ruff leaves it as written."""
    bare = expr[1:-1] if _one_group(expr) else expr
    one = f"{' ' * indent}{prefix}{bare}{suffix}"
    if len(one) <= WIDTH:
        return [one]
    m = re.match(r"^[\w.]+\(", bare)
    if m and _closes_at_end(bare[m.end() - 1 :]) and not suffix:  # one call: its arguments broken, as ruff does
        return call(prefix + bare[: m.end() - 1], [a.strip() for a in _split_args(bare[m.end() : -1])], indent)
    lines = wrap_code(prefix, expr, suffix, indent)
    return [*lines[:-1], lines[-1] + "  # fmt: skip"]


def _bare(expr: str) -> str:
    """`expr` without the outer parentheses ruff drops from a keyword argument's value."""
    return expr[1:-1] if _one_group(expr) else expr


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


def _closes_at_end(text: str) -> bool:
    """Whether `text` opens a bracket at its first character that closes at its last (string
    literals respected)."""
    depth, quote = 0, ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote and text[i - 1] != "\\" else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i == len(text) - 1
    return False


def packed(head: str, items: list[str], close: str, indent: int = 4) -> list[str]:
    """`head` + items + `close` for a long flat collection (a module's `__all__`, a parameter's
    domain, the fields `plan()` returns): on one line when it fits, else the items packed into
    lines of WIDTH columns at `indent`, kept so by `# fmt: skip` (ruff would write one item per
    line)."""
    one = f"{head}{', '.join(items)}{close.lstrip()}"
    if len(one) <= WIDTH:
        return [one]
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + len(item) + 2 <= WIDTH:
            lines[-1] += f" {item},"
        else:
            lines.append(f"{' ' * indent}{item},")
    return [head, *lines, f"{close}  # fmt: skip"]
