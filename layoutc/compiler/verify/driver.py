"""The verifier's driver: the one entry `layoutc verify` and `layoutc compile` call.

For each contract file: read it once (bounded, non-blocking: safeio), look its verdicts
up in the verdict cache (key: entries.key), and only on a miss parse and check it from
the text already read and prove it (prove.verify), in a process pool where several
files miss, biggest first; then store what was proved (never an inconclusive run: it
depends on time and load) and hand the results to the report. A fully cached run
parses nothing and never imports z3 or the parser.

An exception inside the verifier is a bug in layoutc, not a verdict: it becomes an
LC900 diagnostic, and the contract's result is missing (the JSON report's
`tool_failures`, cause "tool"; docs/verification.md). Each contract's proof runs under
its own wall-time budget (`Options.budget_s`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from layoutc.compiler.diagnostics import Diagnostic, error, file_span, has_errors, shown
from layoutc.compiler.safeio import UsageError, read_bounded
from layoutc.compiler.verify import entries
from layoutc.compiler.verify.cache import Cache, default_dir
from layoutc.compiler.verify.verdicts import Named, Options, Result, Verdict

if TYPE_CHECKING:
    from layoutc.compiler import ir

MAX_BYTES = 1 << 20  # parse.MAX_BYTES (not imported: that would import lark on the fast path)
Job = tuple[str, "str | None", Options, "entries.Entry | None"]  # (path, text, options, a stored entry)


@dataclass(frozen=True)
class CachedContract:
    """What the report needs of a contract whose verdicts came from the cache (no parse)."""

    name: str
    file: str


@dataclass
class FileOutcome:
    """One contract file: its contract (None where it did not parse), checker diagnostics,
    text (None where it could not be read), verdicts (None where not verified) and LC900
    failures."""

    path: str
    contract: Named | None
    diagnostics: list[Diagnostic]
    text: str | None
    verdicts: list[Verdict] | None = None
    failures: list[Diagnostic] = field(default_factory=list)


@dataclass(frozen=True)
class Outcome:
    """What `layoutc verify` reports: every file's checker diagnostics, the texts read (for
    rendering), the results (empty when any file has errors: then nothing is reported as
    verified) and the LC900 failures."""

    diagnostics: list[Diagnostic]
    sources: dict[str, str]
    results: list[Result]
    failures: list[Diagnostic]


def verdict_cache() -> Cache:
    """The store of verification entries (cache.default_dir("verdicts"))."""
    return Cache(default_dir("verdicts"), read=read_bounded)  # bounded, regular files only


def verify_files(paths: Sequence[str], options: Options, use_cache: bool = True) -> Outcome:
    """Read, check and verify contract files (`layoutc verify`). Never raises for bad input:
    an unreadable or malformed file is its diagnostics, a verifier bug an LC900."""
    cache = verdict_cache() if use_cache else None
    done: list[FileOutcome | None] = []
    todo: list[tuple[int, str | None, Job]] = []  # (slot, key, job)
    for path in paths:
        text = _read(path)
        k = entries.key(text, options) if text is not None and cache is not None else None
        hit = _lookup(cache, k, path)
        if hit is not None and hit.diagnostics is not None:
            done.append(FileOutcome(path, CachedContract(hit.name, path), list(hit.diagnostics), text, hit.verdicts))
        else:  # a miss, or verdicts stored without the checker's diagnostics: check it (and prove it)
            done.append(None)
            todo.append((len(done) - 1, k, (path, text, options, None if hit is None else hit)))
    for (slot, k, _), outcome in zip(todo, _verify_all([job for _, _, job in todo]), strict=True):
        done[slot] = outcome
        if cache is not None and k is not None and outcome.verdicts is not None and outcome.contract is not None:
            _store(cache, k, outcome.contract.name, outcome.diagnostics, outcome.verdicts)
    return _gather([o for o in done if o is not None])


def verify_contracts(contracts: Sequence[tuple[str, ir.Contract]], options: Options | None = None,
                     use_cache: bool = True) -> tuple[list[Result], list[Diagnostic]]:
    """Verify checked contracts (`layoutc compile` verifies first), reusing stored verdicts of
    the same text. Returns (results, LC900 failures); a failed contract has no result."""
    results: list[Result] = []
    failures: list[Diagnostic] = []
    for path, contract in contracts:
        verdicts, failed = _guarded(path, contract, options or Options(), use_cache)
        failures += failed
        if verdicts is not None:
            results.append((path, contract, verdicts))
    return results, failures


def verify_contract(contract: ir.Contract, options: Options | None = None, fixed: dict[str, Any] | None = None,
                    use_cache: bool = True, diags: Sequence[Diagnostic] | None = None) -> list[Verdict]:
    """`prove.verify(contract, options, fixed)`, reusing a stored verdict of the same text
    (`contract.source_text` is what is keyed). `diags`: its checker diagnostics, stored with
    the verdicts for a later `verify_files` (None: not known). Raises what the verifier raises."""
    from layoutc.compiler.verify import prove

    options = options or Options()
    cache = verdict_cache() if use_cache else None
    k = entries.key(contract.source_text, options, fixed)
    hit = _lookup(cache, k, contract.file)
    if hit is not None and hit.name == contract.name:
        return hit.verdicts
    verdicts = prove.verify(contract, options, fixed)
    if cache is not None:
        _store(cache, k, contract.name, diags, verdicts)
    return verdicts


# ---- one file -------------------------------------------------------------------


def _read(path: str) -> str | None:
    """The contract's text (safeio.contract_text: no byte-order mark, LF line endings), or None: then `source.load`
    reads the file itself and says why it cannot be used. Bounded and non-blocking
    (safeio): a FIFO, a device or /proc file is never waited on."""
    from layoutc.compiler.safeio import ReadError, contract_text

    try:
        return contract_text(read_bounded(path, MAX_BYTES))
    except (ReadError, UnicodeDecodeError):
        return None


def _lookup(cache: Cache | None, k: str | None, path: str) -> entries.Entry | None:
    if cache is None or k is None:
        return None
    return entries.decode(cache.get(k), path)


def _store(cache: Cache, k: str, name: str, diags: Sequence[Diagnostic] | None, verdicts: list[Verdict]) -> None:
    if any(v.status == "inconclusive" for v in verdicts):
        return
    cache.put(k, entries.encode(name, diags, verdicts))


def _verify_file(job: Job) -> FileOutcome:
    """Parse and check one file from its text (`source.load` reads it only where the driver
    could not), and prove it where it has no errors, unless the job carries its entry."""
    from layoutc.compiler.source import load

    path, text, options, hit = job
    contract, diags, text = load(path, text)
    outcome = FileOutcome(path, contract, diags, text)
    if contract is not None and not has_errors(diags):
        if hit is not None and hit.name == contract.name:
            outcome.verdicts = hit.verdicts
        else:
            outcome.verdicts, outcome.failures = _guarded(path, contract, options, use_cache=False)
    return outcome


def _guarded(path: str, contract: ir.Contract, options: Options,
             use_cache: bool) -> tuple[list[Verdict] | None, list[Diagnostic]]:
    """(verdicts, []) or, where the verifier raised, (None, [LC900])."""
    try:
        return verify_contract(contract, options, use_cache=use_cache), []
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # a bug in layoutc, not a verdict about the contract
        import traceback

        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()[:500]
        return None, [error("LC900", file_span(path), f"verification of `{contract.name}` failed inside "
                            f"layoutc: {detail}", help="this is a bug in layoutc; please report it")]


def _gather(outcomes: list[FileOutcome]) -> Outcome:
    diags: list[Diagnostic] = []
    sources: dict[str, str] = {}
    results: list[Result] = []
    failures: list[Diagnostic] = []
    for o in outcomes:
        if o.text is not None:
            sources[o.path] = o.text
        diags += o.diagnostics
        failures += o.failures
        if o.verdicts is not None and o.contract is not None:
            results.append((o.path, o.contract, o.verdicts))
    return Outcome(diags, sources, [] if has_errors(diags) else results, failures)


# ---- several files ------------------------------------------------------------------


def _verify_all(jobs: list[Job]) -> list[FileOutcome]:
    if not jobs:
        return []
    _keep_freed_memory()
    if len(jobs) > 1 and _jobs() > 1:
        return _run_parallel(jobs)
    return [_verify_file(j) for j in jobs]


MAX_JOBS = 1024


def jobs_setting() -> int | None:
    """`$LAYOUTC_JOBS` as a number of worker processes (1 to MAX_JOBS, ASCII digits), or None
    where it is unset or empty (then one per CPU).

    Raises UsageError (LC802) for anything else: `str.isdigit` accepts `²` and `٣`, which
    `int` then refuses or reads, so the text is matched against ASCII digits only."""
    env = os.environ.get("LAYOUTC_JOBS", "")
    if env == "":
        return None
    if len(env) <= 4 and all("0" <= ch <= "9" for ch in env) and 1 <= int(env) <= MAX_JOBS:
        return int(env)
    raise UsageError(f"layoutc: error[LC802]: LAYOUTC_JOBS must be a number of worker processes from 1 to "
                     f"{MAX_JOBS} in ASCII digits (or empty: one per CPU), got {shown(env)}")


def _jobs() -> int:
    """Worker processes: `$LAYOUTC_JOBS`, else the CPUs this process may run on."""
    setting = jobs_setting()
    if setting is not None:
        return setting
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _keep_freed_memory() -> None:
    """Ask glibc's malloc to keep freed memory for reuse instead of returning it to the
    system (mmap threshold 64 MiB, trim threshold 256 MiB, top pad 16 MiB; the workers
    inherit it): z3 allocates and frees large blocks query after query, and each block
    handed back and taken again costs fresh page faults (2.5x fewer with this, about 6%
    less CPU for `layoutc verify`). This process ends when the verification does. Not
    glibc: nothing."""
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    for option, value in ((-3, 64 << 20), (-1, 256 << 20), (-2, 16 << 20)):  # M_MMAP_/M_TRIM_THRESHOLD, M_TOP_PAD
        mallopt(ctypes.c_int(option), ctypes.c_int(value))


def _run_parallel(jobs: list[Job]) -> list[FileOutcome]:
    """Each job in a forked worker process, biggest file first; serial where fork is unavailable."""
    import multiprocessing
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        return [_verify_file(j) for j in jobs]
    # Build the parser and import the checker and the solver once, before forking, so
    # that the workers share them instead of each paying for them.
    from layoutc.compiler.source import load
    load("<warm-up>", "")
    # Move every object made so far out of the collector's generations: a forked worker's
    # collections then never walk (and write the refcount/GC header of) the inherited
    # objects, so their pages stay shared, not copied (CPython's gc.freeze docs, "before
    # fork"). Measured with bench/verify_bench.py: see docs/benchmarks.md, issue 26.
    import gc

    from layoutc.compiler.verify import prove  # noqa: F401  (imports z3 and every property)
    gc.freeze()
    order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i][1] or ""))
    out: list[Any] = [None] * len(jobs)
    try:
        with ctx.Pool(min(_jobs(), len(jobs))) as pool:
            for i, result in zip(order, pool.imap(_verify_file, [jobs[i] for i in order], chunksize=1), strict=True):
                out[i] = result
    except OSError:
        return [_verify_file(j) for j in jobs]
    finally:
        gc.unfreeze()  # this process goes on (compile after verify): its objects collectable again
    return out
