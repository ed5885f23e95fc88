"""`layoutc run MODEL_DIR`: load each MoE layer of a real checkpoint per rank through
the generated loaders, run the contract's real kernel per rank, sum the ranks as
the all-reduce does, and compare with transformers' own sparse-MoE block of that layer
(its routed output; layoutc/tools/checkpoints/reference.py, docs/verification.md "What a
`layoutc run` "ok" means").

Before anything is loaded, where the family applies the routing weight (its format's
`router_weight`: each expert's output, or its input as Llama-4 does) is held to what the
contract's glue declares its kernel computes (`INTERFACE.router_weight`); a family that
weights the input runs the kernel with `apply_router_weight_on_input=True`.

Exit 0: every layer and TP degree matched an independent reference (transformers' block,
or for a family without one its experts module, as `from_pretrained` loads them). 1: a
mismatch, a configuration the contract refuses (its rule is printed), or a row without an
independent reference ("unchecked": compared with a reference built from the declared
format, under --no-transformers or --no-from-pretrained, or where transformers has no model
for the checkpoint). 2: a tool error, printed as `layoutc run: error[LRxxx]: ...` (no
traceback; with `--format json`, a JSON list of diagnostics on stdout; `layoutc rule LRxxx`
explains each): LR101 unknown model_type, LR102 a bad
config value, LR103 a bad --format-file, LR104 a bad option, LR110-LR112 the checkpoint
folder, LR113 mixed expert dtypes, LR114 a non-finite weight, LR115 a truncated or corrupt
safetensors file, LR116 an expert tensor of the wrong shape, LR120 a contract module run
cannot use (none by that name, compiled by an older layoutc, no glue, or no `bias` tensors
for a format with biases), LR130 the kernel is unavailable, LR131 a contract parameter run cannot supply,
LR132 the contract admits none of the requested TP degrees, LR140 the family weights the
experts' input and the contract's glue cannot, LR141 input weighting at a top_k the
contract's kernel does not compute it at, LR142 a clamp or alpha in config.json that the
contract's glue does not compute (layoutc/tools/checkpoints/activation.py), LR146 a block
whose routed part cannot be isolated (a norm over routed + shared after the MoE), LR147 a
proposal that matches the block only up to a constant factor no config key holds, LR148
non-gated experts (relu2, Nemotron-H) that no glue computes, LR199 an unexpected error.

What the block does outside its experts is the format's (layoutc/tools/checkpoints/block.py):
a scale after the experts, an average with the shared expert, identity experts; `run_layer`
applies it to the kernel's summed output before the compare, and a MISMATCH that is a constant
factor is reported as a scale outside the experts, naming the config key that holds it.

The tokens are `--tokens` seeded hidden states and the same scaled so the median |gate/up
pre-activation| is 16, or twice the largest clamp limit config.json states for the layer where
that is more (`run_inputs`, `reference.input_reach`; the report names the median and the limit):
every branch of a clamped activation is reached, and a row's error is the larger of the two halves'.

Fail fast: the options are checked before torch is imported (a `--write-format` target too:
never opened before the run, written atomically after the report); config.json, the index and
`--format-file` are read within bounds (every format key type-checked, its name templates held
to `{layer}` / `{e}`); every safetensors header is checked against its
file, and every expert tensor's shape and dtype against the format and config.json, before
any weight is read (layoutc.tools.checkpoints.preflight); the contract's `plan()` runs at
every TP degree, and the weights are checked finite, before transformers builds a model.

Tolerance on the relative error ||out - ref|| / ||ref|| (Frobenius): 1e-5 for
float32, 2e-2 for bfloat16 and 5e-3 for float16 weights (the kernel computes in the
weights' dtype; the reference in float32).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, replace
from types import ModuleType
from typing import Any

from layoutc.tools.checkpoints.activation import check_activation, non_gated_refusal
from layoutc.tools.checkpoints.loader import load_layer_rank
from layoutc.tools.contract_module import GENERATED_PACKAGE, NoKernelError, kernel_of
from layoutc.tools.ep_run import (
    check_ep_options,
    check_expert_count,
    check_served_placement,
    vllm_placement_note,
)
from layoutc.tools.rankloop import run_ranks
from layoutc.tools.routes import contracts_where, run_contract
from layoutc.tools.runcompare import TOLERANCE, halves_error, hidden_states, rel_error, run_inputs
from layoutc.tools.runmemory import peak_kib as _peak_kib
from layoutc.tools.runmemory import peak_mark as _peak_mark
from layoutc.tools.runmemory import trim as _trim
from layoutc.tools.runoptions import RunOptions
from layoutc.tools.runplan import KernelRun, RunError, checkpoint_plan, module_layout
from layoutc.tools.runprogress import LayerFigures, build_entry, built_between
from layoutc.tools.runprogress import Progress as _Progress
from layoutc.tools.runrow import Row, print_text, result_words, unchecked, write_json

#: the largest --seed: torch.Generator.manual_seed takes 64-bit seeds, and a layer's seed is seed + layer
MAX_SEED = (1 << 63) - 1 - 100_000
#: seconds the last `run_layer` spent comparing (halves_error), for `LayerFigures.compare_ms`
_LAST_COMPARE_S = [0.0]


def _weights_input(mod: ModuleType) -> bool:
    """Whether a generated module's glue declares it computes input weighting (LR140's suggestion)."""
    kernel = getattr(getattr(mod, "LAYOUT", None), "kernel", None)
    return kernel is not None and "input" in kernel.glue.router_weight


def router_weight_on_input(moe: Any, mod: Any, contract: str) -> bool:
    """Hold the family's `router_weight` to what the contract's glue computes, before any load.

    moe: `describe()`'s MoEModelConfig; mod: the generated contract module (its LAYOUT's kernel
    glue, the glue's declared interface, layoutc/runtime/interface.py GlueInterface). Returns True when
    the kernel must be called with `apply_router_weight_on_input=True` (the family weights
    the experts' input, as transformers' Llama4TextMoe does). Raises RunError LR140 when the
    glue cannot apply the weight where the family does, LR141 when it computes input
    weighting only at another top_k (vLLM's CPU kernels: top_k 1).
    """
    where = moe.format.router_weight
    kernel = module_layout(mod).kernel
    interface = kernel.glue if kernel is not None else None
    kind = interface.kind if interface is not None else None
    can = interface.router_weight if interface is not None else ("output",)
    family = moe.format.model_type
    if interface is None or where not in can:
        glue = f"glue {kind}" if kind else "no glue"
        computes = f"computes only {' and '.join(can)} weighting" if interface is not None else "runs no kernel"
        raise RunError("LR140", f"model_type {family!r} applies the routing weight to each expert's {where} "
                       f"(its format's router_weight), but contract {contract} has {glue}, which {computes}; "
                       "use a contract whose glue declares router_weight 'input' "
                       f"({', '.join(contracts_where(_weights_input))})")
    if where != "input":
        return False
    only = interface.router_weight_input_top_k if interface is not None else None
    if only is not None and moe.num_experts_per_tok != only:
        raise RunError("LR141", f"model_type {family!r} weights each expert's input at top_k "
                       f"{moe.num_experts_per_tok}, but "
                       f"contract {contract}'s glue {kind} computes input weighting only at top_k {only} "
                       "(apply_router_weight_on_input)")
    return True


def kernel_sum(ckpt: Any, moe: Any, mod: Any, layer: int, tp: int, x: Any, weights: Any, ids: Any, *,
               dtype: str, isa: str = "vec", iters: int = 3,
               apply_router_weight_on_input: bool = False) -> KernelRun:
    """Load every rank of `layer` through the loaders, run the kernel per rank, sum the ranks.

    x: [T, H] in `dtype`; weights / ids: [T, top_k] (float32 / int32).
    apply_router_weight_on_input: the kernel weights each expert's input (passed to
    `fused_moe` only when True, so contracts without the option run unchanged).
    Raises the module's LayoutContractError when the contract refuses the configuration.
    """
    plan = checkpoint_plan(mod, moe, tp, dtype, isa)
    try:
        kernel = kernel_of(module_layout(mod))
    except NoKernelError as exc:
        raise RunError("LR120", str(exc)) from None
    options = {"apply_router_weight_on_input": True} if apply_router_weight_on_input else {}
    k = run_ranks(DenseRanks(ckpt, moe, layer, mod, plan, kernel, options), range(tp), x, (weights, ids), iters=iters)
    return KernelRun(k.output, plan, k.load_s, k.kernel_s, k.peak_mib)


@dataclass(frozen=True)
class DenseRanks:
    """The dense rank strategy (rankloop.RankStrategy): a TP rank's w13 / w2 (and biases) through the
    generated loaders (`checkpoints.loader.load_layer_rank`), prepacked by the glue's `prepack_padded`,
    run by its `fused_moe` with `options` (apply_router_weight_on_input where the family weights the input)."""

    ckpt: Any
    moe: Any
    layer: int
    mod: Any
    plan: Any
    kernel: Any
    options: dict[str, Any]

    def load(self, rank: int) -> tuple[Any, Any, dict[str, Any]]:
        rw = load_layer_rank(self.ckpt, self.moe, self.layer, self.mod, self.plan, rank)
        packed13, packed2 = self.kernel.prepack_padded(rw.w13, rw.w2, self.plan)
        bias = {} if rw.w13_bias is None else {"w13_bias": rw.w13_bias, "w2_bias": rw.w2_bias}
        return packed13, packed2, {**bias, **self.options}

    def compute(self, weights: tuple[Any, Any, dict[str, Any]], x: Any, routing: tuple[Any, Any]) -> Any:
        packed13, packed2, extra = weights
        return self.kernel.fused_moe(x, packed13, packed2, routing[0], routing[1], self.plan, **extra)


def run_layer(ckpt: Any, moe: Any, mod: Any, layer: int, tp: int, *, dtype: str, isa: str, tokens: int,
              seed: int, use_transformers: bool, oracle: Any = None, why_no_oracle: str = "",
              on_input: bool = False, ref: Any = None, ep: int = 1, placement: str = "linear",
              x: Any = None, input_scale: float = 1.0, input_reach: str = "") -> Row:
    """One layer at one TP degree: reference (with the routing the kernel gets), then load +
    prepack + kernel per rank, sum, compare (`halves_error`). `ref`: a `reference()` of this
    layer to reuse (the same for every TP degree) on `x` (default `run_inputs`), whose second
    half is scaled by `input_scale`. Raises as `kernel_sum`."""
    from layoutc.tools.checkpoints.reference import reference

    if x is None:
        x, input_scale, reach = run_inputs(ckpt, moe, layer, tokens, seed, dtype)
        input_reach = reach.text()
    if ref is None:
        ref = reference(ckpt, moe, layer, x, use_transformers=use_transformers, oracle=oracle,
                        why_no_oracle=why_no_oracle)
    from layoutc.tools.checkpoints.block import block_ops, combine, fit_ratio, kernel_routing

    ops = block_ops(moe)
    weights, ids = kernel_routing(ref.weights, ref.ids, moe.num_experts)  # identity slots: weight 0 in the kernel
    topology: tuple[str, list[list[int]]] = ("", [])
    if ep > 1:
        from layoutc.tools.ep_run import ep_kernel_sum, rank_experts

        k = ep_kernel_sum(ckpt, moe, mod, layer, tp, ep, x, weights, ids, dtype=dtype, isa=isa,
                          options={"apply_router_weight_on_input": True} if on_input else {}, placement=placement)
        topology = (k.plan.expert_placement, rank_experts(mod, k.plan, moe.num_experts))
    else:
        k = kernel_sum(ckpt, moe, mod, layer, tp, x, weights, ids, dtype=dtype, isa=isa,
                       apply_router_weight_on_input=on_input)
    out = combine(k.output, x, ref.weights, ref.ids, ops, moe.num_experts)  # the block's step after its experts
    t0 = time.perf_counter()
    rel = halves_error(out, ref.output)
    _LAST_COMPARE_S[0] = time.perf_counter() - t0
    tol = TOLERANCE[dtype]
    plan = k.plan
    matched = rel <= tol
    ratio = None
    if not matched:  # a constant factor is a scale outside the experts, not a layout error
        c, residual = fit_ratio(out, ref.output)
        ratio = c if residual <= tol and abs(c - 1.0) > tol else None
    return Row(layer, tp, plan.intermediate_size_per_partition,
               getattr(plan, "intermediate_size_per_partition_padded", plan.intermediate_size_per_partition),
               rel, tol, matched and ref.independent, k.kernel_s * 1e3, k.load_s * 1e3, k.peak_mib, ref.name,
               ref.routing, ref.independent, matched, moe.format.router_weight,
               result_words(matched, ref.independent, f"{ref.why_not}, compared with {ref.name}"), ep, *topology,
               input_scale=input_scale, input_reach=input_reach, block=ops.words(), scale_ratio=ratio)


def checkpoint_dtype(ckpt: Any, moe: Any, layer: int) -> str:
    """The dtype name (``bfloat16``, ...) the checkpoint stores `layer`'s down projection in."""
    n = moe.format.names(layer, 0 if not moe.format.fused else None)
    return str(ckpt.slice(n["down"]).get_dtype()).lower().replace("bf16", "bfloat16").replace(
        "f32", "float32").replace("f16", "float16")


