"""A verdict cache for `layoutc verify` and `layoutc compile`, and parallel verification.

A verdict is a function of the contract's text, layoutc's own code (every module
and the grammar, hashed, so an edited checkout never reuses a stale verdict), the
solver (z3's library file), the Python version, the solver options and the pinned
parameters (`fixed`). The key hashes all of them. An entry is one JSON file,
written atomically (a temporary file, then `os.replace`), holding the key, the
contract's name, its checker diagnostics and its verdicts, plus a SHA-256 of that
payload. An entry whose checksum, key, version or shape is wrong is ignored (and
overwritten on the next store), never trusted. Inconclusive verdicts depend on
time and load, so a run with any `inconclusive` verdict is never stored.

Where: `$LAYOUTC_CACHE_DIR`, else `$XDG_CACHE_HOME/layoutc/verdicts`, else
`~/.cache/layoutc/verdicts`. A cache that cannot be read or written is skipped
silently: the cache only ever saves time.

A cached verdict keeps the `seconds` and `queries` of the run that produced it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layoutc import __version__
from layoutc.compiler.diagnostics import Diagnostic, Related, Span, has_errors
from layoutc.compiler.verify.verdicts import PROPERTY_IDS, Counterexample, Options, Verdict

if TYPE_CHECKING:
    from layoutc.compiler import ir

FORMAT = 1
MAX_BYTES = 1 << 20  # parse.MAX_BYTES (not imported: that would import lark on the fast path)
MAX_ENTRY_BYTES = 64 << 20  # a larger entry is not one this module wrote
_STATUSES = ("proved", "counterexample", "inconclusive", "vacuous", "info")
_code_digest: str | None = None


def cache_dir() -> Path:
    """The directory holding the entries (not created here)."""
    explicit = os.environ.get("LAYOUTC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "layoutc" / "verdicts"


def code_digest() -> str:
    """SHA-256 over layoutc's modules and grammar, z3's library file and the Python version."""
    global _code_digest
    if _code_digest is None:
        h = hashlib.sha256(f"layoutc {__version__} python {sys.version_info[:2]}".encode())
        package = Path(__file__).resolve().parent
        for path in sorted(package.rglob("*")):
            if path.suffix in (".py", ".lark") and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
        spec = importlib.util.find_spec("z3")
        if spec is not None and spec.origin:
            z3dir = Path(spec.origin).parent
            for name in ("z3core.py", "z3.py"):
                if (z3dir / name).is_file():
                    h.update((z3dir / name).read_bytes())
            for lib in sorted((z3dir / "lib").glob("libz3*")):
                st = lib.stat()
                h.update(f"{lib.name} {st.st_size} {st.st_mtime_ns}".encode())
        _code_digest = h.hexdigest()
    return _code_digest


def key(text: str, options: Options, fixed: dict[str, Any] | None = None) -> str:
    """The cache key of one verification."""
    h = hashlib.sha256(f"layoutc-verdicts {FORMAT}\0{code_digest()}\0".encode())
    h.update(json.dumps(asdict(options), sort_keys=True).encode() + b"\0")
    h.update(json.dumps(sorted((fixed or {}).items()), default=str).encode() + b"\0")
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


# ---- (de)serialisation --------------------------------------------------------


def _span(s: Span) -> list[int]:
    return [s.line, s.column, s.end_line, s.end_column]


def _unspan(v: Any, file: str) -> Span:
    line, column, end_line, end_column = (int(x) for x in v)
    return Span(file, line, column, end_line, end_column)


def _verdict_doc(v: Verdict) -> dict[str, Any]:
    cex = v.counterexample
    return {"property": v.property, "status": v.status, "detail": v.detail, "seconds": v.seconds,
            "queries": v.queries, "span": _span(v.span), "warnings": list(v.warnings),
            "counterexample": None if cex is None else {
                "config": cex.config, "derived": cex.derived, "message": cex.message, "where": cex.where,
                "picture": list(cex.picture), "rule": cex.rule}}


def _verdict(d: dict[str, Any], file: str) -> Verdict:
    c = d["counterexample"]
    cex = None if c is None else Counterexample(dict(c["config"]), dict(c["derived"]), str(c["message"]),
                                                str(c["where"]), tuple(str(x) for x in c["picture"]), str(c["rule"]))
    if d["status"] not in _STATUSES:
        raise ValueError("bad status")
    return Verdict(str(d["property"]), d["status"], str(d["detail"]), float(d["seconds"]), int(d["queries"]),
                   _unspan(d["span"], file), cex, tuple(str(w) for w in d["warnings"]))


def _diag_doc(d: Diagnostic) -> dict[str, Any]:
    return {"code": d.code, "severity": d.severity, "span": _span(d.span), "message": d.message,
            "related": [[_span(r.span), r.message] for r in d.related], "help": d.help}


def _diag(d: dict[str, Any], file: str) -> Diagnostic:
    return Diagnostic(str(d["code"]), d["severity"], _unspan(d["span"], file), str(d["message"]),
                      tuple(Related(_unspan(s, file), str(m)) for s, m in d["related"]),
                      None if d["help"] is None else str(d["help"]))


@dataclass(frozen=True)
class Entry:
    name: str
    diagnostics: tuple[Diagnostic, ...]
    verdicts: list[Verdict]


def _payload(k: str, name: str, diags: Sequence[Diagnostic], verdicts: Sequence[Verdict]) -> str:
    return json.dumps({"format": FORMAT, "key": k, "name": name, "diagnostics": [_diag_doc(d) for d in diags],
                       "verdicts": [_verdict_doc(v) for v in verdicts]}, sort_keys=True)


def lookup(k: str, file: str) -> Entry | None:
    """The entry stored under key `k` (spans re-attached to `file`), or None."""
    try:
        path = cache_dir() / f"{k}.json"
        if path.stat().st_size > MAX_ENTRY_BYTES:
            return None
        outer = json.loads(path.read_text(encoding="utf-8"))
        payload = outer["payload"]
        if hashlib.sha256(payload.encode()).hexdigest() != outer["sha256"]:
            return None
        doc = json.loads(payload)
        if doc["format"] != FORMAT or doc["key"] != k:
            return None
        verdicts = [_verdict(v, file) for v in doc["verdicts"]]
        if [v.property for v in verdicts] != list(PROPERTY_IDS) or any(v.status == "inconclusive" for v in verdicts):
            return None
        return Entry(str(doc["name"]), tuple(_diag(d, file) for d in doc["diagnostics"]), verdicts)
    except Exception:  # any damage at all (bad JSON, deep nesting, wrong types): not trusted
        return None


def store(k: str, name: str, diags: Sequence[Diagnostic], verdicts: Sequence[Verdict]) -> None:
    """Write one entry atomically; skipped for inconclusive runs and on any OS error."""
    if any(v.status == "inconclusive" for v in verdicts):
        return
    payload = _payload(k, name, diags, verdicts)
    text = json.dumps({"payload": payload, "sha256": hashlib.sha256(payload.encode()).hexdigest()})
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, directory / f"{k}.json")
        except BaseException:
            with _suppress():
                os.unlink(tmp)
            raise
    except OSError:
        return


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)  # type: ignore[arg-type]


# ---- verification with the cache -------------------------------------------------


def verify_cached(contract: ir.Contract, options: Options | None = None, fixed: dict[str, Any] | None = None,
                  use_cache: bool = True, diags: Sequence[Diagnostic] = ()) -> list[Verdict]:
    """`verify.verify(contract, options, fixed)`, reusing a stored verdict of the same text.

    The contract's `source_text` is what is keyed; `diags` (its checker diagnostics)
    are stored alongside for `load_and_verify`'s fast path.
    """
    options = options or Options()
    k = key(contract.source_text, options, fixed)
    if use_cache:
        hit = lookup(k, contract.file)
        if hit is not None and hit.name == contract.name:
            return hit.verdicts
    from layoutc.compiler.verify.properties import verify
    verdicts = verify(contract, options, fixed)
    if use_cache:
        store(k, contract.name, diags, verdicts)
    return verdicts


@dataclass(frozen=True)
class CachedContract:
    """What the report needs of a contract whose verdicts came from the cache (no parse)."""

    name: str
    file: str


Loaded = tuple[str, Any, list[Diagnostic]]  # (path, ir.Contract | CachedContract | None, diagnostics)


def _read_text(path: str) -> str | None:
    """The text `check.load` would read, or None (then `load` reports why). Bounded and
    non-blocking (safeio): a FIFO, a device or /proc file is never waited on."""
    from layoutc.compiler.safeio import ReadError, read_bounded

    try:
        return read_bounded(path, MAX_BYTES).decode("utf-8").removeprefix("\ufeff")
    except (ReadError, UnicodeDecodeError):
        return None


def _load_and_verify_one(job: tuple[str, Options, bool, bool]):  # type: ignore[no-untyped-def]
    path, options, use_cache, verify_it = job
    from layoutc.compiler.check import load
    from layoutc.compiler.verify.report import verify_guarded
    contract, diags, text = load(path)
    verdicts, failures = None, []
    if contract is not None and verify_it and not has_errors(diags):
        results, failures = verify_guarded([(path, contract)], options, use_cache)
        verdicts = results[0][2] if results else None
    return contract, diags, text, verdicts, failures


def _jobs() -> int:
    env = os.environ.get("LAYOUTC_JOBS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_and_verify(paths: Sequence[str], options: Options, use_cache: bool = True):  # type: ignore[no-untyped-def]
    """Load and verify contract files, in parallel processes where there are several.

    Returns (loaded, diagnostics, sources, results, failures) as `layoutc verify` reports them
    (failures: LC900 diagnostics of contracts whose verification raised inside layoutc):
    `loaded` is [(path, contract, diags)], `results` [(path, contract, verdicts)], empty
    when any contract has errors (then nothing is reported as verified). A contract whose
    text has a stored entry without diagnostics is not even parsed: its `contract` is a
    CachedContract.
    """
    slots: list[Any] = [None] * len(paths)
    todo: list[int] = []
    sources: dict[str, str] = {}
    for i, path in enumerate(paths):
        text = _read_text(path) if use_cache else None
        hit = lookup(key(text, options), path) if text is not None else None
        if hit is not None and not hit.diagnostics:
            slots[i] = (CachedContract(hit.name, path), [], text, hit.verdicts, [])
        else:
            todo.append(i)
    jobs = [(paths[i], options, use_cache, True) for i in todo]
    if jobs:
        _keep_freed_memory()
    done = _run_parallel(jobs) if len(jobs) > 1 and _jobs() > 1 else [_load_and_verify_one(j) for j in jobs]
    for i, result in zip(todo, done, strict=True):
        slots[i] = result
    loaded: list[Loaded] = []
    all_diags: list[Diagnostic] = []
    results = []
    failures: list[Diagnostic] = []
    for path, (contract, diags, text, verdicts, failed) in zip(paths, slots, strict=True):
        if text is not None:
            sources[path] = text
        all_diags.extend(diags)
        failures.extend(failed)
        loaded.append((path, contract, list(diags)))
        if verdicts is not None:
            results.append((path, contract, verdicts))
    if has_errors(all_diags):
        results = []
    return loaded, all_diags, sources, results, failures


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


def _run_parallel(jobs: list[tuple[str, Options, bool, bool]]):  # type: ignore[no-untyped-def]
    """Each job in a forked worker process, biggest file first; serial where fork is unavailable."""
    import multiprocessing
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        return [_load_and_verify_one(j) for j in jobs]
    # Build the parser and import the checker, the solver and the report once, before
    # forking, so that the workers share them instead of each paying for them.
    from layoutc.compiler.parse import parse
    parse("", "<warm-up>")
    order = sorted(range(len(jobs)), key=lambda i: -_size(jobs[i][0]))
    out: list[Any] = [None] * len(jobs)
    try:
        with ctx.Pool(min(_jobs(), len(jobs))) as pool:
            for i, result in zip(order, pool.imap(_load_and_verify_one, [jobs[i] for i in order], chunksize=1),
                                 strict=True):
                out[i] = result
    except OSError:
        return [_load_and_verify_one(j) for j in jobs]
    return out


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
