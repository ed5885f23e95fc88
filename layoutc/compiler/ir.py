"""The typed contract IR that ``check.py`` produces from the AST.

Everything downstream (``evaluate``, ``smt``, ``verify``, ``emit``, ``audit``)
reads this IR only. Names are resolved, enum literals are typed, `match` is
lowered to conditionals, and every axis knows its logical and padded size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Literal, assert_never

from layoutc.compiler.diagnostics import Span
from layoutc.runtime import vocab
from layoutc.runtime.algebra import ViewWord, Word

# ---- types -------------------------------------------------------------------


@dataclass(frozen=True)
class IntT:
    def __str__(self) -> str:
        return "int"


@dataclass(frozen=True)
class BoolT:
    def __str__(self) -> str:
        return "bool"


@dataclass(frozen=True)
class EnumT:
    param: str
    members: tuple[str, ...]

    def __str__(self) -> str:
        return f"enum {self.param}"


@dataclass(frozen=True)
class RealT:
    """The decoded value of a tensor element (only inside `decode`)."""

    def __str__(self) -> str:
        return "real"


Type = IntT | BoolT | EnumT | RealT
INT = IntT()
BOOL = BoolT()
REAL = RealT()

# ---- expressions -------------------------------------------------------------


@dataclass(frozen=True)
class Const:
    value: int | bool | str  # str: an enum member of `type`
    type: Type
    span: Span


@dataclass(frozen=True)
class Ref:
    """A parameter or a `let` value."""

    name: str
    kind: Literal["param", "let"]
    type: Type
    span: Span


@dataclass(frozen=True)
class AxisSize:
    """Padded size of `tensor.axis` in values (before packing)."""

    tensor: str
    axis: str
    span: Span
    type: Type = INT


@dataclass(frozen=True)
class TensorValue:
    """Inside `decode`: the value of another tensor at this element's group."""

    tensor: str
    span: Span
    type: Type = REAL


@dataclass(frozen=True)
class Code:
    """Inside `decode`: this tensor's stored code."""

    span: Span
    type: Type = REAL


@dataclass(frozen=True)
class Op:
    """An operator, builtin function or byte format (layoutc/runtime/vocab.py's `Op`)."""

    op: vocab.Op
    args: tuple[Expr, ...]
    type: Type
    span: Span


@dataclass(frozen=True)
class Cond:
    cond: Expr
    then: Expr
    orelse: Expr
    type: Type
    span: Span


@dataclass(frozen=True)
class Select:
    """`match subject { member => value, ..., _ => default }`."""

    subject: Expr
    cases: tuple[tuple[str, Expr], ...]
    default: Expr | None
    type: Type
    span: Span


Expr = Const | Ref | AxisSize | TensorValue | Code | Op | Cond | Select

# ---- declarations ------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    kind: Literal["range", "set", "enum", "bool"]
    type: Type
    values: tuple[int | bool | str, ...]  # set, enum and bool domains
    low: int
    high: int
    span: Span
    default: int | None = None  # `param NAME: int ... = N`: plan() may omit it

    @property
    def finite(self) -> bool:
        return self.kind != "range"


@dataclass(frozen=True)
class Let:
    name: str
    value: Expr
    type: Type
    span: Span


@dataclass(frozen=True)
class Rule:
    kind: Literal["require", "admit"]
    cond: Expr
    message: str
    span: Span


AxisKind = Literal["plain", "padded", "groups"]
Layout = Word  # the layout algebra's words (layoutc/runtime/algebra.py)


@dataclass(frozen=True)
class Axis:
    """One tensor axis.

    `logical`/`padded` are per-segment sizes in values (groups for a `groups`
    axis). A segmented axis (`halves`, `concat`, `interleave`) holds
    `len(roles)` segments; `pad` holds one; `none` is never padded.

    `pack_order`: slot i of a packed storage element (bits [i * w, (i + 1) * w), w the
    storage width / `pack`) holds value `pack_order[i]` of its run of `pack` consecutive
    values; `pack N order (...)` states it (AWQ: (0, 2, 4, 6, 1, 3, 5, 7), vLLM 0.32
    quant_utils.awq_pack), else it is the identity (GPTQ, MXFP4 low nibble first). The
    checker proves it a permutation of 0..pack-1 (LC417); () here means the identity.
    """

    name: str
    kind: AxisKind
    layout: Layout
    roles: tuple[str, ...]
    logical: Expr
    padded: Expr
    pack: int
    group_of: tuple[str, str] | None
    group_size: Expr | None
    span: Span
    pack_order: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.pack_order:  # the default: slot i holds value i
            object.__setattr__(self, "pack_order", tuple(range(self.pack)))

    def slot_of(self, value: int) -> int:
        """The slot (0..pack-1) of a storage element that holds value `value` (0..pack-1) of its run."""
        return self.pack_order.index(value)

    @property
    def segments(self) -> int:
        return max(1, len(self.roles))

    @property
    def is_padded(self) -> bool:
        return self.layout is not Word.NONE


