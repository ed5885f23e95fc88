"""The declared interface of a kernel glue, and the typed interface of a generated module
(standard library only).

Each module in `glue/` starts with `INTERFACE = GlueInterface(...)`, written with
literals only. The compiler reads that declaration from the module's source text
without importing it (so it needs no torch), and the checker holds every contract
that binds the glue to it: tensor axis orders and roles, the w13 view per
activation, the activations computed, dtypes, hidden-dim padding and the
output-bias rule. `layoutc run` holds a checkpoint's format to where the kernel
can apply the routing weight (`router_weight`). A test imports each glue and
checks that the declaration read statically is the one the module runs with.

Each generated contract module exports `LAYOUT = ModuleLayout(...)` (at its end): its
tensors by role (`weight w13`, `bias w2`, ...) with their functions, its `Plan` type and
`plan()` parameters, the parameter that counts shards, and its kernel functions where a
glue is bound. The tools look tensors up by role there (`LAYOUT.weight("w13").pad`),
never by a name built from the contract's tensor name, so a contract whose tensors are
named otherwise (`tensor gate_up: weight w13`) runs through them unchanged.
`GeneratedModule` / `GluedModule` are the Protocols a tool types a generated module with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from . import vocab
from .algebra import ViewWord, Word
from .twin import adopt


@dataclass(frozen=True)
class TensorSlot:
    """A tensor the glue passes to its kernel.

    kind / projection: as in a contract (`weight w13`, `bias w2`, ...).
    axes: the axis names in the order the kernel reads them.
    optional: the contract may leave it out.
    tied: (axis, "tensor_kind projection.axis") pairs: the axis must be declared
        `like` that weight axis (a w13 bias follows w13's rows).
    """

    kind: str
    projection: str
    axes: tuple[str, ...]
    optional: bool = False
    tied: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Activation:
    """One activation the kernel computes and how it reads w13's rows.

    view: an algebra.ViewWord spelling: `halves` ([gate | up], split at half) or `interleave` ((gate, up) pairs).
    roles: the order of the two segments in that view.
    formula: the exact formula, for documentation and review.
    constants: (parameter, value) of every constant the kernel fixes for this activation,
        in the contract's integer unit (thousandths: swiglu_limit 7.0 is 7000). A contract
        admitting the activation declares these parameters and admits only these values.
    """

    name: str
    view: str
    roles: tuple[str, str]
    formula: str
    constants: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class GlueInterface:
    """What a glue module reads from a contract and passes to its kernel.

    kind: the name a contract's `glue KIND { ... }` block uses.
    package: the pip requirement that provides the kernel.
    ops: (slot, "namespace::name") of every op the glue calls.
    args: argument roles the contract binds with `arg ROLE = expr`.
    tensors: the tensors passed to the kernel (anything else is refused).
    activations: every activation computed; any other is refused.
    dtypes: storage dtypes of the weights the kernel accepts.
    pads_hidden: whether the glue pads hidden states and unpads the output; when
        False a padded hidden dim (w13.k, w2.n) is refused.
    output_bias: "once": a w2 bias is added once over all ranks (rank 0's shard
        holds it, the others zeros), never once per rank.
    source: the kernel file the facts come from.
    forward_options: extra bool keyword options of `fused_moe` (default False).
    router_weight: where the kernel can apply the routing weight: "output"
        (`out = sum_k w_k * expert_k(x)`) and, for a glue whose `fused_moe` takes
        `apply_router_weight_on_input`, "input" (`out = sum_k expert_k(w_k * x)`, vLLM's
        apply_router_weight_on_input: the glue scales the hidden states by the weight and
        the kernel skips the output weighting). A checkpoint format's `router_weight`
        (Llama-4: "input") must be one of these.
    router_weight_input_top_k: the only top_k at which "input" is computed (vLLM's CPU
        kernels: 1), or None for any.
    foreign_pairs: under expert parallelism, what the kernel is handed for a (token, expert)
        pair whose expert another rank holds (vLLM's expert map -1). "dropped": nothing, the
        generated `fused_moe` hands the kernel only the rank's routed, local pairs
        (runtime/expert_map.py `run_local`); "masked": local id 0 at weight 0 (the kernel still
        runs that expert on the token); "raw": the router's global id. The verifier's
        `expert-coverage` proves every pair the kernel computes is routed and local from
        this (a contract's `foreign raw|masked` states it instead); only "dropped" proves.
    """

    kind: str
    summary: str
    package: str
    ops: tuple[tuple[str, str], ...]
    args: tuple[str, ...]
    tensors: tuple[TensorSlot, ...]
    activations: tuple[Activation, ...]
    dtypes: tuple[str, ...]
    pads_hidden: bool
    output_bias: str
    source: str
    forward_options: tuple[str, ...] = ()
    router_weight: tuple[str, ...] = ("output",)
    router_weight_input_top_k: int | None = None
    foreign_pairs: str = "dropped"

    def activation(self, name: str) -> Activation | None:
        """The declared activation `name`, or None when the kernel does not compute it."""
        return next((a for a in self.activations if a.name == name), None)

    def slot(self, kind: str, projection: str) -> TensorSlot | None:
        """The tensor slot of `kind projection`, or None when the glue passes no such tensor."""
        return next((s for s in self.tensors if s.kind == kind and s.projection == projection), None)


WEIGHTS = (
    TensorSlot("weight", "w13", ("experts", "n", "k")),
    TensorSlot("weight", "w2", ("experts", "n", "k")),
)
BIASES = (
    TensorSlot("bias", "w13", ("experts", "n"), optional=True, tied=(("n", "weight w13.n"),)),
    TensorSlot("bias", "w2", ("experts", "n"), optional=True),
)

# gpt-oss's swigluoai as vLLM's kernels fix it: alpha 1.702, clamp limit 7.0
# (csrc/activation_kernels.cu swigluoai_and_mul; the CPU kernels hard-code both).
SWIGLUOAI_CONSTANTS = (("swiglu_alpha_milli", 1702), ("swiglu_limit_milli", 7000))

# The gated activations every glue here computes on [gate | up] halves, and gpt-oss's
# swigluoai on interleaved (gate, up) pairs.
GATED_HALVES = (
    Activation("silu", ViewWord.HALVES.value, ("gate", "up"), "silu(gate) * up"),
    Activation("gelu", ViewWord.HALVES.value, ("gate", "up"), "gelu(gate) * up"),
    Activation("gelu_tanh", ViewWord.HALVES.value, ("gate", "up"), "gelu_tanh(gate) * up"),
)
SWIGLUOAI_PAIRS = Activation("swigluoai", ViewWord.INTERLEAVE.value, ("gate", "up"),
                             "(clamp(up, -7, 7) + 1) * g * sigmoid(1.702 * g), g = min(gate, 7)",
                             SWIGLUOAI_CONSTANTS)


# ---- the typed interface of a generated module ---------------------------------------

#: The version of `ModuleLayout` a generated module's `LAYOUT` follows; a tool refuses a
#: module whose LAYOUT has another (it was compiled by another layoutc).
LAYOUT_VERSION = 1

TensorKind = Literal["weight", "scale", "zero", "bias"]
Projection = Literal["w13", "w2"]
ParamKind = Literal["range", "set", "enum", "bool"]


class ShapesFn(Protocol):
    """`<t>_shapes(plan)`: (logical shape, padded shape)."""

    def __call__(self, plan: Any, /) -> tuple[tuple[int, ...], tuple[int, ...]]: ...


class AxisTableFn(Protocol):
    """The tensor's axis table under `plan`: one `_runtime.layout.Axis` per dimension."""

    def __call__(self, plan: Any, /) -> tuple[Any, ...]: ...


class PadFn(Protocol):
    """`pad_<t>(t, plan, *, out=None)`: logical -> padded tensor."""

    def __call__(self, t: Any, plan: Any, /, *, out: Any = None) -> Any: ...


class UnpadFn(Protocol):
    """`unpad_<t>(t, plan)`: padded -> logical tensor."""

    def __call__(self, t: Any, plan: Any, /) -> Any: ...


class FullShapeFn(Protocol):
    """`<t>_full_shape(plan)`: the full checkpoint shape the shard reads."""

    def __call__(self, plan: Any, /) -> tuple[int, ...]: ...


class ShardFn(Protocol):
    """`shard_<t>(full, rank, plan, *, out=None)`: rank `rank`'s padded shard."""

    def __call__(self, full: Any, rank: int, plan: Any, /, *, out: Any = None) -> Any: ...


class AllocFn(Protocol):
    """`alloc_<t>(plan, rank=0, *, out=None)`: a rank's padded tensor, pads written."""

    def __call__(self, plan: Any, rank: int = 0, /, *, out: Any = None) -> Any: ...


class LoadFn(Protocol):
    """`load_<t>(dst, src, plan, rank=0, *, expert, role, transposed, source_layout)`: one
    checkpoint tensor into the allocated `dst`."""

    def __call__(self, dst: Any, src: Any, plan: Any, rank: int = 0, /, *, expert: int | None = None,
                 role: str | None = None, transposed: bool = False, source_layout: str = Word.HALVES.value) -> None: ...


class PrepackFn(Protocol):
    """`prepack`: (w13, w2, plan) -> (packed w13, packed w2)."""

    def __call__(self, w13: Any, w2: Any, plan: Any, /) -> tuple[Any, Any]: ...


class PrepackPaddedFn(Protocol):
    """`prepack_padded`: (padded w13, padded w2, plan, out=None) -> (packed w13, packed w2);
    `out=(w13, w2)`: tensors the packed bytes are written into, where the kernel's packed
    form is a tensor of the padded shape."""

    def __call__(self, w13: Any, w2: Any, plan: Any, /, *, out: tuple[Any, Any] | None = None) -> tuple[Any, Any]: ...


class ConfigFn(Protocol):
    """The kernel configuration (`_runtime.packed.KernelConfig`) of a plan."""

    def __call__(self, plan: Any, /) -> Any: ...


@dataclass(frozen=True)
class PlanParam:
    """One parameter of a generated module's `plan()`, as the contract declares it.

    kind: "range" (an int in low..high), "set" (an int in `values`), "enum" (a member of
    `values`; a storage dtype parameter also takes the torch dtype) or "bool".
    default: what `plan()` uses when the caller omits it; None: the caller must pass it.
    """

    name: str
    kind: ParamKind
    values: tuple[int | bool | str, ...] = ()
    low: int | None = None
    high: int | None = None
    default: int | str | None = None

    @property
    def required(self) -> bool:
        """Whether `plan()` needs this parameter (it has no default)."""
        return self.default is None

    @property
    def domain(self) -> str:
        """The domain as the contract writes it: `1..1024`, `{1, 2, 4}`, `{vec, amx}`, `bool`."""
        if self.kind == "range":
            return f"{self.low}..{self.high}"
        if self.kind == "bool":
            return "bool"
        return "{" + ", ".join(str(v) for v in self.values) + "}"


@dataclass(frozen=True)
class TensorEntry:
    """One tensor a contract declares, by role, with the generated functions that handle it.

    kind / projection: the role (`weight w13`, `bias w2`, `scale w13`, ...); name: the name the
    contract gives it (any identifier: nothing looks it up). axes: its axis names in order.
    contract_line: the line of its declaration in the contract file; declaration: that
    declaration's head (`tensor w13: weight w13`). full_shape / shard: None when the contract
    shards nothing (no shard count parameter).
    """

    name: str
    kind: TensorKind
    projection: Projection
    optional: bool
    axes: tuple[str, ...]
    contract_line: int
    declaration: str
    shapes: ShapesFn
    axis_table: AxisTableFn
    pad: PadFn
    unpad: UnpadFn
    alloc: AllocFn
    load: LoadFn
    full_shape: FullShapeFn | None = None
    shard: ShardFn | None = None

    @property
    def role(self) -> str:
        """`kind projection`, as a contract writes it (`weight w13`)."""
        return f"{self.kind} {self.projection}"


@dataclass(frozen=True)
class KernelEntry:
    """The kernel functions of a module whose contract binds a glue.

    glue: the glue's declared interface (the module's `INTERFACE`). config: the kernel
    configuration of a plan, as `prepack_padded` records it in each `PackedWeight` (what a
    packed weight assembled elsewhere must carry). prepack / prepack_padded: (w13, w2, plan)
    -> the two PackedWeight; fused_moe: the module's `fused_moe`; load_kernel: its
    `load_kernel` (raises KernelUnavailableError naming the package to install).
    """

    glue: GlueInterface
    config: ConfigFn
    load_kernel: Callable[[], None]
    prepack: PrepackFn
    prepack_padded: PrepackPaddedFn
    fused_moe: Callable[..., Any]


#: The engines a contract's `models` line may name (docs/language.md, "What a contract models").
ENGINES = ("vllm", "sglang", "flashinfer", "aiter", "zentorch", "torch")


#: What a contract's `route` line may say a tool picks it for (docs/language.md, "Routes"):
#: "run": `layoutc run` runs the contract's kernel (its glue) on checkpoints of the formats;
#: "reference": `layoutc run` builds reference-only rows through its loaders and decode (no kernel
#: here); "audit": `layoutc audit` holds it to checkpoints of the formats, where its tensors do not
#: say which checkpoint it takes.
ROUTES = ("run", "reference", "audit")
#: The routes where contracts are ranked: one contract per (route, format, rank).
RANKED_ROUTES = ("run", "reference")

#: The checkpoint formats a `route` line may name: "unquantized", the scheme names `layoutc run`'s
#: quantization reader returns (layoutc/tools/checkpoints/quant/scheme.py `QuantScheme.name`), and
#: the block-FP8 keys `layoutc audit` splits fp8_block into (tools/audit/formats.py `_key`).
CHECKPOINT_FORMATS = (
    "unquantized",
    "gptq_int4",
    "gptq_int8",
    "awq_int4",
    "ct_wna16_int4",
    "ct_wna16_int8",
    "fp8_block",
    "fp8_block128",
    "mxfp8",
    "fp8_channel",
    "fp8_tensor",
    "mxfp4",
    "mxfp4_ct",
    "nvfp4",
)


class ConditionError(LookupError):
    """A `models ... when` condition cannot be evaluated on the parameters given: one it
    reads is missing. Attribute: ``param`` (its name)."""

    def __init__(self, param: str, condition: str) -> None:
        super().__init__(f"the condition `{condition}` reads the parameter `{param}`, which was not given")
        self.param = param


@dataclass(frozen=True)
class Condition:
    """A `models ... when EXPR` condition as data, evaluated on a dict of `plan()` parameters.

    op: "param" (the parameter named `value`), "const" (the literal `value`: an int, a bool or
    an enum member) or an operator of `vocab.Op` (its value: "==", "and", "not", "+", ...)
    applied to `args` with the integer semantics every generated `plan()` shares (`vocab.apply`).
    """

    op: str
    args: tuple[Condition, ...] = ()
    value: int | bool | str | None = None

    @staticmethod
    def param(name: str) -> Condition:
        """The `plan()` parameter `name`: `Condition("param", value=name)`."""
        return Condition("param", value=name)

    @staticmethod
    def const(value: int | bool | str) -> Condition:
        """The literal `value` (an int, a bool or an enum member): `Condition("const", value=value)`."""
        return Condition("const", value=value)

    def evaluate(self, params: Mapping[str, Any]) -> int | bool | str:
        """The condition's value under `params` (parameter name -> value). An enum parameter may
        be given as its member (any case) or as an object whose `str` ends in `.member`
        (`torch.bfloat16` for `bfloat16`). Raises ConditionError for a parameter not in
        `params`, and vocab.OpError as `plan()` would (a division by zero)."""
        if self.op == "const":
            if self.value is None:
                raise ValueError("a `const` condition holds no value")
            return self.value
        if self.op == "param":
            name = str(self.value)
            if name not in params:
                raise ConditionError(name, str(self))
            return _param_value(params[name])
        return vocab.apply(vocab.Op(self.op), [a.evaluate(params) for a in self.args])

    def holds(self, params: Mapping[str, Any]) -> bool:
        """Whether the condition holds under `params` (raises as `evaluate`)."""
        return bool(self.evaluate(params))

    def params(self) -> tuple[str, ...]:
        """The parameters the condition reads, in order of first reading."""
        found: list[str] = []
        stack: list[Condition] = [self]
        while stack:
            node = stack.pop()
            if node.op == "param" and str(node.value) not in found:
                found.append(str(node.value))
            stack.extend(reversed(node.args))
        return tuple(found)

    def __str__(self) -> str:
        if self.op == "param":
            return str(self.value)
        if self.op == "const":
            return str(self.value).lower() if isinstance(self.value, bool) else str(self.value)
        op = vocab.Op(self.op)
        parts = [a._operand() for a in self.args]
        if op is vocab.Op.NOT:
            return f"not {parts[0]}"
        if op is vocab.Op.NEG:
            return f"-{parts[0]}"
        if op.is_function:
            return f"{op.value}({', '.join(str(a) for a in self.args)})"
        return f" {op.value} ".join(parts)

    def _operand(self) -> str:
        return str(self) if self.op in ("param", "const") or vocab.Op(self.op).is_function else f"({self})"


def _param_value(value: Any) -> int | bool | str:
    if isinstance(value, (bool, int)):
        return value
    text = value if isinstance(value, str) else str(value).rpartition(".")[2]
    return text.lower()


@dataclass(frozen=True)
class ModelsEntry:
    """One `models ENGINE {RELEASE, ...} "module:Qualified.name" [when COND]` line of a contract:
    the engine object the contract stands for, in those releases, where COND holds.

    engine: one of ENGINES. releases: the engine releases modelled (version strings such as
    "0.32.0", as the engine's package reports its version without a local part). target:
    "importable.module:Qualified.name" of the class or function. when: None (always), or the
    condition over `plan()` parameters. contract_line: the line of the `models` declaration.
    """

    engine: str
    releases: tuple[str, ...]
    target: str
    when: Condition | None = None
    contract_line: int = 0

    @property
    def module(self) -> str:
        """The target's importable module (`vllm.model_executor.layers.fused_moe.experts.cpu_moe`)."""
        return self.target.partition(":")[0]

    @property
    def qualname(self) -> str:
        """The target's qualified name inside its module (`CPUExpertsInt8`)."""
        return self.target.partition(":")[2]

    def models_release(self, release: str) -> bool:
        """Whether `release` is one this line models; a local version part (`0.32.0+cpu`) is ignored."""
        return release.partition("+")[0] in self.releases

    def applies(self, params: Mapping[str, Any]) -> bool:
        """Whether the line applies under `params` (True without a `when`); raises as Condition.evaluate."""
        return self.when is None or self.when.holds(params)

    def __str__(self) -> str:
        releases = ", ".join(f'"{r}"' for r in self.releases)
        when = f" when {self.when}" if self.when is not None else ""
        return f'models {self.engine} {{{releases}}} "{self.target}"{when}'


@dataclass(frozen=True)
class RouteEntry:
    """One `route ROUTE {FORMAT, ...} [rank N]` line of a contract: a tool picks the contract for
    checkpoints of those formats (docs/language.md, "Routes").

    route: one of ROUTES. formats: names from CHECKPOINT_FORMATS. rank: the order among the contracts
    that serve one format on one route (lowest first; 1 when the line states none; at most one
    contract per route, format and rank). contract_line: the line of the `route` declaration.
    """

    route: str
    formats: tuple[str, ...]
    rank: int = 1
    contract_line: int = 0

    def serves(self, route: str, fmt: str) -> bool:
        """Whether this line picks its contract on `route` for checkpoints of format `fmt`."""
        return self.route == route and fmt in self.formats

    def __str__(self) -> str:
        formats = ", ".join(f'"{f}"' for f in self.formats)
        return f"route {self.route} {{{formats}}} rank {self.rank}"


@dataclass(frozen=True)
class ModuleLayout:
    """What a generated contract module exports as `LAYOUT`.

    version: LAYOUT_VERSION of the layoutc that compiled it. contract / source_file: the
    contract's name and file. plan / plan_type: the module's `plan()` and `Plan`;
    plan_params: every parameter `plan()` takes, in order. shard_count: the parameter the
    shard functions split over (`tp_size`), or None when nothing is sharded. tensors: every
    declared tensor, in declaration order. kernel: the glue's functions, or None (no glue).
    local_experts: `local_experts(rank, plan)` -> (local_num_experts, expert_map) where the
    contract partitions its experts over EP ranks, else None. models: the contract's
    `models` lines, in source order (() where it models no engine object). routes: its `route`
    lines, in source order (() where no tool picks it by format).
    """

    version: int
    contract: str
    source_file: str
    plan: Callable[..., Any]
    plan_type: type[Any]
    plan_params: tuple[PlanParam, ...]
    shard_count: str | None
    tensors: tuple[TensorEntry, ...]
    kernel: KernelEntry | None = None
    local_experts: Callable[[int, Any], tuple[int, Any]] | None = None
    models: tuple[ModelsEntry, ...] = ()
    routes: tuple[RouteEntry, ...] = ()

    def models_of(self, engine: str) -> tuple[ModelsEntry, ...]:
        """The `models` lines naming `engine`, in source order."""
        return tuple(m for m in self.models if m.engine == engine)

    def releases(self, engine: str) -> tuple[str, ...]:
        """Every release of `engine` some `models` line of this contract names, sorted by version."""
        found = {r for m in self.models_of(engine) for r in m.releases}
        return tuple(sorted(found, key=release_key))

    def tensors_of(self, kind: str, projection: str) -> tuple[TensorEntry, ...]:
        """Every tensor of role `kind projection`, in declaration order (a two-level scaled
        format declares two `scale w13`)."""
        return tuple(t for t in self.tensors if t.kind == kind and t.projection == projection)

    def tensor(self, kind: str, projection: str) -> TensorEntry | None:
        """The tensor of role `kind projection`, or None when the contract declares none.
        Raises LookupError when it declares several (use `tensors_of`); a checked contract
        has exactly one weight per projection."""
        found = self.tensors_of(kind, projection)
        if len(found) > 1:
            names = ", ".join(t.name for t in found)
            raise LookupError(f"contract {self.contract} declares {len(found)} `{kind} {projection}` tensors "
                              f"({names}): look them up with tensors_of")
        return found[0] if found else None

    def weight(self, projection: str) -> TensorEntry:
        """The weight of `projection` ("w13" | "w2"); every checked contract declares both.
        Raises LookupError for another projection."""
        found = self.tensor("weight", projection)
        if found is None:
            raise LookupError(f"contract {self.contract} declares no `weight {projection}` tensor")
        return found

    def param(self, name: str) -> PlanParam | None:
        """The `plan()` parameter `name`, or None when the contract has no such parameter."""
        return next((p for p in self.plan_params if p.name == name), None)

    def where(self, tensor: TensorEntry) -> str:
        """`contracts/<c>.moe:<line>` of `tensor`'s declaration."""
        return f"{self.source_file}:{tensor.contract_line}"

    def plan_arguments(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The entries of `values` that `plan()` takes (the rest are dropped)."""
        return {p.name: values[p.name] for p in self.plan_params if p.name in values}

    def missing_params(self, values: Mapping[str, Any]) -> list[str]:
        """The required `plan()` parameters that `values` lacks, in order."""
        return [p.name for p in self.plan_params if p.required and p.name not in values]

    def replan(self, plan: Any, **changes: Any) -> Any:
        """`plan()` with `plan`'s parameters, `changes` replacing some (e.g. num_experts=1).
        Raises what `plan()` raises (the module's LayoutContractError)."""
        values = {p.name: getattr(plan, p.name) for p in self.plan_params}
        values.update(changes)
        return self.plan(**values)


class GeneratedModule(Protocol):
    """What every generated contract module exposes to a tool (types a module imported by
    name: `cast(GeneratedModule, importlib.import_module(...))` once its LAYOUT is checked)."""

    @property
    def LAYOUT(self) -> ModuleLayout: ...
    @property
    def CONTRACT(self) -> str: ...
    @property
    def Plan(self) -> type[Any]: ...
    @property
    def LayoutContractError(self) -> type[ValueError]: ...
    @property
    def KernelUnavailableError(self) -> type[RuntimeError]: ...
    @property
    def plan(self) -> Callable[..., Any]: ...


class GluedModule(GeneratedModule, Protocol):
    """A generated module whose contract binds a glue: its kernel functions as well."""

    @property
    def INTERFACE(self) -> GlueInterface: ...
    @property
    def OPS(self) -> dict[str, str]: ...
    @property
    def load_kernel(self) -> Callable[[], None]: ...
    @property
    def prepack(self) -> PrepackFn: ...
    @property
    def prepack_padded(self) -> PrepackPaddedFn: ...
    @property
    def fused_moe(self) -> Callable[..., Any]: ...


def release_key(release: str) -> tuple[tuple[int, ...], str]:
    """A sort key for a release string (check/models.py's RELEASE form, "0.32.0", "0.5.23rc1"): its
    leading dotted numbers as ints, then the rest as text; a local part ("+cpu") is dropped.
    Orders releases of different numbers as versions do ("0.9.0" < "0.32.0")."""
    head = release.partition("+")[0]
    parts = head.split(".")
    numbers: list[int] = []
    for i, part in enumerate(parts):
        if not part.isdigit():
            digits = len(part) - len(part.lstrip("0123456789"))
            if digits:
                numbers.append(int(part[:digits]))
            return tuple(numbers), ".".join([part[digits:], *parts[i + 1:]])
        numbers.append(int(part))
    return tuple(numbers), ""


adopt(globals())  # one class per process beside layoutc (twin.py)
