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

    Runs through tests/support/conformance/sglang_oracle.py `padded_intermediate` (SGLang's own function,
    its own Mxfp4Config parser; stubs only for sgl_kernel and torchvision). Expected: contract
    sglang_cpu_mxfp4_moe's `intermediate_size_padded`. A difference is named as each rank's rows.
    """
    from tests.support.conformance.sglang_oracle import padded_intermediate

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


class _TorchView:
    """`torch` as the engine module sees it, with the two device queries answered for one ISA.

    vLLM's CPUFusedMOE asks `torch.ops._C` whether the prepack op exists and
    `torch.cpu._is_amx_tile_supported()`; the CUDA wheel's Python has no `_C`, and this machine's
    answer is not the configuration's. Everything else is the real torch.
    """

    def __init__(self, amx: bool) -> None:
        self.ops = SimpleNamespace(_C=SimpleNamespace(prepack_moe_weight=object()))
        self.cpu = SimpleNamespace(_is_amx_tile_supported=lambda: amx)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def cpu_fused_moe_init(
    fn: Callable[..., Any], mod: ModuleType, gen_mod: ModuleType, cfg: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """vLLM `CPUFusedMOE(layer)` (cpu_fused_moe.py, 0.24-0.27): the layout its grouped GEMM gets.

    The release's own `__init__` runs on a layer holding w13 [E, 2 I_pp, H] ([gate | up]) and
    w2 [E, H, I_pp] bfloat16 with random nonzero bytes: its pad step where the release has one,
    then `check_grouped_gemm`. Stand-ins, device-only: `torch.ops._C.prepack_moe_weight` exists,
    `torch.cpu._is_amx_tile_supported()` answers isa == amx, the CPU architecture is x86 (vec, amx)
    or ARM (neon); `init_moe_grouped_gemm` / `init_moe_torch` (the prepack, a `_C` op) only record
    which path was taken. Expected: contract vllm_cpu_grouped_gemm (policy error: an admitted
    configuration runs the grouped GEMM on `pad_w13` / `pad_w2`'s layout, never the per-expert loop).
    """
    p = gen_mod.plan(dtype="bfloat16", **cfg)
    e, h, i = p.num_experts, p.hidden_size, p.intermediate_size_per_partition
    g = torch.Generator().manual_seed(0)
    w13 = _bytes((e, 2 * i, h * 2), g, 0x7F).view(torch.bfloat16)
    w2 = _bytes((e, h, i * 2), g, 0x7F).view(torch.bfloat16)
    layer = torch.nn.Module()
    layer.w13_weight = torch.nn.Parameter(w13.clone(), requires_grad=False)
    layer.w2_weight = torch.nn.Parameter(w2.clone(), requires_grad=False)
    layer.activation = getattr(mod.MoEActivation, str(cfg["activation"]).upper())
    arch = mod.CpuArchEnum.ARM if p.isa == "neon" else mod.CpuArchEnum.X86
    taken: list[str] = []
    saved = {k: mod.__dict__[k] for k in ("torch", "current_platform")}
    cls_saved = {k: fn.__dict__[k] for k in ("init_moe_grouped_gemm", "init_moe_torch")}
    mod.torch = _TorchView(amx=p.isa == "amx")
    mod.current_platform = SimpleNamespace(get_cpu_architecture=lambda: arch)
    fn.init_moe_grouped_gemm = lambda self, layer: taken.append("grouped_gemm")
    fn.init_moe_torch = lambda self, layer: taken.append("torch")
    try:
        engine = fn(layer)
    except RuntimeError as exc:
        return [f"engine refused the layer: {exc}"], []
    finally:
        mod.__dict__.update(saved)
        for k, v in cls_saved.items():
            setattr(fn, k, v)
    ew13, ew2 = layer.w13_weight.data, layer.w2_weight.data
    ipad = p.intermediate_size_per_partition_padded
    info = [
        f"I_pp {i}: engine path {taken[0] if taken else '?'} isa {getattr(engine, 'isa', '?')}, "
        f"engine I_pp {ew2.shape[2]}, contract grouped GEMM at {ipad}"
    ]
    if taken != ["grouped_gemm"]:
        return [
            f"engine took the per-expert torch loop (isa {getattr(engine, 'isa', '?')}); contract runs the "
            f"grouped GEMM with I_pp {i} padded to {ipad} (rows {i}..{ipad - 1} of each w13 half, w2 k "
            f"{i}..{ipad - 1})"
            if ipad > i
            else f"engine took the per-expert torch loop; contract runs the grouped GEMM at I_pp {i}"
        ], info
    bad = []
    if ew2.shape[2] % p.intermediate_alignment:
        bad.append(
            f"grouped GEMM admitted at I_pp {ew2.shape[2]}, not a multiple of the {p.intermediate_alignment}"
            f"-wide tile: w13 rows {ew2.shape[2] - ew2.shape[2] % p.intermediate_alignment}..{ew2.shape[2] - 1} "
            f"of each half read as a partial tile (contract pads rows {i}..{ipad - 1})"
        )
    bad += diff_rows("w13_weight", ew13, gen_mod.pad_w13(w13, p), 1)
    bad += diff_rows("w2_weight", ew2, gen_mod.pad_w2(w2, p), 2)
    return bad, info


def fi_nvfp4_caller_alignment(
    fn: Callable[..., Any], mod: ModuleType, gen_mod: ModuleType, cfg: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """vLLM `prepare_nvfp4_moe_layer_for_fi_or_cutlass` (FLASHINFER_TRTLLM): the alignment it asks for.

    The caller's own code runs (w1/w3 reorder, global scales, hidden-dim alignment) up to its call
    of `align_fp4_moe_weights_for_fi`, which is wrapped: the release's own function runs, then the
    wrapper stops with its min_alignment and padded intermediate (the next step,
    `prepare_static_weights_for_trtllm_fp4_moe`, is FlashInfer's shuffle). Inputs as in
    `fi_nvfp4_align`, gated silu. Expected: contract flashinfer_nvfp4_moe's
    `intermediate_size_per_partition_padded`. Only the padded count is compared: where gate and up
    sit inside it is `fi_nvfp4_align`'s row (the end-pad, fixed later).
    """
    import importlib

    p = gen_mod.plan(activation="silu", dtype="bfloat16", **cfg)
    e, h, i = p.num_experts, p.hidden_size, p.intermediate_size_per_partition
    g = torch.Generator().manual_seed(0)
    w13, w2 = _bytes((e, 2 * i, h // 2), g), _bytes((e, h, i // 2), g)
    w13s = _bytes((e, 2 * i, h // 16), g, 0x7F).view(torch.float8_e4m3fn)
    w2s = _bytes((e, h, i // 16), g, 0x7F).view(torch.float8_e4m3fn)
    pkg = mod.__name__.split(".model_executor.")[0]
    backend = importlib.import_module(f"{pkg}.model_executor.layers.fused_moe.oracle.nvfp4").NvFp4MoeBackend
    layer = SimpleNamespace(
        activation=SimpleNamespace(is_gated=True),
        moe_config=SimpleNamespace(
            hidden_dim=h,
            hidden_dim_unpadded=None,
            intermediate_size_per_partition=i,
            moe_parallel_config=SimpleNamespace(enable_eplb=False),  # read from 0.32 on
        ),
    )
    real = mod.align_fp4_moe_weights_for_fi

    def wrapped(*args: Any) -> Any:
        raise _Captured({"min_alignment": args[5], "result": real(*args)})

    mod.align_fp4_moe_weights_for_fi = wrapped
    ones = torch.ones(e)
    try:
        fn(backend.FLASHINFER_TRTLLM, layer, w13, w13s, ones, ones, w2, w2s, ones, ones, True)
    except _Captured as c:
        got = c.kwargs
    else:
        return ["the caller returned without calling align_fp4_moe_weights_for_fi"], []
    finally:
        mod.align_fp4_moe_weights_for_fi = real
    eng, want = int(got["result"][4]), p.intermediate_size_per_partition_padded
    info = [
        f"I_pp {i}: caller asks min_alignment {got['min_alignment']}, pads to {eng} (gate/up rows {2 * eng}, "
        f"{2 * eng} % 128 = {2 * eng % 128}); contract {want} (gate/up rows {2 * want})"
    ]
    if eng == want:
        return [], info
    return [
        f"intermediate: engine {eng}, contract {want}: contract pad rows {eng}..{want - 1} of each w13 half "
        f"missing; the fused gate/up dim {2 * eng} is not a multiple of FlashInfer's 128-row shuffle tile"
    ], info


class _LayerStandIn:
    """The engine's MoE layer as its weight loader sees it: the attributes a configuration sets,
    and every other attribute (a staticmethod such as `_narrow_expert_data_for_padding`, a method)
    taken from the engine's own class, bound to this object. No `__init__` of the engine runs."""

    def __init__(self, cls: type, **attrs: Any) -> None:
        self.__dict__.update(attrs, _cls=cls)

    def __getattr__(self, name: str) -> Any:
        import inspect

        try:
            found = inspect.getattr_static(self.__dict__["_cls"], name)
        except AttributeError:
            raise AttributeError(f"the loader read {name!r}, which the stand-in layer does not set") from None
        return found.__get__(self, type(self)) if hasattr(found, "__get__") else found


def _call(fn: Callable[..., Any], layer: object, **kwargs: Any) -> None:
    """`fn(layer, **kwargs)` with only the keywords `fn` takes (releases differ: `tp_rank` was an
    argument in vLLM and SGLang 0.5.16, an attribute in SGLang 0.5.17 on)."""
    import inspect

    names = inspect.signature(fn).parameters
    fn(layer, **{k: v for k, v in kwargs.items() if k in names})


def moe_loader_stride(
    fn: Callable[..., Any], mod: ModuleType, gen_mod: ModuleType, cfg: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """The MoE layer's own weight loader (`_load_w13` for gate and up, `_load_w2` for down) on
    every rank, from the full (unsharded) checkpoint into the padded per-rank parameter.

    vLLM `FusedMoE._load_w13(expert_data, shard_dim, shard_id, loaded_weight, tp_rank)` (later
    `RoutedExperts`) and SGLang `FusedMoE._load_w13` (rank from `moe_tp_rank` since 0.5.17) are
    called unbound on a stand-in layer (`_LayerStandIn`: gated, TP degree and rank set; SGLang's
    non-padded-loading path, no presharded weights, no triton-kernels transpose), one expert at a
    time, as the layer's `weight_loader` calls them (`expert_data = param[expert]`, shard dim 0 for
    w1/w3 and 1 for w2). Checkpoint: random nonzero bf16 bytes, gate / up [I, H], down [H, I] an
    expert. The parameter starts as the contract's pad (`shard_*` of an all-0xFF checkpoint: pad
    rows hold the contract's fill, every live row 0xFF), so a row the engine does not load is named.
    Expected: contract `shard_w13` / `shard_w2` (each rank's slice at the logical stride, I / tp,
    each gate / up half padded at its end). A rank where the engine raises is named with its error.
    Rows are named along the intermediate dim, per rank.
    """
    import inspect

    p = gen_mod.plan(**cfg)
    e, h, full_i, tp = p.num_experts, p.hidden_size, p.intermediate_size, p.tp_size
    cls = getattr(mod, fn.__qualname__.split(".")[-2])
    load_w2 = inspect.getattr_static(cls, "_load_w2")
    g = torch.Generator().manual_seed(0)
    w13 = _bytes((e, 2 * full_i, h * 2), g, 0x7F).view(torch.bfloat16)  # [gate | up] at full length
    w2 = _bytes((e, h, full_i * 2), g, 0x7F).view(torch.bfloat16)
    ones13 = torch.full((e, 2 * full_i, h * 2), 0xFF, dtype=torch.uint8).view(torch.bfloat16)
    ones2 = torch.full((e, h, full_i * 2), 0xFF, dtype=torch.uint8).view(torch.bfloat16)
    ipad = p.intermediate_size_per_partition_padded
    info = [f"I {full_i} at tp {tp}: I_pp {p.intermediate_size_per_partition} padded {ipad}"]
    bad: list[str] = []
    for rank in range(tp):
        layer = _LayerStandIn(
            cls,
            moe_config=SimpleNamespace(is_act_and_mul=True, moe_parallel_config=SimpleNamespace(tp_size=tp)),
            moe_runner_config=SimpleNamespace(is_gated=True),
            quant_method=None,
            weight_load_method=None,
            use_padded_loading=False,
            use_presharded_weights=False,
            use_triton_kernels=False,
            moe_tp_rank=rank,
            moe_tp_size=tp,
            quant_config=None,
        )
        got13, got2 = gen_mod.shard_w13(ones13, rank, p).clone(), gen_mod.shard_w2(ones2, rank, p).clone()
        try:
            for x in range(e):
                for shard_id, half in (("w1", 0), ("w3", 1)):
                    src = w13[x, half * full_i : (half + 1) * full_i]
                    _call(fn, layer, expert_data=got13[x], shard_dim=0, shard_id=shard_id, loaded_weight=src,
                          tp_rank=rank)  # fmt: skip
                _call(load_w2, layer, expert_data=got2[x], shard_dim=1, shard_id="w2", loaded_weight=w2[x],
                      tp_rank=rank)  # fmt: skip
        except Exception as exc:  # the engine refusing a rank is the finding, named with its error
            bad.append(f"rank {rank}: engine raised {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            continue
        bad += diff_rows(f"rank {rank} w13", got13, gen_mod.shard_w13(w13, rank, p), 1)
        bad += diff_rows(f"rank {rank} w2", got2, gen_mod.shard_w2(w2, rank, p), 2)
    return bad, info


def aiter_unquantized_roundup(
    fn: Callable[..., Any], mod: ModuleType, gen_mod: ModuleType, cfg: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """vLLM `unquantized_round_up_hidden_size_and_intermediate_size(UnquantizedMoeBackend.AITER, H, I_pp)`:
    the sizes the unquantized AITER layer allocates (`maybe_roundup_sizes`), then the pad's bytes.

    Expected: contract aiter_unquantized_moe's `intermediate_size_per_partition_padded` (H never
    padded). Where the release pads, its own `_zero_intermediate_padding` runs on the padded
    parameters as vLLM allocates them (`torch.empty`: poisoned here with 0xFF bytes, live rows
    random nonzero bf16 bytes, as the loader leaves them) and the result must be byte-equal to the
    contract's `pad_w13` / `pad_w2`. A difference is named as the kernel tile the unpadded size
    misses (CK 2-stage: 64 wide up to 192, 128 above).
    """
    p = gen_mod.plan(dtype="bfloat16", **cfg)
    e, h, i = p.num_experts, p.hidden_size, p.intermediate_size_per_partition
    want = p.intermediate_size_per_partition_padded
    got_h, got_i = fn(mod.UnquantizedMoeBackend.AITER, h, i)
    info = [f"I_pp {i}: engine allocates H {got_h} I_pp {got_i}, contract H {h} I_pp {want}"]
    if (got_h, got_i) != (h, want):
        tile = 64 if i <= 192 else 128
        return [
            f"intermediate_size_per_partition: engine {got_i}, contract {want}: I_pp {i} is not a multiple of "
            f"the CK 2-stage {tile}-wide tile; contract pad rows {i}..{want - 1} of each w13 half and w2 k "
            f"{i}..{want - 1} missing" + (f"; hidden: engine {got_h}, contract {h}" if got_h != h else "")
        ], info
    zero = getattr(mod, "_zero_intermediate_padding", None)
    if zero is None or want == i:
        return [], info
    g = torch.Generator().manual_seed(0)
    w13 = _bytes((e, 2 * i, h * 2), g, 0x7F).view(torch.bfloat16)
    w2 = _bytes((e, h, i * 2), g, 0x7F).view(torch.bfloat16)
    ew13 = torch.full((e, 2 * want, h * 2), 0xFF, dtype=torch.uint8).view(torch.bfloat16)
    ew2 = torch.full((e, h, want * 2), 0xFF, dtype=torch.uint8).view(torch.bfloat16)
    ew13[:, :i], ew13[:, want : want + i], ew2[:, :, :i] = w13[:, :i], w13[:, i:], w2
    moe = SimpleNamespace(
        intermediate_size_per_partition=want, intermediate_size_per_partition_unpadded=i, is_act_and_mul=True
    )
    zero(moe, ew13, ew2)
    bad = diff_rows("w13_weight", ew13, gen_mod.pad_w13(w13, p), 1)
    bad += diff_rows("w2_weight", ew2, gen_mod.pad_w2(w2, p), 2)
    return bad, info


def _kit_driver(name: str) -> ModuleType:
    """A kit driver (layoutc/tools/kit/drivers/NAME.py) with its SHARED helpers in its namespace, as
    `layoutc kit` composes them into one module: one copy of the engine path for the kit and the replay."""
    import importlib

    driver = importlib.import_module(f"layoutc.tools.kit.drivers.{name}")
    for shared in getattr(driver, "SHARED", ()):
        helper = importlib.import_module(f"layoutc.tools.kit.drivers.{shared}")
        driver.__dict__.update({k: v for k, v in vars(helper).items() if not k.startswith("__")})
    return driver


def marlin_block_fp8_tp_pad(
    fn: Callable[..., Any], mod: ModuleType, gen_mod: ModuleType, cfg: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """vLLM `Fp8MoEMethod` (block FP8 [128, 128], --moe-backend marlin), every rank: the kit driver
    `marlin_block_fp8`'s path (the method's __init__, which pads the TP shard to whole 128-blocks from
    0.31 on, `create_weights`, `RoutedExperts.weight_loader`, `process_weights_after_loading` up to
    `ops.gptq_marlin_repack`), compared with contract marlin_moe_fp8's `shard_*`. Rows are named along
    the intermediate dim (w13 dim 1, w2 dim 2, their block scales likewise), per rank. A release that
    refuses the layer (0.30: Marlin does not take the refined block, or `validate_fp8_block_shape_moe`
    raises "not divisible by weight quantization block_n") is named with its error and the rows the
    contract gives each rank.
    """
    driver = _kit_driver("marlin_block_fp8")
    params = dict(scheme="fp8_block128", scale_dtype="float32", activation="silu", **cfg)
    p = gen_mod.plan(**params)
    full_i, tp, ipp = p.intermediate_size, p.tp_size, p.intermediate_size_per_partition
    spans = [(min(r * ipp, full_i), min((r + 1) * ipp, full_i)) for r in range(tp)]
    ranks = [
        f"rank {r} {a}..{b - 1}" + (f" + {ipp - (b - a)} pad" if b - a < ipp else "")
        for r, (a, b) in enumerate(spans)
        if b > a
    ]
    empty = [str(r) for r, (a, b) in enumerate(spans) if b == a]
    many = "s" if len(empty) > 1 else ""
    rows = ", ".join(ranks) + (f"; rank{many} {', '.join(empty)} only pad (zero weights, unit scales)" if empty else "")
    info = [f"I {full_i} at tp {tp}: I / tp {full_i // tp}, contract I_pp {ipp} a rank"]
    try:
        pairs = list(driver.engine_run(params, p, gen_mod, False))
    except Exception as exc:  # the engine refusing the layer is the finding, named with its error
        return [
            f"engine refused the layer ({type(exc).__name__}: {str(exc).splitlines()[0][:160]}); contract loads "
            f"it at I_pp {ipp} a rank, checkpoint rows of each w13 half and w2 k: {rows}"
        ], info
    bad: list[str] = []
    for what, got, want in pairs:
        want = want() if callable(want) else want
        axis = 0 if got.dim() == 1 else (1 if what.startswith("w13") else 2)
        bad += diff_rows(what, got, want, axis)
    return bad, info


DRIVERS: dict[str, Driver] = {
    "fi_nvfp4_align": fi_nvfp4_align,
    "aiter_pad_counts": aiter_pad_counts,
    "fi_fp8_align": fi_fp8_align,
    "sglang_cpu_config": sglang_cpu_config,
    "cpu_fused_moe_init": cpu_fused_moe_init,
    "fi_nvfp4_caller_alignment": fi_nvfp4_caller_alignment,
    "moe_loader_stride": moe_loader_stride,
    "aiter_unquantized_roundup": aiter_unquantized_roundup,
    "marlin_block_fp8_tp_pad": marlin_block_fp8_tp_pad,
}