def run(namespace: argparse.Namespace) -> int:
    """The `run` subcommand (see the module docstring for exit codes): argparse's `namespace` becomes a
    RunOptions here, once."""
    args = RunOptions.from_namespace(namespace)
    try:
        return _run(args)
    except RunError as exc:
        return _fail(args, exc.code, str(exc))
    except Exception as exc:
        from layoutc.tools.checkpoints.formats import FormatError
        if isinstance(exc, FormatError):
            return _fail(args, exc.code, str(exc).removeprefix(f"error[{exc.code}]: "))
        code = _safetensors_code(exc)
        if code is not None:  # safetensors' own reader (transformers' from_pretrained) found the file damaged
            return _fail(args, code, f"{args.model_dir}: truncated or corrupt safetensors file: {type(exc).__name__}: "
                         f"{str(exc)[:500]}")
        if any(c.__name__ == "StrictDataclassError" for c in type(exc).__mro__):
            # transformers' config classes are huggingface_hub strict dataclasses: a field of the
            # wrong type (rms_norm_eps true, vocab_size 1.5) is refused by AutoConfig, which vLLM
            # calls too; no ValueError, so it escaped as LR199
            text = str(exc).encode("ascii", "backslashreplace").decode("ascii")[:500]
            return _fail(args, "LR102", f"{os.path.join(args.model_dir, 'config.json')}: transformers' config class "
                         f"refuses it: {' '.join(text.split())}")
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()[:2000]
        if os.environ.get("LAYOUTC_TRACEBACK"):
            traceback.print_exc()
        return _fail(args, "LR199", detail)


