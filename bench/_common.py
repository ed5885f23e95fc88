"""Helpers shared by the benchmarks in bench/: machine facts, load, timing, JSON output.

Only the standard library here (torch is imported lazily by `machine()`), so the
verify benchmark can use it without paying for torch.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"

MiB = 1024 * 1024


def load() -> dict[str, Any]:
    """`uptime` and the 1/5/15-minute load averages right now."""
    try:
        text = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        text = ""
    one, five, fifteen = os.getloadavg()
    return {"uptime": text, "loadavg": [round(one, 2), round(five, 2), round(fifteen, 2)],
            "at": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}


def machine(with_torch: bool = True) -> dict[str, Any]:
    """CPU model, the ISA flags that matter for these kernels, cores, memory, versions."""
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                            "cpus": os.cpu_count()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        lscpu = ""
    fields = dict(re.findall(r"^([^:\n]+):\s*(.*)$", lscpu, flags=re.M))
    info["model_name"] = fields.get("Model name", "?")
    info["vendor"] = fields.get("Vendor ID", "?")
    info["cpu_family_model"] = f"{fields.get('CPU family', '?')}/{fields.get('Model', '?')}"
    info["hypervisor"] = fields.get("Hypervisor vendor")
    info["l2"], info["l3"] = fields.get("L2 cache"), fields.get("L3 cache")
    flags = set(fields.get("Flags", "").split())
    wanted = ("avx2", "avx512f", "avx512bw", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16",
              "amx_int8")
    info["flags"] = {f: f in flags for f in wanted}
    try:
        total = re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())
        if total:
            info["mem_total_gib"] = round(int(total.group(1)) / 1024**2, 1)
    except (OSError, AttributeError):
        pass
    with contextlib.suppress(OSError):
        info["thp"] = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    if with_torch:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        info["torch_avx512_bf16"] = bool(torch.cpu._is_avx512_bf16_supported())
        info["torch_amx"] = bool(torch.cpu._is_amx_tile_supported())
    return info


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def wait_for_quiet(threshold: float = 0.3, window: float = 0.1, timeout: float = 2.0) -> float:
    """Block (up to `timeout` s) until the whole machine was at most `threshold` busy
    over a `window`-second sample; returns the last busy fraction seen (0..1).

    The caller is idle while it waits, so the busy time is other processes'. On a
    shared 2-core machine this moves each timed call into a quiet window when there is
    one; when there is none the call still runs after `timeout` (and the fraction says so).
    """
    deadline = time.monotonic() + timeout
    busy = 1.0
    while True:
        b0, t0 = _cpu_times()
        time.sleep(window)
        b1, t1 = _cpu_times()
        busy = (b1 - b0) / max(1, t1 - t0)
        if busy <= threshold or time.monotonic() >= deadline:
            return busy


def git_state() -> dict[str, Any]:
    """The commit the numbers belong to, and which measured folders had local edits."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return ""
    dirty = git("status", "--porcelain", "--", "layoutc", "generated", "contracts").splitlines()
    return {"commit": git("rev-parse", "--short", "HEAD"), "dirty_files": [line[3:] for line in dirty]}


def stats(seconds: list[float]) -> dict[str, Any]:
    """best / median / max / spread of a list of wall times (seconds), in ms."""
    ordered = sorted(seconds)
    q1 = ordered[len(ordered) // 4]
    q3 = ordered[(3 * len(ordered)) // 4]
    return {"n": len(seconds), "best_ms": ordered[0] * 1e3, "median_ms": statistics.median(seconds) * 1e3,
            "max_ms": ordered[-1] * 1e3, "iqr_ms": (q3 - q1) * 1e3}


def write_json(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    path.write_text(json.dumps(payload, indent=1, sort_keys=False, default=str) + "\n")
    return path


def table(rows: list[list[Any]], header: list[str]) -> str:
    """A plain fixed-width table (also valid-looking Markdown when pasted)."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=True)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells[1:]]
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


Timer = Callable[[], Any]
