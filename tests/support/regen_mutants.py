"""Write the mutant corpus tests/cases/mutants/*.moe from the shipped CPU contracts.

Each mutant is one shipped contract with a few textual edits, the kind an
integrator makes (issue 11, "Fault classes found", plus edits of the same kinds).
Every edit must match its baseline exactly `count` times, so a change to a shipped
contract that makes an edit stale fails here instead of silently writing the
baseline. Run `python -m tests.support.regen_mutants` after changing this list; the
expected outcome of each mutant is pinned in tests/compiler/test_mutants.py.

A baseline that states expert parallelism (`experts ... over ep_size`) is mutated without
it (`without_ep`): these fault classes are of the intermediate/TP layout, each pinned
against the contract as it reads with one EP rank, and EP has its own cases
(tests/cases/unsound/ep_*, and the `ep=True` mutants below, which keep it).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "cases" / "mutants"
BASE = {
    "v": "vllm_cpu_grouped_gemm",
    "z": "zentorch_fused_moe",
    "g": "torch_grouped_mm",
    "i4": "torch_int4pack_moe",
    "i8": "torch_int8pack_moe",
}
# Baselines whose kernel does not run here (no glue binds them): their mutants are proved or
# refused by check/verify, and a proved one must be caught by the conformance lane, which holds
# the contract's trusted view to the engine's own code (tests/support/conformance/trusted_views.py).
GPU_BASE = {
    "fi4": "flashinfer_nvfp4_moe",
    "fmx": "flashinfer_trtllm_mxfp4_moe",
    "cmx": "vllm_cpu_mxfp4_gpt_oss_moe",
}

# Frequently edited lines of the baselines.
TP_DOMAIN = "param tp_size: int in {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128}"
V_INTERLEAVE = ("  axis n = interleave(gate | up, intermediate_size_per_partition -> "
                "intermediate_size_per_partition_padded) when activation == swigluoai\n")
HALVES = "  axis n = halves(gate | up, intermediate_size_per_partition -> intermediate_size_per_partition_padded)\n"
W13_K = "  axis k = hidden_size\n  storage dtype\n  fill 0\n}"
W2_AXES = ("  axis experts = num_experts\n  axis n = hidden_size\n"
           "  axis k = pad(intermediate_size_per_partition -> intermediate_size_per_partition_padded)\n")
W2_EKN = ("  axis experts = num_experts\n"
          "  axis k = pad(intermediate_size_per_partition -> intermediate_size_per_partition_padded)\n"
          "  axis n = hidden_size\n")
W2_NKE = ("  axis n = hidden_size\n"
          "  axis k = pad(intermediate_size_per_partition -> intermediate_size_per_partition_padded)\n"
          "  axis experts = num_experts\n")
SCALE_W13 = """
# mutant: a scale tensor for the unquantized weights
tensor w13_scales: scale w13 {
  axis experts = num_experts
  axis n = like w13.n
  storage float32
  fill 0
}
"""
SCALE_W2 = """
# mutant: a scale tensor for the unquantized weights
tensor w2_scales: scale w2 {
  axis experts = num_experts
  axis n = hidden_size
  storage float32
  fill 0
}
"""


@dataclass(frozen=True)
class Mutant:
    name: str
    base: str
    fault: str
    edit: str
    subs: tuple[tuple[str, str, int], ...]  # (old, new, expected count; 0 = regex, any count >= 1)
    ep: bool = False  # mutate the baseline with its EP declaration (an EP fault class)


def m(name: str, base: str, fault: str, edit: str, *subs: tuple[str, str] | tuple[str, str, int]) -> Mutant:
    return Mutant(name, base, fault, edit, tuple((s[0], s[1], s[2] if len(s) > 2 else 1) for s in subs))


def rename(old: str, new: str) -> tuple[str, str, int]:
    return (rf"\b{old}\b", new, 0)


MUTANTS: list[Mutant] = [
    # ---- fp16 fills with w2's pad at 0 (inf * 0) ------------------------------------------
    m("v_w13_fill1_f16", "v", "fp16-fill", "w13 `fill 1`, run at float16", (W13_K, W13_K.replace("fill 0", "fill 1"))),
    m("v_w13_fill60000_f16", "v", "fp16-fill", "w13 `fill 60000`, dtype {float16, float32} (60000 is exact in both)",
      (W13_K, W13_K.replace("fill 0", "fill 60000")),
      ("param dtype: enum {bfloat16, float16, float32}", "param dtype: enum {float16, float32}"),
      ("admit isa == vec or dtype == bfloat16 :", "admit isa == vec :")),
    m("g_w13_fill60000_f16", "g", "fp16-fill", "w13 `fill 60000`, dtype {float16, float32} (60000 is exact in both)",
      (W13_K, W13_K.replace("fill 0", "fill 60000")),
      ("param dtype: enum {bfloat16, float16, float32}", "param dtype: enum {float16, float32}"),
      ("match dtype { bfloat16 => 8, float16 => 8, float32 => 4 }", "match dtype { float16 => 8, float32 => 4 }")),
    m("g_w13_fill1_f16", "g", "fp16-fill", "w13 `fill 1`, run at float16", (W13_K, W13_K.replace("fill 0", "fill 1"))),
    m("i8_w13_fill60000_f16", "i8", "fp16-fill", "w13 `fill 60000`, dtype {float16, float32} (60000 is exact in both)",
      (W13_K, W13_K.replace("fill 0", "fill 60000")),
      ("param dtype: enum {bfloat16, float16, float32}", "param dtype: enum {float16, float32}"),
      ("match dtype { bfloat16 => 16, float16 => 1, float32 => 1 }", "match dtype { float16 => 1, float32 => 1 }")),
    m("v_w2_fill1", "v", "fp16-fill", "w2 `fill 1` with w13's pad at 0 (inert: act(0) * 0 = 0)",
      (W2_AXES + "  storage dtype\n  fill 0", W2_AXES + "  storage dtype\n  fill 1")),
    m("v_both_fill1", "v", "fp16-fill", "w13 and w2 both `fill 1` (pad lanes reach the output)",
      (W13_K, W13_K.replace("fill 0", "fill 1")), (W2_AXES + "  storage dtype\n  fill 0", W2_AXES + "  storage dtype\n  fill 1")),
    m("v_bias_fill1", "v", "fp16-fill", "w13_bias `fill 1` (w2's pad 0 still cancels the lane)",
      ("  axis n = like w13.n\n  storage dtype\n  fill 0", "  axis n = like w13.n\n  storage dtype\n  fill 1")),
    # ---- axis order -----------------------------------------------------------------------
    m("v_w2_ekn", "v", "axis-order", "w2 axes experts, k, n", (W2_AXES, W2_EKN)),
    m("v_w13_kn", "v", "axis-order", "w13 axis k before n",
      ("  axis experts = num_experts\n" + V_INTERLEAVE + HALVES + "  axis k = hidden_size\n",
       "  axis experts = num_experts\n  axis k = hidden_size\n" + V_INTERLEAVE + HALVES)),
    m("v_w13_experts_last", "v", "axis-order", "w13 axis experts last",
      ("  axis experts = num_experts\n" + V_INTERLEAVE + HALVES + "  axis k = hidden_size\n",
       V_INTERLEAVE + HALVES + "  axis k = hidden_size\n  axis experts = num_experts\n")),
    m("z_w2_ekn", "z", "axis-order", "w2 axes experts, k, n", (W2_AXES, W2_EKN)),
    m("g_w2_ekn", "g", "axis-order", "w2 axes experts, k, n", (W2_AXES, W2_EKN)),
    m("i4_w13_kn", "i4", "axis-order", "w13 axis k before n",
      ("  axis experts = num_experts\n" + HALVES + "  axis k = hidden_size\n",
       "  axis experts = num_experts\n  axis k = hidden_size\n" + HALVES)),
    m("i8_w2_experts_last", "i8", "axis-order", "w2 axes n, k, experts", (W2_AXES, W2_NKE)),
    m("v_bias_ne", "v", "axis-order", "w13_bias axes n, experts",
      ("  axis experts = num_experts\n  axis n = like w13.n\n", "  axis n = like w13.n\n  axis experts = num_experts\n")),
    # ---- hidden padding -------------------------------------------------------------------
    m("v_hidden_pad64", "v", "hidden-padding", "w13.k and w2.n = pad(hidden_size -> round_up(hidden_size, 64))",
      (W13_K, W13_K.replace("axis k = hidden_size", "axis k = pad(hidden_size -> round_up(hidden_size, 64))")),
      ("  axis experts = num_experts\n  axis n = hidden_size\n  axis k = pad(",
       "  axis experts = num_experts\n  axis n = pad(hidden_size -> round_up(hidden_size, 64))\n  axis k = pad(")),
    m("v_hidden_pad_w13_only", "v", "hidden-padding", "only w13.k padded to round_up(hidden_size, 64)",
      (W13_K, W13_K.replace("axis k = hidden_size", "axis k = pad(hidden_size -> round_up(hidden_size, 64))"))),
    m("z_hidden_pad", "z", "hidden-padding", "w13.k and w2.n padded to round_up(hidden_size, 32)",
      (W13_K, W13_K.replace("axis k = hidden_size", "axis k = pad(hidden_size -> round_up(hidden_size, 32))")),
      ("  axis experts = num_experts\n  axis n = hidden_size\n  axis k = pad(",
       "  axis experts = num_experts\n  axis n = pad(hidden_size -> round_up(hidden_size, 32))\n  axis k = pad(")),
    m("g_hidden_pad", "g", "hidden-padding", "w13.k and w2.n padded to round_up(hidden_size, 64)",
      (W13_K, W13_K.replace("axis k = hidden_size", "axis k = pad(hidden_size -> round_up(hidden_size, 64))")),
      ("  axis experts = num_experts\n  axis n = hidden_size\n  axis k = pad(",
       "  axis experts = num_experts\n  axis n = pad(hidden_size -> round_up(hidden_size, 64))\n  axis k = pad(")),
    m("v_experts_pad", "v", "hidden-padding", "every experts axis = pad(num_experts -> round_up(num_experts, 8))",
      ("  axis experts = num_experts\n", "  axis experts = pad(num_experts -> round_up(num_experts, 8))\n", 4)),
    # ---- experts axis constant ------------------------------------------------------------
    m("v_experts8", "v", "experts-constant", "every `axis experts = 8` (num_experts still 1..1024)",
      ("  axis experts = num_experts\n", "  axis experts = 8\n", 4)),
    m("v_experts8_w13_only", "v", "experts-constant", "w13 `axis experts = 8`, the others num_experts",
      ("tensor w13: weight w13 {\n  axis experts = num_experts\n", "tensor w13: weight w13 {\n  axis experts = 8\n")),
    m("z_experts8", "z", "experts-constant", "every `axis experts = 8`", ("  axis experts = num_experts\n", "  axis experts = 8\n", 4)),
    m("g_experts8", "g", "experts-constant", "every `axis experts = 8`", ("  axis experts = num_experts\n", "  axis experts = 8\n", 2)),
    m("i8_experts4", "i8", "experts-constant", "every `axis experts = 4`", ("  axis experts = num_experts\n", "  axis experts = 4\n", 2)),
    # ---- activations the glue does not compute ----------------------------------------------
    m("g_swigluoai_view", "g", "activation-unsupported", "swigluoai added, halves layout and `view halves`",
      ("param activation: enum {silu, gelu, gelu_tanh}", "param activation: enum {silu, gelu, gelu_tanh, swigluoai}")),
    m("g_swigluoai_noview", "g", "activation-unsupported", "swigluoai added, halves layout, view clause removed",
      ("param activation: enum {silu, gelu, gelu_tanh}", "param activation: enum {silu, gelu, gelu_tanh, swigluoai}"),
      ("  view w13.n halves(gate | up)\n", "")),
    m("g_swigluoai_interleave", "g", "activation-unsupported",
      "swigluoai added with an interleaved layout `when activation == swigluoai`, view clause removed",
      ("param activation: enum {silu, gelu, gelu_tanh}", "param activation: enum {silu, gelu, gelu_tanh, swigluoai}"),
      ("  view w13.n halves(gate | up)\n", ""), ("  axis experts = num_experts\n" + HALVES,
                                                "  axis experts = num_experts\n" + V_INTERLEAVE + HALVES)),
    m("i8_swigluoai", "i8", "activation-unsupported", "swigluoai added to int8pack",
      ("param activation: enum {silu, gelu, gelu_tanh}", "param activation: enum {silu, gelu, gelu_tanh, swigluoai}")),
    m("i4_relu2", "i4", "activation-unsupported", "relu2 added to int4pack",
      ("param activation: enum {silu, gelu, gelu_tanh}", "param activation: enum {silu, gelu, gelu_tanh, relu2}")),
    m("g_relu2", "g", "activation-unsupported", "relu2 added to grouped_mm",
      ("param activation: enum {silu, gelu, gelu_tanh}", "param activation: enum {silu, gelu, gelu_tanh, relu2}")),
    # ---- views and segment order ----------------------------------------------------------
    m("g_interleave_both", "g", "view-order", "interleave on the layout and the view",
      (HALVES, HALVES.replace("halves(", "interleave(")), ("view w13.n halves(gate | up)", "view w13.n interleave(gate | up)")),
    m("g_upgate_both", "g", "view-order", "halves(up | gate) on the layout and the view",
      (HALVES, HALVES.replace("gate | up", "up | gate")), ("view w13.n halves(gate | up)", "view w13.n halves(up | gate)")),
    m("g_upgate_layout", "g", "view-order", "halves(up | gate) on the layout only",
      (HALVES, HALVES.replace("gate | up", "up | gate"))),
    m("i4_upgate_both", "i4", "view-order", "halves(up | gate) on the layout and the view",
      (HALVES, HALVES.replace("gate | up", "up | gate")), ("view w13.n halves(gate | up)", "view w13.n halves(up | gate)")),
    m("v_upgate_layout", "v", "view-order", "halves(up | gate) for the non-swigluoai layout",
      (HALVES, HALVES.replace("gate | up", "up | gate"))),
    m("v_interleave_always", "v", "view-order", "w13.n interleaved for every activation",
      (V_INTERLEAVE + HALVES, HALVES.replace("halves(", "interleave("))),
    m("v_halves_always", "v", "view-order", "the swigluoai interleave alternative removed (halves for all)",
      (V_INTERLEAVE, "")),
    m("v_view_clause_halves", "v", "view-order", "`view w13.n halves(gate | up)` added to the kernel block",
      ("  activation activation\n  align w13.n / 2", "  view w13.n halves(gate | up)\n  activation activation\n  align w13.n / 2")),
    m("z_halves_always", "z", "view-order", "the swigluoai interleave alternative removed", (V_INTERLEAVE, "")),
    m("v_guard_inverted", "v", "when-guard", "interleave `when activation != swigluoai`",
      ("when activation == swigluoai", "when activation != swigluoai")),
    m("v_guard_silu", "v", "when-guard", "interleave `when activation == silu`",
      ("when activation == swigluoai", "when activation == silu")),
    m("z_guard_gelu", "z", "when-guard", "interleave `when activation == gelu`",
      ("when activation == swigluoai", "when activation == gelu")),
    m("v_interleave_upgate", "v", "view-order", "interleave(up | gate) for swigluoai",
      ("interleave(gate | up,", "interleave(up | gate,")),
    # ---- scale tensors on unquantized glues ----------------------------------------------
    m("v_scale_w13", "v", "scale-unquantized", "a w13 scale tensor (fill 0) on the unquantized vLLM glue",
      ("kernel cpu_fused_moe {", SCALE_W13 + "\nkernel cpu_fused_moe {")),
    m("g_scale_w2", "g", "scale-unquantized", "a w2 scale tensor on grouped_mm", ("kernel grouped_mm {", SCALE_W2 + "\nkernel grouped_mm {")),
    m("i8_scale_w2", "i8", "scale-unquantized", "a w2 scale tensor on int8pack (the glue makes its own)",
      ("kernel weight_int8pack_mm {", SCALE_W2 + "\nkernel weight_int8pack_mm {")),
    # ---- w13 bias declared plain ------------------------------------------------------------
    m("v_bias_plain", "v", "bias-plain", "w13_bias.n = pad(2 * I_pp -> 2 * I_pp_padded), not like w13.n",
      ("  axis n = like w13.n\n", "  axis n = pad(2 * intermediate_size_per_partition -> "
       "2 * intermediate_size_per_partition_padded)\n")),
    m("z_bias_plain", "z", "bias-plain", "w13_bias.n = 2 * intermediate_size_per_partition",
      ("  axis n = like w13.n\n", "  axis n = 2 * intermediate_size_per_partition\n")),
    m("v_bias_halves_copy", "v", "bias-plain", "w13_bias.n = halves(...) copied, without the swigluoai alternative",
      ("  axis n = like w13.n\n", HALVES)),
    m("v_bias_full_copy", "v", "bias-plain", "w13_bias.n = both alternatives of w13.n copied verbatim",
      ("  axis n = like w13.n\n", V_INTERLEAVE + HALVES)),
    m("v_w2_bias_like", "v", "w2-bias-once", "w2_bias.n = like w2.n", ("tensor w2_bias: bias w2 optional {\n  axis experts = num_experts\n"
                                                                       "  axis n = hidden_size\n", "tensor w2_bias: bias w2 optional {\n"
                                                                       "  axis experts = num_experts\n  axis n = like w2.n\n")),
    m("z_no_biases", "z", "w2-bias-once", "both bias tensors removed",
      (r"tensor w13_bias: bias w13 optional \{.*?\n\}\n\ntensor w2_bias: bias w2 optional \{.*?\n\}\n", "", -1)),
    # ---- renamed parameters -----------------------------------------------------------------
    m("v_rename_hidden", "v", "renamed-params", "hidden_size -> d_model", rename("hidden_size", "d_model")),
    m("v_rename_experts", "v", "renamed-params", "num_experts -> n_routed_experts", rename("num_experts", "n_routed_experts")),
    m("v_rename_dtype", "v", "renamed-params", "dtype -> weight_dtype", rename("dtype", "weight_dtype")),
    m("v_rename_padded", "v", "renamed-params", "intermediate_size_per_partition_padded -> i_pp_padded",
      rename("intermediate_size_per_partition_padded", "i_pp_padded")),
    m("z_rename_activation", "z", "renamed-params", "activation -> act_fn (param only; `activation` clause keeps its keyword)",
      ("param activation:", "param act_fn:"), ("when activation ==", "when act_fn =="),
      ("  activation activation\n", "  activation act_fn\n"), ("arg activation = activation", "arg activation = act_fn")),
    m("i4_rename_group", "i4", "renamed-params", "group_size -> q_group (the glue arg role stays group_size)",
      rename("group_size", "q_group"), ("arg q_group = q_group", "arg group_size = q_group")),
    m("g_rename_tp", "g", "renamed-params", "tp_size -> world_size", rename("tp_size", "world_size")),
    m("g_rename_intermediate", "g", "renamed-params", "intermediate_size -> moe_intermediate_size",
      rename("intermediate_size", "moe_intermediate_size")),
    # ---- activations the kernel rejects --------------------------------------------------
    m("v_relu2", "v", "kernel-rejected-activation", "relu2 added",
      ("param activation: enum {silu, gelu, gelu_tanh, swigluoai}", "param activation: enum {silu, gelu, gelu_tanh, swigluoai, relu2}")),
    m("v_silu_no_mul", "v", "kernel-rejected-activation", "silu_no_mul added",
      ("param activation: enum {silu, gelu, gelu_tanh, swigluoai}",
       "param activation: enum {silu, gelu, gelu_tanh, swigluoai, silu_no_mul}")),
    m("z_relu2", "z", "kernel-rejected-activation", "relu2 added",
      ("param activation: enum {silu, gelu, gelu_tanh, swigluoai}", "param activation: enum {silu, gelu, gelu_tanh, swigluoai, relu2}")),
    # ---- gated activation on an unsegmented w13 ------------------------------------------
    m("v_ungated", "v", "ungated-w13", "w13.n = pad(2 * I_pp -> 2 * I_pp_padded), no segments",
      (V_INTERLEAVE + HALVES, "  axis n = pad(2 * intermediate_size_per_partition -> 2 * intermediate_size_per_partition_padded)\n")),
    m("g_ungated", "g", "ungated-w13", "w13.n = pad(2 * I_pp -> 2 * I_pp_padded), no segments",
      (HALVES, "  axis n = pad(2 * intermediate_size_per_partition -> 2 * intermediate_size_per_partition_padded)\n")),
    # ---- no activation parameter ----------------------------------------------------------
    m("v_fixed_swigluoai", "v", "missing-activation-param", "no activation param: `activation swigluoai`, w13 always interleaved",
      ("param activation: enum {silu, gelu, gelu_tanh, swigluoai}\n", ""),
      (V_INTERLEAVE + HALVES, V_INTERLEAVE.replace(" when activation == swigluoai", "")),
      ("  activation activation\n", "  activation swigluoai\n"), ("  arg activation = activation\n", "  arg activation = swigluoai\n"),
      (r"admit activation != swigluoai or \(swiglu[^\n]*\n", "", -1)),
    m("v_fixed_swigluoai_halves", "v", "missing-activation-param", "no activation param: `activation swigluoai`, w13 halves",
      ("param activation: enum {silu, gelu, gelu_tanh, swigluoai}\n", ""), (V_INTERLEAVE, ""),
      ("  activation activation\n", "  activation swigluoai\n"), ("  arg activation = activation\n", "  arg activation = swigluoai\n"),
      (r"admit activation != swigluoai or \(swiglu[^\n]*\n", "", -1)),
    m("z_fixed_silu", "z", "missing-activation-param", "no activation param: `activation silu`, halves",
      ("param activation: enum {silu, gelu, gelu_tanh, swigluoai}\n", ""), (V_INTERLEAVE, ""),
      ("  activation activation\n", "  activation silu\n"), ("  arg activation = activation\n", "  arg activation = silu\n"),
      (r"admit activation != swigluoai or \(swiglu[^\n]*\n", "", -1)),
    # ---- removed or changed gates, tiles and domains ---------------------------------------
    m("v_no_require_tp", "v", "removed-gate", "`require intermediate_size % tp_size == 0` removed",
      (r"require intermediate_size % tp_size == 0 : [^\n]*\n", "", -1)),
    m("g_no_require_tp", "g", "removed-gate", "`require intermediate_size % tp_size == 0` removed",
      (r"require intermediate_size % tp_size == 0 : [^\n]*\n", "", -1)),
    m("v_no_admit_hidden", "v", "removed-gate", "both hidden_size admits removed",
      (r"admit hidden_size % output_alignment[^\n]*\nadmit hidden_size % reduction_alignment[^\n]*\n", "", -1)),
    m("v_no_hidden_checks", "v", "removed-gate", "hidden admits and w13.k align rules removed",
      (r"admit hidden_size % output_alignment[^\n]*\nadmit hidden_size % reduction_alignment[^\n]*\n", "", -1),
      (r"  align w13.k % output_alignment[^\n]*\n  align w13.k % reduction_alignment[^\n]*\n", "", -1)),
    m("v_no_isa_admit", "v", "removed-gate", "`admit isa == vec or dtype == bfloat16` removed",
      (r"admit isa == vec or dtype == bfloat16[^\n]*\n", "", -1)),
    m("v_tile16", "v", "tile-alignment", "vec output_alignment 32 -> 16",
      ("match isa { vec => 32, amx", "match isa { vec => 16, amx")),
    m("v_no_pad", "v", "tile-alignment", "intermediate_size_per_partition_padded = intermediate_size_per_partition; align rules kept",
      ("let intermediate_size_per_partition_padded = round_up(intermediate_size_per_partition, intermediate_alignment)",
       "let intermediate_size_per_partition_padded = intermediate_size_per_partition")),
    m("v_no_pad_no_align", "v", "tile-alignment", "no padding and the w13.n / w2.k align rules removed",
      ("let intermediate_size_per_partition_padded = round_up(intermediate_size_per_partition, intermediate_alignment)",
       "let intermediate_size_per_partition_padded = intermediate_size_per_partition"),
      (r"  align w13.n / 2 % output_alignment[^\n]*\n  align w2.k % reduction_alignment[^\n]*\n"
       r"  align w2.k % output_alignment[^\n]*\n", "", -1)),
    m("i8_kmult1", "i8", "tile-alignment", "bf16 k_multiple 16 -> 1 (the kernel's K loop has no tail)",
      ("match dtype { bfloat16 => 16, float16 => 1", "match dtype { bfloat16 => 1, float16 => 1")),
    m("g_stride4", "g", "tile-alignment", "bf16/fp16 stride_elements 8 -> 4 (8 bytes, not 16)",
      ("match dtype { bfloat16 => 8, float16 => 8, float32 => 4 }", "match dtype { bfloat16 => 4, float16 => 4, float32 => 4 }")),
    m("i4_group16", "i4", "tile-alignment", "group_size 16 admitted", ("param group_size: int in {32, 64, 128, 256}",
                                                                    "param group_size: int in {16, 32, 64, 128, 256}")),
    m("i4_group_arg64", "i4", "tile-alignment", "glue `arg group_size = 64` while the pad uses group_size",
      ("  arg group_size = group_size\n", "  arg group_size = 64\n")),
    m("z_pad32", "z", "tile-alignment", "zentorch I_pp padded to 32 (\"never padded\" align removed)",
      ("let intermediate_size_per_partition_padded = intermediate_size_per_partition",
       "let intermediate_size_per_partition_padded = round_up(intermediate_size_per_partition, 32)"),
      (r"  align w13.n == 2 \* intermediate_size_per_partition[^\n]*\n", "", -1)),
    m("v_w2_k_unpadded", "v", "tile-alignment", "w2.k = intermediate_size_per_partition (unpadded) while w13 is padded",
      ("  axis k = pad(intermediate_size_per_partition -> intermediate_size_per_partition_padded)\n",
       "  axis k = intermediate_size_per_partition\n")),
    m("v_w13_pad64", "v", "tile-alignment", "w13 halves padded to round_up(I_pp, 64), w2 to I_pp_padded",
      (HALVES, HALVES.replace("-> intermediate_size_per_partition_padded", "-> round_up(intermediate_size_per_partition, 64)"))),
    m("v_tp_domain9", "v", "tp-domain", "tp_size 9 admitted", (TP_DOMAIN, TP_DOMAIN.replace("8, 10", "8, 9, 10"))),
    m("g_tp_domain0", "g", "tp-domain", "tp_size 0 admitted", (TP_DOMAIN,
                                                           "param tp_size: int in {0, 1, 2, 4}")),
    m("v_tp_range", "v", "tp-domain", "tp_size int in 1..16 (any degree)", (TP_DOMAIN,
                                                                        "param tp_size: int in 1..16")),
    # ---- dtypes ------------------------------------------------------------------------------
    m("z_dtype_f16", "z", "dtype", "float16 added to zentorch", ("param dtype: enum {bfloat16, float32}",
                                                             "param dtype: enum {bfloat16, float16, float32}")),
    m("v_dtype_f8", "v", "dtype", "float8_e4m3fn added", ("param dtype: enum {bfloat16, float16, float32}",
                                                      "param dtype: enum {bfloat16, float16, float32, float8_e4m3fn}")),
    m("g_storage_bf16", "g", "dtype", "w2 stored as bfloat16 whatever dtype", (W2_AXES + "  storage dtype", W2_AXES + "  storage bfloat16")),
    m("i8_storage_int8", "i8", "dtype", "w13 stored as int8", (W13_K, W13_K.replace("storage dtype", "storage int8"))),
    # ---- role order in the glue -------------------------------------------------------------
    m("v_isa_amx_only", "v", "tp-domain", "isa domain {amx} only (bfloat16 by the admit)",
      ("param isa: enum {vec, amx, neon, vsx}", "param isa: enum {amx}"),
      ("match isa { vec => 32, amx => 32, neon => 32, vsx => 16 }", "match isa { amx => 32 }"),
      ("match isa { vec => 1, amx => 32, neon => 4, vsx => 2 }", "match isa { amx => 32 }"),
      ("admit isa == vec or dtype == bfloat16", "admit dtype == bfloat16"),
      # the ISAs it no longer serves take their `models` lines with them
      *((f'models vllm {{"0.32.0", "0.33.0", "0.34.0"}} "vllm.model_executor.layers.fused_moe.experts.cpu_moe:{cls}" when isa == {isa}\n', "")
        for cls, isa in (("CPUUnquantizedExperts", "vec"), ("ArmCPUUnquantizedExperts", "neon"),
                         ("PowerCPUUnquantizedExperts", "vsx")))),
    # ---- more edits of the same kinds ---------------------------------------------------
    m("v_w2_n_double", "v", "hidden-padding", "w2.n = 2 * hidden_size (w13.k stays hidden_size)",
      ("  axis experts = num_experts\n  axis n = hidden_size\n  axis k = pad(",
       "  axis experts = num_experts\n  axis n = 2 * hidden_size\n  axis k = pad(")),
    m("g_w2_n_double", "g", "hidden-padding", "w2.n = 2 * hidden_size",
      ("  axis experts = num_experts\n  axis n = hidden_size\n  axis k = pad(",
       "  axis experts = num_experts\n  axis n = 2 * hidden_size\n  axis k = pad(")),
    m("v_w2_sizes_swapped", "v", "axis-order", "w2 keeps the names n, k but takes the transposed checkpoint's sizes",
      (W2_AXES, "  axis experts = num_experts\n"
       "  axis n = pad(intermediate_size_per_partition -> intermediate_size_per_partition_padded)\n"
       "  axis k = hidden_size\n")),
    m("z_w2_sizes_swapped", "z", "axis-order", "w2 keeps the names n, k but takes the transposed checkpoint's sizes",
      (W2_AXES, "  axis experts = num_experts\n"
       "  axis n = pad(intermediate_size_per_partition -> intermediate_size_per_partition_padded)\n"
       "  axis k = hidden_size\n")),
    m("v_experts_double", "v", "experts-constant", "every experts axis = 2 * num_experts",
      ("  axis experts = num_experts\n", "  axis experts = 2 * num_experts\n", 4)),
    m("v_w13_experts_plus1", "v", "experts-constant", "w13 and w2 experts = num_experts + 1, biases num_experts",
      ("tensor w13: weight w13 {\n  axis experts = num_experts\n", "tensor w13: weight w13 {\n  axis experts = num_experts + 1\n"),
      ("tensor w2: weight w2 {\n  axis experts = num_experts\n", "tensor w2: weight w2 {\n  axis experts = num_experts + 1\n")),
    m("v_no_isa_arg", "v", "renamed-params", "the glue's `arg isa = isa` removed", ("  arg isa = isa\n", "")),
    m("v_rename_isa", "v", "renamed-params", "isa -> cpu_isa (the glue arg role stays isa)", rename("isa", "cpu_isa"),
      ("arg cpu_isa = cpu_isa", "arg isa = cpu_isa")),
    m("i4_w2_pad16", "i4", "tile-alignment", "w2.k padded to round_up(I_pp, 16), not a whole quant group",
      ("  axis k = pad(intermediate_size_per_partition -> intermediate_size_per_partition_padded)\n",
       "  axis k = pad(intermediate_size_per_partition -> round_up(intermediate_size_per_partition, 16))\n")),
    m("v_ipp_fixed_half", "v", "tp-domain", "intermediate_size_per_partition = intermediate_size / 2 (not / tp_size)",
      ("let intermediate_size_per_partition = intermediate_size / tp_size",
       "let intermediate_size_per_partition = intermediate_size / 2"),
      ("require intermediate_size % tp_size == 0", "require intermediate_size % 2 == 0")),
    m("v_ipp_full", "v", "tp-domain", "w13.n and w2.k take intermediate_size (the full size) on every rank",
      ("let intermediate_size_per_partition = intermediate_size / tp_size",
       "let intermediate_size_per_partition = intermediate_size")),
    m("g_bias_added", "g", "scale-unquantized", "a w13 bias declared on grouped_mm (its glue passes none)",
      ("kernel grouped_mm {", "tensor w13_bias: bias w13 optional {\n  axis experts = num_experts\n  axis n = like w13.n\n"
       "  storage dtype\n  fill 0\n}\n\nkernel grouped_mm {")),
    m("v_w2_bias_kind_swapped", "v", "w2-bias-once", "w2_bias declared `bias w13`",
      ("tensor w2_bias: bias w2 optional {", "tensor w2_bias: bias w13 optional {")),
    m("v_hidden_identity_pad", "v", "hidden-padding", "w13.k = pad(hidden_size -> hidden_size) (identity)",
      (W13_K, W13_K.replace("axis k = hidden_size", "axis k = pad(hidden_size -> hidden_size)"))),
    m("v_w2_fill1_bias_fill1", "v", "fp16-fill", "w2 `fill 1` and w13_bias `fill 1` (bias reaches the pad lane)",
      (W2_AXES + "  storage dtype\n  fill 0", W2_AXES + "  storage dtype\n  fill 1"),
      ("  axis n = like w13.n\n  storage dtype\n  fill 0", "  axis n = like w13.n\n  storage dtype\n  fill 1")),
    m("z_interleave_always", "z", "view-order", "zentorch w13.n interleaved for every activation",
      (V_INTERLEAVE + HALVES, HALVES.replace("halves(", "interleave("))),
    m("i8_upgate_layout", "i8", "view-order", "halves(up | gate) on the layout only", (HALVES, HALVES.replace("gate | up", "up | gate"))),
    m("z_no_require_tp", "z", "removed-gate", "`require intermediate_size % tp_size == 0` removed",
      (r"require intermediate_size % tp_size == 0 : [^\n]*\n", "", -1)),
    m("i8_no_admit_hidden", "i8", "removed-gate", "the bf16 hidden_size admit and w13.k align removed",
      (r"admit hidden_size % k_multiple[^\n]*\n", "", -1), (r"  align w13.k % k_multiple[^\n]*\n", "", -1)),
    # ---- issue 20: the TP degree under another name (no `shard`, tensors still per rank) -------
    m("v_rename_tp_megatron", "v", "tp-renamed", "tp_size -> tensor_model_parallel_size (Megatron's name)",
      rename("tp_size", "tensor_model_parallel_size")),
    m("g_rename_tp_megatron", "g", "tp-renamed", "tp_size -> tensor_model_parallel_size (Megatron's name)",
      rename("tp_size", "tensor_model_parallel_size")),
    m("z_rename_tp_mp", "z", "tp-renamed", "tp_size -> model_parallel (no known alias)",
      rename("tp_size", "model_parallel")),
    m("v_rename_tp_let", "v", "tp-renamed", "tp_size -> mp, and the split read through `let shards = mp`",
      rename("tp_size", "mp"), ("let intermediate_size_per_partition = intermediate_size / mp",
                                "let shards = mp\nlet intermediate_size_per_partition = intermediate_size / shards")),
    # ---- issue 20: the kernel's activation bound through a `let` --------------------------------
    m("v_activation_let_gelu", "v", "activation-let", "kernel and glue activation = a let mapping swigluoai to gelu",
      ("let intermediate_alignment", "let kernel_activation = match activation { swigluoai => gelu, _ => activation }\n"
       "let intermediate_alignment"),
      ("  activation activation\n", "  activation kernel_activation\n"),
      ("  arg activation = activation\n", "  arg activation = kernel_activation\n")),
    m("z_activation_let_dtype", "z", "activation-let", "kernel and glue activation = silu for bfloat16, else the model's",
      ("\ntensor w13:", "\nlet kernel_activation = if dtype == bfloat16 then silu else activation\n\ntensor w13:"),
      ("  activation activation\n", "  activation kernel_activation\n"),
      ("  arg activation = activation\n", "  arg activation = kernel_activation\n")),
    m("v_activation_let_identity", "v", "activation-let", "kernel and glue activation = a let equal to `activation` everywhere",
      ("let intermediate_alignment", "let kernel_activation = match activation { silu => silu, gelu => gelu, "
       "gelu_tanh => gelu_tanh, swigluoai => swigluoai }\nlet intermediate_alignment"),
      ("  activation activation\n", "  activation kernel_activation\n"),
      ("  arg activation = activation\n", "  arg activation = kernel_activation\n")),
    # ---- issue 20: padded experts (never routed) --------------------------------------------------
    m("z_experts_pad", "z", "experts-padding", "every experts axis = pad(num_experts -> round_up(num_experts, 8))",
      ("  axis experts = num_experts\n", "  axis experts = pad(num_experts -> round_up(num_experts, 8))\n", 4)),
    m("g_experts_pad", "g", "experts-padding", "every experts axis = pad(num_experts -> num_experts + 3)",
      ("  axis experts = num_experts\n", "  axis experts = pad(num_experts -> num_experts + 3)\n", 2)),
    m("v_experts_pad_weights_only", "v", "experts-padding", "w13 and w2 experts padded to a multiple of 8, biases not",
      ("  axis experts = num_experts\n", "  axis experts = pad(num_experts -> round_up(num_experts, 8))\n", 4),
      ("optional {\n  axis experts = pad(num_experts -> round_up(num_experts, 8))\n", "optional {\n  axis experts = num_experts\n", 2)),
    m("g_experts_pad_unlike", "g", "experts-padding", "w13 experts padded by 3, w2 experts by 5",
      ("  axis experts = num_experts\n  axis n = halves", "  axis experts = pad(num_experts -> num_experts + 3)\n  axis n = halves", 1),
      ("  axis experts = num_experts\n  axis n = hidden_size", "  axis experts = pad(num_experts -> num_experts + 5)\n  axis n = hidden_size", 1)),
    # ---- issue 20: the bias tie spelled another way -------------------------------------------
    m("v_bias_when_reordered", "v", "bias-spelling", "w13_bias.n spelled out: halves `when activation != swigluoai`, "
      "interleave as the default", ("  axis n = like w13.n\n", HALVES.replace("\n", " when activation != swigluoai\n")
                                     + V_INTERLEAVE.replace(" when activation == swigluoai", ""))),
    m("v_bias_sizes_spelled", "v", "bias-spelling", "w13_bias.n spelled out with `intermediate_size / tp_size` for the let",
      ("  axis n = like w13.n\n", (V_INTERLEAVE + HALVES).replace("(gate | up, intermediate_size_per_partition ->",
                                                                   "(gate | up, intermediate_size / tp_size ->"))),
    m("v_bias_when_wrong", "v", "bias-spelling", "w13_bias.n spelled out, but halves for swigluoai and interleave else",
      ("  axis n = like w13.n\n", HALVES.replace("\n", " when activation == swigluoai\n")
       + V_INTERLEAVE.replace(" when activation == swigluoai", ""))),
]


# ---- red team, issue 20 round 3 -------------------------------------------------------------
LET_IPP = "let intermediate_size_per_partition = intermediate_size / tp_size"
REQ_TP = 'require intermediate_size % tp_size == 0 : "intermediate_size must split evenly over tp_size"'
KACT = ("  activation activation\n", "  activation kernel_activation\n")
GACT = ("  arg activation = activation\n", "  arg activation = kernel_activation\n")
BIAS_LIKE = "  axis n = like w13.n\n"
IL = "interleave(gate | up, intermediate_size_per_partition -> intermediate_size_per_partition_padded)"
HV = "halves(gate | up, intermediate_size_per_partition -> intermediate_size_per_partition_padded)"
E_LINE = "  axis experts = num_experts\n"
W13_HEAD = "tensor w13: weight w13 {\n  axis experts = num_experts\n"
W2_HEAD = "tensor w2: weight w2 {\n  axis experts = num_experts\n"
B13_HEAD = "tensor w13_bias: bias w13 optional {\n  axis experts = num_experts\n"
B2_HEAD = "tensor w2_bias: bias w2 optional {\n  axis experts = num_experts\n"


def v_act(name: str, let: str, edit: str, base: str = "v") -> Mutant:
    anchor = "let intermediate_alignment" if base == "v" else "let intermediate_size_per_partition_padded"
    subs = [(anchor, f"let kernel_activation = {let}\n{anchor}"), KACT]
    if base in ("v", "z"):
        subs.append(GACT)
    return m(name, base, "activation-let", edit, *subs)


def bias_n(name: str, lines: str, edit: str, base: str = "v") -> Mutant:
    return m(name, base, "bias-spelling", edit, (BIAS_LIKE, lines))


RT_MUTANTS: list[Mutant] = [
    # TP degree under another name
    m("v_rt_tp_if_numerals", "v", "tp-renamed", "tp_size -> mp in {1, 2, 4}; the split written `if mp == 2 then I / 2 ...` (numeral divisors)",
      (TP_DOMAIN, "param tp_size: int in {1, 2, 4}"),
      (LET_IPP, "let intermediate_size_per_partition = if tp_size == 1 then intermediate_size else if tp_size == 2 "
                "then intermediate_size / 2 else intermediate_size / 4"), rename("tp_size", "mp")),
    m("g_rt_tp_if_numerals", "g", "tp-renamed", "tp_size -> tp_rank_count in {1, 2}; split `if tp_rank_count == 2 then I / 2 else I`",
      (TP_DOMAIN, "param tp_size: int in {1, 2}"),
      (LET_IPP, "let intermediate_size_per_partition = if tp_size == 2 then intermediate_size / 2 else intermediate_size"),
      rename("tp_size", "tp_rank_count")),
    m("v_rt_tp_param_ipp", "v", "tp-renamed", "vLLM's own spelling: `param intermediate_size_per_partition`, "
      "`require intermediate_size == intermediate_size_per_partition * tensor_model_parallel_size` (no division)",
      (LET_IPP + "\n", ""),
      (REQ_TP, 'param intermediate_size_per_partition: int in 1..262144\n'
               'require intermediate_size == intermediate_size_per_partition * tp_size : "the shard of one rank"'),
      rename("tp_size", "tensor_model_parallel_size")),
    m("z_rt_tp_param_ipp", "z", "tp-renamed", "zentorch: `param intermediate_size_per_partition`, "
      "`require intermediate_size == intermediate_size_per_partition * mp_size` (no division)",
      (LET_IPP + "\n", ""),
      (REQ_TP, 'param intermediate_size_per_partition: int in 1..262144\n'
               'require intermediate_size == intermediate_size_per_partition * tp_size : "the shard of one rank"'),
      rename("tp_size", "mp_size")),
    m("v_rt_tp_deepspeed", "v", "tp-renamed", "tp_size -> mp_size (DeepSpeed's name)", rename("tp_size", "mp_size")),
    m("v_rt_tp_nested_lets", "v", "tp-renamed", "tp_size -> moe_tp_size (SGLang), divisor through `let a = moe_tp_size; let b = a * 1`",
      (LET_IPP, "let a = tp_size\nlet b = a * 1\nlet intermediate_size_per_partition = intermediate_size / b"),
      rename("tp_size", "moe_tp_size")),
    m("v_rt_tp_cdiv", "v", "tp-renamed", "tp_size -> tp_world, split `cdiv(intermediate_size, tp_world)`",
      (LET_IPP, "let intermediate_size_per_partition = cdiv(intermediate_size, tp_size)"), rename("tp_size", "tp_world")),
    m("g_rt_tp_roundup", "g", "tp-renamed", "tp_size -> ep_tp, split `round_up(intermediate_size / ep_tp, 1)`",
      (LET_IPP, "let intermediate_size_per_partition = round_up(intermediate_size / tp_size, 1)"), rename("tp_size", "ep_tp")),
    m("v_rt_tp_divisor_if", "v", "tp-renamed", "tp_log2 in {0, 1, 2}; `let shards_n = if tp_log2 == 0 then 1 else ...`; I / shards_n",
      (TP_DOMAIN, "param tp_log2: int in {0, 1, 2}"),
      (LET_IPP, "let intermediate_size_per_partition = intermediate_size / shards_n"),
      (REQ_TP, 'let shards_n = if tp_log2 == 0 then 1 else if tp_log2 == 1 then 2 else 4\n'
               'require intermediate_size % shards_n == 0 : "even split"')),
    m("v_rt_tp_both", "v", "tp-renamed", "tp_size kept as {1}, the split by a second degree tensor_model_parallel_size in {1, 2, 4}",
      (TP_DOMAIN, "param tp_size: int in {1}\nparam tensor_model_parallel_size: int in {1, 2, 4}"),
      (LET_IPP, "let intermediate_size_per_partition = intermediate_size / tensor_model_parallel_size"),
      (REQ_TP, 'require intermediate_size % tensor_model_parallel_size == 0 : "even split"')),
    # activation through a let
    v_act("v_rt_act_if_swap", "if activation == gelu then gelu_tanh else activation", "kernel/glue activation: gelu -> gelu_tanh via `if`"),
    v_act("v_rt_act_nested_match", "match dtype { bfloat16 => match activation { gelu => silu, _ => activation }, _ => activation }",
          "nested match: bf16 gelu -> silu"),
    v_act("v_rt_act_swap2", "match activation { silu => gelu, gelu => silu, _ => activation }", "silu and gelu swapped"),
    v_act("v_rt_act_two_params", "if isa == neon then (if activation == gelu_tanh then gelu else activation) else activation",
          "a let over isa and activation: neon gelu_tanh -> gelu (neon + bf16 admitted)"),
    v_act("v_rt_act_identity_admitted", "if isa == amx and dtype == float32 then silu else activation",
          "differs only on amx + float32, which `admit isa == vec or dtype == bfloat16` refuses"),
    v_act("v_rt_act_identity_alpha", "if activation == swigluoai and swiglu_alpha_milli == 0 then silu else activation",
          "differs only on swigluoai with alpha 0, which the constants admit refuses"),
    v_act("v_rt_act_identity_consts", "if activation == swigluoai and (swiglu_alpha_milli != 1702 or swiglu_limit_milli != 7000) "
          "then silu else activation", "differs only on swigluoai with other constants (refused by the admit)"),
    m("v_rt_act_bool_flag", "v", "activation-let", "`param approximate_gelu: int in {0, 1} = 0`; gelu -> gelu_tanh when set",
      ("let intermediate_alignment", "param approximate_gelu: int in {0, 1} = 0\nlet kernel_activation = if approximate_gelu == 1 "
       "and activation == gelu then gelu_tanh else activation\nlet intermediate_alignment"), KACT, GACT),
    v_act("v_rt_act_hidden", "if hidden_size > 70000 then gelu else activation",
          "differs only for hidden_size > 70000 (outside its domain 1..65536)"),
    v_act("g_rt_act_kernel_only", "match activation { gelu => gelu_tanh, _ => activation }",
          "grouped_mm (no glue arg): kernel clause gelu -> gelu_tanh", base="g"),
    v_act("z_rt_act_identity_if", "if activation == swigluoai then swigluoai else activation", "identity written with `if`", base="z"),
    m("g_rt_act_second_param", "g", "activation-let", "a second activation parameter act_fn bound by the kernel clause",
      ("param activation: enum {silu, gelu, gelu_tanh}", "param activation: enum {silu, gelu, gelu_tanh}\n"
       "param act_fn: enum {silu, gelu, gelu_tanh}"), ("  activation activation\n", "  activation act_fn\n")),
    m("v_rt_act_glue_only_let", "v", "activation-let", "glue binds an identity let, kernel clause the parameter",
      ("let intermediate_alignment", "let kernel_activation = match activation { silu => silu, gelu => gelu, "
       "gelu_tanh => gelu_tanh, swigluoai => swigluoai }\nlet intermediate_alignment"), GACT),
    # padded experts
    m("v_rt_experts_pad_let", "v", "experts-padding", "every experts axis padded to round_up(E, 8): w13 through "
      "`let num_experts_padded`, w2 and the biases spelled out",
      ("let intermediate_alignment", "let num_experts_padded = round_up(num_experts, 8)\nlet intermediate_alignment"),
      (W13_HEAD, W13_HEAD.replace("= num_experts\n", "= pad(num_experts -> num_experts_padded)\n")),
      (E_LINE, "  axis experts = pad(num_experts -> round_up(num_experts, 8))\n", 3)),
    m("g_rt_experts_pad_commuted", "g", "experts-padding", "w13 experts pad(E -> E + 3), w2 pad(E -> 3 + E)",
      (W13_HEAD, W13_HEAD.replace("= num_experts\n", "= pad(num_experts -> num_experts + 3)\n")),
      (W2_HEAD, W2_HEAD.replace("= num_experts\n", "= pad(num_experts -> 3 + num_experts)\n"))),
    m("v_rt_experts_pad_biases_only", "v", "experts-padding", "bias experts padded to round_up(E, 8), weights not",
      (B13_HEAD, B13_HEAD.replace("= num_experts\n", "= pad(num_experts -> round_up(num_experts, 8))\n")),
      (B2_HEAD, B2_HEAD.replace("= num_experts\n", "= pad(num_experts -> round_up(num_experts, 8))\n"))),
    m("v_rt_experts_pad_bias_more", "v", "experts-padding", "weights padded E + 3, biases E + 5",
      (W13_HEAD, W13_HEAD.replace("= num_experts\n", "= pad(num_experts -> num_experts + 3)\n")),
      (W2_HEAD, W2_HEAD.replace("= num_experts\n", "= pad(num_experts -> num_experts + 3)\n")),
      (B13_HEAD, B13_HEAD.replace("= num_experts\n", "= pad(num_experts -> num_experts + 5)\n")),
      (B2_HEAD, B2_HEAD.replace("= num_experts\n", "= pad(num_experts -> num_experts + 5)\n"))),
    m("z_rt_experts_pad_w13_guarded", "z", "experts-padding", "w13 experts padded to round_up(E, 8) `when dtype == bfloat16` only; w2 never",
      (W13_HEAD, "tensor w13: weight w13 {\n  axis experts = pad(num_experts -> round_up(num_experts, 8)) when dtype == bfloat16\n"
       "  axis experts = num_experts\n")),
    m("z_rt_experts_pad_both_guarded", "z", "experts-padding", "every experts axis padded `when dtype == bfloat16` (alike)",
      (E_LINE, "  axis experts = pad(num_experts -> round_up(num_experts, 8)) when dtype == bfloat16\n"
       "  axis experts = num_experts\n", 4)),
    m("g_rt_experts_pad_w13_guarded", "g", "experts-padding", "grouped_mm: w13 experts padded `when dtype == bfloat16` only; w2 never",
      (W13_HEAD, "tensor w13: weight w13 {\n  axis experts = pad(num_experts -> round_up(num_experts, 8)) when dtype == bfloat16\n"
       "  axis experts = num_experts\n")),
    m("g_rt_experts_pad_both_guarded", "g", "experts-padding", "grouped_mm: w13 and w2 experts padded `when dtype == bfloat16` (alike)",
      (E_LINE, "  axis experts = pad(num_experts -> round_up(num_experts, 8)) when dtype == bfloat16\n"
       "  axis experts = num_experts\n", 2)),
    m("v_rt_experts_pad_guarded_no_w2", "v", "experts-padding", "w13 and both biases padded `when dtype == bfloat16`, w2 never",
      (W13_HEAD, "tensor w13: weight w13 {\n  axis experts = pad(num_experts -> round_up(num_experts, 8)) when dtype == bfloat16\n"
       "  axis experts = num_experts\n"),
      (B13_HEAD, "tensor w13_bias: bias w13 optional {\n  axis experts = pad(num_experts -> round_up(num_experts, 8)) when dtype == bfloat16\n"
       "  axis experts = num_experts\n"),
      (B2_HEAD, "tensor w2_bias: bias w2 optional {\n  axis experts = pad(num_experts -> round_up(num_experts, 8)) when dtype == bfloat16\n"
       "  axis experts = num_experts\n")),
    m("i8_rt_experts_pad", "i8", "experts-padding", "int8pack: every experts axis padded to round_up(E, 8)",
      (E_LINE, "  axis experts = pad(num_experts -> round_up(num_experts, 8))\n", 2)),
    m("i4_rt_experts_pad", "i4", "experts-padding", "int4pack: every experts axis padded to E + 3",
      (E_LINE, "  axis experts = pad(num_experts -> num_experts + 3)\n", 2)),
    m("v_rt_experts_pad_w2_only", "v", "experts-padding", "only w2's experts padded (round_up(E, 8))",
      (W2_HEAD, W2_HEAD.replace("= num_experts\n", "= pad(num_experts -> round_up(num_experts, 8))\n"))),
    m("v_rt_experts_pad_logical_minus1", "v", "experts-padding", "every experts axis pad(E - 1 -> E)",
      (E_LINE, "  axis experts = pad(num_experts - 1 -> num_experts)\n", 4)),
    m("g_rt_experts_pad_max", "g", "experts-padding", "every experts axis pad(E -> max(E, 8))",
      (E_LINE, "  axis experts = pad(num_experts -> max(num_experts, 8))\n", 2)),
    m("v_rt_experts_pad_bias_unlike", "v", "experts-padding", "weights plain; w13_bias experts E + 3, w2_bias E + 5",
      (B13_HEAD, B13_HEAD.replace("= num_experts\n", "= pad(num_experts -> num_experts + 3)\n")),
      (B2_HEAD, B2_HEAD.replace("= num_experts\n", "= pad(num_experts -> num_experts + 5)\n"))),
    # bias tie spellings
    bias_n("v_rt_bias_not_guard", f"  axis n = {HV} when not (activation == swigluoai)\n  axis n = {IL}\n",
           "halves `when not (activation == swigluoai)`, interleave default"),
    bias_n("v_rt_bias_guard_partial", f"  axis n = {IL} when activation == swigluoai and dtype == float32\n  axis n = {HV}\n",
           "interleave only for float32 swigluoai (bf16 swigluoai bias halves): wrong"),
    bias_n("v_rt_bias_roles_swapped", f"  axis n = {IL.replace('gate | up', 'up | gate')} when activation == swigluoai\n  axis n = {HV}\n",
           "interleave(up | gate) for swigluoai: wrong"),
    bias_n("v_rt_bias_pad_output_alignment", f"  axis n = {IL.replace('-> intermediate_size_per_partition_padded', '-> round_up(intermediate_size_per_partition, output_alignment)')} "
           f"when activation == swigluoai\n  axis n = {HV.replace('-> intermediate_size_per_partition_padded', '-> round_up(intermediate_size_per_partition, output_alignment)')}\n",
           "padded size round_up(I_pp, output_alignment) (equal to the lcm on every isa)"),
    bias_n("v_rt_bias_pad_32", f"  axis n = {IL.replace('-> intermediate_size_per_partition_padded', '-> round_up(intermediate_size_per_partition, 32)')} "
           f"when activation == swigluoai\n  axis n = {HV.replace('-> intermediate_size_per_partition_padded', '-> round_up(intermediate_size_per_partition, 32)')}\n",
           "padded size round_up(I_pp, 32): wrong for vsx (16)"),
    bias_n("v_rt_bias_cdiv", (f"  axis n = {IL} when activation == swigluoai\n  axis n = {HV}\n").replace(
        "(gate | up, intermediate_size_per_partition ->", "(gate | up, cdiv(intermediate_size, tp_size) ->"),
           "logical size spelled cdiv(intermediate_size, tp_size) (equal under the require)"),
    bias_n("v_rt_bias_roundup_spelled", (f"  axis n = {IL} when activation == swigluoai\n  axis n = {HV}\n").replace(
        "-> intermediate_size_per_partition_padded)", "-> cdiv(intermediate_size_per_partition, intermediate_alignment) * intermediate_alignment)"),
           "padded size spelled cdiv(I_pp, align) * align"),
    bias_n("v_rt_bias_hidden_guard", f"  axis n = {IL} when activation == swigluoai and hidden_size % 128 == 0\n  axis n = {HV}\n",
           "interleave only when hidden_size % 128 == 0 (an integer-range parameter in the guard): wrong at H=64"),
    bias_n("v_rt_bias_hidden_guard_true", f"  axis n = {IL} when activation == swigluoai and hidden_size > 0\n  axis n = {HV}\n",
           "interleave when swigluoai and hidden_size > 0 (always)"),
    bias_n("v_rt_bias_intermediate_guard", f"  axis n = {IL} when activation == swigluoai and intermediate_size % 192 == 0\n  axis n = {HV}\n",
           "interleave only when intermediate_size % 192 == 0: wrong at I=96"),
    bias_n("v_rt_bias_alpha_guard", f"  axis n = {IL} when swiglu_alpha_milli == 1702\n  axis n = {HV}\n",
           "interleave when swiglu_alpha_milli == 1702 (silu with alpha 1702 admitted): wrong"),
    bias_n("v_rt_bias_guard_or_dup", f"  axis n = {IL} when activation == swigluoai or activation == swigluoai\n  axis n = {HV}\n",
           "guard written `a or a`"),
    bias_n("z_rt_bias_spelled", f"  axis n = {IL} when activation == swigluoai\n  axis n = {HV}\n", "zentorch bias spelled out", base="z"),
    bias_n("v_rt_bias_guard_dtype_only", f"  axis n = {IL} when dtype == float32\n  axis n = {HV}\n",
           "interleave when dtype == float32 (wrong guard, similar shape)"),
]
MUTANTS += RT_MUTANTS

# issue 39 item 2: the glue hands a foreign pair to local expert 0 at weight 0 (layoutc's own EP
# path before issue 39): that expert still runs on the token, 0 x an overflowed fp16 activation is NaN
EP_MUTANTS = [
    Mutant("v_ep_foreign_masked", "v", "ep-foreign-computed", "`foreign masked` on the EP declaration",
           (("experts num_experts over ep_size placement linear, round_robin\n",
             "experts num_experts over ep_size placement linear, round_robin foreign masked\n", 1),), ep=True),
    Mutant("g_ep_foreign_masked", "g", "ep-foreign-computed", "`foreign masked` on the EP declaration",
           (("placement linear redundant num_redundant_experts\n",
             "placement linear redundant num_redundant_experts foreign masked\n", 1),), ep=True),
]
MUTANTS += EP_MUTANTS

# Issue 39 items 1 and 3 (the language's own scope): mutants of shipped contracts whose kernels do
# not run here (Marlin, FlashInfer: GPU). Each is pinned in tests/compiler/test_language_mutants.py, against
# torch's own float8 decode of the bytes the generated module writes, or as a checker refusal.
LANG_BASE = {
    "mfp8": "marlin_moe_fp8",
    "nvfp4": "flashinfer_nvfp4_moe",
    "wna16": "marlin_moe_wna16",
}
NVFP4_W13_SCALE = "  storage float8_e4m3fn\n  decode = e4m3fn(code)\n  fill 0\n}\n\n# Per-expert global scale (w13"
LANG_MUTANTS: list[Mutant] = [
    m("mfp8_rt_pad_code1", "mfp8", "fill-byte", "`code 1..255` on both float8 weights: `fill decoded 0` resolves "
      "to code 128 (byte 0x80, -0.0), not 0", ("  code 0..255\n", "  code 1..255\n", 2)),
    m("nvfp4_rt_scale_fill128", "nvfp4", "fill-byte", "w13's float8 block-scale pad `fill 128` (byte 0x80, -0.0)",
      (NVFP4_W13_SCALE, NVFP4_W13_SCALE.replace("fill 0", "fill 128"))),
    m("wna16_rt_no_act_order_require", "wna16", "unstated-param",
      "`require not act_order or group_size == -1` dropped: act_order is read by nothing the contract states",
      ("require not act_order or group_size == -1 : \"GPTQ group activation ordering (desc_act=True) is no longer "
       "supported (vLLM 0.32); with group_size -1 act-order is a no-op\"\n", "")),
]

# Red team of issue 39, item 4: a trusted view changed together with w13's layout (both proved alike).
TRUSTED_VIEW_MUTANTS = [
    m("fi4_rt_gateup_both", "fi4", "trusted-view",
      "w13 and its view [gate | up] (FlashInfer reads [up | gate] after vLLM's reorder_w1w3_to_w3w1)",
      ("axis n = halves(up | gate, ", "axis n = halves(gate | up, "),
      ("view w13_weight.n halves(up | gate)", "view w13_weight.n halves(gate | up)")),
    m("fmx_rt_halves_both", "fmx", "trusted-view",
      "w13 and its view halves(up | gate) (the TRT-LLM kernel reads interleaved pairs)",
      ("axis n = interleave(up | gate, ", "axis n = halves(up | gate, "),
      ("view w13_weight.n interleave(up | gate)", "view w13_weight.n halves(up | gate)")),
    m("cmx_rt_halves_both", "cmx", "trusted-view",
      "w13 and its view halves(gate | up) (gpt-oss rows are interleaved pairs, handed over as loaded)",
      ("axis n = interleave(gate | up, ", "axis n = halves(gate | up, "),
      ("view w13_weight.n interleave(gate | up)", "view w13_weight.n halves(gate | up)")),
]
MUTANTS += TRUSTED_VIEW_MUTANTS


def without_ep(text: str) -> str:
    """`text` with its EP declaration removed: the `# Expert parallelism` comment block, the
    EP parameters, the `experts ... over` line, its requires and `let local_num_experts`, and
    every experts axis back to `num_experts` (the contract at ep_size 1)."""
    if "\nexperts num_experts over " not in text:
        return text
    start = text.index("# Expert parallelism")
    end = text.index("\n", text.index("let local_num_experts = ", start)) + 1
    return text[:start] + text[end:].replace("axis experts = local_num_experts", "axis experts = num_experts")


def render(mut: Mutant) -> str:
    stem = {**BASE, **GPU_BASE, **LANG_BASE}[mut.base]
    base = (ROOT / "contracts" / f"{stem}.moe").read_text(encoding="utf-8")
    base = base if mut.ep else without_ep(base)
    text = base
    for old, new, count in mut.subs:
        if count == 0:
            text, n = re.subn(old, new, text)
            assert n >= 1, (mut.name, old)
        elif count == -1:
            text, n = re.subn(old, new, text, flags=re.S)
            assert n == 1, (mut.name, old, n)
        else:
            assert text.count(old) == count, (mut.name, old, text.count(old))
            text = text.replace(old, new)
    assert text != base, mut.name
    text = text.replace(f"contract {stem}\n", f"contract {mut.name}\n", 1)
    header = (f"# mutant {mut.name} of contracts/{stem}.moe (written by tests/support/regen_mutants.py)\n"
              f"# fault class: {mut.fault}\n# edit: {mut.edit}\n")
    return header + text


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    every = MUTANTS + LANG_MUTANTS
    names = {mut.name for mut in every}
    assert len(names) == len(every)
    for stale in OUT.glob("*.moe"):
        if stale.stem not in names:
            stale.unlink()
    for mut in every:
        (OUT / f"{mut.name}.moe").write_text(render(mut), encoding="utf-8")
    print(f"wrote {len(every)} mutants to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
