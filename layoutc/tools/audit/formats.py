"""Which checkpoint format a model stores, and which contracts take it (docs/audit.md, section 1).

The format is the scheme `layoutc run`'s reader declares for the model's
``quantization_config`` (``MoEModelConfig.quant_scheme``, read by
layoutc/tools/checkpoints/quant/config.py; a refusal is ``quant_error``). Whether a contract
takes it is read from the contract's own tensors (:func:`takes`): its w13 weight's storage,
code range, number format and packed axis, whether its decode reads a zero point, and its w13
scale's granularity along n and k, evaluated with the contract's lets. A finite parameter that
only the scale's granularity reads (marlin_moe_fp8's ``scheme``, sglang_cpu_fp8_moe's
``block``) is fixed to the value that gives the checkpoint's granularity, and that value is
the plan argument. A parameter named ``group_size`` or ``act_order`` comes from the model.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from layoutc.compiler import ir
from layoutc.compiler.evaluate import EvalError, Value, eval_expr, eval_real, needed_lets, param_deps
from layoutc.runtime.vocab import Op
from layoutc.tools.checkpoints.quant.methods import left_out
from layoutc.tools.checkpoints.quant.scheme import QuantScheme, TensorSpec
from layoutc.tools.hfconfig import MoEModelConfig


@dataclass(frozen=True)
class CheckpointFormat:
    """What a model's checkpoint stores, as far as picking a contract goes.

    Attributes:
        key: ``unquantized``; the scheme's name (``gptq_int4``, ``gptq_int8``, ``awq_int4``,
            ``fp8_channel``, ``fp8_tensor``, ``mxfp4``, ``nvfp4``), with block FP8 keyed by its block
            (``fp8_block128`` for [128, 128], ``mxfp8`` for [1, 32], else ``fp8_block``);
            ``unsupported`` when the reader refuses the config.
        label: how to name it in messages, e.g. ``"block-FP8 [128, 128]"``.
        scheme: the reader's scheme (None: unquantized or refused).
        error: the reader's ``(code, message)`` when it refuses the config.
    """

    key: str
    label: str
    scheme: QuantScheme | None = None
    error: tuple[str, str] | None = None


FORMAT_LABELS: dict[str, str] = {
    "unquantized": "unquantized",
    "gptq_int4": "GPTQ int4",
    "gptq_int8": "GPTQ int8",
    "awq_int4": "AWQ int4",
    "fp8_block128": "block-FP8 [128, 128]",
    "mxfp8": "MXFP8",
    "fp8_channel": "FP8 per channel",
    "fp8_tensor": "FP8 per tensor",
    "mxfp4": "MXFP4",
    "nvfp4": "NVFP4",
    "mxfp4_ct": "MXFP4 (compressed-tensors mxfp4-pack-quantized)",
}

# Glue kinds (layoutc.compiler.check.GLUE_KINDS) that quantize float weights when they load
# them: their contracts state float tensors, but the kernel computes a weight-only
# quantized model, which no checkpoint is (docs/audit.md, "checkpoint format").
QUANTIZING_GLUE: dict[str, str] = {
    "torch_int4pack": "int4 weight-only (the glue quantizes float weights in groups at load)",
    "torch_int8pack": "int8 weight-only (the glue quantizes float weights per channel at load)",
}

# Parameters the model config sets, never a format choice.
_MODEL_PARAMS = frozenset({"group_size", "act_order", "tp_size"})
_NUMBER_FORMATS = {Op.E2M1: "e2m1", Op.E4M3FN: "e4m3fn", Op.E5M2: "e5m2", Op.E8M0: "e8m0"}


def _key(scheme: QuantScheme) -> str:
    if scheme.name == "fp8_block":
        return {(128, 128): "fp8_block128", (1, 32): "mxfp8"}.get(scheme.block or (0, 0), "fp8_block")
    return scheme.name


def _label(scheme: QuantScheme, key: str) -> str:
    base = FORMAT_LABELS.get(key) or (f"block-FP8 {list(scheme.block)}" if scheme.block else scheme.name)
    detail = []
    if scheme.group_size is not None and scheme.method in ("gptq", "awq"):
        detail.append("channelwise" if scheme.group_size == -1 else f"group {scheme.group_size}")
    if scheme.act_order:
        detail.append("act-order")
    if scheme.zero == "stored" and scheme.method == "gptq":
        detail.append("asymmetric")
    return f"{base} ({', '.join(detail)})" if detail else base


def checkpoint_format(model: MoEModelConfig) -> CheckpointFormat:
    """The model's checkpoint format, from the run reader's scheme (docs/audit.md, section 1).

    * no ``quantization_config`` -> ``unquantized``
    * a config the reader refuses -> ``unsupported``, with its code and message (LR150 ...)
    * else the scheme: GPTQ int4 / int8, AWQ int4, FP8 block / channel / tensor, MXFP4, NVFP4.
    """
    if model.quant_method is None and model.quant_error is None:
        return CheckpointFormat("unquantized", FORMAT_LABELS["unquantized"])
    if model.quant_error is not None:
        code, _ = model.quant_error
        return CheckpointFormat("unsupported", f"{model.quant_method} (not declared: {code})",
                                error=model.quant_error)
    scheme = model.quant_scheme
    if scheme is None:  # a quant_method without a scheme: a config built by hand
        return CheckpointFormat(str(model.quant_method), str(model.quant_method))
    return scheme_format(scheme)


def scheme_format(scheme: QuantScheme) -> CheckpointFormat:
    """The :class:`CheckpointFormat` of a scheme `layoutc run`'s reader returned (as
    :func:`checkpoint_format` keys and labels it)."""
    key = _key(scheme)
    return CheckpointFormat(key, _label(scheme, key), scheme)


@dataclass(frozen=True)
class Taken:
    """A contract takes the checkpoint: the parameters the format fixes (plan arguments)."""

    params: tuple[tuple[str, Value], ...] = ()


def takes(contract: ir.Contract, fmt: CheckpointFormat) -> Taken | str:
    """Whether ``contract`` takes checkpoints of ``fmt``: :class:`Taken`, or why not (a str).

    Read from the contract (module docstring); from its `route audit` lines only for contracts
    whose tensors do not say (AITER's write the weights unpacked in bfloat16, while the kernel
    they state is vLLM's AITER_MXFP4_BF16 / _MXFP4 path: docs/language.md, "Routes"). A contract
    with no scale or zero tensor takes unquantized checkpoints, unless its glue quantizes
    (:data:`QUANTIZING_GLUE`: then none).
    """
    if fmt.error is not None:
        return f"the quantization reader refuses this checkpoint: {fmt.error[1]}"
    listed = audit_formats(contract)
    if listed is not None:
        if fmt.key in listed:
            return Taken()
        wanted = " or ".join(FORMAT_LABELS.get(f, f) for f in listed)
        return f"checkpoint is {fmt.label}; {contract.name} takes {wanted} checkpoints"
    if contract.glue is not None and contract.glue.kind in QUANTIZING_GLUE:
        return (f"{contract.name} runs {QUANTIZING_GLUE[contract.glue.kind]}; no checkpoint "
                f"is stored that way (this one is {fmt.label}): audit answers how the "
                "checkpoint runs, not what re-quantizing it would give")
    quantized = any(t.kind in ("scale", "zero") for t in contract.tensors)
    if not quantized:
        if fmt.key == "unquantized":
            return Taken()
        return f"checkpoint is {fmt.label}; {contract.name} declares no scale tensor (takes unquantized checkpoints)"
    if fmt.scheme is None:
        return f"checkpoint is {fmt.label}; {contract.name} declares scale tensors (takes quantized checkpoints)"
    return _takes_scheme(contract, fmt.scheme, fmt.label)


def audit_formats(contract: ir.Contract) -> tuple[str, ...] | None:
    """The checkpoint formats the contract's `route audit` lines say it takes, in order; None when it
    states none (its tensors say: :func:`takes`)."""
    listed = [f for r in contract.routes if r.route == "audit" for f in r.formats]
    return tuple(listed) if listed else None


def method_left_out(contracts: Sequence[ir.Contract], fmt: CheckpointFormat) -> dict[str, str]:
    """{contract: why} for the contracts among ``contracts`` (those that take ``fmt``) that stand for
    another quantization method's object than the checkpoint's own, where one stands for its own
    (checkpoints/quant/methods.py: compressed-tensors block FP8 is not Fp8MoEMethod's to pad)."""
    if fmt.scheme is None:
        return {}
    return left_out({c.name: [(m.engine, m.target) for m in c.models] for c in contracts}, fmt.scheme.method)


def _tensor(contract: ir.Contract, kind: str) -> ir.Tensor | None:
    return next((t for t in contract.tensors if t.kind == kind and t.projection == "w13"), None)


def _nodes(expr: ir.Expr | None) -> list[ir.Expr]:
    return [] if expr is None else list(ir.walk(expr))


def weight_element(weight: ir.Tensor) -> str | None:
    """The w13 weight's number format, from what the contract declares: float8_e4m3fn
    storage is ``e4m3fn``; a decode's byte format (``e2m1(code)``) names it; a code range of
    -6..6 is the value range of e2m1 (OCP MX v1.0 5.3.3; SGLang's contracts write values);
    else ``uintN`` / ``intN`` from the integer code range. None: float weights."""
    if isinstance(weight.storage, ir.FixedStorage) and weight.storage.dtype in ("float8_e4m3fn", "float8_e5m2"):
        return weight.storage.dtype.removeprefix("float8_")
    for node in _nodes(weight.decode):
        if isinstance(node, ir.Op) and node.op in _NUMBER_FORMATS:
            return _NUMBER_FORMATS[node.op]
    if weight.code_range is None:
        return None
    low, high = weight.code_range
    if (low, high) == (-6, 6):
        return "e2m1"
    bits = (high - low + 1).bit_length() - 1
    if 1 << bits != high - low + 1:
        return None
    return f"uint{bits}" if low == 0 else f"int{bits}" if low == -(1 << (bits - 1)) else None


def _packing(weight: ir.Tensor) -> tuple[str, int] | None:
    """(axis, values per stored element) of the contract's packed weight axis; None unpacked."""
    return next(((a.name, a.pack) for a in weight.axes if a.pack > 1), None)


def _scheme_packing(spec: TensorSpec) -> tuple[str, int] | None:
    for dim in spec.dims:
        if dim.pack > 1:
            return ("k" if dim.axis == "in" else "n"), dim.pack
    return None


def _scheme_grain(spec: TensorSpec | None) -> dict[str, int]:
    """The checkpoint scale's group along n and k: 0 one a value, g > 0 one per g, -1 one per axis."""
    grain = {"n": -1, "k": -1}
    if spec is None or spec.scalar:
        return grain
    for dim in spec.dims:
        if dim.axis is not None:
            grain["n" if dim.axis == "out" else "k"] = 0 if dim.group == 1 else dim.group  # 1: one a value
    return grain


def _grain_exprs(scale: ir.Tensor) -> dict[str, ir.Expr | None]:
    """The contract scale's group expression per weight axis (None: one a value); an axis the
    scale does not have is one per axis (-1, a Const)."""
    span = scale.span
    out: dict[str, ir.Expr | None] = {"n": ir.Const(-1, ir.INT, span), "k": ir.Const(-1, ir.INT, span)}
    for axis in scale.axes:
        if axis.name in out:
            out[axis.name] = axis.group_size if axis.group_of is not None else None
    return out


def _takes_scheme(contract: ir.Contract, scheme: QuantScheme, label: str) -> Taken | str:
    weight, scale = _tensor(contract, "weight"), _tensor(contract, "scale")
    if weight is None or scale is None:
        return f"checkpoint is {label}; {contract.name} declares no w13 weight and scale to compare"
    spec = scheme.weight()
    element, wanted = weight_element(weight), spec.element(spec.dtypes()[0])
    storage = weight.storage
    if element != wanted or (isinstance(storage, ir.FixedStorage) and storage.dtype not in spec.dtypes()):
        return (f"checkpoint is {label}; it stores {wanted} codes as {'/'.join(spec.dtypes())}, {contract.name}'s "
                f"{weight.name} holds {element or 'float'} codes stored as {storage}")
    packed, pack = _packing(weight), _scheme_packing(spec)
    if packed is not None and packed != pack:
        return (f"checkpoint is {label}; it is packed {_pack_text(pack)}, {contract.name}'s {weight.name} "
                f"{_pack_text(packed)}")
    zero = next((t for t in contract.tensors if t.kind == "zero" and t.projection == "w13"), None)
    reads_zero = zero is not None and any(isinstance(n, ir.TensorValue) and n.tensor == zero.name
                                          for n in _nodes(weight.decode))
    if scheme.zero == "stored" and not reads_zero:
        return (f"checkpoint is {label}; it stores zero points, {contract.name}'s {weight.name} decode "
                "reads none (symmetric codes only)")
    if scheme.zero == "implicit" and not reads_zero and not _decodes_zero(contract, weight, scheme.zero_point):
        return (f"checkpoint is {label}; its code {scheme.zero_point} is 0, {contract.name}'s {weight.name} "
                "decode does not map that code to 0")
    scale_spec = scheme.spec("scale")
    if (isinstance(scale.storage, ir.FixedStorage) and scale_spec is not None
            and scale.storage.dtype not in scale_spec.dtypes()):
        return (f"checkpoint is {label}; its scales are {'/'.join(scale_spec.dtypes())}, {contract.name}'s "
                f"{scale.name} is {scale.storage.dtype}")
    return _match_grain(contract, scheme, scale, label)


def _pack_text(pack: tuple[str, int] | None) -> str:
    return "not at all" if pack is None else f"{pack[1]} values an element along {pack[0]}"


def _decodes_zero(contract: ir.Contract, weight: ir.Tensor, zero_point: int) -> bool:
    """Whether the weight's decode maps code ``zero_point`` to 0 with unit scales (GPTQ
    symmetric: uint4b8's 8, uint8b128's 128). A decode that needs parameters is not judged."""
    if weight.decode is None:
        return True
    tensors = {t.name: Fraction(0 if t.kind == "zero" else 1) for t in contract.tensors}
    try:
        return eval_real(weight.decode, {}, Fraction(zero_point), tensors) == 0
    except (EvalError, KeyError):
        return True


def _match_grain(contract: ir.Contract, scheme: QuantScheme, scale: ir.Tensor, label: str) -> Taken | str:
    """The contract scale's n / k granularity against the checkpoint's; the format parameters
    (finite, read only by that granularity) set to the first values that match."""
    want = _scheme_grain(scheme.spec("scale"))
    exprs = _grain_exprs(scale)
    lets = {let.name: let for let in contract.lets}
    params = {p.name: p for p in contract.params}
    deps: set[str] = set()
    for expr in exprs.values():
        if expr is not None:
            deps |= param_deps(expr, lets)
    model = {"group_size": scheme.group_size}
    free = sorted(d for d in deps if d not in _MODEL_PARAMS and d in params and params[d].finite)
    if any(d not in _MODEL_PARAMS and d not in free for d in deps):
        return f"checkpoint is {label}; {contract.name}'s scale groups depend on {sorted(deps)}, not a format choice"
    seen: list[str] = []
    for combo in itertools.product(*(params[d].values for d in free)):
        env: dict[str, Value] = {**{k: v for k, v in model.items() if v is not None}, **dict(zip(free, combo, strict=True))}
        got = _grain(exprs, env, lets)
        if got == want:
            return Taken(tuple(zip(free, combo, strict=True)))
        if got is not None:
            seen.append(_grain_text(got))
    return (f"checkpoint is {label}; it holds scales {_grain_text(want)}, {contract.name}'s {scale.name} "
            f"{' or '.join(dict.fromkeys(seen)) or 'scales audit cannot size'}")


def _grain(exprs: dict[str, ir.Expr | None], env: dict[str, Value], lets: dict[str, ir.Let]) -> dict[str, int] | None:
    out: dict[str, int] = {}
    for axis, expr in exprs.items():
        if expr is None:
            out[axis] = 0
            continue
        local = dict(env)
        try:
            for let in needed_lets(expr, lets):
                local[let.name] = eval_expr(let.value, local)
            value = eval_expr(expr, local)
        except EvalError:
            return None
        out[axis] = 0 if value == 1 else int(value)  # a group of 1 is one a value
    return out


def _grain_text(grain: dict[str, int]) -> str:
    def one(axis: str) -> str:
        g = grain[axis]
        return f"one per {axis} value" if g == 0 else f"one per {axis} axis" if g == -1 else f"one per {g} along {axis}"
    return f"{one('n')}, {one('k')}"
