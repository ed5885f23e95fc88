"""`layoutc run` on a quantized checkpoint (config.json's `quantization_config`).

Order: the scheme is read from the config (checkpoints/quant/config.py: LR150-LR152, LR158),
every expert tensor of every selected layer is held to it (validate.py: LR112, LR153-LR157,
each naming the tensor), and only then is anything run.

- GPTQ / AWQ int4 (`gptq_int4`, `awq_int4`) with the torch_int4pack_gptq_moe contract: each
  rank's padded codes, scales and zeros come from the generated loaders, run on torch's
  int4pack kernel (rank.py), and the ranks are summed in the model dtype (the all-reduce).
- Any other method: no kernel here. Each rank's slice of the intermediate dim (an even
  split, vLLM's) is run through the reference and the ranks summed, so the TP split of the
  dequantized weights is checked; the kernel column says "no kernel for this method on this
  CPU: reference only" and no contract's padded layout is exercised.

The reference: transformers' own experts module of the family (e.g. Qwen3MoeExperts) with
the weights of the independent dequantizer (checkpoints/quant/dequant.py, held to vLLM's
unpackers in tests/test_quant_formats.py), or a float32 loop where the family names no
experts class. transformers' own GPTQ / AWQ loading needs gptqmodel / autoawq and a GPU
kernel, absent here. Tolerance: TOLERANCE of layoutc/tools/run.py on ||out - ref|| / ||ref||
(docs/verification.md, "Quantized checkpoints").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from layoutc.tools.checkpoints.formats import ModelMoE
from layoutc.tools.checkpoints.quant import scheme as S
from layoutc.tools.checkpoints.reader import Checkpoint
from layoutc.tools.runplan import RunError

#: The contract whose generated loaders and glue run GPTQ / AWQ int4 here.
INT4_CONTRACT = "torch_int4pack_gptq_moe"
NO_KERNEL = "no kernel for this method on this CPU: reference only"
_ST_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


@dataclass(frozen=True)
class QuantRow:
    """One layer at one TP degree: the kernel that ran (or NO_KERNEL), the reference, the error."""

    layer: int
    tp_size: int
    intermediate_size_per_partition: int
    intermediate_size_per_partition_padded: int
    rel_error: float
    tolerance: float
    ok: bool
    kernel: str
    reference: str
    kernel_ms: float
    load_ms: float


def model_dtype(ckpt: Checkpoint, moe: ModelMoE, layer: int, requested: str | None) -> str:
    """--dtype, else the dtype the checkpoint stores the layer's router in (bfloat16 / float16 / float32).
    RunError LR102 for any other."""
    if requested:
        return requested
    name, _ = moe.format.router_names(layer)
    stored = str(ckpt.slice(name).get_dtype())
    if stored not in _ST_DTYPES:
        raise RunError("LR102", f"{name} is stored as {stored}; pass --dtype bfloat16, float16 or float32")
    return _ST_DTYPES[stored]


def dequantized(ckpt: Checkpoint, moe: ModelMoE, scheme: S.QuantScheme, layer: int) -> dict[str, Any]:
    """The layer's float32 gate_up_proj [E, 2I, H] ([gate | up]) and down_proj [E, H, I], per-expert
    modules dequantized by checkpoints/quant/dequant.py."""
    import torch

    from layoutc.tools.checkpoints.quant.dequant import dequantize

    gates, ups, downs = [], [], []
    for e in range(moe.num_experts):
        names = S.tensor_names(scheme, moe.format, layer, e)
        w = {}
        for proj, roles in names.items():
            stored = {r: ckpt.tensor(n) for r, n in roles.items() if ckpt.has(n)}
            w[proj] = dequantize(scheme, stored, name=roles["weight"].rsplit(".", 1)[0])
        gates.append(w["gate"])
        ups.append(w["up"])
        downs.append(w["down"])
    return {"gate_up_proj": torch.cat([torch.stack(gates), torch.stack(ups)], dim=1), "down_proj": torch.stack(downs)}


def reference_output(ckpt: Checkpoint, moe: ModelMoE, params: dict[str, Any], x: Any, weights: Any, ids: Any,
                     use_transformers: bool) -> tuple[Any, str]:
    """(float32 [T, H] routed output, its name): transformers' experts module of the family filled
    with `params`, or a float32 loop (no experts class, or --no-transformers)."""
    import torch

    from layoutc.tools.checkpoints.reference import _act, transformers_forward

    module = _experts_module(ckpt, moe, params) if use_transformers else None
    if module is not None:
        return (transformers_forward(module, x, weights, ids),
                f"transformers {type(module).__name__} over the independent dequantizer (checkpoints/quant/dequant.py)")
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32)
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        h = x[tok].to(torch.float32) @ params["gate_up_proj"][e].T
        gate, up = h.chunk(2, dim=-1)
        y = _act(gate, up, moe) @ params["down_proj"][e].T
        out.index_add_(0, tok, y * weights[tok, slot, None].to(torch.float32))
    return out, "a float32 loop over the independent dequantizer (checkpoints/quant/dequant.py)"


def _experts_module(ckpt: Checkpoint, moe: ModelMoE, params: dict[str, Any]) -> Any:
    """transformers' experts class of the family with `params` copied in, or None without one."""
    import importlib

    import torch

    if moe.format.experts_class is None or moe.format.transposed:
        return None
    try:
        import transformers
        modname, cls_name = moe.format.experts_class.split(":")
        cls = getattr(importlib.import_module(f"transformers.models.{modname}"), cls_name)
        config = transformers.AutoConfig.from_pretrained(ckpt.folder)
    except (ImportError, AttributeError, ValueError, KeyError, OSError):
        return None
    if moe.format.text_config:
        config = config.get_text_config()
    config.quantization_config = None
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"
    module = cls(config).to(torch.float32)
    with torch.no_grad():
        for name, value in params.items():
            target = getattr(module, name)
            if tuple(target.shape) != tuple(value.shape):
                return None
            target.copy_(value)
    return module.eval()


