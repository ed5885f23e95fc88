"""References for one MoE layer read from a checkpoint.

The reference is transformers' own sparse-MoE block whenever transformers has one
(`transformers_oracle`: the model that `from_pretrained` loads back from the folder,
through transformers' own weight conversion, so it shares no code with layoutc's
formats, loaders or kernels). The block is the module whose child is the experts
module and which has a router child (`gate` or `router`): Qwen3MoeSparseMoeBlock,
Qwen2MoeSparseMoeBlock, MixtralSparseMoeBlock, GptOssMLP, DeepseekV3MoE, Llama4TextMoe.
Its *routed* output is `block(x) - block(x)` with the experts module's output replaced
by zeros (a forward hook on the experts child), which removes a shared expert (Qwen2-MoE's
gated one, DeepSeek's, Llama-4's) whatever the family. Where the experts module's forward
takes (hidden, top_k_index, top_k_weights), the ids and weights the block's own router
gave it are captured (a forward pre-hook) and are what the kernel gets; where it does not
(Llama-4's bmm experts take the already weighted input), the kernel gets the family's
declared routing (`route`), which the comparison with the block then checks, together
with where the weight is applied (`CheckpointFormat.router_weight`).

A family without a block (Gemma-4: router and experts sit in the decoder layer) is
compared with its experts module as `from_pretrained` loaded it, under the declared
routing given to both sides (the router is then not checked).

Without such a model (transformers absent, a model_type it does not know, or
`--no-transformers` / `--no-from-pretrained`), the references are built from the declared
format, so they cannot catch a wrong declaration: transformers' experts module filled
through it (`transformers_experts`) or a float32 loop (`loop_reference`). `reference`
marks them `independent=False`, and `layoutc run` does not call such a row "ok".

Everything here runs in float32 on the full (unsharded, unpadded) layer.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from layoutc.runtime.algebra import Word
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.checkpoints.oracle_layer import (
    ROUTER_CHILDREN,
    OracleLayer,
    moe_modules,
)
from layoutc.tools.checkpoints.oracle_layer import first_line as _first_line
from layoutc.tools.checkpoints.oracle_layer import routing_params as _routing_params
from layoutc.tools.checkpoints.reach import InputReach, ReachMeter
from layoutc.tools.checkpoints.reader import Checkpoint


def route(ckpt: Checkpoint, moe: MoEModelConfig, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The family's declared routing (`CheckpointFormat.routing`) from the router weight of `layer`.

    x: [T, H] hidden states (any float dtype; computed in float32).
    Returns (topk_weights float32 [T, top_k], topk_ids int32 [T, top_k]). Raises FormatError
    LR112 when the checkpoint lacks the router tensor.
    """
    wname, bname = moe.format.router_names(layer)
    w = ckpt.tensor(wname).to(torch.float32)
    logits = x.to(torch.float32) @ w.T
    if bname is not None:
        logits = logits + ckpt.tensor(bname).to(torch.float32)
    k = moe.num_experts_per_tok
    if moe.format.routing == "topk_softmax":
        vals, ids = torch.topk(logits, k, dim=-1)
        weights = torch.softmax(vals, dim=-1)
    elif moe.format.routing == "sigmoid_topk":
        vals, ids = torch.topk(logits, k, dim=-1)
        weights = torch.sigmoid(vals)
    else:
        probs = torch.softmax(logits, dim=-1)
        weights, ids = torch.topk(probs, k, dim=-1)
        if moe.norm_topk_prob:
            weights = weights / weights.sum(-1, keepdim=True)
    return weights.contiguous(), ids.to(torch.int32).contiguous()


