"""Read the MoE numbers layoutc needs out of a Hugging Face ``config.json``.

Models spell the same quantity several ways: Mixtral's ``num_local_experts``,
DeepSeek's ``n_routed_experts``, DBRX's ``moe_num_experts``; ``hidden_size``
next to DBRX's ``d_model``. This module tries the known field names in a fixed
order and reduces them to one :class:`MoEModelConfig`, in the field's own terms
(``hidden_size`` H, ``intermediate_size`` I, ``num_experts`` E; see
``shared/design/domain.md`` §1).

Where it looks:

* Sub-configs are searched before the top level, in this order:
  ``ffn_config`` (DBRX), ``text_config`` (Gemma-4 and other multimodal
  wrappers), ``llm_config`` (InternVL-style), ``language_config``
  (DeepSeek-VL2-style), then the top level. Within one scope the aliases are
  tried in order, so ``moe_intermediate_size`` wins over a dense
  ``intermediate_size`` that sits next to it (Gemma-4, Qwen-MoE, DeepSeek).
* A JSON ``null`` counts as absent.

How MoE layers are counted (assumptions, stated so they can be checked):

* ``num_hidden_layers`` is the decoder depth as the config says it. Multi-token
  prediction layers (``num_nextn_predict_layers``) are *not* in it and are not
  counted.
* Nemotron-H: a layer is MoE iff its letter in ``hybrid_override_pattern`` is
  ``E`` (or its entry in ``layers_block_type`` is ``"moe"``).
* DeepSeek-V2/V3, GLM-4.5: layer ``i`` is MoE iff ``i >= first_k_dense_replace``
  and ``i % moe_layer_freq == 0`` (HF ``modeling_deepseek``).
* Qwen-MoE: layer ``i`` is MoE iff ``i not in mlp_only_layers`` and
  ``(i + 1) % decoder_sparse_step == 0`` (HF ``modeling_qwen2_moe``).
* Gemma-4: ``enable_moe_block: false`` means no MoE layer.
* Jamba: layer ``i`` is MoE iff ``i % expert_layer_period == expert_layer_offset``
  (HF ``JambaConfig.layers_num_experts``; defaults 2 and 1 where a Jamba config
  leaves them out).
* Otherwise (Mixtral, gpt-oss, MiniMax, DBRX, OLMoE, Granite, Phi-MoE) every
  layer is MoE.

Every number's origin is kept: :attr:`MoEModelConfig.sources` maps each field to
the config key it came from (``text_config.moe_intermediate_size``), so a wrong
key shows in ``layoutc audit``.

Reading is bounded (issue 16): the file is read through ``safeio.read_bounded``
(at most :data:`MAX_CONFIG_BYTES`, never blocking on a FIFO or a device), JSON
nested deeper than :data:`MAX_JSON_DEPTH` and integers longer than
:data:`MAX_INT_DIGITS` digits are refused with :class:`ModelConfigError`.

Only the standard library is imported.
"""

from __future__ import annotations

import difflib
import importlib.resources
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MoEModelConfig",
    "ModelConfigError",
    "bundled_model_names",
    "load_model_config",
    "parse_model_config",
]

# Sub-configs searched before the top level, innermost first.
_SUBCONFIG_KEYS: tuple[str, ...] = (
    "ffn_config",
    "text_config",
    "llm_config",
    "language_config",
)

HIDDEN_SIZE_ALIASES: tuple[str, ...] = ("hidden_size", "d_model")
INTERMEDIATE_SIZE_ALIASES: tuple[str, ...] = (
    "moe_intermediate_size",
    "intermediate_size",
    "ffn_hidden_size",
)
NUM_EXPERTS_ALIASES: tuple[str, ...] = (
    "num_experts",
    "n_routed_experts",
    "num_local_experts",
    "moe_num_experts",
)
NUM_EXPERTS_PER_TOK_ALIASES: tuple[str, ...] = (
    "num_experts_per_tok",
    "moe_top_k",
    "top_k_experts",
    "num_experts_per_token",
    "experts_per_token",
)
NUM_HIDDEN_LAYERS_ALIASES: tuple[str, ...] = (
    "num_hidden_layers",
    "n_layers",
    "num_layers",
)
# mlp_hidden_act first: Nemotron-H also has mamba_hidden_act, and where a
# config names the MLP's activation separately that is the one experts use.
HIDDEN_ACT_ALIASES: tuple[str, ...] = (
    "mlp_hidden_act",
    "hidden_act",
    "hidden_activation",
    "ffn_act_fn",
)
DTYPE_ALIASES: tuple[str, ...] = ("torch_dtype", "dtype")

