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
    a = p.parse_args(argv)
    make(a.out_dir, a.family, dtype=a.dtype, hidden=a.hidden, intermediate=a.intermediate,
         experts=a.experts, layers=a.layers, top_k=a.top_k)
    print(f"wrote {a.out_dir} ({a.family}, {a.dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