def _full_w13_w2(ckpt: Checkpoint, moe: MoEModelConfig, layer: int) -> dict[str, torch.Tensor]:
    """transformers' in-memory layout: gate_up_proj [E, 2I, H] ([gate | up]) and down_proj [E, H, I],
    or for transposed formats [E, H, 2I] / [E, I, H]; a non-gated format's up_proj [E, I, H] in place of
    gate_up_proj (NemotronHExperts); float32."""
    fmt = moe.format
    if fmt.fused:
        n = fmt.names(layer)

        def whole(role: str) -> torch.Tensor:
            return ckpt.experts_slice(n[role], moe.num_experts, fmt.experts_flattened)[:].to(torch.float32)

        if not fmt.gated:  # NemotronHExperts' up_proj [E, I, H], down_proj [E, H, I]
            return {"up_proj": whole("up"), "down_proj": whole("down")}
        # separate fused gate and up (DBRX's w1, v1): stacked [gate | up] along the out axis
        gate_up = whole("gate_up") if "gate_up" in n else torch.cat([whole("gate"), whole("up")],
                                                                    dim=2 if fmt.transposed else 1)
        out = {"gate_up_proj": gate_up, "down_proj": whole("down")}
        if fmt.gate_up_bias is not None:
            out["gate_up_proj_bias"] = ckpt.tensor(n["gate_up_bias"]).to(torch.float32)
            out["down_proj_bias"] = ckpt.tensor(n["down_bias"]).to(torch.float32)
        return out
    gates, ups, downs = [], [], []
    for e in range(moe.num_experts):
        n = fmt.names(layer, e)
        if fmt.gated:
            gates.append(ckpt.tensor(n["gate"]).to(torch.float32))
        ups.append(ckpt.tensor(n["up"]).to(torch.float32))
        downs.append(ckpt.tensor(n["down"]).to(torch.float32))
    if not fmt.gated:
        return {"up_proj": torch.stack(ups), "down_proj": torch.stack(downs)}
    return {"gate_up_proj": torch.cat([torch.stack(gates), torch.stack(ups)], dim=1),
            "down_proj": torch.stack(downs)}


def input_reach(x: torch.Tensor, gate_up: torch.Tensor, transposed: bool, cfg: Any = None,
                layer: int = 0) -> InputReach:
    """The scale that brings x's median |gate/up pre-activation| over every expert to the target:
    max(reach.REACH, reach.CLAMP_MARGIN * the largest clamp limit `cfg` states for `layer`) (at least 1).
    x: [T, H]; gate_up: float [E, 2I, H] (or [E, H, 2I] where `transposed`); cfg: the MoE
    settings' dict (`MoEModelConfig.text_config`; None: no clamp). The scale only chooses inputs; it is
    never part of a verdict. A layer on disk is measured without a float copy by reach.layer_reach."""
    meter = ReachMeter(x)
    meter.add_experts("gate_up", gate_up, gate_up.shape[0], transposed)
    return meter.reach(cfg, layer)


def reach_scale(x: torch.Tensor, gate_up: torch.Tensor, transposed: bool) -> float:
    """`input_reach(...).scale` with no clamp stated (the median to reach.REACH)."""
    return input_reach(x, gate_up, transposed).scale


