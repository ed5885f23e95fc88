"""Render verification verdicts: Alive2-style text, a JSON document, GitHub annotations.

The JSON schema is documented in docs/verification.md and tested. Every finding is
also a :class:`~layoutc.compiler.diagnostics.Diagnostic` (:func:`findings`): LC601
counterexample, LC602 vacuous, LC603 inconclusive (the solver gave up), LC604 a
warning; a verifier that fails inside layoutc is LC900 (made by the driver,
layoutc/compiler/verify/driver.py, and passed in as `failures`), and the JSON tells the
two inconclusive causes apart (``cause``: ``solver`` or ``tool``). Rendering only: this
module imports neither the driver nor the cache nor the solver.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from layoutc.compiler.diagnostics import Diagnostic, Span, error, file_span, span_dict, warning
from layoutc.compiler.verify.verdicts import STATUSES, Result, Verdict

__all__ = ["FINDING_CODES", "STATUSES", "Result", "findings", "render_github", "render_json",
           "render_text_report", "summarize", "verdict_dict"]

FINDING_CODES = {"counterexample": "LC601", "vacuous": "LC602", "inconclusive": "LC603"}


def _span(path: str, v: Verdict) -> Span:
    if v.span.line > 0:
        return Span(path, v.span.line, max(1, v.span.column), v.span.end_line, v.span.end_column)
    return file_span(path)


def findings(results: Sequence[Result]) -> list[Diagnostic]:
    """Counterexamples, vacuous and inconclusive verdicts and warnings as diagnostics."""
    out: list[Diagnostic] = []
    for path, _contract, verdicts in results:
        for v in verdicts:
            code = FINDING_CODES.get(v.status)
            if code is not None:
                message = f"{v.property}: {v.status}: {v.detail}"
                if v.counterexample is not None and v.status == "counterexample":
                    message += f" [{_config(v.counterexample.config)}]"
                out.append(error(code, _span(path, v), message,
                                 help=f"`layoutc verify {path}` prints the counterexample's picture"
                                 if v.status == "counterexample" else None))
            for w in v.warnings:
                # a warning about one rule says "line N: ..."; point at that rule
                at = re.match(r"line (\d+): ", w)
                span = file_span(path, int(at.group(1))) if at else _span(path, v)
                out.append(warning("LC604", span, f"{v.property}: {w}"))
    return out


def summarize(results: list[Result]) -> dict[str, int]:
    counts: dict[str, int] = {s: 0 for s in STATUSES}
    for _, _, verdicts in results:
        for v in verdicts:
            counts[v.status] += 1
    counts["contracts"] = len(results)
    counts["properties"] = sum(len(v) for _, _, v in results)
    return counts


def _config(values: dict[str, Any]) -> str:
    """`name=value, ...` in name order: the same text whether the verdict was just proved or
    read back from the verdict cache (which stores the configuration with sorted keys)."""
    return ", ".join(f"{k}={values[k]}" for k in sorted(values))


def render_text_report(results: list[Result]) -> str:
    lines: list[str] = []
    for path, contract, verdicts in results:
        lines.append(f"{path}: contract {contract.name}")
        for v in verdicts:
            lines.append(f"  {v.property:<17} {v.status:<15} {v.seconds:6.3f}s  {v.detail}")
            cex = v.counterexample
            if cex is not None and v.status == "counterexample":
                lines.append(f"      config:  {_config(cex.config)}")
                if cex.derived:
                    lines.append(f"      derived: {_config(cex.derived)}")
                lines.append(f"      where:   {cex.where}")
                lines.extend(f"      | {row}" for row in cex.picture)
            for w in v.warnings:
                lines.append(f"      warning: {w}")
        lines.append("")
    s = summarize(results)
    lines.append("Summary:")
    lines.append(f"  {s['properties']} properties in {s['contracts']} contract(s)")
    for status in ("proved", "counterexample", "inconclusive", "vacuous"):
        lines.append(f"  {s[status]:>4} {status}")
    lines.append(f"  {s['info']:>4} informational")
    return "\n".join(lines) + "\n"


def verdict_dict(v: Verdict) -> dict[str, Any]:
    """One property's verdict; ``cause`` is ``"solver"`` for an inconclusive one (the
    solver answered unknown, timed out, or the budget was spent), else null."""
    return {
        "cause": "solver" if v.status == "inconclusive" else None,
        "id": v.property,
        "status": v.status,
        "detail": v.detail,
        "counterexample": v.counterexample.as_dict() if v.counterexample and v.status == "counterexample" else None,
        "seconds": round(v.seconds, 6),
        "queries": v.queries,
        "line": v.span.line,
        "warnings": list(v.warnings),
    }


def render_json(results: list[Result], failures: Sequence[Diagnostic] = (),
                diagnostics: Sequence[Diagnostic] = ()) -> str:
    """``{"contracts", "summary", "tool_failures", "diagnostics"}`` (docs/verification.md).

    ``tool_failures`` lists contracts the verifier could not finish because of a bug in
    layoutc (``cause: "tool"``); an inconclusive property is ``cause: "solver"``.
    """
    summary = summarize(results)
    summary["tool_failures"] = len(failures)
    doc = {
        "contracts": [
            {"contract": c.name, "file": path, "properties": [verdict_dict(v) for v in verdicts]}
            for path, c, verdicts in results
        ],
        "summary": summary,
        "tool_failures": [{"file": d.span.file, "cause": "tool", "message": d.message, "code": d.code}
                          for d in failures],
        "diagnostics": [{"code": d.code, "severity": d.severity, "message": d.message, "span": span_dict(d.span),
                         "help": d.help} for d in diagnostics],
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(text: str) -> str:
    return _escape(text).replace(":", "%3A").replace(",", "%2C")


def render_github(results: list[Result], failures: Sequence[Diagnostic] = ()) -> str:
    """GitHub Actions workflow commands (::error / ::warning) with file, line and code."""
    lines: list[str] = []
    for d in failures:
        lines.append(f"::error file={_escape_prop(d.span.file)},line=1,title={_escape_prop('layoutc ' + d.code)}::"
                     f"{_escape(d.message)}")
    for path, _contract, verdicts in results:
        for v in verdicts:
            where = f"file={_escape_prop(path)},line={max(1, v.span.line)}"
            if v.status in ("counterexample", "vacuous", "inconclusive"):
                msg = v.detail
                if v.counterexample is not None and v.status == "counterexample":
                    msg += f" [{_config(v.counterexample.config)}]"
                title = _escape_prop(f"layoutc {FINDING_CODES[v.status]} {v.property}: {v.status}")
                lines.append(f"::error {where},title={title}::{_escape(msg)}")
            for w in v.warnings:
                lines.append(f"::warning {where},title={_escape_prop('layoutc LC604 ' + v.property)}::{_escape(w)}")
    s = summarize(results)
    lines.append(f"layoutc verify: {s['proved']} proved, {s['counterexample']} counterexample, "
                 f"{s['inconclusive']} inconclusive, {s['vacuous']} vacuous")
    return "\n".join(lines) + "\n"
