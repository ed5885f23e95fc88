"""`read_quantization`: config.json's `quantization_config` -> the declared QuantScheme.

Read before any tensor: a method, bit width, format version or scheme that layoutc does
not declare is refused here with a coded FormatError naming it (LR150), as is a malformed
value (LR151), a skip list or per-module override that leaves the routed experts outside
the config (LR152), and a scheme whose layout does not fit the family (LR158). Standard
library only, so `layoutc audit`'s config reader (layoutc/tools/hfconfig.py) can call it.

Keys, per method, as the tools that write and read them spell them:
- "gptq" (GPTQModel / AutoGPTQ; vLLM 0.32 auto_gptq.py AutoGPTQConfig.from_config,
  transformers 5.19 GPTQConfig): bits, group_size, desc_act, sym, checkpoint_format
  (or format: "gptq" = v1, "gptq_v2"), dynamic (GPTQModel per-module rules: "-:" skips).
- "awq" (AutoAWQ; vLLM auto_awq.py AutoAWQConfig.from_config, transformers AwqConfig):
  bits / w_bit, group_size / q_group_size, zero_point, version (or format: "gemm"),
  modules_to_not_convert (vLLM matches it as a substring of the experts module).
- "fp8" (DeepSeek-V3, MiniMax-M2, Qwen3-FP8; vLLM fp8.py Fp8Config.from_config,
  transformers FineGrainedFP8Config): weight_block_size, activation_scheme, fmt,
  scale_fmt, modules_to_not_convert / ignored_layers (vLLM: exact names).
- "compressed-tensors" (llm-compressor; vLLM compressed_tensors.py, compressed-tensors 0.17
  QuantizationConfig): format, config_groups {name: {targets, weights, input_activations}},
  ignore ("re:" regexes or exact names).
- "mxfp4" (gpt-oss; vLLM mxfp4.py GptOssMxfp4Config, transformers Mxfp4Config):
  modules_to_not_convert.
- "modelopt" / "modelopt_fp4" (NVIDIA ModelOpt NVFP4; vLLM 0.32 modelopt.py
  ModelOptQuantConfigBase.from_config, ModelOptNvFp4Config): quant_algo (NVFP4, W4A16_NVFP4),
  group_size (16), exclude_modules, either flat in quantization_config or nested as
  hf_quant_config.json's {"quantization": {...}}; the flat form's skip list is "ignore".
  compressed-tensors' "nvfp4-pack-quantized" format (float 4-bit, tensor_group, group 16)
  is the same NVFP4 under other names. Its "pack-quantized" int weights (llm-compressor W4A16 /
  W8A16: num_bits, strategy group / channel, group_size, symmetric, actorder) are quant/wna16.py's.
- "auto-round" (auto-round; vLLM 0.32 inc/inc.py INCConfig.from_config, which
  override_quantization_method maps it to): bits, group_size, sym, data_type, packing_format,
  extra_config (per-layer bits; >= 16 leaves a layer unquantized): quant/wna16.py.
transformers' own skip rule (quantizers_utils.should_convert_module: a regex match at the
start, or a suffix) is applied to every method's skip list as well.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fnmatch import fnmatch
from typing import Any

from layoutc.tools.checkpoints.formats import FORMATS, CheckpointFormat, FormatError, describe
from layoutc.tools.checkpoints.quant import scheme as S
from layoutc.tools.checkpoints.quant import wna16 as W

DECLARED = ("gptq (int4, int8; sym or asym; desc_act on or off; v1 or gptq_v2)",
            "awq (int4 GEMM with zero points)", "fp8 (block, per tensor)",
            "compressed-tensors (float 8-bit: channel, tensor, block; nvfp4-pack-quantized; mxfp4-pack-quantized)",
            "mxfp4 (gpt-oss)", "modelopt (NVFP4, W4A16_NVFP4; group_size 16)",
            "compressed-tensors pack-quantized int4 / int8 symmetric (group or channel: W4A16, W8A16)",
            "auto-round (int4 / int8, packing auto_round:auto_gptq)")
#: ModelOpt quant_algo values whose weights are NVFP4 (vLLM 0.32 modelopt.py LINEAR_ALGOS owned by
#: modelopt_fp4) -> whether activations are NVFP4 too (a static input_scale per projection).
MODELOPT_NVFP4 = {"NVFP4": True, "W4A16_NVFP4": False}
GPTQ_FORMATS = {"gptq": False, "gptq_v2": True}
FP8_FMTS = (None, "e4m3", "float8_e4m3fn")
CT_FORMATS = ("float-quantized", "naive-quantized")


#: Sub-configs that hold a multimodal model's language model (hfconfig.keys.SUBCONFIG_KEYS but
#: the MoE block's own ffn_config, which holds no quantization_config).
WRAPPER_KEYS = ("text_config", "llm_config", "language_config")


def find_quantization_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """config.json's `quantization_config` (top level, else under a multimodal wrapper's language
    model: text_config, llm_config, language_config, the sub-configs the audit's config reader
    searches), or None. Raises FormatError LR151 when it is present and not a JSON object."""
    for scope in (config, *(config.get(k) for k in WRAPPER_KEYS)):
        if isinstance(scope, dict) and scope.get("quantization_config") is not None:
            quant = scope["quantization_config"]
            if not isinstance(quant, dict):
                raise FormatError("LR151", f"quantization_config = {quant!r} is not a JSON object")
            return quant
    return None


def read_quantization(config: dict[str, Any], fmt: CheckpointFormat | None = None,
                      tensor_names: Any = None) -> S.QuantScheme | None:
    """The declared scheme of a parsed config.json's routed experts; None when unquantized.

    fmt: the family's format (None: FORMATS[config["model_type"]] when declared; an
    undeclared model_type skips the checks that need the family's names). tensor_names: the
    checkpoint's tensor names, for a format whose MoE layers are "where the tensors are" (a
    proposed one; formats.describe).
    Raises FormatError: LR150 an undeclared method, bit width, format version or scheme
    (named); LR151 a malformed value; LR152 a skip list or override that reaches the routed
    experts; LR158 a scheme whose layout the family's format cannot hold.
    """
    quant = find_quantization_config(config)
    if quant is None:
        return None
    method = quant.get("quant_method")
    if not isinstance(method, str):
        raise FormatError("LR151", f"quantization_config.quant_method = {method!r} is not a string")
    method = method.lower()
    readers = {"gptq": _gptq, "awq": _awq, "fp8": _fp8, "compressed-tensors": _compressed_tensors,
               "mxfp4": _mxfp4, "modelopt": _modelopt, "modelopt_fp4": _modelopt, "auto-round": _auto_round}
    if method not in readers:
        raise FormatError("LR150", f"quantization_config.quant_method {method!r} is not a declared quantized "
                          f"format; declared: {'; '.join(DECLARED)}")
    if fmt is None:
        fmt = FORMATS.get(str(config.get("model_type")))
    names = _ExpertNames(config, fmt, tensor_names)
    scheme = readers[method](quant, names)
    if fmt is not None:
        S.tensor_names(scheme, fmt, names.layers[0] if names.layers else 0, 0)  # LR158 on a layout mismatch
    return scheme


class _ExpertNames:
    """The routed experts' module names (for skip lists): the experts module of each MoE
    layer (vLLM's FusedMoE prefix, transformers' experts module) and each expert's
    projection modules (per-expert checkpoints; compressed-tensors' Linear targets)."""

    def __init__(self, config: dict[str, Any], fmt: CheckpointFormat | None, tensor_names: Any = None) -> None:
        self.fmt = fmt
        self.layers: tuple[int, ...] = ()
        self.experts = 0
        if fmt is not None:
            moe = describe(config, fmt, tensor_names)
            self.layers, self.experts = moe.moe_layers, moe.num_experts

    def modules(self) -> Iterator[str]:
        fmt = self.fmt
        if fmt is None:
            return
        for layer in self.layers:
            yield (fmt.layer_prefix.format(layer=layer) + fmt.experts).rstrip(".")

    def projections(self) -> Iterator[str]:
        fmt = self.fmt
        if fmt is None:
            return
        for layer in self.layers:
            for e in range(1 if fmt.fused else self.experts):
                for role, name in fmt.names(layer, None if fmt.fused else e).items():
                    if not role.endswith("_bias"):
                        yield name.removesuffix(".weight")


def _transformers_skips(name: str, key: str) -> bool:
    """transformers 5.19 quantizers_utils.should_convert_module, for one pattern (negated)."""
    try:
        return bool(re.match(f"{key}\\.", name) or re.match(key, name)) or name.endswith(key)
    except re.error:
        return name.startswith(key) or name.endswith(key)


def _check_skips(entries: Any, key: str, names: _ExpertNames, vllm_mode: str | None) -> None:
    """LR152 when a skip list entry reaches the experts, under transformers' rule or vLLM's
    (`vllm_mode`: "exact", "substring" as vLLM's is_layer_skipped, "modelopt" as vLLM 0.32's
    ModelOptQuantConfigBase.is_layer_excluded: exact, substring or fnmatch wildcard, or None
    when vLLM ignores the list for MoE layers)."""
    if entries is None:
        return
    if not isinstance(entries, list) or not all(isinstance(x, str) for x in entries):
        raise FormatError("LR151", f"quantization_config.{key} = {entries!r} is not a list of names")
    for name in names.modules():
        for entry in entries:
            hit_vllm = ((vllm_mode == "exact" and (name == entry or ("experts" in entry and name in entry)))
                        or (vllm_mode == "substring" and entry in name)
                        or (vllm_mode == "modelopt" and (name == entry or entry in name or fnmatch(name, entry))))
            if hit_vllm or _transformers_skips(name, entry):
                raise FormatError("LR152", f"quantization_config.{key} entry {entry!r} leaves the routed experts "
                                  f"{name} unquantized ({'vLLM' if hit_vllm else 'transformers'} skips them); "
                                  "layoutc declares quantized experts only: dequantize the checkpoint or drop "
                                  "the entry")


def _int(quant: dict[str, Any], keys: tuple[str, ...], what: str, default: int | None = None) -> int:
    for k in keys:
        if quant.get(k) is not None:
            v = quant[k]
            if isinstance(v, bool) or not isinstance(v, int):
                raise FormatError("LR151", f"quantization_config.{k} = {v!r} is not an integer ({what})")
            return v
    if default is None:
        raise FormatError("LR151", f"quantization_config has no {' / '.join(keys)} ({what})")
    return default


def _bool(quant: dict[str, Any], key: str, default: bool) -> bool:
    v = quant.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise FormatError("LR151", f"quantization_config.{key} = {v!r} is not true/false")
    return v


def _group(quant: dict[str, Any], keys: tuple[str, ...]) -> int:
    g = _int(quant, keys, "quantization group size along the input dim")
    if g != -1 and g < 1:
        raise FormatError("LR151", f"quantization_config.{keys[0]} = {g}: a group size is -1 (one group per "
                          "output channel) or positive")
    return g


def _gptq(quant: dict[str, Any], names: _ExpertNames) -> S.QuantScheme:
    bits = _int(quant, ("bits",), "weight bits")
    if bits not in (4, 8):
        raise FormatError("LR150", f"GPTQ {bits}-bit is not declared (int4 and int8 are: vLLM 0.32's "
                          "AutoGPTQConfig.TYPE_MAP has only 4 and 8 bits)")
    group = _group(quant, ("group_size",))
    version = quant.get("checkpoint_format", quant.get("format")) or "gptq"
    if not isinstance(version, str) or version.lower() not in GPTQ_FORMATS:
        raise FormatError("LR150", f"GPTQ checkpoint_format {version!r} is not declared "
                          f"(declared: {', '.join(GPTQ_FORMATS)})")
    dynamic = quant.get("dynamic") or {}
    if not isinstance(dynamic, dict):
        raise FormatError("LR151", f"quantization_config.dynamic = {dynamic!r} is not an object")
    for pattern in dynamic:
        rule = str(pattern)
        regex = rule[2:] if rule[:2] in ("+:", "-:") else rule
        for name in [*names.modules(), *names.projections()]:
            try:
                hit = re.match(regex, name) is not None
            except re.error as exc:
                raise FormatError("LR151", f"quantization_config.dynamic rule {rule!r} is not a regex: {exc}") \
                    from None
            if hit:
                what = "skips" if rule.startswith("-:") else "overrides the quantization of"
                raise FormatError("LR152", f"GPTQ dynamic rule {rule!r} {what} the routed experts ({name}); "
                                  "per-module GPTQ rules are not declared")
    desc_act = _bool(quant, "desc_act", False)
    return S.gptq(bits, group, sym=_bool(quant, "sym", True), act_order=desc_act and group != -1,
                  v2=GPTQ_FORMATS[version.lower()])


def _awq(quant: dict[str, Any], names: _ExpertNames) -> S.QuantScheme:
    bits = _int(quant, ("bits", "w_bit"), "weight bits")
    if bits != 4:
        raise FormatError("LR150", f"AWQ {bits}-bit is not declared (int4 is: vLLM 0.32's AutoAWQConfig.TYPE_MAP)")
    version = quant.get("version", quant.get("format")) or "gemm"
    if not isinstance(version, str) or version.lower() != "gemm":
        raise FormatError("LR150", f"AWQ version {version!r} is not declared (only 'gemm': qweight [K, N / 8] "
                          "int32; GEMV variants pack another way)")
    if not _bool(quant, "zero_point", True):
        raise FormatError("LR150", "AWQ with zero_point false is not declared (AWQ GEMM with zero points is)")
    _check_skips(quant.get("modules_to_not_convert"), "modules_to_not_convert", names, "substring")
    return S.awq(_group(quant, ("group_size", "q_group_size")))


def _fp8(quant: dict[str, Any], names: _ExpertNames) -> S.QuantScheme:
    fmt = quant.get("fmt")
    if fmt not in FP8_FMTS:
        raise FormatError("LR150", f"FP8 fmt {fmt!r} is not declared (float8_e4m3fn / 'e4m3' is)")
    scheme = quant.get("activation_scheme", "dynamic")
    if scheme not in ("dynamic", "static"):
        raise FormatError("LR151", f"quantization_config.activation_scheme = {scheme!r} is not dynamic/static")
    scale_fmt = quant.get("scale_fmt") or "float"
    if scale_fmt not in ("float", "ue8m0"):
        raise FormatError("LR150", f"FP8 scale_fmt {scale_fmt!r} is not declared (float, ue8m0)")
    for key in ("modules_to_not_convert", "ignored_layers"):
        _check_skips(quant.get(key), key, names, "exact")
    block = quant.get("weight_block_size")
    if block is None:
        return S.fp8("tensor", scale_suffix=".weight_scale", static=scheme == "static")
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise FormatError("LR151", f"quantization_config.weight_block_size = {block!r} is not two positive integers")
    if scheme == "static":
        raise FormatError("LR150", "block FP8 with static activation scales is not declared (vLLM 0.32's "
                          "Fp8Config refuses it)")
    return S.fp8("block", block=(block[0], block[1]), e8m0_scales=scale_fmt == "ue8m0")


def _mxfp4(quant: dict[str, Any], names: _ExpertNames) -> S.QuantScheme:
    # vLLM's Mxfp4Config.from_config drops the list; transformers' replace_with_mxfp4_linear reads it
    _check_skips(quant.get("modules_to_not_convert"), "modules_to_not_convert", names, None)
    return S.mxfp4()


def _auto_round(quant: dict[str, Any], names: _ExpertNames) -> S.QuantScheme:
    """auto-round's native format (quant/wna16.py). LR152 when `extra_config` leaves an expert module
    unquantized (bits >= 16: vLLM 0.32 INCConfig.get_quant_method's rule; the entry found as
    `_auto_round_override` finds it: an exact name, else the first key found in the name by re.search).
    LR151 a malformed extra_config, or a non-scalar scheme field."""
    extra = quant.get("extra_config") or {}
    if not isinstance(extra, dict):
        raise FormatError("LR151", f"quantization_config.extra_config = {extra!r} is not an object")
    for name in [*names.modules(), *names.projections()]:
        found = _auto_round_override(extra, name)  # the entry auto-round and vLLM apply to it (exact, else search)
        if found is None:
            continue
        key, rule = found
        if isinstance(rule.get("bits"), int) and not isinstance(rule["bits"], bool) and rule["bits"] >= 16:
            raise FormatError("LR152", f"auto-round extra_config entry {key!r} (bits {rule['bits']}) leaves the "
                              f"routed experts ({name}) unquantized; layoutc declares quantized experts only")
    return W.read_auto_round(_auto_round_experts(quant, extra, list(names.projections())))


#: the weight keys an auto-round extra_config entry overrides per layer (auto-round 0.16.1
#: inference/convert_model.py builds each layer's QuantizationScheme from them, the default scheme's
#: where the entry lacks one; vLLM 0.32 inc/config_parser.py get_config reads bits, group_size, sym)
AUTO_ROUND_LAYER_KEYS = ("bits", "group_size", "sym", "data_type")


def _auto_round_override(extra: dict[str, Any], name: str) -> tuple[str, dict[str, Any]] | None:
    """The extra_config entry that applies to module `name`: an exact key (also without "model."),
    else the first key that is a regex found in it (auto-round 0.16.1 inference/utils.py
    _expand_regex_config: `re.search`, an explicit name not overwritten; vLLM 0.32
    inc/config_parser.py _resolve_raw: exact, then regex keys by `re.search`); None for none."""
    for key in (name, name.removeprefix("model.")):
        if isinstance(extra.get(key), dict):
            return key, extra[key]
    for key, rule in extra.items():
        if not isinstance(rule, dict):
            continue
        try:
            if re.search(key, name) is not None:
                return key, rule
        except re.error:  # not a regex: both skip it
            continue
    return None


def _auto_round_experts(quant: dict[str, Any], extra: dict[str, Any], projections: list[str]) -> dict[str, Any]:
    """quantization_config as it applies to the routed experts: with extra_config's per-layer
    override of AUTO_ROUND_LAYER_KEYS where one reaches them (issue 45 F2b; before, they were read
    with the top-level scheme). Every expert projection must get the same scheme, as vLLM 0.32
    requires of a fused MoE layer (inc/config_parser.py: "requires consistent quant config for all
    sub-layers"); else FormatError LR149 naming two projections, their keys and schemes. The merged
    scheme is then read as any (LR150 / LR151 for one the route does not take)."""
    seen: dict[tuple[Any, ...], tuple[str, str]] = {}
    for name in projections:
        found = _auto_round_override(extra, name)
        rule = found[1] if found else {}
        scheme = tuple(rule.get(k, quant.get(k)) for k in AUTO_ROUND_LAYER_KEYS)
        for k, v in zip(AUTO_ROUND_LAYER_KEYS, scheme, strict=True):
            if not (v is None or isinstance(v, (bool, int, float, str))):
                where = f"extra_config entry {found[0]!r}" if found and k in rule else "quantization_config"
                raise FormatError("LR151", f"auto-round {where}: {k} = {v!r} is not a number, string or bool "
                                  f"(the scheme of {name})")
        seen.setdefault(scheme, (name, found[0] if found else "(no entry: the top-level scheme)"))
    if len(seen) > 1:
        (a, (na, ka)), (b, (nb, kb)) = list(seen.items())[:2]
        words = ", ".join(AUTO_ROUND_LAYER_KEYS)
        raise FormatError("LR149", f"auto-round extra_config gives the routed experts {len(seen)} different "
                          f"schemes ({words}): {na} gets {a} by {ka!r}, {nb} gets {b} by {kb!r}; one scheme "
                          "for all routed experts is declared (vLLM 0.32 refuses a fused MoE layer whose "
                          "sub-layers differ)")
    if not seen:
        return quant
    (scheme,) = seen
    return {**quant, **{k: v for k, v in zip(AUTO_ROUND_LAYER_KEYS, scheme, strict=True) if v is not None}}


def _modelopt(quant: dict[str, Any], names: _ExpertNames) -> S.QuantScheme:
    """ModelOpt NVFP4 (module docstring). LR150 a quant_algo other than NVFP4 / W4A16_NVFP4
    (ModelOpt's FP8, W4A8_AWQ, MXFP8, MIXED_PRECISION ... are not declared) or a group_size
    other than 16; LR151 a malformed value; LR152 a skip list entry that reaches the experts."""
    nested = "quantization" in quant
    body = quant["quantization"] if nested else quant
    where = "quantization_config.quantization" if nested else "quantization_config"
    if not isinstance(body, dict):
        raise FormatError("LR151", f"{where} = {body!r} is not a JSON object")
    algo = body.get("quant_algo")
    if not isinstance(algo, str):
        raise FormatError("LR151", f"{where}.quant_algo = {algo!r} is not a string (ModelOpt names its scheme there)")
    if algo.upper() not in MODELOPT_NVFP4:
        raise FormatError("LR150", f"ModelOpt quant_algo {algo!r} is not declared (declared: "
                          f"{', '.join(MODELOPT_NVFP4)}: NVFP4 weights)")
    group = _int(body, ("group_size",), "NVFP4 block size along the input dim", default=S.NVFP4_GROUP)
    if group != S.NVFP4_GROUP:
        raise FormatError("LR150", f"ModelOpt NVFP4 group_size {group} is not declared (NVFP4 scales blocks of "
                          f"{S.NVFP4_GROUP}: one float8_e4m3fn scale per 16 values)")
    for key in ("exclude_modules", "ignore"):
        _check_skips(body.get(key), f"{'quantization.' if nested else ''}{key}", names, "modelopt")
    return S.nvfp4("modelopt", static_input=MODELOPT_NVFP4[algo.upper()])


def _compressed_tensors(quant: dict[str, Any], names: _ExpertNames) -> S.QuantScheme:
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise FormatError("LR151", "compressed-tensors quantization_config has no config_groups object")
    ignore = quant.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(x, str) for x in ignore):
        raise FormatError("LR151", f"quantization_config.ignore = {ignore!r} is not a list of names")
    projections = list(names.projections())
    for name in projections:
        hit = next((i for i in ignore if _ct_match(name, i)), None)
        if hit is not None:
            raise FormatError("LR152", f"compressed-tensors ignore entry {hit!r} leaves the routed experts ({name}) "
                              "unquantized; layoutc declares quantized experts only")
    chosen = [(gname, g) for gname, g in sorted(groups.items()) if _ct_targets_experts(g, projections)]
    if not chosen:
        raise FormatError("LR152", "no compressed-tensors config group targets the routed experts "
                          f"(groups: {', '.join(sorted(groups))}); they would stay unquantized")
    from layoutc.tools.checkpoints.quant import ct_mxfp4  # here: `layoutc audit` imports the reader, not each format

    mx = [(gname, g) for gname, g in chosen if ct_mxfp4.is_mxfp4(g, quant)]
    if mx:  # mxfp4-pack-quantized (quant/ct_mxfp4.py)
        if len(mx) != len(chosen):
            raise FormatError("LR150", f"compressed-tensors config groups {', '.join(n for n, _ in chosen)} quantize "
                              "the experts differently; one scheme for all experts is declared")
        return ct_mxfp4.read(mx)
    ints = {gname for gname, g in chosen if W.is_ct_int(g, quant)}
    if ints:  # llm-compressor's W4A16 / W8A16 (quant/wna16.py)
        if len(ints) != len(chosen):
            raise FormatError("LR150", f"compressed-tensors config groups {', '.join(n for n, _ in chosen)} quantize "
                              "the experts differently; one scheme for all experts is declared")
        return W.read_ct_int(chosen, quant)
    nvfp4 = {gname for gname, g in chosen if _ct_is_nvfp4(g, quant)}
    if nvfp4:
        if len(nvfp4) != len(chosen):
            raise FormatError("LR150", f"compressed-tensors config groups {', '.join(n for n, _ in chosen)} quantize "
                              "the experts differently; one scheme for all experts is declared")
        return _ct_nvfp4(chosen)
    parsed = {_ct_group(gname, g, quant) for gname, g in chosen}
    if len(parsed) > 1:
        raise FormatError("LR150", f"compressed-tensors config groups {', '.join(n for n, _ in chosen)} quantize "
                          "the experts differently; one scheme for all experts is declared")
    strategy, block, static = parsed.pop()
    return S.fp8(strategy, block=block, scale_suffix=".weight_scale", method="compressed-tensors", static=static)


