"""`layoutc audit`: for real model configs and TP degrees, which kernels take the fast path, at what cost.

For every (model, contract, variant, tp) the audit maps the model's Hugging Face
config onto the contract's parameters, evaluates the contract's `let`s and rules
in plain Python (``evaluate.py``; no solver), and reports:

* whether the contract admits the configuration (the kernel's fast path) and, if
  not, the first broken rule and its message;
* the per-rank intermediate width ``intermediate_size_per_partition`` (I_pp) and
  the width the kernel gets, ``intermediate_size_per_partition_padded`` (P);
* the cost of the padding: ``pad_fraction`` = (P - I_pp) / P, ``extra_flops_pct``
  = (P - I_pp) / I_pp * 100, and ``extra_bytes``, the zero padding added to every
  declared tensor of one rank, summed over the model's MoE layers. Under a block
  shard (``shard ... in blocks of B``) the last ranks hold fewer live rows than
  I_pp, so I_pp in these costs is the mean live width over the ranks, I / tp_size,
  and the bytes are the mean over the ranks (e.g. MiniMax-M2 block FP8 at tp=8:
  256-row shards, ranks 6 and 7 empty, pad fraction 25%).

The mapping rules (which model field sets which parameter, which checkpoint format
goes to which contract, what is enumerated) are in ``docs/audit.md``; the code
below follows them and the docstrings name them.

Entry points: :func:`audit` / :func:`audit_report` (pure: configs and contracts in,
rows out) and :func:`run_audit` (the CLI subcommand). Renderers:
:func:`render_text`, :func:`render_json`, :func:`render_markdown`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from layoutc.compiler import ir
from layoutc.compiler.evaluate import EvalError, Value, axis_sizes, eval_expr, needed_lets, param_deps
from layoutc.tools.hfconfig import ModelConfigError, MoEModelConfig, load_model_config

__all__ = [
    "CONTRACT_FORMATS",
    "DEFAULT_CONTRACTS_DIR",
    "QUANTIZING_GLUE",
    "AuditReport",
    "AuditRow",
    "CheckpointFormat",
    "Skipped",
    "audit",
    "audit_report",
    "checkpoint_format",
    "default_contracts_dir",
    "load_contracts",
    "parse_tp",
    "render_json",
    "render_markdown",
    "render_text",
    "run_audit",
]


def default_contracts_dir() -> Path | None:
    """The bundled contracts: the repository's ``contracts/`` in a source checkout or an
    editable install, else the installed data package ``layoutc_contracts`` (a
    non-editable install ships ``contracts/*.moe`` there; see pyproject.toml).
    ``None`` when neither exists."""
    repo = Path(__file__).resolve().parents[2]
    if (repo / "contracts").is_dir() and (repo / "pyproject.toml").is_file():
        return repo / "contracts"
    import importlib.util
    try:
        spec = importlib.util.find_spec("layoutc_contracts")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if Path(location).is_dir():
            return Path(location)
    return None


DEFAULT_CONTRACTS_DIR = default_contracts_dir()

I_PP = "intermediate_size_per_partition"
I_PADDED = "intermediate_size_per_partition_padded"

# Bytes per stored element, by torch dtype name (``tensor ... storage``).
DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "int32": 4, "bfloat16": 2, "float16": 2, "int16": 2,
    "int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}

# How configs spell a dtype -> the contract enum's spelling.
_DTYPE_ALIASES: dict[str, str] = {
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "float32": "float32", "fp32": "float32", "float": "float32",
}


# ---- checkpoint formats ------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointFormat:
    """What a model's checkpoint stores, as far as picking a contract goes.

    Attributes:
        key: ``unquantized``, ``gptq_int4``, ``fp8_block128``, ``mxfp8``, ``mxfp4``
            or ``nvfp4`` for formats some contract takes; anything else
            (``fp8_per_tensor``, ``gptq_8bit``, ``awq``, ...) is a format no
            bundled contract describes.
        label: how to name it in messages, e.g. ``"block-FP8 [128, 128]"``.
        params: contract parameters the format itself fixes (``scheme``).
    """

    key: str
    label: str
    params: tuple[tuple[str, Value], ...] = ()


_FORMAT_LABELS: dict[str, str] = {
    "unquantized": "unquantized",
    "gptq_int4": "GPTQ int4",
    "fp8_block128": "block-FP8 [128, 128]",
    "mxfp8": "MXFP8",
    "mxfp4": "MXFP4",
    "nvfp4": "NVFP4",
}

# Which checkpoint formats each known contract takes (the language has no clause for
# it). A contract not named here takes unquantized checkpoints if it declares no
# scale or zero-point tensor and its glue does not quantize (QUANTIZING_GLUE); a
# quantized contract not named here is skipped (say which format it takes by
# adding it to this table).
CONTRACT_FORMATS: dict[str, tuple[str, ...]] = {
    "vllm_cpu_grouped_gemm": ("unquantized",),
    "zentorch_fused_moe": ("unquantized",),
    "torch_grouped_mm": ("unquantized",),
    # The contract states the AITER_MXFP4_BF16 path (gpt-oss); unquantized models
    # are audited against the same 256-rounded allocation.
    "aiter_fused_moe": ("unquantized", "mxfp4"),
    "marlin_moe_wna16": ("gptq_int4",),
    "marlin_moe_fp8": ("fp8_block128", "mxfp8"),
    "flashinfer_nvfp4_moe": ("nvfp4",),
    "flashinfer_trtllm_mxfp4_moe": ("mxfp4",),
    # vLLM 0.32's CPU MXFP4 experts (AMX): the generic method (silu) and gpt-oss's (swigluoai)
    "vllm_cpu_mxfp4_moe": ("mxfp4",),
    "vllm_cpu_mxfp4_gpt_oss_moe": ("mxfp4",),
}


def checkpoint_format(model: MoEModelConfig) -> CheckpointFormat:
    """Classify the checkpoint from ``quantization_config`` (see docs/audit.md).

    * no ``quantization_config`` -> ``unquantized``
    * ``quant_method: gptq`` with ``bits: 4`` -> ``gptq_int4``
    * ``quant_method: fp8`` with ``weight_block_size [128, 128]`` -> ``fp8_block128``;
      ``[1, 32]`` (or ``quant_method: mxfp8``) -> ``mxfp8``
    * ``quant_method: mxfp4`` -> ``mxfp4``
    * ``quant_method`` ``nvfp4``/``modelopt_fp4``, or ``modelopt``/``compressed-tensors``
      with 4 bits in groups of 16 -> ``nvfp4``
    * anything else -> a format no contract takes (its key names it).
    """
    method = (model.quant_method or "").lower()
    block = tuple(model.block_size) if model.block_size else None
    if not method:
        return CheckpointFormat("unquantized", _FORMAT_LABELS["unquantized"])
    if method == "gptq":
        if model.bits == 4:
            return CheckpointFormat("gptq_int4", _FORMAT_LABELS["gptq_int4"])
        bits = f"{model.bits}-bit" if model.bits is not None else "unstated bits"
        return CheckpointFormat(f"gptq_{model.bits or 'unknown'}bit", f"GPTQ ({bits})")
    if method == "mxfp8" or (method == "fp8" and block == (1, 32)):
        return CheckpointFormat("mxfp8", _FORMAT_LABELS["mxfp8"], (("scheme", "mxfp8"),))
    if method == "fp8":
        if block == (128, 128):
            return CheckpointFormat("fp8_block128", _FORMAT_LABELS["fp8_block128"], (("scheme", "fp8_block128"),))
        if block is None:
            return CheckpointFormat("fp8_per_tensor", "FP8 without weight blocks (per-tensor/per-channel)")
        return CheckpointFormat("fp8_block_other", f"block-FP8 {list(block)}")
    if method == "mxfp4":
        return CheckpointFormat("mxfp4", _FORMAT_LABELS["mxfp4"])
    if method in ("nvfp4", "modelopt_fp4") or (
        method in ("modelopt", "compressed-tensors") and model.bits == 4 and model.group_size == 16
    ):
        return CheckpointFormat("nvfp4", _FORMAT_LABELS["nvfp4"])
    detail = []
    if model.bits is not None:
        detail.append(f"{model.bits}-bit")
    if model.group_size is not None:
        detail.append(f"group {model.group_size}")
    if block is not None:
        detail.append(f"block {list(block)}")
    suffix = f" ({', '.join(detail)})" if detail else ""
    return CheckpointFormat(method, f"{model.quant_method}{suffix}")


# Glue kinds (layoutc.compiler.check.GLUE_KINDS) that quantize float weights when they load
# them: their contracts state float tensors, but the kernel computes a weight-only
# quantized model, which no checkpoint is (docs/audit.md, "checkpoint format").
QUANTIZING_GLUE: dict[str, str] = {
    "torch_int4pack": "int4 weight-only (the glue quantizes float weights in groups at load)",
    "torch_int8pack": "int8 weight-only (the glue quantizes float weights per channel at load)",
}


def contract_formats(contract: ir.Contract) -> tuple[str, ...] | None:
    """The checkpoint formats a contract takes; None when audit cannot tell.

    ``()`` for a contract whose glue quantizes float weights at load
    (:data:`QUANTIZING_GLUE`): it computes a re-quantized model, not the checkpoint.
    """
    known = CONTRACT_FORMATS.get(contract.name)
    if known is not None:
        return known
    if contract.glue is not None and contract.glue.kind in QUANTIZING_GLUE:
        return ()
    if any(t.kind in ("scale", "zero") for t in contract.tensors):
        return None
    return ("unquantized",)


# ---- results -----------------------------------------------------------------------


@dataclass(frozen=True)
class AuditRow:
    """One (model, contract, variant, tp) verdict. Sizes are elements, bytes are bytes.

    ``variant`` holds only the parameters audit enumerated (those the model config
    does not determine); ``params`` holds every contract parameter as evaluated.
    When the model is refused before any variant matters (activation not in the
    contract, a size or ``tp_size`` outside the contract's domain), ``variant`` is
    empty and there is one row per TP degree.
    """

    model: str
    model_name: str
    contract: str
    variant: dict[str, Value] = field(hash=False)
    tp_size: int
    intermediate_size: int
    intermediate_size_per_partition: int | None
    intermediate_size_per_partition_padded: int | None
    admitted: bool
    rule: str | None
    reason: str | None
    pad_fraction: float | None
    extra_bytes: int | None
    extra_flops_pct: float | None
    num_moe_layers: int
    params: dict[str, Value] = field(hash=False, default_factory=dict)
    violations: tuple[tuple[str, str], ...] = ()
    sources: dict[str, str] = field(hash=False, default_factory=dict)

    def variant_text(self) -> str:
        return ", ".join(f"{k}={_fmt_value(v)}" for k, v in self.variant.items()) or "-"

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_name": self.model_name,
            "contract": self.contract,
            "variant": {k: v for k, v in self.variant.items()},
            "tp_size": self.tp_size,
            "intermediate_size": self.intermediate_size,
            "intermediate_size_per_partition": self.intermediate_size_per_partition,
            "intermediate_size_per_partition_padded": self.intermediate_size_per_partition_padded,
            "admitted": self.admitted,
            "rule": self.rule,
            "reason": self.reason,
            "pad_fraction": None if self.pad_fraction is None else round(self.pad_fraction, 6),
            "extra_bytes": self.extra_bytes,
            "extra_flops_pct": None if self.extra_flops_pct is None else round(self.extra_flops_pct, 4),
            "num_moe_layers": self.num_moe_layers,
            "params": {k: v for k, v in self.params.items()},
            "violations": [{"rule": r, "reason": m} for r, m in self.violations],
            "sources": dict(self.sources),
        }


@dataclass(frozen=True)
class Skipped:
    """A (model, contract) pair with no rows, and why (a checkpoint-format mismatch, usually)."""

    model: str
    model_name: str
    contract: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "model_name": self.model_name, "contract": self.contract,
                "reason": self.reason}


@dataclass(frozen=True)
class AuditReport:
    rows: tuple[AuditRow, ...]
    skipped: tuple[Skipped, ...]
    models: tuple[tuple[str, MoEModelConfig], ...] = ()


# ---- the audit ---------------------------------------------------------------------


def _fmt_value(v: Value) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _domain_text(p: ir.Param) -> str:
    if p.kind == "range":
        return f"{p.low}..{p.high}"
    return "{" + ", ".join(_fmt_value(v) for v in p.values) + "}"


def _in_domain(p: ir.Param, v: Value) -> bool:
    if p.kind == "range":
        return isinstance(v, int) and not isinstance(v, bool) and p.low <= v <= p.high
    if p.kind == "bool":
        return isinstance(v, bool)
    if p.kind == "set":
        return isinstance(v, int) and not isinstance(v, bool) and v in p.values
    return v in p.values


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


def _as_param_value(value: float) -> Value | float:
    """A config number as a contract value: integral floats become ints (7.0 -> 7)."""
    return int(value) if float(value).is_integer() else value


def _model_values(model: MoEModelConfig, fmt: CheckpointFormat) -> dict[str, Value]:
    """Contract parameter values the model config determines (by parameter name).

    ``dtype`` and ``group_size`` are only candidates: a dtype outside the
    contract's enum, or an absent one, is enumerated instead (see _fixed_and_free).
    ``swiglu_limit``/``swiglu_alpha`` come from the config where it states them
    (integral values as ints; a non-integral one is outside any int domain).
    """
    values: dict[str, Value] = {
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
        values["dtype"] = _DTYPE_ALIASES.get(dtype, dtype)
    for name in SWIGLU_PARAMS:
        number = getattr(model, name.removesuffix("_milli"))
        if number is not None:
            scaled = number * 1000 if name.endswith("_milli") else number
            if name.endswith("_milli") and abs(scaled - round(scaled)) < 1e-6:
                scaled = round(scaled)
            values[name] = _as_param_value(scaled)  # type: ignore[assignment]
    values.update(dict(fmt.params))
    return values


def kernel_activation_refusal(contract: ir.Contract, model: MoEModelConfig) -> tuple[str, str] | None:
    """(rule, reason) when the contract's kernel computes a fixed activation that is not
    the model's, or states none; None when the kernel's activation is a parameter (its
    domain and the contract's admits decide) or a literal equal to the model's."""
    kernel = contract.kernel
    if kernel is None or kernel.activation is None:
        where = _rule_name("kernel", kernel.span.line) if kernel is not None else "contract"
        return where, ("the contract does not state which activation its kernel computes "
                       f"(the model needs {model.activation})")
    act = kernel.activation
    if isinstance(act, ir.Const) and act.value != model.activation:
        return (_rule_name("kernel", act.span.line),
                f"this kernel computes only {act.value} (kernel `activation {act.value}`); the model needs "
                f"{model.activation} ({model.source_of('activation') or model.source_of('hidden_act') or 'hidden_act'})")
    return None


@dataclass(frozen=True)
class _Prepared:
    """Per-contract data computed once: rules split by kind, lets by name."""

    contract: ir.Contract
    lets: dict[str, ir.Let]
    requires: tuple[ir.Rule, ...]
    admits: tuple[ir.Rule, ...]


def _prepare(contract: ir.Contract) -> _Prepared:
    return _Prepared(contract, {let.name: let for let in contract.lets}, contract.requires, contract.admits)


def _variants(prep: _Prepared, free: list[ir.Param], fixed: Mapping[str, Value]) -> list[dict[str, Value]]:
    """Every combination of the free parameters' values, minus the inconsistent ones.

    A combination is inconsistent with this checkpoint when it breaks a `require`
    that reads at least one free parameter and not ``tp_size`` (e.g. marlin_moe_fp8's
    scheme/scale_dtype pairing: block-FP8 scales are float32): no TP degree could
    make it hold, so it is not a configuration worth a row. If every combination
    is inconsistent, all are kept, so the rows show the broken require.
    """
    names = [p.name for p in free]
    free_names = set(names)
    pruning = []
    for rule in prep.requires:
        deps = param_deps(rule.cond, prep.lets)
        if deps & free_names and "tp_size" not in deps and deps <= free_names | set(fixed):
            pruning.append((rule, needed_lets(rule.cond, prep.lets)))
    combos: list[dict[str, Value]] = [dict(zip(names, combo, strict=True))
                                      for combo in itertools.product(*(p.values for p in free))]
    kept: list[dict[str, Value]] = []
    for variant in combos:
        env: dict[str, Value] = dict(fixed)
        env.update(variant)
        ok = True
        for rule, lets in pruning:
            local = dict(env)
            try:
                for let in lets:
                    local[let.name] = eval_expr(let.value, local)
                ok = bool(eval_expr(rule.cond, local))
            except EvalError:
                ok = False
            if not ok:
                break
        if ok:
            kept.append(variant)
    return kept or combos


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _extra_elements_bytes(contract: ir.Contract, env: Mapping[str, Value]) -> int | None:
    """Bytes of padding over every declared tensor for one layer of one rank.

    Per axis, sizes are in storage elements: a segmented axis counts all its
    segments, a groups axis counts groups (one when the group size is -1), and a
    packed axis counts packed storage elements (rounded up).
    """
    total = 0
    for tensor in contract.tensors:
        storage = tensor.storage
        if storage.startswith("param:"):
            storage = str(env.get(storage.removeprefix("param:"), ""))
        width = DTYPE_BYTES.get(storage)
        if width is None:
            return None
        logical: Fraction = Fraction(1)
        padded = 1
        for axis in tensor.axes:
            lo: Fraction = Fraction(int(eval_expr(axis.logical, env)))
            pa = int(eval_expr(axis.padded, env))
            mean = _mean_live(contract, tensor, axis, env)
            if mean is not None:
                lo = mean
            if axis.group_size is not None:
                group = int(eval_expr(axis.group_size, env))
                if group == -1:
                    lo, pa = Fraction(1), 1
                else:
                    lo = Fraction(_cdiv(int(lo), group)) if mean is None else lo / group
                    pa = _cdiv(pa, group)
            lo *= axis.segments
            pa *= axis.segments
            if axis.pack > 1:
                lo = Fraction(_cdiv(int(lo), axis.pack)) if mean is None else lo / axis.pack
                pa = _cdiv(pa, axis.pack)
            logical *= lo
            padded *= pa
        total += (padded - logical) * width
    return round(total)


def _mean_live(contract: ir.Contract, tensor: ir.Tensor, axis: ir.Axis, env: Mapping[str, Value]) -> Fraction | None:
    """The mean live width of a block-sharded intermediate axis over the ranks, FULL / tp_size
    (values; every full entry is on exactly one rank, the coverage property), or None."""
    shard = contract.block_shard
    if shard is None or not ir.is_intermediate(tensor, axis):
        return None
    tp = env.get(shard.count)
    full = eval_expr(shard.full, env)
    if not isinstance(tp, int) or not isinstance(full, int) or tp <= 0:
        return None
    return Fraction(full, tp)


def _rule_name(kind: str, span_line: int) -> str:
    return f"{kind} line {span_line}"


def _evaluate_row(prep: _Prepared, config: dict[str, Value], num_moe_layers: int, activation: str | None = None,
                  unstated: Sequence[tuple[str, float]] = ()) -> dict[str, Any]:
    """Lets, rules, kernel aligns and costs of one concrete configuration.

    With ``activation`` (the model's), the kernel's `activation` clause is evaluated
    in this configuration and must equal it; ``unstated`` are (name, value) SwiGLU
    constants the model has and the contract has no parameter for: a row whose
    kernel computes swigluoai cannot be confirmed and is refused.
    """
    contract = prep.contract
    env: dict[str, Value] = dict(config)
    for let in contract.lets:
        try:
            env[let.name] = eval_expr(let.value, env)
        except EvalError:
            continue  # a later reference reports it; a broken require usually explains it

    def broken(rules: Iterable[ir.Rule]) -> list[tuple[str, str]]:
        out = []
        for rule in rules:
            try:
                holds = bool(eval_expr(rule.cond, env))
                message = rule.message
            except EvalError as exc:
                holds, message = False, f"{rule.message} (undefined here: {exc})"
            if not holds:
                out.append((_rule_name(rule.kind, rule.span.line), message))
        return out

    result: dict[str, Any] = {"params": {p.name: config[p.name] for p in contract.params},
                              I_PP: None, I_PADDED: None, "violations": ()}
    violations = broken(prep.requires)
    if violations:
        # Not a well-formed configuration: its lets (I_pp = I // tp) are not sizes.
        result["violations"] = tuple(violations)
        return result

    def size(name: str) -> int | None:
        value = env.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    i_pp, padded = size(I_PP), size(I_PADDED)
    result[I_PP], result[I_PADDED] = i_pp, padded
    violations = broken(prep.admits)
    if activation is not None and contract.kernel is not None and contract.kernel.activation is not None:
        act = contract.kernel.activation
        try:
            computed = eval_expr(act, env)
        except EvalError as exc:
            computed = f"<undefined: {exc}>"
        where = _rule_name("kernel", act.span.line)
        if computed != activation:
            violations.insert(0, (where, f"the kernel computes {computed} here; the model needs {activation}"))
        elif computed == "swigluoai":
            for name, value in unstated:
                violations.insert(0, (where, f"the model's swigluoai uses {name} = {value:g}, and this contract "
                                             f"has no {name} parameter: audit cannot confirm the kernel uses "
                                             "the same constant"))
    if not violations and contract.kernel is not None:
        # The verifier proves these for every admitted configuration; checked here
        # concretely so an unverified contract cannot report a false fast path.
        try:
            sizes = axis_sizes(contract, env)
            for align in contract.kernel.aligns:
                if not eval_expr(align.cond, env, sizes):
                    violations.append((_rule_name("align", align.span.line), align.message))
        except EvalError as exc:
            violations.append(("align", f"kernel alignment could not be evaluated: {exc}"))
    result["violations"] = tuple(violations)
    if violations:
        return result
    if i_pp is not None and padded is not None:
        live = _mean_live(contract, contract.weight("w2"), contract.weight("w2").axis("k"), env)
        mean = float(live) if live is not None else i_pp
        result["pad_fraction"] = (padded - mean) / padded if padded > 0 else None
        result["extra_flops_pct"] = (padded - mean) / mean * 100 if mean > 0 else None
    try:
        per_layer = _extra_elements_bytes(contract, env)
    except EvalError:
        per_layer = None
    result["extra_bytes"] = None if per_layer is None else per_layer * num_moe_layers
    return result


def _model_entries(
    models: Mapping[str, MoEModelConfig] | Sequence[MoEModelConfig | tuple[str, MoEModelConfig]],
) -> list[tuple[str, MoEModelConfig]]:
    if isinstance(models, Mapping):
        return list(models.items())
    out: list[tuple[str, MoEModelConfig]] = []
    for entry in models:
        if isinstance(entry, MoEModelConfig):
            out.append((entry.name, entry))
        else:
            label, model = entry
            out.append((label, model))
    return out


def audit_report(
    models: Mapping[str, MoEModelConfig] | Sequence[MoEModelConfig | tuple[str, MoEModelConfig]],
    tps: Sequence[int],
    contracts: Sequence[ir.Contract],
) -> AuditReport:
    """Rows and skipped pairs for every model x contract x variant x TP degree.

    Args:
        models: configs from ``hfconfig.load_model_config``, each labelled by
            ``config.name``; or (label, config) pairs; or a {label: config} map.
            The label is the row's ``model`` field (the CLI uses the argument as typed).
        tps: TP degrees (positive ints), in the order rows should list them.
        contracts: checked contracts (``check.load``), in the order to list them.

    Rows are ordered model, contract, variant, TP. Pure: no I/O, no solver.
    """
    rows: list[AuditRow] = []
    skipped: list[Skipped] = []
    prepared = [_prepare(c) for c in contracts]
    entries = _model_entries(models)
    for label, model in entries:
        fmt = checkpoint_format(model)
        determined = _model_values(model, fmt)
        for prep in prepared:
            contract = prep.contract
            formats = contract_formats(contract)
            if formats is None:
                skipped.append(Skipped(label, model.name, contract.name,
                                       f"{contract.name} declares scale/zero-point tensors but audit does not "
                                       "know which checkpoint format it takes (add it to "
                                       "layoutc.tools.audit.CONTRACT_FORMATS)"))
                continue
            if not formats and contract.glue is not None:
                skipped.append(Skipped(label, model.name, contract.name,
                                       f"{contract.name} runs {QUANTIZING_GLUE[contract.glue.kind]}; no checkpoint "
                                       f"is stored that way (this one is {fmt.label}): audit answers how the "
                                       "checkpoint runs, not what re-quantizing it would give"))
                continue
            if fmt.key not in formats:
                wanted = " or ".join(_FORMAT_LABELS.get(f, f) for f in formats)
                skipped.append(Skipped(label, model.name, contract.name,
                                       f"checkpoint is {fmt.label}; {contract.name} takes {wanted} checkpoints"))
                continue
            rows.extend(_audit_pair(label, model, prep, determined, tps, skipped))
    return AuditReport(tuple(rows), tuple(skipped), tuple(entries))


def _audit_pair(label: str, model: MoEModelConfig, prep: _Prepared, determined: Mapping[str, Value],
                tps: Sequence[int], skipped: list[Skipped]) -> list[AuditRow]:
    contract = prep.contract
    fixed: dict[str, Value] = {}
    free: list[ir.Param] = []
    # (rule, reason), the same for every variant and TP
    refusal: tuple[str, str] | None = kernel_activation_refusal(contract, model)
    for p in contract.params:
        if p.name == "tp_size":
            continue
        value = determined.get(p.name)
        if p.name == "dtype" and value is not None and not _in_domain(p, value):
            value = None  # the model's dtype is not one this kernel takes: enumerate the enum
        if value is None and p.name in SWIGLU_PARAMS and model.activation == "swigluoai" and refusal is None:
            # the model runs swigluoai but its config states no such constant
            refusal = (_rule_name("param", p.span.line),
                       f"the model's config states no {p.name}, and this contract's kernel needs one of "
                       f"{_domain_text(p)}")
        if value is None and p.default is not None and (p.name not in SWIGLU_PARAMS or model.activation != "swigluoai"):
            value = p.default  # the contract's own default (0: "this model states no such constant")
        if value is None and p.name in SWIGLU_PARAMS and model.activation != "swigluoai":
            # A SwiGLU constant means nothing to this model's activation: one value (the
            # domain's first) stands for all, shown in the row's variant, instead of one
            # row per value (or a skipped pair, for a range).
            first = p.low if p.kind == "range" else p.values[0]
            free.append(dataclasses.replace(p, kind="set", values=(first,), low=int(first), high=int(first))
                        if p.kind == "range" else dataclasses.replace(p, values=(first,)))
            continue
        if value is None:
            if not p.finite:
                skipped.append(Skipped(label, model.name, contract.name,
                                       f"parameter {p.name} ({_domain_text(p)}) is not determined by the model "
                                       "config and is not a finite set to enumerate"))
                return []
            free.append(p)
            continue
        fixed[p.name] = value
        if refusal is None and not _in_domain(p, value):
            where = _rule_name("param", p.span.line)
            if p.name == "activation":
                refusal = (where, f"activation {value} not supported by this kernel "
                                  f"(supported: {', '.join(map(str, p.values))})")
            else:
                refusal = (where, f"{p.name} = {_fmt_value(value)} is outside this contract's "
                                  f"domain {_domain_text(p)}")
    count = 1
    for p in free:
        count *= max(1, len(p.values))
    if count > MAX_VARIANTS and refusal is None:
        skipped.append(Skipped(label, model.name, contract.name,
                               f"{count} combinations of the parameters the config does not determine "
                               f"({', '.join(p.name for p in free)}); audit enumerates at most {MAX_VARIANTS}"))
        return []
    variants = _variants(prep, free, fixed) if refusal is None else [{}]
    tp_param = next((p for p in contract.params if p.name == "tp_size"), None)
    rows: list[AuditRow] = []
    sources = param_sources(model, fixed)
    if model.source_of("num_moe_layers"):
        sources["num_moe_layers"] = str(model.source_of("num_moe_layers"))
    # The clamp is a config key (swiglu_limit): a contract that cannot say which clamp its
    # kernel applies cannot be confirmed for a model that clamps.
    declared = {p.name for p in contract.params}
    unstated = [("swiglu_limit", model.swiglu_limit)] if model.swiglu_limit is not None and not (
        {"swiglu_limit", "swiglu_limit_milli"} & declared) else []

    def refused(tp: int, rule: str, reason: str) -> AuditRow:
        params = dict(fixed)
        if tp_param is not None:
            params["tp_size"] = tp
        return AuditRow(label, model.name, contract.name, {}, tp, model.intermediate_size, None, None, False,
                        rule, reason, None, None, None, model.num_moe_layers, params, ((rule, reason),),
                        dict(sources))

    for variant in variants:
        for tp in tps:
            if refusal is not None:
                rows.append(refused(tp, *refusal))
                continue
            if tp_param is not None and not _in_domain(tp_param, tp):
                if variant is variants[0]:
                    rows.append(refused(tp, _rule_name("param", tp_param.span.line),
                                        f"tp_size = {tp} is outside this contract's domain "
                                        f"{_domain_text(tp_param)}"))
                continue
            config = dict(fixed)
            config.update(variant)
            if tp_param is not None:
                config["tp_size"] = tp
            r = _evaluate_row(prep, config, model.num_moe_layers, model.activation, unstated)
            violations = r["violations"]
            rule, reason = violations[0] if violations else (None, None)
            rows.append(AuditRow(
                model=label, model_name=model.name, contract=contract.name, variant=dict(variant),
                tp_size=tp, intermediate_size=model.intermediate_size,
                intermediate_size_per_partition=r[I_PP], intermediate_size_per_partition_padded=r[I_PADDED],
                admitted=not violations, rule=rule, reason=reason,
                pad_fraction=r.get("pad_fraction"), extra_bytes=r.get("extra_bytes"),
                extra_flops_pct=r.get("extra_flops_pct"), num_moe_layers=model.num_moe_layers,
                params=r["params"], violations=tuple(violations), sources=dict(sources),
            ))
    # A TP degree outside the domain gets one row (variant {}), listed with the first variant's.
    return rows


def audit(
    models: Mapping[str, MoEModelConfig] | Sequence[MoEModelConfig | tuple[str, MoEModelConfig]],
    tps: Sequence[int],
    contracts: Sequence[ir.Contract],
) -> list[AuditRow]:
    """One :class:`AuditRow` per (model, contract, variant, tp); see :func:`audit_report`."""
    return list(audit_report(models, tps, contracts).rows)


# ---- rendering ---------------------------------------------------------------------


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    if n == 0:
        return "0 B"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError


def _pct(x: float | None, scale: float = 1.0, sign: str = "") -> str:
    return "-" if x is None else f"{sign}{x * scale:.1f}%"


def _size(x: int | None) -> str:
    return "-" if x is None else str(x)


def _verdict(row: AuditRow) -> str:
    return "yes" if row.admitted else f"NO  {row.rule}: {row.reason}"


def _model_line(label: str, m: MoEModelConfig) -> str:
    fmt = checkpoint_format(m)
    name = f"{label} ({m.name})" if m.name != label else label
    swiglu = "".join(f" {k}={v:g}" for k, v in (("swiglu_limit", m.swiglu_limit), ("swiglu_alpha", m.swiglu_alpha))
                     if v is not None)
    return (f"{name}: E={m.num_experts} H={m.hidden_size} I={m.intermediate_size} top-{m.num_experts_per_tok} "
            f"{m.activation}{swiglu} {m.dtype or 'dtype unstated'} {fmt.label}, {m.num_moe_layers} MoE layers")


_SOURCE_LABELS = (("E", "num_experts"), ("H", "hidden_size"), ("I", "intermediate_size"),
                  ("top-k", "num_experts_per_tok"), ("activation", "hidden_act"), ("dtype", "dtype"),
                  ("swiglu_limit", "swiglu_limit"), ("swiglu_alpha", "swiglu_alpha"),
                  ("MoE layers", "num_moe_layers"))


def _sources_line(m: MoEModelConfig) -> str:
    where = dict(m.sources)
    if "activation" in where:
        where["hidden_act"] = where["activation"]
    parts = [f"{short} <- {where[fld]}" for short, fld in _SOURCE_LABELS if fld in where]
    return "  from: " + "; ".join(parts)


def model_json(label: str, m: MoEModelConfig) -> dict[str, Any]:
    """One model's numbers and the config key each came from (``sources``)."""
    return {"model": label, "model_name": m.name, "num_experts": m.num_experts, "hidden_size": m.hidden_size,
            "intermediate_size": m.intermediate_size, "num_experts_per_tok": m.num_experts_per_tok,
            "num_hidden_layers": m.num_hidden_layers, "num_moe_layers": m.num_moe_layers,
            "activation": m.activation, "hidden_act": m.hidden_act, "dtype": m.dtype,
            "swiglu_limit": m.swiglu_limit, "swiglu_alpha": m.swiglu_alpha,
            "checkpoint_format": checkpoint_format(m).key, "sources": dict(m.sources)}


TEXT_LEGEND = """\
legend:
  I_pp      intermediate_size / tp: the logical per-rank width (a block shard's rank width,
            whose live rows average intermediate_size / tp over the ranks)
  padded    the width the kernel gets (intermediate_size_per_partition_padded)
  pad       (padded - I_pp) / padded: share of the kernel's intermediate dim that is zeros
            (block shards: with the mean live width, so empty and short ranks count)
  +mem/rank zero padding added to every declared tensor of one rank, all MoE layers (GiB = 2^30 B)
  +flops    (padded - I_pp) / I_pp: extra MoE GEMM arithmetic
  fast path yes = the contract admits it; NO = the first broken rule (line in the contract) and its message
  -         not applicable (not admitted, or the contract does not say)"""


def render_text(report: AuditReport) -> str:
    """An aligned table per model, its skipped contracts, and a legend."""
    headers = ("contract", "variant", "tp", "I_pp", "padded", "pad", "+mem/rank", "+flops", "fast path")
    cells: list[tuple[str, ...]] = [
        (r.contract, r.variant_text(), str(r.tp_size), _size(r.intermediate_size_per_partition),
         _size(r.intermediate_size_per_partition_padded), _pct(r.pad_fraction, 100),
         _human_bytes(r.extra_bytes), _pct(r.extra_flops_pct, 1, "+"), _verdict(r))
        for r in report.rows
    ]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers[:-1])]
    right = {2, 3, 4, 5, 6, 7}

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(values[:-1], widths, strict=True))]
        return "  " + "  ".join(parts) + "  " + values[-1]

    out: list[str] = []
    by_model: dict[str, list[int]] = {}
    for i, r in enumerate(report.rows):
        by_model.setdefault(r.model, []).append(i)
    labels = [label for label, _ in report.models] or list(by_model)
    configs = dict(report.models)
    for label in labels:
        if label in configs:
            out.append(_model_line(label, configs[label]))
            out.append(_sources_line(configs[label]))
        else:
            out.append(label)
        indices = by_model.get(label, [])
        if indices:
            out.append(line(headers).rstrip())
            out.extend(line(cells[i]).rstrip() for i in indices)
        reasons: dict[str, list[str]] = {}
        for s in report.skipped:
            if s.model == label:
                reasons.setdefault(s.reason.split("; ")[0], []).append(s.contract)
        for why, names in reasons.items():
            out.append(f"  skipped: {', '.join(names)} ({why})")
        if not indices and not reasons:
            out.append("  (no contracts)")
        out.append("")
    out.append(TEXT_LEGEND)
    return "\n".join(out) + "\n"


def render_json(report: AuditReport) -> str:
    """``{"models": [...], "rows": [...], "skipped": [...]}``; the fields are documented in docs/audit.md."""
    doc = {"models": [model_json(label, m) for label, m in report.models],
           "rows": [r.to_json() for r in report.rows], "skipped": [s.to_json() for s in report.skipped]}
    return json.dumps(doc, indent=2) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: AuditReport) -> str:
    """A GitHub-flavoured table (one row per audit row) and a list of skipped pairs."""
    out = ["| model | contract | variant | TP | I_pp | padded | pad | extra mem / rank | extra FLOPs | fast path |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in report.rows:
        verdict = "yes" if r.admitted else f"**no**: {r.rule}: {r.reason}"
        out.append("| " + " | ".join(_md(c) for c in (
            r.model, f"`{r.contract}`", r.variant_text(), str(r.tp_size),
            _size(r.intermediate_size_per_partition), _size(r.intermediate_size_per_partition_padded),
            _pct(r.pad_fraction, 100), _human_bytes(r.extra_bytes), _pct(r.extra_flops_pct, 1, "+"),
            verdict)) + " |")
    if report.models:
        out.append("")
        out.append("Where the numbers come from (config keys):")
        out.append("")
        out.extend(f"- {_md(label)}: {_md(_sources_line(m).removeprefix('  from: '))}" for label, m in report.models)
    if report.skipped:
        out.append("")
        out.append("Skipped (model, contract) pairs:")
        out.append("")
        out.extend(f"- {_md(s.model)} / `{s.contract}`: {_md(s.reason)}" for s in report.skipped)
    return "\n".join(out) + "\n"


# ---- CLI ---------------------------------------------------------------------------


MAX_TP_DEGREES = 64
MAX_TP = 1 << 20
MAX_VARIANTS = 4096  # per (model, contract): the product of the enumerated domains


def parse_tp(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4] (duplicates dropped, order kept); ValueError with a message.

    At most MAX_TP_DEGREES degrees, each in 1..MAX_TP (bounded work on any input)."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if len(part) > 20:
                raise ValueError
            value = int(part)
        except ValueError:
            raise ValueError(f"--tp: {part[:40]!r} is not an integer (expected e.g. --tp 1,2,4,8)") from None
        if not 1 <= value <= MAX_TP:
            raise ValueError(f"--tp: {value} is not a TP degree in 1..{MAX_TP}")
        if value not in values and len(values) >= MAX_TP_DEGREES:
            raise ValueError(f"--tp: more than {MAX_TP_DEGREES} TP degrees")
        if value not in values:
            values.append(value)
    if not values:
        raise ValueError(f"--tp {text!r}: expected comma-separated TP degrees, e.g. --tp 1,2,4,8")
    return values


def load_contracts(paths: Sequence[str]) -> tuple[list[ir.Contract], str | None]:
    """Load contract files (folders expand to their ``*.moe``). Returns (contracts, error text).

    See :func:`load_contracts_diags` for the diagnostics themselves."""
    contracts, diags, sources = load_contracts_diags(paths)
    from layoutc.compiler.diagnostics import render_text as render_diags
    return contracts, (render_diags(diags, sources) if diags else None)


def load_contracts_diags(paths: Sequence[str]) -> tuple[list[ir.Contract], list[Any], dict[str, str]]:
    """Load contract files; returns (contracts, error diagnostics, sources by path).

    Raises:
        layoutc.compiler.safeio.UsageError: a folder holds no ``*.moe`` file.
    """
    from layoutc.compiler.diagnostics import has_errors
    from layoutc.compiler.safeio import contract_paths
    from layoutc.compiler.source import load

    files = contract_paths(paths)
    contracts: list[ir.Contract] = []
    seen: set[str] = set()
    problems: list[Any] = []
    sources: dict[str, str] = {}
    for path in files:
        key = os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        contract, diags, text = load(path)
        if text is not None:
            sources[path] = text
        if contract is None or has_errors(diags):
            problems.extend(d for d in diags if d.severity == "error")
            continue
        contracts.append(contract)
    return contracts, problems, sources


def _config_span(exc: ModelConfigError) -> Any:
    """Where a config error is: ``file:line:col`` when the message starts with it."""
    import re

    from layoutc.compiler.diagnostics import file_span
    match = re.match(r"(.*?):(\d+):(\d+): ", str(exc))
    if match and match.group(1) == exc.source:
        return file_span(exc.source, int(match.group(2)), int(match.group(3)))
    return file_span(exc.source)


def run_audit(args: Any) -> int:
    """The ``layoutc audit`` subcommand. 0 ok; 1 a contract has errors; 2 a bad config
    (LC704), no contracts (LC705), a bad --tp (LC801) or an unreadable contract (LC100).
    Problems are diagnostics, printed in the report's format (json: a JSON list on
    stdout; text, markdown and github: ``--format`` of `layoutc check`)."""
    from layoutc.compiler.diagnostics import emit, error, exit_code, file_span
    from layoutc.compiler.safeio import UsageError
    fmt = getattr(args, "format", "text")
    diag_fmt = {"json": "json", "github": "github"}.get(fmt, "text")

    def fail(diags: list[Any], sources: dict[str, str] | None = None) -> int:
        emit(diags, sources or {}, diag_fmt)
        return exit_code(diags)

    try:
        tps = parse_tp(str(args.tp))
    except ValueError as exc:
        return fail([error("LC801", file_span("<command line>"), str(exc))])
    models: list[tuple[str, MoEModelConfig]] = []
    for name in args.configs:
        try:
            config = load_model_config(name)
        except ModelConfigError as exc:
            message = str(exc)
            prefix = f"{exc.source}: "
            return fail([error("LC704", _config_span(exc), message.removeprefix(prefix))])
        if all(label != name for label, _ in models):
            models.append((name, config))
    default_dir = default_contracts_dir()
    if not args.contracts and default_dir is None:
        return fail([error("LC705", file_span("<command line>"), "no bundled contracts found (neither the "
                           "repository's contracts/ nor the installed layoutc_contracts package); "
                           "pass --contracts PATH...")])
    paths = list(args.contracts) if args.contracts else [str(default_dir)]
    try:
        contracts, problems, sources = load_contracts_diags(paths)
    except UsageError as exc:
        return fail([error("LC705", file_span("<command line>"), str(exc).removeprefix("layoutc: error[LC801]: "))])
    if problems:
        return fail(problems, sources)
    if not contracts:
        return fail([error("LC705", file_span("<command line>"), f"no contracts (*.moe) found in {', '.join(paths)}")])
    report = audit_report(models, tps, contracts)
    if fmt == "json":
        sys.stdout.write(render_json(report))
    elif fmt == "markdown":
        sys.stdout.write(render_markdown(report))
    else:
        sys.stdout.write(render_text(report))
    return 0