def transformers_experts(ckpt: Checkpoint, moe: MoEModelConfig, layer: int) -> torch.nn.Module | None:
    """transformers' experts module of this family (`CheckpointFormat.experts_class`, e.g.
    transformers/models/qwen3_moe/modeling_qwen3_moe.py Qwen3MoeExperts) with the layer's
    weights read *through the declared format* (float32): not independent of the declaration.

    None when transformers is absent, does not know the model_type, or the format names no
    experts class. Raises FormatError LR103 when the class is not in transformers, is no torch
    module class, cannot be built from the config, or a parameter's shape differs from the
    checkpoint's (a --format-file's experts_class of another family; this was LR199).
    """
    if moe.format.experts_class is None:
        return None
    try:
        import transformers
    except ImportError:
        return None
    from layoutc.tools.checkpoints.formats import FormatError

    named = f"the format's experts_class {moe.format.experts_class!r}"
    modname, _, cls_name = moe.format.experts_class.partition(":")
    try:  # a --format-file names it: a module or class transformers lacks was LR199
        cls = getattr(importlib.import_module(f"transformers.models.{modname}"), cls_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise FormatError("LR103", f"{named} is not in transformers {transformers.__version__} ({exc})") from None
    if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module)):
        raise FormatError("LR103", f"{named} is no torch module class of transformers")
    try:
        config = transformers.AutoConfig.from_pretrained(ckpt.folder)
    except (ValueError, KeyError, OSError):  # a model_type transformers does not know
        return None
    if moe.format.text_config:
        config = config.get_text_config()
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"
    try:
        module = cls(config).to(torch.float32)
    except Exception as exc:  # another family's class, or no experts module at all
        raise FormatError("LR103", f"{named} cannot be built from this config.json "
                          f"({type(exc).__name__}: {str(exc)[:200]})") from None
    params = _full_w13_w2(ckpt, moe, layer)
    with torch.no_grad():
        for name, value in params.items():
            target = getattr(module, name, None)
            if not isinstance(target, torch.Tensor):
                raise FormatError("LR103", f"{named} has no parameter {name}")
            if tuple(target.shape) != tuple(value.shape):
                raise FormatError("LR103", f"{named}: {cls_name}.{name} has shape {tuple(target.shape)}, the "
                                  f"checkpoint {tuple(value.shape)} (another family's module?)")
            target.copy_(value)
    out: torch.nn.Module = module.eval()
    return out


def transformers_forward(module: torch.nn.Module, x: torch.Tensor, weights: torch.Tensor,
                         ids: torch.Tensor) -> torch.Tensor:
    """Call a transformers experts module the way its block does: `module(x, ids, weights)`.

    x: [T, H]; weights: [T, top_k]; ids: [T, top_k]. Runs in float32 without grad and
    returns its float32 [T, H] output (each expert's output weighted, as the module does).
    """
    with torch.no_grad():
        out = module(x.to(torch.float32), ids.to(torch.int64), weights.to(torch.float32))
    return out.to(torch.float32)  # type: ignore[no-any-return]


def _input_weighted(experts: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                    x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """sum_k experts(w_k * x, ids[:, k], 1): the weight on each expert's input (router_weight "input")."""
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32)
    ones = torch.ones(x.shape[0], 1, dtype=torch.float32)
    for k in range(ids.shape[1]):
        out += experts(x.to(torch.float32) * weights[:, k:k + 1].to(torch.float32), ids[:, k:k + 1], ones)
    return out


def _act_alone(h: torch.Tensor, moe: MoEModelConfig) -> torch.Tensor:
    """A non-gated expert's activation of up(x) (transformers ACT2FN: relu2 is
    ReLUSquaredActivation, relu(x)^2)."""
    if moe.activation == "relu2":
        return torch.square(F.relu(h))
    if moe.activation == "silu_no_mul":
        return F.silu(h)
    if moe.activation == "gelu_no_mul":
        return F.gelu(h)
    raise ValueError(f"no non-gated activation {moe.activation!r}")


def _act(gate: torch.Tensor, up: torch.Tensor, moe: MoEModelConfig) -> torch.Tensor:
    if moe.activation == "silu":
        return F.silu(gate) * up
    if moe.activation == "gelu":
        return F.gelu(gate) * up
    if moe.activation == "gelu_tanh":
        return F.gelu(gate, approximate="tanh") * up
    alpha, limit = moe.swiglu_alpha or 1.702, moe.swiglu_limit or 7.0
    g = gate.clamp(max=limit)
    return (up.clamp(-limit, limit) + 1) * g * torch.sigmoid(alpha * g)


