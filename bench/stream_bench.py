"""`layoutc run` at the width people deploy: peak RSS and CPU seconds against the number of layers (issue 44).

    python bench/stream_bench.py                                   # gemma4 + qwen3_moe, 2/4/8 layers, tp 1,2,4
    python bench/stream_bench.py --families gemma4 --layers 2,4 --width 0.5 --out /tmp/s.json

For each family (bench/wide_checkpoint.py SHAPES: gemma-4-26B-A4B's text model, Qwen3-30B-A3B)
and layer count, the checkpoint is written (bf16, one shard per layer), then:

* `layoutc run DIR --tp TPS --format json` in a child: its peak RSS (VmHWM, KiB), CPU seconds
  (user + system, getrusage of the child), wall seconds, exit code, rows ok / total, and the
  per-layer figures run reports;
* the per-rank loader (`checkpoints.loader.load_layer_rank`, the generated `load_*` over the
  mapped reader) of layer 0 at the largest TP degree, each rank in a child: the bytes it read
  from the file (the reader's own count, `Checkpoint.bytes_read`) against the bytes the rank owns (its
  gate / up rows and down columns, unpadded), its seconds, and the disk-read bound: the same
  number of bytes read sequentially from the same shard with `os.pread` in 8 MiB chunks, page
  cache warm (the ratio is load seconds / bound seconds);

and the checkpoint is deleted. Results, with the commit and the load average before and after,
go to bench/results/stream.json (or --out).

    python bench/stream_bench.py --families gemma4 --layers 2,4,8 --subset --lock /work/wt/bigmem.lock \
        --extra "--layers 1" --extra "--layer-range 3:4"
    python bench/stream_bench.py --checkpoint /tmp/int4-2 --checkpoint /tmp/int4-4 --tp 4 --no-loader

`--subset` writes only the deepest checkpoint and makes the others from it (wide_checkpoint.subset:
the same layers' shards, linked, no new draws); `--extra ARGS` runs `layoutc run ... ARGS` once more
on the deepest checkpoint of each family; `--checkpoint DIR` runs on a checkpoint already written
(the int4 one of bench/int4_checkpoint.py); `--lock FILE` holds an flock on FILE around each
`layoutc run` (the shared machine's rule for runs over 4 GiB). The bar of each run is the issue's:
2 x (one layer's experts in float32 + one tp-1 rank's bf16 experts), or for a quantized checkpoint
3 x (one layer's experts in float32 + one rank's packed codes at the largest tp).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, ROOT, load

PEAK = r"""
import sys
from layoutc import cli
try:
    rc = cli.main(sys.argv[1:])
finally:
    with open("/proc/self/status") as fh:
        hwm = next(line.split()[1] for line in fh if line.startswith("VmHWM"))
    print(f"peak_kib={hwm}", file=sys.stderr)
sys.exit(rc)
"""


def _commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=False
    ).stdout.strip()


def _tree_rss_kib(pid: int) -> int:
    """VmRSS (KiB) of `pid` and its descendants now; 0 for a process that has gone."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                total += next((int(line.split()[1]) for line in fh if line.startswith("VmRSS")), 0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return total


def run_child(folder: str, tps: str, extra: tuple[str, ...] = (), lock: str | None = None) -> dict[str, Any]:
    """`layoutc run` in a child: peak, CPU and wall seconds, exit code, rows, per-layer figures.

    Two peaks: `peak_kib` is the child's VmHWM at exit (run resets it before each rank, so it is the
    last rank's span), `sampled_peak_kib` the largest VmRSS of the child's process tree sampled by
    this process every 50 ms (independent of run's own resets; may miss a spike under 50 ms).
    `extra`: more `layoutc run` arguments (`--layers 1`); `lock`: a file flocked (exclusive) around the
    child, the wait not counted in its wall seconds (`lock_wait_s`)."""
    with _flocked(lock) as waited:
        out = _run_child(folder, tps, extra)
    out["lock_wait_s"] = round(waited, 1)
    return out


