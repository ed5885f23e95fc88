"""The shard pass: `shard FULL over tp_size [in blocks of B]`, or the default
`shard intermediate_size over tp_size`, or no shard (then nothing may be sized per rank)."""

from __future__ import annotations

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check.exprs import expect, expr
from layoutc.compiler.check.scope import Scope, Sink
from layoutc.compiler.evaluate import TooLarge, finite_values, param_deps
from layoutc.runtime.vocab import Op

# Names integrators give the TP degree; `shard_*` and coverage read `tp_size` only (LC414).
TP_ALIASES = ("tp", "tp_degree", "tp_world_size", "tensor_parallel_size", "tensor_parallel", "world_size",
              "num_ranks", "n_ranks", "ranks", "num_shards", "shards")


def check_shard(scope: Scope, sink: Sink) -> None:
    """Pass: the contract's shard into ``scope.shard`` (None: no shard, or after LC414)."""
    d = scope.first(A.ShardDecl)
    scope.shard = _implicit(scope, sink) if d is None else _declared(scope, sink, d)


def _implicit(scope: Scope, sink: Sink) -> ir.Shard | None:
    """No `shard` line: `tp_size` shards `intermediate_size`; without `tp_size`, no shard."""
    if "tp_size" not in scope.params:
        alias = next((p for p in TP_ALIASES if p in scope.params), None)
        if alias is not None:
            sink.error("LC414", scope.params[alias].span, f"parameter `{alias}` looks like the tensor-parallel "
                       "degree, but only `tp_size` is sharded over: with it named otherwise, no `shard_*` is "
                       "generated and no coverage is proved. Name it `tp_size`")
            return None
        unsharded_per_rank(scope, sink)
        return None
    span = scope.anchor
    if "intermediate_size" not in scope.params and "intermediate_size" not in scope.lets:
        sink.error("LC414", span, "the contract shards over `tp_size` but has no `intermediate_size`: "
                   "declare the full checkpoint size of the sharded axes with `shard FULL over tp_size`")
        return None
    full = expr(scope, sink, A.Name("intermediate_size", span))
    return None if full is None else ir.Shard(full, "tp_size", span, implicit=True)


def _declared(scope: Scope, sink: Sink, d: A.ShardDecl) -> ir.Shard | None:
    if d.count != "tp_size" or "tp_size" not in scope.params:
        sink.error("LC414", d.span, f"`shard ... over {d.count}`: the generated shard functions split over "
                   "the `tp_size` parameter (pass the effective shard count, e.g. dp * tp for MoE, as tp_size)")
        return None
    full = expr(scope, sink, A.Name(d.full, d.span))
    if full is None or not expect(sink, full, ir.INT):
        return None
    if "tp_size" in param_deps(full, scope.lets):
        sink.error("LC414", d.span, f"`shard {d.full} over tp_size`: FULL is the whole checkpoint's size of the "
                   f"sharded axes, the same at every TP degree, but `{d.full}` depends on tp_size (a per-rank "
                   "size?): name the unsharded size, e.g. `intermediate_size`")
        return None
    if d.blocks is None:
        return ir.Shard(full, "tp_size", d.span, blocks=None)
    blocks = _blocks(scope, sink, d.blocks)
    return None if blocks is None else ir.Shard(full, "tp_size", d.span, blocks=blocks)


def _blocks(scope: Scope, sink: Sink, node: A.Expr) -> ir.Expr | None:
    """`in blocks of B`: B a positive int over finite parameters only (LC414)."""
    blocks = expr(scope, sink, node)
    if blocks is None or not expect(sink, blocks, ir.INT):
        return None
    try:
        values = finite_values(blocks, scope.params, scope.lets, spent=scope.enum_work)
    except TooLarge:
        values = None
    bad = sorted(v for v in values if not isinstance(v, int) or v < 1) if values is not None else None
    if bad is None or bad:
        which = f": it can be {bad[0]}" if bad else ": it depends on an integer range parameter"
        sink.error("LC414", node.span, "`shard ... in blocks of B`: B must be a positive integer that "
                   f"ranges over finite parameters only{which}")
        return None
    return blocks


def unsharded_per_rank(scope: Scope, sink: Sink) -> None:
    """LC414 when a contract with no shard still sizes its intermediate axes per rank.

    Without a shard, the generated module has no ranks: no `shard_*`, no coverage proof,
    and the glue adds the whole w2 bias. Each rank would pad its own slice and add the full
    bias, which the rank sum counts tp times (issue 20: rel err 0.96-1.18 at tp 4). So a
    per-rank spelling of the intermediate size is refused whatever its parameters are called:
    a logical size that divides (`/`, `cdiv`, through lets: `intermediate_size /
    tensor_model_parallel_size`, or `if mp == 2 then intermediate_size / 2 else ...`), or one
    that a rule ties to the product of another parameter (vLLM's own spelling: `require
    intermediate_size == intermediate_size_per_partition * tensor_model_parallel_size`).
    """
    for t in scope.tensors.values():
        for axis in (*t.axes, *(g.axis for g in t.guarded)):
            if not ir.is_intermediate(t, axis) or axis.kind == "groups":
                continue  # a groups axis divides by its group size; its weight axis is checked
            why = per_rank_sign(axis.logical, scope.lets, scope.rules)
            if why:
                sink.error("LC414", axis.span, f"`{t.name}.{axis.name}` is sized per rank ({why}), but the contract "
                           "states no shard: without one nothing is sharded or proved covered, and every rank "
                           "would add the whole w2 bias",
                           help="name the degree `tp_size` (the default `shard intermediate_size over "
                           "tp_size`), or state `shard FULL over tp_size`")
                return


def per_rank_sign(size: ir.Expr, lets: dict[str, ir.Let], rules: list[ir.Rule]) -> str:
    """Why `size` reads as one rank's share, or "": it divides (through lets), or a rule
    multiplies one of its parameters by another parameter."""
    divisors: set[str] = set()
    divides = False
    seen: set[str] = set()
    todo = [size]
    while todo:
        for node in ir.walk(todo.pop()):
            if isinstance(node, ir.Ref) and node.kind == "let" and node.name in lets and node.name not in seen:
                seen.add(node.name)
                todo.append(lets[node.name].value)
            elif isinstance(node, ir.Op) and node.op in (Op.DIV, Op.CDIV):
                divides = True
                divisors |= param_deps(node.args[1], lets)
    if divisors:
        return f"its logical size divides by {', '.join(f'`{n}`' for n in sorted(divisors))}"
    if divides:
        return "its logical size divides the full one by a constant chosen per configuration"
    own = param_deps(size, lets)
    for rule in rules:
        for node in ir.walk(rule.cond):
            if not (isinstance(node, ir.Op) and node.op is Op.EQ):
                continue
            for full, product in (node.args, node.args[::-1]):
                if not (isinstance(product, ir.Op) and product.op is Op.MUL):
                    continue
                factors = param_deps(product, lets)
                whole = param_deps(full, lets)
                if own & factors and factors - own and whole and not whole & factors:
                    return (f"line {rule.span.line} states {', '.join(sorted(whole))} as it times "
                            f"`{sorted(factors - own)[0]}`: a per-rank size and a degree")
    return ""