@dataclass(frozen=True)
class GuardedAxis:
    """`axis NAME = ... when GUARD`: the layout of `axis.name` wherever `guard` holds.

    Guards read only finite parameters. Alternatives are tried in declaration
    order; where none holds, the tensor's unguarded axis of that name applies.
    """

    guard: Expr
    axis: Axis


@dataclass(frozen=True)
class FixedStorage:
    """`storage DTYPE`: one storage dtype (a key of layoutc/runtime/vocab.py's DTYPES)."""

    dtype: str

    def __str__(self) -> str:
        return self.dtype


@dataclass(frozen=True)
class ParamStorage:
    """`storage P`: the dtype that the enum parameter P (of dtype names) takes."""

    param: str

    def __str__(self) -> str:
        return self.param


Storage = FixedStorage | ParamStorage


@dataclass(frozen=True)
class Tensor:
    name: str
    kind: Literal["weight", "scale", "zero", "bias"]
    projection: Literal["w13", "w2"]
    optional: bool
    axes: tuple[Axis, ...]
    fill_kind: Literal["value", "decoded", "uninit"]
    fill: int  # the stored pad code (resolved from `decoded` by the checker)
    storage: Storage
    code_range: tuple[int, int] | None
    decode: Expr | None
    span: Span
    guarded: tuple[GuardedAxis, ...] = ()  # parameter-dependent layouts; `axes` holds the defaults
    # `tail fill V` (block shards only): the stored code past a short rank's slice, resolved
    # like `fill`; None: the tail holds `fill` (the default). Never uninit.
    tail_fill_kind: Literal["value", "decoded"] | None = None
    tail_fill: int | None = None
    # `fill decoded V`: V, the value the pad code decodes to (the verifier proves it at every
    # pad lane, docs/verification.md, inertness); None for `fill N` and `fill uninit`.
    fill_value: int | None = None

    @property
    def tail_code(self) -> int | None:
        """The stored code past a short rank's slice (None: `fill uninit` and no `tail fill`)."""
        if self.tail_fill is not None:
            return self.tail_fill
        return None if self.fill_kind == "uninit" else self.fill

    def at_tail(self) -> Tensor:
        """This tensor as it is past a short rank's slice: its fill is the tail fill."""
        if self.tail_fill is None or self.tail_fill_kind is None:
            return self
        return replace(self, fill_kind=self.tail_fill_kind, fill=self.tail_fill, tail_fill_kind=None, tail_fill=None)

    def axis(self, name: str) -> Axis:
        for ax in self.axes:
            if ax.name == name:
                return ax
        raise KeyError(name)


@dataclass(frozen=True)
class View:
    tensor: str
    axis: str
    view: ViewWord
    roles: tuple[str, ...]
    span: Span


@dataclass(frozen=True)
class Align:
    cond: Expr
    message: str
    span: Span


@dataclass(frozen=True)
class KernelArg:
    name: str
    value: Expr
    trims: tuple[tuple[str, str], ...]
    trim_count: Expr
    span: Span


@dataclass(frozen=True)
class Kernel:
    name: str
    views: tuple[View, ...]
    aligns: tuple[Align, ...]
    activation: Expr | None
    args: tuple[KernelArg, ...]
    span: Span


@dataclass(frozen=True)
class Glue:
    kind: str
    package: str
    ops: tuple[tuple[str, str], ...]
    args: tuple[tuple[str, Expr], ...]
    span: Span


@dataclass(frozen=True)
class Shard:
    """How the intermediate axes split over ranks: rank r of `count` reads entries
    [min(r * L, FULL), min((r + 1) * L, FULL)) of every segment of a full checkpoint axis of
    `full` entries, L being the axis's logical size per segment; a rank whose slice is
    shorter than L holds the tensor's fill in the rest. `blocks` None: an even split
    (count * L == FULL); else the slices are whole blocks of `blocks` entries and the last
    ranks may be shorter or empty (count * L >= FULL). `implicit`: no `shard` clause, the
    default `shard intermediate_size over tp_size`."""

    full: Expr
    count: str
    span: Span
    implicit: bool = False
    blocks: Expr | None = None


@dataclass(frozen=True)
class ExpertParallel:
    """`experts NUM over EP placement P ...`: the experts axis split over `count` EP ranks.

    `experts` names the logical expert count, `count` the EP degree (a finite parameter),
    `placement` the literal placements served (`linear`, `round_robin`; plan() takes
    `expert_placement=`, default the first) or one enum parameter of those names;
    `redundant` the EPLB redundant-expert count (physical p holds logical p % experts), or
    None. `stride`: the loader reads experts [rank * stride, rank * stride + L) of the
    checkpoint (L the tensors' experts axis); None: exactly the rank's experts of vLLM's
    expert map. `foreign`: the contract's statement of what a rank's kernel is handed for a
    pair whose expert is foreign (`foreign raw`: the global id; `foreign masked`: local id 0 at
    weight 0), or None: the bound glue's declared `foreign_pairs` (runtime/interface.py).
    `unpadded`: the intermediate pad is skipped under EP (vllm#51131)."""

    experts: str
    count: str
    placement: tuple[str, ...]
    placement_param: bool
    span: Span
    redundant: str | None = None
    stride: Expr | None = None
    foreign: Literal["raw", "masked"] | None = None
    unpadded: bool = False