def _safetensors_code(exc: BaseException) -> str | None:
    """LR115 for safetensors' own error (`SafetensorError`, raised by `safe_open` and its reads
    when a file is truncated or corrupt, e.g. inside transformers' `from_pretrained`), else None."""
    seen: BaseException | None = exc
    for _ in range(8):  # the error itself, or one transformers wrapped it in
        if seen is None:
            return None
        if type(seen).__name__ == "SafetensorError" or "safetensors" in type(seen).__module__:
            return "LR115"
        seen = seen.__cause__ or seen.__context__
    return None


def _fail(args: RunOptions, code: str, message: str) -> int:
    """Report a tool error (exit 2): `layoutc run: error[CODE]: message` on stderr, or with
    `--format json` the same JSON diagnostics on stdout as `check`/`verify`/`audit --format json`
    (layoutc.compiler.diagnostics.to_json: code, severity, message, span of MODEL_DIR)."""
    if args.format == "json":
        from layoutc.compiler.diagnostics import error, file_span, to_json

        sys.stdout.write(to_json([error(code, file_span(str(args.model_dir)),
                                        message)]))
    else:
        sys.stderr.write(f"layoutc run: error[{code}]: {message}\n")
    return 2


def check_contract_name(name: str) -> None:
    """RunError LR120 unless `name` is a contract module of the generated package (a file
    `<name>.py` there, or a module already imported under that name, whose name does not start
    with `_`: `_runtime` is the shared runtime, not a contract). Nothing is imported."""
    import importlib.util
    import re

    spec = importlib.util.find_spec(GENERATED_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    shown = name if len(name) <= 80 else name[:77] + "..."
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) and (
            f"{GENERATED_PACKAGE}.{name}" in sys.modules
            or any(os.path.isfile(os.path.join(d, name + ".py")) for d in folders)):
        return
    known = sorted({f[:-3] for d in folders if os.path.isdir(d) for f in os.listdir(d)
                    if f.endswith(".py") and not f.startswith("_")})
    why = " (names starting with _ are the generated package's runtime)" if name.startswith("_") else ""
    raise RunError("LR120", f"--contract {shown!r} is not a contract module of {GENERATED_PACKAGE}{why}; "
                   f"contracts: {', '.join(known) or 'none (run layoutc compile contracts/ --out generated)'}")


def _tp_list(text: str, flag: str = "--tp", what: str = "TP") -> list[int]:
    """`--tp` / `--ep` text -> its degrees in 1..64, in the order given, each once (a repeat,
    `--ep 2,2`, would run and print the same rows twice; `layoutc audit` drops repeats too,
    audit.command.parse_degrees). RunError LR104 for anything else."""
    try:
        values = [int(t) for t in text.split(",") if t.strip()] if len(text) <= 400 else []
    except ValueError:
        values = []
    if not values or any(v < 1 or v > 64 for v in values):
        raise RunError("LR104", f"{flag} {text[:40]!r}: expected comma-separated {what} degrees in 1..64")
    return list(dict.fromkeys(values))


def _check_options(args: RunOptions) -> list[int]:
    """The TP degrees; RunError LR104 naming the first bad option (before torch is imported)."""
    tps = _tp_list(args.tp)
    layer_range(args.layer_range)
    for option, value, low, high in (("--tokens", args.tokens, 1, 65536), ("--layers", args.layers, 0, 100_000),
                                     ("--threads", args.threads, 0, 4096), ("--seed", args.seed, 0, MAX_SEED)):
        if not low <= value <= high:
            shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:20]}... ({len(str(value))} digits)"
            raise RunError("LR104", f"{option} {shown}: expected an integer in {low}..{high}")
    for option, name in (("--isa", args.isa), ("--placement", args.placement)):
        if not (0 < len(name) <= 40 and name.isascii() and name.replace("_", "").isalnum()):
            from layoutc.compiler.diagnostics import shown as cut

            # the contract's and the runtime's refusals echo the value whole (100,000 characters, 3 times)
            raise RunError("LR104", f"{option} {cut(name, 40)}: expected a name (ASCII letters, digits, _; "
                           "at most 40 characters)")
    if args.contract is not None:
        check_contract_name(args.contract)
    if args.write_format:
        from layoutc.tools.runwrite import check_target
        check_target(args.write_format, "--write-format")
        target = os.path.realpath(args.write_format)
        name = os.path.basename(target)
        if os.path.dirname(target) == os.path.realpath(args.model_dir) and (
                name in ("config.json", "model.safetensors.index.json") or name.endswith(".safetensors")):
            # a JSON format written over the weights (or the config) the run just read, then `ok`
            raise RunError("LR104", f"--write-format {args.write_format}: that is the checkpoint's own {name}; "
                           "write the format to a file of its own")
    return tps


