"""Checkpoint -> padded, prepacked weights for one rank: layoutc's loaders vs vLLM 0.32's own path.

    python bench/load_bench.py                  # gemma-4-shaped layer, tp 4, rank 1; 3 rounds
    python bench/load_bench.py --rounds 5 --dir /tmp/lb

The layer (written once as safetensors, bf16, in the Gemma-4 format: fused
`experts.gate_up_proj` [E, 2I, H] and `experts.down_proj` [E, H, I]): 128 experts,
hidden 2816, intermediate 704; tp 4: I_pp 176 -> 192 (vLLM CPU kernel, isa vec).

* layoutc ("ours"): `Checkpoint` + `load_layer_rank_packed`: 4 experts at a time, the
  generated `alloc_w13/w2` (into one staging pair, reused) + `load_w13/w2` read only the
  rank's rows, read from the file with `os.preadv` (`MappedSlice`), into the padded staging
  pair, and the module's `prepack_padded` (`_C::prepack_moe_weight`) packs it straight into
  the layer's packed tensors (`out=`).
* layoutc whole-layer ("ours-whole"): `load_layer_rank` (the whole rank's padded
  parameters), then one `prepack_padded`.
* vLLM 0.32 (its functions, imported from the installed wheel): the weights iterator's
  `safe_open(...).get_tensor(name)` (model_loader/weight_utils.py
  safetensors_weights_iterator: whole tensors), per expert `RoutedExperts._load_w13`
  (w1 = gate, w3 = up) and `RoutedExperts._load_w2` into the unpadded parameters
  [E, 2*176, H] / [E, H, 176], then `CPUUnquantizedExperts._pad_moe_intermediate`
  and `vllm._custom_ops.cpu_prepack_moe_weight` for both (the body of
  process_weights_after_loading).

Each path runs in its own fresh subprocess (2 torch threads), alternating, so one
process's allocator state never helps the other; each calls `gc.freeze()` after its imports. Measured there: wall seconds of the
whole load (open to packed weights) and peak RSS growth over the post-import
baseline, two ways: VmHWM after resetting it via /proc/self/clear_refs (MiB; this
counts the page-cache pages of the memory-mapped file that the reads fault in, which
are clean and reclaimable), and RssAnon sampled every millisecond (the process's own
allocations: parameters, packed weights, read buffers). The paths' packed weights
are checked byte-identical: the SHA-256 of each packed tensor's bytes (with its shape
and dtype) from every child must equal vLLM's; a reordered or unpacked copy fails it.

* pads (`--child pads`, timing only the pad step, issue 26 item 3): in one fresh
  process, the rank's unpadded w13 [E, 352, H] and w2 [E, H, 176] (random bf16) are
  padded by the generated `pad_w13/pad_w2(t, plan, out=out)` into a preallocated,
  pre-faulted `out`, interleaved round by round with `out.copy_(same)` from a
  contiguous tensor of the padded shape (the copy bound: the same bytes written).
  Goal: best pad >= 0.9x the best copy, for w13 and for w2. Both pads' bytes are
  checked against vLLM's own `CPUUnquantizedExperts._pad_moe_intermediate` on the same
  inputs (SHA-256).

Results: bench/results/load.json.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

E, H, I, TP, RANK = 128, 2816, 704, 4, 1  # noqa: E741 (the field's names)
CHUNKED = True  # set by --child ours-whole
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._common import git_state, machine  # noqa: E402


def _status_kib(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def make(folder: Path) -> None:
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "model.safetensors").exists():
        return
    gen = torch.Generator().manual_seed(0)
    gate_up = torch.empty(E, 2 * I, H, dtype=torch.bfloat16)
    down = torch.empty(E, H, I, dtype=torch.bfloat16)
    for e in range(E):
        gate_up[e] = (torch.randn(2 * I, H, generator=gen) * H ** -0.5).to(torch.bfloat16)
        down[e] = (torch.randn(H, I, generator=gen) * I ** -0.5).to(torch.bfloat16)
    save_file({"model.layers.0.experts.gate_up_proj": gate_up, "model.layers.0.experts.down_proj": down,
               "model.layers.0.router.proj.weight": torch.zeros(E, H, dtype=torch.bfloat16)},
              str(folder / "model.safetensors"))
    config = {"model_type": "gemma4_text", "num_hidden_layers": 1, "hidden_size": H, "num_experts": E,
              "moe_intermediate_size": I, "top_k_experts": 8, "hidden_activation": "gelu_pytorch_tanh",
              "enable_moe_block": True}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")


def _digest(t: Any) -> str:
    """`dtype shape sha256` of a CPU tensor's bytes in row-major order (byte-exact: NaN
    payloads and -0.0 count, unlike torch.equal)."""
    import hashlib

    import torch

    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    return f"{t.dtype} {list(t.shape)} {hashlib.sha256(flat.numpy().data).hexdigest()}"


def child_ours(folder: Path) -> tuple[Any, Any]:
    from layoutc_generated import vllm_cpu_grouped_gemm as mod

    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.loader import load_layer_rank, load_layer_rank_packed
    from layoutc.tools.checkpoints.reader import Checkpoint

    with Checkpoint(str(folder)) as ckpt:
        moe = describe(ckpt.config)
        plan = mod.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=TP, isa="vec",
                        activation=moe.activation, dtype="bfloat16")
        if CHUNKED:
            p13, p2, _ = load_layer_rank_packed(ckpt, moe, 0, mod, plan, RANK)
        else:
            rw = load_layer_rank(ckpt, moe, 0, mod, plan, RANK)
            p13, p2 = mod.prepack_padded(rw.w13, rw.w2, plan)
            del rw
    return p13.data, p2.data


def child_vllm(folder: Path) -> tuple[Any, Any]:
    from types import SimpleNamespace

    import torch
    from safetensors import safe_open
    from vllm._custom_ops import cpu_prepack_moe_weight
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.model_executor.utils import replace_parameter

    i_pp = I // TP
    loader = SimpleNamespace(
        moe_config=SimpleNamespace(is_act_and_mul=True, moe_parallel_config=SimpleNamespace(tp_size=TP)),
        _get_hidden_dim=RoutedExperts._get_hidden_dim,
        _narrow_expert_data_for_padding=RoutedExperts._narrow_expert_data_for_padding)
    layer = torch.nn.Module()
    layer.w13_weight = torch.nn.Parameter(torch.empty(E, 2 * i_pp, H, dtype=torch.bfloat16), requires_grad=False)
    layer.w2_weight = torch.nn.Parameter(torch.empty(E, H, i_pp, dtype=torch.bfloat16), requires_grad=False)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118
            if "experts" not in name:
                continue
            t = f.get_tensor(name)
            if name.endswith("gate_up_proj"):
                for e in range(E):
                    RoutedExperts._load_w13(loader, layer.w13_weight[e], 0, "w1", t[e, :I], RANK)
                    RoutedExperts._load_w13(loader, layer.w13_weight[e], 0, "w3", t[e, I:], RANK)
            else:
                for e in range(E):
                    RoutedExperts._load_w2(loader, layer.w2_weight[e], 1, t[e], RANK)
            del t
    experts = object.__new__(CPUUnquantizedExperts)
    experts.moe_config = SimpleNamespace(intermediate_size_per_partition=i_pp,
                                         activation=MoEActivation.GELU_TANH)
    CPUUnquantizedExperts._pad_moe_intermediate(experts, layer)
    replace_parameter(layer, "w13_weight", cpu_prepack_moe_weight(layer.w13_weight, "vec"))
    replace_parameter(layer, "w2_weight", cpu_prepack_moe_weight(layer.w2_weight, "vec"))
    return layer.w13_weight.data, layer.w2_weight.data


def _vllm_padded(w13: Any, w2: Any) -> tuple[Any, Any]:
    """vLLM 0.32's own `CPUUnquantizedExperts._pad_moe_intermediate` of (w13, w2) (padded copies)."""
    from types import SimpleNamespace

    import torch
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts

    layer = torch.nn.Module()
    layer.w13_weight = torch.nn.Parameter(w13.clone(), requires_grad=False)
    layer.w2_weight = torch.nn.Parameter(w2.clone(), requires_grad=False)
    experts = object.__new__(CPUUnquantizedExperts)
    experts.moe_config = SimpleNamespace(intermediate_size_per_partition=I // TP, activation=MoEActivation.GELU_TANH)
    CPUUnquantizedExperts._pad_moe_intermediate(experts, layer)
    return layer.w13_weight.data, layer.w2_weight.data


def child_pads(rounds: int) -> dict[str, Any]:
    """Best / median ms of `pad_*(t, plan, out=)` and of `out.copy_(same)` per tensor, interleaved."""
    import torch
    from layoutc_generated import vllm_cpu_grouped_gemm as mod

    torch.set_num_threads(2)
    plan = mod.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=TP, isa="vec",
                    activation="gelu_tanh", dtype="bfloat16")
    gen = torch.Generator().manual_seed(1)
    srcs = {w: torch.randn(mod.LAYOUT.weight(w).shapes(plan)[0], generator=gen).to(torch.bfloat16)
            for w in ("w13", "w2")}
    want = dict(zip(("w13", "w2"), (_digest(t) for t in _vllm_padded(srcs["w13"], srcs["w2"])), strict=True))
    result: dict[str, Any] = {}
    for w, src in srcs.items():
        pad = mod.LAYOUT.weight(w).pad
        padded = mod.LAYOUT.weight(w).shapes(plan)[1]
        out = torch.empty(padded, dtype=torch.bfloat16).fill_(7.0)  # pre-faulted, not zero
        same = torch.randn(padded, generator=gen).to(torch.bfloat16)
        fns = {"pad_out": lambda pad=pad, src=src, out=out: pad(src, plan, out=out),
               "copy": lambda out=out, same=same: out.copy_(same)}
        times: dict[str, list[float]] = {n: [] for n in fns}
        for r in range(rounds + 1):  # round 0 warms up, unrecorded
            for n in (list(fns) if r % 2 else list(fns)[::-1]):
                t0 = time.perf_counter()
                fns[n]()
                if r:
                    times[n].append(time.perf_counter() - t0)
        out.fill_(7.0)
        got = _digest(pad(src, plan, out=out))
        best = {n: min(v) * 1e3 for n, v in times.items()}
        result[w] = {"padded_shape": list(padded), "mib": out.numel() * 2 / 2**20,
                     "best_ms": best, "median_ms": {n: statistics.median(v) * 1e3 for n, v in times.items()},
                     "max_ms": {n: max(v) * 1e3 for n, v in times.items()},
                     "pad_over_copy_best": best["copy"] / best["pad_out"],
                     "bytes_equal_vllm_pad": got == want[w], "sha256": got, "vllm_sha256": want[w]}
    return result


