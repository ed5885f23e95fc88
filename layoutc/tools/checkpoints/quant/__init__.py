"""Quantized routed-expert checkpoints: formats declared as data (`scheme`), read from
config.json's `quantization_config` (`config.read_quantization`, standard library only),
held to the safetensors headers (`validate.validate`) and dequantized independently
(`dequant.dequantize`, torch).

Declared: GPTQ int4 / int8 (sym or asym, desc_act on or off, checkpoint_format gptq or
gptq_v2), AWQ int4 GEMM, FP8 E4M3 per block (DeepSeek-V3 / MiniMax-M2 `weight_scale_inv`),
per channel and per tensor (compressed-tensors `weight_scale`; "fp8" without blocks), and
gpt-oss MXFP4 (`*_blocks` / `*_scales`), and NVFP4 (ModelOpt `quant_algo` NVFP4 / W4A16_NVFP4,
compressed-tensors nvfp4-pack-quantized), compressed-tensors pack-quantized symmetric int4 / int8
(llm-compressor W4A16 / W8A16, group or channel) and auto-round's native format (GPTQ v1 tensors):
quant/wna16.py.

Error codes (FormatError): LR150 an undeclared method, bit width, version or scheme (named,
read from the config before any tensor); LR151 a malformed quantization_config value;
LR152 a skip list or per-module override that reaches the routed experts; LR153 a scale,
zero-point or g_idx whose shape does not match its weight; LR154 a packed tensor with the
wrong byte count; LR155 a g_idx out of range (or not k // group_size without act-order);
LR156 an E8M0 scale byte 255 (NaN); LR157 the config disagrees with the tensors (dtype,
bit width, unquantized tensors); LR158 a scheme whose layout the family's format cannot hold;
LR166 GPTQ qzeros other than the symmetric constant where the config says sym: true.

The package re-exports the schemes only (scheme.py, which imports nothing of the checkpoint
tools but the format type and the error): a module that names a `QuantScheme` (the model-config
record, layoutc.tools.checkpoints.moeconfig) imports this package, and the config reader and the
validator import the format table above it, so re-exporting them here would close an import
circle. Import them from their modules: `quant.config.read_quantization`,
`quant.config.find_quantization_config`, `quant.validate.validate`.
"""

from layoutc.tools.checkpoints.quant.scheme import (
    AWQ_ORDER,
    Dim,
    Packing,
    QuantScheme,
    TensorSpec,
    awq,
    fp8,
    gptq,
    mxfp4,
    nvfp4,
    projection_extents,
    tensor_names,
)

__all__ = ["AWQ_ORDER", "Dim", "Packing", "QuantScheme", "TensorSpec", "awq", "fp8", "gptq", "mxfp4", "nvfp4",
           "projection_extents", "tensor_names"]