def layer_range(text: str | None) -> tuple[int, int] | None:
    """`--layer-range A:B` as (A, B): the decoder layers A <= n < B (either side may be left out:
    `3:`, `:4`). None for no option. RunError LR104 for anything else (before torch is imported)."""
    if text is None:
        return None
    low, sep, high = text.partition(":")
    try:
        if not sep or len(text) > 24:
            raise ValueError(text)
        a = int(low) if low.strip() else 0
        b = int(high) if high.strip() else 100_000
    except ValueError:
        raise RunError("LR104", f"--layer-range {text[:40]!r}: expected A:B, the decoder layers A <= n < B "
                       "(e.g. 3:4; either side may be left out)") from None
    if not 0 <= a < b <= 100_000:
        raise RunError("LR104", f"--layer-range {text[:40]}: expected 0 <= A < B <= 100000")
    return a, b


def _select_layers(args: RunOptions, moe: Any) -> list[int]:
    """The MoE layers to run: all, those of --layer-range A:B (decoder layers A <= n < B), then
    the first --layers of them (LR104 when there are fewer, or none in the range)."""
    if not moe.moe_layers:
        raise RunError("LR102", f"config.json of {args.model_dir} declares no MoE layers")
    span = layer_range(args.layer_range)
    chosen = tuple(n for n in moe.moe_layers if span is None or span[0] <= n < span[1])
    if not chosen:
        raise RunError("LR104", f"--layer-range {args.layer_range}: {args.model_dir} has no MoE layer there (its MoE "
                       f"layers: {_span(moe.moe_layers)})")
    where = "" if span is None else f" in --layer-range {args.layer_range}"
    if args.layers > len(chosen):
        raise RunError("LR104", f"--layers {args.layers}: {args.model_dir} has {len(chosen)} MoE "
                       f"layer{'s' if len(chosen) != 1 else ''}{where} ({_span(chosen)}); pass at most "
                       f"{len(chosen)}, or 0 for all")
    return list(chosen[: args.layers] if args.layers else chosen)


def _span(layers: tuple[int, ...]) -> str:
    return ", ".join(map(str, layers)) if len(layers) <= 8 else f"{layers[0]}, {layers[1]}, ..., {layers[-1]}"


def _plans_first(mod: ModuleType, moe: Any, tps: list[int], dtype: str, isa: str) -> tuple[list[int], list[str]]:
    """`plan()` at every TP degree before any model is built: the admitted degrees and the
    refusals (the contract's rule). RunError LR132 when the contract admits none of them."""
    contract_error: type[Exception] = mod.LayoutContractError
    admitted: list[int] = []
    refused: list[str] = []
    for tp in tps:
        try:
            checkpoint_plan(mod, moe, tp, dtype, isa)
            admitted.append(tp)
        except contract_error as exc:
            refused.append(f"tp={tp}: {exc}")
    if not admitted:
        raise RunError("LR132", f"contract {mod.CONTRACT} admits none of the requested configurations, so "
                       "nothing was loaded: " + "; ".join(refused))
    return admitted, refused


def _candidates(ckpt: Any, fmt: Any) -> list[Any]:
    """Proposed formats for a model_type without a declared one (none when `fmt` is given or
    the family is built in); RunError LR101 saying what was tried when nothing fits."""
    from layoutc.tools.checkpoints.formats import FORMATS
    from layoutc.tools.checkpoints.propose import propose

    model_type = str(ckpt.config.get("model_type"))
    if fmt is not None or model_type in FORMATS:
        return []
    found, why = propose(ckpt.config, {n: t.shape for n, t in ckpt.tensors.items()})
    if not found:
        raise RunError("LR101", f"no checkpoint format is declared for model_type {model_type!r} and none can be "
                       f"proposed from {ckpt.folder}'s tensors: {why}. Write one by hand (docs/formats.md; "
                       "`layoutc formats qwen3_moe` prints a built-in one to start from) and pass --format-file")
    return found


def _prove_quantized(args: RunOptions, ckpt: Any, candidates: list[Any], scheme: Any,
                     layers: list[int]) -> tuple[Any, Any]:
    """`_prove` for a quantized release of a family without a built-in format (issue 45 item 4): the
    candidates' float32 loops over the weights dequantized by checkpoints/quant/dequant.py on `layers[0]`,
    against transformers' block loaded from the same checkpoint (quant_run/oracle.py quant_oracle), the
    oracle the quantized rows are then compared with. Returns (the proved format's MoEModelConfig, that
    QuantOracle, handed to the runner)."""
    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.quant_run.oracle import quant_oracle

    built = quant_oracle(ckpt, describe(ckpt.config, candidates[0], ckpt.weight_map), scheme, layers,
                         not (args.no_transformers or args.no_from_pretrained))
    moe = _prove(args, ckpt, candidates, layers[0], built.oracle, scheme)
    if built.oracle is not None:
        built.oracle.release()  # the rows build the layer again, measuring its reach
    return moe, built


def _declared_loop(ckpt: Any, moe: Any, layer: int, x: Any, weights: Any, ids: Any, scheme: Any) -> Any:
    """The float32 loop over `layer`'s weights read through the candidate format `moe`: the stored
    floats (reference.loop_reference), or with a quantization `scheme` the dequantized ones
    (quant_run: runner.dequantized, experts_ref.reference_output without transformers)."""
    from layoutc.tools.checkpoints.reference import loop_reference

    if scheme is None:
        return loop_reference(ckpt, moe, layer, x, weights, ids)
    from layoutc.tools.quant_run.experts_ref import reference_output
    from layoutc.tools.quant_run.runner import dequantized

    return reference_output(ckpt, moe, dequantized(ckpt, moe, scheme, layer), x, weights, ids, False)[0]


