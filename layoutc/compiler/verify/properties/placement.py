"""The `placement` property: the kernel finds every logical element at its own role and index.

For each padded axis (and each axis tied to a padded weight axis), the position `pad`
stores logical element (role, i) at is read by the kernel's view as that same (role, i);
the two weights agree on the sizes of the dims they share (docs/verification.md, placement).
"""

from __future__ import annotations

from collections.abc import Mapping

import z3  # type: ignore[import-untyped]

from layoutc.compiler import ir
from layoutc.compiler.picture import find_view
from layoutc.compiler.verify.layout_words import ROLE_ID, layout_phys, view_at
from layoutc.compiler.verify.obligations import Obligation, decide
from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Verdict
from layoutc.runtime.algebra import Word


def obligations(run: Run) -> list[Obligation]:
    """The two weights agree on their shared dims; each role of each padded (or tied) axis is
    read back at its own index."""
    c = run.contract
    w13, w2 = c.weight("w13").name, c.weight("w2").name
    obs = [_agreement(run, (w2, "k"), (w13, "n"), "the kernel contracts w2's columns with w13's lanes one by one"),
           _agreement(run, (w13, "k"), (w2, "n"), "both are the model's hidden dim")]
    obs.extend(_spelled_ties(run))
    for t in c.tensors:
        for axis in t.axes:
            ref = _tied_reference(c, t, axis)
            if not axis.is_padded and (ref is None or not ref.is_padded):
                continue
            obs.extend(_axis_placement(run, t, axis, ref))
    return obs


def _spelled_ties(run: Run) -> list[Obligation]:
    """The agreements the checker could not decide because they are spelled differently
    (check/ties.py: `cdiv(I, tp)` against `I / tp`): a bias's lanes and w13's, every experts
    axis's logical size and w13's, and w2's padded experts and w13's. Ties spelled alike
    hold trivially and add nothing."""
    c = run.contract
    w13, w2 = c.weight("w13"), c.weight("w2")
    has = {(t.name, a.name) for t in c.tensors for a in t.axes}
    obs: list[Obligation] = []
    for t in c.tensors:
        pairs = []
        if t.kind == "bias" and (t.name, "n") in has and (c.weight(t.projection).name, "n") in has:
            pairs.append(((t.name, "n"), (c.weight(t.projection).name, "n"), True))
        if t is not w13 and (t.name, "experts") in has and (w13.name, "experts") in has:
            pairs.append(((t.name, "experts"), (w13.name, "experts"), t is w2))
        for a, b, padded in pairs:
            x, y = c.tensor(a[0]).axis(a[1]), c.tensor(b[0]).axis(b[1])
            if ir.shape(x.logical) != ir.shape(y.logical) or (padded and ir.shape(x.padded) != ir.shape(y.padded)):
                obs.append(_agreement(run, a, b, "the kernel reads it with the weight's geometry", padded=padded))
    return obs


def _tied_reference(contract: ir.Contract, tensor: ir.Tensor, axis: ir.Axis) -> ir.Axis | None:
    weight = contract.weight(tensor.projection)
    if weight is tensor:
        return None
    try:
        return weight.axis(axis.name)
    except KeyError:
        return None


def _agreement(run: Run, a: tuple[str, str], b: tuple[str, str], why: str, padded: bool = True) -> Obligation:
    """Two axes that are the same model dim have the same logical (and padded) sizes."""
    la, pa, _ = run.sizes[a]
    lb, pb, _ = run.sizes[b]
    name_a, name_b = ".".join(a), ".".join(b)

    def explain(model):  # type: ignore[no-untyped-def]
        return (f"{name_a} holds {run.val(model, la)} -> {run.val(model, pa)} per segment but {name_b} holds "
                f"{run.val(model, lb)} -> {run.val(model, pb)}: {why}", name_a)
    span = run.contract.tensor(a[0]).axis(a[1]).span
    return Obligation(f"{name_a} agrees with {name_b}", span,
                      z3.And(run.admitted, z3.Or(la != lb, pa != pb) if padded else la != lb), explain, a[0])


def _axis_placement(run: Run, t: ir.Tensor, axis: ir.Axis, ref: ir.Axis | None) -> list[Obligation]:
    c = run.contract
    logical, padded, segs = run.sizes[(t.name, axis.name)]
    layout, roles = axis.layout, axis.roles
    if layout is Word.NONE and ref is not None and ref.segments == 2:
        # a plain axis tied to a segmented weight axis holds the checkpoint's [r0 | r1] unpadded
        layout, roles = Word.CONCAT, ref.roles
        logical = padded = logical / 2
        segs = 2
    logical_g = run.grouped(axis, logical)
    padded_g = run.grouped(axis, padded)
    size_t = segs * padded_g
    if ref is not None:
        _rl, rp, rs = run.sizes[(c.weight(t.projection).name, axis.name)]
        size_k = run.grouped(axis, rs * rp) if axis.group_size is None else rs * run.grouped(axis, rp)
    else:
        size_k = size_t
    view = find_view(c, t, axis.name)
    obs: list[Obligation] = []
    label = f"{t.name}.{axis.name}"
    if ref is not None:
        def shape(model):  # type: ignore[no-untyped-def]
            return (f"{label} has {run.val(model, size_t)} positions but the kernel reads it with "
                    f"{c.weight(t.projection).name}'s geometry, {run.val(model, size_k)} positions", label)
        obs.append(Obligation(f"{label} shape", axis.span, z3.And(run.admitted, size_t != size_k), shape, t.name))
    ctx = run.ctx
    i = z3.Int(f"i.{label}", ctx)
    for k, role in enumerate(roles or ("",)):
        j = layout_phys(layout, k, i, logical_g, padded_g)
        vrole, vidx = view_at(view, j, size_k, roles or ("",))
        broken = z3.Or(vrole != ROLE_ID[role], vidx != i, j < 0, j >= size_k)
        goal = z3.And(run.admitted, i >= 0, i < logical_g, broken)

        def explain(model, j=j, vrole=vrole, vidx=vidx, role=role):  # type: ignore[no-untyped-def]
            names = {0: "gate", 1: "up"} if roles else {0: ""}
            jj, ii = run.val(model, j), run.val(model, i)
            got = f"{names.get(run.val(model, vrole), '?')}[{run.val(model, vidx)}]"
            want = f"{role}[{ii}]" if role else f"[{ii}]"
            unit = "group " if axis.kind == "groups" else ""
            return (f"{label}: logical {unit}{want} is stored at position {jj}, where the kernel reads "
                    f"{got}" + (f" (the kernel's axis has {run.val(model, size_k)} positions)"
                                if jj >= run.val(model, size_k) else ""), f"{label}[{jj}]")
        obs.append(Obligation(f"{label} {role or 'values'}", axis.span, goal, explain, t.name))
    return obs


def check(run: Run, earlier: Mapping[str, Verdict]) -> Verdict:
    """The `placement` verdict: every obligation of :func:`obligations` proved, or why not."""
    return decide(run, "placement", obligations(run), run.contract.span)
