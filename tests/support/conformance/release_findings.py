"""What the conformance lane finds when it runs against vLLM 0.33.0 and 0.34.0 (issue 42 item 1).

tests/conformance/test_releases.py runs the lane's vLLM tests in a child process against each
release's own Python and holds the outcome to this record: a test fails there exactly when a
finding below names it (module::function), with `match` in its failure message. Kinds:

- "renamed": the engine function (or an input it reads) changed its name or signature in that
  release, so the lane cannot call it as it calls 0.32's: the contract is NOT checked against
  that release there (the failure names the function: "vLLM 0.34 renamed X").
- "differs": the release's rule differs from the contract's; `detail` names the function and
  the configurations or rows. Where a contract states the new rule, `detail` names it.

`matrix(release)` renders contract x release from the record: "same" (every test of the
contract passed against the release's own functions), or its findings. Read from the wheels
(`pip download --no-deps vllm==0.33.0` / `0.34.0`) and from the lane's failures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One pinned difference: kind ("renamed" | "differs"), the contracts whose tests it stops or
    contradicts, the engine function, what changed (rows or configurations), and a substring of
    the child's failure message."""

    kind: str
    contracts: tuple[str, ...]
    function: str
    detail: str
    match: str

    def summary(self, release: str) -> str:
        verb = "renamed or re-signed" if self.kind == "renamed" else "changed the rule of"
        return f"vLLM {release} {verb} {self.function}: {self.detail}"


_GPT_OSS_MXFP4 = (
    "aiter_fused_moe",
    "flashinfer_trtllm_mxfp4_moe",
    "vllm_cpu_mxfp4_gpt_oss_moe",
    "aiter_mxfp4_w4a4_moe",
)
_LOAD_MXFP4 = Finding(
    "renamed",
    _GPT_OSS_MXFP4,
    "vllm/model_executor/models/gpt_oss.py GptOssModel._load_weights_mxfp4",
    "takes 5 positional arguments; 0.32's took 7 (the lane's gpt-oss loader call)",
    "_load_weights_mxfp4() takes 5 positional arguments but 7 were given",
)
_INT8_PADS = Finding(
    "differs",
    ("vllm_cpu_int8_moe",),
    "experts/cpu_moe.py CPUExpertsInt8 (isa amx)",
    "admits I_pp % 32 != 0 and pads it to 32 per half, w13 scales with ones (e.g. H=32 I=30 tp=1 "
    "silu: vllm admits, vllm_cpu_int8_moe refuses); stated by vllm_cpu_int8_padded_moe, held by "
    "test_release_rules.py",
    "isa=amx",
)

_AITER_SPLIT = Finding(
    "renamed",
    ("aiter_fused_moe", "aiter_unquantized_moe", "aiter_mxfp4_w4a4_moe"),
    "experts/rocm_aiter_moe.py AiterExperts",
    "split into AiterUnquantizedExperts / AiterMxfp4Experts / AiterFp8*Experts; AiterExperts"
    "._supports_quant_scheme raises NotImplementedError (the lane asks AiterExperts)",
    "NotImplementedError",
)
_AITER_ARGS = Finding(
    "renamed",
    ("aiter_fused_moe", "aiter_unquantized_moe", "aiter_mxfp4_w4a4_moe"),
    "experts/rocm_aiter_moe.py rocm_aiter_fused_experts",
    "takes a required quant_type argument",
    "missing 1 required positional argument: 'quant_type'",
)
_LOADER = Finding(
    "renamed",
    ("marlin_moe_wna16", "marlin_moe_awq", "marlin_moe_gptq_int8", "marlin_moe_fp8"),
    "fused_moe/routed_experts.py RoutedExperts (the weight loader)",
    "loading moved to a RoutedExpertsLoader that reads expert_map_manager (the lane's stub layer has none)",
    "'RoutedExpertsLoader' object has no attribute 'expert_map_manager'",
)
_MARLIN_FP8 = Finding(
    "renamed",
    ("marlin_moe_fp8",),
    "quantization/utils/marlin_utils_fp8.py get_marlin_input_dtype",
    "removed from marlin_utils_fp8 (the lane patches it there)",
    "does not have the attribute 'get_marlin_input_dtype'",
)
_WNA16 = Finding(
    "renamed",
    ("marlin_moe_wna16", "marlin_moe_gptq_int8"),
    "fused_moe/oracle/int_wna16.py _process_weights_marlin",
    "takes 8 to 12 positional arguments (layer, num_bits, pack_factor, group_size, ...); 0.32's took 13",
    "_process_weights_marlin() takes from 8 to 12 positional arguments but 13 were given",
)
_AWQ = Finding(
    "renamed",
    ("marlin_moe_awq",),
    "fused_moe/oracle/int_wna16.py _process_awq_weights_marlin",
    "re-signed: the lane's positional call hands None where 0.34 reads a tensor's shape",
    "'NoneType' object has no attribute 'shape'",
)
_MORI = Finding(
    "renamed",
    ("every contract's tp_size domain",),
    "fused_moe/config.py FusedMoEParallelConfig.make",
    "reads the new ParallelConfig.mori_ep_v2 (the lane's stub parallel config has none)",
    "has no attribute 'mori_ep_v2'",
)