def _prove(args: RunOptions, ckpt: Any, candidates: list[Any], layer: int, oracle: Any,
           scheme: Any = None) -> Any:
    """The first proposed format whose float32 loop over layer `layer` (over the dequantized weights
    with a quantization `scheme`) matches transformers' own sparse-MoE block (with the block's routing) to 1e-4; it is printed (stderr). The loop
    goes through the block step the format states (layoutc.tools.checkpoints.block.combine).
    Where no candidate matches but one matches up to a constant factor, that factor is a scale
    outside the experts: a config key holding it (routed_scale, or shared_combination "average")
    is taken into the format and proved with it. RunError LR117 when transformers has no block to
    prove it with, or no candidate matches; LR147 when one matches up to a factor no config key holds."""
    from dataclasses import replace

    from layoutc.tools.checkpoints.block import (
        COMBINATION_KEY,
        block_ops,
        combine,
        explain_ratio,
        fit_ratio,
        kernel_routing,
        ratio_keys,
    )
    from layoutc.tools.checkpoints.formats import FormatError, describe
    from layoutc.tools.checkpoints.reference import reference

    model_type = candidates[0].model_type
    tried = []
    scaled: list[tuple[Any, float]] = []

    def measure(fmt: Any) -> tuple[Any, Any, Any, Any]:
        moe = describe(ckpt.config, fmt, ckpt.weight_map)
        x = hidden_states(moe, layer, args.tokens, args.seed, "float32")
        ref = reference(ckpt, moe, layer, x, oracle=oracle, use_transformers=oracle is not None,
                        why_no_oracle="" if oracle is not None else "--no-transformers or --no-from-pretrained")
        if not ref.independent:
            if args.write_format:  # saved unproved, for the user to review: the advice below points at it
                _write_format(args.write_format, candidates[0])
            _unproved(model_type, candidates, ref.why_not, args.write_format)
        weights, ids = kernel_routing(ref.weights, ref.ids, moe.num_experts)
        try:
            out = _declared_loop(ckpt, moe, layer, x, weights, ids, scheme)
        except FormatError as exc:  # a candidate the quantized tensors cannot hold (a scale of another shape)
            return moe, None, ref, f"the quantized tensors do not fit it ({exc.code})"
        except RuntimeError as exc:  # a candidate orientation whose shapes do not multiply (H == I)
            return moe, None, ref, f"its shapes do not multiply ({str(exc).splitlines()[0][:120]})"
        return moe, combine(out, x, ref.weights, ref.ids, block_ops(moe), moe.num_experts), ref, ""

    for fmt in candidates:
        moe, out, ref, why = measure(fmt)
        summary = (f"{'' if fmt.gated else 'non-gated '}{'fused' if fmt.fused else 'per-expert'} "
                   f"{fmt.layer_prefix}{fmt.experts}{fmt.gate_up or fmt.gate or fmt.up}"
                   f"{', ' + fmt.gate_up_layout if fmt.gate_up else ''}, transposed={fmt.transposed}")
        if out is None:
            tried.append(f"{summary}: {why}")
            continue
        rel = rel_error(out, ref.output)
        if rel <= 1e-4:
            over = f" over the weights dequantized from {scheme.name}" if scheme is not None else ""
            sys.stderr.write(f"layoutc run: model_type {model_type!r} has no declared format; proposed from the "
                             f"tensors: {summary}; proved on layer {layer}{over} against {ref.name} (rel error "
                             f"{rel:.1e}); --write-format FILE saves it\n")
            return moe
        c, residual = fit_ratio(out, ref.output)
        if residual <= 1e-4:
            scaled.append((fmt, c))
        tried.append(f"{summary}: rel error {rel:.2e}" + (f" (x{c:.4g} off: a constant factor)" if residual <= 1e-4
                                                           else ""))
    for fmt, c in scaled:  # a constant factor: a scale outside the experts, stated by a config key or not at all
        keys = ratio_keys(ckpt.config, c)  # dotted under text_config: a proposal reads config.json whole
        if not keys:
            raise RunError("LR147", f"model_type {model_type!r}, layer {layer}: {explain_ratio(c, ckpt.config)}. "
                           "Declare it in a format file (docs/formats.md: routed_scale, shared_combination) and "
                           "pass --format-file")
        fixed = replace(fmt, shared_combination="average") if keys[0].endswith(COMBINATION_KEY) else \
            replace(fmt, routed_scale=(keys[0],))
        moe, out, ref, _ = measure(fixed)
        rel = rel_error(out, ref.output) if out is not None else float("inf")
        if rel <= 1e-4:
            sys.stderr.write(f"layoutc run: model_type {model_type!r} has no declared format; proposed from the "
                             f"tensors and proved on layer {layer} against {ref.name} (rel error {rel:.1e}) once the "
                             f"block's x{c:.4g} outside the experts (config.json {keys[0]}) was taken into the format; "
                             "--write-format FILE saves it\n")
            return moe
    raise RunError("LR117", f"no proposed format for model_type {model_type!r} agrees with transformers' block "
                   f"on layer {layer}; tried: {'; '.join(tried)}. Write the format by hand (docs/formats.md) "
                   "and pass --format-file")


