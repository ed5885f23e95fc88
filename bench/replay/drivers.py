"""One driver per engine function: run the engine's own code on CPU tensors at one configuration
and return what differs from the contract (empty list: byte-equal / same counts).

Each driver takes (engine function, engine module, generated module, config dict) and imports
neither layoutc nor the engine itself, so `layoutc kit` can take a driver as it is. The engine
function comes from the release under test; the expected bytes come from the generated module's
own `plan()` and `pad_*` / `kernel_args` functions.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from .compare import diff_rows

Driver = Callable[[Callable[..., Any], ModuleType, ModuleType, dict[str, Any]], tuple[list[str], list[str]]]


def _bytes(shape: tuple[int, ...], gen: torch.Generator, high: int = 256) -> torch.Tensor:
    """Random nonzero bytes (1..high-1), so a zero pad is never mistaken for data."""
    return torch.randint(1, high, shape, dtype=torch.uint8, generator=gen)


def fi_nvfp4_align(
    fn: Callable[..., Any], _mod: ModuleType, gen_mod: ModuleType, cfg: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """vLLM `align_fp4_moe_weights_for_fi(w13, w13_scale, w2, w2_scale, is_act_and_mul, min_alignment)`.

    Inputs as vLLM's NVFP4 prepare path hands them over: w13 [E, 2 I_pp, H/2] uint8 (gated),
    w13_scale [E, 2 I_pp, H/16] float8_e4m3fn, w2 [E, H, I_pp/2] uint8, w2_scale [E, H, I_pp/16];
    min_alignment 64 (the gated value prepare_nvfp4_moe_layer_for_fi_or_cutlass passes in 0.28
    and 0.29). Expected: contract flashinfer_nvfp4_moe's pad_* (H is chosen a multiple of 256,
    so the contract's hidden pad is empty). Rows are named along the intermediate dim.
    """
    p = gen_mod.plan(activation="silu", dtype="bfloat16", **cfg)
    e, h, i = p.num_experts, p.hidden_size, p.intermediate_size_per_partition
    g = torch.Generator().manual_seed(0)
    w13, w2 = _bytes((e, 2 * i, h // 2), g), _bytes((e, h, i // 2), g)
    w13s = _bytes((e, 2 * i, h // 16), g, 0x7F).view(torch.float8_e4m3fn)
    w2s = _bytes((e, h, i // 16), g, 0x7F).view(torch.float8_e4m3fn)
    ew13, ew13s, ew2, ew2s, inter = fn(w13.clone(), w13s.clone(), w2.clone(), w2s.clone(), True, 64)
    info = [f"I_pp {i} -> engine {inter}, contract {p.intermediate_size_per_partition_padded}"]
    bad = diff_rows("w13_weight", ew13, gen_mod.pad_w13_weight(w13, p), 1)
    bad += diff_rows("w13_weight_scale", ew13s, gen_mod.pad_w13_weight_scale(w13s, p), 1)
    bad += diff_rows("w2_weight", ew2, gen_mod.pad_w2_weight(w2, p), 2)
    bad += diff_rows("w2_weight_scale", ew2s, gen_mod.pad_w2_weight_scale(w2s, p), 2)
    return bad, info


def fi_fp8_align(
    fn: Callable[..., Any], _mod: ModuleType, gen_mod: ModuleType, cfg: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """vLLM `align_moe_weights_for_fi(w13, w2, is_act_and_mul, min_alignment)` (FP8 / bf16 path).

    Inputs as prepare_fp8_moe_layer_for_fi hands them over before its [w3 | w1] swap:
    w13 [E, 2 I_pp, H] float8_e4m3fn ([gate | up]), w2 [E, H, I_pp]; min_alignment 16 (gated).
    Expected: contract flashinfer_fp8_moe's pad_*. Rows are named along the intermediate dim.
    """
    p = gen_mod.plan(activation="silu", **cfg)
    e, h, i = p.num_experts, p.hidden_size, p.intermediate_size_per_partition
    g = torch.Generator().manual_seed(0)
    w13 = _bytes((e, 2 * i, h), g, 0x7F).view(torch.float8_e4m3fn)
    w2 = _bytes((e, h, i), g, 0x7F).view(torch.float8_e4m3fn)
    ew13, ew2, inter = fn(w13.clone(), w2.clone(), True, 16)
    info = [f"I_pp {i} -> engine {inter}, contract {p.intermediate_size_per_partition_padded}"]
    bad = diff_rows("w13_weight", ew13, gen_mod.pad_w13_weight(w13, p), 1)
    bad += diff_rows("w2_weight", ew2, gen_mod.pad_w2_weight(w2, p), 2)
    return bad, info


class _Captured(Exception):
    """Raised by the stand-in AITER kernel to stop at the device call with its keyword arguments."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        super().__init__("aiter.fused_moe reached")
        self.kwargs = kwargs


