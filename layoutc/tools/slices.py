"""Each rank's slice of the intermediate axis under each engine's rule, for ``layoutc explain --engine``.

The two rules differ in where the pad goes. vLLM 0.32 shards first (rank r reads checkpoint
rows [r * I / tp, (r + 1) * I / tp)) and pads each rank's slice to the kernel's alignment;
SGLang 0.5.23 pads the *full* intermediate size to a multiple of tp_size x block
(python/sglang/srt/configs/update_config.py, adjust_config_with_unaligned_cpu_tp) and then
every rank takes whole L-row blocks of it, so the last ranks hold fewer live rows, or none
(a block shard, docs/language.md ``shard``). Both read, per rank, a slice of L_padded rows
whose live rows come first and whose pad follows: w13's gate and up halves each, and w2's k.

Another engine's rule is its CPU contract for the same checkpoint format: the bundled contract
whose `models` lines name that engine's objects for the format (layoutc.tools.audit.engines.ROUTES,
`counterpart`), evaluated at the explained configuration's sizes, so the picture is that
contract's plan, refusals included. Each engine is labelled with the release its contracts
declare (``vLLM 0.32.0``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

from layoutc.compiler import ir
from layoutc.compiler.evaluate import EvalError, Value, eval_expr, eval_lets
from layoutc.tools.audit.engines import counterpart, engine_label, engine_of, live_rows

BAR = 32  # characters of one rank's slice drawing

# What a counterpart takes when the explained contract has no such parameter: the value every
# listed engine's CPU path uses for a checkpoint that does not say (silu experts, bf16 weights).
# gpt-oss's swigluoai alpha 1.702 and limit 7.0: the MXFP4 MoE both CPU paths serve.
FILLS: dict[str, Value] = {"activation": "silu", "dtype": "bfloat16", "swiglu_alpha_milli": 1702,
                           "swiglu_limit_milli": 7000}


def engine_slices(contract: ir.Contract, env: Mapping[str, Value], engines: Sequence[str]) -> list[str]:
    """Text lines: for each engine in ``engines``, its contract, its per-rank padded size and each
    rank's slice (checkpoint rows [start, stop), live and pad counts, a bar of ``#`` live and
    ``.`` pad), runs of ranks with equal slices collapsed. The explained contract draws its own
    engine; another engine draws its counterpart (or says why it cannot). Raises nothing."""
    lines = ["each rank's slice of the intermediate axis (w13's gate and up halves, w2's k) by engine "
             "(# live checkpoint rows, . pad):"]
    own = engine_of(contract)
    bundled = _bundled()
    for engine in engines:
        label = engine_label(engine, [contract] if engine == own else bundled)
        if engine == own:
            lines += _draw(label, contract, env, {})
            continue
        chosen, mine = counterpart(contract, engine, bundled), counterpart(contract, own, [contract, *bundled])
        other = next((c for c in bundled if chosen is not None and c.name == chosen[0]), None)
        if other is not None:
            label = engine_label(engine, [other])
        if chosen is None or other is None:
            lines.append(f"  {label}: no CPU contract for the format {contract.name} serves")
            continue
        if mine is not None and mine[0] == contract.name and any(env.get(k) != v for k, v in mine[1].items()):
            fixed = ", ".join(f"{k}={v}" for k, v in mine[1].items())
            lines.append(f"  {label}: no CPU contract for this variant ({other.name} is the format at {fixed})")
            continue
        config, problem = _config_for(other, env, chosen[1])
        if problem is not None:
            lines.append(f"  {label} ({other.name}): not drawn: {problem}")
            continue
        try:
            other_env = eval_lets(other, config)
        except EvalError as exc:
            lines.append(f"  {label} ({other.name}): not drawn: {exc}")
            continue
        broken = [rule for rule in other.rules if not eval_expr(rule.cond, other_env)]
        if broken:
            lines.append(f"  {label} ({other.name}): refused: {broken[0].kind} (line {broken[0].span.line}): "
                         f"{broken[0].message}")
            continue
        lines += _draw(label, other, other_env, chosen[1])
    return lines


@functools.cache
def _bundled() -> tuple[ir.Contract, ...]:
    """Every bundled contract that checks, by file name (read once per process)."""
    from layoutc.compiler.diagnostics import has_errors
    from layoutc.compiler.source import load
    from layoutc.tools.audit.command import DEFAULT_CONTRACTS_DIR
    if DEFAULT_CONTRACTS_DIR is None:
        return ()
    out = []
    for path in sorted(Path(DEFAULT_CONTRACTS_DIR).glob("*.moe")):
        contract, diags, _ = load(str(path))
        if contract is not None and not has_errors(diags):
            out.append(contract)
    return tuple(out)


def _config_for(other: ir.Contract, env: Mapping[str, Value],
                fixed: Mapping[str, Value]) -> tuple[dict[str, Value], str | None]:
    """The counterpart's parameters: the variant's fixed values, else the explained value of the
    same name, else FILLS, else the declared default; (config, None) or ({}, why not)."""
    config: dict[str, Value] = {}
    for p in other.params:
        value = fixed.get(p.name, env.get(p.name, FILLS.get(p.name, p.default)))
        if value is None:
            return {}, f"it needs {p.name}, which the explained contract does not set"
        in_domain = (p.low <= int(value) <= p.high) if p.kind == "range" else value in p.values
        if not in_domain:
            return {}, f"{p.name}={value} is outside its {p.name} domain"
        config[p.name] = value
    return config, None


def _draw(label: str, contract: ir.Contract, env: Mapping[str, Value], fixed: Mapping[str, Value]) -> list[str]:
    """One engine's header and rank lines: rank r's rows start at min(r * L, I), L being w2's
    logical k (the block-shard rule, the even split when no block shard is declared)."""
    variant = "".join(f", {k}={v}" for k, v in fixed.items())
    full, per, padded = (env.get(n) for n in ("intermediate_size", "intermediate_size_per_partition",
                                              "intermediate_size_per_partition_padded"))
    live = live_rows(contract, env)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (full, per, padded)) or not live:
        return [f"  {label} ({contract.name}{variant}): not drawn: no per-rank intermediate sizes"]
    assert isinstance(full, int) and isinstance(per, int) and isinstance(padded, int)
    step = int(eval_expr(contract.weight("w2").axis("k").logical, env))
    shard = contract.block_shard
    if shard is None:
        rule = f"shard I = {full} into {step} rows per rank, then pad each rank's slice to {padded}"
    else:
        block = eval_expr(shard.blocks, env) if shard.blocks is not None else None
        padded_full = env.get("intermediate_size_padded")
        if padded_full == full:
            rule = f"I = {full} is already a multiple of tp_size x {block}: {step} rows per rank"
        elif padded_full is not None:
            rule = (f"pad I = {full} to {padded_full} (a multiple of tp_size x {block}) before "
                    f"sharding, then {step} rows per rank, the last ranks shorter")
        else:
            rule = f"shard I = {full} in whole blocks of {block}, {step} rows per rank, the last ranks shorter"
        if padded != step:
            rule += f", each slice padded to {padded}"
    lines = [f"  {label} ({contract.name}{variant}): {rule}; L_padded = {padded} per rank, "
             f"waste {1 - sum(live) / (padded * len(live)):.1%}"]
    slices = [(min(rank * step, full), min(rank * step, full) + n) for rank, n in enumerate(live)]
    rank = 0
    while rank < len(slices):
        end = rank
        while end + 1 < len(slices) and live[end + 1] == live[rank]:
            end += 1
        lines.append(_rank_line(rank, end, slices, padded))
        rank = end + 1
    return lines


def _rank_line(first: int, last: int, slices: Sequence[tuple[int, int]], padded: int) -> str:
    start, stop = slices[first]
    n = stop - start
    who = f"rank {first}" if first == last else f"ranks {first}-{last}"
    rows = f"rows [{start}, {stop})" if n else "no rows"
    if last > first and n:
        rows += f" .. [{slices[last][0]}, {slices[last][1]})"
    hashes = round(BAR * n / padded) if padded else 0
    if n and not hashes:
        hashes = 1
    return f"    {who}: {rows}, {n} live + {padded - n} pad  |{'#' * hashes}{'.' * (BAR - hashes)}|"
