"""The expert-parallel pass: `experts NUM over EP placement P [redundant R] [load stride S]
[foreign raw|masked] [intermediate unpadded]` into ``scope.ep`` (LC440 on anything malformed).

The placements are vLLM 0.32's (`vllm.config.parallel.ExpertPlacementStrategy`); their
arithmetic is `layoutc.runtime.experts` (stdlib), which the verifier encodes and the generated
module calls.
"""

from __future__ import annotations

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.exprs import expect, expr
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.runtime.experts import PLACEMENTS


def check_ep(scope: Scope, sink: Sink) -> None:
    """Pass: the contract's expert parallelism into ``scope.ep`` (None: none, or after LC440)."""
    d = scope.first(A.EpDecl)
    if d is None:
        return
    ok = _int_param(scope, sink, d, d.experts, "the expert count", finite=False, low=1)
    ok = _int_param(scope, sink, d, d.count, "the EP degree", finite=True, low=1) and ok
    if d.redundant is not None:
        ok = _int_param(scope, sink, d, d.redundant, "the redundant-expert count", finite=False, low=0) and ok
    placement_param = _placement(scope, sink, d)
    ok = placement_param is not None and ok
    if placement_param is not None and d.redundant is not None and "round_robin" in _names(scope, d):
        # vLLM 0.32 fused_moe/expert_map_manager.py determine_expert_placement_strategy: round_robin
        # needs num_redundant_experts == 0 and no EPLB, else the layer places linearly
        sink.error("LC440", d.span, f"`placement {', '.join(d.placement)} redundant {d.redundant}`: vLLM 0.32 "
                   "falls back from round_robin to linear with redundant experts "
                   "(determine_expert_placement_strategy): declare `placement linear` with `redundant`")
        ok = False
    stride: ir.Expr | None = None
    if d.stride is not None:
        stride = expr(scope, sink, d.stride)
        ok = stride is not None and expect(sink, stride, ir.INT) and ok
    if ok and placement_param is not None:
        scope.ep = ir.ExpertParallel(d.experts, d.count, d.placement, placement_param, d.span, d.redundant,
                                     stride, d.foreign, d.unpadded)


def _int_param(scope: Scope, sink: Sink, d: A.EpDecl, name: str, what: str, *, finite: bool, low: int) -> bool:
    p = scope.params.get(name)
    if p is None or p.kind not in ("range", "set"):
        sink.error("LC440", d.span, f"`experts ... over`: {what} `{name}` must be an int parameter")
        return False
    if finite and p.kind != "set":
        sink.error("LC440", p.span, f"`experts ... over {name}`: {what} must range over a finite set "
                   "(`param NAME: int in {...}`): the coverage proof takes each degree in turn")
        return False
    if p.low < low:
        sink.error("LC440", p.span, f"`experts ... over`: {what} `{name}` can be {p.low}; it must be >= {low}")
        return False
    return True


def _names(scope: Scope, d: A.EpDecl) -> list[str]:
    """The placement names `d` serves: its enum parameter's members, or the literal names."""
    p = scope.params.get(d.placement[0]) if len(d.placement) == 1 else None
    return [str(v) for v in p.values] if p is not None and p.kind == "enum" else list(d.placement)


def _placement(scope: Scope, sink: Sink, d: A.EpDecl) -> bool | None:
    """True: an enum parameter; False: a literal placement; None: LC440."""
    shown = ", ".join(d.placement)
    p = scope.params.get(d.placement[0]) if len(d.placement) == 1 else None
    is_param = p is not None and p.kind == "enum"
    names = _names(scope, d)
    unknown = [n for n in names if n not in PLACEMENTS]
    if unknown or len(set(names)) != len(names):
        why = f"`{unknown[0]}` is a placement vLLM 0.32 does not know" if unknown else "a placement is repeated"
        sink.error("LC440", d.span, f"`placement {shown}`: {why} (it knows {', '.join(PLACEMENTS)}; or name "
                   "one enum parameter whose members are among them)")
        return None
    return is_param