def _stub_aiter_gate_mode() -> bool:
    """Install a stand-in `aiter.ops.flydsl.moe_common.GateMode` when the aiter package is absent.

    vLLM 0.32's rocm_aiter_fused_experts imports it (a ROCm-only package) after computing the
    pads and before calling the kernel, only to pick the gate mode string it passes along; the
    pads do not depend on it. Returns True when the stand-in was installed.
    """
    import enum
    import importlib.util
    import sys

    if "aiter" in sys.modules:
        return getattr(sys.modules["aiter"], "__spec__", None) is None
    if importlib.util.find_spec("aiter") is not None:
        return False
    names = ("aiter", "aiter.ops", "aiter.ops.flydsl", "aiter.ops.flydsl.moe_common")
    for name in names:
        module = ModuleType(name)
        module.__path__ = []  # type: ignore[attr-defined]
        sys.modules.setdefault(name, module)
    sys.modules["aiter.ops.flydsl.moe_common"].GateMode = enum.Enum(  # type: ignore[attr-defined]
        "GateMode", {"INTERLEAVE": "interleave", "SEPARATED": "separated"}
    )
    return True


def aiter_pad_counts(
    fn: Callable[..., Any], mod: ModuleType, gen_mod: ModuleType, cfg: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """vLLM `rocm_aiter_fused_experts`: the hidden_pad / intermediate_pad it hands to AITER.

    The function's own arithmetic runs; the one device-only operation, `rocm_aiter_ops.fused_moe`,
    is replaced by a stand-in that raises with the keyword arguments it received (nothing else of
    the module is touched); where the aiter package is absent, its GateMode enum stands in
    (`_stub_aiter_gate_mode`). moe_config and quant_config are the fields the function reads (MXFP4
    W4A16, as the AITER_MXFP4_BF16 backend builds them). Expected: contract aiter_fused_moe's
    `kernel_args(plan)`. A wrong intermediate_pad is reported as the rows of each w13 half (and
    of w2's k) that the kernel would treat as pad, against the contract's.
    """
    p = gen_mod.plan(**cfg)
    stubbed = _stub_aiter_gate_mode()
    moe_config = SimpleNamespace(
        hidden_dim_unpadded=p.hidden_size,
        tp_size=p.tp_size,
        intermediate_pad=None,
        use_mxfp4_w4a4_dsv4=False,
        swiglu_limit=None,
        activation_situ_beta=None,
        activation_situ_linear_beta=None,
        use_mori_kernels=False,
        intermediate_size_per_partition=p.intermediate_size_per_partition_padded,
        intermediate_size_per_partition_unpadded=p.intermediate_size_per_partition,
    )
    quant_config = SimpleNamespace(
        per_act_token_quant=False,
        use_fp8_w8a8=False,
        use_mxfp4_w4a4=False,
        use_mxfp4_w4a16=True,
        block_shape=None,
        per_out_ch_quant=False,
        w1_scale=None,
        w2_scale=None,
        a1_scale=None,
        a2_scale=None,
        w1_bias=None,
        w2_bias=None,
    )

    def stand_in(*_args: Any, **kwargs: Any) -> None:
        raise _Captured(kwargs)

    ops = mod.rocm_aiter_ops
    saved = ops.__dict__.get("fused_moe")
    ops.fused_moe = staticmethod(stand_in)
    try:
        hidden = torch.zeros(4, p.hidden_size_padded, dtype=torch.bfloat16)
        act = getattr(mod.MoEActivation, str(cfg["activation"]).upper())
        fn(
            hidden,
            torch.zeros(1),
            torch.zeros(1),
            torch.ones(4, 1),
            torch.zeros(4, 1, dtype=torch.int32),
            moe_config,
            activation=act,
            quant_config=quant_config,
        )
    except _Captured as c:
        got = c.kwargs
    else:
        return ["the engine function returned without reaching rocm_aiter_ops.fused_moe"], []
    finally:
        if saved is not None:
            ops.fused_moe = saved
    want = gen_mod.kernel_args(p)
    ipad, shard = p.intermediate_size_per_partition_padded, p.intermediate_size_per_partition
    info = [
        f"I_pp {shard} padded {ipad}: engine hidden_pad {got.get('hidden_pad')} intermediate_pad "
        f"{got.get('intermediate_pad')}, contract {want['hidden_pad']} / {want['intermediate_pad']}"
        + ("; aiter GateMode stood in (package absent)" if stubbed else "")
    ]
    bad = []
    for key in ("hidden_pad", "intermediate_pad"):
        if got.get(key) != want[key]:
            bad.append(f"{key}: engine {got.get(key)}, contract {want[key]}")
    if got.get("intermediate_pad") != want["intermediate_pad"] and not p.flydsl:
        e_pad = int(got["intermediate_pad"])
        live = f"{ipad - e_pad}..{shard - 1}" if ipad - e_pad < shard else "none"
        bad.append(
            f"w13 rows {ipad - e_pad}..{ipad - 1} of each half and w2 k {ipad - e_pad}..{ipad - 1} "
            f"declared pad (contract: {ipad - want['intermediate_pad']}..{ipad - 1}); live rows "
            f"declared pad: {live}"
        )
    return bad, info


def sglang_cpu_config(
    _fn: Callable[..., Any], _mod: ModuleType, gen_mod: ModuleType, cfg: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """SGLang `adjust_config_with_unaligned_cpu_tp` on a stub MXFP4 model config: the padded I.

    Runs through tests/conformance/sglang_oracle.py `padded_intermediate` (SGLang's own function,
    its own Mxfp4Config parser; stubs only for sgl_kernel and torchvision). Expected: contract
    sglang_cpu_mxfp4_moe's `intermediate_size_padded`. A difference is named as each rank's rows.
    """
    from tests.conformance.sglang_oracle import padded_intermediate

    p = gen_mod.plan(swiglu_alpha_milli=1702, swiglu_limit_milli=7000, **cfg)
    got = padded_intermediate(p.intermediate_size, p.tp_size, "mxfp4", 0)
    if "error" in got:
        return [f"engine refused: {got['error']}"], []
    eng, want = int(got["padded"]), p.intermediate_size_padded
    info = [
        f"I {p.intermediate_size} at tp {p.tp_size}: engine pads to {eng} ({eng // p.tp_size} rows a rank), "
        f"contract {want} ({p.intermediate_size_per_partition} rows a rank)"
    ]
    if eng == want:
        return [], info
    l_eng, l_want = eng // p.tp_size, p.intermediate_size_per_partition
    return [
        f"intermediate_size: engine {eng}, contract {want}; rank 1 holds rows {l_eng}..{2 * l_eng - 1} "
        f"(contract {l_want}..{2 * l_want - 1}); w2 packed k {l_eng // 2} bytes a rank (contract "
        f"{l_want // 2})"
    ], info


DRIVERS: dict[str, Driver] = {
    "fi_nvfp4_align": fi_nvfp4_align,
    "aiter_pad_counts": aiter_pad_counts,
    "fi_fp8_align": fi_fp8_align,
    "sglang_cpu_config": sglang_cpu_config,
}
