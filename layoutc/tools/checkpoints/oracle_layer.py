"""transformers' own modules of one MoE layer, found in a built model: `OracleLayer` and
`moe_modules`, shared by the reference built all at once (`reference.loaded_oracle`) and the
one built a layer at a time (`stream.StreamingOracle`), which both import it from here.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

#: Child names of a sparse-MoE block's router in transformers 5.19 (`gate`: Qwen, Mixtral,
#: DeepSeek; `router`: gpt-oss, Llama-4).
ROUTER_CHILDREN = ("gate", "router")
#: Names of the decoder-layer list in a model's module path (`model.layers.N`; DBRX's
#: `transformer.blocks.N`).
DECODER_STACKS = ("layers", "blocks")


@dataclass
class OracleLayer:
    """transformers' own modules of one MoE layer, as `from_pretrained` loaded them (float32, eval).

    module: the sparse-MoE block (router + experts child, e.g. Llama4TextMoe), or, where
    the family has none (`block` False), the experts module itself.
    experts: the experts child (e.g. Llama4TextExperts). path: `module`'s name in the model.
    routes_experts: the experts forward takes (hidden, top_k_index, top_k_weights), so the
    block's own routing can be captured from its call.
    """

    layer: int
    module: torch.nn.Module
    experts: torch.nn.Module
    path: str
    block: bool
    routes_experts: bool


def routing_params(experts: torch.nn.Module) -> list[str]:
    """Names of the experts forward's positional parameters (self excluded), [] when unreadable."""
    try:
        sig = inspect.signature(experts.forward)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.kind in kinds]


def moe_modules(model: torch.nn.Module, layers: list[int]) -> dict[int, OracleLayer]:
    """Per decoder layer in `layers`, transformers' sparse-MoE block of a loaded model.

    A layer's experts module is its first submodule whose class name ends in "Experts"
    (transformers 5.19: Qwen3MoeExperts, Llama4TextExperts, ...). Its parent is the block
    when it lies below the decoder layer (`...layers.N.<block>.experts`, or `blocks.N`) and has a router
    child (`ROUTER_CHILDREN`); a parent that is the decoder layer itself (Gemma-4) is not a
    block, and the experts module alone is kept. Layers without an experts module are absent.
    """
    named = dict(model.named_modules())
    found: dict[int, OracleLayer] = {}
    for name, module in named.items():
        parts = name.split(".")
        stacks = [j for j, p in enumerate(parts[:-1]) if p in DECODER_STACKS and parts[j + 1].isdigit()]
        if not type(module).__name__.endswith("Experts") or not stacks:
            continue
        i = stacks[0]
        layer = int(parts[i + 1])
        if layer not in layers or layer in found:
            continue
        parent_path = ".".join(parts[:-1])
        parent = named[parent_path]
        children = dict(parent.named_children())
        is_block = len(parts) - 1 > i + 2 and any(c in children for c in ROUTER_CHILDREN)
        routes = len(routing_params(module)) >= 3
        found[layer] = OracleLayer(
            layer,
            parent.eval() if is_block else module.eval(),
            module.eval(),
            parent_path if is_block else name,
            is_block,
            routes,
        )
    return found


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]