MAX_CONFIG_BYTES = 8 << 20  # real config.json files are well under 1 MiB
MAX_JSON_DEPTH = 64  # real configs nest 3 to 5 levels
MAX_INT_DIGITS = 30  # sizes are below 2^62; a longer literal is not a size
MAX_LAYERS = 100_000  # decoder depth; layers are counted one by one

# gpt-oss's SwiGLU constants: transformers GptOssExperts hard-codes alpha = 1.702 and
# reads limit = config.swiglu_limit (7.0 in the released configs).
GPT_OSS_SWIGLU_ALPHA = 1.702

# Checkpoint activation name -> layoutc contract activation name.
_ACTIVATIONS: dict[str, str] = {
    "silu": "silu",
    "swish": "silu",
    "swiglu": "silu",
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "relu2": "relu2",
    "swigluoai": "swigluoai",
}
# Activations whose expert MLP has a single (up) half: out = act(up).
_NON_GATED: frozenset[str] = frozenset({"relu2"})


class ModelConfigError(ValueError):
    """A model config could not be read or does not describe an MoE model.

    Attributes:
        source: the file (or ``"<dict>"``, or the bundled name) the error is about.
        field: what was being read, e.g. ``"num_experts"``; ``None`` for
            file-level errors (unreadable file, bad JSON, unknown name).
        aliases: every field name that was tried for ``field``, in order.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str,
        field: str | None = None,
        aliases: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.source = source
        self.field = field
        self.aliases = aliases


@dataclass(frozen=True)
class MoEModelConfig:
    """The MoE shape of one model, as layoutc needs it.

    Attributes:
        name: ``_name_or_path`` from the config, else the file or folder name.
        hidden_size: H, the model width (elements).
        intermediate_size: I, the per-expert FFN width of the whole,
            unsharded model (elements). Divide by ``tp_size`` for
            ``intermediate_size_per_partition``.
        num_experts: E, routed experts per MoE layer (shared experts excluded).
        num_experts_per_tok: top-k, routed experts chosen per token.
        num_hidden_layers: decoder layers, MTP layers excluded.
        num_moe_layers: how many of those layers hold routed experts.
        hidden_act: the activation name exactly as the checkpoint spells it.
        activation: the layoutc contract name: ``silu``, ``gelu``,
            ``gelu_tanh``, ``relu2`` or ``swigluoai``.
        dtype: ``torch_dtype``/``dtype`` as written (e.g. ``"bfloat16"``), or
            ``None`` where the config does not say.
        group_size: quantization group along the reduction dim (elements);
            ``-1`` per-channel; ``None`` if not group-quantized or not stated.
        act_order: GPTQ ``desc_act`` (or compressed-tensors ``actorder``).
        block_size: FP8 ``weight_block_size`` as (rows, cols), else ``None``.
        quant_method: ``quantization_config.quant_method`` as written
            (``"fp8"``, ``"gptq"``, ``"mxfp4"``, ...), else ``None``.
        is_gated: ``False`` only for single-half MLPs (``relu2``).
        bits: weight bits from ``quantization_config`` where stated, else ``None``.
        swiglu_limit: the clamp of a clamped SwiGLU (``swiglu_limit``), else ``None``.
        swiglu_alpha: the sigmoid scale of swigluoai (``swiglu_alpha``; gpt-oss: 1.702,
            the constant transformers hard-codes), else ``None``.
        sources: ``(field, where)`` pairs: the config key each field was read from,
            e.g. ``("intermediate_size", "text_config.moe_intermediate_size")``, or a
            rule (``"default: every layer"``) where no key was used.
    """

    name: str
    hidden_size: int
    intermediate_size: int
    num_experts: int
    num_experts_per_tok: int
    num_hidden_layers: int
    num_moe_layers: int
    hidden_act: str
    activation: str
    dtype: str | None
    group_size: int | None
    act_order: bool
    block_size: tuple[int, ...] | None
    quant_method: str | None
    is_gated: bool
    bits: int | None = None
    swiglu_limit: float | None = None
    swiglu_alpha: float | None = None
    sources: tuple[tuple[str, str], ...] = ()

    def source_of(self, field: str) -> str | None:
        """The config key (or rule) ``field`` came from; ``None`` if not recorded."""
        return dict(self.sources).get(field)


# ----------------------------------------------------------------------------
# Bundled configs


def _models_dir() -> Any:
    """The bundled ``models`` folder as an importlib.resources Traversable."""
    try:
        return importlib.resources.files("layoutc.tools").joinpath("models")
    except (ModuleNotFoundError, TypeError):
        # Imported as a loose file, outside the package.
        return Path(__file__).resolve().parent.parent / "models"


def bundled_model_names() -> list[str]:
    """Names of the configs shipped in ``layoutc/models``, sorted.

    A name is a file stem, e.g. ``"gpt-oss-120b"`` for ``gpt-oss-120b.json``;
    pass it to :func:`load_model_config`. Raises nothing; returns ``[]`` if the
    folder is missing.
    """
    folder = _models_dir()
    if not folder.is_dir():
        return []
    return sorted(
        entry.name[: -len(".json")]
        for entry in folder.iterdir()
        if entry.name.endswith(".json") and entry.is_file()
    )


def _unknown_name_error(name: str, available: list[str]) -> ModelConfigError:
    lowered = name.lower()
    suggestions = difflib.get_close_matches(lowered, available, n=3, cutoff=0.5)
    # A fragment such as "mixtral" should find "mixtral-8x7b" even when the
    # ratio is low.
    for candidate in available:
        if lowered and lowered in candidate and candidate not in suggestions:
            suggestions.append(candidate)
    hint = (
        f" (did you mean {', '.join(repr(s) for s in suggestions)}?)"
        if suggestions
        else ""
    )
    return ModelConfigError(
        f"{name!r} is neither a config file nor a bundled model{hint}; "
        f"bundled models: {', '.join(available) or '(none)'}",
        source=name,
    )


# ----------------------------------------------------------------------------
# Loading


def load_model_config(path_or_name: str | os.PathLike[str]) -> MoEModelConfig:
    """Load an MoE model config from a file, a folder, or a bundled name.

    Args:
        path_or_name: a ``config.json`` path; a folder holding ``config.json``;
            or a bundled name from :func:`bundled_model_names` (case-insensitive).
            An existing path always wins over a bundled name.

    Returns:
        The model's :class:`MoEModelConfig` (sizes in elements, counts in
        layers/experts).

    Raises:
        ModelConfigError: the file is missing or unreadable; the JSON is bad
            (the message gives line and column); the name is not bundled (the
            message lists the bundled names and close matches); a required
            field is missing (the message names the file, the field and every
            alias tried) or has a bad value; the activation is unknown.
    """
    text_arg = os.fspath(path_or_name)
    path = Path(text_arg)
    if path.is_dir():
        path = path / "config.json"
    if os.path.lexists(path):
        source = str(path)
        text = _read_text(path, source)
        return parse_model_config(
            _parse_json(text, source), source=source, default_name=_default_name(path)
        )

    looks_like_path = (
        os.sep in text_arg or "/" in text_arg or text_arg.endswith(".json")
    )
    if looks_like_path:
        raise ModelConfigError(f"{text_arg}: no such file", source=text_arg)

    available = bundled_model_names()
    by_lower = {name.lower(): name for name in available}
    stem = by_lower.get(text_arg.lower())
    if stem is None:
        raise _unknown_name_error(text_arg, available)
    resource = _models_dir().joinpath(f"{stem}.json")
    source = f"layoutc/tools/models/{stem}.json"
    return parse_model_config(
        _parse_json(_read_text(resource, source), source),
        source=source,
        default_name=stem,
    )


def _read_text(path: Any, source: str) -> str:
    """The file as text, read through safeio.read_bounded (a Traversable is read as is:
    it is a bundled file)."""
    from layoutc.compiler.safeio import ReadError, read_bounded

    try:
        raw = read_bounded(path, MAX_CONFIG_BYTES) if isinstance(path, Path) else path.read_bytes()
    except ReadError as error:
        raise ModelConfigError(f"{source}: cannot read: {error.reason}", source=source) from None
    except OSError as error:
        raise ModelConfigError(f"{source}: cannot read: {error.strerror or error}", source=source) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ModelConfigError(
            f"{source}: cannot read: not UTF-8 (byte 0x{raw[error.start]:02x} at offset {error.start})",
            source=source,
        ) from None


def _json_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings (linear; no recursion)."""
    import re

    depth = deepest = 0
    for match in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        token = match.group(0)
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def _default_name(path: Path) -> str:
    # A folder's config.json is named after the folder (the usual hub layout).
    return (
        path.parent.name
        if path.name == "config.json" and path.parent.name
        else path.stem
    )