def _ct_is_nvfp4(group: Any, quant: dict[str, Any]) -> bool:
    """A group in compressed-tensors' nvfp4-pack-quantized format (compressed-tensors 0.17
    config/format.py: float 4-bit weights with group_size 16 compress to NVFP4PackedCompressor)."""
    return isinstance(group, dict) and (group.get("format") or quant.get("format")) == "nvfp4-pack-quantized"


def _ct_nvfp4(chosen: list[tuple[str, Any]]) -> S.QuantScheme:
    """compressed-tensors NVFP4: float 4-bit weights, strategy tensor_group, group_size 16,
    symmetric (NVFP4PackedCompressor.can_compress; vLLM 0.32 compressed_tensors.py
    _is_fp4a4_nvfp4 / _is_fp4a16_nvfp4). Activations tensor_group too: W4A4 (input_global_scale)."""
    statics = set()
    for gname, group in chosen:
        w = group.get("weights")
        if not isinstance(w, dict):
            raise FormatError("LR151", f"compressed-tensors config group {gname!r} has no weights object")
        kind = (w.get("type"), w.get("num_bits"), w.get("strategy"), w.get("group_size"))
        if kind != ("float", 4, "tensor_group", S.NVFP4_GROUP) or w.get("symmetric") is False:
            raise FormatError("LR150", f"compressed-tensors group {gname!r}: format nvfp4-pack-quantized with type "
                              f"{kind[0]!r}, {kind[1]}-bit, strategy {kind[2]!r}, group_size {kind[3]} is not "
                              "declared (NVFP4 is float 4-bit, tensor_group, group_size 16, symmetric)")
        act = group.get("input_activations")
        statics.add(isinstance(act, dict) and act.get("strategy") == "tensor_group")
    if len(statics) > 1:
        raise FormatError("LR150", "compressed-tensors NVFP4 groups disagree on activation quantization")
    return S.nvfp4("compressed-tensors", static_input=statics.pop())


