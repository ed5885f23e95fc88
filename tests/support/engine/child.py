"""vLLM CPU engine runs in one process: for each plugin mode, load, greedy-generate, record.

    python tests/support/engine/child.py MODEL_DIR OUT.json --tp 2 --modes off,check,replace
    python tests/support/engine/child.py MODEL_DIR OUT.json --runs 4:off,4:replace,2:replace:ep --keep-going
    python tests/support/engine/child.py MODEL_DIR OUT.json --runs 4:off,4:check:break=end_pad --keep-going

Each mode is a fresh `vllm.LLM` (a new engine and fresh worker processes, which
vLLM's CPU platform always spawns: distributed_executor_backend="mp", at tp=1 too,
as vLLM picks by default when the engine core runs in its own process);
LAYOUTC_VLLM is set in the environment before it, so the workers, which load the
model, load the plugin in that mode. The engine core runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0), so the child imports vLLM once for all modes.
The parent sets LAYOUTC_TEST_BLOCK_ZENTORCH / LAYOUTC_TEST_BREAK with
tests/support/engine/site on PYTHONPATH. Writes {"runs": [{"mode", "tp", "tokens",
"logprobs", "load_s", "load_cpu_s", "decode_s", "decode_cpu_s", "generated"}, ...]}
(`*_cpu_s`: CPU seconds of this process and its live workers, `tree_cpu_s`), rewritten atomically after
each run (so the runs before a failing one are kept).
A failing load propagates: the child exits non-zero with vLLM's error output; with
--keep-going it is recorded instead ({"mode", "tp", "ep", "error"}) and the next run goes
on. Each run starts with a marker line `=== layoutc engine run tp=T mode=M ep=E ===` on
stdout and stderr, so a log can be split per run. `:ep` runs the engine with
enable_expert_parallel=True. `:break=KIND` sets LAYOUTC_TEST_BREAK=KIND for that run alone (the
workers, spawned afresh per load, read it in tests/support/engine/site/sitecustomize.py; the caller's way,
tests/support/engine/caller.py), so healthy and broken engines share one child; such a run's record and
marker carry `break` (the marker ends ` break=KIND ===`). `--forkserver` starts the workers from a
server process that imported vLLM once instead of spawning each afresh (tests/support/engine/forkserve.py: the
engine tests' way; a worker's vLLM import is most of a small engine's load time).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time


def prompts(n: int, vocab: int = 512, length: int = 6) -> list[list[int]]:
    """`n` fixed token-id prompts (no tokenizer: skip_tokenizer_init=True)."""
    return [[(7 + 31 * i + 17 * j) % vocab for j in range(length)] for i in range(n)]


def tree_cpu_s() -> float:
    """CPU seconds (user + system, every thread) of this process and every live descendant
    (vLLM's workers), from /proc/<pid>/stat; 0.0 where /proc is absent. A process that has
    already exited is not counted."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    stats: dict[int, tuple[int, float]] = {}  # pid -> (ppid, cpu seconds)
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0.0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while listed
        stats[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    mine, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in mine:
                mine.add(pid)
                frontier.append(pid)
    return sum(stats[pid][1] for pid in mine if pid in stats)


def run(model: str, tp: int, mode: str, tokens: int, n_prompts: int, repeat: int, ep: bool = False,
        brk: str = "") -> dict:
    from vllm import LLM, SamplingParams

    if brk:
        os.environ["LAYOUTC_TEST_BREAK"] = brk
    if mode == "off":
        os.environ.pop("LAYOUTC_VLLM", None)
    else:
        os.environ["LAYOUTC_VLLM"] = mode
    start, cpu_start = time.perf_counter(), tree_cpu_s()
    llm = LLM(model=model, dtype="bfloat16", tensor_parallel_size=tp, enforce_eager=True, max_model_len=64,
              skip_tokenizer_init=True, seed=0, distributed_executor_backend="mp",
              enable_expert_parallel=ep)
    load_s, load_cpu_s = time.perf_counter() - start, tree_cpu_s() - cpu_start
    params = SamplingParams(max_tokens=tokens, temperature=0.0, logprobs=2, detokenize=False, ignore_eos=True)
    batch = [{"prompt_token_ids": p} for p in prompts(n_prompts)]
    outs = llm.generate(batch, params, use_tqdm=False)
    decode, decode_cpu = [], []
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), tree_cpu_s()
        llm.generate(batch, params, use_tqdm=False)
        decode.append(time.perf_counter() - start)
        decode_cpu.append(tree_cpu_s() - cpu_start)
    result = {"mode": mode, "tp": tp, "ep": ep, "load_s": load_s, "load_cpu_s": load_cpu_s, "decode_s": decode,
              "decode_cpu_s": decode_cpu, "generated": n_prompts * tokens,
              "tokens": [], "logprobs": [], "gaps": []}
    if brk:
        result["break"] = brk
    for out in outs:
        seq = out.outputs[0]
        result["tokens"].append(list(seq.token_ids))
        result["logprobs"].append([float(step[tok].logprob)
                                   for tok, step in zip(seq.token_ids, seq.logprobs, strict=True)])
        # the greedy choice's margin: top-1 minus top-2 logprob (a near-tie may flip across tp)
        result["gaps"].append([_gap(step) for step in seq.logprobs])
    engine = getattr(llm, "llm_engine", None)
    core = getattr(engine, "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
    del llm, engine, core
    gc.collect()
    return result


def _gap(step: dict) -> float:
    """Top-1 minus top-2 logprob of one decode step (logprobs=2); inf with a single candidate."""
    best = sorted((float(v.logprob) for v in step.values()), reverse=True)
    return best[0] - best[1] if len(best) > 1 else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--tp", default="1", help="comma-separated tensor-parallel sizes")
    ap.add_argument("--modes", default="off")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=0, help="timed generate() calls after the first")
    ap.add_argument("--runs", default="",
                    help="tp:mode[:ep][:break=KIND],... in this order (instead of --tp x --modes)")
    ap.add_argument("--keep-going", action="store_true", help="record a failing load and go on")
    ap.add_argument("--forkserver", action="store_true",
                    help="start the workers from a server that imported vLLM once (tests/support/engine/forkserve.py)")
    args = ap.parse_args()
    if args.forkserver:
        import forkserve  # tests/support/engine, this script's folder (sys.path[0])

        forkserve.install()
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    base_break = os.environ.get("LAYOUTC_TEST_BREAK", "")
    plan: list[tuple[int, str, bool, str]] = []
    if args.runs:
        for r in args.runs.split(","):
            tp, mode, *flags = r.split(":")
            brk = next((f.removeprefix("break=") for f in flags if f.startswith("break=")), "")
            plan.append((int(tp), mode, "ep" in flags, brk))
    else:
        plan = [(int(t), m, False, "") for t in args.tp.split(",") for m in args.modes.split(",")]
    runs: list[dict] = []
    for tp, mode, ep, brk in plan:
        if not brk:  # a run without its own break has the child's (the environment it was started with)
            os.environ.pop("LAYOUTC_TEST_BREAK", None)
            if base_break:
                os.environ["LAYOUTC_TEST_BREAK"] = base_break
        marker = f"=== layoutc engine run tp={tp} mode={mode} ep={int(ep)}{f' break={brk}' if brk else ''} ==="
        print(marker, flush=True)
        print(marker, file=sys.stderr, flush=True)
        try:
            runs.append(run(args.model, tp, mode, args.tokens, args.prompts, args.repeat, ep, brk))
        except Exception as exc:
            if not args.keep_going:
                raise
            runs.append({"mode": mode, "tp": tp, "ep": ep, "error": f"{type(exc).__name__}: {exc}",
                         **({"break": brk} if brk else {})})
            gc.collect()
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"runs": runs}, f)
        os.replace(tmp, args.out)

if __name__ == "__main__":
    main()
