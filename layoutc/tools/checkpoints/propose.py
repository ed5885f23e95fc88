"""Propose a checkpoint format for a model_type no built-in format declares, from the
safetensors headers and config.json alone (issue 24 item 3).

The experts are found by their names and shapes: per-expert tensors
`<prefix><layer>.<path>experts.<e>.<proj>.weight` with projections named gate_proj /
up_proj / down_proj (Qwen, OLMoE, GLM, ...) or w1 / w3 / w2 (Mixtral, MiniMax), or two
fused 3-D tensors of a layer whose first axis is the number of experts (one holding
2I rows or columns: gate and up; one holding H and I: down). The orientation comes from
the shapes; or three fused 3-D tensors, separate gate, up and down (step3p7's
`moe.gate_proj/up_proj/down_proj.weight`). The config keys are the ones whose values equal the measured sizes (tried in
the family table's generic entry, formats.GENERIC, which audit reads too); the MoE layers are "where the tensors
are". What shapes cannot tell (gate/up order, halves or interleaved rows, and the
orientation when the hidden size equals the intermediate size or twice it) is listed as
candidates (`undecided` names it), which `layoutc run` proves against transformers' own sparse-MoE block of the
first MoE layer before it runs anything (layoutc.tools.run). Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from layoutc.runtime.algebra import Word
from layoutc.tools.checkpoints.families import pattern_length
from layoutc.tools.checkpoints.formats import GENERIC, CheckpointFormat

# the family table's generic entry: its config keys (audit's too), moe_topk / moe_k among the top-k
HIDDEN_ACT_ALIASES = GENERIC.activation
HIDDEN_SIZE_ALIASES = GENERIC.hidden_size
INTERMEDIATE_SIZE_ALIASES = GENERIC.intermediate_size
NUM_EXPERTS_ALIASES = GENERIC.num_experts
TOP_K_ALIASES = GENERIC.top_k
NUM_HIDDEN_LAYERS_ALIASES = GENERIC.num_hidden_layers
_PER_EXPERT = re.compile(r"^(?P<pre>.*?\.)(?P<layer>\d+)\.(?P<path>(?:\w+\.)*?)experts\.(?P<e>\d+)\."
                         r"(?P<proj>\w+)\.weight$")
_ROLES = ({"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}, {"gate": "w1", "up": "w3", "down": "w2"})
_LAYER = re.compile(r"^(?P<pre>.*?\.)(?P<layer>\d+)\.(?P<rest>.+)$")
#: a router with rows past the routed experts: the format field and the config keys that count them
#: (LongcatFlashTopkRouter: zero_expert_num identity experts; InklingTopkRouter: n_shared_experts)
_EXTRA_ROWS = (("identity_experts", ("zero_expert_num",)),
               ("router_extra_rows", ("n_shared_experts", "num_shared_experts")))
#: config keys of per-layer MoE types, where "hash_moe" marks a layer routed by token id (DeepSeek-V4)
_HASH_TYPES = ("mlp_layer_types",)


def _block_fields(config: dict[str, Any], here: dict[str, tuple[int, ...]], e: int, h: int,
                  routers: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Router candidates and the block fields the tensors and config.json state: a router of
    E + n rows when a config key counts n identity or shared-expert rows (_EXTRA_ROWS), and
    hash routing when a per-layer type list holds "hash_moe"."""
    fields: dict[str, Any] = {}
    for scope, prefix in ((config, ""), (config.get("text_config"), "text_config.")):
        for key in _HASH_TYPES:
            types = scope.get(key) if isinstance(scope, dict) else None
            if isinstance(types, list) and "hash_moe" in types and "hash_routing" not in fields:
                fields["hash_routing"] = prefix + key
    if routers:
        return routers, fields
    for name, shape in sorted(here.items()):
        if len(shape) != 2 or shape[1] != h or shape[0] <= e or "experts." in name or not name.endswith("weight"):
            continue
        for field, keys in _EXTRA_ROWS:
            found = _key(config, keys, shape[0] - e)
            if found is not None:
                fields[field] = (found,)
                return [name], fields
    return routers, fields


