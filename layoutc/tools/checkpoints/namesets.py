"""A family's second set of expert tensor names, read where the checkpoint stores that set.

Mixtral's release names each expert's projections `block_sparse_moe.experts.N.w1` (gate),
`w3` (up) and `w2` (down) (transformers 5.19 conversion_mapping.py 'mixtral'). llm-compressor
writes compressed-tensors Mixtral checkpoints in its linearized form,
`block_sparse_moe.experts.N.gate_proj` / `up_proj` / `down_proj`, and vLLM 0.32 reads both:
models/mixtral.py MixtralModel.hf_to_vllm_mapper maps ".gate_proj." -> ".w1.", ".up_proj." ->
".w3.", ".down_proj." -> ".w2." before the FusedMoE loader (ckpt_names ("w1", "w2", "w3")).

`for_checkpoint` picks the set the checkpoint holds: the family's declared format when its
names are there, else the alternate set when those are (and the declared are not); anything
else keeps the declared format, whose absent tensor is then LR112 as before. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from layoutc.tools.checkpoints.checkpoint_format import CheckpointFormat

#: model_type -> (the alternate per-expert names, as CheckpointFormat's gate / up / down; the source)
ALTERNATES: dict[str, tuple[dict[str, str], str]] = {
    "mixtral": ({"gate": "{e}.gate_proj.weight", "up": "{e}.up_proj.weight", "down": "{e}.down_proj.weight"},
                "vLLM 0.32 models/mixtral.py MixtralModel.hf_to_vllm_mapper (.gate_proj. -> .w1., .up_proj. -> "
                ".w3., .down_proj. -> .w2.); llm-compressor's linearized Mixtral experts"),
}


def _modules(names: Iterable[str]) -> set[str]:
    """Each tensor's module: its name without the last part (`.weight`, `.weight_packed`, `.qweight` ...)."""
    return {n.rsplit(".", 1)[0] for n in names}


def _holds(fmt: CheckpointFormat, layers: int, modules: set[str]) -> bool:
    """Whether some layer's expert 0 gate projection module of `fmt` is among `modules`."""
    return any(fmt.names(layer, 0)["gate"].rsplit(".", 1)[0] in modules for layer in range(layers))


def for_checkpoint(config: Mapping[str, Any], fmt: CheckpointFormat | None,
                   names: Iterable[str]) -> CheckpointFormat | None:
    """The format whose expert names the checkpoint (tensor `names`) stores (module docstring).

    config: config.json (model_type, num_hidden_layers); fmt: the declared format (None: the
    built-in one of config's model_type, else None is returned). Returns `fmt` (or the built-in
    one) unchanged (always for a fused or a non-gated format: ALTERNATES name a gate), or it with ALTERNATES' names and its `source` extended to say so.
    """
    from layoutc.tools.checkpoints.formats import FORMATS

    model_type = str(config.get("model_type"))
    base = fmt if fmt is not None else FORMATS.get(model_type)
    alt = ALTERNATES.get(model_type)
    # a non-gated format (no gate to name) gets no alternate set: run refuses it by name (LR148)
    if base is None or alt is None or base.fused or not base.gated or base.model_type != model_type:
        return fmt
    layers = config.get("num_hidden_layers")
    layers = layers if isinstance(layers, int) and not isinstance(layers, bool) and 0 < layers <= 100_000 else 0
    modules = _modules(names)
    gate, up, down = alt[0]["gate"], alt[0]["up"], alt[0]["down"]
    other = replace(base, gate=gate, up=up, down=down, source=f"{base.source}; expert names {gate} / {up} / {down}: {alt[1]}")
    if _holds(base, layers, modules) or not _holds(other, layers, modules):
        return fmt
    return other