class _JsonLimit(Exception):
    pass


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _JsonLimit(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _parse_constant(text: str) -> float:
    raise _JsonLimit(f"{text} is not a JSON number")


def _parse_json(text: str, source: str) -> dict[str, Any]:
    depth = _json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise ModelConfigError(
            f"{source}: JSON nested {depth} levels deep (at most {MAX_JSON_DEPTH})", source=source
        )
    try:
        raw = json.loads(text, parse_int=_parse_int, parse_constant=_parse_constant)
    except _JsonLimit as error:
        raise ModelConfigError(f"{source}: invalid config: {error}", source=source) from None
    except RecursionError:
        raise ModelConfigError(f"{source}: JSON nested too deeply", source=source) from None
    except json.JSONDecodeError as error:
        raise ModelConfigError(
            f"{source}:{error.lineno}:{error.colno}: invalid JSON: {error.msg}",
            source=source,
        ) from error
    if not isinstance(raw, dict):
        raise ModelConfigError(
            f"{source}: expected a JSON object at the top level, "
            f"got {type(raw).__name__}",
            source=source,
        )
    return raw


# ----------------------------------------------------------------------------
# Parsing


class _Scopes:
    """The dicts a field is looked up in, innermost first, with their names."""

    def __init__(self, raw: Mapping[str, Any], source: str) -> None:
        self.source = source
        self.entries: list[tuple[str, Mapping[str, Any]]] = [
            (key, raw[key])
            for key in _SUBCONFIG_KEYS
            if isinstance(raw.get(key), Mapping)
        ]
        self.entries.append(("top level", raw))
        self.used: dict[str, str] = {}  # field -> the key it was read from

    def find(self, aliases: Sequence[str], field: str | None = None) -> tuple[str, Any] | None:
        """The first (alias, value) with a non-null value, scope by scope.

        With ``field``, records where it was found (``text_config.num_experts``)."""
        for name, scope in self.entries:
            for alias in aliases:
                value = scope.get(alias)
                if value is not None:
                    if field is not None:
                        self.used[field] = alias if name == "top level" else f"{name}.{alias}"
                    return alias, value
        return None

    def where(self) -> str:
        return ", ".join(name for name, _ in self.entries)

    def require_int(
        self, field: str, aliases: tuple[str, ...], *, minimum: int = 1
    ) -> int:
        found = self.find(aliases, field)
        if found is None:
            raise ModelConfigError(
                f"{self.source}: missing {field}: tried {', '.join(aliases)} "
                f"(looked in: {self.where()})",
                source=self.source,
                field=field,
                aliases=aliases,
            )
        alias, value = found
        return _check_int(
            value,
            minimum=minimum,
            source=self.source,
            field=field,
            alias=alias,
            aliases=aliases,
        )


def _check_int(
    value: Any,
    *,
    minimum: int,
    source: str,
    field: str,
    alias: str,
    aliases: tuple[str, ...] = (),
) -> int:
    # bool is an int subclass; `true` is never a size.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ModelConfigError(
            f"{source}: {alias} = {value!r} is not an integer >= {minimum} "
            f"(reading {field})",
            source=source,
            field=field,
            aliases=aliases or (alias,),
        )
    return value


