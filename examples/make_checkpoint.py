"""Build a small random-init MoE checkpoint with transformers' own `save_pretrained`
(no network: the config is constructed in code), for `layoutc run`.

    python examples/make_checkpoint.py /tmp/qwen3-moe-tiny            # Qwen3-MoE, bf16
    python examples/make_checkpoint.py /tmp/gpt-oss-tiny --family gpt_oss --dtype float32
    layoutc run /tmp/qwen3-moe-tiny --tp 1,2,4

Families: qwen3_moe, qwen2_moe (with a shared expert), mixtral, gpt_oss, gemma4, llama4
(Llama-4 text, `Llama4ForCausalLM`, model_type llama4_text: a shared expert, sigmoid
routing, and the routing weight on the experts' input).
Shapes default to hidden 256, expert intermediate 704 (tp=4: 176 per rank, padded to
192 by the vLLM CPU kernel's 32-row tile), 8 experts, top-2 (llama4: top-1, as Llama-4
Scout and Maverick; vLLM's CPU kernels weight the input only at top_k 1), 2 layers, every
one a MoE layer. Every parameter is redrawn from N(0, std) with a fixed seed, so routers
are not all-zero.

Quantized checkpoints (`--quant`, no network): the model is built and saved as above, then
the routed experts' tensors are rewritten in the real format's on-disk names and layout by
the test packers (tests/support/quant_pack.py), and config.json gets the `quantization_config` the
real tool writes. Everything else (attention, routers, norms, embeddings) stays in
`--dtype`, and the config's skip list says so, as real checkpoints do.

    python examples/make_checkpoint.py /tmp/gpt-oss-mxfp4 --family gpt_oss --quant mxfp4
    python examples/make_checkpoint.py /tmp/qwen3-gptq --quant gptq4 --group-size 64 --act-order
    python examples/make_checkpoint.py /tmp/qwen3-fp8 --quant fp8_block

- mxfp4 (gpt_oss only; the gpt-oss release's config.json): `mlp.experts.gate_up_proj_blocks`
  uint8 [E, 2I, H / 32, 16] and `_scales` [E, 2I, H / 32] (rows still interleaved gate/up),
  `down_proj_blocks` / `_scales`, biases unchanged.
- fp8_block (DeepSeek-V3's config.json, plus a modules_to_not_convert list as Qwen3-FP8 and
  MiniMax-M2 write): per expert `weight` float8_e4m3fn + `weight_scale_inv` float32
  [ceil(N / 128), ceil(K / 128)].
- fp8_tensor (AutoFP8's "fp8" without blocks, `weight_block_size: null` written out):
  `weight` + `weight_scale` float32 ().
- fp8_channel (llm-compressor's FP8_DYNAMIC, compressed-tensors): `weight` + `weight_scale`
  [N, 1] in the model's dtype.
- gptq4 / gptq8 (GPTQModel, checkpoint_format "gptq" = v1): `qweight`, `qzeros` (z - 1),
  `scales` float16, `g_idx`; --group-size (default 128; -1 per channel), --act-order,
  --asym.
- awq4 (AutoAWQ GEMM): `qweight`, `qzeros`, `scales` float16; --group-size must divide
  both hidden and intermediate (AutoAWQ's WQLinear_GEMM requires it).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

FAMILIES = ("qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "gemma4", "llama4")
#: experts per token where a family fixes another default than 2
TOP_K = {"llama4": 1}


def _common(hidden: int, layers: int) -> dict[str, Any]:
    return {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": hidden // 4, "vocab_size": 128,
            "max_position_embeddings": 128, "tie_word_embeddings": False}


def build(family: str, *, hidden: int = 256, intermediate: int = 704, experts: int = 8, top_k: int | None = None,
          layers: int = 2, seed: int = 0, std: float = 0.05) -> Any:
    """A random-init transformers causal LM of `family` (float32); top_k None: 2 (llama4: 1)."""
    import torch
    import transformers as tf

    if top_k is None:
        top_k = TOP_K.get(family, 2)
    c = _common(hidden, layers)
    if family == "qwen3_moe":
        cfg = tf.Qwen3MoeConfig(**c, moe_intermediate_size=intermediate, intermediate_size=2 * hidden,
                                num_experts=experts, num_experts_per_tok=top_k, decoder_sparse_step=1,
                                norm_topk_prob=True)
        model_cls = tf.Qwen3MoeForCausalLM
    elif family == "qwen2_moe":
        cfg = tf.Qwen2MoeConfig(**c, moe_intermediate_size=intermediate, intermediate_size=2 * hidden,
                                shared_expert_intermediate_size=2 * hidden, num_experts=experts,
                                num_experts_per_tok=top_k, decoder_sparse_step=1)
        model_cls = tf.Qwen2MoeForCausalLM
    elif family == "mixtral":
        cfg = tf.MixtralConfig(**c, intermediate_size=intermediate, num_local_experts=experts,
                               num_experts_per_tok=top_k)
        model_cls = tf.MixtralForCausalLM
    elif family == "gpt_oss":
        cfg = tf.GptOssConfig(**c, intermediate_size=intermediate, num_local_experts=experts,
                              num_experts_per_tok=top_k, layer_types=["full_attention"] * layers)
        model_cls = tf.GptOssForCausalLM
    elif family == "gemma4":
        cfg = tf.Gemma4TextConfig(**c, moe_intermediate_size=intermediate, intermediate_size=2 * hidden,
                                  num_experts=experts, top_k_experts=top_k, enable_moe_block=True,
                                  hidden_size_per_layer_input=0, num_global_key_value_heads=2,
                                  global_head_dim=hidden // 4, layer_types=["full_attention"] * layers)
        model_cls = tf.Gemma4ForCausalLM
    elif family == "llama4":
        # every layer a MoE layer (moe_layers listed, interleave step 1); the shared expert and
        # the routed experts both have `intermediate_size` (Llama4TextMoe), dense layers
        # (none here) `intermediate_size_mlp`
        cfg = tf.Llama4TextConfig(**c, intermediate_size=intermediate, intermediate_size_mlp=2 * hidden,
                                  num_local_experts=experts, num_experts_per_tok=top_k,
                                  interleave_moe_layer_step=1, moe_layers=list(range(layers)))
        model_cls = tf.Llama4ForCausalLM
    else:
        raise SystemExit(f"make_checkpoint: unknown family {family!r}; one of {', '.join(FAMILIES)}")
    torch.manual_seed(seed)
    model = model_cls(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=gen) * std)
    return model.eval()


def make(out_dir: str, family: str = "qwen3_moe", *, dtype: str = "bfloat16", **shape: Any) -> str:
    """Build `family` and `save_pretrained` it (safetensors) into `out_dir`; returns out_dir."""
    import torch

    model = build(family, **shape)
    model.to(getattr(torch, dtype)).save_pretrained(out_dir)
    return out_dir


QUANTS = ("mxfp4", "fp8_block", "fp8_channel", "fp8_tensor", "gptq4", "gptq8", "awq4", "nvfp4", "nvfp4_ct")
#: GPTQModel "dynamic" skip rule for what a real checkpoint of these families also
#: quantizes but this one keeps in --dtype (attention, routers, shared experts, lm_head)
_KEEP_REGEX = r".*(self_attn|\.gate$|router|shared_expert|embed_tokens|lm_head).*"


def quantization_config(quant: str, *, group_size: int = 128, act_order: bool = False, asym: bool = False,
                        keep: tuple[str, ...] = ("lm_head",)) -> dict[str, Any]:
    """config.json's `quantization_config` for `quant`, keyed as the real tool writes it.

    keep: the modules left unquantized, by name (every weight but the routed experts'), for
    the skip list (modules_to_not_convert / ignored_layers / ignore) as Qwen3-FP8 spells it.
    """
    skip = list(keep)
    if quant == "mxfp4":  # openai/gpt-oss-20b config.json
        return {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                           "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}
    if quant == "fp8_block":  # deepseek-ai/DeepSeek-V3 config.json, with Qwen3-FP8's skip list
        return {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                "weight_block_size": [128, 128], "modules_to_not_convert": skip}
    if quant == "fp8_tensor":  # AutoFP8's keys, and weight_block_size null said outright: vLLM reads an
        # absent key as per-tensor, transformers 5.19's FineGrainedFP8Config as (128, 128) blocks
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": skip,
                "weight_block_size": None}
    if quant == "fp8_channel":  # llm-compressor FP8_DYNAMIC (compressed-tensors 0.17 QuantizationConfig)
        args = {"num_bits": 8, "type": "float", "symmetric": True, "group_size": None, "block_structure": None,
                "actorder": None, "observer": "minmax", "observer_kwargs": {}}
        return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
                "config_groups": {"group_0": {
                    "targets": ["Linear"], "format": "float-quantized",
                    "weights": {**args, "strategy": "channel", "dynamic": False},
                    "input_activations": {**args, "strategy": "token", "dynamic": True, "observer": None},
                    "output_activations": None}},
                "ignore": skip, "kv_cache_scheme": None}
    if quant in ("gptq4", "gptq8"):  # GPTQModel's config.json quantization_config
        return {"bits": 4 if quant == "gptq4" else 8, "group_size": group_size, "desc_act": act_order,
                "sym": not asym, "lm_head": False, "quant_method": "gptq", "checkpoint_format": "gptq",
                "damp_percent": 0.01, "true_sequential": True, "static_groups": False,
                "dynamic": {"-:" + _KEEP_REGEX: {}}}
    if quant == "awq4":  # AutoAWQ's config.json quantization_config
        return {"quant_method": "awq", "zero_point": True, "group_size": group_size, "bits": 4, "version": "gemm",
                "modules_to_not_convert": skip}
    if quant == "nvfp4":  # NVIDIA ModelOpt's config.json (flat; hf_quant_config.json nests the same keys)
        return {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "kv_cache_scheme": None,
                "ignore": skip, "producer": {"name": "modelopt", "version": "0.29.0"}}
    if quant == "nvfp4_ct":  # llm-compressor NVFP4 (compressed-tensors 0.17 preset NVFP4, nvfp4-pack-quantized)
        fp4 = {"num_bits": 4, "type": "float", "symmetric": True, "group_size": 16, "strategy": "tensor_group",
               "block_structure": None, "actorder": None, "observer": "minmax", "observer_kwargs": {}}
        return {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                "quantization_status": "compressed", "ignore": skip, "kv_cache_scheme": None,
                "config_groups": {"group_0": {
                    "targets": ["Linear"], "format": "nvfp4-pack-quantized",
                    "weights": {**fp4, "dynamic": False},
                    "input_activations": {**fp4, "dynamic": "local"}, "output_activations": None}}}
    raise SystemExit(f"make_checkpoint: unknown --quant {quant!r}; one of {', '.join(QUANTS)}")


def _pack_expert(quant: str, w: Any, *, group_size: int, act_order: bool, asym: bool, seed: int,
                 scale_dtype: Any, amax: float | None = None) -> dict[str, Any]:
    """One expert projection's stored tensors by suffix, from its float32 [out, in] weight
    (amax: NVFP4's global amax, shared by gate and up as ModelOpt exports them)."""
    import torch

    from tests.support import quant_pack as qp

    if quant in ("gptq4", "gptq8"):
        return qp.pack_gptq(w, 4 if quant == "gptq4" else 8, group_size, sym=not asym, act_order=act_order,
                            seed=seed)
    if quant == "awq4":
        return qp.pack_awq(w, group_size)
    if quant in ("nvfp4", "nvfp4_ct"):
        return qp.pack_nvfp4(w, amax=amax, compressed_tensors=quant == "nvfp4_ct")
    if quant == "fp8_block":
        q, s = qp.pack_fp8(w, "block")
        return {".weight": q, ".weight_scale_inv": s}
    q, s = qp.pack_fp8(w, quant.removeprefix("fp8_"),
                       scale_dtype=scale_dtype if quant == "fp8_channel" else torch.float32)
    return {".weight": q, ".weight_scale": s}


def quantize(out_dir: str, quant: str, *, group_size: int = 128, act_order: bool = False,
             asym: bool = False) -> str:
    """Rewrite the routed experts of the checkpoint in `out_dir` (written by `make`) in
    `quant`'s on-disk format, and add its quantization_config to config.json."""
    import json
    import os

    import torch
    from safetensors.torch import load_file, save_file

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from layoutc.tools.checkpoints.formats import describe
    from tests.support import quant_pack as qp

    cfg_path, st_path = os.path.join(out_dir, "config.json"), os.path.join(out_dir, "model.safetensors")
    with open(cfg_path, encoding="utf-8") as f:
        config = json.load(f)
    moe = describe(config)
    fmt = moe.format
    if (quant == "mxfp4") != fmt.fused or (fmt.fused and fmt.model_type != "gpt_oss"):
        raise SystemExit(f"make_checkpoint: --quant {quant} is not written for --family {fmt.model_type} "
                         "(mxfp4: gpt_oss only; the others: per-expert families)")
    tensors = load_file(st_path)
    for layer in moe.moe_layers:
        if fmt.fused:
            for proj, name in fmt.names(layer).items():
                if proj.endswith("_bias"):
                    continue
                w = tensors.pop(name).to(torch.float32).transpose(-1, -2)  # gpt-oss stores [E, in, out]
                tensors[name + "_blocks"], tensors[name + "_scales"] = qp.pack_mxfp4(w)
            continue
        for e in range(moe.num_experts):
            names = fmt.names(layer, e)
            fused_amax = max(float(tensors[names[p]].float().abs().amax()) for p in ("gate", "up") if p in names) \
                if quant in ("nvfp4", "nvfp4_ct") and "gate" in names else None
            for i, (proj, name) in enumerate(sorted(names.items())):
                w = tensors.pop(name)
                packed = _pack_expert(quant, w.to(torch.float32), group_size=group_size, act_order=act_order,
                                      asym=asym, seed=1000 * layer + 10 * e + i, scale_dtype=w.dtype,
                                      amax=fused_amax if proj in ("gate", "up") else None)
                module = name.removesuffix(".weight")
                tensors.update({module + suffix: t.contiguous() for suffix, t in packed.items()})
    save_file(tensors, st_path, metadata={"format": "pt"})
    keep = tuple(sorted(n.removesuffix(".weight") for n, t in tensors.items()
                        if n.endswith(".weight") and t.dim() >= 2 and t.is_floating_point() and t.itemsize > 1))
    config["quantization_config"] = quantization_config(quant, group_size=group_size, act_order=act_order,
                                                        asym=asym, keep=keep)
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--family", choices=FAMILIES, default="qwen3_moe")
    p.add_argument("--dtype", choices=("bfloat16", "float32", "float16"), default="bfloat16")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--intermediate", type=int, default=704)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--top-k", type=int, default=None, help="experts per token (default 2; llama4 1)")
    p.add_argument("--quant", choices=QUANTS, default=None, help="rewrite the routed experts in this format")
    p.add_argument("--group-size", type=int, default=128, help="gptq / awq group size along K (-1: per channel)")
    p.add_argument("--act-order", action="store_true", help="gptq: desc_act (a g_idx permutation)")
    p.add_argument("--asym", action="store_true", help="gptq: asymmetric (stored zero points)")
    a = p.parse_args(argv)
    make(a.out_dir, a.family, dtype=a.dtype, hidden=a.hidden, intermediate=a.intermediate,
         experts=a.experts, layers=a.layers, top_k=a.top_k)
    if a.quant is not None:
        quantize(a.out_dir, a.quant, group_size=a.group_size, act_order=a.act_order, asym=a.asym)
    print(f"wrote {a.out_dir} ({a.family}, {a.dtype}{', ' + a.quant if a.quant else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
