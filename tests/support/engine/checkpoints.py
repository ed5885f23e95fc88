"""Tiny random-init MoE checkpoints made with transformers' own classes (no network).

`mixtral(dir)`: hidden 256, 8 experts, intermediate_size 704, one layer: at tp=4 the
shard is 176 rows, which vLLM's CPU grouped-GEMM pads to 192.
`gpt_oss(dir)`: the same sizes with gpt-oss's swigluoai experts (interleaved
gate/up pairs, biases, attention sinks); intermediate_size 384 so that every shard
(384, 192, 96) is a multiple of 32, which vLLM 0.32 requires of swigluoai (it never
pads it, cpu_moe.py `_padded_intermediate_size`).
"""

from __future__ import annotations

from pathlib import Path

HIDDEN, EXPERTS, LAYERS, VOCAB = 256, 8, 1, 512
MIXTRAL_INTERMEDIATE = 704
GPT_OSS_INTERMEDIATE = 384
GPT_OSS_UNALIGNED = 704


def _save(model, out: Path) -> Path:  # type: ignore[no-untyped-def]
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            # Seeded random weights big enough that routing and tokens depend on them;
            # norms stay 1 and lm_head is larger, so the logits are far apart (greedy tokens
            # do not flip on bf16 rounding across tensor-parallel sizes).
            if "norm" in name:
                p.fill_(1.0)
            elif name.startswith("lm_head"):
                p.copy_(torch.randn_like(p) * 0.3)
            else:
                p.copy_(torch.randn_like(p) * 0.05)
    model.to(torch.bfloat16).save_pretrained(out)
    return out


def mixtral(out: Path, seed: int = 0, intermediate: int = MIXTRAL_INTERMEDIATE, heads: int = 4,
            vocab: int = VOCAB) -> Path:
    """Save a tiny MixtralForCausalLM to `out` and return it.

    intermediate: 176 makes the tp 1 shard need the pad (176 -> 192) at one worker process.
    heads, vocab: attention (and key/value) heads of head_dim 64 and vocabulary size; 3 and 576 let vLLM
    run it at tp 3 (it splits both over the ranks)."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(seed)
    config = MixtralConfig(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=intermediate,
        num_hidden_layers=LAYERS, num_attention_heads=heads, num_key_value_heads=heads, head_dim=64,
        num_local_experts=EXPERTS, num_experts_per_tok=2, max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    return _save(MixtralForCausalLM(config), out)


def gpt_oss(out: Path, seed: int = 0, intermediate: int = GPT_OSS_INTERMEDIATE) -> Path:
    """Save a tiny GptOssForCausalLM (swigluoai experts with biases) to `out`.

    intermediate: GPT_OSS_UNALIGNED (704) makes the tp 4 shard 176, which vLLM 0.32 refuses
    (`_supports_grouped_gemm`) and the contract pads to 192."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    torch.manual_seed(seed)
    config = GptOssConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=intermediate,
        num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=4, head_dim=64,
        num_local_experts=EXPERTS, num_experts_per_tok=2, max_position_embeddings=128,
        layer_types=["full_attention"] * LAYERS, sliding_window=128, tie_word_embeddings=False,
        # vLLM's gpt-oss always builds YaRN rope from these keys (models/gpt_oss.py).
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 1.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "original_max_position_embeddings": 128, "truncate": False},
    )
    return _save(GptOssForCausalLM(config), out)


# compressed-tensors W8A8 int8 (the format llm-compressor writes, `int-quantized`): int8 weights with
# one float32 scale per output channel, int8 activations quantized per token at run time. Only the
# experts are quantized; attention, the router and lm_head stay bf16 (`ignore`).
W8A8_CONFIG = {
    "quant_method": "compressed-tensors", "format": "int-quantized",
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
                              "dynamic": True}}},
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*block_sparse_moe\\.gate$"],
}


def mixtral_w8a8(out: Path, seed: int = 0, intermediate: int = MIXTRAL_INTERMEDIATE) -> Path:
    """A tiny Mixtral (`mixtral`) whose experts are stored as compressed-tensors W8A8 int8: each
    `experts.E.w{1,2,3}.weight` becomes int8 round(w / s) with `weight_scale` s = amax / 127 per
    output row ([out, 1] float32), and config.json carries W8A8_CONFIG."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    mixtral(out, seed=seed, intermediate=intermediate)
    path = out / "model.safetensors"
    tensors = load_file(str(path))
    for name in [n for n in tensors if ".experts." in n and n.endswith(".weight")]:
        w = tensors[name].float()
        scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).clamp(min=1e-8)
        tensors[name] = torch.round(w / scale).clamp(-127, 127).to(torch.int8)
        tensors[name.removesuffix(".weight") + ".weight_scale"] = scale.to(torch.float32)
    save_file(tensors, str(path), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"] = W8A8_CONFIG
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