def _prove_format_file(args: RunOptions, ckpt: Any, moe: Any, layers: list[int], oracle: Any,
                       scheme: Any = None) -> Any:
    """A --format-file's format proved in float32 against transformers' block before the kernel rows
    (layoutc.tools.checkpoints.declared.prove_declared: FormatError LR143 naming the field at fault and
    the measured error), on the first of `layers` whose block output is not zero (a zero reference
    matches any declared scale: it proves nothing); the proof is said on stderr. LR143 too when the
    block's output is zero on every layer of the run. With a quantization `scheme`: over the
    dequantized weights (`_declared_loop`), against the quantized runner's own oracle of the layers
    (quant_run/oracle.py quant_oracle, built once here and returned for the rows). Without an
    oracle (--no-transformers, --no-from-pretrained, no block) nothing is proved and the rows say
    "unchecked", as before."""
    from layoutc.tools.checkpoints.declared import prove_declared
    from layoutc.tools.checkpoints.errors import FormatError

    if scheme is not None and (args.no_transformers or args.no_from_pretrained):
        return None
    built = None
    if scheme is not None:
        from layoutc.tools.quant_run.oracle import quant_oracle

        built = quant_oracle(ckpt, moe, scheme, layers, True)
        oracle = built.oracle
    for layer in layers:
        loop = None
        if scheme is not None:

            def loop(m: Any, x: Any, w: Any, i: Any, layer: int = layer) -> Any:
                return _declared_loop(ckpt, m, layer, x, w, i, scheme)

        x = hidden_states(moe, layer, args.tokens, args.seed, "float32")
        proof = prove_declared(ckpt, moe, layer, x, oracle, loop)
        if scheme is not None and oracle is not None:
            oracle.release()  # the quantized rows build the layer again, measuring its reach (`built.taps`)
        if proof is None:
            return built
        if not proof.degenerate:
            sys.stderr.write(f"layoutc run: the declared format (--format-file) was proved on layer {proof.layer} "
                             f"in float32 against {proof.reference.split(' (')[0]} (rel error {proof.rel:.1e})\n")
            return built
    raise FormatError("LR143", f"the declared format (--format-file) cannot be proved: transformers' block returns "
                      f"zero on every layer of the run ({', '.join(map(str, layers))}) for the drawn tokens, and a "
                      "zero output matches any declared scale or order; run more layers (--layers) or check the "
                      "checkpoint's down projections")


def _refuse_non_gated(args: RunOptions, ckpt: Any, candidates: list[Any], moe: Any, layer: int,
                      why: str) -> None:
    """RunError LR148 for non-gated experts no glue computes (`activation.non_gated_refusal`'s words).
    A proposed format is first proved on `layer` against transformers' own block (LR117 / LR118 as
    `_prove`), so the refusal is about the kernel, not a guess at the format; `--write-format` then
    saves it."""
    proved = ""
    if candidates and not (args.no_transformers or args.no_from_pretrained):
        from layoutc.tools.checkpoints.reference import transformers_oracle

        moe = _prove(args, ckpt, candidates, layer, transformers_oracle(args.model_dir, [layer]))
        proved = f"; the format proposed from the tensors was proved on layer {layer} against transformers' block"
    if args.write_format:
        _write_format(args.write_format, moe.format)
    raise RunError("LR148", why + proved)


def _unproved(model_type: str, candidates: list[Any], why_not: str, written: str | None) -> None:
    """RunError for a proposal nothing can prove: LR118 (AMBIGUOUS) when the shapes leave its
    orientation open (propose.undecided), else LR117. `written`: the --write-format file the first
    proposal was saved to (unproved), or None."""
    from layoutc.tools.checkpoints.propose import undecided

    review = (f"The first proposal is saved, unproved, in {written}: review it and pass it as --format-file"
              if written else "Save the proposal with --write-format FILE, review it and pass it as --format-file")
    open_facts = undecided(candidates)
    if any(what.startswith("orientation") for what in open_facts):
        raise RunError("LR118", f"AMBIGUOUS: the format proposed for model_type {model_type!r} cannot be decided "
                       f"from the tensor shapes ({'; '.join(open_facts)}) and cannot be proved: {why_not}. "
                       f"{review} (docs/formats.md: transposed, down_transposed), or run with transformers to "
                       "prove it")
    raise RunError("LR117", f"model_type {model_type!r} has no declared format, and the one proposed from "
                   f"the tensor names cannot be proved: {why_not}. {review} (docs/formats.md)")


def _write_format(path: str, fmt: Any) -> None:
    """Save `fmt` as a --format-file, atomically (a temporary file in the target's folder, then
    `os.replace`: a reader sees the old file or the whole new one, never part of one), and say
    so on stderr. RunError LR104 when `path` cannot be written (nothing is left behind)."""
    from layoutc.tools.checkpoints.formats import format_json
    from layoutc.tools.runwrite import write_atomic

    write_atomic(path, json.dumps(format_json(fmt), indent=2) + "\n", "--write-format")
    sys.stderr.write(f"layoutc run: wrote the format to {path}\n")


