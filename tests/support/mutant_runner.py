"""Child process of tests/compiler/test_mutants.py: run compiled contracts on the real kernels.

Reads one JSON job from stdin: {"out": compile folder, "package": name, "jobs":
[{"name": module, "runs": [run, ...]}]}. For each run it prints `BEGIN <name> <i>`
then one `RESULT <json>` line (flushed), so the parent can tell which run was in
flight when this process died (a segfault or abort inside a kernel).

A run is a model configuration (canonical names: num_experts, hidden_size,
intermediate_size, tp_size, activation, dtype, and the contract's own keyword
arguments for `plan()`) plus the checkpoint layout the contract's layout case
declares (axis order of every tensor, and w13.n's layout and segment roles), as
the parent read it from the checked contract. The run builds the full checkpoint
in that layout, shards it for every rank with the module's `shard_*`, prepacks,
calls `fused_moe` per rank and sums the ranks (the all-reduce), then compares with
an independent float64 per-expert loop written from each activation's definition.
"""

from __future__ import annotations

import json
import math
import sys
import traceback
from typing import Any

import torch

from tests.support.loading import load_generated

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Relative Frobenius error allowed, by storage dtype, plus the quantization the glue adds.
TOLERANCE = {"float32": 2e-3, "bfloat16": 4e-2, "float16": 1e-2}
QUANT_TOLERANCE = {"torch_int8pack": 3e-2, "torch_int4pack": 0.2}
SWIGLUOAI_ALPHA = 1.702
SWIGLUOAI_LIMIT = 7.0


def act64(name: str, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The gated activation from its definition, in float64 (no torch.nn.functional)."""
    if name == "silu":
        return gate / (1 + torch.exp(-gate)) * up
    if name == "gelu":
        return 0.5 * gate * (1 + torch.erf(gate / math.sqrt(2.0))) * up
    if name == "gelu_tanh":
        inner = math.sqrt(2.0 / math.pi) * (gate + 0.044715 * gate ** 3)
        return 0.5 * gate * (1 + torch.tanh(inner)) * up
    if name == "swigluoai":  # gpt-oss: clamp gate above, up both sides, (up + 1) * glu
        g = torch.clamp(gate, max=SWIGLUOAI_LIMIT)
        u = torch.clamp(up, min=-SWIGLUOAI_LIMIT, max=SWIGLUOAI_LIMIT)
        return (u + 1) * g / (1 + torch.exp(-SWIGLUOAI_ALPHA * g))
    raise KeyError(f"no reference for activation {name!r}")


def split_rows(rows: torch.Tensor, layout: str, roles: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate, up) of a checkpoint's w13 rows [..., 2I] in the declared layout."""
    if layout == "interleave":
        first, second = rows[..., 0::2], rows[..., 1::2]
    else:  # halves (an unsegmented axis reads as [gate | up])
        half = rows.shape[-1] // 2
        first, second = rows[..., :half], rows[..., half:]
    return (first, second) if roles[0] != "up" else (second, first)


def reference(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, b13: torch.Tensor | None,
              b2: torch.Tensor | None, weights: torch.Tensor, ids: torch.Tensor, act: str,
              layout: str, roles: list[str]) -> torch.Tensor:
    """float64 per-token, per-expert loop. w13 [E, 2I, H], w2 [E, H, I] in (experts, n, k) order."""
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float64)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            h = w13[e] @ x[t]
            if b13 is not None:
                h = h + b13[e]
            gate, up = split_rows(h, layout, roles)
            y = w2[e] @ act64(act, gate, up)
            if b2 is not None:
                y = y + b2[e]
            out[t] += float(weights[t, k]) * y
    return out


def _to_declared(canonical: torch.Tensor, axes: list[str], canon: tuple[str, ...], shape: tuple[int, ...]) -> torch.Tensor:
    """The canonical tensor permuted to the declared axis order, experts cut or zero-extended to `shape`."""
    t = canonical.permute(*[canon.index(a) for a in axes]).contiguous()
    e_axis = axes.index("experts")
    want = shape[e_axis]
    have = t.shape[e_axis]
    if want < have:
        t = t.narrow(e_axis, 0, want).contiguous()
    elif want > have:
        pad_shape = list(t.shape)
        pad_shape[e_axis] = want - have
        t = torch.cat([t, torch.zeros(pad_shape, dtype=t.dtype)], dim=e_axis)
    return t