def undecided(candidates: list[CheckpointFormat]) -> list[str]:
    """What the candidates of one proposal differ in, in words: the facts the shapes left open.

    "orientation of ..." appears when the hidden size equals the intermediate size (or twice
    it, for a fused gate/up tensor), so `[out, in]` and `[in, out]` have the same shape: only
    a check against transformers' module can then decide, and without one the proposal is
    AMBIGUOUS (`layoutc run` refuses it, LR118, rather than guess)."""
    facts = (("gate/up order", lambda c: (c.gate, c.up)), ("gate_up rows (halves or interleave)",
             lambda c: c.gate_up_layout), ("orientation of gate/up ([out, in] or [in, out]: hidden_size "
             "equals the intermediate size, or twice it)", lambda c: c.transposed),
             ("orientation of down ([out, in] or [in, out]: hidden_size equals the intermediate size)",
              lambda c: c.down_transposed))
    return [what for what, key in facts if len({key(c) for c in candidates}) > 1]


def _key(config: dict[str, Any], aliases: tuple[str, ...], value: int | None = None) -> str | None:
    """The first alias present (and equal to `value` when given), at the top level or under
    text_config (as a dotted key)."""
    for scope, prefix in ((config, ""), (config.get("text_config"), "text_config.")):
        if not isinstance(scope, dict):
            continue
        for alias in aliases:
            v = scope.get(alias)
            if v is not None and (value is None or v == value):
                return prefix + alias
    return None