def _ct_match(name: str, target: str) -> bool:
    """compressed-tensors 0.17 utils/match.py match_name: "re:" regex at the start, else exact."""
    if target.startswith("re:"):
        try:
            return re.match(target[3:], name) is not None
        except re.error as exc:
            raise FormatError("LR151", f"compressed-tensors target {target!r} is not a regex: {exc}") from None
    return target == name


def _ct_targets_experts(group: Any, projections: list[str]) -> bool:
    targets = group.get("targets") if isinstance(group, dict) else None
    if not isinstance(targets, list):
        raise FormatError("LR151", f"compressed-tensors config group {group!r} has no targets list")
    if "Linear" in targets or not projections:  # class target: every nn.Linear, the experts' included
        return True
    return any(_ct_match(p, t) for p in projections for t in targets if isinstance(t, str))


def _ct_group(gname: str, group: dict[str, Any], quant: dict[str, Any]) -> tuple[str, tuple[int, int] | None, bool]:
    """(strategy, block, static input scale) of a float 8-bit group; LR150 for anything else."""
    w = group.get("weights")
    if not isinstance(w, dict):
        raise FormatError("LR151", f"compressed-tensors config group {gname!r} has no weights object")
    fmt = group.get("format") or quant.get("format")
    kind = (w.get("type"), w.get("num_bits"), w.get("strategy"))
    what = f"compressed-tensors group {gname!r}: type {kind[0]!r}, {kind[1]}-bit, strategy {kind[2]!r}, " \
           f"format {fmt!r}"
    if kind[0] != "float" or kind[1] != 8 or kind[2] not in ("channel", "tensor", "block"):
        raise FormatError("LR150", f"{what} is not declared; declared: float 8-bit channel, tensor or block")
    if fmt not in CT_FORMATS:
        raise FormatError("LR150", f"{what} is not declared (formats {', '.join(CT_FORMATS)})")
    if w.get("dynamic") not in (False, None) or w.get("symmetric") is False:
        raise FormatError("LR150", f"{what}: dynamic or asymmetric weights are not declared")
    block = None
    if kind[2] == "block":
        bs = w.get("block_structure")
        if not isinstance(bs, list) or len(bs) != 2 or not all(isinstance(b, int) and b > 0 for b in bs):
            raise FormatError("LR151", f"{what}: block_structure {bs!r} is not two positive integers")
        block = (bs[0], bs[1])
    act = group.get("input_activations")
    static = isinstance(act, dict) and act.get("dynamic") is False
    return kind[2], block, static
