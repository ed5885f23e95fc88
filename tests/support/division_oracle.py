"""Brute-force truth for the size properties of a contract on a small domain, and a check
of a counterexample's printed numbers against the contract evaluated at its config."""
from __future__ import annotations

import itertools
import re

from layoutc.compiler import ir
from layoutc.compiler.cases import layout_cases
from layoutc.compiler.evaluate import EvalError, axis_sizes, eval_expr, eval_lets
from layoutc.compiler.picture import find_view
from layoutc.compiler.verify.layout_words import ROLE_ID
from layoutc.compiler.verify.properties.shards import sharded_axes

SIZE_PROPS = ("vacuity", "alignment", "placement", "roundtrip", "groups", "kernel-arguments", "coverage", "admission")


class Skip(Exception):
    pass


def domain_size(contract: ir.Contract) -> int:
    n = 1
    for p in contract.params:
        n *= (p.high - p.low + 1) if p.kind == "range" else len(p.values)
    return n


def configs(contract: ir.Contract):
    doms = [range(p.low, p.high + 1) if p.kind == "range" else p.values for p in contract.params]
    names = [p.name for p in contract.params]
    for combo in itertools.product(*doms):
        yield dict(zip(names, combo, strict=True))


def _grouped(axis, value, env):
    if axis.group_size is None:
        return value
    g = int(eval_expr(axis.group_size, env))
    return 1 if g == -1 else value // g


def _phys(layout, k, i, lg, pg):
    if layout in ("none", "pad"):
        return i
    if layout == "halves":
        return k * pg + i
    if layout == "concat":
        return k * lg + i
    return 2 * i + k


def _view(view, j, size, roles):
    if view is None or view.view == "linear":
        return ROLE_ID[roles[0] if roles else ""], j
    r0, r1 = ROLE_ID[view.roles[0]], ROLE_ID[view.roles[1]]
    if view.view == "halves":
        half = size // 2
        return (r0, j) if j < half else (r1, j - half)
    return (r0 if j % 2 == 0 else r1), j // 2


def _tied(c, t, a):
    w = c.weight(t.projection)
    if w is t:
        return None
    try:
        return w.axis(a.name)
    except KeyError:
        return None


def broken(c: ir.Contract, env, index_cap: int = 20000) -> set[str]:
    """Size properties broken at one admitted configuration of one layout case."""
    out: set[str] = set()
    ev = lambda e: eval_expr(e, env)  # noqa: E731
    sizes = {(t.name, a.name): (int(ev(a.logical)), int(ev(a.padded)), a.segments) for t in c.tensors for a in t.axes}
    if c.kernel is not None:
        ks = axis_sizes(c, env)
        for rule in c.kernel.aligns:
            if not eval_expr(rule.cond, env, ks):
                out.add("alignment")
    # placement
    w13, w2 = c.weight("w13").name, c.weight("w2").name
    for a, b in (((w2, "k"), (w13, "n")), ((w13, "k"), (w2, "n"))):
        if sizes[a][:2] != sizes[b][:2]:
            out.add("placement")
    for t in c.tensors:
        for axis in t.axes:
            ref = _tied(c, t, axis)
            if not axis.is_padded and (ref is None or not ref.is_padded):
                continue
            lo, pa, segs = sizes[(t.name, axis.name)]
            layout, roles = axis.layout, axis.roles
            if layout == "none" and ref is not None and ref.segments == 2:
                layout, roles, lo, pa, segs = "concat", ref.roles, lo // 2, lo // 2, 2
            lg, pg = _grouped(axis, lo, env), _grouped(axis, pa, env)
            size_t = segs * pg
            if ref is not None:
                _, rp, rs = sizes[(c.weight(t.projection).name, axis.name)]
                size_k = _grouped(axis, rs * rp, env) if axis.group_size is None else rs * _grouped(axis, rp, env)
                if size_t != size_k:
                    out.add("placement")
            else:
                size_k = size_t
            view = find_view(c, t, axis.name)
            if lg > index_cap:
                raise Skip(f"{t.name}.{axis.name}: {lg} positions")
            for k, role in enumerate(roles or ("",)):
                for i in range(max(0, lg)):
                    j = _phys(layout, k, i, lg, pg)
                    vr, vi = _view(view, j, size_k, roles or ("",))
                    if vr != ROLE_ID[role] or vi != i or j < 0 or j >= size_k:
                        out.add("placement")
                        break
    # roundtrip, groups
    for t in c.tensors:
        for axis in t.axes:
            lo, pa, _ = sizes[(t.name, axis.name)]
            if lo < 0 or pa < lo:
                out.add("roundtrip")
            if axis.is_padded:
                lg, pg = _grouped(axis, lo, env), _grouped(axis, pa, env)
                if lg > 0 and lg > pg:
                    out.add("roundtrip")
            if axis.kind == "groups" and axis.group_size is not None:
                g = int(ev(axis.group_size))
                if g != -1 and (lo % g or pa % g):
                    out.add("groups")
            if axis.pack > 1:
                m = 2 if axis.layout in ("concat", "interleave") else 1
                if (lo * m) % axis.pack or (pa * m) % axis.pack:
                    out.add("groups")
    if c.kernel is not None:
        for arg in c.kernel.args:
            count = int(ev(arg.trim_count))
            for tn, an in arg.trims:
                lo, pa, _ = sizes[(tn, an)]
                if count > pa - lo or count < 0:
                    out.add("kernel-arguments")
    shard = c.shard
    if shard is not None:
        full, tp = int(ev(shard.full)), int(env[shard.count])
        for t, a in sharded_axes(c):
            if a.group_size is not None and not isinstance(a.group_size, ir.Const) and int(ev(a.group_size)) == -1:
                continue
            lo = sizes[(t.name, a.name)][0]
            if shard.blocks is None:
                wrong = tp * lo != full
            else:
                b = int(ev(shard.blocks))
                wrong = tp * lo < full or (tp >= 2 and lo < full and lo % b != 0)
                if a.kind == "groups" and a.group_size is not None:
                    g = int(ev(a.group_size))
                    wrong = wrong or (g != -1 and full % g != 0)
                if a.pack > 1:
                    wrong = wrong or full % a.pack != 0
            if wrong:
                out.add("coverage")
    if out & {"alignment", "groups", "kernel-arguments", "placement", "coverage"}:
        out.add("admission")
    return out


