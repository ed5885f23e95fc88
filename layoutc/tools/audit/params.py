"""A model config as contract parameter values, and where each value came from (docs/audit.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from layoutc.compiler import ir
from layoutc.compiler.evaluate import Value
from layoutc.runtime.vocab import HF_DTYPES
from layoutc.tools.audit.formats import Taken
from layoutc.tools.hfconfig import MoEModelConfig

# A value a model config gives a contract parameter: a contract value, or a number with a
# fraction (gpt-oss's swiglu_alpha 1.702), which no contract domain (integers) holds, so a
# parameter it lands on refuses the model.
ModelValue = Value | float


# Contract parameter -> the MoEModelConfig field it is read from (for provenance).
PARAM_FIELDS: dict[str, str] = {
    "num_experts": "num_experts", "hidden_size": "hidden_size", "intermediate_size": "intermediate_size",
    "num_experts_per_tok": "num_experts_per_tok", "top_k": "num_experts_per_tok", "activation": "activation",
    "act_order": "quant_method", "group_size": "quant_method", "dtype": "dtype",
    "swiglu_limit": "swiglu_limit", "swiglu_alpha": "swiglu_alpha",
    "swiglu_limit_milli": "swiglu_limit", "swiglu_alpha_milli": "swiglu_alpha",
}
# Parameters only a swigluoai model has: a swigluoai model that does not state them is
# refused; for any other activation they are enumerated (the contract's admits decide).
# The language's numbers are integers: `swiglu_alpha_milli` carries 1.702 as 1702.
SWIGLU_PARAMS = ("swiglu_limit", "swiglu_alpha", "swiglu_limit_milli", "swiglu_alpha_milli")


def fmt_value(v: ModelValue) -> str:
    """A parameter value as the contract language writes it (``true``/``false``, numbers, names)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def domain_text(p: ir.Param) -> str:
    """A parameter's domain as the contract writes it: ``1..4096`` or ``{silu, gelu}``."""
    if p.kind == "range":
        return f"{p.low}..{p.high}"
    return "{" + ", ".join(fmt_value(v) for v in p.values) + "}"


def in_domain(p: ir.Param, v: ModelValue) -> bool:
    """Whether ``v`` is in ``p``'s domain (a bool is never an int; a float never is either)."""
    if p.kind == "range":
        return isinstance(v, int) and not isinstance(v, bool) and p.low <= v <= p.high
    if p.kind == "bool":
        return isinstance(v, bool)
    if p.kind == "set":
        return isinstance(v, int) and not isinstance(v, bool) and v in p.values
    return v in p.values


def rule_name(kind: str, span_line: int) -> str:
    """How a row names a broken rule: ``require line 12``, ``param line 3``, ``kernel line 40``."""
    return f"{kind} line {span_line}"


def param_sources(model: MoEModelConfig, names: Iterable[str]) -> dict[str, str]:
    """Where each contract parameter's value came from: the config key (hfconfig's record)."""
    out: dict[str, str] = {}
    for name in names:
        fld = PARAM_FIELDS.get(name)
        where = model.source_of(fld) if fld else None
        if name == "activation" and where is None:
            where = model.source_of("hidden_act")
        if name in ("group_size", "act_order") and where is not None:
            where = f"{where.rsplit('.', 1)[0]}.{'group_size' if name == 'group_size' else 'desc_act'}"
        if where is not None:
            out[name] = where
    return out


def _as_param_value(value: float) -> ModelValue:
    """A config number as a contract value: integral floats become ints (7.0 -> 7)."""
    return int(value) if float(value).is_integer() else value


def model_values(model: MoEModelConfig, taken: Taken | None = None) -> dict[str, ModelValue]:
    """Contract parameter values the model config determines (by parameter name).

    ``dtype`` and ``group_size`` are only candidates: a dtype outside the
    contract's enum, or an absent one, is enumerated instead (see the audit's
    parameter split, ``report.split_params``). ``swiglu_limit``/``swiglu_alpha``
    come from the config where it states them (integral values as ints; a
    non-integral one is outside any int domain). ``group_size`` and ``act_order`` are
    the quantization reader's (``MoEModelConfig.quant_scheme``'s numbers); ``taken``
    adds the parameters the checkpoint format fixes for one contract (``scheme``,
    ``block``: ``formats.takes``).
    """
    values: dict[str, ModelValue] = {
        "num_experts": model.num_experts,
        "hidden_size": model.hidden_size,
        "intermediate_size": model.intermediate_size,
        "num_experts_per_tok": model.num_experts_per_tok,
        "top_k": model.num_experts_per_tok,
        "activation": model.activation,
        "act_order": bool(model.act_order),
    }
    if model.group_size is not None:
        values["group_size"] = model.group_size
    if model.dtype is not None:
        dtype = model.dtype.removeprefix("torch.").lower()
        values["dtype"] = HF_DTYPES.get(dtype, dtype)
    for name in SWIGLU_PARAMS:
        number = getattr(model, name.removesuffix("_milli"))
        if number is not None:
            scaled = number * 1000 if name.endswith("_milli") else number
            if name.endswith("_milli") and abs(scaled - round(scaled)) < 1e-6:
                scaled = round(scaled)
            values[name] = _as_param_value(scaled)
    if taken is not None:
        values.update(dict(taken.params))
    return values


def kernel_activation_refusal(contract: ir.Contract, model: MoEModelConfig) -> tuple[str, str] | None:
    """(rule, reason) when the contract's kernel computes a fixed activation that is not
    the model's, or states none; None when the kernel's activation is a parameter (its
    domain and the contract's admits decide) or a literal equal to the model's."""
    kernel = contract.kernel
    if kernel is None or kernel.activation is None:
        where = rule_name("kernel", kernel.span.line) if kernel is not None else "contract"
        return where, ("the contract does not state which activation its kernel computes "
                       f"(the model needs {model.activation})")
    act = kernel.activation
    if isinstance(act, ir.Const) and act.value != model.activation:
        return (rule_name("kernel", act.span.line),
                f"this kernel computes only {act.value} (kernel `activation {act.value}`); the model needs "
                f"{model.activation} ({model.source_of('activation') or model.source_of('hidden_act') or 'hidden_act'})")
    return None


def contract_values(values: Mapping[str, ModelValue]) -> dict[str, Value]:
    """``values`` as contract values, once each has passed :func:`in_domain` (which no float does).

    Raises AssertionError on a float: a caller that evaluates a configuration holding one
    skipped the domain check (a bug in the audit, not in the input).
    """
    out: dict[str, Value] = {}
    for name, value in values.items():
        assert not isinstance(value, float), f"{name} = {value} reached evaluation outside every domain"
        out[name] = value
    return out
