"""The contract AST: frozen dataclasses, each node with a source span.

The parser (``parse.py``) builds these directly from the lark tree; the checker
(``check.py``) turns them into the typed IR (``ir.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from layoutc.compiler.diagnostics import Span
from layoutc.runtime.algebra import ViewWord, Word

# ---- expressions -------------------------------------------------------------


@dataclass(frozen=True)
class IntLit:
    value: int
    span: Span


@dataclass(frozen=True)
class BoolLit:
    value: bool
    span: Span


@dataclass(frozen=True)
class Name:
    name: str
    span: Span


@dataclass(frozen=True)
class AxisSize:
    """`tensor.axis`: the padded size of that axis, in values (before packing)."""

    tensor: str
    axis: str
    span: Span


@dataclass(frozen=True)
class Unary:
    op: Literal["-", "not"]
    operand: Expr
    span: Span


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / % == != < <= > >= and or
    left: Expr
    right: Expr
    span: Span


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True)
class If:
    cond: Expr
    then: Expr
    orelse: Expr
    span: Span


@dataclass(frozen=True)
class MatchArm:
    member: str  # "_" is the wildcard
    value: Expr
    span: Span


@dataclass(frozen=True)
class Match:
    subject: Name
    arms: tuple[MatchArm, ...]
    span: Span


Expr = IntLit | BoolLit | Name | AxisSize | Unary | Binary | Call | If | Match

# ---- declarations ------------------------------------------------------------


@dataclass(frozen=True)
class RangeDomain:
    low: int
    high: int
    span: Span


@dataclass(frozen=True)
class SetDomain:
    values: tuple[int, ...]
    span: Span


@dataclass(frozen=True)
class EnumDomain:
    members: tuple[str, ...]
    member_spans: tuple[Span, ...]
    span: Span


@dataclass(frozen=True)
class BoolDomain:
    span: Span


Domain = RangeDomain | SetDomain | EnumDomain | BoolDomain


@dataclass(frozen=True)
class ContractDecl:
    name: str
    span: Span


@dataclass(frozen=True)
class SourceDecl:
    text: str
    span: Span


@dataclass(frozen=True)
class ModelsDecl:
    """`models ENGINE {RELEASE, ...} "module:Qualified.name" [when COND]`: the engine object
    this contract stands for, in those releases, where COND (over parameters) holds."""

    engine: str
    releases: tuple[tuple[str, Span], ...]
    target: str
    target_span: Span
    when: Expr | None
    span: Span


@dataclass(frozen=True)
class RouteDecl:
    """`route ROUTE {FORMAT, ...} [rank N]`: a tool picks this contract for checkpoints of those
    formats (docs/language.md, "Routes"); rank None when the line states none."""

    route: str
    formats: tuple[tuple[str, Span], ...]
    rank: int | None
    span: Span


@dataclass(frozen=True)
class EpDecl:
    """`experts NUM over EP placement P [redundant R] [load stride S] [foreign raw|masked]
    [intermediate unpadded]`: the experts axis split over EP ranks (docs/language.md)."""

    experts: str
    count: str
    placement: tuple[str, ...]  # one enum parameter, or the literal placements the kernel serves
    span: Span
    redundant: str | None = None
    stride: Expr | None = None
    foreign: Literal["raw", "masked"] | None = None
    unpadded: bool = False


@dataclass(frozen=True)
class ShardDecl:
    """`shard FULL over COUNT [in blocks of B]`: the intermediate axes are COUNT ranks'
    slices of FULL entries; with `blocks`, each rank's slice is a whole number of B-entry
    blocks and the last ranks may be shorter or empty."""

    full: str
    count: str
    span: Span
    blocks: Expr | None = None


@dataclass(frozen=True)
class PolicyDecl:
    kind: Literal["error", "fallback"]
    fallback: str | None
    span: Span


@dataclass(frozen=True)
class ParamDecl:
    name: str
    domain: Domain
    span: Span
    default: int | None = None


@dataclass(frozen=True)
class LetDecl:
    name: str
    value: Expr
    span: Span


@dataclass(frozen=True)
class RuleDecl:
    """`require` (well-formed input) or `admit` (kernel gate, under the policy)."""

    kind: Literal["require", "admit"]
    cond: Expr
    message: str
    span: Span


# ---- tensors -----------------------------------------------------------------


@dataclass(frozen=True)
class PlainAxis:
    size: Expr
    span: Span


@dataclass(frozen=True)
class PaddedAxis:
    """`pad(L -> P)` (roles empty) or `halves|concat|interleave(r0 | r1, L -> P)`, optionally
    `pack N` and `pack N order (s0, ..., sN-1)` (pack_order None: no `order` written)."""

    layout: Word  # PAD, HALVES, CONCAT or INTERLEAVE (never NONE)
    roles: tuple[str, ...]
    logical: Expr
    padded: Expr
    pack: int
    pack_order: tuple[int, ...] | None
    order_span: Span | None
    span: Span


@dataclass(frozen=True)
class GroupsAxis:
    tensor: str
    axis: str
    group_size: Expr
    span: Span


@dataclass(frozen=True)
class LikeAxis:
    tensor: str
    axis: str
    span: Span


AxisSpec = PlainAxis | PaddedAxis | GroupsAxis | LikeAxis


@dataclass(frozen=True)
class AxisDecl:
    name: str
    spec: AxisSpec
    span: Span
    when: Expr | None = None  # `axis n = ... when COND`: this layout applies when COND holds


@dataclass(frozen=True)
class Fill:
    kind: Literal["value", "decoded", "uninit"]
    value: int
    span: Span


@dataclass(frozen=True)
class TensorDecl:
    name: str
    kind: Literal["weight", "scale", "zero", "bias"]
    projection: str
    optional: bool
    axes: tuple[AxisDecl, ...]
    fill: tuple[Fill, ...]
    storage: tuple[tuple[str, Span], ...]
    code: tuple[tuple[int, int, Span], ...]
    decode: tuple[Expr, ...]
    span: Span
    # `tail fill V`: the value past a short rank's slice (a block shard); () when not given
    tail_fill: tuple[Fill, ...] = ()


# ---- kernel and glue ---------------------------------------------------------


@dataclass(frozen=True)
class ViewClause:
    tensor: str
    axis: str
    view: ViewWord
    roles: tuple[str, ...]
    span: Span


@dataclass(frozen=True)
class AlignClause:
    cond: Expr
    message: str
    span: Span


@dataclass(frozen=True)
class ActivationClause:
    value: Expr
    span: Span


@dataclass(frozen=True)
class AxisRef:
    tensor: str
    axis: str
    span: Span


@dataclass(frozen=True)
class ArgClause:
    name: str
    value: Expr
    trims: tuple[AxisRef, ...]
    trim_count: Expr
    span: Span


KernelClause = ViewClause | AlignClause | ActivationClause | ArgClause


@dataclass(frozen=True)
class KernelDecl:
    name: str
    clauses: tuple[KernelClause, ...]
    span: Span


@dataclass(frozen=True)
class GlueDecl:
    kind: str
    package: tuple[tuple[str, Span], ...]
    ops: tuple[tuple[str, str, Span], ...]
    args: tuple[tuple[str, Expr, Span], ...]
    span: Span


Decl = ContractDecl | SourceDecl | ModelsDecl | RouteDecl | ShardDecl | EpDecl | PolicyDecl | ParamDecl | LetDecl | RuleDecl | TensorDecl | KernelDecl | GlueDecl


@dataclass(frozen=True)
class Module:
    file: str
    decls: tuple[Decl, ...]
