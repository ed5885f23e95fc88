"""SGLang's CPU block-FP8 MoE: the config update `update_config.adjust_config_with_unaligned_cpu_tp`
with SGLang's own `Fp8Config` (weight_block_size [block, block]: the padding size is tp_size * block),
then, every rank, `Fp8MoEMethod.create_fp8_moe_weight_` (the parameters SGLang allocates: float8_e4m3fn
weights, float32 `*_weight_scale_inv` block scales) on a FusedMoE built without __init__, and the CPU
padded loading `FusedMoE._load_w13` / `_load_w2` of the checkpoint's weights and block scales into
them, against the contract's `shard_w13_weight` / `shard_w13_weight_scale_inv` / `shard_w2_weight` /
`shard_w2_weight_scale_inv`. No gate (`engine_admits` is None): the contract's refusals are its own.
"""

# Names from the kit's other parts (base.py, sglang_common.py), defined above this text in a kit;
# E, H, I are the field's names.
# ruff: noqa: F821, E741

from typing import Any
from unittest import mock

import torch

# The engine objects this driver drives: it drives the contracts whose `models` lines name every one
# (layoutc/tools/kit/write.py `drives`), read from the contracts, never named here.
MODELS = ("sglang.srt.layers.quantization.fp8:Fp8MoEMethod",)
ENGINE = "sglang"
ENGINE_MODULE = "sglang"
SHARED = ("sglang_common",)
LAYER = "sglang.srt.layers.moe.fused_moe_triton.layer:FusedMoE"
TARGETS = {
    "sglang.srt.configs.update_config:adjust_config_with_unaligned_cpu_tp": None,
    "sglang.srt.layers.quantization.fp8:Fp8Config.from_config": None,
    "sglang.srt.layers.quantization.fp8:Fp8MoEMethod.create_fp8_moe_weight_": None,
    f"{LAYER}._load_w13": None,
    f"{LAYER}._load_w2": None,
}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def engine_setup() -> None:
    sglang_setup()


class _HfConfig:
    def __init__(self, intermediate_size: int) -> None:
        self.model_type = "layoutc_kit_stub"
        self.num_attention_heads = 720720  # lcm(1..16): no head padding at any degree
        self.num_key_value_heads = 720720
        self.moe_intermediate_size = intermediate_size


class _ModelConfig:
    def __init__(self, intermediate_size: int) -> None:
        self.hf_config = _HfConfig(intermediate_size)
        self.hf_text_config = self.hf_config
        self.num_attention_heads = self.hf_config.num_attention_heads
        self.quantization = "fp8"

    def get_total_num_kv_heads(self) -> int:
        return self.hf_config.num_key_value_heads


def _quant(block: int) -> Any:
    from sglang.srt.layers.quantization.fp8 import Fp8Config

    return Fp8Config.from_config({"quant_method": "fp8", "activation_scheme": "dynamic",
                                  "weight_block_size": [block, block]})


def _padded(params: dict[str, Any]) -> int:
    """SGLang's padded intermediate size for the whole layer (its config update on a stub model config)."""
    from sglang.srt.configs import update_config
    from sglang.srt.model_loader import loader

    model_config = _ModelConfig(params["intermediate_size"])
    with mock.patch.object(loader, "_get_quantization_config", return_value=_quant(params["block"])):
        update_config.adjust_config_with_unaligned_cpu_tp(model_config, None, params["tp_size"])
    return model_config.hf_config.moe_intermediate_size


def _create(params: dict[str, Any], L: int, rank: int) -> Any:
    """A rank's layer with the parameters Fp8MoEMethod.create_fp8_moe_weight_ registers."""
    from sglang.srt.layers.quantization.fp8 import Fp8MoEMethod

    layer = sglang_fused_moe(params["tp_size"], rank, "fp8")
    Fp8MoEMethod.create_fp8_moe_weight_(
        layer=layer, num_experts=params["num_experts"], hidden_size=params["hidden_size"],
        intermediate_size_per_partition=L, block_quant=True, quant_config=_quant(params["block"]), use_mxfp8=False,
        is_checkpoint_fp8_serialized=True, is_fp4_expert=False, params_dtype=DTYPES[params["dtype"]], with_bias=False)
    return layer


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    """No gate: both refusals are layoutc's (a ragged last block SGLang loads; a hidden size that is not
    whole blocks, which create_fp8_moe_weight_ does not check at tp 1); an admitted configuration
    create_fp8_moe_weight_ refuses fails in engine_run with SGLang's ValueError."""
    return None


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine value, the contract value's thunk): the padded size, then every rank's tensors."""
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE

    E, H, I, tp, B = (params[k] for k in ("num_experts", "hidden_size", "intermediate_size", "tp_size", "block"))
    padded = _padded(params)
    yield "padded intermediate", torch.tensor([padded]), lambda: torch.tensor([plan.intermediate_size_padded])
    L = padded // tp
    g = torch.Generator().manual_seed(0)
    fp8 = lambda *shape: torch.randn(*shape, generator=g).to(torch.float8_e4m3fn)  # noqa: E731
    w1, w3, w2 = fp8(E, I, H), fp8(E, I, H), fp8(E, H, I)
    s1, s3 = torch.rand(E, I // B, H // B, generator=g) + 0.5, torch.rand(E, I // B, H // B, generator=g) + 0.5
    s2 = torch.rand(E, H // B, I // B, generator=g) + 0.5
    for rank in range(tp):
        layer = _create(params, L, rank)
        for e in range(E):
            for name, gate, up in (("w13_weight", w1, w3), ("w13_weight_scale_inv", s1, s3)):
                data = getattr(layer, name).data[e]
                FusedMoE._load_w13(layer, expert_data=data, shard_dim=0, shard_id="w1", loaded_weight=gate[e])
                FusedMoE._load_w13(layer, expert_data=data, shard_dim=0, shard_id="w3", loaded_weight=up[e])
            FusedMoE._load_w2(layer, expert_data=layer.w2_weight.data[e], shard_dim=1, shard_id="w2",
                              loaded_weight=w2[e])
            FusedMoE._load_w2(layer, expert_data=layer.w2_weight_scale_inv.data[e], shard_dim=1, shard_id="w2",
                              loaded_weight=s2[e])
        yield f"w13_weight rank {rank}", layer.w13_weight.data.view(torch.uint8), \
            lambda r=rank: gen.shard_w13_weight(torch.cat([w1, w3], 1), r, plan).view(torch.uint8)
        yield f"w13_weight_scale_inv rank {rank}", layer.w13_weight_scale_inv.data, \
            lambda r=rank: gen.shard_w13_weight_scale_inv(torch.cat([s1, s3], 1), r, plan)
        yield f"w2_weight rank {rank}", layer.w2_weight.data.view(torch.uint8), \
            lambda r=rank: gen.shard_w2_weight(w2, r, plan).view(torch.uint8)
        yield f"w2_weight_scale_inv rank {rank}", layer.w2_weight_scale_inv.data, \
            lambda r=rank: gen.shard_w2_weight_scale_inv(s2, r, plan)
