"""FlashInfer 0.7.4's own reference of `trtllm_fp4_block_scale_moe`, run in a child process for
tests/conformance/test_trusted_views.py.

`python -m tests.support.conformance.flashinfer_oracle REQUEST.pt REPLY.pt` loads a list of cases (each the
kernel's gemm1/gemm2 FP4 weights and block scales, bf16 hidden states and a routing) and answers
each with FlashInfer's trace reference `flashinfer.trace.templates.moe._fp4_moe_run_experts`
(SwiGLU, activation_type 3: "TRTLLM-Gen convention: x0 is linear/first; x1 is gate/second", on
the rows as given). A case with `gated_rows` holds its gemm1 rows in the kernel's gated order,
FlashInfer's `reorder_rows_for_gated_act_gemm` of [X1 | X2] (the order
`_maybe_get_cached_w3_w1_permute_indices(is_gated_act_gemm=True)` gives before the epilogue
shuffle); the reorder is undone with FlashInfer's own row indices before the reference reads them.

It runs in its own process so that an importable `flashinfer` never changes what vLLM does in the
test process (vLLM probes for it). Environment: LAYOUTC_FLASHINFER_PATH, the folder
`pip install --no-deps --target` filled from tests/conformance/flashinfer-requirements.txt;
appended to sys.path, so the kernel environment's own torch wins.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def answer(case: dict[str, Any]) -> Any:
    """FlashInfer's reference output ([T, H] bfloat16) for one case."""
    import torch
    from flashinfer.fused_moe.core import get_reorder_rows_for_gated_act_gemm_row_indices
    from flashinfer.trace.templates.moe import _fp4_moe_run_experts

    w1, s1 = case["gemm1_weights"], case["gemm1_weights_scale"]
    if case["gated_rows"]:
        undo = torch.argsort(get_reorder_rows_for_gated_act_gemm_row_indices(w1[0]))
        w1, s1 = w1[:, undo].contiguous(), s1[:, undo].contiguous()
    return _fp4_moe_run_experts(case["hidden_states"], None, w1, s1, case["gemm2_weights"], case["gemm2_weights_scale"],
                                None, None, case["weights"], case["topk_idx"], 0, w1.shape[0], activation_type=3)


def main(argv: list[str]) -> int:
    path = os.environ.get("LAYOUTC_FLASHINFER_PATH", "")
    sys.path.append(path)
    import flashinfer
    import torch

    cases = torch.load(argv[0])
    torch.save([answer(c) for c in cases], argv[1])
    print(json.dumps({"flashinfer_version": flashinfer.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