def loop_reference(ckpt: Checkpoint, moe: MoEModelConfig, layer: int, x: torch.Tensor, weights: torch.Tensor,
                   ids: torch.Tensor) -> torch.Tensor:
    """A float32 per-expert loop over the layer's weights read through the *declared* format
    (no transformers, no layoutc runtime), weighting where the format's `router_weight` says.

    x: [T, H]; weights: float [T, top_k]; ids: integer [T, top_k]. Returns float32 [T, H].
    Not independent of the declaration: it shares the format with the kernel's loaders.
    Raises FormatError LR112 when a tensor the format names is absent.
    """
    p = _full_w13_w2(ckpt, moe, layer)
    fmt = moe.format
    on_input = fmt.router_weight == "input"
    xf = x.to(torch.float32)
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32)
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        scale = weights[tok, slot, None].to(torch.float32)
        xin = xf[tok] * scale if on_input else xf[tok]
        w13 = p["gate_up_proj"][e] if fmt.gated else p["up_proj"][e]
        h = xin @ w13 if fmt.transposed else xin @ w13.T
        if "gate_up_proj_bias" in p:
            h = h + p["gate_up_proj_bias"][e]
        if not fmt.gated:
            a = _act_alone(h, moe)
        else:
            gate, up = (h[:, 0::2], h[:, 1::2]) if fmt.gate_up_layout == Word.INTERLEAVE else h.chunk(2, dim=-1)
            a = _act(gate, up, moe)
        w2 = p["down_proj"][e]
        y = a @ w2 if fmt.down_transposed else a @ w2.T
        if "down_proj_bias" in p:
            y = y + p["down_proj_bias"][e]
        out.index_add_(0, tok, y if on_input else y * scale)
    return out


# ---- transformers' own model: the sparse-MoE block of each layer --------------------------------


class OracleLike(Protocol):
    """What `reference` reads of an oracle: `Oracle` (every layer built at once) or
    `layoutc.tools.checkpoints.stream.StreamingOracle` (one layer at a time)."""

    @property
    def layers(self) -> Any: ...  # .get(n) -> OracleLayer | None

    def why(self, layer: int) -> str: ...


@dataclass
class Oracle:
    """`transformers_oracle`'s result: the layers found, and why any asked for is missing ("" if none)."""

    layers: dict[int, OracleLayer] = field(default_factory=dict)
    missing: str = ""

    def why(self, layer: int) -> str:
        """Why `layer` has no module ("" when it has one)."""
        return "" if layer in self.layers else self.missing

    def release(self) -> None:
        """Nothing to free: every layer was loaded at once (`StreamingOracle.release` frees one)."""


def transformers_oracle(folder: str, layers: list[int], **load: Any) -> Any:
    """transformers' own sparse-MoE blocks (or experts modules) of `layers`, independent of the
    declared formats.

    Without `load` options: a `stream.StreamingOracle`, which builds one layer's module at a
    time on a meta-device skeleton of the whole model and loads it through transformers' own
    key renaming and weight conversion (peak: one layer's module in float32, whatever the
    number of layers or the vocabulary). With `load` options (e.g. the MXFP4 path's
    `quantization_config=Mxfp4Config(dequantize=True)`, which needs transformers' quantizer):
    `AutoModelForCausalLM.from_pretrained(folder, dtype=float32, **load)` of the first
    max(layers) + 1 decoder layers, cast to float32 (`loaded_oracle`).

    `why(layer)` says why a layer has none: transformers absent, a model_type it does not know,
    a load failure, or no experts module in the layer. Never raises for those.
    """
    try:
        import transformers  # noqa: F401
    except ImportError:
        return Oracle(missing="transformers is not installed")
    if not load:
        from layoutc.tools.checkpoints.stream import StreamingOracle

        return StreamingOracle(folder)
    return loaded_oracle(folder, layers, **load)


