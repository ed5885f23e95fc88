"""Real tensor parallelism on real kernels: one MoE layer, `tp_size` processes, gloo.

`run_tp_layer` starts `tp_size` ranks with `torch.multiprocessing` (start method
"spawn" by default, or "forkserver"; no torchrun), joins them into a gloo process
group on 127.0.0.1 (a free port found by binding port 0) and runs one MoE layer the
way a tensor-parallel engine does:

1. Every rank calls the generated module's `plan(...)` with its `tp_size`.
2. It takes its shard of one full logical checkpoint layer with the generated
   `shard_w13` / `shard_w2` / `shard_w13_bias` (the checkpoint is built once by the
   caller and shared with the ranks through shared memory).
3. It prepacks its shard with the real `_C::prepack_moe_weight` (via the module's
   `prepack`) and runs the real `_C::cpu_fused_moe` (via `fused_moe`).
4. The partial outputs are summed with `dist.all_reduce(SUM)`: w13 is
   column-parallel and w2 row-parallel, so each rank holds a partial sum over its
   slice of the intermediate dim. The reduction runs in the model dtype (bf16), as
   in vLLM. `w2_bias` comes from the module's `shard_w2_bias`, which gives it to rank 0 and
   zeros to the other ranks, so it is added once.
5. Rank 0 compares the reduced output with `reference_moe`, an unsharded,
   unpadded float32 per-expert loop that shares no code with the kernel path.

`per_expert_loop` is the baseline an engine runs when it silently falls back from
the grouped GEMM (a torch loop over experts on unpadded weights).

Shapes follow vLLM: w13 is `[E, 2*I, H]` with the gate half first (`[gate | up]`),
w2 is `[E, H, I]`, w13_bias `[E, 2*I]`, w2_bias `[E, H]`, hidden states `[T, H]`,
topk_weights float32 `[T, top_k]`, topk_ids int32 `[T, top_k]`. Times are seconds
of wall clock (`time.perf_counter`).

`run_tp_checkpoint` does the same for one MoE layer of a real safetensors checkpoint:
each rank reads only its own rows through the generated loaders
(layoutc.tools.checkpoints), and rank 0 compares with transformers' own sparse-MoE block of
the layer (its routed output; the launcher computes it once, with the routing the
block's router chose, and hands both to the ranks).

The modules: `reference` (the float32 reference and the per-expert baseline), `rank`
(one rank of `run_tp_layer`), `launcher` (starting the ranks, naming a failed one),
`layer` (`run_tp_layer`), `checkpoint` (`run_tp_checkpoint` and its rank), `results`.
Only the standard library and torch are imported here (layoutc.tools.checkpoints lazily);
the generated module is imported by name inside each rank (and by `run_tp_checkpoint`'s
launcher, to read its glue's INTERFACE before anything is loaded).
"""

from __future__ import annotations

from layoutc.tools.tp.checkpoint import run_tp_checkpoint
from layoutc.tools.tp.layer import run_tp_layer
from layoutc.tools.tp.reference import ACTIVATIONS, act_and_mul, per_expert_loop, reference_moe
from layoutc.tools.tp.results import CheckpointTPResult, RankReport, TPRankError, TPResult

__all__ = [
    "ACTIVATIONS",
    "CheckpointTPResult",
    "RankReport",
    "TPRankError",
    "TPResult",
    "act_and_mul",
    "per_expert_loop",
    "reference_moe",
    "run_tp_checkpoint",
    "run_tp_layer",
]