def run_one(mod: Any, run: dict[str, Any]) -> dict[str, Any]:
    model = run["model"]
    kwargs = run["plan_kwargs"]
    named = (mod.LayoutContractError, mod.KernelUnavailableError)
    try:
        plan = mod.plan(**kwargs)
    except named as exc:
        return {"status": "not-admitted", "detail": str(exc)[:300]}
    torch.manual_seed(run.get("seed", 0))
    E, H, inter, tp = model["num_experts"], model["hidden_size"], model["intermediate_size"], model["tp_size"]
    dtype = DTYPES[model["dtype"]]
    act = model["activation"]
    gen = torch.Generator().manual_seed(run.get("seed", 0))
    w13 = torch.randn(E, 2 * inter, H, generator=gen, dtype=torch.float64) * 0.15
    w2 = torch.randn(E, H, inter, generator=gen, dtype=torch.float64) * 0.15
    b13 = torch.randn(E, 2 * inter, generator=gen, dtype=torch.float64) * 0.2
    b2 = torch.randn(E, H, generator=gen, dtype=torch.float64) * 0.2
    tokens, top_k = 6, 2
    x = torch.randn(tokens, H, generator=gen, dtype=torch.float64)
    if model.get("x_hot"):  # large positive activations: sum(x) overflows float16 in a lane of all-ones
        x = model["x_hot"] * (1 + 0.3 * x)
    ids = torch.stack([torch.randperm(E, generator=gen)[:top_k] for _ in range(tokens)])
    ids[0, 0] = E - 1  # the highest expert id is always routed
    weights = torch.rand(tokens, top_k, generator=gen, dtype=torch.float64)
    # Round the inputs to the storage dtype first, so the reference sees the same numbers.
    w13, w2, b13, b2, x = (t.to(dtype).to(torch.float64) for t in (w13, w2, b13, b2, x))
    use_bias = run.get("bias", False) and hasattr(mod, "pad_w13_bias")
    want = reference(x, w13, w2, b13 if use_bias else None, b2 if use_bias else None, weights, ids, act,
                     run["w13_layout"], run["w13_roles"])
    layout = run["axes"]
    try:
        full13 = _to_declared(w13, layout["w13"], ("experts", "n", "k"), _full_shape(mod, "w13", plan, tp))
        full2 = _to_declared(w2, layout["w2"], ("experts", "n", "k"), _full_shape(mod, "w2", plan, tp))
        fb13 = _to_declared(b13, layout["w13_bias"], ("experts", "n"), _full_shape(mod, "w13_bias", plan, tp)) \
            if use_bias else None
        fb2 = _to_declared(b2, layout["w2_bias"], ("experts", "n"), _full_shape(mod, "w2_bias", plan, tp)) \
            if use_bias else None
        total = torch.zeros(tokens, H, dtype=torch.float64)
        xs = x.to(dtype)
        shard: dict[str, Any]
        if not hasattr(mod, "shard_w13"):
            if tp != 1:  # the module has no TP degree (no `tp_size` parameter): nothing to shard with
                return {"status": "no-tp", "detail": "the module has no shard_* functions"}
            shard = {t: (lambda full, rank, plan, t=t: getattr(mod, f"pad_{t}")(full, plan))
                     for t in ("w13", "w2", "w13_bias", "w2_bias")}
        else:
            shard = {t: getattr(mod, f"shard_{t}", None) for t in ("w13", "w2", "w13_bias", "w2_bias")}
        for rank in range(tp):
            s13 = shard["w13"](full13.to(dtype), rank, plan)
            s2 = shard["w2"](full2.to(dtype), rank, plan)
            p13, p2 = mod.prepack_padded(s13.contiguous(), s2.contiguous(), plan)
            extra = {}
            if fb13 is not None and fb2 is not None:
                extra = {"w13_bias": shard["w13_bias"](fb13.to(dtype), rank, plan),
                         "w2_bias": shard["w2_bias"](fb2.to(dtype), rank, plan)}
            got = mod.fused_moe(xs, p13, p2, weights.to(torch.float32), ids.to(torch.int32), plan, **extra)
            total += got.to(torch.float64)
    except mod.KernelUnavailableError as exc:  # this CPU cannot run it (e.g. no avx512_bf16): not a verdict
        return {"status": "unavailable", "detail": str(exc)[:300]}
    except mod.LayoutContractError as exc:
        return {"status": "refused", "detail": f"{type(exc).__name__}: {str(exc)[:300]}"}
    except Exception as exc:  # a raw exception is a failure of the contract under test
        return {"status": "raw", "detail": "".join(traceback.format_exception_only(type(exc), exc))[:400]}
    if not torch.isfinite(total).all():
        return {"status": "wrong", "detail": "non-finite output", "err": float("nan")}
    err = float((total - want).norm() / want.norm().clamp(min=1e-30))
    tol = TOLERANCE[model["dtype"]] + QUANT_TOLERANCE.get(run.get("glue", ""), 0.0)
    status = "ok" if err <= tol else "wrong"
    return {"status": status, "detail": f"relative error {err:.3g} (tolerance {tol:g})", "err": err}


def _full_shape(mod: Any, tensor: str, plan: Any, tp: int) -> tuple[int, ...]:
    """The full checkpoint's shape: the rank's logical shape with each sharded axis tp times longer."""
    logical = getattr(mod, f"{tensor}_shapes")(plan)[0]
    axes = getattr(mod, f"_{tensor}_axes")(plan)
    return tuple(n * tp if a.sharded else n for n, a in zip(logical, axes, strict=True))


def main() -> int:
    job = json.loads(sys.stdin.read())
    torch.set_num_threads(1)
    for item in job["jobs"]:
        name = item["name"]
        mod = None
        for run in item["runs"]:
            i = run["i"]
            print(f"BEGIN {name} {i}", flush=True)
            try:
                if mod is None:
                    mod = load_generated(job["out"], name, package=job["package"])
                result = run_one(mod, run)
            except Exception as exc:  # harness or import failure: reported, never silent
                result = {"status": "raw", "detail": "".join(traceback.format_exception_only(type(exc), exc))[:400]}
            print("RESULT " + json.dumps({"name": name, "i": i, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
