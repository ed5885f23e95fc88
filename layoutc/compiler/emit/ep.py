"""The expert-parallel part of a generated module's view model (`experts NUM over EP ...`).

plan() takes `expert_placement=` (default: the first placement the contract serves) unless
the contract names an enum parameter for it, and checks the EP configuration with
`_runtime.experts` (coded errors EP01, EP03, EP06); the module exports `local_experts`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from layoutc.compiler import glues, ir
from layoutc.compiler.emit.pyfmt import call, literal


def placement_name(ep: ir.ExpertParallel) -> str:
    """The plan field holding the placement: the enum parameter, or `expert_placement`."""
    return ep.placement[0] if ep.placement_param else "expert_placement"


def ep_params(contract: ir.Contract) -> list[dict[str, Any]]:
    """The synthetic `expert_placement` plan argument (literal placements only)."""
    ep = contract.ep
    if ep is None or ep.placement_param:
        return []
    served = tuple(ep.placement)
    lines = call("expert_placement = _ep.check_served", ["CONTRACT", "expert_placement", literal(served)], 4)
    return [{"name": "expert_placement", "served": served, "check_lines": lines,
             "annotation": f"str = {literal(served[0])}", "field_type": "str",
             "domain": "one of " + ", ".join(repr(s) for s in served) + f" (default {served[0]!r})"}]


def ep_view(contract: ir.Contract, render_expr: Callable[[ir.Expr, str], str]) -> dict[str, Any] | None:
    """What the template needs for `local_experts` and plan()'s EP check, or None.
    render_expr: the emitter's Python spelling of an expression (emit/render.py)."""
    ep = contract.ep
    if ep is None:
        return None
    axis = next(a for a in contract.weight("w13").axes if a.name == "experts") \
        if any(a.name == "experts" for a in contract.weight("w13").axes) else None
    mode, who = glues.foreign_pairs(contract)
    # expert-coverage refuses any other mode, and compile emits only proved contracts: the
    # template's fused_moe runs the kernel through expert_map.run_local (local pairs only)
    assert mode == "dropped", f"{contract.name}: {who} is {mode!r}: expert-coverage refuses it"
    redundant = ep.redundant or "0"
    placement = placement_name(ep)
    return {"experts": ep.experts, "count": ep.count, "placement": placement, "redundant": redundant,
            "check_line": f"    _ep.check_ep({ep.experts}, {ep.count}, {placement}, {redundant})",
            "redundant_field": f"plan.{ep.redundant}" if ep.redundant else "0",
            "axis": render_expr(axis.padded, "plan.") if axis is not None else f"plan.{ep.experts}"}