def truth(contract: ir.Contract, limit: int = 200_000) -> dict:
    """Per property: 'counterexample' / 'proved'; 'vacuity'. Also redundant-gate lines and the
    worst w13.n pad percentage. Raises Skip when the domain is too large or undefined somewhere."""
    if domain_size(contract) > limit:
        raise Skip(f"domain {domain_size(contract)}")
    live = 0
    bad: set[str] = set()
    redundant_sets = []
    worst = None
    undefined = 0
    for case in layout_cases(contract):
        c = case.contract
        req = [r for r in c.rules if r.kind == "require"]
        adm = [r for r in c.rules if r.kind == "admit"]
        rejects = {r.span.line: False for r in adm}
        any_admitted = False
        for cfg in configs(c):
            try:
                env = eval_lets(c, cfg)
                if not all(eval_expr(r.cond, env) for r in req):
                    continue
                vals = [bool(eval_expr(r.cond, env)) for r in adm]
            except EvalError:
                undefined += 1
                continue
            for r, v in zip(adm, vals, strict=True):
                if not v:
                    rejects[r.span.line] = True
            if not all(vals):
                continue
            any_admitted = True
            try:
                bad |= broken(c, env)
                w = c.weight("w13").axis("n")
                lo, pa = int(eval_expr(w.logical, env)), int(eval_expr(w.padded, env))
                if pa > 0:
                    frac = (pa - lo) * 100 // pa
                    worst = frac if worst is None else max(worst, frac)
            except EvalError:
                undefined += 1
        if any_admitted:
            live += 1
            redundant_sets.append({line for line, rej in rejects.items() if not rej})
    if undefined:
        raise Skip(f"{undefined} configs undefined")
    result = {"vacuity": "proved" if live else "vacuous"}
    for p in SIZE_PROPS[1:]:
        result[p] = ("counterexample" if p in bad else "proved") if live else "vacuous"
    result["redundant"] = set.intersection(*redundant_sets) if redundant_sets else set()
    result["worst"] = worst
    return result


# ---- printed numbers of a counterexample ----------------------------------------------

def _sizes(c, env):
    return {f"{t.name}.{a.name}": (int(eval_expr(a.logical, env)), int(eval_expr(a.padded, env)), a, t)
            for t in c.tensors for a in t.axes}