def child(which: str, folder: Path) -> None:
    import torch

    torch.set_num_threads(2)
    global CHUNKED
    CHUNKED = which == "ours"
    if which.startswith("ours"):
        from layoutc_generated import vllm_cpu_grouped_gemm as mod
        mod.load_kernel()
        # imports before the baseline, with those the reader makes on first use (its dtype table in
        # layoutc.runtime.loading, config.json's reader)
        for name in ("layoutc.runtime.loading", "layoutc.tools.checkpoints.loader", "layoutc.tools.hfconfig.jsonread"):
            importlib.import_module(name)
    else:
        import vllm._custom_ops
        import vllm.model_executor.layers.fused_moe.experts.cpu_moe  # noqa: F401
    import threading

    import safetensors  # noqa: F401

    # The import-time objects (torch, vLLM, layoutc) to the permanent generation, in every path: a
    # full collection over them (about 77 ms; bench/quant_load_bench.py) otherwise lands in whichever
    # path's allocations trigger it, and is no cost of loading.
    gc.freeze()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base, base_anon = _status_kib("VmRSS"), _status_kib("RssAnon")
    anon_peak = [base_anon]
    done = threading.Event()

    def sample() -> None:  # RssAnon has no high-water mark: sample it every millisecond
        while not done.is_set():
            anon_peak[0] = max(anon_peak[0], _status_kib("RssAnon"))
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    w13, w2 = (child_ours if which.startswith("ours") else child_vllm)(folder)
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    peak = (_status_kib("VmHWM") - base) / 1024
    print(json.dumps({"which": which, "seconds": seconds, "peak_mib": peak,
                      "anon_peak_mib": (anon_peak[0] - base_anon) / 1024,
                      "packed_mib": (w13.numel() + w2.numel()) * 2 / 2**20,
                      "vm_hwm_mib": _status_kib("VmHWM") / 1024, "rss_anon_end_mib": _status_kib("RssAnon") / 1024,
                      "sha256": [_digest(w13), _digest(w2)]}))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/tmp/layoutc-load-bench")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pad-rounds", type=int, default=11)
    p.add_argument("--child", choices=("ours", "ours-whole", "vllm", "pads"))
    a = p.parse_args()
    folder = Path(a.dir)
    if a.child == "pads":
        print(json.dumps(child_pads(a.pad_rounds)))
        return 0
    if a.child:
        child(a.child, folder)
        return 0
    make(folder)
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "ours-whole": [], "vllm": []}
    for r in range(a.rounds):
        order = ["ours", "ours-whole", "vllm"]
        for which in order[r % 3:] + order[:r % 3]:
            out = subprocess.run([sys.executable, __file__, "--dir", str(folder), "--child", which],
                                 capture_output=True, text=True, check=True, cwd=ROOT)
            runs[which].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(which, {k: v for k, v in runs[which][-1].items() if k != "sha256"}, file=sys.stderr)
    out = subprocess.run([sys.executable, __file__, "--child", "pads", "--pad-rounds", str(a.pad_rounds)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    pads = json.loads(out.stdout.strip().splitlines()[-1])
    digests = {tuple(x["sha256"]) for v in runs.values() for x in v}
    same = len(digests) == 1
    summary = {
        "shape": {"num_experts": E, "hidden_size": H, "intermediate_size": I, "tp_size": TP, "rank": RANK,
                  "intermediate_size_per_partition": I // TP, "padded": 192},
        "packed_bytes_equal_sha256": same, "packed_sha256": sorted(digests),
        "best_seconds": {k: min(x["seconds"] for x in v) for k, v in runs.items()},
        "median_seconds": {k: statistics.median(x["seconds"] for x in v) for k, v in runs.items()},
        "max_seconds": {k: max(x["seconds"] for x in v) for k, v in runs.items()},
        "peak_mib": {k: max(x["peak_mib"] for x in v) for k, v in runs.items()},
        "anon_peak_mib": {k: max(x["anon_peak_mib"] for x in v) for k, v in runs.items()},
        "packed_mib": runs["ours"][0]["packed_mib"],
        "pads": pads,
        "runs": runs, "load_average_before": load_before, "load_average": os.getloadavg(),
    }
    summary["time_ratio_vllm_over_ours"] = summary["best_seconds"]["vllm"] / summary["best_seconds"]["ours"]
    summary["peak_ratio_ours_over_vllm"] = summary["peak_mib"]["ours"] / summary["peak_mib"]["vllm"]
    summary["anon_peak_ratio_ours_over_vllm"] = summary["anon_peak_mib"]["ours"] / summary["anon_peak_mib"]["vllm"]
    summary["goals"] = {
        "vllm / ours >= 2 (best)": summary["time_ratio_vllm_over_ours"] >= 2.0,
        "anon peak ours <= 0.65x vllm": summary["anon_peak_ratio_ours_over_vllm"] <= 0.65,
        **{f"pad {w} >= 0.9x copy (best)": pads[w]["pad_over_copy_best"] >= 0.9 for w in ("w13", "w2")},
        "pads byte-identical to vLLM's _pad_moe_intermediate": all(pads[w]["bytes_equal_vllm_pad"]
                                                                   for w in ("w13", "w2")),
    }
    summary["git"], summary["machine"] = git_state(), machine()
    out_path = ROOT / "bench" / "results" / "load.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out_path)
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))
    return 0 if same and summary["goals"]["pads byte-identical to vLLM's _pad_moe_intermediate"] else 1


if __name__ == "__main__":
    sys.exit(main())
