"""The pinned list of disagreements between layoutc and vLLM 0.32.

Each key names one documented disagreement; its value is a heading that
docs/kernels.md must contain (section 8, "Conformance with vLLM 0.32"). A sweep that
finds a disagreement not in this list fails; a listed disagreement that a sweep no
longer finds fails too (the list is pinned, so a vLLM fix or a contract change must
update it and the docs together).

The SGLang entries (docs/kernels.md section 10, "Conformance with SGLang 0.5.23") use the
same kinds, with SGLang in vLLM's place ("sglang-bug" would be SGLang's own; none is pinned).

Kinds:
- "vllm-bug": vLLM admits (or pads) a configuration its own kernel or loader cannot
  serve; layoutc refuses it. Reproduced in docs/kernels.md 8.2 with vLLM's functions.
- "limitation": vLLM does something the contract language cannot state yet (the
  lead's language work); layoutc refuses or differs. Rule and numbers in 8.3.
- "no-checkpoint": vLLM's gate admits a configuration that no checkpoint of the format
  can have; layoutc refuses it with the format's reason (8.6).
- "layoutc-extends": vLLM refuses (falls back on) a configuration that layoutc admits,
  proves and runs right on the real kernel (tests/tools/test_vllm_cpu_e2e.py).
"""

from __future__ import annotations

KNOWN: dict[str, tuple[str, str]] = {
    # vLLM wrong, layoutc right
    "nvfp4_ipp_not_16": ("vllm-bug", "NVFP4 with I_pp % 16 != 0"),
    "gptq_int4_channelwise_ipp_not_8": ("vllm-bug", "GPTQ int4 channelwise with I_pp % 8 != 0"),
    "gptq_int8_ipp_not_4": ("vllm-bug", "GPTQ int8 with I_pp % 4 != 0"),
    "mxfp8_ipp_not_32": ("vllm-bug", "MXFP8 with I_pp % 32 != 0"),
    "marlin_fp8_h_not_128": ("vllm-bug", "Marlin FP8/MXFP8 with H % 128 != 0"),
    "aiter_w4a4_128": ("vllm-bug", "AITER W4A4 rounds I_pp to 128"),
    "mxfp4_ipp_not_32": ("vllm-bug", "MXFP4 with I_pp % 32 != 0"),
    "gpt_oss_mxfp4_i_not_32": ("vllm-bug", "gpt-oss MXFP4 with I % 32 != 0"),
    "w4a8_channelwise_odd_k": ("vllm-bug", "W4A8 int4 channelwise with an odd K"),
    "gptq_w2_bias_every_rank": ("vllm-bug", "GPTQ expert w2 bias loaded on every rank"),
    "awq_channelwise_create_weights": ("vllm-bug", "AWQ channelwise fails in create_weights"),
    "awq_channelwise_ipp_not_8": ("vllm-bug", "AWQ channelwise with I_pp % 8 != 0"),
    "zentorch_float16": ("vllm-bug", "zentorch float16"),
    "zentorch_single_active_expert": ("vllm-bug", "zentorch with a single active expert"),
    # vLLM's gate admits a shape no checkpoint of the format has; layoutc refuses it
    "mxfp4_hidden_not_32": ("no-checkpoint", "FlashInfer TRT-LLM MXFP4 with hidden_size % 32 != 0"),
    # layoutc serves a configuration vLLM refuses, proved and run on the real kernel
    "cpu_swigluoai_padded_pairs": ("layoutc-extends", "swigluoai padded by whole pairs on the CPU grouped GEMM"),
    # vLLM gives the ranks above the expert count no experts; layoutc refuses the degree (EP01)
    "ep_exceeds_experts": ("limitation", "Expert parallelism with more ranks than experts"),
    # vLLM hands AITER W4A4 gpt-oss's interleaved rows; the contract's view is [gate | up] (issue 39 item 4)
    "aiter_w4a4_gpt_oss_interleaved": ("limitation", "AITER W4A4 with gpt-oss (swigluoai): interleaved rows"),
    # SGLang 0.5.23 (tests/conformance/test_sglang.py; docs/kernels.md 10): SGLang serves it, layoutc refuses
    "sglang_fp8_ragged_last_block": ("limitation", "SGLang block FP8 with intermediate_size % block != 0"),
    "sglang_fp8_hidden_not_block": ("limitation", "SGLang block FP8 with hidden_size % block != 0"),
}