_BOTH = {
    "test_vllm_cpu_quant::test_int8_admission_match_vllm": _INT8_PADS,
    "test_gpu_backends::test_gpt_oss_mxfp4_block_sharding_matches_vllms_loader": _LOAD_MXFP4,
    "test_gpu_backends::test_gpt_oss_mxfp4_loader_drops_rows_when_i_is_not_whole_blocks": _LOAD_MXFP4,
    "test_trusted_views::test_trusted_view_is_the_engines": _LOAD_MXFP4,
    "test_trusted_views::test_trusted_view_mutants_are_caught": _LOAD_MXFP4,
    "test_vllm_cpu_quant::test_mxfp4_gpt_oss_rows_match_vllms_gpt_oss_loader": _LOAD_MXFP4,
    "test_vllm_quant_loading::test_gpt_oss_mxfp4_rank_tensors_match_vllm_loading": _LOAD_MXFP4,
    "test_vllm_quant_loading::test_gpt_oss_fused_interleaved_source_loads_into_an_up_gate_contract": _LOAD_MXFP4,
}

FINDINGS: dict[str, dict[str, Finding]] = {
    "0.33.0": {
        **_BOTH,
        "test_gpu_backends::test_aiter_mxfp4_sizes_and_admission_match_vllm": _AITER_SPLIT,
        "test_gpu_backends::test_aiter_unquantized_sizes_and_admission_match_vllm": _AITER_SPLIT,
    },
    "0.34.0": {
        **_BOTH,
        "test_expert_parallel::test_parallel_config_equals_fused_moe_parallel_config_make": _MORI,
        "test_gpu_backends::test_aiter_kernel_args_match_rocm_aiter_fused_experts": _AITER_ARGS,
        "test_gpu_backends::test_aiter_mxfp4_sizes_and_admission_match_vllm": _AITER_SPLIT,
        "test_gpu_backends::test_aiter_unquantized_sizes_and_admission_match_vllm": _AITER_SPLIT,
        "test_marlin::test_awq_pad_tensors_match_process_awq_weights_marlin": _AWQ,
        "test_marlin::test_block_fp8_tensors_match_prepare_fp8_moe_layer_for_marlin": _MARLIN_FP8,
        "test_marlin::test_gptq_pad_tensors_match_process_weights_marlin": _WNA16,
        "test_marlin::test_prepare_fp8_moe_layer_for_marlin_would_misplace_a_ragged_up_half": _MARLIN_FP8,
        "test_vllm_quant_loading::test_block_fp8_rank_tensors_match_vllm_loading_stop_at_gptq_marlin_repack": _LOADER,
        "test_vllm_quant_loading::test_wna16_rank_tensors_match_vllm_loading": _LOADER,
        "test_vllm_ct_fp8_admission::test_fp8_method_pads_block_fp8_at_1408_as_vllm_does": _LOADER,
        "test_vllm_packers_loading::test_rank_tensors_match_vllm_loading": _LOADER,
    },
}


def contracts() -> tuple[str, ...]:
    """The contracts the vLLM lane holds (every shipped contract but SGLang's)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "contracts"
    return tuple(sorted(p.stem for p in root.glob("*.moe") if not p.stem.startswith("sglang_")))


def matrix(release: str) -> dict[str, str]:
    """contract -> "same" or its findings against `release` (one line each, "; "-joined)."""
    out: dict[str, str] = {}
    for name in contracts():
        found = sorted({f"{f.kind}: {f.summary(release)}" for f in FINDINGS[release].values() if name in f.contracts})
        out[name] = "; ".join(found) if found else "same"
    return out