def _run(args: RunOptions) -> int:
    from layoutc.tools.checkpoints.formats import describe, load_format_file
    from layoutc.tools.checkpoints.namesets import for_checkpoint
    from layoutc.tools.checkpoints.preflight import check_experts, run_dtype
    from layoutc.tools.checkpoints.reader import Checkpoint

    tps = _check_options(args)  # no torch before the options, the files and the headers are checked
    eps = _tp_list(args.ep, "--ep", "EP")
    fmt = load_format_file(args.format_file) if args.format_file else None
    warnings: list[str] = []
    with Checkpoint(args.model_dir) as ckpt:
        found = str(ckpt.config.get("model_type"))
        if fmt is not None and fmt.model_type != found:
            other = (f"note: --format-file declares model_type {fmt.model_type[:80]!r}, but config.json's is "
                     f"{found[:80]!r}: the file's format is used")
            sys.stderr.write(f"layoutc run: {other}\n")
            warnings.append(other)
        fmt = for_checkpoint(ckpt.config, fmt, ckpt.weight_map)  # Mixtral's linearized expert names
        candidates = _candidates(ckpt, fmt)
        moe = describe(ckpt.config, candidates[0] if candidates else fmt, ckpt.weight_map)
        layers = _select_layers(args, moe)
        from layoutc.tools.checkpoints.block import block_ops, refuse_post_norm
        refuse_post_norm(moe)  # LR146: a norm after the MoE, declared: nothing can be compared
        block_ops(moe)  # LR102: a block-level key the format declares and config.json lacks
        placement = args.placement  # the EP options, from the headers alone
        check_ep_options(moe.num_experts, [(t, e) for e in eps for t in tps], placement, args.world)
        check_expert_count(ckpt, moe, layers)
        from layoutc.tools.checkpoints.quant.config import read_quantization
        scheme = read_quantization(ckpt.config, moe.format, ckpt.weight_map)  # LR150-LR152, LR158 before any tensor
        if scheme is not None and any(e > 1 for e in eps):
            raise RunError("LR159", f"--ep {args.ep}: the quantized runner shards the intermediate only; "
                           "run this checkpoint with --ep 1 (expert parallelism runs on unquantized checkpoints)")
        if scheme is not None:  # quantized experts: layoutc/tools/quant_run
            from layoutc.tools.quant_run.runner import run_quantized
            no_gate = non_gated_refusal(moe, None, "(quantized)")  # LR148: Nemotron-3's FP8 releases
            if no_gate is not None:
                raise RunError("LR148", no_gate)
            built = None  # the proof's oracle, handed to the rows (built once)
            if candidates:  # a quantized release of a proposed family: proved on the dequantized weights
                moe, built = _prove_quantized(args, ckpt, candidates, scheme, layers)
            elif args.format_file:
                built = _prove_format_file(args, ckpt, moe, layers, None, scheme)  # LR143 before any kernel row
            return run_quantized(args, ckpt, moe, scheme, layers, tps, built)
        dtype, warning = run_dtype(ckpt, check_experts(ckpt, moe, layers), args.dtype)
        if warning:
            sys.stderr.write(f"layoutc run: {warning}\n")
            warnings.append(warning)
        if dtype not in TOLERANCE:
            raise RunError("LR102", f"checkpoint dtype {dtype} is not bfloat16, float16 or float32; pass --dtype")
        try:
            import torch
        except ImportError:
            raise RunError("LR130", "layoutc run needs torch (pip install 'layoutc[runtime,checkpoints]')") from None
        contract: str = args.contract or run_contract("unquantized")  # its `route run` (tools/routes.py)
        args = replace(args, contract=contract)
        try:
            mod = importlib.import_module(f"{GENERATED_PACKAGE}.{args.contract}")
        except ImportError as exc:
            raise RunError("LR120", f"no generated contract module {args.contract!r} ({exc})") from None
        layout = module_layout(mod)  # LR120 before any work for a module compiled by an older layoutc
        torch.set_num_threads(max(1, args.threads or torch.get_num_threads()))
        if layout.kernel is None:  # no glue: a layout for a kernel layoutc does not call (not LR140's weighting)
            raise RunError("LR120", f"contract {args.contract} binds no glue: it states the layout a kernel "
                           "layoutc does not call (e.g. a CUDA-only or quantized kernel: `layoutc explain "
                           f"{args.contract}`), so run has no kernel to run it with; use a contract with a glue "
                           f"(default {run_contract('unquantized')})")
        on_input = router_weight_on_input(moe, mod, contract)  # before anything is loaded
        check_activation(moe, mod, contract, layers)  # LR142: a clamp the glue does not compute
        no_gate = non_gated_refusal(moe, mod, contract)  # LR148: non-gated experts no glue computes
        if no_gate is not None:
            _refuse_non_gated(args, ckpt, candidates, moe, layers[0], no_gate)
        if any(e > 1 for e in eps) and layout.local_experts is None:
            raise RunError("LR104", f"--ep: contract {args.contract} states no expert parallelism "
                           "(`experts ... over ep_size`)")
        check_served_placement(layout, placement, eps)
        tps, refused_first = _plans_first(mod, moe, tps, dtype, args.isa)
        from layoutc.tools.checkpoints.preflight import check_finite
        for layer in layers:
            check_finite(ckpt, moe, layer)
        oracle = None
        if not (args.no_transformers or args.no_from_pretrained):
            from layoutc.tools.checkpoints.reference import transformers_oracle
            oracle = transformers_oracle(args.model_dir, layers)
        if candidates:
            moe = _prove(args, ckpt, candidates, layers[0], oracle)
        elif args.format_file:
            _prove_format_file(args, ckpt, moe, layers, oracle)  # LR143 before any kernel row
        note = vllm_placement_note(ckpt.config, placement) if any(e > 1 for e in eps) else None
        if note and args.format == "text":
            print(note)
        if moe.format.shared_expert and args.format == "text":
            print(f"note: the shared expert ({moe.format.shared_expert}) is a dense MLP outside the routed "
                  "experts: the kernel does not run it, and the reference's routed output leaves it out")
        rows, refused, figures = _run_layers(args, ckpt, moe, mod, layers, [(t, e) for e in eps for t in tps],
                                             dtype, on_input, oracle)
    if args.write_format and args.format == "json":  # before the report: stdout stays one JSON document
        _write_format(args.write_format, moe.format)
    code = _print_report(args, moe, dtype, rows, refused_first + refused, warnings, figures)
    if args.write_format and args.format != "json":  # after the table: a target that fails now (a full
        sys.stdout.flush()  # disk) loses nothing printed
        _write_format(args.write_format, moe.format)
    return code


def _run_layers(args: RunOptions, ckpt: Any, moe: Any, mod: ModuleType, layers: list[int],
                tps: list[tuple[int, int]], dtype: str, on_input: bool,
                oracle: Any) -> tuple[list[Row], list[str], list[LayerFigures]]:
    """Every layer at every (TP, EP) degree: the rows, the configurations the contract refused, and
    each layer's figures. oracle: transformers' modules of the layers (`transformers_oracle`), None
    without one; each layer's module is released before the next is built."""
    from layoutc.tools.checkpoints.reference import reference

    contract_error: type[Exception] = mod.LayoutContractError  # the generated package's own classes
    kernel_error: type[Exception] = mod.KernelUnavailableError
    why_no_oracle = "--no-transformers" if args.no_transformers else \
        "--no-from-pretrained" if args.no_from_pretrained else ""
    progress = _Progress(len(layers) * len(tps), sys.stderr.isatty())
    rows: list[Row] = []
    refused: list[str] = []
    figures: list[LayerFigures] = []
    for layer in layers:
        _trim()
        _peak_mark()
        t0 = time.perf_counter()
        x, scale, reach = run_inputs(ckpt, moe, layer, args.tokens, args.seed, dtype)
        t1 = time.perf_counter()
        built_before = build_entry(oracle, layer)
        ref = reference(ckpt, moe, layer, x, use_transformers=not args.no_transformers, oracle=oracle,
                        why_no_oracle=why_no_oracle)
        t2 = time.perf_counter()
        build = built_between(built_before, build_entry(oracle, layer))  # a proof's earlier build is not this one
        if oracle is not None:
            oracle.release()  # the rows need only the reference's output: the module goes now
        first = len(rows)
        compare = 0.0
        for tp, ep in tps:
            where = f"layer {layer} tp={tp}" + (f" ep={ep}" if ep > 1 else "")
            try:
                rows.append(run_layer(ckpt, moe, mod, layer, tp, dtype=dtype, isa=args.isa,
                                      tokens=args.tokens, seed=args.seed,
                                      use_transformers=not args.no_transformers, on_input=on_input, ref=ref, ep=ep,
                                      placement=args.placement, x=x, input_scale=scale,
                                      input_reach=reach.text()))
                compare += _LAST_COMPARE_S[0]
            except contract_error as exc:  # plan() names the rule and the contract line
                refused.append(f"{where}: {exc}")
            except kernel_error as exc:
                raise RunError("LR130", str(exc)) from None
            progress.step(where)
        mine = rows[first:]
        del ref, x
        _trim()
        figures.append(LayerFigures(layer, (t1 - t0) * 1e3, build * 1e3, (t2 - t1 - build) * 1e3,
                                    sum(r.load_ms for r in mine), sum(r.kernel_ms for r in mine), compare * 1e3,
                                    (time.perf_counter() - t0) * 1e3, _peak_kib() / 1024))
    return rows, refused, figures


