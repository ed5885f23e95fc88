"""Command-line interface: `layoutc check | verify | compile | explain | audit`.

`main(argv) -> int` never raises: exit 0 ok, 1 findings (diagnostics, a
counterexample, a vacuous contract, drift), 2 usage error, inconclusive
verification or an internal error (reported as LC900 with a request to file it).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .diagnostics import Diagnostic, has_errors, render_text, to_json


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Usage(f"{self.prog}: error: {message}")


def contract_paths(paths: Sequence[str]) -> list[str]:
    """Expand directories into their `*.moe` files (sorted); keep files as given.

    A directory with no contracts is a usage error (a mistyped path must not pass CI).
    """
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(str(Path(p) / f) for f in os.listdir(p) if f.endswith(".moe"))
            if not found:
                raise _Usage(f"layoutc: error: no *.moe contracts in directory {p}")
            out.extend(found)
        else:
            out.append(p)
    return out


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _emit_diags(diags: list[Diagnostic], sources: dict[str, str], fmt: str) -> None:
    if not diags:
        return
    if fmt == "json":
        sys.stdout.write(to_json(diags))
    else:
        sys.stderr.write(render_text(diags, sources))


def _load_all(paths: Sequence[str], fmt: str):  # type: ignore[no-untyped-def]
    from .check import load
    loaded = []
    all_diags: list[Diagnostic] = []
    sources: dict[str, str] = {}
    for path in contract_paths(paths):
        contract, diags, text = load(path)
        if text is not None:
            sources[path] = text
        all_diags.extend(diags)
        loaded.append((path, contract, diags))
    return loaded, all_diags, sources


# ---- check -----------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    loaded, diags, sources = _load_all(args.paths, args.format)
    _emit_diags(diags, sources, args.format)
    if args.format == "json" and not diags:
        sys.stdout.write("[]\n")
    if has_errors(diags):
        return 1
    if args.format == "text":
        for path, contract, _ in loaded:
            print(f"{path}: ok ({contract.name})")
    return 0


# ---- verify ----------------------------------------------------------------------


def cmd_verify(args: argparse.Namespace) -> int:
    from .verdict_cache import load_and_verify
    from .verdicts import Options
    from .verify_report import render_github, render_json, render_text_report, summarize
    options = Options(timeout_ms=args.timeout_ms, seed=args.seed, budget_s=args.budget_s)
    _loaded, diags, sources, results = load_and_verify(contract_paths(args.paths), options, not args.no_cache)
    if has_errors(diags):
        _emit_diags(diags, sources, "json" if args.format == "json" else "text")
        return 1
    if diags and args.format != "json":
        sys.stderr.write(render_text(diags, sources))
    if args.format == "json":
        sys.stdout.write(render_json(results))
    elif args.format == "github":
        sys.stdout.write(render_github(results))
    else:
        sys.stdout.write(render_text_report(results))
    summary = summarize(results)
    if summary["inconclusive"]:
        return 2
    if summary["counterexample"] or summary["vacuous"]:
        return 1
    return 0


# ---- compile ---------------------------------------------------------------------


def cmd_compile(args: argparse.Namespace) -> int:
    from .compile import compile_contracts
    loaded, diags, sources = _load_all(args.paths, "text")
    if has_errors(diags):
        _emit_diags(diags, sources, "text")
        return 1
    return compile_contracts([(p, c) for p, c, _ in loaded], args.out, check=args.check,
                             verify_first=not args.no_verify, use_cache=not args.no_cache)


# ---- explain / audit --------------------------------------------------------------


def cmd_explain(args: argparse.Namespace) -> int:
    from .explain import explain
    return explain(args.contract, args.set or [])


def cmd_audit(args: argparse.Namespace) -> int:
    from .audit import run_audit
    return run_audit(args)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="layoutc", description="MoE weight-layout contracts: check, verify, compile.")
    parser.add_argument("--version", action="version", version=f"layoutc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("check", help="parse and check contracts (no solver)")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("verify", help="prove pad-soundness with z3 for every admitted configuration")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--format", choices=("text", "json", "github"), default="text")
    p.add_argument("--timeout-ms", type=_positive_int, default=2000, help="per-query solver timeout (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="solver random seed (default 0)")
    p.add_argument("--budget-s", type=_positive_float, default=8.0,
                   help="wall-time budget per contract, in seconds (default 8); past it, verdicts are inconclusive")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the verdict cache")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("compile", help="render each contract into a standalone Python module")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--check", action="store_true", help="compare with DIR instead of writing; exit 1 on drift")
    p.add_argument("--no-verify", action="store_true", help="skip verification (the header then says so)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the verdict cache")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("explain", help="print a configuration's plan and a picture of each padded tensor")
    p.add_argument("contract", metavar="CONTRACT")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="a parameter value (repeatable)")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("audit", help="for model configs and TP degrees, which kernels take the fast path")
    p.add_argument("configs", nargs="+", metavar="CONFIG")
    p.add_argument("--tp", default="1,2,4,8,16", help="comma-separated TP degrees (default 1,2,4,8,16)")
    p.add_argument("--contracts", nargs="+", metavar="PATH", default=None)
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.set_defaults(func=cmd_audit)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (never raises)."""
    try:
        args = build_parser().parse_args(list(argv) if argv is not None else None)
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
        return 2
    except BaseException as exc:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        sys.stderr.write(f"layoutc: error[LC900]: internal error: {detail}\n"
                         "  = this is a bug in layoutc; please report it with the input that caused it\n")
        if os.environ.get("LAYOUTC_TRACEBACK"):
            traceback.print_exc()
        return 2


def entry() -> None:
    sys.exit(main())