def parse_model_config(
    raw: Mapping[str, Any],
    *,
    source: str = "<dict>",
    default_name: str | None = None,
) -> MoEModelConfig:
    """Reduce an already-parsed ``config.json`` dict to a :class:`MoEModelConfig`.

    Args:
        raw: the config as ``json.load`` returns it.
        source: what to call it in error messages (a path, usually).
        default_name: the name to use when the config has no ``_name_or_path``.

    Raises:
        ModelConfigError: as for :func:`load_model_config`, minus file errors.
    """
    scopes = _Scopes(raw, source)
    hidden_size = scopes.require_int("hidden_size", HIDDEN_SIZE_ALIASES)
    intermediate_size = scopes.require_int(
        "intermediate_size", INTERMEDIATE_SIZE_ALIASES
    )
    num_experts = scopes.require_int("num_experts", NUM_EXPERTS_ALIASES)
    num_experts_per_tok = scopes.require_int(
        "num_experts_per_tok", NUM_EXPERTS_PER_TOK_ALIASES
    )
    num_hidden_layers = scopes.require_int(
        "num_hidden_layers", NUM_HIDDEN_LAYERS_ALIASES
    )
    if num_hidden_layers > MAX_LAYERS:
        raise ModelConfigError(
            f"{source}: {num_hidden_layers} hidden layers is not a real model "
            f"(at most {MAX_LAYERS})",
            source=source,
            field="num_hidden_layers",
            aliases=NUM_HIDDEN_LAYERS_ALIASES,
        )
    if num_experts_per_tok > num_experts:
        raise ModelConfigError(
            f"{source}: {num_experts_per_tok} experts per token "
            f"but only {num_experts} experts",
            source=source,
            field="num_experts_per_tok",
        )

    hidden_act, activation = _read_activation(scopes, raw)
    num_moe_layers = _count_moe_layers(scopes, num_hidden_layers)
    quant = _read_quantization(scopes)

    dtype_found = scopes.find(DTYPE_ALIASES, "dtype")
    dtype = str(dtype_found[1]) if dtype_found else None
    swiglu_limit = _optional_number(scopes, "swiglu_limit", ("swiglu_limit",))
    swiglu_alpha = _optional_number(scopes, "swiglu_alpha", ("swiglu_alpha",))
    if swiglu_alpha is None and activation == "swigluoai" and _is_gpt_oss(scopes):
        swiglu_alpha = GPT_OSS_SWIGLU_ALPHA
        scopes.used["swiglu_alpha"] = "gpt-oss constant 1.702 (transformers GptOssExperts.alpha; not in the config)"

    name = raw.get("_name_or_path")
    if not isinstance(name, str) or not name:
        name = default_name or source

    return MoEModelConfig(
        name=name,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_experts=num_experts,
        num_experts_per_tok=num_experts_per_tok,
        num_hidden_layers=num_hidden_layers,
        num_moe_layers=num_moe_layers,
        hidden_act=hidden_act,
        activation=activation,
        dtype=dtype,
        group_size=quant.group_size,
        act_order=quant.act_order,
        block_size=quant.block_size,
        quant_method=quant.quant_method,
        is_gated=activation not in _NON_GATED,
        bits=quant.bits,
        swiglu_limit=swiglu_limit,
        swiglu_alpha=swiglu_alpha,
        sources=tuple(scopes.used.items()),
    )