def propose(config: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> tuple[list[CheckpointFormat], str]:
    """Candidate formats for `config` (a parsed config.json) whose tensors have `shapes`
    (name -> shape, from the headers), most likely first; and, when there is none, why.

    Each candidate differs from the first only in what shapes cannot tell (gate/up order;
    halves or interleaved rows of a fused gate/up tensor).
    """
    model_type = str(config.get("model_type"))
    missing: list[str] = []  # sizes config.json names no key for, for the message
    for name in sorted(shapes):
        m = _PER_EXPERT.match(name)
        if m and m["e"] == "0":
            found = _per_expert(config, shapes, m, model_type, missing)
            if found:
                return found, ""
    fused = _fused(config, shapes, model_type, missing)
    if fused:
        return fused, ""
    if missing:
        return [], (f"the expert tensors were found, but config.json names no key for "
                    f"{', '.join(sorted(set(missing)))}")
    return [], ("no tensor is named like a per-expert projection (<layer>.<path>experts.<e>.gate_proj/up_proj/"
                "down_proj or w1/w3/w2 .weight), no layer holds two 3-D tensors whose first axis is the "
                "number of experts (a fused gate_up and a down), and none holds three (separate fused "
                "gate_proj, up_proj and down_proj, or w1, w3 and w2)")


def _sizes(config: dict[str, Any], h: int, i: int, e: int, layer_names: list[str],
           missing: list[str]) -> dict[str, Any] | None:
    """The config keys of one proposal, each the key whose value equals the measured size."""
    keys = {"hidden_size": _key(config, HIDDEN_SIZE_ALIASES, h),
            "intermediate_size": _key(config, INTERMEDIATE_SIZE_ALIASES, i),
            "num_experts": _key(config, NUM_EXPERTS_ALIASES, e),
            "top_k": _key(config, TOP_K_ALIASES),
            "num_hidden_layers": _key(config, NUM_HIDDEN_LAYERS_ALIASES)}
    if keys["num_hidden_layers"] is None and pattern_length(config) is not None:
        keys["num_hidden_layers"] = NUM_HIDDEN_LAYERS_ALIASES[0]  # describe() counts the pattern (Nemotron-H)
    #: Nemotron-3 Super (NemotronHMoE's fc1_latent_proj / fc2_latent_proj), Kimi-K3's routed_expert_hidden_size
    latent = _key(config, ("moe_latent_size", "routed_expert_hidden_size"), h) if keys["hidden_size"] is None else None
    if latent is not None:
        missing.append(f"hidden_size: the experts take {latent} = {h} inputs, a latent MoE (projections to and from "
                       "the latent space sit outside the experts, so the block's output is not the experts' sum and "
                       "layoutc run has nothing to compare a kernel's output with)")
        return None
    if any(v is None for v in keys.values()):
        missing.extend(f"{k} (no config key equals the measured {dict(hidden_size=h, intermediate_size=i, num_experts=e).get(k, 'value')})"
                        for k, v in keys.items() if v is None)
        return None
    act = _key(config, HIDDEN_ACT_ALIASES)
    out: dict[str, Any] = {k: (v,) for k, v in keys.items()}
    if act is not None:
        out["activation"] = (act,)
    else:
        out["fixed_activation"] = "silu"
    alpha, limit = _key(config, ("swiglu_alpha",)), _key(config, ("swiglu_limit",))
    if alpha is not None and limit is not None:
        # swigluoai: (clamp(up, -L, L) + 1) * g * sigmoid(alpha * g), g = min(gate, L), whatever hidden_act says
        # (MiniMaxM3VLExperts._apply_gate on [gate | up] halves; transformers' config keeps hidden_act "silu")
        out["fixed_activation"], out["swiglu"] = "swigluoai", (alpha, limit)
    router = [n for n in layer_names if n.endswith("weight") and ("gate" in n or "router" in n)]
    if router:
        out["router"] = router[0]
    out["text_config"] = False
    return out


def _layer_tensors(shapes: dict[str, tuple[int, ...]], pre: str, layer: str) -> dict[str, tuple[int, ...]]:
    head = f"{pre}{layer}."
    return {n[len(head):]: s for n, s in shapes.items() if n.startswith(head)}


def non_gated(config: dict[str, Any]) -> bool:
    """config.json names a non-gated activation for the experts (relu2: Nemotron-H's mlp_hidden_act,
    transformers NemotronHExperts, `has_gate=False`), the first of the generic activation keys."""
    key = _key(config, HIDDEN_ACT_ALIASES)
    if key is None:
        return False
    scope = config.get("text_config") if key.startswith("text_config.") else config
    return isinstance(scope, dict) and scope.get(key.removeprefix("text_config.")) == "relu2"


def _per_expert(config: dict[str, Any], shapes: dict[str, tuple[int, ...]], m: re.Match[str],
                model_type: str, missing: list[str]) -> list[CheckpointFormat]:
    base = f"{m['pre']}{m['layer']}.{m['path']}experts.0."
    for roles in _ROLES:
        names = {r: f"{base}{p}.weight" for r, p in roles.items()}
        if names["gate"] not in shapes and non_gated(config):  # up -> relu2 -> down (Nemotron-H)
            names["gate"] = names["up"]
        if not all(n in shapes for n in names.values()):
            continue
        g, d = shapes[names["gate"]], shapes[names["down"]]
        if len(g) != 2 or len(d) != 2 or g != shapes[names["up"]]:
            continue
        if (d[1], d[0]) == g:  # gate [I, H], down [H, I]
            i, h, transposed = g[0], g[1], False
        else:
            continue
        e = len({n for n in shapes if n.startswith(base[: -len("0.")]) and n.endswith(f".{roles['down']}.weight")})
        here = _layer_tensors(shapes, m["pre"], m["layer"])
        routers, block = _block_fields(config, here, e, h,
                                       [n for n, s in here.items() if s == (e, h) and "experts." not in n])
        sizes = _sizes(config, h, i, e, routers, missing)
        if sizes is None:
            continue
        sizes.update(block)
        first = CheckpointFormat(
            model_type=model_type, source="proposed from the safetensors headers (layoutc run)",
            layer_prefix=m["pre"] + "{layer}.", experts=m["path"] + "experts.", fused=False,
            gate="{e}." + roles["gate"] + ".weight", up="{e}." + roles["up"] + ".weight",
            down="{e}." + roles["down"] + ".weight", transposed=transposed, down_transposed=transposed,
            moe_layers="tensors", **sizes)
        assert first.gate is not None and first.up is not None
        if names["gate"] == names["up"]:  # non-gated: no gate, nothing left open but the orientation
            first = replace(first, gate=None, gated=False)
            found = [first] + ([replace(first, transposed=True, down_transposed=True)] if h == i else [])
            return found
        found = [first, replace(first, gate=first.up, up=first.gate)]
        if h == i:  # [I, H] and [H, I] read the same: both orientations are candidates
            found += [replace(c, transposed=True, down_transposed=True) for c in found]
        return found
    return []


#: (gate, up) name parts of separate fused gate and up tensors (step3p7's moe.gate_proj / moe.up_proj)
_SEPARATE = (("gate_proj", "up_proj"), ("w1", "w3"))


def _fused_separate(config: dict[str, Any], shapes: dict[str, tuple[int, ...]], model_type: str,
                    missing: list[str]) -> list[CheckpointFormat]:
    """Three 3-D tensors of one layer: gate and up of one shape ([E, I, H] or [E, H, I]) and a
    down holding H and I (transformers' step3p7 checkpoints: `moe.gate_proj.weight`,
    `moe.up_proj.weight`, `moe.down_proj.weight`, which its conversion_mapping concatenates into
    gate_up_proj). Candidates: both gate/up orders, and both orientations where H == I."""
    for name in sorted(shapes):
        m = _LAYER.match(name)
        if m is None or len(shapes[name]) != 3:
            continue
        here = _layer_tensors(shapes, m["pre"], m["layer"])
        three = {n: s for n, s in here.items() if len(s) == 3 and not n.endswith("bias")}
        for gate_part, up_part in _SEPARATE:
            for gate_name, gs in three.items():
                up_name = gate_name.replace(gate_part, up_part)
                if gate_part not in gate_name or three.get(up_name) != gs:
                    continue
                down_name = next((n for n in three if n == gate_name.replace(gate_part, "down_proj" if
                                  gate_part == "gate_proj" else "w2")), None)
                if down_name is None:
                    continue
                ds, e = three[down_name], gs[0]
                for transposed, (i, h) in ((False, gs[1:]), (True, gs[1:][::-1])):
                    if ds[0] != e or {ds[1], ds[2]} != {h, i}:
                        continue
                    sizes = _sizes(config, h, i, e, [n for n, s in here.items() if s == (e, h)], missing)
                    if sizes is None:
                        continue
                    first = CheckpointFormat(
                        model_type=model_type, source="proposed from the safetensors headers (layoutc run)",
                        layer_prefix=m["pre"] + "{layer}.", experts="", fused=True, gate=gate_name, up=up_name,
                        down=down_name, transposed=transposed, down_transposed=ds[1:] == (i, h) and h != i,
                        moe_layers="tensors", **sizes)
                    found = [first, replace(first, gate=up_name, up=gate_name)]
                    if h == i:  # [I, H] and [H, I] read the same: both orientations are candidates
                        found += [replace(c, transposed=not c.transposed, down_transposed=not c.down_transposed)
                                  for c in found]
                    return found
    return []


def _fused(config: dict[str, Any], shapes: dict[str, tuple[int, ...]], model_type: str,
           missing: list[str]) -> list[CheckpointFormat]:
    separate = _fused_separate(config, shapes, model_type, missing)
    if separate:
        return separate
    for name in sorted(shapes):
        m = _LAYER.match(name)
        if m is None or len(shapes[name]) != 3:
            continue
        here = _layer_tensors(shapes, m["pre"], m["layer"])
        three = {n: s for n, s in here.items() if len(s) == 3 and not n.endswith("bias")}
        for up_name, us in three.items():
            for down_name, ds in three.items():
                if up_name == down_name or us[0] != ds[0]:
                    continue
                e = us[0]
                for transposed, (two_i, h) in ((False, us[1:]), (True, us[1:][::-1])):
                    if two_i % 2 or {ds[1], ds[2]} != {h, two_i // 2}:
                        continue
                    i = two_i // 2
                    down_t = ds[1:] == (i, h) and h != i
                    routers, block = _block_fields(config, here, e, h, [n for n, s in here.items() if s == (e, h)])
                    sizes = _sizes(config, h, i, e, routers, missing)
                    if sizes is None:
                        continue
                    sizes.update(block)
                    common = up_name.rfind("experts.")
                    path = up_name[: common + len("experts.")] if common >= 0 else ""
                    first = CheckpointFormat(
                        model_type=model_type, source="proposed from the safetensors headers (layoutc run)",
                        layer_prefix=m["pre"] + "{layer}.", experts=path, fused=True, gate=None, up=None,
                        gate_up=up_name[len(path):], down=down_name[len(path):] if down_name.startswith(path)
                        else down_name, transposed=transposed, down_transposed=down_t, moe_layers="tensors",
                        **sizes)
                    if not down_name.startswith(path):
                        continue
                    found = [first, replace(first, gate_up_layout=Word.INTERLEAVE.value)]
                    if two_i == h:  # gate/up [2I, H] and [H, 2I] read the same
                        found += [replace(c, transposed=not c.transposed) for c in found]
                    if h == i:  # down [H, I] and [I, H] read the same
                        found += [replace(c, down_transposed=not c.down_transposed) for c in found]
                    return found
    return []
