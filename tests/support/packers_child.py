"""Runs an outside packer on a bf16 checkpoint, in a child process whose sys.path starts with
LAYOUTC_PACKERS_PATH (llm-compressor 0.14.0 with compressed-tensors 0.19.0, auto-round 0.16.1:
tests/conformance/packers-requirements.txt). Not imported by the tests: tests/support/packers.py runs it.

    python tests/support/packers_child.py llmcompressor SRC DST BITS GROUP   # GROUP -1: channelwise
    python tests/support/packers_child.py autoround SRC DST BITS GROUP [LAYER_CONFIG_JSON]

- llmcompressor: `llmcompressor.entrypoints.model_free.model_free_ptq`, the packer's own data-free
  path (round-to-nearest, no calibration set, no model class): it reads the safetensors, quantizes
  every Linear weight the scheme targets and writes compressed-tensors `pack-quantized` with the
  config.json its `oneshot` writes. The scheme is llm-compressor's W4A16 / W8A16 preset with the
  group size (or channel strategy) asked for; attention, routers and embeddings are ignored, as
  published W4A16 MoE checkpoints leave them.
- autoround: `auto_round.AutoRound(..., iters=0, disable_opt_rtn=True)` (its RTN mode, which needs no
  calibration data: this host has no network for its default dataset) and
  `quantize_and_save(format="auto_round")`, its native format. The model is loaded by transformers'
  from_pretrained, as auto-round's own CLI does; no tokenizer is saved (the checkpoint has none).
Writes DST/config.json (auto-round writes into a sub-folder; its files are moved up).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

IGNORE = ["lm_head", "re:.*self_attn.*", "re:.*embed.*", "re:.*mlp\\.gate$", "re:.*shared_expert_gate$"]


def llmcompressor(src: str, dst: str, bits: int, group: int) -> None:
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from llmcompressor.entrypoints.model_free import model_free_ptq

    weights = QuantizationArgs(
        num_bits=bits,
        type="int",
        symmetric=True,
        strategy="channel" if group == -1 else "group",
        group_size=None if group == -1 else group,
    )
    scheme = QuantizationScheme(targets=["Linear"], weights=weights)
    model_free_ptq(src, dst, scheme=scheme, ignore=IGNORE)


def autoround(src: str, dst: str, bits: int, group: int, layer_config: str = "") -> None:
    """`layer_config`: JSON of AutoRound's per-layer overrides ({name or regex: {"bits": 8, ...}}),
    which auto-round writes as quantization_config.extra_config; "" for none."""
    import json

    import torch
    from auto_round import AutoRound
    from transformers import AutoModelForCausalLM

    class NoTokenizer:  # RTN reads no text; the checkpoint has no tokenizer to save
        pass

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    out = Path(dst)
    AutoRound(
        model,
        tokenizer=NoTokenizer(),
        bits=bits,
        group_size=group,
        sym=True,
        iters=0,
        disable_opt_rtn=True,
        device_map="cpu",
        **({"layer_config": json.loads(layer_config)} if layer_config else {}),
    ).quantize_and_save(str(out / "_ar"), format="auto_round")
    (written,) = [p.parent for p in (out / "_ar").rglob("config.json")]
    for f in written.iterdir():
        shutil.move(str(f), out / f.name)
    shutil.rmtree(out / "_ar")


if __name__ == "__main__":
    tool, src, dst, bits, group = sys.argv[1:6]
    extra = sys.argv[6:7]  # autoround only: its layer_config as JSON
    {"llmcompressor": llmcompressor, "autoround": autoround}[tool](src, dst, int(bits), int(group), *extra)
