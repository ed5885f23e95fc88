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

The modules: ``reading`` (files, bundled names, the bounds), ``keys`` (each family's
spellings and the scopes they are looked in), ``parse`` (the sizes, the activation,
SwiGLU), ``layers`` (MoE layer counting), ``quantization`` (``quantization_config``). The
result, :class:`MoEModelConfig`, is the record ``layoutc run``'s reader returns too, and lives
below both readers (``layoutc.tools.checkpoints.moeconfig``), as do the error
(``checkpoints.errors``) and the bounded JSON parser (``checkpoints.jsonread``), so the
checkpoint tools never import this package. Only the standard library is imported.
"""

from __future__ import annotations

from layoutc.tools.checkpoints.errors import ModelConfigError
from layoutc.tools.checkpoints.jsonread import MAX_INT_DIGITS, MAX_JSON_DEPTH
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.hfconfig.keys import (
    DTYPE_ALIASES,
    GPT_OSS_SWIGLU_ALPHA,
    HIDDEN_ACT_ALIASES,
    HIDDEN_SIZE_ALIASES,
    INTERMEDIATE_SIZE_ALIASES,
    NUM_EXPERTS_ALIASES,
    NUM_EXPERTS_PER_TOK_ALIASES,
    NUM_HIDDEN_LAYERS_ALIASES,
)
from layoutc.tools.hfconfig.parse import MAX_LAYERS, parse_model_config
from layoutc.tools.hfconfig.reading import MAX_CONFIG_BYTES, bundled_model_names, load_model_config

__all__ = [
    "DTYPE_ALIASES",
    "GPT_OSS_SWIGLU_ALPHA",
    "HIDDEN_ACT_ALIASES",
    "HIDDEN_SIZE_ALIASES",
    "INTERMEDIATE_SIZE_ALIASES",
    "MAX_CONFIG_BYTES",
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "MAX_LAYERS",
    "NUM_EXPERTS_ALIASES",
    "NUM_EXPERTS_PER_TOK_ALIASES",
    "NUM_HIDDEN_LAYERS_ALIASES",
    "MoEModelConfig",
    "ModelConfigError",
    "bundled_model_names",
    "load_model_config",
    "parse_model_config",
]
