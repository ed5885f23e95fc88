"""SGLang's CPU unquantized MoE: the config update `update_config.adjust_config_with_unaligned_cpu_tp`
(the padded intermediate size, on a stub model config) and the CPU padded loading
`FusedMoE._load_w13` / `_load_w2` (on a FusedMoE built without __init__: the attributes the loaders
read), every rank, into the rank's padded parameter, against the contract's `shard_w13_weight` /
`shard_w2_weight`. No gate on this path (`engine_admits` is None; hidden_size admission is
`amx_utils.dim_is_supported`, which decides the packed kernel, not the layout).
"""

# Names from the kit's other parts (base.py, sglang_common.py), defined above this text in a kit;
# E, H, I are the field's names.
# ruff: noqa: F821, E741

import types
from typing import Any
from unittest import mock

import torch

# The engine objects this driver drives: it drives the contracts whose `models` lines name every one
# (layoutc/tools/kit/write.py `drives`), read from the contracts, never named here.
MODELS = ("sglang.srt.layers.quantization.unquant:UnquantizedFusedMoEMethod",)
ENGINE = "sglang"
ENGINE_MODULE = "sglang"
SHARED = ("sglang_common",)
LAYER = "sglang.srt.layers.moe.fused_moe_triton.layer:FusedMoE"
TARGETS = {
    "sglang.srt.configs.update_config:adjust_config_with_unaligned_cpu_tp": None,
    f"{LAYER}._load_w13": None,
    f"{LAYER}._load_w2": None,
}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def engine_setup() -> None:
    sglang_setup()


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    return None


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
        self.quantization = None

    def get_total_num_kv_heads(self) -> int:
        return self.hf_config.num_key_value_heads


def _layer(tp_size: int, rank: int) -> Any:
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
    from sglang.srt.layers.quantization.unquant import UnquantizedFusedMoEMethod

    layer = object.__new__(FusedMoE)
    torch.nn.Module.__init__(layer)
    layer.moe_tp_size, layer.moe_tp_rank = tp_size, rank
    layer.use_presharded_weights = False
    layer.use_triton_kernels = False
    layer.use_flashinfer_trtllm_moe = False
    layer.quant_config = None
    object.__setattr__(layer, "quant_method", object.__new__(UnquantizedFusedMoEMethod))
    layer.moe_runner_config = types.SimpleNamespace(is_gated=True)
    return layer


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine value, the contract value's thunk): the padded size, then every rank's tensors."""
    from sglang.srt.configs import update_config
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
    from sglang.srt.model_loader import loader

    E, H, I, tp = params["num_experts"], params["hidden_size"], params["intermediate_size"], params["tp_size"]
    td = DTYPES[params["dtype"]]
    model_config = _ModelConfig(I)
    with mock.patch.object(loader, "_get_quantization_config", return_value=None):
        update_config.adjust_config_with_unaligned_cpu_tp(model_config, None, tp)
    padded = model_config.hf_config.moe_intermediate_size
    yield "padded intermediate", torch.tensor([padded]), lambda: torch.tensor([plan.intermediate_size_padded])
    L = padded // tp
    g = torch.Generator().manual_seed(0)
    w1, w3 = torch.randn(E, I, H, generator=g).to(td), torch.randn(E, I, H, generator=g).to(td)
    w2 = torch.randn(E, H, I, generator=g).to(td)
    for rank in range(tp):
        layer = _layer(tp, rank)
        w13 = poisoned((E, 2 * L, H), td) if poison else torch.zeros(E, 2 * L, H, dtype=td)
        w2_p = poisoned((E, H, L), td) if poison else torch.zeros(E, H, L, dtype=td)
        for e in range(E):
            FusedMoE._load_w13(layer, expert_data=w13[e], shard_dim=0, shard_id="w1", loaded_weight=w1[e])
            FusedMoE._load_w13(layer, expert_data=w13[e], shard_dim=0, shard_id="w3", loaded_weight=w3[e])
            FusedMoE._load_w2(layer, expert_data=w2_p[e], shard_dim=1, shard_id="w2", loaded_weight=w2[e])
        yield f"w13_weight rank {rank}", w13, lambda r=rank: gen.shard_w13_weight(torch.cat([w1, w3], 1), r, plan)
        yield f"w2_weight rank {rank}", w2_p, lambda r=rank: gen.shard_w2_weight(w2, r, plan)
