"""Checkpoints at the width people deploy, written one decoder layer at a time (issue 44).

The model is built on the meta device from a real config (nothing is allocated); each decoder
layer's parameters are drawn from N(0, std) in the checkpoint's dtype, turned into the on-disk
names and layout by transformers' own `revert_weight_conversion` (what `save_pretrained` does:
Qwen3-MoE's fused experts back into per-expert `gate_proj` / `up_proj` / `down_proj`), and written
as one safetensors shard per layer with model.safetensors.index.json. Peak memory: one layer in
the checkpoint's dtype, whatever the number of layers.

    python bench/wide_checkpoint.py gemma4 /tmp/g4-2 --layers 2
    python bench/wide_checkpoint.py qwen3_moe /tmp/q3-4 --layers 4

Shapes (SHAPES): gemma-4-26B-A4B's text model (128 experts, hidden 2816, moe_intermediate 704,
top-8, gemma4_text), Qwen3-30B-A3B's (128 experts, hidden 2048, moe_intermediate 768, top-8) and a
hybrid, Qwen3-Next-80B-A3B's layer width with 64 of its 512 experts, with a 32k vocabulary; `--width` scales hidden / intermediate / experts down for tests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any

#: the real widths (config.json fields); attention and vocabulary are the model's, at a 32k vocabulary
SHAPES: dict[str, dict[str, Any]] = {
    "gemma4": {
        "model_type": "gemma4_text",
        "hidden_size": 2816,
        "moe_intermediate_size": 704,
        "num_experts": 128,
        "top_k_experts": 8,
        "intermediate_size": 2112,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "enable_moe_block": True,
        "vocab_size": 32768,
        "tie_word_embeddings": True,
        "hidden_size_per_layer_input": 0,
        "sliding_window": 1024,
    },
    "qwen3_moe": {
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "intermediate_size": 6144,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "norm_topk_prob": True,
        "vocab_size": 32768,
        "tie_word_embeddings": False,
        "decoder_sparse_step": 1,
    },
    # a hybrid family (issue 44: --layer-range on heterogeneous configs): Qwen3-Next-80B-A3B's layer width
    # (hidden 2048, moe_intermediate 512, top-10, a shared expert, linear attention in three layers of
    # four) with 64 of its 512 experts
    "qwen3_next": {
        "model_type": "qwen3_next",
        "hidden_size": 2048,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "num_experts": 64,
        "num_experts_per_tok": 10,
        "intermediate_size": 5120,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "full_attention_interval": 4,
        "norm_topk_prob": True,
        "vocab_size": 32768,
        "tie_word_embeddings": False,
        "decoder_sparse_step": 1,
    },
}
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def config_for(family: str, layers: int, width: float = 1.0, experts: int | None = None) -> dict[str, Any]:
    """config.json's dict of `family` at `layers` decoder layers; `width` scales the hidden size,
    the intermediates and the heads' count (a medium checkpoint for a test), `experts` overrides."""
    cfg = dict(SHAPES[family])
    if width != 1.0:
        for key in ("hidden_size", "moe_intermediate_size", "intermediate_size"):
            cfg[key] = max(64, int(cfg[key] * width) // 64 * 64)
        cfg["head_dim"] = 64
        cfg["num_attention_heads"] = max(2, cfg["hidden_size"] // 256)
        cfg["num_key_value_heads"] = max(1, cfg["num_attention_heads"] // 2)
    if experts is not None:
        cfg["num_experts"] = experts
    cfg["num_hidden_layers"] = layers
    if family == "gemma4":  # gemma-4's pattern: five sliding layers, then a full one
        cfg["layer_types"] = ["full_attention" if (n + 1) % 6 == 0 else "sliding_attention" for n in range(layers)]
    return cfg


def write(folder: str, cfg: dict[str, Any], dtype: str = "bfloat16", seed: int = 0, std: float = 0.02) -> str:
    """Write the checkpoint of config.json dict `cfg` into `folder` (returned), a shard per layer."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers.core_model_loading import revert_weight_conversion

    config = transformers.CONFIG_MAPPING[cfg["model_type"]](**{k: v for k, v in cfg.items() if k != "model_type"})
    config.dtype = dtype
    cls = transformers.AutoModelForCausalLM._model_mapping[type(config)]
    with torch.device("meta"):
        model = cls(config)
    groups: dict[str, list[tuple[str, torch.Size]]] = {}
    for name, t in model.state_dict().items():
        m = _LAYER.search(name)
        groups.setdefault(f"layer{int(m.group(1)):05d}" if m else "rest", []).append((name, t.shape))
    os.makedirs(folder, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    weight_map: dict[str, str] = {}
    total = 0
    for i, (_group, items) in enumerate(sorted(groups.items())):
        tensors = {
            name: (torch.randn(shape, generator=gen, dtype=torch.float32) * std).to(getattr(torch, dtype))
            if len(shape) < 3
            else _big(shape, gen, std, getattr(torch, dtype))
            for name, shape in items
        }
        disk = revert_weight_conversion(model, tensors)
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({k: v.contiguous() for k, v in disk.items()}, os.path.join(folder, fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(disk, fname))
        total += sum(v.numel() * v.element_size() for v in disk.values())
        del tensors, disk
    with open(os.path.join(folder, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    config.architectures = [cls.__name__]
    config.save_pretrained(folder)
    return folder


def subset(src: str, folder: str, family: str, layers: int, width: float = 1.0, experts: int | None = None) -> str:
    """A `layers`-layer checkpoint of `family` in `folder` (returned), made from `src` (written by `write`
    with more layers of the same family and width) without drawing anything: decoder layer n of the new
    checkpoint is the first layer of `src` whose layer type (gemma-4's `layer_types`: sliding / full
    attention, whose attention shapes differ) is the new config's type of layer n. A shard whose layer
    keeps its index is a symbolic link to src's; one whose index changes is rewritten under its new
    names; the embeddings' shard is linked. Every tensor's shape is checked against the new config's
    model (on the meta device). Raises ValueError when src has no layer of a type the new config needs."""
    import torch
    import transformers
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    cfg = config_for(family, layers, width, experts)
    config = transformers.CONFIG_MAPPING[cfg["model_type"]](**{k: v for k, v in cfg.items() if k != "model_type"})
    with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
        src_cfg = json.load(f)
    with open(os.path.join(src, "model.safetensors.index.json"), encoding="utf-8") as f:
        src_map: dict[str, str] = json.load(f)["weight_map"]
    src_types = src_cfg.get("layer_types") or ["-"] * int(src_cfg["num_hidden_layers"])
    want_types = list(getattr(config, "layer_types", None) or ["-"] * layers)
    pick = []
    for n, kind in enumerate(want_types):
        same = [k for k, t in enumerate(src_types) if t == kind]
        if not same:
            raise ValueError(f"{src} has no {kind} layer for layer {n}")
        pick.append(n if n < len(src_types) and src_types[n] == kind else same[0])
    cls = transformers.AutoModelForCausalLM._model_mapping[type(config)]
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in cls(config).state_dict().items()}
    os.makedirs(folder, exist_ok=True)
    weight_map: dict[str, str] = {}
    for fname in sorted(set(src_map.values())):
        names = [k for k, v in src_map.items() if v == fname]
        m = _LAYER.search(names[0])
        if m is None:  # embeddings and the final norm
            os.symlink(os.path.abspath(os.path.join(src, fname)), os.path.join(folder, fname))
            weight_map.update(dict.fromkeys(names, fname))
    for n, k in enumerate(pick):
        fname = next(v for name, v in src_map.items() if (m := _LAYER.search(name)) and int(m.group(1)) == k)
        target = f"layer{n:05d}.safetensors"
        if n == k:
            os.symlink(os.path.abspath(os.path.join(src, fname)), os.path.join(folder, target))
            with safe_open(os.path.join(src, fname), framework="pt") as h:
                names = list(h.keys())
        else:
            tensors = load_file(os.path.join(src, fname))
            out = {name.replace(f"layers.{k}.", f"layers.{n}.", 1): t for name, t in tensors.items()}
            save_file(out, os.path.join(folder, target), metadata={"format": "pt"})
            names = list(out)
            del tensors, out
        weight_map.update(dict.fromkeys(names, target))
    for name, fname in weight_map.items():
        with safe_open(os.path.join(folder, fname), framework="pt") as h:
            got = tuple(h.get_slice(name).get_shape())
        if name in shapes and shapes[name] != got:
            raise ValueError(f"{name}: {got} on disk, the {layers}-layer model has {shapes[name]}")
    total = sum(os.path.getsize(os.path.join(folder, f)) for f in set(weight_map.values()))
    with open(os.path.join(folder, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    config.dtype = src_cfg.get("dtype", "bfloat16")
    config.architectures = [cls.__name__]
    config.save_pretrained(folder)
    return folder


def _big(shape: Any, gen: Any, std: float, dtype: Any) -> Any:
    """A 3-D expert tensor drawn one expert at a time (no float32 copy of the whole tensor)."""
    import torch

    out = torch.empty(shape, dtype=dtype)
    for e in range(shape[0]):
        out[e] = torch.randn(shape[1:], generator=gen, dtype=torch.float32) * std
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family", choices=sorted(SHAPES))
    parser.add_argument("folder")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--experts", type=int, default=None)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    args = parser.parse_args()
    print(write(args.folder, config_for(args.family, args.layers, args.width, args.experts), args.dtype))


if __name__ == "__main__":
    main()
