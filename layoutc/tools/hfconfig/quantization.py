"""``quantization_config``, read by the one quantization reader `layoutc run` uses.

There is one definition of what a ``quantization_config`` means:
``layoutc.tools.checkpoints.quant.config.read_quantization`` (standard library only), which
turns it into the declared :class:`~layoutc.tools.checkpoints.quant.scheme.QuantScheme`
(GPTQ int4 / int8, AWQ int4, FP8 per block / channel / tensor, MXFP4) or refuses it with a
coded ``FormatError`` (LR150 an undeclared method, bit width or scheme; LR151 a malformed
value; LR152 a skip list that leaves the routed experts unquantized; LR158 a layout the
family cannot hold). This module only calls it and keeps what it said; it parses nothing.

A refusal is not a config error here: the model is still an MoE model, audit reports the
reader's code and message for every quantized contract instead of crashing (docs/audit.md,
"checkpoint format").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from layoutc.tools.checkpoints.errors import ModelConfigError
from layoutc.tools.checkpoints.formats import FormatError
from layoutc.tools.checkpoints.quant.config import read_quantization as read_scheme
from layoutc.tools.checkpoints.quant.scheme import QuantScheme

#: Where config.json keeps ``quantization_config``, in the order the reader looks.
_SCOPES = ((), ("text_config",))
#: Most (layer x expert) pairs a quantized config may name: the reader holds each expert module's
#: name to the skip lists and config-group targets, one by one (DeepSeek-V3: 61 x 256 = 15616;
#: 2000 x 128 takes about 2 s), so a hostile config cannot make reading it hang (issue 16 bounds).
MAX_EXPERT_MODULES = 1 << 17


@dataclass(frozen=True)
class Quantization:
    """What the run's reader says about the routed experts' weights.

    scheme: the declared scheme, None when unquantized or refused.
    error: (code, message) of the reader's FormatError (``"LR150"``, ...), else None.
    quant_method: ``quantization_config.quant_method`` as written (None: unquantized).
    where: the config key of ``quant_method`` (``quantization_config.quant_method`` or
        ``text_config.quantization_config.quant_method``), None when absent.
    """

    scheme: QuantScheme | None = None
    error: tuple[str, str] | None = None
    quant_method: str | None = None
    where: str | None = None

    @property
    def group_size(self) -> int | None:
        """Group along the reduction dim (elements; -1 one group per output channel)."""
        return self.scheme.group_size if self.scheme is not None else None

    @property
    def bits(self) -> int | None:
        return self.scheme.bits if self.scheme is not None else None

    @property
    def act_order(self) -> bool:
        """GPTQ desc_act as the reader normalises it (off with group_size -1, as vLLM 0.32)."""
        return self.scheme is not None and self.scheme.act_order

    @property
    def block_size(self) -> tuple[int, ...] | None:
        """FP8 weight block (rows, cols), else None."""
        return self.scheme.block if self.scheme is not None else None


def read_quantization(raw: Mapping[str, Any], *, expert_modules: int = 0, source: str = "<dict>") -> Quantization:
    """The routed experts' quantization of a parsed config.json (``raw`` as json.load gives it).

    expert_modules: the config's layers x experts (bounds the reader's per-module name checks).
    Never raises for a quantization the reader refuses: the FormatError's code and message
    are kept in ``error``. Raises ModelConfigError when a quantized config names more than
    :data:`MAX_EXPERT_MODULES` expert modules. Source of the rules:
    layoutc/tools/checkpoints/quant/config.py.
    """
    method, where = _method(raw)
    if where is not None and expert_modules > MAX_EXPERT_MODULES:
        raise ModelConfigError(
            f"{source}: a quantized config with {expert_modules} (layer, expert) pairs; layoutc reads "
            f"quantization_config for at most {MAX_EXPERT_MODULES} (each expert module's name is held "
            "to the skip lists)", source=source, field="quantization_config", aliases=("quantization_config",))
    try:
        scheme = read_scheme(dict(raw))
    except FormatError as exc:
        return Quantization(error=(exc.code, str(exc)), quant_method=method or "quantization_config",
                            where=where)
    if scheme is None:
        return Quantization()
    return Quantization(scheme=scheme, quant_method=method or scheme.method, where=where)


def _method(raw: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``quant_method`` as written and its key, where config.json has a quantization_config."""
    for path in _SCOPES:
        scope: Any = raw
        for key in path:
            scope = scope.get(key) if isinstance(scope, Mapping) else None
        quant = scope.get("quantization_config") if isinstance(scope, Mapping) else None
        if quant is not None:
            prefix = "".join(f"{k}." for k in path) + "quantization_config"
            method = quant.get("quant_method") if isinstance(quant, Mapping) else None
            return (method if isinstance(method, str) else None), f"{prefix}.quant_method"
    return None, None
