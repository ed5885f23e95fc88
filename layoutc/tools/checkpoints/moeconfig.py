"""What a model's config.json says about its routed experts: :class:`MoEModelConfig`, the one
record both readers return.

- `layoutc audit`'s reader (layoutc.tools.hfconfig.load_model_config / parse_model_config) reads
  any config by the union of the families' key spellings (`formats.GENERIC`), records where each
  field came from (`sources`) and reads `quantization_config`; it raises ModelConfigError.
- `layoutc run`'s reader (layoutc.tools.checkpoints.formats.describe) reads one family's own keys
  (`CheckpointFormat`, declared or from `--format-file`), needs the family's layer list and the
  settings dict its reference reads; it raises FormatError LR101-LR103. It does not read
  `quantization_config` (run reads the scheme itself, checkpoints.quant.config.read_quantization):
  its quantization fields keep their defaults (None / False).

Below the format table and the readers (it imports only the format type and the quantized
scheme type), so both import it downward. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layoutc.tools.checkpoints.checkpoint_format import CheckpointFormat
from layoutc.tools.checkpoints.quant.scheme import QuantScheme


@dataclass(frozen=True)
class MoEModelConfig:
    """The MoE shape of one model, as layoutc needs it.

    Attributes:
        name: ``_name_or_path`` from the config, else the file or folder name (audit's reader)
            or the ``model_type`` (run's reader).
        hidden_size: H, the model width (elements).
        intermediate_size: I, the per-expert FFN width of the whole,
            unsharded model (elements). Divide by ``tp_size`` for
            ``intermediate_size_per_partition``.
        num_experts: E, routed experts per MoE layer (shared experts excluded).
        num_experts_per_tok: top-k, routed experts chosen per token.
        num_hidden_layers: decoder layers, MTP layers excluded.
        moe_layers: the indices of the layers that hold routed experts, ascending
            (``num_moe_layers`` is how many).
        hidden_act: the activation name exactly as the checkpoint spells it (run's reader, for a
            format with a fixed activation and a config that states none: that activation).
        activation: the layoutc contract name: ``silu``, ``gelu``,
            ``gelu_tanh``, ``relu2`` or ``swigluoai``.
        dtype: ``torch_dtype``/``dtype`` as written (e.g. ``"bfloat16"``), or
            ``None`` where the config does not say.
        is_gated: ``False`` only for single-half MLPs (``relu2``).
        format: the checkpoint format whose keys were read: the family's (run's reader), or
            ``formats.GENERIC``, the union of every family's spellings (audit's reader).
        norm_topk_prob: whether the top-k weights are renormalized: the config's JSON
            true/false, else the family's ``renormalize`` default (``formats.FORMATS``; audit's
            reader for a family not declared there: ``GENERIC``'s).
        text_config: the dict the MoE settings were read from (config.json itself, or its
            ``text_config``; audit's reader: every scope's keys merged, the innermost winning).
            Its clamp keys are what the reference and the activation check read.
        group_size: quantization group along the reduction dim (elements);
            ``-1`` per-channel; ``None`` if not group-quantized or not stated.
        act_order: GPTQ ``desc_act`` (or compressed-tensors ``actorder``).
        block_size: FP8 ``weight_block_size`` as (rows, cols), else ``None``.
        quant_method: ``quantization_config.quant_method`` as written
            (``"fp8"``, ``"gptq"``, ``"mxfp4"``, ...), else ``None``.
        bits: weight bits from ``quantization_config`` where stated, else ``None``.
        swiglu_limit: the clamp of a clamped SwiGLU (``swiglu_limit``), else ``None``.
        swiglu_alpha: the sigmoid scale of swigluoai (``swiglu_alpha``; gpt-oss: 1.702,
            the constant transformers hard-codes), else ``None``.
        quant_scheme: the routed experts' declared scheme, as `layoutc run`'s reader
            (layoutc/tools/checkpoints/quant/config.py) reads ``quantization_config``;
            ``group_size``, ``act_order``, ``block_size`` and ``bits`` are its numbers.
        quant_error: ``(code, message)`` when that reader refuses the config (``LR150``
            an undeclared method or scheme, ...), else ``None``.
        sources: ``(field, where)`` pairs: the config key each field was read from,
            e.g. ``("intermediate_size", "text_config.moe_intermediate_size")``, or a
            rule (``"default: every layer"``) where no key was used (audit's reader).

    The quantization fields (``group_size`` to ``bits``, ``quant_scheme``, ``quant_error``) are
    read by audit's reader only; run's reader leaves their defaults (module docstring).
    """

    name: str
    hidden_size: int
    intermediate_size: int
    num_experts: int
    num_experts_per_tok: int
    num_hidden_layers: int
    moe_layers: tuple[int, ...]
    hidden_act: str
    activation: str
    dtype: str | None
    is_gated: bool
    format: CheckpointFormat = field(repr=False)
    norm_topk_prob: bool
    text_config: dict[str, Any] = field(repr=False, hash=False)
    group_size: int | None = None
    act_order: bool = False
    block_size: tuple[int, ...] | None = None
    quant_method: str | None = None
    bits: int | None = None
    swiglu_limit: float | None = None
    swiglu_alpha: float | None = None
    quant_scheme: QuantScheme | None = None
    quant_error: tuple[str, str] | None = None
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def num_moe_layers(self) -> int:
        """How many decoder layers hold routed experts (``len(moe_layers)``)."""
        return len(self.moe_layers)

    def source_of(self, field: str) -> str | None:
        """The config key (or rule) ``field`` came from; ``None`` if not recorded."""
        return dict(self.sources).get(field)
