"""The `models` pass: what engine object a contract stands for, and in which releases.

`models ENGINE {RELEASE, ...} "module:Qualified.name" [when COND]` (docs/language.md, "What a
contract models"). Checked once every parameter is declared, so a `models` line may stand
anywhere (by convention beside the `source` lines it follows):

* ENGINE is one of ``interface.ENGINES`` (LC230);
* the target is `importable.module:Qualified.name`, dotted identifiers on both sides (LC231);
* the release set is not empty and lists no release twice (LC232), and each release is a
  version as the engine's package reports it: `0.32.0`, `2.13.0`, `0.5.23rc1` (LC233);
* COND reads parameters and enum members only (a `let` or an unknown name is LC234), is a
  bool (LC301), and is comparisons and `and`/`or`/`not` over them (no `if`/`match`, LC234),
  so that it is data a tool evaluates on a parameter dict with no compiler (runtime
  ``interface.Condition``);
* no two lines name the same engine, release and target (LC235): one line per target and
  release set, with the conditions joined by `or`.
"""

from __future__ import annotations

import re

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.exprs import expect, expr
from layoutc.compiler.check.names import suggest
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.diagnostics import Related, Span
from layoutc.runtime.interface import ENGINES

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
TARGET = re.compile(rf"({_DOTTED}):({_DOTTED})\Z")
# A release as a package reports its version, without a local part: N.N[.N...], then an
# optional pre-release (a1, b2, rc3) and .postN / .devN (PEP 440's public version, normalised).
RELEASE = re.compile(r"[0-9]+(?:\.[0-9]+)+(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?\Z")


def check_models(scope: Scope, sink: Sink) -> None:
    """Pass: every `models` line into ``scope.models`` (after the declarations pass, so a
    `when` may read any parameter)."""
    seen: dict[tuple[str, str, str], Span] = {}
    for d in scope.module.decls:
        if not isinstance(d, A.ModelsDecl):
            continue
        found = _models(scope, sink, d)
        if found is None:
            continue
        clash = next((seen[(found.engine, r, found.target)] for r in found.releases
                      if (found.engine, r, found.target) in seen), None)
        if clash is not None:
            sink.error("LC235", d.span, f"a second `models` line names {found.engine} `{found.target}` in a release "
                       "the first names too", related=(Related(clash, "first stated here"),),
                       help="state each target once per release: join the conditions with `or`")
            continue
        for r in found.releases:
            seen[(found.engine, r, found.target)] = d.span
        scope.models.append(found)


def _models(scope: Scope, sink: Sink, d: A.ModelsDecl) -> ir.Models | None:
    ok = True
    if d.engine not in ENGINES:
        hint = suggest(d.engine, list(ENGINES))
        sink.error("LC230", d.span, f"unknown engine `{d.engine[:80]}`: a contract models one of "
                   + ", ".join(ENGINES), help=hint)
        ok = False
    if TARGET.match(d.target) is None:
        sink.error("LC231", d.target_span, f"`models` target {d.target[:120]!r} is not "
                   "\"importable.module:Qualified.name\"",
                   help='write the module path, a colon, then the class or function: '
                        '"vllm.model_executor.layers.fused_moe.experts.cpu_moe:CPUExpertsInt8"')
        ok = False
    ok = _releases(sink, d) and ok
    when = _when(scope, sink, d.when) if d.when is not None else None
    if not ok or (d.when is not None and when is None):
        return None
    return ir.Models(d.engine, tuple(r for r, _ in d.releases), d.target, when, d.span)


def _releases(sink: Sink, d: A.ModelsDecl) -> bool:
    if not d.releases:
        sink.error("LC232", d.span, "a `models` line names no release",
                   help='list the releases it models: models vllm {"0.32.0"} "module:Name"')
        return False
    ok = True
    listed: dict[str, Span] = {}
    for release, span in d.releases:
        if RELEASE.match(release) is None:
            sink.error("LC233", span, f"release {release[:80]!r} is not a version (N.N.N, as the engine's "
                       "package reports it, without a local `+...` part)")
            ok = False
        elif release in listed:
            sink.error("LC232", span, f"release {release!r} is listed twice",
                       related=(Related(listed[release], "first listed here"),))
            ok = False
        listed.setdefault(release, span)
    return ok


def _when(scope: Scope, sink: Sink, node: A.Expr) -> ir.Expr | None:
    """The typed `when` condition, or None after reporting why it is not one over parameters."""
    for name, span in _names(node):
        if name in scope.params or name in scope.members:
            continue
        if name in scope.poisoned and name not in scope.lets:
            return None  # its declaration failed; said there
        what = "a `let`" if name in scope.lets or name in scope.later_lets else (
            "a tensor" if name in scope.tensor_names else "not a parameter of this contract")
        hint = suggest(name, list(scope.params) + list(scope.members))
        sink.error("LC234", span, f"a `models ... when` reads `{name[:80]}`, which is {what}: it reads "
                   "parameters and enum members only", help=hint)
        return None
    for sub in _walk(node):
        if isinstance(sub, (A.If, A.Match, A.AxisSize)):
            sink.error("LC234", sub.span, "a `models ... when` is comparisons, arithmetic and `and`/`or`/`not` "
                       "over parameters: no `if`, `match` or axis size")
            return None
    cond = expr(scope, sink, node)
    if cond is None or not expect(sink, cond, ir.BOOL):
        return None
    return cond


def _walk(node: A.Expr) -> list[A.Expr]:
    out: list[A.Expr] = []
    stack = [node]
    while stack:
        n = stack.pop()
        out.append(n)
        match n:
            case A.Unary():
                stack.append(n.operand)
            case A.Binary():
                stack += [n.right, n.left]
            case A.Call():
                stack += reversed(n.args)
            case A.If():
                stack += [n.orelse, n.then, n.cond]
            case A.Match():
                stack += [a.value for a in reversed(n.arms)] + [n.subject]
            case _:
                pass
    return out


def _names(node: A.Expr) -> list[tuple[str, Span]]:
    return [(n.name, n.span) for n in _walk(node) if isinstance(n, A.Name)]
