"""Small random checkpoints of the public families of issue 45 (items 2, 4, 6) that
tests/support/family_models.py cannot build with `AutoModelForCausalLM.from_config`: multimodal wrappers
built through their own model class, with the sizes of tests/support/family_models.py (hidden 64, 4
experts, top-2) and an expert intermediate of 32, so that no orientation is ambiguous.

    python -m tests.support.public_family_models step3p7 /tmp/step3p7-tiny
"""

from __future__ import annotations

import argparse
from typing import Any

_VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "image_size": 28,
    "patch_size": 14,
}
_TEXT: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 64,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 128,
    "max_position_embeddings": 128,
    "num_experts_per_tok": 2,
}
#: family -> (transformers class, config kwargs): step3p7 (Step3p7ForConditionalGeneration; its layer 0
#: dense, layer 1 MoE by mlp_layer_types; separate fused moe.gate_proj / up_proj / down_proj on disk)
BUILDS: dict[str, tuple[str, dict[str, Any]]] = {
    "step3p7": (
        "Step3p7ForConditionalGeneration",
        {
            "text_config": {
                **_TEXT,
                "n_routed_experts": 4,
                "share_expert_dim": 64,
                "mlp_layer_types": ["dense", "sparse"],
            },
            "vision_config": _VISION,
        },
    ),
}


def make(folder: str, family: str, dtype: str = "float32", **text: Any) -> str:
    """Write a `family` checkpoint (a key of BUILDS) to `folder` (returned): its config with `text`
    over the text config, every parameter redrawn from N(0, 0.05) with seed 0, saved by transformers'
    own `save_pretrained` (which writes the names the released checkpoints use)."""
    import torch
    import transformers

    torch.manual_seed(0)
    cls, kwargs = BUILDS[family]
    kwargs = {**kwargs, "text_config": {**kwargs["text_config"], **text}} if "text_config" in kwargs else kwargs
    config = transformers.AutoConfig.for_model(family, **kwargs)
    model = getattr(transformers, cls)(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    model.config.dtype = dtype
    model.to(getattr(torch, dtype)).save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family", choices=sorted(BUILDS))
    parser.add_argument("folder")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = parser.parse_args()
    print(make(args.folder, args.family, args.dtype))


if __name__ == "__main__":
    main()


def fp8_block(folder: str) -> str:
    """Rewrite every routed-expert weight of the checkpoint in `folder` (per-expert
    `...experts.<e>.<proj>.weight`, or fused 3-D `...experts.<name>` / `moe.<proj>.weight`) as block
    FP8 the way DeepSeek-V3's release stores it: float8_e4m3fn `.weight` plus a float32
    `.weight_scale_inv` per 128 x 128 block (tests/support/quant_pack.py pack_fp8), and add its
    quantization_config (examples/make_checkpoint.py's fp8_block keys). No format is consulted:
    the names come from the tensors, as a quantizer that knows no layoutc family writes them."""
    import json
    import os
    import re

    import torch
    from safetensors.torch import load_file, save_file

    from tests.support import quant_pack as qp

    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    expert = re.compile(r".*\.experts\.\d+\.\w+\.weight$")
    for name in [n for n in tensors if expert.match(n) and "shared" not in n]:
        q, s = qp.pack_fp8(tensors.pop(name).to(torch.float32), "block")
        tensors[name], tensors[name + "_scale_inv"] = q, s
    save_file(tensors, path, metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    keep = sorted(
        n.removesuffix(".weight")
        for n, t in tensors.items()
        if n.endswith(".weight") and t.dim() >= 2 and t.is_floating_point() and t.itemsize > 1
    )
    config["quantization_config"] = {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
        "modules_to_not_convert": keep,
    }
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    return folder


def qwen3_5_fused_mtp(folder: str) -> str:
    """A Qwen3.5/3.6 MoE text checkpoint as the releases store it: the routed experts fused on disk
    (`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I], no `.weight`: transformers'
    `save_pretrained(save_original_format=False)`), and one MTP layer whose experts are grouped the same
    way (`mtp.layers.0.mlp.experts.gate_up_proj`, as Qwen/Qwen3.6-35B-A3B's index lists them), which
    transformers does not load. Layer 0 linear attention, layer 1 full attention."""
    import json
    import os

    import torch
    import transformers
    from safetensors.torch import load_file, save_file

    from tests.support.family_models import SIZES

    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(
        "qwen3_5_moe_text",
        **{
            **SIZES,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            "layer_types": ["linear_attention", "full_attention"],
        },
    )
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    model.save_pretrained(folder, save_original_format=False)
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    g = torch.Generator().manual_seed(1)
    for name in [n for n in tensors if n.startswith("model.layers.1.")]:
        tensors["mtp.layers.0." + name.removeprefix("model.layers.1.")] = (
            torch.randn(tensors[name].shape, generator=g) * 0.05
        )
    tensors["mtp.fc.weight"] = torch.randn(64, 128, generator=g) * 0.05
    save_file(tensors, path, metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["mtp_num_hidden_layers"] = 1
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    return folder


def flat_namespace(folder: str) -> str:
    """Rename a checkpoint's tensors to DeepSeek-V4's release namespace: no `model.` prefix
    (`layers.N.ffn.experts.E.w1.weight`, `embed.weight`), as transformers' conversion_mapping
    'deepseek_v4' reads them."""
    import os

    from safetensors.torch import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    tensors = {n.removeprefix("model.").replace("embed_tokens.", "embed."): t for n, t in load_file(path).items()}
    save_file(tensors, path, metadata={"format": "pt"})
    return folder
