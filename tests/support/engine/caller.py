"""A plain Python caller of `vllm.LLM(...)`: what a harness catches when the engine refuses to start.

    python tests/support/engine/caller.py MODEL_DIR OUT.json --calls 'end_pad@check;none@check,strict'

Unlike tests/support/engine/child.py this keeps vLLM's default process model (VLLM_ENABLE_V1_MULTIPROCESSING
left unset: the engine core in its own process, the workers below it), as a user's program has it.
For each call `kind@mode` (`;`-separated), LAYOUTC_TEST_BREAK=kind (`none`: no bug) and LAYOUTC_VLLM=mode
are set in os.environ (the engine processes inherit them; tests/support/engine/site must be on PYTHONPATH),
then `vllm.LLM(...)` at tp 1; an engine that starts is shut down at once.
Writes {"calls": [{"kind", "started": bool, "type": the exception's class with its module,
"text": str(exception)}, ...]} atomically after each call.
`--forkserver` (the engine tests' way) starts each engine core process, still its own process, from a
server that imported vLLM once instead of spawning it afresh (tests/support/engine/forkserve.py), in the
environment the caller has when vLLM starts it; the engine core spawns its worker as vLLM does, and a
refusal reaches the caller through the same relay (layoutc/tools/vllm_plugin/relay.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import os


def attempt(model: str, kind: str, mode: str) -> dict:
    from vllm import LLM

    os.environ["LAYOUTC_TEST_BREAK"] = "" if kind == "none" else kind
    os.environ["LAYOUTC_VLLM"] = mode
    try:
        llm = LLM(
            model=model,
            dtype="bfloat16",
            tensor_parallel_size=1,
            enforce_eager=True,
            max_model_len=64,
            skip_tokenizer_init=True,
            seed=0,
        )
    except Exception as exc:  # what a harness would catch
        return {
            "kind": kind,
            "mode": mode,
            "started": False,
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "text": str(exc),
        }
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
    del llm, core
    gc.collect()
    return {"kind": kind, "mode": mode, "started": True}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--calls", default="end_pad@check", help="kind@mode;... (kind none: no planted bug)")
    ap.add_argument("--forkserver", action="store_true",
                    help="start each engine core process from a server that imported vLLM once "
                         "(tests/support/engine/forkserve.py); the engine core spawns its worker as vLLM does")
    args = ap.parse_args()
    if args.forkserver:
        import forkserve  # tests/support/engine, this script's folder (sys.path[0])

        forkserve.install(forkserve.ENGINE_CORE_PRELOAD, engine_core=True)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    calls: list[dict] = []
    for call in args.calls.split(";"):
        kind, mode = call.split("@", 1)
        calls.append(attempt(args.model, kind, mode))
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"calls": calls}, f)
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
