"""Run one bug's check in this interpreter against the engine Python found first on sys.path.

Usage: python -m bench.replay.child BUG_KEY [PATH ...]
PATHs are put at the front of sys.path (the unpacked release, then its extra wheels); with none,
the environment's own engine is used. Prints one JSON object: the engine's version and file,
and per configuration the mismatch lines and info lines, or the error that stopped it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import traceback


def _load(bug_function: str, engine: str) -> tuple[object, object, str, str]:
    """Import the engine function; for vLLM, its CPU experts module first (the wheel's Python
    then imports without CUDA, as measured for 0.34 in issue 42)."""
    if engine == "sglang":
        # SGLang's import chain: the oracle's stubs (sgl_kernel, torchvision) and the pure-Python
        # packages in LAYOUTC_SGLANG_PATH, appended after the release under test.
        from tests.conformance.sglang_oracle import _setup

        _setup()
    if engine == "vllm":
        # older releases lack the module; the engine function's own import below decides
        with contextlib.suppress(Exception):
            importlib.import_module("vllm.model_executor.layers.fused_moe.experts.cpu_moe")
    mod_name, qual = bug_function.split(":")
    mod = importlib.import_module(mod_name)
    obj: object = mod
    for part in qual.split("."):
        obj = getattr(obj, part)
    top = importlib.import_module(engine)
    return obj, mod, getattr(top, "__version__", "?"), str(getattr(top, "__file__", "?"))


def main(argv: list[str]) -> int:
    key, paths = argv[0], argv[1:]
    sys.path[:0] = paths
    from bench.replay.bugs import by_key
    from bench.replay.drivers import DRIVERS

    bug = by_key(key)
    out: dict[str, object] = {"bug": key}
    try:
        fn, mod, version, where = _load(bug.function, bug.engine)
    except Exception as exc:  # reported as a named import failure, never a pass
        out["import_error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(out))
        return 0
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
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
