"""Test-only: start an engine child's vLLM workers from a forkserver that has imported vLLM once.

vLLM's CPU platform starts every worker with `spawn` (CpuPlatform.check_and_update_config sets
VLLM_WORKER_MULTIPROC_METHOD=spawn), so each worker of each engine load imports vLLM afresh: about
10 CPU seconds a worker, most of an engine test's time on 2 cores (13 loads of the tiny Mixtral are 33
worker imports). `install()` (tests/support/engine/child.py, before its first `vllm.LLM`) makes
`MultiprocExecutor` take its context from here instead: Python's own `forkserver`, whose server
process imports PRELOAD once (a fresh interpreter that has run no engine: no thread pool, no plugin
loaded), then forks one process per worker. The worker runs vLLM's own `WorkerProc.worker_main`
unchanged; only how its process starts differs:

- a forkserver child would inherit the server's environment, not the one the engine core set when it
  started the worker (LAYOUTC_VLLM per run, LAYOUTC_TEST_BREAK, vLLM's per-rank OpenMP variables),
  so `_EnvProcess` carries a copy of `os.environ` taken when vLLM starts it, and `_run` puts it in
  place before vLLM's target runs (vLLM reads its variables and loads its plugins, layoutc's among
  them, in the worker after that: worker_base.py `init_worker` -> `load_general_plugins`);
- tests/support/engine/site/sitecustomize.py `setup()` runs again then, so a planted break applies to the
  already imported module as it would on import.

Everything else (the pipes, the lock, terminate/kill, exit codes) is multiprocessing's forkserver
context, which vLLM's spawn path already treats like spawn (no inherited descriptors).

`install(ENGINE_CORE_PRELOAD, engine_core=True)` (tests/support/engine/caller.py) does the same for the engine
core process a plain `vllm.LLM(...)` starts (v1/engine/utils.py `CoreEngineProcManager`): still its own
process, which spawns its worker as vLLM does.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from typing import Any

#: What the server imports once: the worker's executor and runner, the CPU MoE experts, the tiny models
#: (tests/support/engine/child.py's workers).
PRELOAD = [
    "vllm.v1.executor.multiproc_executor",
    "vllm.v1.worker.cpu_worker",
    "vllm.v1.worker.cpu_model_runner",
    "vllm.model_executor.layers.fused_moe.experts.cpu_moe",
    "vllm.model_executor.models.mixtral",
    "vllm.model_executor.models.gpt_oss",
]
#: What an engine core process imports (tests/support/engine/caller.py).
ENGINE_CORE_PRELOAD = ["vllm.v1.engine.core", "vllm.v1.executor.multiproc_executor"]


def _run(env: dict[str, str], target: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    os.environ.clear()
    os.environ.update(env)
    try:
        import sitecustomize  # tests/support/engine/site: the planted break for this run's environment
    except ImportError:
        pass
    else:
        setup = getattr(sitecustomize, "setup", None)
        if setup is not None:
            setup()
    return target(*args, **kwargs)


#: Variables one run sets for its own workers: the server starts without them (its imports must not plant a break).
PER_RUN = ("LAYOUTC_VLLM", "LAYOUTC_TEST_BREAK")


def _ensure_server() -> None:
    """Start the server (once) from this process's environment less PER_RUN: at the first worker, so it
    has what vLLM set for workers before it (CpuPlatform's LD_PRELOAD and thread variables)."""
    from multiprocessing import forkserver

    saved = {k: os.environ.pop(k) for k in PER_RUN if k in os.environ}
    try:
        forkserver.ensure_running()
    finally:
        os.environ.update(saved)


class _EnvProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver process that runs its target (through `_run`) in the environment its parent has when
    it starts (vLLM sets per-process variables around `start()`, as spawn would pass them on)."""

    def start(self) -> None:
        env = self._args[0]  # type: ignore[attr-defined]
        env.clear()
        env.update(os.environ)
        _ensure_server()
        super().start()


class _Context:
    """multiprocessing's forkserver context, whose Process runs its target in the creator's environment."""

    def __init__(self) -> None:
        self._inner = multiprocessing.get_context("forkserver")

    def Process(self, target: Callable[..., Any], args: tuple = (), kwargs: dict | None = None, **rest: Any) -> Any:
        return _EnvProcess(target=_run, args=({}, target, tuple(args), dict(kwargs or {})), **rest)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def install(preload: list[str] | None = None, *, engine_core: bool = False) -> None:
    """Make vLLM start its worker processes (tests/support/engine/child.py: the engine core runs in the calling
    process) or, with `engine_core`, its engine core process (tests/support/engine/caller.py: the engine core then
    spawns its workers as vLLM does) from a forkserver that imported `preload` (PRELOAD) once. This process only."""
    multiprocessing.set_forkserver_preload(PRELOAD if preload is None else preload)
    context = _Context()
    if engine_core:
        from vllm.v1.engine import utils

        utils.get_mp_context = lambda: context
    else:
        from vllm.v1.executor import multiproc_executor

        multiproc_executor.get_mp_context = lambda: context
