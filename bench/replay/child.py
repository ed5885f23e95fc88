"""Run bugs' checks in this interpreter against the engine Python found first on sys.path.

Usage: python -m bench.replay.child BUG_KEY[,BUG_KEY...] [PATH ...]
PATHs are put at the front of sys.path (the unpacked release, then its extra wheels); with none,
the environment's own engine is used. The bugs (all of one engine) run one after another in this
one interpreter, so a release is imported once, not once a bug. Prints one JSON object a bug, in
the order given: the engine's version and file, and per configuration the mismatch lines and
info lines, or the error that stopped it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import traceback


def _configs_registered_once() -> None:
    """Let an older SGLang register a config that transformers 5 now ships itself.

    SGLang 0.5.16 / 0.5.17 call `AutoConfig.register("qwen3_asr", ...)` without `exist_ok`, which
    transformers 5 refuses ("'qwen3_asr' is already used by a Transformers config"); SGLang 0.5.23
    passes `exist_ok=True` (sglang/srt/configs/qwen3_asr.py). The stand-in passes it for them. It
    touches the model-config registry only, never the pad code under test.
    """
    from transformers import AutoConfig

    register = AutoConfig.register

    def tolerant(model_type: str, config: object, exist_ok: bool = False) -> None:
        register(model_type, config, exist_ok=True)

    AutoConfig.register = staticmethod(tolerant)  # type: ignore[method-assign]


_SET_UP: list[str] = []  # SGLang's import chain is set up once a process, however many bugs run


def _load(bug_function: str, engine: str, moved: tuple[str, ...] = ()) -> tuple[object, object, str, str]:
    """Import the engine function; for vLLM, its CPU experts module first (the wheel's Python
    then imports without CUDA, as measured for 0.34 in issue 42). `moved`: where later releases
    hold the same function ("module:qualname"), tried in order when `bug_function` does not import;
    the first error is the one raised."""
    if engine == "sglang":
        # SGLang's import chain: the oracle's stubs (sgl_kernel, torchvision) and the pure-Python
        # packages in LAYOUTC_SGLANG_PATH, appended after the release under test.
        from tests.support.conformance.sglang_oracle import _setup

        if not _SET_UP:
            _setup()
            _configs_registered_once()
            _SET_UP.append(engine)
    if engine == "vllm":
        # older releases lack the module; the engine function's own import below decides
        with contextlib.suppress(Exception):
            importlib.import_module("vllm.model_executor.layers.fused_moe.experts.cpu_moe")
    first: Exception | None = None
    for where in (bug_function, *moved):
        mod_name, qual = where.split(":")
        try:
            mod = importlib.import_module(mod_name)
            obj: object = mod
            for part in qual.split("."):
                obj = getattr(obj, part)
            break
        except (ImportError, AttributeError) as exc:
            first = first or exc
    else:
        assert first is not None
        raise first
    top = importlib.import_module(engine)
    return obj, mod, getattr(top, "__version__", "?"), str(getattr(top, "__file__", "?"))


def _run_bug(key: str) -> dict[str, object]:
    """One bug's answer (see the module docstring); an import failure is recorded, never raised."""
    from bench.replay.bugs import by_key
    from bench.replay.drivers import DRIVERS

    bug = by_key(key)
    out: dict[str, object] = {"bug": key}
    try:
        fn, mod, version, where = _load(bug.function, bug.engine, bug.moved)
    except Exception as exc:  # reported as a named import failure, never a pass
        out["import_error"] = f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception):  # the release, so that a moved function can be told unmodeled
            out["version"] = importlib.import_module(bug.engine).__version__
        return out
    out["version"], out["file"] = version, where
    gen_mod = importlib.import_module(f"layoutc_generated.{bug.contract}")
    results = []
    for cfg in bug.configs:
        row: dict[str, object] = {"config": cfg}
        try:
            bad, info = DRIVERS[bug.driver](fn, mod, gen_mod, dict(cfg))
            row["mismatch"], row["info"] = bad, info
        except Exception as exc:  # a crash in the engine's code is a named failure
            row["error"] = f"{type(exc).__name__}: {exc}"
            row["where"] = traceback.format_exc().strip().splitlines()[-3:]
        results.append(row)
    out["results"] = results
    return out


def main(argv: list[str]) -> int:
    keys, paths = argv[0].split(","), argv[1:]
    sys.path[:0] = paths
    for key in keys:
        print(json.dumps(_run_bug(key)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
