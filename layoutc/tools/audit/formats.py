"""Which checkpoint format a model stores, and which formats each contract takes (docs/audit.md)."""

from __future__ import annotations

from dataclasses import dataclass

from layoutc.compiler import ir
from layoutc.compiler.evaluate import Value
from layoutc.tools.hfconfig import MoEModelConfig


@dataclass(frozen=True)
class CheckpointFormat:
    """What a model's checkpoint stores, as far as picking a contract goes.

    Attributes:
        key: ``unquantized``, ``gptq_int4``, ``fp8_block128``, ``mxfp8``, ``mxfp4``
            or ``nvfp4`` for formats some contract takes; anything else
            (``fp8_per_tensor``, ``gptq_8bit``, ``awq``, ...) is a format no
            bundled contract describes.
        label: how to name it in messages, e.g. ``"block-FP8 [128, 128]"``.
        params: contract parameters the format itself fixes (``scheme``; ``block``, the
            square weight block, for SGLang's block-FP8 contract).
    """

    key: str
    label: str
    params: tuple[tuple[str, Value], ...] = ()



FORMAT_LABELS: dict[str, str] = {
    "unquantized": "unquantized",
    "gptq_int4": "GPTQ int4",
    "fp8_block128": "block-FP8 [128, 128]",
    "mxfp8": "MXFP8",
    "mxfp4": "MXFP4",
    "nvfp4": "NVFP4",
}

# Which checkpoint formats each known contract takes (the language has no clause for
# it). A contract not named here takes unquantized checkpoints if it declares no
# scale or zero-point tensor and its glue does not quantize (QUANTIZING_GLUE); a
# quantized contract not named here is skipped (say which format it takes by
# adding it to this table).
CONTRACT_FORMATS: dict[str, tuple[str, ...]] = {
    "vllm_cpu_grouped_gemm": ("unquantized",),
    "zentorch_fused_moe": ("unquantized",),
    "torch_grouped_mm": ("unquantized",),
    # The contract states the AITER_MXFP4_BF16 path (gpt-oss); unquantized models
    # are audited against the same 256-rounded allocation.
    "aiter_fused_moe": ("unquantized", "mxfp4"),
    "marlin_moe_wna16": ("gptq_int4",),
    "marlin_moe_fp8": ("fp8_block128", "mxfp8"),
    "flashinfer_nvfp4_moe": ("nvfp4",),
    "flashinfer_trtllm_mxfp4_moe": ("mxfp4",),
    # vLLM 0.32's CPU MXFP4 experts (AMX): the generic method (silu) and gpt-oss's (swigluoai)
    "vllm_cpu_mxfp4_moe": ("mxfp4",),
    "vllm_cpu_mxfp4_gpt_oss_moe": ("mxfp4",),
    # SGLang 0.5.23's CPU experts (AMX): block FP8 audits at the checkpoint's block (128)
    "sglang_cpu_fp8_moe": ("fp8_block128",),
    "sglang_cpu_mxfp4_moe": ("mxfp4",),
}


def checkpoint_format(model: MoEModelConfig) -> CheckpointFormat:
    """Classify the checkpoint from ``quantization_config`` (see docs/audit.md).

    * no ``quantization_config`` -> ``unquantized``
    * ``quant_method: gptq`` with ``bits: 4`` -> ``gptq_int4``
    * ``quant_method: fp8`` with ``weight_block_size [128, 128]`` -> ``fp8_block128``;
      ``[1, 32]`` (or ``quant_method: mxfp8``) -> ``mxfp8``
    * ``quant_method: mxfp4`` -> ``mxfp4``
    * ``quant_method`` ``nvfp4``/``modelopt_fp4``, or ``modelopt``/``compressed-tensors``
      with 4 bits in groups of 16 -> ``nvfp4``
    * anything else -> a format no contract takes (its key names it).
    """
    method = (model.quant_method or "").lower()
    block = tuple(model.block_size) if model.block_size else None
    if not method:
        return CheckpointFormat("unquantized", FORMAT_LABELS["unquantized"])
    if method == "gptq":
        if model.bits == 4:
            return CheckpointFormat("gptq_int4", FORMAT_LABELS["gptq_int4"])
        bits = f"{model.bits}-bit" if model.bits is not None else "unstated bits"
        return CheckpointFormat(f"gptq_{model.bits or 'unknown'}bit", f"GPTQ ({bits})")
    if method == "mxfp8" or (method == "fp8" and block == (1, 32)):
        return CheckpointFormat("mxfp8", FORMAT_LABELS["mxfp8"], (("scheme", "mxfp8"),))
    if method == "fp8":
        if block == (128, 128):
            return CheckpointFormat("fp8_block128", FORMAT_LABELS["fp8_block128"],
                                    (("scheme", "fp8_block128"), ("block", 128)))
        if block is None:
            return CheckpointFormat("fp8_per_tensor", "FP8 without weight blocks (per-tensor/per-channel)")
        return CheckpointFormat("fp8_block_other", f"block-FP8 {list(block)}")
    if method == "mxfp4":
        return CheckpointFormat("mxfp4", FORMAT_LABELS["mxfp4"])
    if method in ("nvfp4", "modelopt_fp4") or (
        method in ("modelopt", "compressed-tensors") and model.bits == 4 and model.group_size == 16
    ):
        return CheckpointFormat("nvfp4", FORMAT_LABELS["nvfp4"])
    detail = []
    if model.bits is not None:
        detail.append(f"{model.bits}-bit")
    if model.group_size is not None:
        detail.append(f"group {model.group_size}")
    if block is not None:
        detail.append(f"block {list(block)}")
    suffix = f" ({', '.join(detail)})" if detail else ""
    return CheckpointFormat(method, f"{model.quant_method}{suffix}")


# Glue kinds (layoutc.compiler.check.GLUE_KINDS) that quantize float weights when they load
# them: their contracts state float tensors, but the kernel computes a weight-only
# quantized model, which no checkpoint is (docs/audit.md, "checkpoint format").
QUANTIZING_GLUE: dict[str, str] = {
    "torch_int4pack": "int4 weight-only (the glue quantizes float weights in groups at load)",
    "torch_int8pack": "int8 weight-only (the glue quantizes float weights per channel at load)",
}


def contract_formats(contract: ir.Contract) -> tuple[str, ...] | None:
    """The checkpoint formats a contract takes; None when audit cannot tell.

    ``()`` for a contract whose glue quantizes float weights at load
    (:data:`QUANTIZING_GLUE`): it computes a re-quantized model, not the checkpoint.
    """
    known = CONTRACT_FORMATS.get(contract.name)
    if known is not None:
        return known
    if contract.glue is not None and contract.glue.kind in QUANTIZING_GLUE:
        return ()
    if any(t.kind in ("scale", "zero") for t in contract.tensors):
        return None
    return ("unquantized",)