def check_message(contract: ir.Contract, verdict) -> list[str]:
    """Problems with a counterexample: its config must be admitted in some layout case and break
    the property there (size properties), and the numbers in its message must be the
    contract's values at that config. Returns a list of complaints (empty: fine)."""
    cex = verdict.counterexample
    if cex is None:
        return []
    msg = verdict.detail
    problems: list[str] = []
    cases = []
    for case in layout_cases(contract):
        c = case.contract
        try:
            env = eval_lets(c, cex.config)
            if all(eval_expr(r.cond, env) for r in c.rules):
                cases.append((c, env))
        except EvalError as exc:
            problems.append(f"config undefined: {exc}")
            return problems
    if verdict.property == "waste":
        if not cases:
            return ["waste witness not admitted"]
        m = re.search(r"\((-?\d+) -> (-?\d+)\) at", msg)
        c, env = cases[0]
        w = c.weight("w13").axis("n")
        want = (int(eval_expr(w.logical, env)), int(eval_expr(w.padded, env)))
        if m and (int(m.group(1)), int(m.group(2))) != want:
            problems.append(f"waste numbers {m.groups()} != {want}")
        m = re.search(r"ranks can be empty, holding only fill \((-?\d+) of (-?\d+) ranks at (.*), (-?\d+) rows each\)", msg)
        if m:
            cfg = {}
            for part in m.group(3).split(", "):
                k, v = part.split("=")
                p = contract.param(k)
                cfg[k] = v if p.kind == "enum" else (v == "True") if p.kind == "bool" else int(v)
            ok = [cc for cc in (case.contract for case in layout_cases(contract))
                  if all(eval_expr(r.cond, eval_lets(cc, cfg)) for r in cc.rules)]
            if not ok:
                problems.append(f"short-rank config {cfg} not admitted")
            else:
                e2 = eval_lets(ok[0], cfg)
                lv = int(eval_expr(ok[0].weight("w13").axis("n").logical, e2))
                tv, fv = int(cfg[ok[0].shard.count]), int(eval_expr(ok[0].shard.full, e2))
                want = (tv - -(-fv // lv), tv, lv)
                if (int(m.group(1)), int(m.group(2)), int(m.group(4))) != want or not (tv - 1) * lv >= fv:
                    problems.append(f"short-rank {m.group(1, 2, 4)} != {want}")
        return problems
    if not cases:
        return [f"config {cex.config} admitted in no layout case"]
    prop = "admission" if verdict.property == "admission" else verdict.property
    if prop in SIZE_PROPS:
        hits = []
        for c, env in cases:
            try:
                hits.append(prop in broken(c, env) or (prop == "admission"))
            except Skip:
                hits.append(True)
        if not any(hits):
            problems.append(f"{prop} holds at printed config {cex.config}")
    # numbers in the message, per obligation kind (the first live case's values)
    c, env = cases[0]
    S = _sizes(c, env)
    for m in re.finditer(r"([\w.]+): logical size (-?\d+) and padded size (-?\d+)", msg):
        if m.group(1) in S and (int(m.group(2)), int(m.group(3))) != S[m.group(1)][:2]:
            problems.append(f"sizes {m.group(0)} != {S[m.group(1)][:2]}")
    for m in re.finditer(r"([\w.]+) holds (-?\d+) -> (-?\d+) per segment but ([\w.]+) holds (-?\d+) -> (-?\d+)", msg):
        a, b = m.group(1), m.group(4)
        got = tuple(int(x) for x in m.group(2, 3, 5, 6))
        want = S[a][:2] + S[b][:2]
        if got != want:
            problems.append(f"agreement {got} != {want}")
    for m in re.finditer(r"([\w.]+): (\d+) ranks each read (-?\d+) of the full (-?\d+)", msg):
        tv, lv, fv = (int(x) for x in m.group(2, 3, 4))
        want = (int(env[c.shard.count]), S[m.group(1)][0], int(eval_expr(c.shard.full, env)))
        if (tv, lv, fv) != want:
            problems.append(f"coverage {(tv, lv, fv)} != {want}")
    m = re.search(r"kernel rule broken: .*\((.*)\)$", msg)
    if m:
        ks = axis_sizes(c, env)
        for part in m.group(1).split(", "):
            mm = re.fullmatch(r"(\w+)\.(\w+) = (-?\d+)", part)
            if mm and ks.get((mm.group(1), mm.group(2))) != int(mm.group(3)):
                problems.append(f"align size {part} != {ks.get((mm.group(1), mm.group(2)))}")
    for m in re.finditer(r"padded (-?\d+), pad (-?\d+) per segment; kernel told (\w+)=(-?\d+), so it skips the last "
                         r"(-?\d+) positions of (?:each segment|the axis) of ([\w.]+)", msg):
        pv, pad, name, told, cv, label = m.groups()
        lo, pa = S[label][:2]
        arg = next(a for a in c.kernel.args if a.name == name)
        want = (pa, pa - lo, int(eval_expr(arg.value, env)), int(eval_expr(arg.trim_count, env)))
        if (int(pv), int(pad), int(told), int(cv)) != want:
            problems.append(f"kernel arg {m.groups()} != {want}")
    for m in re.finditer(r"([\w.]+): (-?\d+) logical positions per segment do not fit injectively into (-?\d+)", msg):
        lo, pa, axis, _ = S[m.group(1)]
        want = (_grouped(axis, lo, env), _grouped(axis, pa, env))
        if (int(m.group(2)), int(m.group(3))) != want:
            problems.append(f"injective {m.groups()} != {want}")
    for m in re.finditer(r"([\w.]+): (-?\d+) -> (-?\d+) values do not fill whole storage elements", msg):
        lo, pa, axis, _ = S[m.group(1)]
        k = 2 if axis.layout in ("concat", "interleave") else 1
        if (int(m.group(2)), int(m.group(3))) != (lo * k, pa * k):
            problems.append(f"packing {m.groups()} != {(lo * k, pa * k)}")
    for m in re.finditer(r"([\w.]+): group (-?\d+) covers positions (-?\d+)\.\.(-?\d+) of [\w. ]+, but only "
                         r"(-?\d+)\.\.(-?\d+) are live: .*\(logical (-?\d+), group (-?\d+)\)", msg):
        lo, pa, axis, _ = S[m.group(1)]
        g = int(eval_expr(axis.group_size, env))
        if (int(m.group(7)), int(m.group(8))) != (lo, g):
            problems.append(f"groups {m.groups()} != {(lo, g)}")
    for m in re.finditer(r"([\w.]+): padded size (-?\d+) is not a whole number of groups of (-?\d+)", msg):
        lo, pa, axis, _ = S[m.group(1)]
        g = int(eval_expr(axis.group_size, env))
        if (int(m.group(2)), int(m.group(3))) != (pa, g) or pa % g == 0:
            problems.append(f"groups {m.groups()} != {(pa, g)}")
    for m in re.finditer(r"([\w.]+) has (-?\d+) positions but the kernel reads it with \w+'s geometry, (-?\d+)", msg):
        lo, pa, axis, t = S[m.group(1)]
        if int(m.group(2)) == int(m.group(3)):
            problems.append(f"shape equal {m.groups()}")
    m = re.search(r"([\w.]+): logical (?:group )?(\w*)\[(-?\d+)\] is stored at position (-?\d+), where the kernel reads "
                  r"(\w*|\?)\[(-?\d+)\]", msg)
    if m:
        label, role, ii, jj, vrole, vidx = m.groups()
        lo, pa, axis, t = S[label]
        ref = _tied(c, t, axis)
        layout, roles, segs = axis.layout, axis.roles, axis.segments
        if layout == "none" and ref is not None and ref.segments == 2:
            layout, roles, lo, pa, segs = "concat", ref.roles, lo // 2, lo // 2, 2
        lg, pg = _grouped(axis, lo, env), _grouped(axis, pa, env)
        k = (roles or ("",)).index(role) if role in (roles or ("",)) else 0
        if ref is not None:
            _, rp, rs = S[f"{c.weight(t.projection).name}.{axis.name}"][0], S[f"{c.weight(t.projection).name}.{axis.name}"][1], \
                S[f"{c.weight(t.projection).name}.{axis.name}"][2].segments
            size_k = _grouped(axis, rs * rp, env) if axis.group_size is None else rs * _grouped(axis, rp, env)
        else:
            size_k = segs * pg
        j = _phys(layout, k, int(ii), lg, pg)
        vr, vi = _view(find_view(c, t, axis.name), j, size_k, roles or ("",))
        names = {0: "gate", 1: "up"} if roles else {0: ""}
        if j != int(jj) or vi != int(vidx) or names.get(vr, "?") != vrole:
            problems.append(f"placement {m.groups()} != j={j} {names.get(vr, '?')}[{vi}]")
        if not 0 <= int(ii) < lg:
            problems.append(f"placement index {ii} outside 0..{lg}")
    return problems