def _optional_number(scopes: _Scopes, field: str, aliases: tuple[str, ...]) -> float | None:
    """A finite int or float field, or None when absent."""
    found = scopes.find(aliases, field)
    if found is None:
        return None
    alias, value = found
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or value in (float("inf"), float("-inf")):
        raise ModelConfigError(
            f"{scopes.source}: {alias} = {value!r} is not a finite number (reading {field})",
            source=scopes.source, field=field, aliases=aliases,
        )
    return float(value)


def _model_type(scopes: _Scopes) -> str | None:
    for _, scope in scopes.entries:
        value = scope.get("model_type")
        if isinstance(value, str):
            return value
    return None


def _is_gpt_oss(scopes: _Scopes) -> bool:
    for _, scope in scopes.entries:
        if scope.get("model_type") == "gpt_oss":
            return True
        architectures = scope.get("architectures")
        if isinstance(architectures, list) and "GptOssForCausalLM" in architectures:
            return True
    return False


def _read_activation(scopes: _Scopes, raw: Mapping[str, Any]) -> tuple[str, str]:
    """(hidden_act as written, contract activation)."""
    found = scopes.find(HIDDEN_ACT_ALIASES, "hidden_act")
    hidden_act: str | None = None
    if found is not None:
        alias, value = found
        # DBRX writes {"name": "silu"}.
        if isinstance(value, Mapping):
            value = value.get("name")
        if not isinstance(value, str):
            raise ModelConfigError(
                f"{scopes.source}: {alias} = {found[1]!r} is not an activation name",
                source=scopes.source,
                field="hidden_act",
                aliases=HIDDEN_ACT_ALIASES,
            )
        hidden_act = value

    # gpt-oss configs say "silu", but its experts run the clamped, interleaved
    # swiglu that vLLM calls "swigluoai" (alpha 1.702, swiglu_limit).
    if _is_gpt_oss(scopes):
        scopes.used["activation"] = "model_type gpt_oss (its experts run swigluoai whatever hidden_act says)"
        return hidden_act or "swigluoai", "swigluoai"

    if hidden_act is None:
        raise ModelConfigError(
            f"{scopes.source}: missing hidden_act: "
            f"tried {', '.join(HIDDEN_ACT_ALIASES)} "
            f"(looked in: {scopes.where()})",
            source=scopes.source,
            field="hidden_act",
            aliases=HIDDEN_ACT_ALIASES,
        )
    activation = _ACTIVATIONS.get(hidden_act.lower())
    if activation is None:
        raise ModelConfigError(
            f"{scopes.source}: unsupported activation {hidden_act!r}; "
            f"known: {', '.join(sorted(_ACTIVATIONS))}",
            source=scopes.source,
            field="hidden_act",
            aliases=HIDDEN_ACT_ALIASES,
        )
    return hidden_act, activation


