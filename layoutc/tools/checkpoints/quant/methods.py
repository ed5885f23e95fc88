"""Which quantization method a contract stands for, read from its `models` lines, and which
contracts a checkpoint's own method leaves out. Standard library only.

An engine picks the MoE method from config.json's `quantization_config.quant_method` (vLLM
0.32 `model_executor/layers/quantization/__init__.py` get_quantization_config; SGLang the
same), and each method has its own admission rule for the same bytes: block FP8 [128, 128]
at intermediate 1408, tp 2, is padded per rank to 768 by `Fp8MoEMethod` (quant_method
"fp8": fused_moe/oracle/fp8.py pad_tp_shard_to_weight_blocks) and refused by
`CompressedTensorsW8A8Fp8MoEMethod` (quant_method "compressed-tensors": create_weights ->
fp8_utils.validate_fp8_block_shape_moe, "704 is not divisible by weight quantization
block_n = 128"). A contract that models one method's object states that method's rule, so a
checkpoint of another method must not be admitted by it.

The rule (`left_out`): among the contracts that take a checkpoint's format, when some
contract of an engine models a method object of the checkpoint's own quant_method, every
contract of that engine that models only other methods' objects is left out, with the reason.
Where no contract models the checkpoint's own method (compressed-tensors NVFP4 today, held
by the ModelOpt method's contract), nothing is left out: the contracts keep taking it as
before, and the row says which method's object the contract models.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: quant_method -> the module prefixes of the engines' method objects for it (vLLM 0.32.0
#: model_executor/layers/quantization/: fp8.py Fp8MoEMethod, compressed_tensors/
#: compressed_tensors_moe/*.py, auto_gptq.py, auto_awq.py, mxfp4.py, modelopt.py;
#: SGLang 0.5.23 srt/layers/quantization/fp8.py, mxfp4.py, compressed_tensors/).
METHOD_MODULES: dict[str, tuple[str, ...]] = {
    "fp8": ("vllm.model_executor.layers.quantization.fp8", "sglang.srt.layers.quantization.fp8"),
    "compressed-tensors": ("vllm.model_executor.layers.quantization.compressed_tensors",
                           "sglang.srt.layers.quantization.compressed_tensors"),
    "gptq": ("vllm.model_executor.layers.quantization.auto_gptq",),
    "awq": ("vllm.model_executor.layers.quantization.auto_awq",),
    "mxfp4": ("vllm.model_executor.layers.quantization.mxfp4", "sglang.srt.layers.quantization.mxfp4"),
    "modelopt": ("vllm.model_executor.layers.quantization.modelopt",),
    "modelopt_fp4": ("vllm.model_executor.layers.quantization.modelopt",),
}


def method_of(target: str) -> str | None:
    """The quant_method whose method object `target` ("module:Qualified.name") is, or None
    (an experts class, a kernel function, an unquantized method)."""
    module = target.partition(":")[0]
    for method, prefixes in METHOD_MODULES.items():
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return "modelopt" if method == "modelopt_fp4" else method
    return None


def _canon(method: str | None) -> str | None:
    """config.json's quant_method, lower-cased, with modelopt_fp4 read as modelopt; None stays None."""
    method = method.lower() if method else None
    return "modelopt" if method == "modelopt_fp4" else method


def left_out(models: Mapping[str, Iterable[tuple[str, str]]], quant_method: str | None) -> dict[str, str]:
    """{contract: why} for the contracts the checkpoint's own method leaves out (module docstring).

    models: each candidate contract's `models` lines as (engine, target) pairs; quant_method:
    config.json's `quant_method` (None: unquantized, nothing is left out).
    """
    own = _canon(quant_method)
    if own is None:
        return {}
    lines = {c: [(e, t, method_of(t)) for e, t in pairs] for c, pairs in models.items()}
    engines_with_own = {e for ls in lines.values() for e, _, m in ls if m == own}
    out: dict[str, str] = {}
    for contract, ls in lines.items():
        for engine in {e for e, _, _ in ls} & engines_with_own:
            mine = [(t, m) for e, t, m in ls if e == engine and m is not None]
            if mine and all(m != own for _, m in mine):
                target, method = mine[0]
                holder = sorted(c for c, o in lines.items() if any(e == engine and m == own for e, _, m in o))
                out[contract] = (f"{contract} stands for {target.rpartition(':')[2]} (quant_method {method!r}, "
                                 f"whose admission rule it states), and this checkpoint's quant_method is {own!r}: "
                                 f"{engine} runs it through that method's own object ({', '.join(holder)})")
                break
    return out


def own_refusal(contract: str, models: Iterable[tuple[str, str]], quant_method: str | None, message: str) -> str | None:
    """`error[LR170]: ...`: the refusal of a contract that stands for the checkpoint's own quantization
    method's object (its `models` lines as (engine, target) pairs), naming the method and its object,
    then the contract's own message (the rule's file:line and text); None when the contract stands for
    no object of that method (its refusal is the contract's, not the method's)."""
    own = _canon(quant_method)
    objects = [t.rpartition(":")[2] for _, t in models if own is not None and method_of(t) == own]
    if not objects:
        return None
    return (f"error[LR170]: quant_method {own!r} refuses this degree: {', '.join(objects)} (modelled by {contract}) "
            f"admits it only under its own rule: {message}")


def states_only_method(pairs: Iterable[tuple[str, str]], quant_method: str | None) -> bool:
    """Whether a contract's `models` lines (engine, target) are all vLLM objects of `quant_method`'s own
    method (vllm_ct_wna16_int4_moe: CompressedTensorsWNA16MoEMethod only): the contract states that
    method's admission and loaded layout, and no backend's kernel rule (marlin_moe_ct_fp8 also models
    MarlinExperts, whose tile rules are Marlin's)."""
    own = _canon(quant_method)
    pairs = list(pairs)
    return own is not None and bool(pairs) and all(e == "vllm" and method_of(t) == own for e, t in pairs)


def gated_by_own(models: Mapping[str, Iterable[tuple[str, str]]], quant_method: str | None) -> dict[str, list[str]]:
    """{contract: [method contracts]} for the contracts (their `models` lines as (engine, target) pairs)
    that stand for no quantization method's object (a kernel only: torch_int4pack_gptq_moe), when some
    contract states only the checkpoint's own method (`states_only_method`: vllm_ct_wna16_int4_moe for
    compressed-tensors W4A16). vLLM loads the checkpoint through that method, so a kernel gets it only
    at the degrees the method admits: `layoutc run` refuses the others before any route (LR170) and
    `layoutc audit` marks their rows refused by the method's rule. {} when no contract states it."""
    lines = {c: list(pairs) for c, pairs in models.items()}
    holders = sorted(c for c, pairs in lines.items() if states_only_method(pairs, quant_method))
    if not holders:
        return {}
    return {c: holders for c, pairs in lines.items() if all(method_of(t) is None for _, t in pairs)}
