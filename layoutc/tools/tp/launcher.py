"""Start `tp_size` rank processes on the loopback, wait for them, and name the rank that failed.

Ranks are started with `torch.multiprocessing` (start method "spawn", or "forkserver";
no torchrun) and join a gloo process group on 127.0.0.1 at a free port (found by binding
port 0). Each rank sends `(kind, rank, payload)` messages to a queue (see `rank`); the
launcher collects them while it waits, stops the survivors when one rank fails or the
time is up, and turns the failed ranks' messages into one `TPRankError`.
"""

from __future__ import annotations

import queue as queue_module
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

from layoutc.tools.tp.results import TPRankError

START_METHODS = ("spawn", "forkserver")
_OUR_SIGNALS = (signal.SIGTERM, signal.SIGKILL)  # what the launcher sends to survivors

Message = tuple[str, int, Any]  # (kind, rank, payload): "report", "errors" or "error"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_ranks(who: str, target: Callable[..., None], tp_size: int, args: tuple[Any, ...], *,
                 start_method: str, timeout_s: float) -> list[Message]:
    """Run ``target(rank, tp_size, port, *args, results)`` in ``tp_size`` processes; every message
    the ranks sent, once all have exited.

    who: the caller's name, for messages. Raises TimeoutError when the ranks do not finish
    within ``timeout_s`` seconds (they are terminated), and :class:`TPRankError` naming the
    most likely root cause (:func:`rank_error`) when a rank fails.
    """
    ctx = mp.get_context(start_method)
    results = ctx.Queue()
    messages: list[Message] = []

    def drain(wait: float = 0.0) -> None:
        deadline = time.monotonic() + wait
        while True:
            try:
                messages.append(results.get(timeout=max(0.0, deadline - time.monotonic())) if wait
                                else results.get_nowait())
            except queue_module.Empty:
                return

    procs = mp.start_processes(target, args=(tp_size, free_port(), *args, results),
                               nprocs=tp_size, join=False, start_method=start_method)
    assert procs is not None  # join=False returns the process context
    deadline = time.monotonic() + timeout_s
    try:
        while not procs.join(timeout=0.05, grace_period=1.0):
            drain()
            if time.monotonic() > deadline:
                running = [i for i, p in enumerate(procs.processes) if p.is_alive()]
                raise TimeoutError(f"{who}: ranks {running} of tp_size={tp_size} did not finish "
                                   f"within {timeout_s} s; terminated")
    except ProcessException as exc:
        drain(wait=0.5)
        raise rank_error(tp_size, messages, procs.processes, exc) from exc
    finally:
        for p in procs.processes:
            if p.is_alive():
                p.terminate()
        for p in procs.processes:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    drain(wait=0.0)  # a rank's queue is flushed before its process exits
    return messages


def rank_error(tp_size: int, messages: list[Message], processes: list[Any],
                exc: ProcessException) -> TPRankError:
    """The most likely root cause among the failed ranks.

    Preference: a rank that raised outside a collective (lowest rank first: with a bad
    configuration every rank raises the same error); then a rank killed by a signal it
    did not get from us (a crash in the kernel); then the earliest error seen inside a
    collective (the peer's side of someone else's failure).
    """
    errors = {m[1]: m[2] for m in messages if m[0] == "error"}
    primary = sorted(r for r, e in errors.items() if not e["secondary"])
    crashed = sorted(i for i, p in enumerate(processes)
                     if p.exitcode is not None and p.exitcode < 0 and -p.exitcode not in _OUR_SIGNALS
                     and i not in errors)
    if primary:
        rank = primary[0]
    elif crashed:
        code = processes[crashed[0]].exitcode
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        others = tuple(sorted(set(errors) | set(crashed[1:])))
        return TPRankError(crashed[0], tp_size, name, f"rank process was killed by {name} (a crash in native "
                           "code, e.g. the kernel) and reported nothing", str(exc), others)
    elif errors:
        rank = min(errors, key=lambda r: errors[r]["time"])
    else:
        index = getattr(exc, "error_index", -1)
        return TPRankError(index, tp_size, type(exc).__name__, str(exc).strip().splitlines()[0], str(exc))
    e = errors[rank]
    return TPRankError(rank, tp_size, e["exc_type"], e["message"], e["traceback"],
                       tuple(sorted(set(errors) - {rank})))