def _count_moe_layers(scopes: _Scopes, num_hidden_layers: int) -> int:
    """Layers holding routed experts; the rules are in the module docstring."""
    source = scopes.source

    pattern_found = scopes.find(("hybrid_override_pattern", "layers_block_type"), "num_moe_layers")
    if pattern_found is not None:
        alias, pattern = pattern_found
        if isinstance(pattern, str):
            kinds = list(pattern)
            moe_kind = "E"
        elif isinstance(pattern, list) and all(
            isinstance(item, str) for item in pattern
        ):
            kinds = list(pattern)
            # A list of letters ("M", "E", "*") or of words ("mamba", "moe").
            moe_kind = "E" if all(len(item) == 1 for item in kinds) else "moe"
        else:
            raise ModelConfigError(
                f"{source}: {alias} = {pattern!r} is neither a string "
                "nor a list of strings",
                source=source,
                field="num_moe_layers",
                aliases=(alias,),
            )
        if len(kinds) != num_hidden_layers:
            raise ModelConfigError(
                f"{source}: {alias} describes {len(kinds)} layers "
                f"but num_hidden_layers is {num_hidden_layers}",
                source=source,
                field="num_moe_layers",
                aliases=(alias,),
            )
        return sum(1 for kind in kinds if kind == moe_kind)

    enable = scopes.find(("enable_moe_block",))
    if enable is not None and enable[1] is False:
        scopes.used["num_moe_layers"] = "enable_moe_block = false"
        return 0

    period_found = scopes.find(("expert_layer_period",))
    if period_found is not None or _model_type(scopes) == "jamba":
        period = 2 if period_found is None else _check_int(
            period_found[1], minimum=1, source=source, field="num_moe_layers", alias=period_found[0])
        offset_found = scopes.find(("expert_layer_offset",))
        offset = 1 if offset_found is None else _check_int(
            offset_found[1], minimum=0, source=source, field="num_moe_layers", alias=offset_found[0])
        if offset >= period:
            raise ModelConfigError(
                f"{source}: expert_layer_offset = {offset} must be smaller than expert_layer_period = {period}",
                source=source, field="num_moe_layers", aliases=("expert_layer_offset", "expert_layer_period"))
        scopes.used["num_moe_layers"] = (f"layers i with i % expert_layer_period ({period}) == "
                                         f"expert_layer_offset ({offset})"
                                         + ("" if period_found and offset_found else "; Jamba defaults 2, 1"))
        return sum(1 for layer in range(num_hidden_layers) if layer % period == offset)

    first_dense = 0
    found = scopes.find(("first_k_dense_replace",))
    if found is not None:
        first_dense = _check_int(
            found[1], minimum=0, source=source, field="num_moe_layers", alias=found[0]
        )
    moe_freq = 1
    found = scopes.find(("moe_layer_freq",))
    if found is not None:
        moe_freq = _check_int(
            found[1], minimum=1, source=source, field="num_moe_layers", alias=found[0]
        )
    sparse_step = 1
    found = scopes.find(("decoder_sparse_step",))
    if found is not None:
        sparse_step = _check_int(
            found[1], minimum=1, source=source, field="num_moe_layers", alias=found[0]
        )
    dense_only: set[int] = set()
    found = scopes.find(("mlp_only_layers",))
    if found is not None:
        if not isinstance(found[1], list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in found[1]
        ):
            raise ModelConfigError(
                f"{source}: mlp_only_layers = {found[1]!r} "
                "is not a list of layer indices",
                source=source,
                field="num_moe_layers",
                aliases=("mlp_only_layers",),
            )
        dense_only = set(found[1])

    rules = [key for key, present in (
        ("first_k_dense_replace", first_dense != 0), ("moe_layer_freq", moe_freq != 1),
        ("decoder_sparse_step", sparse_step != 1), ("mlp_only_layers", bool(dense_only))) if present]
    scopes.used["num_moe_layers"] = (f"num_hidden_layers with {', '.join(rules)}" if rules
                                     else "every layer (num_hidden_layers)")
    return sum(
        1
        for layer in range(num_hidden_layers)
        if layer >= first_dense
        and layer % moe_freq == 0
        and (layer + 1) % sparse_step == 0
        and layer not in dense_only
    )


