"""The Markdown tables of docs/benchmarks.md, from bench/results/*.json.

    python bench/report.py                                # print all sections
    python bench/report.py pad kernel                     # some of: machine, pad, profile, verify, kernel
    python bench/report.py --splice docs/benchmarks.md    # refresh the generated blocks in place

`--splice` replaces only the text between `<!-- bench:NAME:start -->` and
`<!-- bench:NAME:end -->` markers; the prose and any other section are left alone.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C


def _load(name: str) -> dict[str, Any] | None:
    path = C.RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def _load_line(d: dict[str, Any]) -> str:
    b, a = d["load_before"], d["load_after"]
    return (f"Run {b['at']} to {a['at'][11:]}; load average (1/5/15 min) before {b['loadavg']}, "
            f"after {a['loadavg']}; commit {d.get('git', {}).get('commit', '?')}"
            + (f" with local edits in {len(d['git']['dirty_files'])} measured files"
               if d.get("git", {}).get("dirty_files") else ""))


def machine() -> None:
    d = _load("pad.json") or _load("kernel.json")
    if not d:
        return
    mc = d["machine"]
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in mc["flags"].items())
    print(f"- CPU: {mc['model_name']} ({mc['vendor']}, family/model {mc['cpu_family_model']}), "
          f"{mc['cpus']} vCPUs under {mc.get('hypervisor') or 'no hypervisor'}, L2 {mc['l2']}, L3 {mc['l3']}, "
          f"{mc.get('mem_total_gib')} GiB RAM, THP `{mc.get('thp')}`")
    print(f"- flags: {flags}")
    print(f"- torch {mc.get('torch')}, {d.get('threads', 2)} threads; python {mc['python']}; {mc['platform']}")


def pad() -> None:
    d = _load("pad.json")
    if not d:
        return
    print(_load_line(d))
    print()
    rows = []
    names = {"a_pad_out": "(a) `pad_*(t, plan, out=)`", "a_copy": "(a) `out.copy_(same_shape)`",
             "a_zero_slice": "(a) `out.zero_()` + slice copies", "b_pad_fresh": "(b) `pad_*(t, plan)`",
             "b_alloc_copy": "(b) `torch.empty(padded).copy_(same_shape)`"}
    for r in d["results"]:
        shape = f"{r['logical_shape']} -> {r['padded_shape']}"
        for n, st in r["rows"].items():
            rows.append([f"{r['case']} {r['tensor']}", shape if n == "a_pad_out" else "", names[n],
                         f"{st['best_ms']:.2f}", f"{st['median_ms']:.2f}", f"{st['gbps_written']:.1f}",
                         f"{st['peak_extra_mib']:.1f}"])
    print(C.table(rows, ["tensor", "logical -> padded", "variant", "best ms", "median ms",
                         "GB/s written (best)", "peak extra MiB"]))
    print()
    rrows = []
    label = {"pad_vs_copy": "(a) pad / plain copy throughput", "pad_speedup_vs_zero_slice":
             "(a) pad speed-up over zero+slice", "pad_fresh_vs_alloc_copy": "(b) pad / allocate-and-copy"}
    for r in d["results"]:
        for k, v in r["ratios"].items():
            rrows.append([f"{r['case']} {r['tensor']}", label[k], f"{v['best']:.2f}x", f"{v['median']:.2f}x",
                          f">= {v['goal']}x", "met" if v["met"] else "**not met**"])
    print(C.table(rrows, ["tensor", "ratio", "best-of", "median", "goal", "verdict (best-of)"]))
    print()
    srows = []
    for s in d["shard"]:
        srows.append([f"{s['case']} {s['tensor']}", f"`{s['method']}`", f"{s['best_ms']:.1f}", f"{s['median_ms']:.1f}",
                      f"{s['peak_extra_mib']:.1f}", f"{s['excess_over_shard_bytes'] / 1024:+.0f}",
                      f"{s['shard_mib']:.1f}", f"{s['full_padded_mib']:.0f}", f"{s['full_mib']:.0f}",
                      ("met" if s["met"] else "**not met**") if "met" in s else "-"])
    print(C.table(srows, ["tensor", "method", "best ms", "median ms", "peak extra MiB", "peak - shard KiB",
                          "shard MiB", "full padded (tp x shard) MiB", "input MiB", "peak <= shard"]))
    note = d.get("qwen3_235b_under_vllm_cpu")
    if note:
        print()
        print("Qwen3-235B-A22B under `vllm_cpu_grouped_gemm` (I_pp -> padded by tp): "
              + ", ".join(f"tp {k}: {a} -> {b}" for k, (a, b) in note["I_pp_to_padded_by_tp"].items()))


def profile() -> None:
    d = _load("pad_profile.json")
    if not d:
        return
    print(_load_line(d))
    print()
    rows = []
    for r in d["results"]:
        copy = r["rows"].get("copy", {}).get("best_ms")
        for n, st in r["rows"].items():
            rel = f"{copy / st['best_ms']:.2f}x" if copy and not n.startswith("fresh") else ""
            rows.append([f"{r['case']} {r['tensor']}", n, f"{st['best_ms']:.2f}", f"{st['median_ms']:.2f}", rel])
    print(C.table(rows, ["tensor", "variant", "best ms", "median ms", "copy / variant (best)"]))


def verify() -> None:
    d = _load("verify.json")
    if not d:
        return
    print(_load_line(d))
    print()
    w = d["wall"]
    labels = {"cold": "`layoutc verify contracts/`, empty cache (parallel)",
              "cold, serial": "the same, `LAYOUTC_JOBS=1`",
              "warm": "`layoutc verify contracts/` again, nothing changed",
              "compile (verdicts reused)": "`layoutc compile contracts/ --out DIR` after verify",
              "cold json": "`layoutc verify contracts/ --format json`, empty cache"}
    cpu = d.get("cpu", {})
    rows = [[labels.get(k, k), f"{st['best_s']:.3f}", f"{st['median_s']:.3f}", f"{st['max_ms'] / 1e3:.3f}",
             f"{cpu[k]['median_s']:.3f}" if k in cpu else ""] for k, st in w.items()]
    for k, st in d["startup_floors"].items():
        rows.append([f"`{k}`", f"{st['best_ms'] / 1e3:.3f}", f"{st['median_ms'] / 1e3:.3f}", f"{st['max_ms'] / 1e3:.3f}",
                     ""])
    print(C.table(rows, [f"command (fresh process, {d['runs']} runs, interleaved)", "best s", "median s", "max s",
                         "CPU s (median, user+sys)"]))
    print()
    if "ratios" in d:
        print("Ratios in the same run: " + "; ".join(f"{k} {v:.2f}x" for k, v in d["ratios"].items())
              + ". Goals: " + "; ".join(f"{k} < {g} s: best {'met' if d['met'][k]['best'] else 'NOT met'}, median "
                                        f"{'met' if d['met'][k]['median'] else 'NOT met'}"
                                        for k, g in d["goals_s"].items()) + ".")
        print()
    print(f"Summary: {d['summary']}; solver time (sum of per-property medians) "
          f"{d['solver_seconds_sum_median']:.3f} s; {d['solver_queries_total']} solver queries; exit codes "
          f"{d['exit_codes']}.")
    print()
    props = d["properties"]
    ids = list(dict.fromkeys(p["property"] for p in props))
    by = {(p["contract"], p["property"]): p for p in props}
    contracts = list(dict.fromkeys(p["contract"] for p in props))
    rows = []
    for c in contracts:
        cells = []
        for i in ids:
            p = by.get((c, i))
            cells.append(f"{p['median_s'] * 1e3:.0f} / {p['queries']}" if p else "")
        pc = d["per_contract"][c]
        rows.append([c, *cells, f"{pc['median_s'] * 1e3:.0f} / {pc['queries']}"])
    print(f"Per property: median ms / solver queries (from `--format json`, {d['runs']} runs; query counts identical in "
          "every run: " + str(all(p["queries_stable"] for p in props)) + ").")
    print()
    print(C.table(rows, ["contract", *ids, "total"]))


def kernel() -> None:
    d = _load("kernel.json")
    if not d:
        return
    print(_load_line(d))
    print()
    print(f"{d['num_experts']} experts, I_pp {d['I_pp']} -> {d['I_pp_padded']}, {d['activation']}, {d['dtype']}, "
          f"isa {d['isa']}, kernel library `{Path(d['kernel_library'] or '?').name}`")
    print()
    rows = []
    for r in d["kernel_vs_loop"]:
        rows.append([r["tokens"], r["top_k"], f"{r['kernel']['best_ms']:.2f}", f"{r['kernel']['median_ms']:.2f}",
                     f"{r['loop']['best_ms']:.2f}", f"{r['loop']['median_ms']:.2f}", f"{r['speedup_best']:.2f}x",
                     f"{r['speedup_median']:.2f}x", f"{r['rel_err_kernel']:.4f}", f"{r['rel_err_loop']:.4f}"])
    print(C.table(rows, ["tokens", "top-k", "kernel best ms", "kernel median ms", "loop best ms", "loop median ms",
                         "speed-up (best)", "speed-up (median)", "rel. err kernel", "rel. err loop"]))
    print()
    rows = [[k, f"{v['best_ms']:.1f}", f"{v['median_ms']:.1f}"] for k, v in d["one_time"].items()]
    rows += [[f"first call in the process: {k}", f"{v:.1f}", ""] for k, v in d["one_time_first_call_ms"].items()]
    print(C.table(rows, ["one-time cost", "best ms", "median ms"]))
    print()
    rows = []
    for g in d["glue_overhead"]:
        rows.append([g["top_k"], f"{g['direct']['median_ms']:.3f} (IQR {g['direct']['iqr_ms']:.3f})",
                     f"{g['glue']['median_ms']:.3f} (IQR {g['glue']['iqr_ms']:.3f})",
                     f"{g['paired_diff_median_us']:.0f} (IQR {g['paired_diff_iqr_us']:.0f})",
                     f"{100 * g['paired_overhead_fraction']:.2f}%", f"{g['alloc_diff_median_us']:.0f}",
                     (f"{g['lean_diff_median_us']:.0f} ({100 * g['lean_overhead_fraction']:.2f}%)"
                      if "lean_diff_median_us" in g else "-"),
                     f"{g['glue_alone_median_us']:.0f} ({100 * g['glue_alone_fraction']:.2f}%)",
                     f"{g['glue_cold_after_kernel_median_us']:.0f} ({100 * g['glue_cold_fraction']:.2f}%)",
                     "met" if g["met"] else "**not met**"])
    print(C.table(rows, ["top-k (64 tokens)", "direct op ms, median", "`fused_moe` ms, median",
                         "glue - direct us, median of groups", "overhead", "alloc - direct us",
                         "lean prototype - direct us",
                         "glue alone, warm us", "glue alone, after a kernel call us", "< 2%"]))
    print()
    pieces = list(d["glue_overhead"][0]["cold_pieces_median_us"])
    print(C.table([[k] + [f"{g['cold_pieces_median_us'][k]:.0f}" for g in d["glue_overhead"]] for k in pieces],
                  ["glue piece, timed alone right after a kernel call"]
                  + [f"top-{g['top_k']} us" for g in d["glue_overhead"]]))


SECTIONS = {"machine": machine, "pad": pad, "profile": profile, "verify": verify, "kernel": kernel}

def render(name: str) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        SECTIONS[name]()
    return buf.getvalue().rstrip("\n")


def splice(path: Path) -> list[str]:
    text = path.read_text()
    done = []
    for name in SECTIONS:
        pattern = re.compile(rf"(<!-- bench:{name}:start -->\n)(?:.*?\n)?(<!-- bench:{name}:end -->)", re.S)
        if pattern.search(text):
            block = render(name)

            def put(mt: re.Match[str], block: str = block) -> str:
                return mt.group(1) + block + "\n" + mt.group(2)
            text = pattern.sub(put, text)
            done.append(name)
    path.write_text(text)
    return done


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Render bench/results/*.json as the tables of docs/benchmarks.md.")
    parser.add_argument("--splice", metavar="MD", type=Path,
                        help="rewrite the <!-- bench:NAME:start/end --> blocks of this file in place")
    parser.add_argument("sections", nargs="*", metavar="SECTION",
                        help=f"print these sections (default: all): {', '.join(SECTIONS)}")
    args = parser.parse_args(argv)
    unknown = [name for name in args.sections if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section {unknown[0]!r} (choose from {', '.join(SECTIONS)})")
    if args.splice is not None:
        print("refreshed:", ", ".join(splice(args.splice)))
        return 0
    for name in args.sections or list(SECTIONS):
        print(f"<!-- {name} -->")
        print(render(name))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
