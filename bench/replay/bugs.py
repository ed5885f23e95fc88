"""The replayed bugs: each a public report, the engine function, the last release with the bug
and the first release with the fix (both read from the released wheels' Python), the contract
whose generated module gives the expected bytes, and the configurations where the bug shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Bug:
    """One replayed report.

    key: short name used on the command line.
    reports: public report / PR numbers ("vllm#55649").
    engine: pip distribution name ("vllm", "sglang").
    function: "module:qualname" of the engine function the driver calls.
    buggy: last release whose wheel holds the bug; fixed: first release whose wheel holds the fix.
    contract: generated module (under generated/) whose pad functions give the expected bytes.
    driver: name of the driver in drivers.DRIVERS.
    configs: keyword dicts for the driver; the first ones are where the bug shows, the last is an
        aligned control that must pass on both releases.
    note: what the report says, in one line.
    extra_wheels: pure-Python wheels the release's import chain needs beyond the environment.
    models_upto: the last release whose rule the contract states, where a later one changed it;
        a check against a later release is refused by name, never run as a pass.
    moved: where later releases hold the same function ("module:qualname"), tried in order when
        `function` does not import there (a release that renamed it still runs the check).
    """

    key: str
    reports: tuple[str, ...]
    engine: str
    function: str
    buggy: str
    fixed: str
    contract: str
    driver: str
    configs: tuple[dict[str, object], ...]
    note: str
    extra_wheels: tuple[str, ...] = field(default=())
    models_upto: str | None = None
    moved: tuple[str, ...] = field(default=())


_FI_UTILS = "vllm.model_executor.layers.quantization.utils.flashinfer_utils"

BUGS: tuple[Bug, ...] = (
    Bug(
        key="vllm-nvfp4-endpad",
        reports=("vllm#55649", "vllm#46880", "vllm#48624"),
        engine="vllm",
        function=f"{_FI_UTILS}:align_fp4_moe_weights_for_fi",
        buggy="0.28.0",
        fixed="0.29.0",
        contract="flashinfer_nvfp4_moe",
        driver="fi_nvfp4_align",
        configs=(
            # Gemma-4-26B-A4B NVFP4: H 2816, I 704; tp 2 -> I_pp 352 -> 384.
            dict(num_experts=2, hidden_size=2816, intermediate_size=704, tp_size=2),
            dict(num_experts=2, hidden_size=2816, intermediate_size=704, tp_size=4),
            dict(num_experts=2, hidden_size=2816, intermediate_size=704, tp_size=1),
        ),
        note="gated NVFP4 w13 end-padded as [gate | up | 0]: the pad lands inside the up half "
        "(Gemma-4-26B NVFP4 at TP 2 scores 2% on GSM8K)",
    ),
    Bug(
        key="vllm-nvfp4-gated-alignment",
        reports=("vllm#46879", "vllm#46880"),
        engine="vllm",
        function="vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe:"
        "prepare_nvfp4_moe_layer_for_fi_or_cutlass",
        buggy="0.25.0",
        fixed="0.26.0",
        contract="flashinfer_nvfp4_moe",
        driver="fi_nvfp4_caller_alignment",
        configs=(
            # Gemma-4-26B-A4B NVFP4: H 2816, I 704; tp 4 -> I_pp 176 (16-aligned, 2 * 176 = 352, 352 % 128 = 96).
            # tp 2 -> I_pp 352 (2 * 352 = 704, 704 % 128 = 64); tp 1 (704) is 64-aligned: the control.
            dict(num_experts=2, hidden_size=2816, intermediate_size=704, tp_size=4),
            dict(num_experts=2, hidden_size=2816, intermediate_size=704, tp_size=2),
            dict(num_experts=2, hidden_size=2816, intermediate_size=704, tp_size=1),
        ),
        note="gated NVFP4 intermediate padded to 16 for the FlashInfer TRT-LLM path: the fused gate/up dim "
        "is only a multiple of 32, and the block-scale shuffle asserts M % 128 (Gemma-4-26B NVFP4 at tp 4 "
        "fails engine init)",
    ),
    Bug(
        key="vllm-fp8-endpad",
        reports=("vllm#48624", "vllm#46880"),
        engine="vllm",
        function=f"{_FI_UTILS}:align_moe_weights_for_fi",
        buggy="0.28.0",
        fixed="0.29.0",
        contract="flashinfer_fp8_moe",
        driver="fi_fp8_align",
        configs=(
            # Gemma-4-26B-A4B FP8: H 2816, I 704; tp 8 -> I_pp 88 -> 96; tp 6 does not divide.
            dict(num_experts=2, hidden_size=2816, intermediate_size=704, tp_size=8),
            dict(num_experts=2, hidden_size=2816, intermediate_size=1000, tp_size=8),
            dict(num_experts=2, hidden_size=2816, intermediate_size=704, tp_size=2),
        ),
        note="the FP8 twin of the NVFP4 bug: gated w13 end-padded as [gate | up | 0] by "
        "align_moe_weights_for_fi (FP8 per-tensor TRT-LLM and the unquantized FlashInfer path)",
    ),
    Bug(
        key="vllm-aiter-intermediate-pad",
        reports=("vllm#44679", "vllm#42098"),
        engine="vllm",
        function="vllm.model_executor.layers.fused_moe.experts.rocm_aiter_moe:rocm_aiter_fused_experts",
        buggy="0.22.1",
        fixed="0.23.0",
        contract="aiter_fused_moe",
        driver="aiter_pad_counts",
        configs=(
            # Qwen3-30B-A3B's sizes (H 2048, I 768) as an MXFP4 W4A16 layer with silu and the activation
            # not passed (the Quark / online MXFP4 methods: 256 alignment): tp 8 -> I_pp 96 -> 256.
            # gpt-oss (swigluoai) has the same pads, but from 0.32 on its activation type is asked of
            # the aiter package itself before the pads are computed.
            dict(
                num_experts=2,
                hidden_size=2048,
                intermediate_size=768,
                tp_size=8,
                activation="silu",
                activation_passed=0,
            ),
            dict(
                num_experts=2,
                hidden_size=2048,
                intermediate_size=768,
                tp_size=2,
                activation="silu",
                activation_passed=0,
            ),
            dict(
                num_experts=2,
                hidden_size=2048,
                intermediate_size=768,
                tp_size=1,
                activation="silu",
                activation_passed=0,
            ),
        ),
        note="intermediate_pad passed as round_down(pad, 64) * 2 at every TP; CKTile (TP > 1) counts "
        "it per half, so live rows are declared pad (gpt-oss-120b TP 8 GSM8K 0.896 -> 0.684)",
        extra_wheels=("gguf==0.19.0",),
        # 0.34 rewrote the rule (aiter_moe_pads: W4A16 never doubled; bias-less W4A16 declares no
        # pad) and the signature (quant_type); aiter_fused_moe states 0.23-0.32's rule.
        models_upto="0.33.0",
    ),
    Bug(
        key="vllm-cpu-grouped-gemm-pad",
        reports=("vllm#49591",),
        engine="vllm",
        function="vllm.model_executor.layers.fused_moe.cpu_fused_moe:CPUFusedMOE",
        buggy="0.26.0",
        fixed="0.27.0",
        contract="vllm_cpu_grouped_gemm",
        driver="cpu_fused_moe_init",
        configs=(
            # Gemma-4-26B-A4B: H 2816, I 704; tp 4 -> I_pp 176 (not a multiple of the 32-wide tile).
            dict(num_experts=2, hidden_size=2816, intermediate_size=704, tp_size=4, isa="amx", activation="silu"),
            dict(num_experts=2, hidden_size=2816, intermediate_size=704, tp_size=4, isa="vec", activation="silu"),
            dict(num_experts=2, hidden_size=2816, intermediate_size=704, tp_size=2, isa="amx", activation="silu"),
        ),
        note="CPU MoE intermediate not padded to the grouped GEMM's 32-wide tile: at I_pp 176 the AMX "
        "path silently fell back to the per-expert torch loop (Gemma-4-26B tp 4 slower than tp 2) and the "
        "vec path ran the tile-32 kernel on an unpadded 176",
        # 0.28 moved the experts to experts/cpu_moe.py (CPUUnquantizedExperts); this driver drives
        # cpu_fused_moe.CPUFusedMOE, which 0.28 no longer routes unquantized layers through.
        models_upto="0.27.1",
    ),
    Bug(
        key="sglang-cpu-mxfp4-padding",
        reports=("sglang#31334", "sglang#20072"),
        engine="sglang",
        function="sglang.srt.configs.update_config:adjust_config_with_unaligned_cpu_tp",
        buggy="0.5.16",
        fixed="0.5.17",
        contract="sglang_cpu_mxfp4_moe",
        driver="sglang_cpu_config",
        configs=(
            dict(num_experts=2, hidden_size=2880, intermediate_size=2880, tp_size=6),
            dict(num_experts=2, hidden_size=2880, intermediate_size=2880, tp_size=5),
            dict(num_experts=2, hidden_size=2880, intermediate_size=2880, tp_size=3),
        ),
        note="CPU MXFP4 intermediate padded to a multiple of tp * 32, not 2 * tp * 32 (the mxfp4 step "
        "sglang#20072 missed): gpt-oss I 2880 at TP 6 keeps 480 rows a rank, 240 packed bytes, and the AMX "
        "MoE kernel falls back to the native path (contract: 3072, 512 rows a rank)",
    ),
    Bug(
        key="vllm-moe-loader-padded-stride",
        reports=("vllm#43865", "vllm#42595", "vllm#43863"),
        engine="vllm",
        function="vllm.model_executor.layers.fused_moe.layer:FusedMoE._load_w13",
        buggy="0.22.1",
        fixed="0.23.0",
        contract="aiter_mxfp4_w4a4_moe",
        driver="moe_loader_stride",
        configs=(
            # Qwen3-235B-A22B MXFP4's intermediate (1536; H kept at 256, the AITER MXFP4 hidden alignment):
            # tp 8 -> I_pp 192 padded to 256, tp 4 -> 384 padded to 512; tp 2 (768) is aligned: the control.
            dict(num_experts=1, hidden_size=256, intermediate_size=1536, tp_size=8, activation="silu"),
            dict(num_experts=1, hidden_size=256, intermediate_size=1536, tp_size=4, activation="silu"),
            dict(num_experts=1, hidden_size=256, intermediate_size=1536, tp_size=2, activation="silu"),
        ),
        note="the MoE weight loader slices the unpadded checkpoint at the padded per-rank stride: rank r "
        "reads rows r * I_pp_padded.., so every rank loads its neighbour's rows and the last ranks load "
        "nothing (Qwen3-235B MXFP4 on the AITER MXFP4 backend at TP 4 / 8)",
        extra_wheels=("gguf==0.19.0",),
        moved=("vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts._load_w13",),
    ),
    Bug(
        key="sglang-moe-loader-padded-stride",
        reports=("sglang#32781",),
        engine="sglang",
        function="sglang.srt.layers.moe.fused_moe_triton.layer:FusedMoE._load_w13",
        buggy="0.5.16",
        fixed="0.5.17",
        contract="aiter_mxfp4_w4a4_moe",
        driver="moe_loader_stride",
        configs=(
            # DeepSeek-V4-Pro's report: a 256-padded MXFP4 intermediate at TP 16 (3072 -> 192 -> 256); the
            # same rule at Qwen3-235B's 1536 (tp 8: 192 -> 256, tp 4: 384 -> 512); tp 2 (768) is the control.
            dict(num_experts=1, hidden_size=256, intermediate_size=3072, tp_size=16, activation="silu"),
            dict(num_experts=1, hidden_size=256, intermediate_size=1536, tp_size=4, activation="silu"),
            dict(num_experts=1, hidden_size=256, intermediate_size=1536, tp_size=2, activation="silu"),
        ),
        note="SGLang's twin of the vLLM loader bug: _load_w13 / _load_w2 narrow the unpadded checkpoint at "
        "the padded shard size (DeepSeek-V4-Pro at TP 16: 'start out of range' on the last ranks, the "
        "others load their neighbour's rows)",
    ),
    Bug(
        key="vllm-aiter-unquantized-intermediate-pad",
        reports=("vllm#55368", "aiter#5444", "vllm#38833"),
        engine="vllm",
        function="vllm.model_executor.layers.fused_moe.oracle.unquantized:"
        "unquantized_round_up_hidden_size_and_intermediate_size",
        buggy="0.31.0",
        fixed="0.32.0",
        contract="aiter_unquantized_moe",
        driver="aiter_unquantized_roundup",
        configs=(
            # vllm#55368's K2-Horizon (moe_intermediate_size 1792): tp 8 -> 224 (128 tile: 256), tp 4 -> 448
            # (512); Gemma-4-26B-A4B (704) at tp 4 -> 176 (64 tile: 192); 1024 at tp 4 (256) is the control.
            dict(num_experts=2, hidden_size=256, intermediate_size=1792, tp_size=8, activation="silu"),
            dict(num_experts=2, hidden_size=256, intermediate_size=1792, tp_size=4, activation="silu"),
            dict(num_experts=2, hidden_size=256, intermediate_size=704, tp_size=4, activation="silu"),
            dict(num_experts=2, hidden_size=256, intermediate_size=1024, tp_size=4, activation="silu"),
        ),
        note="the unquantized AITER MoE allocates the unpadded per-rank intermediate: CK 2-stage BF16 "
        "rejects an inter_dim off its tile ('device_gemm ... does not support this GEMM problem'; "
        "moe_intermediate_size 1792 at TP 8 / 4, Gemma-4 704)",
    ),
    Bug(
        key="vllm-block-fp8-tp-shard-pad",
        reports=("vllm#48173", "vllm#39046"),
        engine="vllm",
        function="vllm.model_executor.layers.quantization.fp8:Fp8MoEMethod",
        buggy="0.30.0",
        fixed="0.31.0",
        contract="marlin_moe_fp8",
        driver="marlin_block_fp8_tp_pad",
        configs=(
            # MiniMax-M2.7 (vllm#48173's repro): H 3072, I 1536, block FP8 [128, 128]; tp 8 -> I / tp 192, not
            # whole 128-blocks: padded to 256, ranks 0-5 full, 6-7 only pad. I 640 at tp 4 (160 -> 256: ranks
            # 0-1 full, rank 2 short, rank 3 empty) with H 256; tp 4 at I 1536 (384, whole blocks) is the control.
            dict(num_experts=1, hidden_size=3072, intermediate_size=1536, tp_size=8),
            dict(num_experts=1, hidden_size=256, intermediate_size=640, tp_size=4),
            dict(num_experts=1, hidden_size=256, intermediate_size=1536, tp_size=4),
        ),
        note="block-FP8 MoE at a TP shard off the 128-block (I / tp = 192) fails to load: the per-rank block "
        "scales cannot be cut (MiniMax-M2.7 at -tp 8); 0.31 pads the TP shard to whole blocks "
        "(pad_tp_shard_to_weight_blocks, the loader's padded-TP branch: zero weights, unit scales)",
        # the contract's models lines name vLLM 0.32.0 and 0.33.0
        models_upto="0.33.0",
    ),
)


def by_key(key: str) -> Bug:
    """The bug named `key`; raises KeyError naming the known keys."""
    for bug in BUGS:
        if bug.key == key:
            return bug
    raise KeyError(f"no replayed bug {key!r}; known: {', '.join(b.key for b in BUGS)}")
