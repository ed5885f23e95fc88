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
        key="sglang-cpu-mxfp4-padding",
        reports=("sglang 0.5.17 release diff",),
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
        note="CPU MXFP4 intermediate padded to a multiple of tp * 32, not 2 * tp * 32: a rank's "
        "packed FP4 shard is not whole bytes (gpt-oss I 2880 at TP 6: 480 rows a rank, contract 512)",
    ),
)


def by_key(key: str) -> Bug:
    """The bug named `key`; raises KeyError naming the known keys."""
    for bug in BUGS:
        if bug.key == key:
            return bug
    raise KeyError(f"no replayed bug {key!r}; known: {', '.join(b.key for b in BUGS)}")