@contextlib.contextmanager
def _flocked(lock: str | None) -> Iterator[float]:
    if lock is None:
        yield 0.0
        return
    t0 = time.perf_counter()
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield time.perf_counter() - t0
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run_child(folder: str, tps: str, extra: tuple[str, ...]) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with subprocess.Popen(
        [sys.executable, "-c", PEAK, "run", folder, "--tp", tps, "--format", "json", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as child:
        sampled = [0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                sampled[0] = max(sampled[0], _tree_rss_kib(child.pid))

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        stdout, stderr = child.communicate()
        stop.set()
        watcher.join()
    proc = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = [int(line.split("=")[1]) for line in proc.stderr.splitlines() if line.startswith("peak_kib=")]
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        data = {}
    rows = data.get("rows", []) if isinstance(data, dict) else []
    return {
        "args": " ".join(extra),
        "exit": proc.returncode,
        "peak_kib": peak[0] if peak else None,
        "sampled_peak_kib": sampled[0],
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
        "wall_s": round(wall, 1),
        "rows_ok": sum(1 for r in rows if r.get("result") == "ok"),
        "rows": len(rows),
        "layers": data.get("layers", []) if isinstance(data, dict) else [],
        "stderr_tail": proc.stderr[-600:] if proc.returncode else "",
    }


LOADER = r"""
import json, os, sys, time
from layoutc.tools.checkpoints import reader
from layoutc.tools.checkpoints.formats import describe
from layoutc.tools.checkpoints.loader import load_layer_rank
from layoutc.tools.run import checkpoint_dtype
from layoutc.tools.runplan import checkpoint_plan
import importlib
folder, tp, rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mod = importlib.import_module("layoutc_generated.vllm_cpu_grouped_gemm")
with reader.Checkpoint(folder) as ckpt:
    from layoutc.tools.checkpoints.formats import FORMATS
    moe = describe(ckpt.config, FORMATS.get(ckpt.config["model_type"]), ckpt.weight_map)
    layer = moe.moe_layers[0]
    dtype = checkpoint_dtype(ckpt, moe, layer)
    plan = checkpoint_plan(mod, moe, tp, dtype, "vec")
    del load_layer_rank(ckpt, moe, layer, mod, plan, rank).w13  # imports and page cache warm
    before = ckpt.bytes_read
    t0 = time.perf_counter()
    rw = load_layer_rank(ckpt, moe, layer, mod, plan, rank)
    seconds = time.perf_counter() - t0
    count = [ckpt.bytes_read - before]
    owned = moe.num_experts * 3 * (moe.intermediate_size // tp) * moe.hidden_size * 2
    shard = ckpt.weight_map[next(n for n in ckpt.weight_map if f"layers.{layer}." in n and "expert" in n)]
print(json.dumps({"read": count[0], "owned": owned, "seconds": seconds,
                  "shard": os.path.join(folder, shard)}))
"""


def disk_bound(path: str, nbytes: int) -> float:
    """Seconds to read `nbytes` of `path` sequentially (8 MiB preads, from the start, wrapping), cache warm."""
    chunk = 8 << 20
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for _ in range(2):  # the first pass warms the cache, the second is timed
            t0 = time.perf_counter()
            done = pos = 0
            while done < nbytes:
                got = os.pread(fd, min(chunk, nbytes - done), pos)
                done += len(got)
                pos = (pos + len(got)) % max(1, size - chunk)
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def loader_child(folder: str, tp: int) -> list[dict[str, Any]]:
    out = []
    for rank in range(tp):
        proc = subprocess.run(
            [sys.executable, "-c", LOADER, folder, str(tp), str(rank)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        if proc.returncode:
            out.append({"rank": rank, "error": proc.stderr[-600:]})
            continue
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        bound = disk_bound(got["shard"], got["read"])
        out.append(
            {
                "rank": rank,
                "bytes_read": got["read"],
                "bytes_owned": got["owned"],
                "read_over_owned": round(got["read"] / got["owned"], 4),
                "load_s": round(got["seconds"], 3),
                "disk_bound_s": round(bound, 3),
                "ratio_to_bound": round(got["seconds"] / bound, 2),
            }
        )
    return out


def bar_bytes(folder: str, tps: list[int]) -> int:
    """The issue's bar for a run of `folder`: 2 x (one layer's experts in float32 + one tp-1 rank's bf16
    experts), or, with a quantization_config, 3 x (float32 layer + one rank's packed int4 codes at max(tps))."""
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg = cfg.get("text_config", cfg)
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
    elements = int(experts) * 3 * int(cfg["moe_intermediate_size"]) * int(cfg["hidden_size"])
    if "quantization_config" in cfg:
        bits = int(cfg["quantization_config"].get("bits", 4))
        return 3 * (elements * 4 + elements * bits // 8 // max(tps))
    return 2 * (elements * 4 + elements * 2)


def _summary(name: str, r: dict[str, Any]) -> str:
    per = ", ".join(
        f"L{f['layer']}: inputs {f['inputs_ms'] / 1e3:.1f} s, reference {f['reference_build_ms'] / 1e3:.1f} + "
        f"{f['reference_ms'] / 1e3:.1f} s, load {f['load_ms'] / 1e3:.1f} s, kernel {f['kernel_ms'] / 1e3:.1f} s, "
        f"compare {f['compare_ms'] / 1e3:.1f} s, total {f['total_ms'] / 1e3:.1f} s, peak {f['peak_mib']:.0f} MiB"
        for f in r["layers"]
    )
    return (
        f"{name} {r['args']}: exit {r['exit']}, {r['rows_ok']}/{r['rows']} ok, peak "
        f"{(r['peak_kib'] or 0) / 1024:.0f} MiB (sampled {r['sampled_peak_kib'] / 1024:.0f}), "
        f"{r['cpu_s']} cpu s, {r['wall_s']} s (lock wait {r['lock_wait_s']} s); {per}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="gemma4,qwen3_moe")
    parser.add_argument("--layers", default="2,4,8")
    parser.add_argument("--tp", default="1,2,4")
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--experts", type=int, default=None)
    parser.add_argument("--dir", default="/tmp/layoutc-stream-bench")
    parser.add_argument("--out", default=str(RESULTS / "stream.json"))
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints")
    parser.add_argument("--no-loader", action="store_true", help="skip the per-rank loader's bytes (run only)")
    parser.add_argument("--subset", action="store_true", help="write the deepest checkpoint only, link the others")
    parser.add_argument("--extra", action="append", default=[], help="more run arguments, on the deepest checkpoint")
    parser.add_argument("--checkpoint", action="append", default=[], help="run on this checkpoint (no families)")
    parser.add_argument("--lock", default=None, help="flock this file around each layoutc run")
    args = parser.parse_args()
    import wide_checkpoint as wide

    result: dict[str, Any] = {
        "commit": _commit(),
        "load_before": load(),
        "width": args.width,
        "tp": args.tp,
        "runs": [],
    }
    tps = [int(t) for t in args.tp.split(",")]
    for folder in args.checkpoint:
        for extra in [*args.extra, ""]:  # the extra runs (one layer) first, the whole checkpoint last
            entry = {
                "load_at_start": load(),
                "checkpoint": folder,
                "disk_bytes": sum(p.stat().st_size for p in Path(folder).glob("*.safetensors")),
                "bar_bytes": bar_bytes(folder, tps),
                "run": run_child(folder, args.tp, tuple(extra.split()), args.lock),
            }
            result["runs"].append(entry)
            print(_summary(folder, entry["run"]), flush=True)
            _write(args.out, result)
    families = [f for f in args.families.split(",") if f] if not args.checkpoint else []
    counts = sorted(int(n) for n in args.layers.split(","))
    for family in families:
        deepest = os.path.join(args.dir, f"{family}-{counts[-1]}-w{args.width}")
        made: list[str] = []
        for layers in counts:
            folder = os.path.join(args.dir, f"{family}-{layers}-w{args.width}")
            cfg = wide.config_for(family, layers, args.width, args.experts)
            t0 = time.perf_counter()
            if args.subset and not os.path.exists(os.path.join(deepest, "config.json")):
                wide.write(deepest, wide.config_for(family, counts[-1], args.width, args.experts))
                made.append(deepest)
            if not os.path.exists(os.path.join(folder, "config.json")):
                if args.subset:
                    wide.subset(deepest, folder, family, layers, args.width, args.experts)
                else:
                    wide.write(folder, cfg)
                made.append(folder)
            written = time.perf_counter() - t0
            runs = [""] + (args.extra if layers == counts[-1] else [])
            for extra in runs:
                entry = {
                    "load_at_start": load(),
                    "family": family,
                    "layers": layers,
                    "hidden": cfg["hidden_size"],
                    "moe_intermediate": cfg["moe_intermediate_size"],
                    "experts": cfg["num_experts"],
                    "disk_bytes": sum(os.path.getsize(p) for p in Path(folder).glob("*.safetensors")),
                    "bar_bytes": bar_bytes(folder, tps),
                    "write_s": round(written, 1),
                    "run": run_child(folder, args.tp, tuple(extra.split()), args.lock),
                    "loader": loader_child(folder, max(tps))
                    if layers == counts[0] and not extra and not args.no_loader
                    else [],
                }
                result["runs"].append(entry)
                print(_summary(f"{family} {layers} layers", entry["run"]), flush=True)
                _write(args.out, result)  # after every entry: a run cut short keeps what it measured
        if not args.keep:
            for folder in made:
                shutil.rmtree(folder, ignore_errors=True)
    result["load_after"] = load()
    _write(args.out, result)
    print(f"wrote {args.out}")


def _write(out: str, result: dict[str, Any]) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    tmp = out + ".tmp"
    Path(tmp).write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