def _print_report(args: RunOptions, moe: Any, dtype: str, rows: list[Row], refused: list[str],
                  warnings: list[str] | None = None, figures: list[Any] | None = None) -> int:
    """Print the rows as a table (or JSON); 0 when every row is ok and nothing was refused, else 1.
    warnings: the notes and warnings printed on stderr before the run (a config dtype that is not
    the tensors', a format file of another model_type): repeated under the table, and in JSON."""
    warnings = list(warnings or [])
    ok = all(r.ok for r in rows) and not refused
    if args.format == "json":
        write_json({"model": args.model_dir, "model_type": moe.format.model_type, "contract": args.contract,
                    "dtype": dtype, "ok": ok, "router_weight": moe.format.router_weight}, rows, refused,
                   {"warnings": warnings, "layers": [asdict(f) for f in figures or []]}, quantized=False)
        return 0 if ok else 1
    after: list[str] = []
    bad = [r for r in rows if not r.matched]
    ratios = [r.scale_ratio for r in bad if r.scale_ratio is not None]
    if bad and len(ratios) == len(bad):
        from layoutc.tools.checkpoints.block import block_ops, explain_ratio

        words = explain_ratio(ratios[0], moe.text_config, block_ops(moe), moe.format.routed_scale)
        after.append(f"MISMATCH in {len(bad)} of {len(rows)} runs: {words}")
    elif bad:
        after.append(f"MISMATCH in {len(bad)} of {len(rows)} runs (check the format: gate/up order, orientation, "
                     "fused row layout, routing, router_weight)")
    if loose := unchecked(rows):
        which = ", ".join(f"layer {r.layer} tp={r.tp_size}" for r in loose)
        after.append(f"unchecked: {len(loose)} of {len(rows)} runs had no independent reference ({which}): they were "
                     "compared with a reference built from the declared format, which cannot catch a wrong "
                     "declaration; exit 1")
    print_text(f"{args.model_dir} ({moe.format.model_type}, {dtype}) · contract {args.contract or ''}", rows, refused,
               after + warnings, quantized=False)
    return 0 if ok else 1


RUN_HELP = """Load each MoE layer of a checkpoint per TP rank through the contract's generated loaders,
run the contract's kernel per rank, sum the ranks, and compare with transformers' own sparse-MoE
block of that layer. The checkpoint's family is built in (`layoutc formats`), or its format is
proposed from the safetensors headers and proved against transformers, or given as a file
(--format-file; docs/formats.md)."""

RUN_EPILOG = """examples:
  layoutc run /tmp/qwen3-moe-tiny --tp 1,2,4
  layoutc run ./olmoe --tp 2 --layers 1 --write-format olmoe.json
  layoutc run ./my-moe --format-file my_format.json --dtype bfloat16 --format json

exit codes:
  0  every layer and TP degree matched transformers' block (an independent reference)
  1  a mismatch, a TP degree the contract refuses (its rule is printed), or a row without an
     independent reference ("unchecked")
  2  a tool error, printed as `layoutc run: error[LRxxx]: ...`; `layoutc rule LRxxx` explains it"""


def add_parser(sub: Any) -> None:
    """Register `run` on the CLI's subparsers."""
    p = sub.add_parser("run", help="load a real checkpoint per rank, run the kernel, compare with transformers",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=RUN_HELP, epilog=RUN_EPILOG)
    p.add_argument("model_dir", metavar="MODEL_DIR",
                   help="a Hugging Face checkpoint folder: config.json and model.safetensors (or shards and "
                   "model.safetensors.index.json)")
    p.add_argument("--tp", default="1,2,4", help="comma-separated TP degrees (default 1,2,4)")
    p.add_argument("--ep", default="1", help="comma-separated EP degrees (default 1); each runs with every "
                   "--tp degree over ep x tp ranks")
    p.add_argument("--placement", default="linear", help="vLLM's expert placement at --ep > 1: linear (default) "
                   "or round_robin")
    p.add_argument("--world", type=int, default=None, help="the ranks there are: every --tp x --ep product must "
                   "equal it (default: each pair runs over ep x tp ranks)")
    p.add_argument("--contract", default=None,
                   help="generated contract module in generated/ (default: the one whose `route run` line serves "
                   "the checkpoint's format, unquantized or quantized: docs/language.md, \"Routes\")")
    p.add_argument("--layers", type=int, default=0, help="only the first N MoE layers (default all)")
    p.add_argument("--layer-range", default=None, metavar="A:B",
                   help="only the MoE layers among decoder layers A <= n < B (e.g. 3:4); with --layers, the first "
                   "N of them")
    p.add_argument("--tokens", type=int, default=16, help="tokens per forward (default 16)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="the report: text (default) or json")
    p.add_argument("--format-file", default=None, metavar="FILE",
                   help="a user-declared checkpoint format (JSON; docs/formats.md, `layoutc formats NAME`)")
    p.add_argument("--write-format", default=None, metavar="FILE",
                   help="save the format used (declared, or proposed and proved) as a --format-file")
    p.add_argument("--dtype", choices=tuple(TOLERANCE), default=None, help="default: the checkpoint's")
    p.add_argument("--isa", default="vec", help="the kernel ISA the contract admits (default vec)")
    p.add_argument("--seed", type=int, default=0, help="seed of the hidden states (default 0)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    p.add_argument("--no-transformers", action="store_true",
                   help="compare with a float32 loop built from the declared format (rows are 'unchecked', exit 1)")
    p.add_argument("--no-from-pretrained", action="store_true",
                   help="do not load transformers' model with from_pretrained (it builds the first layers); "
                   "compare with its experts module filled through the declared format ('unchecked', exit 1)")
    p.set_defaults(func=run)
