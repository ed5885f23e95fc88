"""`layoutc explain CONTRACT --set name=value ...`: one configuration's plan and pictures."""

from __future__ import annotations

import sys

from . import ir
from .diagnostics import has_errors, render_text
from .evaluate import EvalError, Value, eval_expr, eval_lets
from .picture import tensor_picture


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


def explain(path: str, assignments: list[str]) -> int:
    from .check import load
    contract, diags, text = load(path)
    if contract is None or has_errors(diags):
        sys.stderr.write(render_text(diags, {path: text or ""}))
        return 1
    try:
        config = dict(parse_assignment(contract, a) for a in assignments)
    except ValueError as exc:
        sys.stderr.write(f"layoutc explain: error: {exc}\n")
        return 2
    missing = [p.name for p in contract.params if p.name not in config]
    if missing:
        sys.stderr.write(f"layoutc explain: error: set every parameter; missing: {', '.join(missing)}\n")
        return 2
    try:
        env, broken = evaluate_config(contract, config)
    except EvalError as exc:
        sys.stderr.write(f"layoutc explain: error: {exc}\n")
        return 2
    print(f"contract {contract.name} ({path})")
    for name, value in env.items():
        print(f"  {name} = {value}")
    if broken:
        print("not admitted:")
        for b in broken:
            print(f"  {b}")
        return 1
    for tensor in contract.tensors:
        lines = tensor_picture(contract, tensor, env)
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
