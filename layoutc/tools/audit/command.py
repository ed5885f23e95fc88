"""``layoutc audit``: the subcommand, its ``--tp`` and ``--ep`` lists, and the contracts it loads."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from layoutc.compiler import ir
from layoutc.compiler.diagnostics import Diagnostic, Span
from layoutc.tools.audit.ep import ep_section
from layoutc.tools.audit.render import render_json, render_markdown, render_text
from layoutc.tools.audit.report import audit_report
from layoutc.tools.hfconfig import ModelConfigError, MoEModelConfig, load_model_config


def default_contracts_dir() -> Path | None:
    """The bundled contracts: the repository's ``contracts/`` in a source checkout or an
    editable install, else the installed data package ``layoutc_contracts`` (a
    non-editable install ships ``contracts/*.moe`` there; see pyproject.toml).
    ``None`` when neither exists."""
    repo = Path(__file__).resolve().parents[3]
    if (repo / "contracts").is_dir() and (repo / "pyproject.toml").is_file():
        return repo / "contracts"
    import importlib.util
    try:
        spec = importlib.util.find_spec("layoutc_contracts")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if Path(location).is_dir():
            return Path(location)
    return None


DEFAULT_CONTRACTS_DIR = default_contracts_dir()


MAX_TP_DEGREES = 64
MAX_TP = 1 << 20


def parse_tp(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4] (duplicates dropped, order kept); ValueError with a message.

    At most MAX_TP_DEGREES degrees, each in 1..MAX_TP (bounded work on any input)."""
    return parse_degrees(text, "--tp", "TP")


def parse_ep(text: str) -> list[int]:
    """``--ep "2,4"`` -> [2, 4], as :func:`parse_tp` (ValueError naming ``--ep``). A degree
    above a model's experts is not a parse error: its EP rows are refused with EP01."""
    return parse_degrees(text, "--ep", "EP")


def parse_degrees(text: str, flag: str, what: str) -> list[int]:
    """A comma-separated list of parallel degrees for ``flag``; ValueError with a message."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if len(part) > 20:
                raise ValueError
            value = int(part)
        except ValueError:
            raise ValueError(f"{flag}: {part[:40]!r} is not an integer (expected e.g. {flag} 1,2,4,8)") from None
        if not 1 <= value <= MAX_TP:
            raise ValueError(f"{flag}: {value} is not a {what} degree in 1..{MAX_TP}")
        if value not in values and len(values) >= MAX_TP_DEGREES:
            raise ValueError(f"{flag}: more than {MAX_TP_DEGREES} {what} degrees")
        if value not in values:
            values.append(value)
    if not values:
        raise ValueError(f"{flag} {text!r}: expected comma-separated {what} degrees, e.g. {flag} 1,2,4,8")
    return values


def load_contracts(paths: Sequence[str]) -> tuple[list[ir.Contract], str | None]:
    """Load contract files (folders expand to their ``*.moe``). Returns (contracts, error text).

    See :func:`load_contracts_diags` for the diagnostics themselves."""
    contracts, diags, sources = load_contracts_diags(paths)
    from layoutc.compiler.diagnostics import render_text as render_diags
    return contracts, (render_diags(diags, sources) if diags else None)


def load_contracts_diags(paths: Sequence[str]) -> tuple[list[ir.Contract], list[Diagnostic], dict[str, str]]:
    """Load contract files; returns (contracts, error diagnostics, sources by path).

    Raises:
        layoutc.compiler.safeio.UsageError: a folder holds no ``*.moe`` file.
    """
    from layoutc.compiler.diagnostics import has_errors
    from layoutc.compiler.safeio import contract_paths
    from layoutc.compiler.source import load

    files = contract_paths(paths)
    contracts: list[ir.Contract] = []
    seen: set[str] = set()
    problems: list[Diagnostic] = []
    sources: dict[str, str] = {}
    for path in files:
        key = os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        contract, diags, text = load(path)
        if text is not None:
            sources[path] = text
        if contract is None or has_errors(diags):
            problems.extend(d for d in diags if d.severity == "error")
            continue
        contracts.append(contract)
    return contracts, problems, sources


def _config_span(exc: ModelConfigError) -> Span:
    """Where a config error is: ``file:line:col`` when the message starts with it."""
    import re

    from layoutc.compiler.diagnostics import file_span
    match = re.match(r"(.*?):(\d+):(\d+): ", str(exc))
    if match and match.group(1) == exc.source:
        return file_span(exc.source, int(match.group(2)), int(match.group(3)))
    return file_span(exc.source)


def run_audit(args: argparse.Namespace) -> int:
    """The ``layoutc audit`` subcommand. 0 ok; 1 a contract has errors; 2 a bad config
    (LC704), no contracts (LC705), a bad --tp or --ep (LC801) or an unreadable contract (LC100).
    ``--ep`` adds each model's EP rows and the TP/EP side-by-side table (layoutc.tools.audit.ep).
    ``--engine`` (default ``vllm``) picks the bundled contracts by engine (layoutc.tools.audit.engines);
    two or more engines add the side-by-side table. Problems are diagnostics, printed in the report's format (json: a JSON list on
    stdout; text, markdown and github: ``--format`` of `layoutc check`)."""
    from layoutc.compiler.diagnostics import emit, error, exit_code, file_span
    from layoutc.compiler.safeio import UsageError
    fmt = getattr(args, "format", "text")
    diag_fmt = {"json": "json", "github": "github"}.get(fmt, "text")

    def fail(diags: list[Diagnostic], sources: dict[str, str] | None = None) -> int:
        emit(diags, sources or {}, diag_fmt)
        return exit_code(diags)

    from layoutc.tools.audit.engines import engine_of, engine_rows, parse_engines
    try:
        tps = parse_tp(str(args.tp))
        eps = parse_ep(str(args.ep)) if getattr(args, "ep", None) is not None else None
        engines = parse_engines(str(getattr(args, "engine", "vllm")))
    except ValueError as exc:
        return fail([error("LC801", file_span("<command line>"), str(exc))])
    models: list[tuple[str, MoEModelConfig]] = []
    for name in args.configs:
        try:
            config = load_model_config(name)
        except ModelConfigError as exc:
            message = str(exc)
            prefix = f"{exc.source}: "
            return fail([error("LC704", _config_span(exc), message.removeprefix(prefix))])
        if all(label != name for label, _ in models):
            models.append((name, config))
    default_dir = default_contracts_dir()
    if not args.contracts and default_dir is None:
        return fail([error("LC705", file_span("<command line>"), "no bundled contracts found (neither the "
                           "repository's contracts/ nor the installed layoutc_contracts package); "
                           "pass --contracts PATH...")])
    paths = list(args.contracts) if args.contracts else [str(default_dir)]
    try:
        contracts, problems, sources = load_contracts_diags(paths)
    except UsageError as exc:
        return fail([error("LC705", file_span("<command line>"), str(exc).removeprefix("layoutc: error[LC801]: "))])
    if problems:
        return fail(problems, sources)
    if not args.contracts:
        # the bundled set: each engine's own contracts (vLLM's are today's default set)
        contracts = [c for c in contracts if engine_of(c) in engines]
    if not contracts:
        return fail([error("LC705", file_span("<command line>"), f"no contracts (*.moe) found in {', '.join(paths)}")])
    report = audit_report(models, tps, contracts)
    side_by_side = engine_rows(report, contracts, engines, tps) if len(engines) > 1 else None
    ep = None if eps is None else ep_section(report, eps, contracts, tps)
    if fmt == "json":
        sys.stdout.write(render_json(report, side_by_side, ep))
    elif fmt == "markdown":
        sys.stdout.write(render_markdown(report, side_by_side, ep))
    else:
        sys.stdout.write(render_text(report, side_by_side, ep))
    return 0
