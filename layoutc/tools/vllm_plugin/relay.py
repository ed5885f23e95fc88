"""Carry a refusal from the vLLM process that raised it to the process that started the engine.

vLLM 0.32's process model (read from its source):

- a plain `vllm.LLM(...)` caller runs the front end; the engine core runs in a child
  process (`CoreEngineProcManager`, v1/engine/utils.py) unless VLLM_ENABLE_V1_MULTIPROCESSING=0;
- the engine core's `MultiprocExecutor` spawns the workers, which load the model (so the
  plugin's hooks raise there); on the CPU platform always, at tp 1 too.
- A worker that raises during start-up only logs it (`WorkerProc.worker_main`:
  `logger.exception("WorkerProc failed to start.")`) and closes its ready pipe; nothing of the
  exception is sent. The executor's `WorkerProc.wait_for_ready` then raises its own
  `Exception("WorkerProc initialization failed ... See stack trace for root cause.")`, and the
  front end's `wait_for_engine_startup` (v1/engine/utils.py) raises
  `RuntimeError("Engine core initialization failed. See root cause above. ...")` when the engine
  core process dies. Neither carries the worker's text.

So the plugin passes its own message on through files, one per process, named by pid, in a
private per-user directory (`directory()`):

- `recorded()`: where the plugin's hooks run (a worker), a `LayoutcVllmError` is written to
  this process's file (atomically) before it propagates;
- `install()` wraps `WorkerProc.wait_for_ready` (the engine core's side) and
  `wait_for_engine_startup` (the front end's side): when vLLM raises there, the files of the
  processes that start-up waited on (the workers' pids, the engine core's pids) are read and
  removed, and a `LayoutcVllmError` with their text is raised from vLLM's exception. The engine
  core records the one it raises, so the front end finds it in turn.

`register()` removes this process's stale file at start (a pid a dead process once had).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from layoutc.tools.vllm_plugin.errors import LayoutcVllmError

_MARK = "__layoutc_vllm_relay__"
# A file of a dead process older than this is swept by forget() (seconds).
STALE_S = 600.0


def directory() -> Path:
    """The per-user directory the refusals pass through (`<tempdir>/layoutc-vllm-<uid>`, mode 0700)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"layoutc-vllm-{uid}"


def _file(pid: int) -> Path:
    return directory() / f"{pid}.txt"


def forget() -> None:
    """Remove this process's file, left by a dead process that had this pid, and the files of dead
    processes older than STALE_S (a worker that recorded after its engine core stopped reading);
    register() calls it. Never raises."""
    with contextlib.suppress(OSError):
        _file(os.getpid()).unlink()
    now = time.time()
    with contextlib.suppress(OSError):
        for path in directory().glob("*.txt"):
            with contextlib.suppress(OSError, ValueError):
                if now - path.stat().st_mtime > STALE_S and not _alive(int(path.stem)):
                    path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, another user's
    return True


def spawned() -> bool:
    """Whether this process was started by another Python process (vLLM's engine core and workers
    are); only such a process records, so a program that calls the hooks itself leaves no file."""
    return multiprocessing.parent_process() is not None


def record(exc: BaseException) -> None:
    """Write `str(exc)` to this process's file (atomically: a temporary file, then os.replace), in a
    process vLLM spawned (`spawned`). Never raises: a refusal that cannot be relayed still propagates
    as it would have."""
    if not spawned():
        return
    try:
        where = directory()
        where.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=f".{os.getpid()}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(str(exc))
        os.replace(tmp, _file(os.getpid()))
    except OSError:
        pass


@contextlib.contextmanager
def recorded() -> Iterator[None]:
    """Record a LayoutcVllmError raised inside (then let it propagate)."""
    try:
        yield
    except LayoutcVllmError as exc:
        record(exc)
        raise


def collect(pids: Iterable[int]) -> list[str]:
    """The refusals the processes `pids` recorded, in order and without repeats; their files are removed."""
    found: list[str] = []
    for pid in pids:
        path = _file(pid)
        try:
            text = path.read_text(encoding="utf-8")
            path.unlink()
        except OSError:
            continue
        if text and text not in found:
            found.append(text)
    return found


def relayed(texts: list[str], where: str, cause: BaseException) -> LayoutcVllmError:
    """The error the starting process raises: the recorded text(s), and where they came from."""
    body = "\n".join(texts)
    return LayoutcVllmError(f"{body}\n(layoutc: raised in {where}; vLLM reported: {type(cause).__name__}: {cause})")


def _pids(procs: Iterable[Any]) -> list[int]:
    return [int(p.pid) for p in procs if getattr(p, "pid", None) is not None]


def install() -> None:
    """Wrap vLLM's two start-up waits (see the module doc); idempotent. A vLLM without them is left alone
    (the refusal then stays in the worker's log, as before)."""
    try:
        from vllm.v1.engine import utils as engine_utils
        from vllm.v1.executor.multiproc_executor import WorkerProc
    except ImportError:
        return
    wait = WorkerProc.__dict__.get("wait_for_ready")
    if isinstance(wait, staticmethod) and not getattr(wait.__func__, _MARK, False):
        WorkerProc.wait_for_ready = staticmethod(_wrap_workers(wait.__func__))
    startup = getattr(engine_utils, "wait_for_engine_startup", None)
    if startup is not None and not getattr(startup, _MARK, False):
        engine_utils.wait_for_engine_startup = _wrap_startup(startup)


def _wrap_workers(original: Any) -> Any:
    @functools.wraps(original)
    def wait_for_ready(unready_proc_handles: Any) -> Any:
        try:
            return original(unready_proc_handles)
        except Exception as exc:
            texts = collect(_pids(getattr(h, "proc", None) for h in unready_proc_handles))
            if not texts:
                raise
            err = relayed(texts, "a vLLM worker process", exc)
            record(err)  # in an engine core process: the front end reads it
            raise err from exc

    setattr(wait_for_ready, _MARK, True)
    return wait_for_ready


def _wrap_startup(original: Any) -> Any:
    @functools.wraps(original)
    def wait_for_engine_startup(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except Exception as exc:
            launch = kwargs.get("launch", args[5] if len(args) > 5 else None)
            manager = getattr(launch, "engine_manager", None)
            texts = collect(_pids(getattr(manager, "processes", None) or ()))
            if not texts:
                raise
            raise relayed(texts, "the vLLM engine core process", exc) from exc

    setattr(wait_for_engine_startup, _MARK, True)
    return wait_for_engine_startup


def uninstall() -> None:
    """Put vLLM's waits back (tests)."""
    try:
        from vllm.v1.engine import utils as engine_utils
        from vllm.v1.executor.multiproc_executor import WorkerProc
    except ImportError:
        return
    wait = WorkerProc.__dict__.get("wait_for_ready")
    if isinstance(wait, staticmethod) and getattr(wait.__func__, _MARK, False):
        WorkerProc.wait_for_ready = staticmethod(getattr(wait.__func__, "__wrapped__"))  # noqa: B009
    startup = engine_utils.wait_for_engine_startup
    if getattr(startup, _MARK, False):
        engine_utils.wait_for_engine_startup = getattr(startup, "__wrapped__")  # noqa: B009


__all__ = ["collect", "directory", "forget", "install", "record", "recorded", "relayed", "uninstall"]
