"""`layoutc run` on a quantized checkpoint (config.json's `quantization_config`).

Order: the scheme is read from the config (checkpoints/quant/config.py: LR150-LR152, LR158),
every expert tensor of every selected layer is held to it (validate.py: LR112, LR153-LR157,
each naming the tensor), and only then is anything run.

- GPTQ / AWQ int4 (`gptq_int4`, `awq_int4`) with the torch_int4pack_gptq_moe contract: each
  rank's padded codes, scales and zeros come from the generated loaders, run on torch's
  int4pack kernel (rank.py), and the ranks are summed in the model dtype (the all-reduce).
- GPTQ int8 (`gptq_int8`) with the torch_int8pack_gptq_moe contract: the same from the
  checkpoint's own uint8b128 codes on torch's `_weight_int8pack_mm` (rank8.py). Only a
  symmetric channelwise checkpoint fits (one scale per output channel): a grouped one is
  refused by the contract's group_size domain ({-1}), an asymmetric one (stored zeros) with
  LR162, and both fall back to marlin_moe_gptq_int8, reference only.
- Any other method (and GPTQ / AWQ with `--contract marlin_*`): no kernel on this machine
  (Marlin, AITER, FlashInfer are GPU kernels). Each rank's padded tensors are built by the
  method's contract's generated alloc / load (the first whose `route reference` line serves the
  scheme: Marlin's for GPTQ, AWQ and block FP8, vLLM's CPU gpt-oss contract for MXFP4),
  decoded by the contract's decode back to float weights of the padded per-rank shape, run
  through the reference there and summed (quant_run/padded.py), so the layout and the
  inertness of the pads under decode are checked end to end. The kernel column says "no
  kernel for this method on this CPU: reference only (padded by C's loaders ...)". A degree
  the contract refuses is a `refused:` line with its error (exit 1). Per-channel / per-tensor
  FP8, which no contract declares, split the dequantized weights evenly (LR163 when uneven).

The reference: transformers' own sparse-MoE block of the layer, loaded by transformers from
the checkpoint (quant_run/oracle.py: gpt-oss MXFP4 through transformers' own dequantization;
per-expert methods through each quantized module dequantized under its own name by the
independent dequantizer, checkpoints/quant/dequant.py, and loaded by `from_pretrained`), its
routed output and its own routing, as the unquantized path (checkpoints/reference.py). A row is
"ok" only when it matched that reference (`independent`) on a real kernel (`kernel_ran`:
int4pack / int8pack); a reference-only row, or one compared with the family's experts class
or a float32 loop over the declared format (no transformers block), is "unchecked" and exits 1.
The family's activation clamps are held to the kernel's glue first (LR142), and the tokens are
runcompare.py's `run_inputs` (half of them scaled past every clamp config.json states). Tolerance: TOLERANCE
of layoutc/tools/runcompare.py on ||out - ref|| / ||ref||, the larger of the two halves
(docs/verification.md, "Quantized checkpoints").
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.checkpoints.quant import scheme as S
from layoutc.tools.checkpoints.reader import Checkpoint
from layoutc.tools.quant_run.experts_ref import reference_output
from layoutc.tools.quant_run.oracle import QuantOracle, quant_oracle
from layoutc.tools.rankloop import run_ranks
from layoutc.tools.runoptions import RunOptions
from layoutc.tools.runplan import RunError
from layoutc.tools.runrow import Row, print_text, result_words, unchecked, write_json

#: How a `route run` contract of a quantized format runs here, by the torch kernel its `models torch` line
#: names (the contract states the kernel; the runner calls it: rank.py int4pack, rank8.py int8pack), with
#: the schemes that strategy reads codes of (codes.py INT4PACK_SCHEMES, rank8.py INT8PACK_SCHEMES).
KERNEL_STRATEGIES = {"torch:_weight_int4pack_mm_for_cpu": "int4pack", "torch:_weight_int8pack_mm": "int8pack"}
NO_KERNEL = "no kernel for this method on this CPU: reference only"
_ST_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
#: why a reference-only row is "unchecked" although it matched: its kernel side ran no kernel
NO_KERNEL_WHY = {
    "padded": "no kernel ran: the rank's padded tensors, decoded by the contract's own decode, went through "
              "transformers' experts module (the contract's kernel does not run here, and the view it reads is "
              "only declared)",
    "even": "no kernel ran: no contract declares the method, and the kernel side is the dequantized weights split "
            "evenly through a reference",
}


def _ratio_words(out: Any, ref: Any, tol: float, moe: MoEModelConfig) -> str:
    """For a MISMATCH (out, ref float [T, H]) that is a constant factor between the block's output and the kernel's: ": "
    and that factor diagnosed as a scale outside the experts (checkpoints/block.py explain_ratio),
    naming the config key that holds it, or, where the format declares a factor (routed_scale,
    average), the declared fields and what the block measures, as `run`'s own summary words it; ""
    otherwise."""
    from layoutc.tools.checkpoints.block import block_ops, explain_ratio, fit_ratio

    c, residual = fit_ratio(out, ref)
    if residual > tol or abs(c - 1.0) <= tol:
        return ""
    return f": {explain_ratio(c, moe.text_config, block_ops(moe), moe.format.routed_scale)}"


def model_dtype(ckpt: Checkpoint, moe: MoEModelConfig, layer: int, requested: str | None) -> str:
    """--dtype; else config.json's `dtype` (or `torch_dtype`, also under a wrapper's text_config) when it
    is bfloat16 or float16, as vLLM 0.32 runs it (config/model.py _get_and_verify_dtype, dtype "auto":
    the config's dtype; float32 is downcast, so it is not taken from there): auto-round's GPTQ and AWQ
    exports write float16 there while leaving bfloat16 tensors as they are (auto_round 0.16.1
    export/utils.py save_model casts float32 tensors only); else the dtype the checkpoint stores the
    layer's router in (bfloat16 / float16 / float32). RunError LR102 for any other."""
    if requested:
        return requested
    declared = config_dtype(ckpt.config)
    if declared in ("bfloat16", "float16"):
        return declared
    name, _ = moe.format.router_names(layer)
    stored = str(ckpt.slice(name).get_dtype())
    if stored not in _ST_DTYPES:
        raise RunError("LR102", f"{name} is stored as {stored}; pass --dtype bfloat16, float16 or float32")
    return _ST_DTYPES[stored]


def config_dtype(config: dict[str, Any]) -> str | None:
    """config.json's model dtype as written (`dtype`, transformers 5; `torch_dtype`, before), at the top
    level or under `text_config`; None when neither states a string."""
    for scope in (config, config.get("text_config")):
        if isinstance(scope, dict):
            for key in ("dtype", "torch_dtype"):
                value = scope.get(key)
                if isinstance(value, str):
                    return value.removeprefix("torch.")
    return None


def dequantized(ckpt: Checkpoint, moe: MoEModelConfig, scheme: S.QuantScheme, layer: int) -> dict[str, Any]:
    """The layer's float32 gate_up_proj [E, 2I, H] ([gate | up]) and down_proj [E, H, I], dequantized
    by checkpoints/quant/dequant.py: per-expert modules, or gpt-oss's fused tensors (gate_up's
    interleaved rows split into gate = even, up = odd), with the family's biases
    (gate_up_proj_bias [E, 2I] as [gate | up], down_proj_bias [E, H]) where it stores them."""
    import torch

    from layoutc.tools.checkpoints.quant.dequant import dequantize

    fmt = moe.format
    if fmt.fused:
        names = S.tensor_names(scheme, fmt, layer)
        w = {proj: dequantize(scheme, {r: ckpt.tensor(n) for r, n in roles.items() if ckpt.has(n)},
                              name=roles["weight"].rsplit("_", 1)[0]) for proj, roles in names.items()}
        gu = w["gate_up"]
        out = {"gate_up_proj": torch.cat([gu[:, 0::2], gu[:, 1::2]], dim=1), "down_proj": w["down"]}
        plain = fmt.names(layer, None)
        for key, param in (("gate_up_bias", "gate_up_proj_bias"), ("down_bias", "down_proj_bias")):
            name = plain.get(key)
            if name is not None and ckpt.has(name):
                b = ckpt.tensor(name).to(torch.float32)
                out[param] = torch.cat([b[:, 0::2], b[:, 1::2]], dim=1) if key == "gate_up_bias" else b
        return out
    gates, ups, downs = [], [], []
    for e in range(moe.num_experts):
        names = S.tensor_names(scheme, fmt, layer, e)
        w = {}
        for proj, roles in names.items():
            stored = {r: ckpt.tensor(n) for r, n in roles.items() if ckpt.has(n)}
            w[proj] = dequantize(scheme, stored, name=roles["weight"].rsplit(".", 1)[0])
        gates.append(w["gate"])
        ups.append(w["up"])
        downs.append(w["down"])
    return {"gate_up_proj": torch.cat([torch.stack(gates), torch.stack(ups)], dim=1), "down_proj": torch.stack(downs)}


def _gate_up_modules(moe: MoEModelConfig, scheme: S.QuantScheme, layer: int) -> list[str]:
    """The module names (as quant_run/oracle.py `dequantized_source` names them: the weight's name less
    its suffix) of `layer`'s gate and up projections, every expert; [] for a fused format."""
    if moe.format.fused:
        return []
    suffix = scheme.weight().suffix
    out: list[str] = []
    for e in range(moe.num_experts):
        names = S.tensor_names(scheme, moe.format, layer, e)
        out.extend(names[p]["weight"][: -len(suffix)] for p in ("gate", "up") if p in names)
    return out


def _int4_plan(layout: Any, moe: MoEModelConfig, scheme: S.QuantScheme, tp: int, dtype: str) -> Any:
    """The contract's plan for this layer at TP degree `tp` (the module's LayoutContractError on a refusal)."""
    values = {"num_experts": moe.num_experts, "hidden_size": moe.hidden_size,
              "intermediate_size": moe.intermediate_size, "tp_size": tp, "group_size": scheme.group_size,
              "activation": moe.activation, "dtype": dtype}
    return layout.plan(**layout.plan_arguments(values))


def int4_layer(mod: Any, experts: Sequence[Any], moe: MoEModelConfig, scheme: S.QuantScheme, tp: int, dtype: str,
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
    k = run_ranks(R.Int4Ranks(layout, plan, experts, cfg), range(tp), x, (weights, ids), warmup=False, iters=1)
    return k.output, plan, k.load_s, k.kernel_s


def int8_layer(mod: Any, ckpt: Checkpoint, moe: MoEModelConfig, scheme: S.QuantScheme, layer: int, tp: int, dtype: str,
               x: Any, weights: Any, ids: Any) -> tuple[Any, Any, float, float]:
    """All ranks of one GPTQ int8 layer on the int8pack kernel, summed in `dtype`: (output [T, H],
    plan, slowest rank's load + pack seconds, slowest rank's forward seconds). Raises RunError
    LR162 for stored zero points (padded.check_holds: the contract's decode reads none) and the
    module's LayoutContractError for a degree or group size the contract refuses, before any
    code is read."""
    import torch

    from layoutc.tools.quant_run import rank8
    from layoutc.tools.quant_run.codes import LayerCodes
    from layoutc.tools.quant_run.padded import check_holds, contract_ir
    from layoutc.tools.runplan import module_layout

    check_holds(contract_ir(mod), scheme)
    layout = module_layout(mod)
    plan = _int4_plan(layout, moe, scheme, tp, dtype)
    experts = LayerCodes(ckpt, moe, scheme, layer)  # read per rank, one expert at a time
    cfg = rank8.kernel_config(mod, plan, getattr(torch, dtype))
    k = run_ranks(rank8.Int8Ranks(layout, plan, experts, cfg), range(tp), x, (weights, ids), warmup=False, iters=1)
    return k.output, plan, k.load_s, k.kernel_s


def reference_ranks(params: dict[str, Any], moe: MoEModelConfig, scheme: S.QuantScheme, tp: int, x: Any, weights: Any,
                    ids: Any, ckpt: Checkpoint, use_transformers: bool) -> Any:
    """No contract declares the method (per-channel / per-tensor FP8): each rank's even slice
    of the dequantized intermediate (vLLM's split) through the reference, summed in float32.
    RunError LR163 when the intermediate does not split evenly over `tp` (a refused row)."""
    import torch

    size = moe.intermediate_size
    if size % tp:
        raise RunError("LR163", f"no contract declares {scheme.name}, and intermediate_size {size} does not split "
                       f"evenly over tp={tp} for the dequantized-weights reference (vLLM needs I % tp == 0)")
    per = size // tp
    total = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32)
    gate_up, down = params["gate_up_proj"], params["down_proj"]
    for r in range(tp):
        rows = torch.cat([torch.arange(r * per, (r + 1) * per), size + torch.arange(r * per, (r + 1) * per)])
        part = {"gate_up_proj": gate_up[:, rows], "down_proj": down[:, :, r * per:(r + 1) * per]}
        if "gate_up_proj_bias" in params:
            part["gate_up_proj_bias"] = params["gate_up_proj_bias"][:, rows]
        if "down_proj_bias" in params:
            part["down_proj_bias"] = params["down_proj_bias"] * (1.0 if r == 0 else 0.0)
        out, _ = reference_output(ckpt, replace(moe, intermediate_size=per), part, x, weights, ids, use_transformers)
        total += out
    return total


def reference_contract(args: RunOptions, scheme: S.QuantScheme) -> str | None:
    """The contract whose loaders a reference-only row runs through: --contract, else the first
    (lowest rank) whose `route reference` line serves the scheme (tools/routes.py) and stands for the
    checkpoint's own method where one does; None when no contract declares the method. RunError LR125
    when two contracts claim the scheme at one rank."""
    from layoutc.tools.routes import route_contracts

    if args.contract:
        return str(args.contract)
    found = route_contracts("reference", scheme.name)
    if not found:
        return None
    return next(c for c in found if c not in own_method_left_out(found, scheme.method))


def own_method_left_out(contracts: Sequence[str], quant_method: str) -> dict[str, str]:
    """{contract: why} for the generated contracts among `contracts` that stand for another quantization
    method's object than `quant_method`'s, where one of them stands for its own (checkpoints/quant/methods.py,
    read from each module's `LAYOUT.models`; a module that cannot be imported is not a candidate)."""
    import importlib

    from layoutc.tools.checkpoints.quant.methods import left_out
    from layoutc.tools.contract_module import GENERATED_PACKAGE

    lines: dict[str, list[tuple[str, str]]] = {}
    for name in contracts:
        try:
            mod = importlib.import_module(f"{GENERATED_PACKAGE}.{name}")
        except ImportError:
            continue
        lines[name] = [(m.engine, m.target) for m in mod.LAYOUT.models]
    return left_out(lines, quant_method)


def own_method_gate(scheme: S.QuantScheme) -> tuple[str, Any] | None:
    """(contract, generated module) of the contract that states only the checkpoint's own quantization
    method (checkpoints/quant/methods.py states_only_method: its `models` lines are vLLM objects of
    `scheme.method`) and takes the checkpoint's format (audit/formats.py `takes`, read from the contract's
    tensors), e.g. vllm_ct_wna16_int4_moe for compressed-tensors W4A16; None when no contract states it.
    Every route of a row runs only where this contract's plan() admits the degree: vLLM loads the
    checkpoint through that method (CompressedTensorsWNA16MoEMethod.create_weights refuses I / tp that is
    not whole groups, where torch_int4pack_gptq_moe alone would pad the last rank). RunError LR160 / LR165
    when its contract text cannot be read (quant_run/padded.py contract_ir)."""
    import importlib

    from layoutc.runtime.models import declarations
    from layoutc.tools.audit.formats import scheme_format, takes
    from layoutc.tools.checkpoints.quant.methods import states_only_method
    from layoutc.tools.contract_module import GENERATED_PACKAGE
    from layoutc.tools.quant_run.padded import contract_ir

    fmt = scheme_format(scheme)
    lines: dict[str, list[tuple[str, str]]] = {}
    for d in declarations(GENERATED_PACKAGE):
        lines.setdefault(d.module, []).append((d.entry.engine, d.entry.target))
    for module, pairs in lines.items():
        if states_only_method(pairs, scheme.method):
            mod = importlib.import_module(module)
            if not isinstance(takes(contract_ir(mod), fmt), str):
                return str(mod.CONTRACT), mod
    return None


def own_method_refusal(gate: tuple[str, Any] | None, moe: MoEModelConfig, scheme: S.QuantScheme, tp: int,
                       dtype: str) -> str | None:
    """`error[LR170]: ...` (methods.py own_refusal) when the own method's contract (`own_method_gate`)
    refuses degree `tp` for this layer; None when it admits, or when no contract stands for the method."""
    from layoutc.tools.checkpoints.quant.methods import own_refusal
    from layoutc.tools.runplan import module_layout

    if gate is None:
        return None
    contract, mod = gate
    layout = module_layout(mod)
    values = {"num_experts": moe.num_experts, "hidden_size": moe.hidden_size,
              "intermediate_size": moe.intermediate_size, "tp_size": tp, "group_size": scheme.group_size,
              "activation": moe.activation, "dtype": dtype}
    if any(p.kind in ("set", "enum") and p.name in values and values[p.name] not in p.values
           for p in mod.LAYOUT.plan_params):
        return None  # a value the contract's finite domain does not list (a group size of 48): it cannot
        # say what the method does there; the routes' own, narrower domains refuse it
    try:
        _int4_plan(layout, moe, scheme, tp, dtype)
    except ValueError as exc:  # the generated module's LayoutContractError (a ValueError)
        if not isinstance(exc, mod.LayoutContractError):
            raise
        return own_refusal(contract, [(m.engine, m.target) for m in mod.LAYOUT.models], scheme.method, str(exc))
    return None


#: vLLM 0.32's CPU experts class for a method (model_executor/layers/fused_moe/experts/cpu_moe.py;
#: each one's `_supports_current_device` needs x86 with AMX tiles). GPTQ int8 (W8A16) and
#: per-channel / per-tensor FP8 have none (CPUExpertsInt8 is W8A8, CPUExpertsFp8 block only).
VLLM_CPU_EXPERTS = {"gptq_int4": "CPUExpertsInt4", "awq_int4": "CPUExpertsInt4", "fp8_block": "CPUExpertsFp8",
                    "mxfp4": "CPUExpertsMxfp4"}


def _needs(scheme: S.QuantScheme) -> str | None:
    """Why vLLM's CPU kernel for the method does not run here, or None when it has none."""
    import platform

    import torch

    cls = VLLM_CPU_EXPERTS.get(scheme.name)
    if cls is None:
        return None
    if platform.machine() in ("x86_64", "AMD64") and bool(torch.cpu._is_amx_tile_supported()):
        return f"vLLM 0.32's {cls} could run here (AMX), but layoutc binds no glue for it"
    return f"needs x86 AMX tiles for vLLM 0.32's {cls}; this CPU has none"


def no_kernel_text(contract: str | None, scheme: S.QuantScheme) -> str:
    """The kernel column of a reference-only row: NO_KERNEL (with why vLLM's CPU kernel for the
    method does not run, where it has one) and whose loaders padded the rank."""
    needs = _needs(scheme)
    text = NO_KERNEL if needs is None else NO_KERNEL.replace(": reference only", f" ({needs}): reference only")
    if contract is None:
        return f"{text} (no contract declares this method: dequantized weights split evenly, no padded layout)"
    return f"{text} (padded by {contract}'s loaders, decoded by its decode)"


@dataclass(frozen=True)
class _Route:
    """One way to run a row: "int4pack" / "int8pack" (the kernel), "padded" (a contract's loaders, reference
    only) or "even" (no contract: the dequantized weights split evenly); mod: the generated module."""

    kind: str
    contract: str | None
    mod: Any


def _routes(args: RunOptions, scheme: S.QuantScheme) -> list[_Route]:
    """The routes of a row, in order: each contract whose `route run` line serves the scheme (rank
    order; GPTQ / AWQ int4 on int4pack, GPTQ int8 on int8pack: KERNEL_STRATEGIES), then (no --contract,
    or a --contract that is none of them) the method's reference contract where the kernel refuses the
    degree (e.g. group -1, or I % g != 0; int8pack: a group size other than -1, stored zeros): --contract,
    else the first whose `route reference` serves the scheme, else "even". RunError LR120 when a
    contract's generated module is absent, LR126 when a `route run` contract names no kernel this runner
    calls for the scheme, LR125 when two contracts claim one route at one rank."""
    import importlib

    from layoutc.tools.contract_module import GENERATED_PACKAGE
    from layoutc.tools.routes import route_contracts

    def module(contract: str) -> Any:
        try:
            return importlib.import_module(f"{GENERATED_PACKAGE}.{contract}")
        except ImportError:
            raise RunError("LR120", f"no generated module {GENERATED_PACKAGE}.{contract} (run layoutc compile)") \
                from None

    routes: list[_Route] = []
    for contract in route_contracts("run", scheme.name):
        if args.contract not in (None, contract):
            continue
        mod = module(contract)
        routes.append(_Route(kernel_strategy(contract, mod, scheme), contract, mod))
        if args.contract is not None:
            return routes
    ref = reference_contract(args, scheme)
    routes.append(_Route("even", None, None) if ref is None else _Route("padded", ref, module(ref)))
    return routes


def kernel_strategy(contract: str, mod: Any, scheme: S.QuantScheme) -> str:
    """"int4pack" or "int8pack": how the runner runs `contract` (its generated module `mod`, whose
    `route run` serves `scheme`), from the torch kernel its `models torch` line names
    (KERNEL_STRATEGIES). RunError LR126 when it names none, or one whose codes reader does not read
    the scheme, or a contract that lacks a tensor the strategy loads into (int4pack: weight, scale and
    zero of w13 and w2, quant_run/rank.py load_rank; int8pack: weight and scale, rank8.py)."""
    from layoutc.tools.quant_run.codes import INT4PACK_SCHEMES
    from layoutc.tools.quant_run.rank8 import INT8PACK_SCHEMES

    reads = {"int4pack": INT4PACK_SCHEMES, "int8pack": INT8PACK_SCHEMES}
    kinds = [KERNEL_STRATEGIES[m.target] for m in mod.LAYOUT.models_of("torch") if m.target in KERNEL_STRATEGIES]
    if len(kinds) != 1 or scheme.name not in reads[kinds[0]]:
        each = "; ".join(f"{k}: {' '.join(v)}" for k, v in reads.items())
        raise RunError("LR126", f"contract {contract} declares `route run` for {scheme.name}, but the quantized runner "
                       f"runs only {', '.join(KERNEL_STRATEGIES)} (the `models torch` line names the kernel), each "
                       f"on its own schemes ({each})")
    roles = ("weight", "scale", "zero") if kinds[0] == "int4pack" else ("weight", "scale")
    missing = [f"{k} {p}" for k in roles for p in ("w13", "w2") if not mod.LAYOUT.tensors_of(k, p)]
    if missing:
        raise RunError("LR126", f"contract {contract} declares `route run` for {scheme.name} on {kinds[0]}, but "
                       f"declares no {', '.join(missing)} tensor, which that route loads the checkpoint's codes into "
                       "(a contract for the checkpoint's own codes states them all)")
    return kinds[0]


def run_quantized(args: RunOptions, ckpt: Checkpoint, moe: MoEModelConfig, scheme: S.QuantScheme,
                  layers: list[int], tps: list[int], built: QuantOracle | None = None) -> int:
    """The rows of every layer and TP degree, printed; 0 when all matched, 1 on a mismatch or a
    refused degree (every route's refusal: the contract's LayoutContractError, or RunError
    LR160-LR164 from quant_run/padded.py, as one `refused:` line). Raises FormatError (the
    tensor's coded error) before any kernel runs; RunError LR120 when a contract's generated
    module is absent. built: the layers' oracle the --format-file / proposal proof already built
    (`quant_oracle`; built here when None), so the reference is built once."""
    import torch

    from layoutc.tools.checkpoints.block import block_ops, combine, kernel_routing
    from layoutc.tools.checkpoints.quant.methods import own_refusal
    from layoutc.tools.checkpoints.quant.validate import validate
    from layoutc.tools.checkpoints.reach import ReachMeter
    from layoutc.tools.checkpoints.reference import input_reach, reference
    from layoutc.tools.checkpoints.reference import route as declared_route
    from layoutc.tools.quant_run import padded
    from layoutc.tools.quant_run.codes import LayerCodes
    from layoutc.tools.runcompare import TOLERANCE, halves_error, hidden_states, run_inputs
    from layoutc.tools.runmemory import peak_kib as _peak_kib
    from layoutc.tools.runmemory import peak_mark as _peak_mark
    from layoutc.tools.runmemory import trim as _trim
    from layoutc.tools.runprogress import LayerFigures, build_entry, built_between
    from layoutc.tools.runprogress import Progress as _Progress

    ops = block_ops(moe)
    for layer in layers:
        validate(scheme, ckpt, layer, moe)
    dtype = model_dtype(ckpt, moe, layers[0], args.dtype)
    routes = _routes(args, scheme)
    gate = own_method_gate(scheme)  # the method's own admission, before any route (issue 45 item 5)
    for route_ in routes:  # LR142: a clamp the kernel's glue does not compute, before anything runs
        if route_.kind in ("int4pack", "int8pack"):
            from layoutc.tools.checkpoints.activation import check_activation
            check_activation(moe, route_.mod, str(route_.contract), layers)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows: list[Row] = []
    refused: list[str] = []
    tol = TOLERANCE[dtype]
    use_tf = not args.no_transformers
    no_pretrained = bool(args.no_from_pretrained)
    # gate/up module name -> the layer's ReachMeter: the reach is measured as the reference dequantizes the
    # layer (dequantized_source's tap), so the layer is dequantized once
    built = built or quant_oracle(ckpt, moe, scheme, layers, use_tf and not no_pretrained)
    oracle, how, taps = built.oracle, built.how, built.taps
    progress = _Progress(len(layers) * len(tps), sys.stderr.isatty())
    figures: list[LayerFigures] = []
    for layer in layers:
        _trim()
        _peak_mark()
        t0 = time.perf_counter()
        kinds = {r.kind for r in routes}
        # read per rank, one expert at a time (codes.LayerCodes): no layer of codes is held
        experts = LayerCodes(ckpt, moe, scheme, layer) if "int4pack" in kinds else []
        sources = padded.expert_sources(ckpt, moe, scheme, layer) if "padded" in kinds else {}
        meter = ReachMeter(hidden_states(moe, layer, args.tokens, args.seed, dtype))
        wanted = _gate_up_modules(moe, scheme, layer)
        taps.clear()
        taps.update(dict.fromkeys(wanted, meter))
        built_before = build_entry(oracle, layer)
        entry = oracle.layers.get(layer) if oracle is not None else None  # dequantizes the layer, measuring it
        taps.clear()
        params: dict[str, Any] | None = None
        if wanted and len(meter) == len(wanted):
            reach = meter.reach(moe.text_config, layer)
        else:  # no reference dequantized every gate/up: dequantize the layer once, for the reach and any reference
            params = dequantized(ckpt, moe, scheme, layer)
            reach = input_reach(meter.x, params["gate_up_proj"], False, moe.text_config, layer)
        del meter
        x, scale, reach = run_inputs(ckpt, moe, layer, args.tokens, args.seed, dtype, reach=reach)
        t1 = time.perf_counter()
        if entry is not None and (entry.block or entry.routes_experts):  # transformers' own block: independent
            own = reference(ckpt, moe, layer, x, oracle=oracle)
            ref, weights, ids = own.output, own.weights, own.ids
            ref_name, independent, why_ref = f"{own.name}, over {how}", True, ""
            del own
        else:
            weights, ids = declared_route(ckpt, moe, layer, x)
            params = params if params is not None else dequantized(ckpt, moe, scheme, layer)
            ref, ref_name = reference_output(ckpt, moe, params, x, weights, ids, use_tf)
            independent = False
            why_ref = "--no-transformers" if not use_tf else "--no-from-pretrained" if no_pretrained else \
                (oracle.why(layer) if oracle is not None and oracle.why(layer) else f"no transformers block in layer {layer}")
            why_ref = f"no independent reference ({why_ref}): a reference built from the declared format"
        # the block's step after its experts (checkpoints/block.py): the kernels get the routed slots, and
        # their output is scaled / given the identity slots before it is compared with the block
        block_w, block_i = weights, ids
        weights, ids = kernel_routing(weights, ids, moe.num_experts)
        build = built_between(built_before, build_entry(oracle, layer))  # a proof's earlier build is not this one
        entry = None
        if oracle is not None:
            oracle.release()
        if params is not None and "even" not in kinds:
            params = None
        t2 = time.perf_counter()
        t1 -= build  # the reference's build ran before the inputs (it measured their reach)
        first = len(rows)
        compare = 0.0
        for tp in tps:
            why: list[str] = []
            refusal = own_method_refusal(gate, moe, scheme, tp, dtype)
            if refusal is not None:
                refused.append(f"layer {layer} tp={tp}: {refusal}")
                progress.step(f"layer {layer} tp={tp}")
                continue
            for route in routes:
                try:
                    if route.kind == "int4pack":
                        out, plan, load_s, kernel_s = int4_layer(route.mod, experts, moe, scheme, tp, dtype, x,
                                                                 weights, ids)
                        pp, pad = plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded
                        kernel, name = f"{int4pack_name()} ({route.contract})", ref_name
                    elif route.kind == "int8pack":
                        out, plan, load_s, kernel_s = int8_layer(route.mod, ckpt, moe, scheme, layer, tp, dtype,
                                                                 x, weights, ids)
                        pp, pad = plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded
                        kernel, name = f"{int8pack_name()} ({route.contract})", ref_name
                    elif route.kind == "padded":
                        out, plan, rank_ref, load_s, kernel_s = padded.reference_layer(
                            route.mod, ckpt, moe, scheme, layer, tp, dtype, x, weights, ids, use_tf, sources)
                        pp, pad = plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded
                        kernel = no_kernel_text(route.contract, scheme)
                        name = f"{rank_ref}, ranks summed, against {ref_name}"
                    else:
                        t0 = time.perf_counter()
                        if params is None:
                            params = dequantized(ckpt, moe, scheme, layer)
                        out = reference_ranks(params, moe, scheme, tp, x, weights, ids, ckpt, use_tf)
                        load_s, kernel_s = 0.0, time.perf_counter() - t0
                        pp = pad = moe.intermediate_size // tp
                        kernel, name = no_kernel_text(None, scheme), ref_name
                except RunError as exc:
                    if exc.code not in ("LR160", "LR161", "LR162", "LR163", "LR164"):
                        raise
                    why.append(f"error[{exc.code}]: {exc}")
                    continue
                except ValueError as exc:  # the generated module's LayoutContractError (a ValueError)
                    if route.mod is None or not isinstance(exc, route.mod.LayoutContractError):
                        raise
                    why.append(own_refusal(str(route.contract), [(m.engine, m.target) for m in route.mod.LAYOUT.models],
                                           scheme.method, str(exc)) or str(exc))
                    continue
                tc = time.perf_counter()
                if independent:
                    out = combine(out, x, block_w, block_i, ops, moe.num_experts)
                rel = halves_error(out, ref)
                compare += time.perf_counter() - tc
                ran = route.kind in ("int4pack", "int8pack")
                no_run = NO_KERNEL_WHY["padded" if route.kind == "padded" else "even"]
                why_not = "; ".join(w for w in (why_ref, "" if ran else no_run) if w)
                result = result_words(rel <= tol, independent and ran, why_not) + (
                    _ratio_words(out, ref, tol, moe) if rel > tol and independent else "")
                rows.append(Row(layer, tp, pp, pad, rel, tol, rel <= tol and independent and ran, kernel_s * 1e3,
                                load_s * 1e3, reference=name, independent=independent, matched=rel <= tol,
                                result=result, input_scale=scale, input_reach=reach.text(), kernel=kernel,
                                kernel_ran=ran))
                break
            else:
                refused.append(f"layer {layer} tp={tp}: " + "; then ".join(why))
            progress.step(f"layer {layer} tp={tp}")
        mine = rows[first:]
        del experts, sources, params, x, ref, weights, ids, block_w, block_i
        _trim()
        figures.append(LayerFigures(layer, (t1 - t0) * 1e3, build * 1e3, (t2 - t1 - build) * 1e3,
                                    sum(r.load_ms for r in mine), sum(r.kernel_ms for r in mine), compare * 1e3,
                                    (time.perf_counter() - t0) * 1e3, _peak_kib() / 1024))
    return _print(args, moe, scheme, dtype, rows, refused, figures)


def int4pack_name() -> str:
    """The kernel column for an int4pack row: the op that ran."""
    from layoutc.runtime.glue.int4pack import FORWARD_OP

    return FORWARD_OP


def int8pack_name() -> str:
    """The kernel column for an int8pack row: the op that ran."""
    from layoutc.runtime.glue.int8pack import FORWARD_OP

    return FORWARD_OP


def _print(args: RunOptions, moe: MoEModelConfig, scheme: S.QuantScheme, dtype: str, rows: list[Row],
           refused: list[str], figures: list[Any] | None = None) -> int:
    """Print the rows (text or JSON); 0 when every row is ok (matched, independent, a real
    kernel) and nothing was refused, else 1. figures: each layer's `run.LayerFigures` (JSON "layers")."""
    ok = bool(rows) and all(r.ok for r in rows) and not refused
    if args.format == "json":
        head = {"model": args.model_dir, "model_type": moe.format.model_type, "quantization": scheme.name}
        write_json({**head, "dtype": dtype, "ok": ok}, rows, refused, {"layers": [asdict(f) for f in figures or []]},
                   quantized=True)
        return 0 if ok else 1
    n = len(unchecked(rows))
    after = [f"unchecked: {n} of {len(rows)} runs had no independent reference or ran no kernel: a reference built "
             "from the declared format cannot catch a wrong declaration; exit 1"] if n else []
    print_text(f"{args.model_dir} ({moe.format.model_type}, {scheme.name}, group {scheme.group_size}, "
               f"act_order={scheme.act_order}, {dtype})", rows, refused, after, quantized=True)
    return 0 if ok else 1
