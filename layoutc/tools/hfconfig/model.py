"""What reading a model config gives: :class:`MoEModelConfig`, or a :class:`ModelConfigError`."""

from __future__ import annotations

from dataclasses import dataclass

from layoutc.tools.checkpoints.quant.scheme import QuantScheme


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
        quant_scheme: the routed experts' declared scheme, as `layoutc run`'s reader
            (layoutc/tools/checkpoints/quant/config.py) reads ``quantization_config``;
            ``group_size``, ``act_order``, ``block_size`` and ``bits`` are its numbers.
        quant_error: ``(code, message)`` when that reader refuses the config (``LR150``
            an undeclared method or scheme, ...), else ``None``.
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
    quant_scheme: QuantScheme | None = None
    quant_error: tuple[str, str] | None = None
    sources: tuple[tuple[str, str], ...] = ()

    def source_of(self, field: str) -> str | None:
        """The config key (or rule) ``field`` came from; ``None`` if not recorded."""
        return dict(self.sources).get(field)
