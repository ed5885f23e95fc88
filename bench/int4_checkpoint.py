"""The int4 checkpoint of issue 44 at its size, written one layer at a time: Qwen3-MoE layout,
64 experts, hidden 2048, moe_intermediate 1408, top-8, GPTQ int4 (GPTQModel / auto-round's
`gptq` export: qweight / qzeros / scales / g_idx, sym, group 128 by default).

    python bench/int4_checkpoint.py /tmp/int4-2 --layers 2
    python bench/int4_checkpoint.py /tmp/int4-4 --layers 4 --from /tmp/int4-2   # layers 2, 3 copy 0, 1

bench/wide_checkpoint.py writes the bf16 checkpoint (a shard per layer); each layer's shard is then
rewritten with every routed expert projection packed by tests/support/quant_pack.py `pack_gptq` (the
project's packer, held to vLLM's unpackers in tests/tools/test_quant_formats.py) and config.json gets
GPTQModel's quantization_config (examples/make_checkpoint.py `quantization_config`). Peak memory:
one layer's bf16 shard plus one expert's float32 weight.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "examples"))

SHAPE = {"hidden_size": 2048, "moe_intermediate_size": 1408, "num_experts": 64, "num_experts_per_tok": 8}
_EXPERT = re.compile(r"\.mlp\.experts\.\d+\.(gate_proj|up_proj|down_proj)\.weight$")


def write(folder: str, layers: int, group_size: int = 128, vocab: int = 32768) -> str:
    """Write the int4 checkpoint into `folder` (returned)."""
    import torch
    import wide_checkpoint as wide
    from make_checkpoint import quantization_config
    from safetensors.torch import load_file, save_file

    from tests.support import quant_pack as qp

    cfg = wide.config_for("qwen3_moe", layers)
    cfg.update(SHAPE, vocab_size=vocab)
    wide.write(folder, cfg)
    index_path = os.path.join(folder, "model.safetensors.index.json")
    with open(index_path, encoding="utf-8") as f:
        index = json.load(f)
    weight_map: dict[str, str] = {}
    keep: set[str] = set()
    for fname in sorted(set(index["weight_map"].values())):
        path = os.path.join(folder, fname)
        tensors = load_file(path)
        out: dict[str, torch.Tensor] = {}
        for i, (name, t) in enumerate(sorted(tensors.items())):
            if not _EXPERT.search(name):
                out[name] = t
                if name.endswith(".weight") and t.dim() >= 2:
                    keep.add(name.removesuffix(".weight"))
                continue
            packed = qp.pack_gptq(t.to(torch.float32), 4, group_size, sym=True, seed=i)
            out.update({name.removesuffix(".weight") + s: v.contiguous() for s, v in packed.items()})
        del tensors
        tmp = path + ".tmp"
        save_file(out, tmp, metadata={"format": "pt"})
        os.replace(tmp, path)
        weight_map.update(dict.fromkeys(out, fname))
        del out
    index["weight_map"] = weight_map
    index["metadata"]["total_size"] = sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))
    with open(index_path, "w", encoding="utf-8") as f:
        json.dump(index, f)
    cfg_path = os.path.join(folder, "config.json")
    with open(cfg_path, encoding="utf-8") as f:
        config = json.load(f)
    config["quantization_config"] = quantization_config("gptq4", group_size=group_size, keep=tuple(sorted(keep)))
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    return folder


def deepen(src: str, folder: str, layers: int) -> str:
    """`src` (written by `write`) with `layers` decoder layers in `folder` (returned): layer n is a
    copy of src's layer n % src_layers under its own names (the memory bench needs depth, not new
    draws; packing is the slow part of `write`)."""
    import shutil

    from safetensors.torch import load_file, save_file

    with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    with open(os.path.join(src, "model.safetensors.index.json"), encoding="utf-8") as f:
        index = json.load(f)
    have = int(config["num_hidden_layers"])
    by_file: dict[str, list[str]] = {}
    for name, fname in index["weight_map"].items():
        by_file.setdefault(fname, []).append(name)
    os.makedirs(folder, exist_ok=True)
    weight_map: dict[str, str] = {}
    layer_of = re.compile(r"(?:^|\.)layers\.(\d+)\.")
    for fname, names in sorted(by_file.items()):
        m = layer_of.search(names[0])
        if m is None:  # embeddings, final norm, lm_head
            shutil.copyfile(os.path.join(src, fname), os.path.join(folder, fname))
            weight_map.update(dict.fromkeys(names, fname))
            continue
        k = int(m.group(1))
        tensors = load_file(os.path.join(src, fname))
        for n in range(k, layers, have):
            out = {name.replace(f"layers.{k}.", f"layers.{n}.", 1): t for name, t in tensors.items()}
            target = f"layer{n:05d}.safetensors"
            save_file(out, os.path.join(folder, target), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(out, target))
        del tensors
    index["weight_map"] = weight_map
    with open(os.path.join(folder, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump(index, f)
    config["num_hidden_layers"] = layers
    for key in ("layer_types", "mlp_only_layers"):
        if isinstance(config.get(key), list) and len(config[key]) == have:
            config[key] = [config[key][n % have] for n in range(layers)]
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--from", dest="src", default=None, help="deepen this int4 checkpoint instead of packing")
    args = parser.parse_args()
    if args.src:
        print(deepen(args.src, args.folder, args.layers))
    else:
        print(write(args.folder, args.layers, args.group_size, args.vocab))


if __name__ == "__main__":
    main()
