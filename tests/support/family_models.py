"""Small random MoE checkpoints of families `layoutc run` has no hand-written test maker for,
built with transformers' own classes and `save_pretrained` (no network): the config is
constructed in code, every parameter redrawn from N(0, 0.05) with a fixed seed.

    python -m tests.support.family_models olmoe /tmp/olmoe-tiny --dtype bfloat16

Sizes: hidden 64, expert intermediate 64, 4 experts, top-2, 2 layers (ERNIE: 4, its
layers 1 and 3 MoE). The keys are given under every name the families use; each family's
config class reads its own.
"""

from __future__ import annotations

import argparse
from typing import Any

SIZES: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 64, "moe_intermediate_size": 64, "num_experts": 4,
                         "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4, "num_experts_per_tok": 2,
                         "moe_k": 2, "moe_topk": 2, "num_hidden_layers": 2, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128, "max_position_embeddings": 128,
                         "tie_word_embeddings": False, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 0,
                         "shared_intermediate_size": 64, "n_shared_experts": 1, "num_shared_expert": 1}
EXTRA: dict[str, dict[str, Any]] = {
    "ernie4_5_moe": {"num_hidden_layers": 4, "moe_layer_start_index": 1, "moe_layer_interval": 2},
    # FlexOlmoConfig's token ids default to its 100k vocabulary
    "flex_olmo": {"pad_token_id": 1, "eos_token_id": 2},
    # Lfm2MoeConfig has no default layer_types; 3 layers, the first dense (num_dense_layers 1)
    "lfm2_moe": {"num_hidden_layers": 3, "num_dense_layers": 1,
                 "layer_types": ["full_attention", "conv", "full_attention"]},
}


def make(folder: str, family: str, dtype: str = "float32", **overrides: Any) -> str:
    """Write a `family` checkpoint to `folder` (returned). dbrx is built from DbrxConfig's own
    nested ffn_config / attn_config; every other family from AutoConfig.for_model, with
    `overrides` over SIZES and EXTRA (e.g. intermediate_size=32)."""
    import torch
    import transformers

    torch.manual_seed(0)
    if family == "dbrx":
        s = SIZES
        config = transformers.DbrxConfig(
            d_model=s["hidden_size"], n_layers=2, n_heads=4, vocab_size=128, max_seq_len=128, tie_word_embeddings=False,
            ffn_config={"ffn_hidden_size": s["intermediate_size"], "moe_num_experts": 4, "moe_top_k": 2,
                        "ffn_act_fn": {"name": "silu"}},
            attn_config={"kv_n_heads": 2, "rope_theta": 10000.0})
    else:
        config = transformers.AutoConfig.for_model(family, **{**SIZES, **EXTRA.get(family, {}), **overrides})
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    model.config.dtype = dtype
    model.to(getattr(torch, dtype)).save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family")
    parser.add_argument("folder")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = parser.parse_args()
    print(make(args.folder, args.family, args.dtype))


if __name__ == "__main__":
    main()
