"""The keys each model family spells a quantity with, and the scopes they are looked up in.

The spellings are not declared here: they are the family table's generic entry
(layoutc.tools.checkpoints.formats.GENERIC, from families.GENERIC_KEYS), so audit, run
and the proposer read one table.

Sub-configs are searched before the top level (``ffn_config`` of DBRX, ``text_config``
of Gemma-4 and other multimodal wrappers, ``llm_config``, ``language_config``); within
one scope the aliases are tried in order, and a JSON ``null`` counts as absent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from layoutc.runtime.vocab import ACTIVATIONS as VOCAB_ACTIVATIONS
from layoutc.runtime.vocab import HF_ACTIVATIONS
from layoutc.tools.checkpoints.errors import ModelConfigError
from layoutc.tools.checkpoints.formats import FORMATS, GENERIC

# Sub-configs searched before the top level, innermost first.
SUBCONFIG_KEYS: tuple[str, ...] = (
    "ffn_config",
    "text_config",
    "llm_config",
    "language_config",
)

# The quantities' spellings are the family table's generic entry (one table, issue 24):
# layoutc.tools.checkpoints.families.GENERIC_KEYS, read by `layoutc run`'s proposer too.
HIDDEN_SIZE_ALIASES: tuple[str, ...] = GENERIC.hidden_size
INTERMEDIATE_SIZE_ALIASES: tuple[str, ...] = GENERIC.intermediate_size
NUM_EXPERTS_ALIASES: tuple[str, ...] = GENERIC.num_experts
NUM_EXPERTS_PER_TOK_ALIASES: tuple[str, ...] = GENERIC.top_k
NUM_HIDDEN_LAYERS_ALIASES: tuple[str, ...] = GENERIC.num_hidden_layers
HIDDEN_ACT_ALIASES: tuple[str, ...] = GENERIC.activation
DTYPE_ALIASES: tuple[str, ...] = ("torch_dtype", "dtype")



# gpt-oss's SwiGLU alpha where its config leaves it out: the family table's default
# (transformers GptOssConfig.swiglu_alpha's default, which GptOssExperts reads).
_GPT_OSS_SWIGLU = FORMATS["gpt_oss"].swiglu_defaults
assert _GPT_OSS_SWIGLU is not None
GPT_OSS_SWIGLU_ALPHA: float = _GPT_OSS_SWIGLU[0]

# Checkpoint activation name -> layoutc contract activation name: vocab.HF_ACTIVATIONS (transformers'
# ACT2FN keys), and `swiglu`, which some configs write for silu(gate) * up.
ACTIVATIONS: dict[str, str] = {**HF_ACTIVATIONS, "swiglu": "silu"}
# Activations whose expert MLP has a single (up) half: out = act(up) (vocab.ACTIVATIONS, not gated).
NON_GATED: frozenset[str] = frozenset(name for name in ACTIVATIONS.values() if not VOCAB_ACTIVATIONS[name].gated)


class Scopes:
    """The dicts a field is looked up in, innermost first, with their names."""

    def __init__(self, raw: Mapping[str, Any], source: str) -> None:
        self.source = source
        self.entries: list[tuple[str, Mapping[str, Any]]] = [
            (key, raw[key])
            for key in SUBCONFIG_KEYS
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
        """The scopes searched, innermost first, for messages (``text_config, top level``)."""
        return ", ".join(name for name, _ in self.entries)

    def require_int(
        self, field: str, aliases: tuple[str, ...], *, minimum: int = 1
    ) -> int:
        """The first of ``aliases`` found, as an int >= ``minimum``; ModelConfigError when it is
        missing (naming every alias tried and every scope) or is not such an int."""
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
        return check_int(
            value,
            minimum=minimum,
            source=self.source,
            field=field,
            alias=alias,
            aliases=aliases,
        )


def check_int(
    value: Any,
    *,
    minimum: int,
    source: str,
    field: str,
    alias: str,
    aliases: tuple[str, ...] = (),
) -> int:
    """``value`` as an int >= ``minimum``; ModelConfigError naming ``alias`` and ``field`` otherwise."""
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




#: model_type -> (contract activation, source) for families whose transformers module hard-codes
#: the experts' activation, so that config.json carries no ``hidden_act``.
FIXED_ACTIVATIONS: dict[str, tuple[str, str]] = {
    "lfm2_moe": ("silu", "transformers 5.19 models/lfm2_moe/modeling_lfm2_moe.py: Lfm2MoeExperts.act_fn = F.silu; "
                 "Lfm2MoeConfig has no hidden_act"),
}


def model_type(scopes: Scopes) -> str | None:
    """The innermost ``model_type`` string, or None."""
    for _, scope in scopes.entries:
        value = scope.get("model_type")
        if isinstance(value, str):
            return value
    return None


def is_gpt_oss(scopes: Scopes) -> bool:
    """Whether any scope says gpt-oss (``model_type: gpt_oss`` or ``GptOssForCausalLM``)."""
    for _, scope in scopes.entries:
        if scope.get("model_type") == "gpt_oss":
            return True
        architectures = scope.get("architectures")
        if isinstance(architectures, list) and "GptOssForCausalLM" in architectures:
            return True
    return False
