"""SGLang's CPU MXFP4 (gpt-oss) MoE: the config update `update_config.adjust_config_with_unaligned_cpu_tp`
(quantization mxfp4: padding size 2 * tp_size * 32), then, every rank, `Mxfp4MoEMethod.create_weights`
(the parameters SGLang allocates on CPU: uint8 weights torch.zeros, E8M0 scales torch.full(127), biases
torch.zeros) on a FusedMoE built without __init__, and gpt-oss's own loader
`GptOssForCausalLM._load_mxfp4_experts_weights` (through `FusedMoE.weight_loader`) of a checkpoint in
gpt-oss's layout (gate_up_proj_blocks [E, 2 I, H / 32, 16], rows (gate j, up j), its scales and bias;
down_proj_*), against the contract's `shard_*`. The biases are compared as float32, the dtype
`process_weights_after_loading` gives them (create_weights allocates them in params_dtype, bf16 here).
`Mxfp4MoEMethod.__init__` reads SGLang's server arguments, which a unit test has none of: the method
is built without it, with the flags create_weights reads set to SGLang's CPU default (no Marlin,
DeepGEMM, MegaMoE or FlashInfer; `_fi_kernel` None). No gate (`engine_admits` is None).
"""

# Names from the kit's other parts (base.py, sglang_common.py), defined above this text in a kit;
# E, H, I are the field's names.
# ruff: noqa: F821, E741

import functools
import types
from typing import Any
from unittest import mock

import torch

# The engine objects this driver drives: it drives the contracts whose `models` lines name every one
# (layoutc/tools/kit/write.py `drives`), read from the contracts, never named here.
MODELS = ("sglang.srt.layers.quantization.mxfp4:Mxfp4MoEMethod",)
ENGINE = "sglang"
ENGINE_MODULE = "sglang"
SHARED = ("sglang_common",)
LAYER = "sglang.srt.layers.moe.fused_moe_triton.layer:FusedMoE"
TARGETS = {
    "sglang.srt.configs.update_config:adjust_config_with_unaligned_cpu_tp": None,
    "sglang.srt.layers.quantization.mxfp4:Mxfp4MoEMethod.create_weights":
        ("self", "layer", "num_experts", "hidden_size", "intermediate_size_per_partition", "params_dtype",
         "with_bias", "extra_weight_attrs"),
    "sglang.srt.models.gpt_oss:GptOssForCausalLM._load_mxfp4_experts_weights": None,
    f"{LAYER}.weight_loader": None,
}
# gpt-oss's swigluoai constants are the only ones its config carries (the contract refuses the rest)
# hidden_size is never padded (pad(hidden_size -> hidden_size)): it enters the layout only as admitted
# (a multiple of 64) or refused, so 64 and 128 (admitted) and 32 and 1 (refused: whole MXFP4 blocks but
# not whole AMX tiles, and not even blocks) stand for every value and keep the kit's tensors small.
SCOPE = {"swiglu_alpha_milli": (1702,), "swiglu_limit_milli": (7000,), "hidden_size": (1, 32, 64, 128)}
PREFIX = "model.layers.0.mlp.experts"


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
        self.quantization = "mxfp4"

    def get_total_num_kv_heads(self) -> int:
        return self.hf_config.num_key_value_heads


def _padded(I: int, tp: int) -> int:
    from sglang.srt.configs import update_config
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config
    from sglang.srt.model_loader import loader

    model_config = _ModelConfig(I)
    quant = Mxfp4Config.from_config({"quant_method": "mxfp4"})
    with mock.patch.object(loader, "_get_quantization_config", return_value=quant):
        update_config.adjust_config_with_unaligned_cpu_tp(model_config, None, tp)
    return model_config.hf_config.moe_intermediate_size


def _experts(E: int, H: int, L: int, tp: int, rank: int) -> Any:
    """A rank's FusedMoE with the parameters Mxfp4MoEMethod.create_weights registers, loaders attached."""
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config, Mxfp4MoEMethod

    experts = sglang_fused_moe(tp, rank, "mxfp4")
    experts.quant_config = Mxfp4Config.from_config({"quant_method": "mxfp4"})
    experts.num_local_experts, experts.hidden_size, experts.intermediate_size_per_partition = E, H, L
    method = object.__new__(Mxfp4MoEMethod)
    method.use_marlin = method.use_mega_moe = method.use_deep_gemm = method.use_flashinfer = False
    method._fi_kernel = None
    method.create_weights(experts, E, H, L, torch.bfloat16, with_bias=True,
                          weight_loader=functools.partial(FusedMoE.weight_loader, experts))
    return experts


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine value, the contract value's thunk): the padded size, then every rank's tensors."""
    from sglang.srt.models.gpt_oss import GptOssForCausalLM

    E, H, I, tp = params["num_experts"], params["hidden_size"], params["intermediate_size"], params["tp_size"]
    padded = _padded(I, tp)
    yield "padded intermediate", torch.tensor([padded]), lambda: torch.tensor([plan.intermediate_size_padded])
    L = padded // tp
    g = torch.Generator().manual_seed(0)
    byte = lambda *shape: torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)  # noqa: E731
    bias = lambda *shape: torch.randn(*shape, generator=g).to(torch.bfloat16)  # noqa: E731
    ckpt = {"gate_up_proj_blocks": byte(E, 2 * I, H // 32, 16), "gate_up_proj_scales": byte(E, 2 * I, H // 32),
            "gate_up_proj_bias": bias(E, 2 * I), "down_proj_blocks": byte(E, H, I // 32, 16),
            "down_proj_scales": byte(E, H, I // 32), "down_proj_bias": bias(E, H)}
    full = {"w13_weight": ckpt["gate_up_proj_blocks"].reshape(E, 2 * I, H // 2),
            "w13_weight_scale": ckpt["gate_up_proj_scales"], "w13_bias": ckpt["gate_up_proj_bias"].float(),
            "w2_weight": ckpt["down_proj_blocks"].reshape(E, H, I // 2), "w2_weight_scale": ckpt["down_proj_scales"],
            "w2_bias": ckpt["down_proj_bias"].float()}
    for rank in range(tp):
        experts = _experts(E, H, L, tp, rank)
        model = torch.nn.Module()
        model.config = types.SimpleNamespace(intermediate_size=padded, original_intermediate_size=I,
                                             num_local_experts=E)
        model.model = torch.nn.Module()
        model.model.layers = torch.nn.ModuleList([torch.nn.Module()])
        model.model.layers[0].mlp = torch.nn.Module()
        model.model.layers[0].mlp.experts = experts
        GptOssForCausalLM._load_mxfp4_experts_weights(model, ((f"{PREFIX}.{k}", v) for k, v in ckpt.items()))
        for name, param in (("w13_weight", "w13_weight"), ("w13_weight_scale", "w13_weight_scale"),
                            ("w13_bias", "w13_weight_bias"), ("w2_weight", "w2_weight"),
                            ("w2_weight_scale", "w2_weight_scale"), ("w2_bias", "w2_weight_bias")):
            got = getattr(experts, param).data
            got = got.float() if name.endswith("bias") else got
            yield f"{name} rank {rank}", got, \
                lambda r=rank, n=name: getattr(gen, f"shard_{n}")(full[n], r, plan)