@dataclass(frozen=True)
class Models:
    """`models ENGINE {RELEASE, ...} "module:Qualified.name" [when COND]`: the engine object the
    contract stands for in those releases, where COND (over parameters only) holds."""

    engine: str
    releases: tuple[str, ...]
    target: str
    when: Expr | None
    span: Span


@dataclass(frozen=True)
class Route:
    """`route ROUTE {FORMAT, ...} [rank N]`: a tool picks the contract for checkpoints of those
    formats (runtime/interface.py ROUTES, CHECKPOINT_FORMATS); rank 1 when the line states none."""

    route: str
    formats: tuple[str, ...]
    rank: int
    span: Span


@dataclass(frozen=True)
class Contract:
    name: str
    file: str
    source_text: str
    sources: tuple[str, ...]
    policy: Literal["error", "fallback"]
    fallback: str | None
    params: tuple[Param, ...]
    lets: tuple[Let, ...]
    rules: tuple[Rule, ...]
    tensors: tuple[Tensor, ...]
    kernel: Kernel | None
    glue: Glue | None
    span: Span
    enum_members: dict[str, EnumT] = field(default_factory=dict, compare=False, hash=False)
    shard: Shard | None = None  # None: nothing is sharded (no tp_size parameter)
    ep: ExpertParallel | None = None  # None: no expert parallelism (every rank holds every expert)
    models: tuple[Models, ...] = ()  # the `models` lines, in source order
    routes: tuple[Route, ...] = ()  # the `route` lines, in source order

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    @property
    def block_shard(self) -> Shard | None:
        """The `shard ... in blocks of B` declaration, or None (no shard, or an even one)."""
        return self.shard if self.shard is not None and self.shard.blocks is not None else None

    def tensor(self, name: str) -> Tensor:
        return next(t for t in self.tensors if t.name == name)

    def weight(self, projection: str) -> Tensor:
        return next(t for t in self.tensors if t.kind == "weight" and t.projection == projection)

    @property
    def requires(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.kind == "require")

    @property
    def admits(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.kind == "admit")

    @property
    def gated(self) -> bool:
        return self.weight("w13").axis("n").segments == 2


def children(node: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of `node`, in source order."""
    match node:
        case Op():
            return node.args
        case Cond():
            return (node.cond, node.then, node.orelse)
        case Select():
            rest = (node.default,) if node.default is not None else ()
            return (node.subject, *(value for _, value in node.cases), *rest)
        case Const() | Ref() | AxisSize() | TensorValue() | Code():
            return ()
        case _:
            assert_never(node)


def reads_format(decode: Expr | None) -> bool:
    """Whether `decode` reads the stored code through a number format (`e4m3fn(code)`,
    `e8m0(code)`, in any arm): then a code on a 1-byte float storage is its byte
    (vocab.holds_byte, the one rule the checker, verifier, emitter and runtime share)."""
    return decode is not None and any(isinstance(n, Op) and n.op.kind is vocab.OpKind.DECODE
                                      and any(isinstance(a, Code) for a in n.args) for n in walk(decode))


def walk(expr: Expr) -> Iterator[Expr]:
    """Yield every sub-expression (pre-order, iteratively)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def shape(e: Expr) -> object:
    """An expression's structure without spans: equal for two expressions that say the same
    thing in the same way (operators, names, constants and match arms included)."""
    match e:
        case Const():
            return ("const", e.value)
        case Ref():
            return ("ref", e.name)
        case AxisSize():
            return ("axis", e.tensor, e.axis)
        case TensorValue():
            return ("tensor", e.tensor)
        case Code():
            return ("code",)
        case Op():
            return ("op", e.op, *(shape(a) for a in e.args))
        case Cond():
            return ("if", shape(e.cond), shape(e.then), shape(e.orelse))
        case Select():
            return ("match", shape(e.subject), *((m, shape(v)) for m, v in e.cases),
                    shape(e.default) if e.default is not None else None)
        case _:
            assert_never(e)


def is_intermediate(tensor: Tensor, axis: Axis) -> bool:
    """Whether `axis` is `tensor`'s intermediate axis (w13.n, w2.k, and the biases, scales and
    zero-points tied to them): the axis `shard_*` splits over ranks and `coverage` proves."""
    return (tensor.projection, axis.name) in (("w13", "n"), ("w2", "k"))


def is_split(tensor: Tensor, axis: Axis) -> bool:
    """Whether a sharded contract splits `axis` over ranks: `tensor`'s intermediate axis, except
    a groups axis of one group (group size -1), which every rank holds whole."""
    one_group = axis.group_size is not None and isinstance(axis.group_size, Const) and axis.group_size.value == -1
    return is_intermediate(tensor, axis) and not one_group