def loaded_oracle(folder: str, layers: list[int], **load: Any) -> Oracle:
    """Every layer of `layers` at once: `AutoModelForCausalLM.from_pretrained(folder, dtype=float32,
    **load)` through transformers' weight conversion (then cast to float32: a model transformers
    dequantizes to bfloat16, e.g. `quantization_config=Mxfp4Config(dequantize=True)`).

    Only the first max(layers) + 1 decoder layers are built. `Oracle.missing` says why a
    layer has none: transformers absent, a model_type it does not know, a load failure, or
    no experts module in the layer. Never raises for those.
    """
    try:
        import transformers
    except ImportError:
        return Oracle(missing="transformers is not installed")
    # quiet while reading and loading: the config's warnings, the "Loading weights" bar, and
    # the load report, which lists the weights of the layers past `keep` as UNEXPECTED (they
    # are: only `keep` layers are built); the run's own lines say what was compared
    log = transformers.utils.logging
    bar, verbosity = log.is_progress_bar_enabled(), log.get_verbosity()
    log.disable_progress_bar()  # type: ignore[no-untyped-call]
    log.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        return _load_oracle(transformers, folder, layers, load)
    finally:
        log.set_verbosity(verbosity)
        if bar:
            log.enable_progress_bar()  # type: ignore[no-untyped-call]


def _load_oracle(transformers: Any, folder: str, layers: list[int], load: dict[str, Any]) -> Oracle:
    try:
        config = transformers.AutoConfig.from_pretrained(folder)
    except (ValueError, KeyError, OSError) as exc:
        return Oracle(missing=f"transformers {transformers.__version__} cannot read this config.json "
                      f"({_first_line(exc)})")
    text = config.get_text_config()
    keep = max(layers) + 1
    if getattr(text, "num_hidden_layers", keep) > keep:
        text.num_hidden_layers = keep
        if isinstance(getattr(text, "layer_types", None), list):
            text.layer_types = text.layer_types[:keep]
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, config=config, dtype=torch.float32, **load)
        model = model.to(torch.float32)
    except (ValueError, KeyError, OSError, TypeError, RuntimeError, ImportError, AttributeError) as exc:
        return Oracle(missing=f"transformers could not load the model ({_first_line(exc)})")
    found = moe_modules(model, layers)
    absent = [n for n in layers if n not in found]
    missing = (f"transformers' {type(model).__name__} has no experts module in layer(s) "
               f"{', '.join(map(str, absent))}") if absent else ""
    return Oracle(found, missing)


def _first(out: object) -> torch.Tensor:
    """A block's output: a tensor, or a tuple whose first item is the output (GptOssMLP, Llama4TextMoe)."""
    value = out[0] if isinstance(out, tuple) else out
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"a sparse-MoE block returned {type(value).__name__}, not a tensor")
    return value


def _zeros(module: torch.nn.Module, args: object, output: object) -> object:
    if isinstance(output, tuple):
        return tuple(torch.zeros_like(o) if isinstance(o, torch.Tensor) else o for o in output)
    return torch.zeros_like(output) if isinstance(output, torch.Tensor) else output


def _doubled(module: torch.nn.Module, args: object, output: object) -> object:
    if isinstance(output, tuple):
        return tuple(o * 2 if isinstance(o, torch.Tensor) else o for o in output)
    return output * 2 if isinstance(output, torch.Tensor) else output


def takes_token_ids(block: torch.nn.Module) -> bool:
    """The block's forward takes `input_ids` (DeepseekV4SparseMoeBlock: a hash-routed layer looks
    its experts up by token id, `DeepseekV4HashRouter.tid2eid[input_ids]`)."""
    try:
        return "input_ids" in inspect.signature(block.forward).parameters
    except (TypeError, ValueError):
        return False


def _norm_children(block: torch.nn.Module) -> str:
    found = [f"{n} ({type(c).__name__})" for n, c in block.named_children() if "Norm" in type(c).__name__]
    return ", ".join(found)


