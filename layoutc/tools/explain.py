"""`layoutc explain CONTRACT --set name=value ... [--engine vllm,sglang]`: one configuration's plan
and pictures, and with ``--engine`` each rank's slice of the intermediate axis under each
engine's rule (layoutc.tools.slices)."""

from __future__ import annotations

from layoutc.compiler import ir
from layoutc.compiler.cases import specialise_for
from layoutc.compiler.diagnostics import Diagnostic, emit, error, exit_code, file_span, has_errors
from layoutc.compiler.evaluate import EvalError, Value, eval_expr, eval_lets
from layoutc.compiler.picture import tensor_picture


def parse_assignment(contract: ir.Contract, text: str) -> tuple[str, Value]:
    """`name=value` -> typed value for the parameter; raises ValueError with a clear message."""
    if "=" not in text:
        raise ValueError(f"--set {text!r}: expected NAME=VALUE")
    name, raw = (part.strip() for part in text.split("=", 1))
    params = {p.name: p for p in contract.params}
    if name not in params:
        raise ValueError(f"--set {name}: unknown parameter; parameters: {', '.join(params)}")
    p = params[name]
    if p.kind in ("range", "set"):
        try:
            if len(raw) > 20:
                raise ValueError
            value: Value = int(raw)
        except ValueError:
            raise ValueError(f"--set {name}={raw}: expected an integer") from None
        if p.kind == "range" and not p.low <= int(value) <= p.high:
            raise ValueError(f"--set {name}={raw}: outside {p.low}..{p.high}")
        if p.kind == "set" and value not in p.values:
            raise ValueError(f"--set {name}={raw}: not one of {list(p.values)}")
        return name, value
    if p.kind == "bool":
        if raw.lower() not in ("true", "false"):
            raise ValueError(f"--set {name}={raw}: expected true or false")
        return name, raw.lower() == "true"
    raw = raw.removeprefix("torch.")
    if raw not in p.values:
        raise ValueError(f"--set {name}={raw}: not one of {', '.join(str(v) for v in p.values)}")
    return name, raw


def evaluate_config(contract: ir.Contract, config: dict[str, Value]) -> tuple[dict[str, Value], list[str]]:
    """Lets plus the list of broken rules (`require`/`admit` messages with their line)."""
    env = eval_lets(contract, config)
    broken = []
    for rule in contract.rules:
        if not eval_expr(rule.cond, env):
            broken.append(f"{rule.kind} (line {rule.span.line}): {rule.message}")
    return env, broken


def explain(path: str, assignments: list[str], fmt: str = "text", engines: str | None = None) -> int:
    """Print one configuration's lets, verdict and tensor pictures (stdout).

    ``engines`` (``--engine``, e.g. ``"vllm,sglang"``; layoutc.tools.audit.engines.parse_engines)
    adds, after the shard, each rank's slice under each engine's rule: the contract's own, and
    for another engine its CPU contract for the same checkpoint format at the same sizes
    (layoutc.tools.slices.engine_slices). An unknown engine is LC703 (exit 2).

    Problems are diagnostics in ``fmt`` (text/json/github): the contract's own (exit
    1; unreadable file exit 2), a bad or missing ``--set`` (parameters with a declared
    default may be left out) or an evaluation error
    (LC703, exit 2). A configuration the contract does not admit exits 1.
    """
    from layoutc.compiler.source import load
    from layoutc.tools.audit.engines import parse_engines
    from layoutc.tools.slices import engine_slices
    contract, diags, text = load(path)
    sources = {path: text or ""}
    if contract is None or has_errors(diags):
        emit(diags, sources, fmt)
        return exit_code(diags)

    def fail(message: str) -> int:
        found: list[Diagnostic] = [error("LC703", file_span(path, contract.span.line), message)]
        emit(found, sources, fmt)
        return exit_code(found)

    try:
        config = dict(parse_assignment(contract, a) for a in assignments)
        engine_names = parse_engines(engines) if engines is not None else ()
    except ValueError as exc:
        return fail(str(exc))
    for p in contract.params:  # a parameter with a declared default (`= N`) may be left out
        if p.name not in config and p.default is not None:
            config[p.name] = p.default
    missing = [p.name for p in contract.params if p.name not in config]
    if missing:
        return fail(f"set every parameter; missing: {', '.join(missing)}")
    try:
        env, broken = evaluate_config(contract, config)
        # the layout this configuration selects: each axis's `when` alternative, the glue's view
        chosen = specialise_for(contract, env)
    except EvalError as exc:
        return fail(f"the configuration cannot be evaluated: {exc}")
    print(f"contract {contract.name} ({path})")
    for name, value in env.items():
        print(f"  {name} = {value}")
    if broken:
        print("not admitted:")
        for b in broken:
            print(f"  {b}")
        return 1
    shard = shard_lines(contract, env)
    if shard:
        print()
        print("\n".join(shard))
    if engine_names:
        print()
        print("\n".join(engine_slices(contract, env, engine_names)))
    for tensor in chosen.tensors:
        lines = tensor_picture(chosen, tensor, env)
        if lines:
            print()
            print("\n".join(lines))
    if contract.kernel is not None and contract.kernel.args:
        print()
        for arg in contract.kernel.args:
            value = eval_expr(arg.value, env)
            trims = eval_expr(arg.trim_count, env)
            axes = ", ".join(f"{t}.{a}" for t, a in arg.trims)
            print(f"kernel argument {arg.name} = {value}: the kernel skips the last {trims} positions of each "
                  f"segment of {axes}")
    return 0


def shard_lines(contract: ir.Contract, env: dict[str, Value]) -> list[str]:
    """Which entries of the full intermediate axis each rank reads: rank r gets
    [min(r * L, FULL), min((r + 1) * L, FULL)) (docs/language.md, `shard`), runs of equal
    lengths collapsed. Empty for an unsharded contract."""
    shard = contract.shard
    if shard is None:
        return []
    w2 = contract.weight("w2")
    L, full, tp = eval_expr(w2.axis("k").logical, env), eval_expr(shard.full, env), env.get(shard.count)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (L, full, tp)):
        return []
    assert isinstance(L, int) and isinstance(full, int) and isinstance(tp, int)
    kind = "in blocks of " + str(eval_expr(shard.blocks, env)) if shard.blocks is not None else "evenly"
    lines = [f"shard: {full} intermediate entries over tp_size={tp} ranks {kind}, {L} per rank"]
    ranks = [(r, min(r * L, full), min((r + 1) * L, full)) for r in range(tp)]
    runs: list[list[tuple[int, int, int]]] = []
    for r in ranks:
        if runs and runs[-1][-1][2] - runs[-1][-1][1] == r[2] - r[1]:
            runs[-1].append(r)
        else:
            runs.append([r])
    for run in runs:
        first, last = run[0], run[-1]
        who = f"rank {first[0]}" if len(run) == 1 else f"ranks {first[0]}-{last[0]}"
        n = first[2] - first[1]
        where = "none (empty)" if n == 0 else f"{n} each, [{first[1]}, {first[2]}) .. [{last[1]}, {last[2]})" \
            if len(run) > 1 else f"{n}, [{first[1]}, {first[2]})"
        lines.append(f"  {who}: {where}")
    return lines