def _int4_plan(layout: Any, moe: ModelMoE, scheme: S.QuantScheme, tp: int, dtype: str) -> Any:
    """The contract's plan for this layer at TP degree `tp` (the module's LayoutContractError on a refusal)."""
    values = {"num_experts": moe.num_experts, "hidden_size": moe.hidden_size,
              "intermediate_size": moe.intermediate_size, "tp_size": tp, "group_size": scheme.group_size,
              "activation": moe.activation, "dtype": dtype}
    return layout.plan(**layout.plan_arguments(values))


def int4_layer(mod: Any, experts: list[Any], moe: ModelMoE, scheme: S.QuantScheme, tp: int, dtype: str,
               x: Any, weights: Any, ids: Any) -> tuple[Any, Any, float, float]:
    """All ranks of one layer on the int4pack kernel, summed in `dtype`: (output [T, H], plan,
    slowest rank's load + pack seconds, slowest rank's forward seconds)."""
    import torch

    from layoutc.tools.quant_run import rank as R
    from layoutc.tools.runplan import module_layout

    layout = module_layout(mod)
    plan = _int4_plan(layout, moe, scheme, tp, dtype)
    tdtype = getattr(torch, dtype)
    cfg = R.kernel_config(mod, plan, tdtype)
    total = None
    load_s = kernel_s = 0.0
    for r in range(tp):
        t0 = time.perf_counter()
        tensors = R.load_rank(layout, plan, r, experts, tdtype)
        t1 = time.perf_counter()
        part = R.forward(cfg, tensors, x, weights, ids)
        t2 = time.perf_counter()
        total = part.clone() if total is None else total.add_(part)
        load_s, kernel_s = max(load_s, t1 - t0), max(kernel_s, t2 - t1)
    return total, plan, load_s, kernel_s


def reference_ranks(params: dict[str, Any], moe: ModelMoE, tp: int, x: Any, weights: Any, ids: Any,
                    ckpt: Checkpoint, use_transformers: bool) -> Any:
    """No kernel: each rank's even slice of the dequantized intermediate through the reference, summed."""
    import torch

    size = moe.intermediate_size
    if size % tp:
        raise ValueError(f"intermediate_size {size} does not split evenly over tp={tp}")
    per = size // tp
    total = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32)
    gate_up, down = params["gate_up_proj"], params["down_proj"]
    for r in range(tp):
        rows = torch.cat([torch.arange(r * per, (r + 1) * per), size + torch.arange(r * per, (r + 1) * per)])
        part = {"gate_up_proj": gate_up[:, rows], "down_proj": down[:, :, r * per:(r + 1) * per]}
        out, _ = reference_output(ckpt, replace(moe, intermediate_size=per), part, x, weights, ids, False)
        total += out
    return total