def block_routed(entry: OracleLayer, x: torch.Tensor, token_ids: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """The routed part of transformers' block on `x`, and the routing its own router chose.

    x: [T, H] (any float dtype; the block runs in float32 on [1, T, H]). token_ids: int64 [T],
    passed as `input_ids` to a block whose forward takes them (hash routing). The routed output
    is `block(x) - block(x) with the experts child's output replaced by zeros` (a forward
    hook), so any shared expert drops out exactly. That holds only where the block adds what
    it makes of the experts' output to the rest: a third forward with the experts' output
    doubled must move the block's output twice as far. Returns (float32 [T, H], (topk_weights
    float32 [T, top_k], topk_ids int32 [T, top_k]) as the block passed them to its experts,
    or None when the experts forward takes no routing (Llama4TextExperts)).
    Raises TypeError when the block's output is not a tensor (or a tuple starting with one);
    FormatError LR146 when the doubled forward is not twice as far (a norm after the MoE, AXK1MoE).
    """
    from layoutc.tools.checkpoints.errors import FormatError

    hidden = x.shape[-1]
    xf = x.to(torch.float32).reshape(1, -1, hidden)
    kwargs: dict[str, Any] = {}
    if token_ids is not None and takes_token_ids(entry.module):
        kwargs["input_ids"] = token_ids.reshape(1, -1)
    captured: list[tuple[torch.Tensor, torch.Tensor]] = []
    names = _routing_params(entry.experts)

    def grab(module: torch.nn.Module, args: tuple[object, ...], kw: dict[str, object]) -> None:
        bound = dict(zip(names, args, strict=False))
        bound.update(kw)
        if len(names) >= 3:
            ids, weights = bound.get(names[1]), bound.get(names[2])
            if isinstance(ids, torch.Tensor) and isinstance(weights, torch.Tensor):
                captured.append((weights.detach().clone(), ids.detach().clone()))

    def hooked(hook: Callable[..., object]) -> torch.Tensor:
        handle = entry.experts.register_forward_hook(hook)
        try:
            return _first(entry.module(xf, **kwargs)).to(torch.float32)
        finally:
            handle.remove()

    with torch.no_grad():
        handle = entry.experts.register_forward_pre_hook(grab, with_kwargs=True)
        try:
            full = _first(entry.module(xf, **kwargs)).to(torch.float32)
        finally:
            handle.remove()
        rest = hooked(_zeros)
        twice = hooked(_doubled)
    routed = (full - rest).reshape(-1, hidden)
    moved = torch.linalg.vector_norm(twice - rest)
    expected = 2 * torch.linalg.vector_norm(full - rest)
    if float(expected) > 0 and float(torch.linalg.vector_norm((twice - rest) - 2 * (full - rest))) > 1e-4 * float(expected):
        block = type(entry.module).__name__
        norms = _norm_children(entry.module)
        raise FormatError("LR146", f"transformers' {block} ({_generic(entry)}) does not add its experts' output to "
                          f"the rest of its output (doubling the experts' output moves the block's output "
                          f"x{2 * float(moved) / float(expected):.3g}, not x2)"
                          + (f": a norm after the MoE ({norms}) mixes routed and shared output" if norms else "")
                          + ", so the routed experts' part of its output cannot be isolated and no kernel output can "
                          "be compared with the block; layoutc run cannot check this family")
    if not entry.routes_experts or len(captured) != 1:
        return routed, None
    weights, ids = captured[0]
    return routed, (weights.to(torch.float32).contiguous(), ids.to(torch.int32).contiguous())


def token_ids(moe: MoEModelConfig, layer: int, tokens: int) -> torch.Tensor | None:
    """Seeded token ids [tokens] (int64) in config.json's vocabulary for a block that routes on them
    (hash routing); None when the config states no vocab_size."""
    vocab = moe.text_config.get("vocab_size") if isinstance(moe.text_config, dict) else None
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        return None
    gen = torch.Generator().manual_seed(1_000_003 + layer)
    return torch.randint(0, vocab, (tokens,), generator=gen)


# ---- the reference of one layer --------------------------------------------------------------


@dataclass
class Reference:
    """What one MoE layer is compared with, and the routing the kernel must be given.

    output: float32 [T, H]. weights / ids: float32 / int32 [T, top_k], the routing the
    kernel gets (the block's own, or the declared one). name: the reference in words;
    routing: where the routing came from. independent: built by transformers'
    from_pretrained (a wrong declared format is caught); False for a reference built from
    the declared format, with `why_not` saying why there was no independent one.
    """

    output: torch.Tensor
    weights: torch.Tensor
    ids: torch.Tensor
    name: str
    routing: str
    independent: bool
    why_not: str = ""


def _generic(entry: OracleLayer) -> str:
    """The module path with its layer index as N ("model.layers.N.mlp"), the same for every layer."""
    return entry.path.replace(f"layers.{entry.layer}.", "layers.N.", 1)


def _declared_routing(moe: MoEModelConfig) -> str:
    return (f"declared {moe.format.routing} (route(), the checkpoint's router weight), weight on the "
            f"experts' {moe.format.router_weight}")


def reference(ckpt: Checkpoint, moe: MoEModelConfig, layer: int, x: torch.Tensor, *, use_transformers: bool = True,
              oracle: OracleLike | None = None, why_no_oracle: str = "") -> Reference:
    """The reference of `layer` on hidden states x [T, H] (any float dtype), float32.

    With `oracle` (from `transformers_oracle`) holding the layer's block: the block's routed
    output (`block_routed`), with the block's captured routing or, for an experts module
    that takes none (Llama-4), the declared routing, which the comparison then checks.
    With only an experts module (Gemma-4): that module under the declared routing. Else,
    not independent: transformers' experts module filled through the declared format
    (`use_transformers`), or the float32 loop; `why_no_oracle` (or the oracle's `missing`)
    says why. Raises FormatError LR112 for a tensor the format names that is absent.
    """
    entry = oracle.layers.get(layer) if oracle is not None else None
    if entry is not None and entry.block:
        hashed = takes_token_ids(entry.module)
        routed, captured = block_routed(entry, x, token_ids(moe, layer, x.shape[0]) if hashed else None)
        block = type(entry.module).__name__
        name = (f"transformers {block} (from_pretrained, {_generic(entry)}): its routed output, block(x) minus "
                "block(x) with its experts' output zeroed")
        if captured is not None:
            weights, ids = captured
            router = next(type(c).__name__ for n, c in entry.module.named_children() if n in ROUTER_CHILDREN)
            routing = f"the block's own router ({router}), captured from its call to {type(entry.experts).__name__}"
            if hashed:
                routing += " (the block takes input_ids: seeded token ids, for a router that looks experts up by id)"
        else:
            weights, ids = route(ckpt, moe, layer, x)
            why = "takes no routing" if not entry.routes_experts else "was not called once with a routing"
            routing = (_declared_routing(moe) + f"; {type(entry.experts).__name__} {why}, so the "
                       f"block's own router and weighting check it")
        return Reference(routed, weights, ids, name, routing, True)
    weights, ids = route(ckpt, moe, layer, x)
    if entry is not None and entry.routes_experts:
        out = transformers_forward(entry.experts, x, weights, ids)
        name = (f"transformers {type(entry.experts).__name__} (from_pretrained, {_generic(entry)}; no sparse-MoE "
                f"block in transformers for {moe.format.model_type}: router and experts sit in the decoder layer)")
        routing = _declared_routing(moe) + ", given to both sides: transformers' router is not checked"
        return Reference(out, weights, ids, name, routing, True)
    if entry is not None:
        why = (f"transformers' {type(entry.experts).__name__} in layer {layer} is in no sparse-MoE block and "
               "takes no routing")
    else:
        why = why_no_oracle or (oracle.why(layer) if oracle is not None else "") or \
            f"no transformers block for model_type {moe.format.model_type!r}"
    module = transformers_experts(ckpt, moe, layer) if use_transformers else None
    if module is not None:
        if moe.format.router_weight == "input":
            out = _input_weighted(lambda a, i, w: transformers_forward(module, a, w, i), x, weights, ids)
        else:
            out = transformers_forward(module, x, weights, ids)
        name = f"transformers {type(module).__name__} filled through the declared format"
    else:
        out = loop_reference(ckpt, moe, layer, x, weights, ids)
        name = "a float32 loop built from the declared format"
    return Reference(out, weights, ids, name, _declared_routing(moe) + " (given to both sides)", False, why)
