"""Command-line interface: `layoutc check | verify | compile | explain | audit | run | formats | rule`.

`main(argv) -> int` never raises: exit 0 ok, 1 findings (diagnostics, a
counterexample, a vacuous contract, drift), 2 an input that cannot be used (a
missing or unreadable file, LC100; a bad config, LC704), a usage error (LC801),
inconclusive verification (LC603) or an internal error (LC900, with a request to
file it). Every problem is a :class:`~layoutc.compiler.diagnostics.Diagnostic`, printed by
``--format text|json|github``; nothing in the compiler imports this module.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from layoutc import __version__
from layoutc.clihelp import HELP, POSITIONALS
from layoutc.compiler import ir
from layoutc.compiler.diagnostics import CODES, Diagnostic, emit, exit_code, has_errors, render_text
from layoutc.compiler.safeio import UsageError
from layoutc.compiler.safeio import contract_paths as _contract_paths


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse quotes the bad value whole and unescaped (`invalid int value: '<100,000 x>'`,
        # a Cyrillic e read as e): escaped and cut as every untrusted value (diagnostics.shown)
        text = message.encode("ascii", "backslashreplace").decode("ascii")
        if len(text) > 300:
            text = f"{text[:300]}... ({len(message)} characters)"
        raise _Usage(f"{self.prog}: error[LC801]: {text}")


def contract_paths(paths: Sequence[str]) -> list[str]:
    """Expand directories into their `*.moe` files (sorted); keep files as given.

    A directory with no contracts is a usage error (a mistyped path must not pass CI).
    (Kept here for callers; the implementation is :func:`layoutc.compiler.safeio.contract_paths`.)
    """
    try:
        return _contract_paths(list(paths))
    except UsageError as exc:
        raise _Usage(str(exc)) from None


def _check_jobs() -> None:
    """LC802 for a bad `$LAYOUTC_JOBS` before any work (verify.driver.jobs_setting)."""
    from layoutc.compiler.verify.driver import jobs_setting
    try:
        jobs_setting()
    except UsageError as exc:
        raise _Usage(str(exc)) from None


MAX_BUDGET_S = 86_400.0  # one day per contract
MAX_TIMEOUT_MS = 3_600_000  # z3 takes an unsigned 32-bit timeout; one hour is plenty
MAX_SEED = (1 << 32) - 1  # z3's random_seed is unsigned 32-bit


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= MAX_BUDGET_S:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds in (0, {MAX_BUDGET_S:g}], got {text}")
    return value


def _bounded_int(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text) if len(text) <= 20 else None
        except ValueError:
            value = None
        if value is None:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text[:40]!r}")
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in {low}..{high}, got {value}")
        return value
    return parse


Loaded = list[tuple[str, ir.Contract | None, list[Diagnostic]]]  # (path, contract, its diagnostics)


def _load_all(paths: Sequence[str]) -> tuple[Loaded, list[Diagnostic], dict[str, str]]:
    from layoutc.compiler.check.routes import conflicts
    from layoutc.compiler.source import load
    loaded: Loaded = []
    all_diags: list[Diagnostic] = []
    sources: dict[str, str] = {}
    for path in contract_paths(paths):
        contract, diags, text = load(path)
        if text is not None:
            sources[path] = text
        all_diags.extend(diags)
        loaded.append((path, contract, diags))
    # LC241: two contracts of the files given serve one format on one route at one rank (check/routes.py)
    all_diags.extend(conflicts(c for _, c, _ in loaded if c is not None))
    return loaded, all_diags, sources


def _contracts(loaded: Loaded) -> list[tuple[str, ir.Contract]]:
    """(path, contract) of every loaded file, once the diagnostics hold no error (then each
    path has its contract; one without is a bug in source.load, reported as LC900 by main)."""
    out: list[tuple[str, ir.Contract]] = []
    for path, contract, _ in loaded:
        if contract is None:
            raise AssertionError(f"{path}: source.load gave no contract and no error")
        out.append((path, contract))
    return out


# ---- check -----------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    """`layoutc check PATH...`: parse and check (no solver); prints `PATH: ok (NAME)` per contract."""
    loaded, diags, sources = _load_all(args.paths)
    emit(diags, sources, args.format)
    code = exit_code(diags)
    if code == 0 and args.format == "text":
        for path, contract in _contracts(loaded):
            print(f"{path}: ok ({contract.name})")
    return code


# ---- verify ----------------------------------------------------------------------


def cmd_verify(args: argparse.Namespace) -> int:
    """`layoutc verify PATH...`: 0 all proved, 1 a counterexample or a vacuous contract, 2 inconclusive."""
    from layoutc.compiler.verify.driver import verify_files
    from layoutc.compiler.verify.report import findings, render_github, render_json, render_text_report, summarize
    from layoutc.compiler.verify.verdicts import Options
    options = Options(timeout_ms=args.timeout_ms, seed=args.seed, budget_s=args.budget_s)
    _check_jobs()
    outcome = verify_files(contract_paths(args.paths), options, use_cache=not args.no_cache)
    diags, sources, results, failures = outcome.diagnostics, outcome.sources, outcome.results, outcome.failures
    if has_errors(diags):
        emit(diags, sources, args.format)
        return exit_code(diags)
    if diags and args.format == "text":
        sys.stderr.write(render_text(diags, sources))
    found = findings(results) + failures
    if args.format == "json":
        sys.stdout.write(render_json(results, failures, diags + found))
    elif args.format == "github":
        sys.stdout.write(render_github(results, failures))
    else:
        sys.stdout.write(render_text_report(results))
        emit(found, sources, "text")
    summary = summarize(results)
    if summary["inconclusive"] or failures:
        return 2
    if summary["counterexample"] or summary["vacuous"]:
        return 1
    return 0


# ---- compile ---------------------------------------------------------------------


def cmd_compile(args: argparse.Namespace) -> int:
    """`layoutc compile PATH... --out DIR [--check]`: one module per contract (or the drift, exit 1)."""
    from layoutc.compiler.emit.compile import compile_contracts
    if not args.no_verify:
        _check_jobs()
    loaded, diags, sources = _load_all(args.paths)
    if has_errors(diags):
        emit(diags, sources, args.format)
        return exit_code(diags)
    code, found = compile_contracts(_contracts(loaded), args.out, check=args.check,
                                    verify_first=not args.no_verify, fmt=args.format, use_cache=not args.no_cache)
    emit(found, sources, args.format)
    return code


# ---- explain / audit / rule --------------------------------------------------------


def cmd_explain(args: argparse.Namespace) -> int:
    """`layoutc explain CONTRACT --set NAME=VALUE...` (layoutc.tools.explain)."""
    from layoutc.tools.explain import explain
    return explain(args.contract, args.set or [], fmt=args.format, engines=args.engine)


def cmd_audit(args: argparse.Namespace) -> int:
    """`layoutc audit CONFIG... --tp ...` (layoutc.tools.audit.run_audit)."""
    from layoutc.tools.audit import run_audit
    return run_audit(args)


def cmd_kit(args: argparse.Namespace) -> int:
    """`layoutc kit CONTRACT --path DRIVER --out FILE` (layoutc.tools.kit.write); `--list` the drivers."""
    from layoutc.tools.kit.write import KitError, driven, drivers, write
    if args.list:
        for name, d in drivers().items():
            print(f"{name}: {d.engine} -> {', '.join(driven(d))}")
        return 0
    if not (args.contract and args.path and args.out):
        raise _Usage("layoutc kit: error[LC801]: give CONTRACT, --path DRIVER and --out FILE (or --list)")
    try:
        out = write(args.contract, args.path, args.out, args.generated)
    except KitError as exc:
        sys.stderr.write(f"layoutc kit: error[{exc.code}]: {exc}\n")
        return 2
    print(f"{out}: kit for {args.path}")
    return 0


def cmd_rule(args: argparse.Namespace) -> int:
    """`layoutc rule CODE`: the code's documentation (docs/language.md); LC801 for an unknown code.
    `layoutc rule` or `rule --list`: every registered code and its one-line title."""
    from layoutc.compiler.ruledoc import rule_text
    if args.code is None or args.list:
        if args.code is not None:
            raise _Usage("layoutc rule: error[LC801]: give a CODE or --list, not both")
        sys.stdout.write("".join(f"{code}  {title}\n" for code, title in sorted(CODES.items())))
        return 0
    text = rule_text(args.code)
    if text is None:
        raise _Usage(f"layoutc rule: error[LC801]: unknown code {args.code[:40]!r}; {len(CODES)} codes are "
                     "registered (docs/language.md, section 10.2)")
    sys.stdout.write(text)
    return 0


def cmd_formats(args: argparse.Namespace) -> int:
    """`layoutc formats [NAME]`: the built-in checkpoint formats, or one as a --format-file."""
    import json

    from layoutc.tools.checkpoints.formats import FORMATS as BUILT_IN
    from layoutc.tools.checkpoints.formats import describe_formats, format_json
    if args.name is None:
        sys.stdout.write(describe_formats())
        return 0
    if args.name not in BUILT_IN:
        raise _Usage(f"layoutc formats: error[LC801]: no built-in format {args.name[:40]!r}; built in: "
                     f"{', '.join(sorted(BUILT_IN))}")
    sys.stdout.write(json.dumps(format_json(BUILT_IN[args.name]), indent=2) + "\n")
    return 0


FORMATS = ("text", "json", "github")


def _sub(sub: Any, name: str, short: str) -> argparse.ArgumentParser:
    """A subcommand parser with its description, examples and exit codes (layoutc.clihelp)."""
    description, epilog = HELP[name]
    parser: argparse.ArgumentParser = sub.add_parser(name, help=short, description=description, epilog=epilog,
                                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The `layoutc` argument parser; a usage error raises `_Usage` (LC801) instead of exiting."""
    parser = _Parser(prog="layoutc", description="MoE weight-layout contracts: check, verify, compile.")
    parser.add_argument("--version", action="version", version=f"layoutc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = _sub(sub, "check", "parse and check contracts (no solver)")
    p.add_argument("paths", nargs="+", metavar="PATH", help=POSITIONALS["check", "PATH"])
    p.add_argument("--format", choices=FORMATS, default="text", help="how to print problems: text (default), json, github")
    p.set_defaults(func=cmd_check)

    p = _sub(sub, "verify", "prove pad-soundness with z3 for every admitted configuration")
    p.add_argument("paths", nargs="+", metavar="PATH", help=POSITIONALS["verify", "PATH"])
    p.add_argument("--format", choices=FORMATS, default="text", help="how to print problems: text (default), json, github")
    p.add_argument("--timeout-ms", type=_bounded_int(1, MAX_TIMEOUT_MS), default=2000,
                   help="per-query solver timeout (default 2000)")
    p.add_argument("--seed", type=_bounded_int(0, MAX_SEED), default=0, help="solver random seed (default 0)")
    p.add_argument("--budget-s", type=_positive_float, default=8.0,
                   help="wall-time budget per contract, in seconds (default 8); past it, verdicts are inconclusive")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the verdict cache")
    p.set_defaults(func=cmd_verify)

    p = _sub(sub, "compile", "render each contract into a standalone Python module")
    p.add_argument("paths", nargs="+", metavar="PATH", help=POSITIONALS["compile", "PATH"])
    p.add_argument("--out", required=True, metavar="DIR", help="the folder of generated modules (e.g. generated)")
    p.add_argument("--check", action="store_true", help="compare with DIR instead of writing; exit 1 on drift")
    p.add_argument("--no-verify", action="store_true", help="skip verification (the header then says so)")
    p.add_argument("--format", choices=FORMATS, default="text", help="how to print problems (default text)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the verdict cache")
    p.set_defaults(func=cmd_compile)

    p = _sub(sub, "explain", "print a configuration's plan and a picture of each padded tensor")
    p.add_argument("contract", metavar="CONTRACT", help=POSITIONALS["explain", "CONTRACT"])
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="a parameter value (repeatable)")
    p.add_argument("--format", choices=FORMATS, default="text", help="how to print problems (default text)")
    p.add_argument("--engine", default=None, metavar="ENGINES",
                   help="engines whose rule to draw each rank's slice under, comma-separated: vllm, sglang "
                        "(as in audit); another engine's rule is its CPU contract for the same format")
    p.set_defaults(func=cmd_explain)

    p = _sub(sub, "audit", "for model configs and TP degrees, which kernels take the fast path")
    p.add_argument("configs", nargs="+", metavar="CONFIG", help=POSITIONALS["audit", "CONFIG"])
    p.add_argument("--tp", default="1,2,4,8,16", help="comma-separated TP degrees (default 1,2,4,8,16)")
    p.add_argument("--ep", default=None, metavar="DEGREES",
                   help="comma-separated EP degrees: add each rank's experts, memory and pad under expert "
                        "parallelism, side by side with the TP degrees (docs/audit.md, \"Expert parallelism\")")
    p.add_argument("--contracts", nargs="+", metavar="PATH", default=None,
                   help="contract files or folders to audit instead of the bundled ones")
    p.add_argument("--engine", default="vllm", metavar="ENGINES",
                   help="engines whose bundled contracts to audit, comma-separated: vllm, sglang (default vllm); "
                        "two or more add a side-by-side table of each engine's CPU layout")
    p.add_argument("--format", choices=("text", "json", "markdown", "github"), default="text",
                   help="the report's format; problems are printed as diagnostics in it (github: as text)")
    p.set_defaults(func=cmd_audit)

    from layoutc.tools.run import add_parser as add_run
    add_run(sub)

    p = _sub(sub, "kit", "write a pytest module that holds an engine's own pad code to a contract")
    p.add_argument("contract", metavar="CONTRACT", nargs="?", help=POSITIONALS["kit", "CONTRACT"])
    p.add_argument("--path", metavar="DRIVER", help="the engine path to drive (layoutc kit --list names them)")
    p.add_argument("--out", metavar="FILE", help="the kit to write (a test_*.py file)")
    p.add_argument("--generated", metavar="MODULE", default=None,
                   help="the generated module's import name in the kit (default layoutc_generated.<contract>)")
    p.add_argument("--list", action="store_true", help="list the drivers with their contracts and engine")
    p.set_defaults(func=cmd_kit)

    p = _sub(sub, "formats", "list the built-in checkpoint formats of `layoutc run` (docs/formats.md)")
    from layoutc.tools.checkpoints.formats import FORMATS as BUILT_IN
    p.add_argument("name", nargs="?", metavar="NAME", help="a built-in model_type, one of: " + ", ".join(sorted(BUILT_IN)))
    p.set_defaults(func=cmd_formats)

    p = _sub(sub, "rule", "print a diagnostic code's documentation (e.g. layoutc rule LC201)")
    p.add_argument("code", metavar="CODE", nargs="?", help=POSITIONALS["rule", "CODE"])
    p.add_argument("--list", action="store_true", help="list every code with its one-line title")
    p.set_defaults(func=cmd_rule)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (never raises)."""
    try:
        argv = list(argv) if argv is not None else sys.argv[1:]
        if not argv:
            sys.stderr.write(f"{build_parser().format_usage()}layoutc: error[LC801]: no command given; "
                             "`layoutc --help` describes the commands\n")
            return 2
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except _Usage as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0) if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        sys.stderr.write("layoutc: interrupted\n")
        return 2
    except BrokenPipeError:
        return _closed_stdout()
    except BaseException as exc:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()[:2000]
        sys.stderr.write(f"layoutc: error[LC900]: internal error: {detail}\n"
                         "  = this is a bug in layoutc; please report it with the input that caused it\n")
        if os.environ.get("LAYOUTC_TRACEBACK"):
            traceback.print_exc()
        return 2


#: Exit status when the reader of stdout went away (`layoutc explain ... | head -1`): the shell's
#: 128 + SIGPIPE, what a tool killed by the signal reports; nothing more is printed.
EXIT_PIPE = 141


def _closed_stdout() -> int:
    """Point stdout at /dev/null (so the interpreter's final flush cannot fail again) and return
    EXIT_PIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return EXIT_PIPE


def entry() -> None:
    """The `layoutc` console script: `main()` with the process's arguments, as the exit status.

    Once torch is imported, the interpreter's own shutdown (module teardown, torch's thread
    pools) took about 1 s after the last line on a 2-core machine (issue 24: no pause after
    the table): the atexit handlers run and the streams are flushed, then the process exits."""
    code = main()
    if "torch" in sys.modules:
        import atexit

        atexit._run_exitfuncs()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            code = code or 2
        os._exit(code)
    sys.exit(code)

