"""Render verification verdicts: Alive2-style text, a JSON document, GitHub annotations.

The JSON schema is documented in docs/verification.md and tested.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .verdicts import Verdict

if TYPE_CHECKING:
    from . import ir

Result = tuple[str, "ir.Contract", list[Verdict]]  # a verdict-cache hit carries a CachedContract (name, file)
STATUSES = ("proved", "counterexample", "inconclusive", "vacuous", "info")


def summarize(results: list[Result]) -> dict[str, int]:
    counts = {s: 0 for s in STATUSES}
    for _, _, verdicts in results:
        for v in verdicts:
            counts[v.status] += 1
    counts["contracts"] = len(results)
    counts["properties"] = sum(len(v) for _, _, v in results)
    return counts


def _config(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


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
    return {
        "id": v.property,
        "status": v.status,
        "detail": v.detail,
        "counterexample": v.counterexample.as_dict() if v.counterexample and v.status == "counterexample" else None,
        "seconds": round(v.seconds, 6),
        "queries": v.queries,
        "line": v.span.line,
        "warnings": list(v.warnings),
    }


def render_json(results: list[Result]) -> str:
    doc = {
        "contracts": [
            {"contract": c.name, "file": path, "properties": [verdict_dict(v) for v in verdicts]}
            for path, c, verdicts in results
        ],
        "summary": summarize(results),
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(text: str) -> str:
    return _escape(text).replace(":", "%3A").replace(",", "%2C")


def render_github(results: list[Result]) -> str:
    """GitHub Actions workflow commands (::error / ::warning) with file and line."""
    lines: list[str] = []
    for path, _contract, verdicts in results:
        for v in verdicts:
            where = f"file={_escape_prop(path)},line={max(1, v.span.line)}"
            if v.status in ("counterexample", "vacuous", "inconclusive"):
                msg = v.detail
                if v.counterexample is not None and v.status == "counterexample":
                    msg += f" [{_config(v.counterexample.config)}]"
                title = _escape_prop(f"layoutc {v.property}: {v.status}")
                lines.append(f"::error {where},title={title}::{_escape(msg)}")
            for w in v.warnings:
                lines.append(f"::warning {where},title={_escape_prop('layoutc ' + v.property)}::{_escape(w)}")
    s = summarize(results)
    lines.append(f"layoutc verify: {s['proved']} proved, {s['counterexample']} counterexample, "
                 f"{s['inconclusive']} inconclusive, {s['vacuous']} vacuous")
    return "\n".join(lines) + "\n"
