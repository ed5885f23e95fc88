"""SGLang 0.5.23's own CPU MoE padding and loading, run in a child process for tests/conformance/test_sglang.py.

`python -m tests.support.conformance.sglang_oracle REQUEST.json` reads a list of cases, answers each
with SGLang's functions, and prints one JSON object. It runs in its own process because
importing sglang changes process-wide state the rest of the suite must not see: it patches
transformers (sglang.srt.utils.hf_transformers_patches), points third-party cache
directories elsewhere (sglang.srt.environ.redirect_third_party_caches) and this module
installs import stubs.

Environment:
- LAYOUTC_SGLANG_PATH: the folder `pip install --no-deps --target` filled with the sglang
  0.5.23 wheel and the pure-Python packages its import chain needs (README, Environment);
  appended to sys.path, so the kernel environment's own packages win.
- SGLANG_USE_CPU_ENGINE=1 is set here: SGLang's own switch (sglang.srt.utils.common.is_cpu)
  that selects its CPU code paths (`_is_cpu` in the MoE layer: padded loading).

Stubbed modules (each touches a device; nothing on the MoE padding path calls them; the stubs live in
layoutc/tools/kit/drivers/sglang_common.py, shared with `layoutc kit`'s SGLang kits):
- `sgl_kernel`: SGLang's C++/CUDA kernel package. PyPI's sgl-kernel is a CUDA build
  (`common_ops` needs libnvrtc); the CPU build with `fused_experts_cpu` and
  `convert_weight_packed` is built from source for AMX machines. SGLang imports it at
  module level (sglang/kernels/ops/kvcache/cache_move.py under SGLANG_USE_CPU_ENGINE).
  Any attribute of the stub raises when called, so a code path that reached a kernel
  would fail loudly rather than pass.
- `torchvision`: PyPI's torchvision for torch 2.13 is a CUDA build whose ops need
  libtorch_cuda (README, Environment); sglang.srt.configs imports it at module level
  for multimodal image processors (sglang/srt/multimodal/internvl_utils.py). transformers
  is imported before the stub exists, so its own torchvision probe still reports "absent".

Patched function (not a device): `sglang.srt.model_loader.loader._get_quantization_config`,
which looks the model class up in SGLang's model registry (importing every model module)
only to read its packed_modules_mapping; the patch returns SGLang's own config class built
by its own parser, `Fp8Config.from_config` / `Mxfp4Config.from_config`, from the
checkpoint's quantization_config dict.

Row maps: every loaded tensor holds, at each position of the intermediate axis, the
1-based index of the checkpoint row (or packed byte, or scale block) it came from, 0 for a
position no checkpoint row reached; they are sent run-length encoded,
[[position, first_value, length], ...], with first_value 0 for a run of pad.
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import json
import os
import sys
import types
from typing import Any

from layoutc.tools.kit.drivers.sglang_common import SGLANG_STUBBED as STUBBED  # noqa: F401  (named in the docstring)
from layoutc.tools.kit.drivers.sglang_common import sglang_setup


def _setup() -> None:
    path = os.environ.get("LAYOUTC_SGLANG_PATH")
    if not path or not os.path.isdir(os.path.join(path, "sglang")):
        raise SystemExit(f"LAYOUTC_SGLANG_PATH={path!r} holds no sglang package")
    sglang_setup()  # the device stubs and SGLang's CPU switch, shared with the SGLang test kits


def _runs(values: list[int]) -> list[list[int]]:
    """Run-length encode a row map: consecutive values (or consecutive zeros) form one run."""
    runs: list[list[int]] = []
    for position, value in enumerate(values):
        if runs:
            _, first, length = runs[-1]
            expected = 0 if first == 0 else first + length
            if value == expected and (value == 0) == (first == 0):
                runs[-1][2] += 1
                continue
        runs.append([position, value, 1])
    return runs


class _HfConfig:
    """The attributes of a Hugging Face config that adjust_config_with_unaligned_cpu_tp reads."""

    def __init__(self, intermediate_size: int) -> None:
        self.model_type = "layoutc_stub"
        self.num_attention_heads = 720720  # lcm(1..16): no head padding at any degree swept
        self.num_key_value_heads = 720720
        self.moe_intermediate_size = intermediate_size


class _ModelConfig:
    """What ModelConfig offers adjust_config_with_unaligned_cpu_tp: hf_config, heads, quantization."""

    def __init__(self, intermediate_size: int, quantization: str | None) -> None:
        self.hf_config = _HfConfig(intermediate_size)
        self.hf_text_config = self.hf_config
        self.num_attention_heads = self.hf_config.num_attention_heads
        self.quantization = quantization

    def get_total_num_kv_heads(self) -> int:
        return self.hf_config.num_key_value_heads


def _quant_config(scheme: str, block: int) -> Any:
    from sglang.srt.layers.quantization.fp8 import Fp8Config
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config

    if scheme == "fp8":
        return Fp8Config.from_config({"quant_method": "fp8", "activation_scheme": "dynamic",
                                      "weight_block_size": [block, block]})
    if scheme == "mxfp4":
        return Mxfp4Config.from_config({"quant_method": "mxfp4"})
    return None


def padded_intermediate(intermediate_size: int, tp_size: int, scheme: str, block: int) -> dict[str, Any]:
    """SGLang's adjust_config_with_unaligned_cpu_tp on a stub model config: the padded I, or its error."""
    from unittest import mock

    from sglang.srt.configs import update_config
    from sglang.srt.model_loader import loader

    model_config = _ModelConfig(intermediate_size, {"fp8": "fp8", "mxfp4": "mxfp4"}.get(scheme))
    with mock.patch.object(loader, "_get_quantization_config", return_value=_quant_config(scheme, block)):
        try:
            update_config.adjust_config_with_unaligned_cpu_tp(model_config, None, tp_size)
        except (AssertionError, ValueError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
    return {"padded": model_config.hf_config.moe_intermediate_size}


def _fused_moe_stub(tp_size: int, rank: int) -> Any:
    """A FusedMoE without __init__ (which needs SGLang's server and parallel state): just what
    _load_w13 / _load_w2 read. use_padded_loading is SGLang's own cached property."""
    import torch
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
    from sglang.srt.layers.quantization.unquant import UnquantizedFusedMoEMethod

    layer = object.__new__(FusedMoE)
    torch.nn.Module.__init__(layer)
    layer.moe_tp_size, layer.moe_tp_rank = tp_size, rank
    layer.use_presharded_weights = False
    layer.use_triton_kernels = False
    layer.use_flashinfer_trtllm_moe = False
    layer.quant_config = None
    # a plain attribute, not a submodule: the method is never initialised, only its class is read
    object.__setattr__(layer, "quant_method", object.__new__(UnquantizedFusedMoEMethod))
    layer.moe_runner_config = types.SimpleNamespace(is_gated=True)
    return layer


def loaded_rows(intermediate_size: int, tp_size: int, padded: int, rows_per_block: int) -> list[dict[str, Any]]:
    """SGLang's FusedMoE._load_w13 / _load_w2 (CPU padded loading) for every rank of a padded config.

    The checkpoint's w1, w3 are [I / rows_per_block, 2] and w2 [2, I / rows_per_block]
    (rows_per_block 1: weights; the block size: block scales), each entry its 1-based row index;
    each rank's parameter is [2 L, 2] and [2, L] with L = padded / tp_size / rows_per_block.
    Returns per rank the gate, up and w2 row maps, run-length encoded.
    """
    import torch
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE

    rows = -(-intermediate_size // rows_per_block)
    index = torch.arange(1, rows + 1, dtype=torch.float64)
    w1, w3 = index[:, None].repeat(1, 2), (index + 0)[:, None].repeat(1, 2)
    w2 = index[None, :].repeat(2, 1)
    per_rank = padded // tp_size // rows_per_block
    out = []
    for rank in range(tp_size):
        layer = _fused_moe_stub(tp_size, rank)
        w13 = torch.full((2 * per_rank, 2), -1.0, dtype=torch.float64)  # -1: a position the loader never wrote
        w2_param = torch.full((2, per_rank), -1.0, dtype=torch.float64)
        FusedMoE._load_w13(layer, expert_data=w13, shard_dim=0, shard_id="w1", loaded_weight=w1)
        FusedMoE._load_w13(layer, expert_data=w13, shard_dim=0, shard_id="w3", loaded_weight=w3)
        FusedMoE._load_w2(layer, expert_data=w2_param, shard_dim=1, shard_id="w2", loaded_weight=w2)
        col = w13[:, 0].tolist()
        out.append({"gate": _runs([int(v) for v in col[:per_rank]]), "up": _runs([int(v) for v in col[per_rank:]]),
                    "w2": _runs([int(v) for v in w2_param[0].tolist()])})
    return out


def gpt_oss_mxfp4_rows(intermediate_size: int, tp_size: int, padded: int, hidden_size: int = 64) -> list[dict[str, Any]]:
    """SGLang's GptOssForCausalLM._load_mxfp4_experts_weights, every rank, through FusedMoE.weight_loader.

    Checkpoint tensors (one expert) carry 1-based indices: gate_up_proj_blocks [1, 2 I, H / 32, 16]
    by row pair (row 2 j and 2 j + 1 hold j + 1), down_proj_blocks [1, H, I / 32, 16] by packed byte
    along I, the scales by row pair / by 32-block, and the biases likewise. Returns per rank
    the w13 row-pair map (from the weights, checked equal for both rows of a pair), the w2
    byte map, the scale maps, and whether the down bias is the checkpoint's.
    """
    import functools

    import torch
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config
    from sglang.srt.models.gpt_oss import GptOssForCausalLM

    E, H, I = 1, hidden_size, intermediate_size
    pair = torch.arange(1, I + 1, dtype=torch.int32).repeat_interleave(2)  # row 2 j, 2 j + 1 -> j + 1
    byte = torch.arange(1, I // 2 + 1, dtype=torch.int32)
    block = torch.arange(1, I // 32 + 1, dtype=torch.int32)
    prefix = "model.layers.0.mlp.experts"
    checkpoint = {
        "gate_up_proj_blocks": pair[None, :, None, None].expand(E, 2 * I, H // 32, 16).contiguous(),
        "down_proj_blocks": byte.view(1, 1, I // 32, 16).expand(E, H, I // 32, 16).contiguous(),
        "gate_up_proj_scales": pair[None, :, None].expand(E, 2 * I, H // 32).contiguous(),
        "down_proj_scales": block[None, None, :].expand(E, H, I // 32).contiguous(),
        "gate_up_proj_bias": pair[None, :].expand(E, 2 * I).contiguous(),
        "down_proj_bias": torch.arange(1, H + 1, dtype=torch.int32)[None, :].contiguous(),
    }
    L = padded // tp_size
    out = []
    for rank in range(tp_size):
        experts = _fused_moe_stub(tp_size, rank)
        experts.quant_config = Mxfp4Config.from_config({"quant_method": "mxfp4"})
        experts.moe_ep_rank, experts.moe_ep_size = 0, 1
        shapes = {"w13_weight": (E, 2 * L, H // 2), "w2_weight": (E, H, L // 2), "w13_weight_scale": (E, 2 * L, H // 32),
                  "w2_weight_scale": (E, H, L // 32), "w13_weight_bias": (E, 2 * L), "w2_weight_bias": (E, H)}
        for name, shape in shapes.items():
            param = torch.nn.Parameter(torch.full(shape, -1, dtype=torch.int32), requires_grad=False)
            param.weight_loader = functools.partial(FusedMoE.weight_loader, experts)
            experts.register_parameter(name, param)
        model = torch.nn.Module()
        model.config = types.SimpleNamespace(intermediate_size=padded, original_intermediate_size=I, num_local_experts=E)
        model.model = torch.nn.Module()
        model.model.layers = torch.nn.ModuleList([torch.nn.Module()])
        model.model.layers[0].mlp = torch.nn.Module()
        model.model.layers[0].mlp.experts = experts
        GptOssForCausalLM._load_mxfp4_experts_weights(model, ((f"{prefix}.{k}", v) for k, v in checkpoint.items()))
        w13 = experts.w13_weight.data[0, :, 0].tolist()
        assert w13[0::2] == w13[1::2] or all(v == -1 for v in w13), "a w13 row pair split across two checkpoint pairs"
        out.append({
            "w13_pairs": _runs([max(int(v), 0) for v in w13[0::2]]),
            "w13_written": sum(1 for v in w13 if v != -1),
            "w2_bytes": _runs([max(int(v), 0) for v in experts.w2_weight.data[0, 0].tolist()]),
            "w13_scale_pairs": _runs([max(int(v), 0) for v in experts.w13_weight_scale.data[0, 0::2, 0].tolist()]),
            "w2_scale_blocks": _runs([max(int(v), 0) for v in experts.w2_weight_scale.data[0, 0].tolist()]),
            "w2_bias_is_checkpoint": bool(torch.equal(experts.w2_weight_bias.data, checkpoint["down_proj_bias"])),
            "w2_bias_is_zero": bool((experts.w2_weight_bias.data == 0).all()),
        })
    return out


def role_rows(intermediate_size: int, scheme: str, block: int = 128, hidden_size: int = 64) -> dict[str, Any]:
    """What SGLang's loaders put in each w13 row of rank 0 at tp 1, by role: checkpoint gate row i
    carries the tag 1 + i and up row i the tag 1 + I + i (tests/support/conformance/trusted_views.py), 0 a
    row no checkpoint row reached. bf16 / fp8: FusedMoE._load_w13 (w1 then w3) into a [2 P, 2]
    parameter, P SGLang's own padded size; mxfp4: GptOssForCausalLM._load_mxfp4_experts_weights on
    gpt-oss's interleaved gate_up rows (row 2 j gate j, 2 j + 1 up j), weights, scales and bias."""
    import torch
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE

    I = intermediate_size
    padded = padded_intermediate(I, 1, scheme, block)
    if "error" in padded:
        return padded
    P = padded["padded"]
    gate, up = torch.arange(1, I + 1), torch.arange(I + 1, 2 * I + 1)
    if scheme != "mxfp4":
        layer = _fused_moe_stub(1, 0)
        w13 = torch.zeros(2 * P, 2, dtype=torch.float64)
        FusedMoE._load_w13(layer, expert_data=w13, shard_dim=0, shard_id="w1", loaded_weight=gate[:, None].repeat(1, 2))
        FusedMoE._load_w13(layer, expert_data=w13, shard_dim=0, shard_id="w3", loaded_weight=up[:, None].repeat(1, 2))
        return {"padded": P, "weight": [int(v) for v in w13[:, 0].tolist()]}
    import functools

    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config
    from sglang.srt.models.gpt_oss import GptOssForCausalLM

    E, H = 1, hidden_size
    rows = torch.stack([gate, up], 1).reshape(2 * I).to(torch.int32)  # gpt-oss: (gate j, up j) pairs
    prefix = "model.layers.0.mlp.experts"
    checkpoint = {
        "gate_up_proj_blocks": rows[None, :, None, None].expand(E, 2 * I, H // 32, 16).contiguous(),
        "down_proj_blocks": torch.zeros(E, H, I // 32, 16, dtype=torch.int32),
        "gate_up_proj_scales": rows[None, :, None].expand(E, 2 * I, H // 32).contiguous(),
        "down_proj_scales": torch.zeros(E, H, I // 32, dtype=torch.int32),
        "gate_up_proj_bias": rows[None, :].expand(E, 2 * I).contiguous(),
        "down_proj_bias": torch.zeros(E, H, dtype=torch.int32),
    }
    experts = _fused_moe_stub(1, 0)
    experts.quant_config = Mxfp4Config.from_config({"quant_method": "mxfp4"})
    experts.moe_ep_rank, experts.moe_ep_size = 0, 1
    shapes = {"w13_weight": (E, 2 * P, H // 2), "w2_weight": (E, H, P // 2), "w13_weight_scale": (E, 2 * P, H // 32),
              "w2_weight_scale": (E, H, P // 32), "w13_weight_bias": (E, 2 * P), "w2_weight_bias": (E, H)}
    for name, shape in shapes.items():
        param = torch.nn.Parameter(torch.zeros(shape, dtype=torch.int32), requires_grad=False)
        param.weight_loader = functools.partial(FusedMoE.weight_loader, experts)
        experts.register_parameter(name, param)
    model = torch.nn.Module()
    model.config = types.SimpleNamespace(intermediate_size=P, original_intermediate_size=I, num_local_experts=E)
    model.model = torch.nn.Module()
    model.model.layers = torch.nn.ModuleList([torch.nn.Module()])
    model.model.layers[0].mlp = torch.nn.Module()
    model.model.layers[0].mlp.experts = experts
    GptOssForCausalLM._load_mxfp4_experts_weights(model, ((f"{prefix}.{k}", v) for k, v in checkpoint.items()))
    return {"padded": P, "weight": [int(v) for v in experts.w13_weight.data[0, :, 0].tolist()],
            "scale": [int(v) for v in experts.w13_weight_scale.data[0, :, 0].tolist()],
            "bias": [int(v) for v in experts.w13_weight_bias.data[0].tolist()]}


def amx_packs(shapes: list[list[int]], dtype: str) -> bool:
    """SGLang's amx_utils.dim_is_supported and dtype_is_supported on every weight: whether
    _amx_process_weight_after_loading would pack the layer for fused_experts_cpu."""
    import torch
    from sglang.srt.layers import amx_utils

    weights = [torch.empty(shape, dtype=getattr(torch, dtype), device="meta") for shape in shapes]
    return all(amx_utils.dim_is_supported(w) and amx_utils.dtype_is_supported(w) for w in weights)


def fp8_create_weights(intermediate_size_per_partition: int, hidden_size: int, tp_size: int, block: int) -> str | None:
    """SGLang's Fp8MoEMethod.create_fp8_moe_weight_ on a stub layer: None, or the ValueError it raises."""
    import torch
    from sglang.srt.layers.quantization.fp8 import Fp8MoEMethod

    layer = torch.nn.Module()
    layer.moe_tp_size = tp_size
    layer.moe_runner_config = types.SimpleNamespace(is_gated=True)
    try:
        Fp8MoEMethod.create_fp8_moe_weight_(
            layer=layer, num_experts=1, hidden_size=hidden_size,
            intermediate_size_per_partition=intermediate_size_per_partition, block_quant=True,
            quant_config=_quant_config("fp8", block), use_mxfp8=False, is_checkpoint_fp8_serialized=True,
            is_fp4_expert=False, params_dtype=torch.bfloat16, with_bias=False)
    except ValueError as exc:
        return str(exc)
    return None


def configuration(intermediate_size: int, tp_size: int, scheme: str, block: int, hidden_sizes: list[int],
                  rows: bool) -> dict[str, Any]:
    """Everything SGLang decides for one (I, tp, scheme, block), in one call so that one child
    process answers the whole sweep: the padded I (or its error); per hidden size, whether AMX
    packs the layer and (block FP8) create_fp8_moe_weight_'s error; and with ``rows`` each
    rank's row maps (weights, and block scales for FP8) at SGLang's own padded size."""
    padded = padded_intermediate(intermediate_size, tp_size, scheme, block)
    out: dict[str, Any] = {"padded": padded}
    if "error" in padded:
        return out
    P = padded["padded"]
    L = P // tp_size
    out["amx"], out["fp8_create"] = {}, {}
    for H in hidden_sizes:
        if scheme == "mxfp4":
            shapes, dtype = [[1, 2 * L, H // 2], [1, H, L // 2]], "uint8"
        else:
            shapes, dtype = [[1, 2 * L, H], [1, H, L]], "float8_e4m3fn" if scheme == "fp8" else "bfloat16"
        out["amx"][str(H)] = amx_packs(shapes, dtype)
        if scheme == "fp8":
            out["fp8_create"][str(H)] = fp8_create_weights(L, H, tp_size, block)
    if rows and scheme == "mxfp4":
        out["rows"] = gpt_oss_mxfp4_rows(intermediate_size, tp_size, P)
    elif rows:
        out["rows"] = loaded_rows(intermediate_size, tp_size, P, 1)
        if scheme == "fp8":
            out["scale_rows"] = loaded_rows(intermediate_size, tp_size, P, block)
    return out


def answer(case: dict[str, Any]) -> Any:
    kind = case.pop("kind")
    return {"padded": padded_intermediate, "rows": loaded_rows, "mxfp4_rows": gpt_oss_mxfp4_rows,
            "amx": amx_packs, "fp8_create": fp8_create_weights, "config": configuration, "role_rows": role_rows}[kind](**case)


def main(argv: list[str]) -> int:
    _setup()
    with open(argv[0]) as handle:
        cases = json.load(handle)
    import sglang

    answers = [answer(dict(case)) for case in cases]
    json.dump({"sglang_version": sglang.__version__, "answers": answers}, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