@dataclass(frozen=True)
class _Quantization:
    quant_method: str | None = None
    group_size: int | None = None
    bits: int | None = None
    act_order: bool = False
    block_size: tuple[int, ...] | None = None


def _read_quantization(scopes: _Scopes) -> _Quantization:
    """Read ``quantization_config``: GPTQ/AWQ groups, FP8 blocks, compressed-tensors."""
    source = scopes.source
    found = scopes.find(("quantization_config",), "quant_method")
    if found is None:
        return _Quantization()
    quant = found[1]
    if not isinstance(quant, Mapping):
        raise ModelConfigError(
            f"{source}: quantization_config = {quant!r} is not an object",
            source=source,
            field="quantization_config",
            aliases=("quantization_config",),
        )
    method = quant.get("quant_method")
    method = str(method) if method is not None else None

    if method == "compressed-tensors":
        return _read_compressed_tensors(quant, source)

    group_size = _optional_int(quant, "group_size", minimum=-1, source=source)
    bits = _optional_int(quant, "bits", minimum=1, source=source)
    desc_act = quant.get("desc_act")
    if desc_act is not None and not isinstance(desc_act, bool):
        raise ModelConfigError(
            f"{source}: quantization_config.desc_act = {desc_act!r} is not true/false",
            source=source,
            field="act_order",
            aliases=("desc_act",),
        )
    block = quant.get("weight_block_size")
    return _Quantization(
        quant_method=method,
        group_size=group_size,
        bits=bits,
        act_order=bool(desc_act),
        block_size=_block_size(block, source, "weight_block_size")
        if block is not None
        else None,
    )


def _read_compressed_tensors(quant: Mapping[str, Any], source: str) -> _Quantization:
    """compressed-tensors keeps its settings per config group; all must agree."""
    groups = quant.get("config_groups")
    seen: set[tuple[Any, ...]] = set()
    if isinstance(groups, Mapping):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if not isinstance(weights, Mapping):
                continue
            group_size = weights.get("group_size")
            if group_size is None and weights.get("strategy") == "channel":
                group_size = -1
            actorder = weights.get("actorder")
            block = weights.get("block_structure")
            seen.add(
                (
                    group_size,
                    weights.get("num_bits"),
                    actorder not in (None, False),
                    tuple(block) if isinstance(block, list) else block,
                )
            )
    if len(seen) > 1:
        raise ModelConfigError(
            f"{source}: compressed-tensors config_groups disagree on "
            "(group_size, num_bits, actorder, block_structure): "
            f"{sorted(map(repr, seen))}",
            source=source,
            field="group_size",
            aliases=("config_groups",),
        )
    if not seen:
        return _Quantization(quant_method="compressed-tensors")
    group_size, bits, act_order, block = seen.pop()
    return _Quantization(
        quant_method="compressed-tensors",
        group_size=_check_int(
            group_size,
            minimum=-1,
            source=source,
            field="group_size",
            alias="group_size",
        )
        if group_size is not None
        else None,
        bits=_check_int(bits, minimum=1, source=source, field="bits", alias="num_bits")
        if bits is not None
        else None,
        act_order=act_order,
        block_size=_block_size(list(block), source, "block_structure")
        if block is not None
        else None,
    )


def _optional_int(
    quant: Mapping[str, Any], key: str, *, minimum: int, source: str
) -> int | None:
    value = quant.get(key)
    if value is None:
        return None
    return _check_int(
        value,
        minimum=minimum,
        source=source,
        field=key,
        alias=f"quantization_config.{key}",
    )


def _block_size(value: Any, source: str, key: str) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
        )
    ):
        raise ModelConfigError(
            f"{source}: {key} = {value!r} is not a list of positive integers",
            source=source,
            field="block_size",
            aliases=(key,),
        )
    return tuple(value)