def run_quantized(args: argparse.Namespace, ckpt: Checkpoint, moe: ModelMoE, scheme: S.QuantScheme,
                  layers: list[int], tps: list[int]) -> int:
    """The rows of every layer and TP degree, printed; 0 when all matched, 1 on a mismatch or a
    refused degree. Raises FormatError (the tensor's coded error) before any kernel runs."""
    import importlib

    import torch

    from layoutc.tools.checkpoints.quant.validate import validate
    from layoutc.tools.contract_module import GENERATED_PACKAGE
    from layoutc.tools.quant_run.codes import INT4PACK_SCHEMES, expert_codes
    from layoutc.tools.run import TOLERANCE, inputs, rel_error

    for layer in layers:
        validate(scheme, ckpt, layer, moe)
    dtype = model_dtype(ckpt, moe, layers[0], args.dtype)
    contract = args.contract or INT4_CONTRACT
    runs_int4 = scheme.name in INT4PACK_SCHEMES and contract == INT4_CONTRACT
    mod = importlib.import_module(f"{GENERATED_PACKAGE}.{contract}") if runs_int4 else None
    if args.threads:
        torch.set_num_threads(args.threads)
    rows: list[QuantRow] = []
    refused: list[str] = []
    tol = TOLERANCE[dtype]
    for layer in layers:
        experts = [expert_codes(ckpt, moe, scheme, layer, e) for e in range(moe.num_experts)] if runs_int4 else []
        params = dequantized(ckpt, moe, scheme, layer)
        x, weights, ids = inputs(ckpt, moe, layer, args.tokens, args.seed, dtype)
        ref, ref_name = reference_output(ckpt, moe, params, x, weights, ids, not args.no_transformers)
        for tp in tps:
            if mod is not None:
                try:
                    out, plan, load_s, kernel_s = int4_layer(mod, experts, moe, scheme, tp, dtype, x, weights, ids)
                except mod.LayoutContractError as exc:
                    refused.append(f"layer {layer} tp={tp}: {exc}")
                    continue
                pp, padded = plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded
                kernel = f"{int4pack_name()} ({contract})"
            else:
                t0 = time.perf_counter()
                out = reference_ranks(params, moe, tp, x, weights, ids, ckpt, not args.no_transformers)
                load_s, kernel_s = 0.0, time.perf_counter() - t0
                pp = padded = moe.intermediate_size // tp
                kernel = NO_KERNEL
            rel = rel_error(out, ref)
            rows.append(QuantRow(layer, tp, pp, padded, rel, tol, rel <= tol, kernel, ref_name,
                                 kernel_s * 1e3, load_s * 1e3))
    return _print(args, moe, scheme, dtype, rows, refused)


def int4pack_name() -> str:
    """The kernel column for an int4pack row: the op that ran."""
    from layoutc.runtime.glue.int4pack import FORWARD_OP

    return FORWARD_OP


def _print(args: argparse.Namespace, moe: ModelMoE, scheme: S.QuantScheme, dtype: str, rows: list[QuantRow],
           refused: list[str]) -> int:
    ok = bool(rows) and all(r.ok for r in rows) and not refused
    if args.format == "json":
        sys.stdout.write(json.dumps({"model": args.model_dir, "model_type": moe.format.model_type,
                                     "quantization": scheme.name, "dtype": dtype, "ok": ok,
                                     "rows": [asdict(r) for r in rows], "refused": refused}, indent=2) + "\n")
        return 0 if ok else 1
    print(f"{args.model_dir} ({moe.format.model_type}, {scheme.name}, group {scheme.group_size}, "
          f"act_order={scheme.act_order}, {dtype})")
    print(f"{'layer':>5} {'tp':>3} {'I_pp -> padded':>15} {'rel error':>10} {'tol':>8} {'kernel ms':>10} "
          f"{'load ms':>9}  result  kernel | reference")
    for r in rows:
        pad = f"{r.intermediate_size_per_partition} -> {r.intermediate_size_per_partition_padded}"
        print(f"{r.layer:>5} {r.tp_size:>3} {pad:>15} {r.rel_error:>10.2e} {r.tolerance:>8.0e} {r.kernel_ms:>10.2f} "
              f"{r.load_ms:>9.1f}  {'ok' if r.ok else 'MISMATCH'}  {r.kernel} | {r.reference}")
    for line in refused:
        print(f"refused: {line}")
    return 0 if ok else 1
