"""Check mode's own part, old against new, A/B in one process on one real-width layer (issue 44 item 4).

    python bench/hook_ab_bench.py 2      # gemma-4-26B-A4B width (128 x 2816, I 704), tp 2; prints JSON lines

vLLM 0.32's own `process_weights_after_loading` prepacks the layer once; then, rounds interleaved and
their order reversed every other round, on the same tensors: `old` = a copy of the loaded weights and
the contract's pad + `prepack_padded` + compare 8 experts at a time (`check._packed_blocks_equal`, the
fallback); `new` = the snapshot written through the position map into a fresh buffer + a word compare;
`new-reuse` = the same into the buffer the previous layer handed back (`posmap.give_back`), as every layer
after the first in an engine. The map's one-time build (per worker and plan) and vLLM's method are
printed apart. The same load hits both sides; this machine's load is printed at the end.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    from layoutc.tools.vllm_plugin import check, posmap
    from tests.tools.test_vllm_plugin import _layer

    torch.set_num_threads(2)
    cpu_moe.is_zentorch_moe_supported = lambda layer: False
    tp = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    ex, layer = _layer(cpu_moe, experts=128, hidden=2816, intermediate=704, tp=tp)
    gen = importlib.import_module("layoutc_generated.vllm_cpu_grouped_gemm")
    info = check.LayerInfo("x", 128, 2816, 704, tp, "silu", torch.bfloat16, "vec")
    plan = check.admit(gen, info)
    w13l, w2l = layer.w13_weight.data, layer.w2_weight.data
    t0 = time.perf_counter()
    for projection in ("w13", "w2"):
        posmap.position_map(gen, plan, projection, torch.bfloat16)
    map_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ex.process_weights_after_loading(layer)
    vllm_s = time.perf_counter() - t0
    w13, w2 = layer.w13_weight.data, layer.w2_weight.data
    for r in range(3):
        for mode in ["old", "new", "new-reuse"] if r % 2 == 0 else ["new-reuse", "new", "old"]:
            t0 = time.perf_counter()
            if mode == "old":
                snap = check.snapshot(w13l, w2l, None, None)
                t1 = time.perf_counter()
                ok = check._packed_blocks_equal(gen, plan, info, snap, w13, w2)
            else:
                if mode == "new":
                    posmap.drop_spares()
                snap = check.snapshot(w13l, w2l, None, None, gen=gen, plan=plan)
                t1 = time.perf_counter()
                assert snap.packed is not None
                ok = check._same_block(snap.packed[0], w13) and check._same_block(snap.packed[1], w2)
                posmap.give_back(*snap.packed)
            t2 = time.perf_counter()
            del snap
            print(json.dumps({"round": r, "mode": mode, "snapshot_s": round(t1 - t0, 3),
                              "compare_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3), "ok": ok}), flush=True)
    print(json.dumps({"tp": tp, "map_build_s": round(map_s, 3), "vllm_method_s": round(vllm_s, 3),
                      "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
