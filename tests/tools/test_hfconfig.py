"""Tests for layoutc.tools.hfconfig: bundled real configs, aliases, layer counts, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from layoutc.tools.hfconfig import (
    HIDDEN_ACT_ALIASES,
    INTERMEDIATE_SIZE_ALIASES,
    NUM_EXPERTS_ALIASES,
    ModelConfigError,
    MoEModelConfig,
    bundled_model_names,
    load_model_config,
    parse_model_config,
)

# (hidden, I, experts, top-k) from shared/design/domain.md section 4,
# "Real configs for fixtures".
DOMAIN_TABLE: dict[str, tuple[int, int, int, int]] = {
    "gemma-4-26b-a4b": (2816, 704, 128, 8),
    "gpt-oss-20b": (2880, 2880, 32, 4),
    "gpt-oss-120b": (2880, 2880, 128, 4),
    "mixtral-8x7b": (4096, 14336, 8, 2),
    "qwen3-30b-a3b": (2048, 768, 128, 8),
    "qwen3-235b-a22b": (4096, 1536, 128, 8),
    "deepseek-v2-lite": (2048, 1408, 64, 6),
    "deepseek-v2-lite-gptq": (2048, 1408, 64, 6),
    "deepseek-v3": (7168, 2048, 256, 8),
    "minimax-m2": (3072, 1536, 256, 8),
    "olmoe-1b-7b": (2048, 1024, 64, 8),
    "granite-3.0-3b-a800m": (1536, 512, 40, 8),
    "nemotron-3-nano-30b-a3b": (2688, 1856, 128, 6),
    "qwen1.5-moe-a2.7b": (2048, 1408, 60, 4),
    "phi-3.5-moe": (4096, 6400, 16, 2),
    "dbrx": (6144, 10752, 16, 4),
    "glm-4.5-air": (4096, 1408, 128, 8),
}


def write_config(tmp_path: Path, config: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def mixtral_like(**overrides: object) -> dict:
    config: dict = {
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "hidden_act": "silu",
    }
    config.update(overrides)
    return config


# ---------------------------------------------------------------------------
# Bundled configs


def test_bundled_names_are_sorted_and_cover_the_domain_table() -> None:
    names = bundled_model_names()
    assert names == sorted(names)
    assert len(names) >= 16
    assert set(DOMAIN_TABLE) <= set(names)


@pytest.mark.parametrize("name", bundled_model_names())
def test_every_bundled_file_loads(name: str) -> None:
    config = load_model_config(name)
    assert isinstance(config, MoEModelConfig)
    assert 0 < config.num_moe_layers <= config.num_hidden_layers
    assert config.num_experts_per_tok <= config.num_experts
    assert config.activation in {"silu", "gelu", "gelu_tanh", "relu2", "swigluoai"}
    assert "/" in config.name  # the hub id, from _name_or_path


@pytest.mark.parametrize("name", sorted(DOMAIN_TABLE))
def test_bundled_numbers_match_domain_table(name: str) -> None:
    config = load_model_config(name)
    got = (
        config.hidden_size,
        config.intermediate_size,
        config.num_experts,
        config.num_experts_per_tok,
    )
    assert got == DOMAIN_TABLE[name]


def test_gemma_4_26b_a4b() -> None:
    config = load_model_config("gemma-4-26b-a4b")
    assert (
        config.hidden_size,
        config.intermediate_size,
        config.num_experts,
        config.num_experts_per_tok,
    ) == (
        2816,
        704,
        128,
        8,
    )
    # text_config also has the dense MLP's intermediate_size (2112);
    # the expert width must win.
    assert config.intermediate_size == 704
    assert config.hidden_act == "gelu_pytorch_tanh"
    assert config.activation == "gelu_tanh"
    assert config.is_gated
    assert config.num_hidden_layers == config.num_moe_layers == 30
    assert config.quant_method is None and config.group_size is None


def test_gpt_oss_120b_is_swigluoai_mxfp4() -> None:
    config = load_model_config("gpt-oss-120b")
    assert (
        config.hidden_size,
        config.intermediate_size,
        config.num_experts,
        config.num_experts_per_tok,
    ) == (
        2880,
        2880,
        128,
        4,
    )
    assert config.activation == "swigluoai"
    assert config.hidden_act == "silu"  # as the checkpoint writes it
    assert config.is_gated
    assert config.quant_method == "mxfp4"
    assert config.num_moe_layers == 36


def test_gpt_oss_20b() -> None:
    config = load_model_config("gpt-oss-20b")
    assert (config.num_experts, config.num_hidden_layers, config.activation) == (
        32,
        24,
        "swigluoai",
    )


def test_minimax_m2_fp8_block_128() -> None:
    config = load_model_config("minimax-m2")
    assert (
        config.hidden_size,
        config.intermediate_size,
        config.num_experts,
        config.num_experts_per_tok,
    ) == (
        3072,
        1536,
        256,
        8,
    )
    assert config.quant_method == "fp8"
    assert config.block_size == (128, 128)
    assert config.num_moe_layers == 62


def test_deepseek_v3_fp8_and_dense_prefix() -> None:
    config = load_model_config("deepseek-v3")
    assert (
        config.hidden_size,
        config.intermediate_size,
        config.num_experts,
        config.num_experts_per_tok,
    ) == (
        7168,
        2048,
        256,
        8,
    )
    assert config.quant_method == "fp8"
    assert config.block_size == (128, 128)
    # 61 layers, the first 3 dense (first_k_dense_replace);
    # the MTP layer is not counted.
    assert (config.num_hidden_layers, config.num_moe_layers) == (61, 58)
    assert config.dtype == "bfloat16"


def test_deepseek_v2_lite_gptq_group_and_act_order() -> None:
    config = load_model_config("deepseek-v2-lite-gptq")
    assert config.quant_method == "gptq"
    assert config.group_size == 128
    assert config.act_order is True
    assert config.bits == 4
    assert config.num_moe_layers == 26  # 27 layers, first one dense
    plain = load_model_config("deepseek-v2-lite")
    assert (
        plain.quant_method is None
        and plain.act_order is False
        and plain.group_size is None
    )


def test_nemotron_3_nano_is_relu2_non_gated() -> None:
    config = load_model_config("nemotron-3-nano-30b-a3b")
    assert config.activation == "relu2"
    assert config.is_gated is False
    # hybrid_override_pattern: 23 E (MoE), 23 M (Mamba), 6 * (attention).
    assert (config.num_hidden_layers, config.num_moe_layers) == (52, 23)


def test_dbrx_nested_ffn_config() -> None:
    config = load_model_config("dbrx")
    assert (
        config.hidden_size,
        config.intermediate_size,
        config.num_experts,
        config.num_experts_per_tok,
    ) == (
        6144,
        10752,
        16,
        4,
    )
    assert config.num_hidden_layers == 40
    assert config.activation == "silu"


def test_glm_4_5_air_first_layer_dense() -> None:
    config = load_model_config("glm-4.5-air")
    assert (config.num_hidden_layers, config.num_moe_layers) == (46, 45)


def test_bundled_name_is_case_insensitive() -> None:
    assert load_model_config("MiniMax-M2") == load_model_config("minimax-m2")


# ---------------------------------------------------------------------------
# Aliases and sub-configs


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(mixtral_like(), id="mixtral"),
        pytest.param(
            {
                "hidden_size": 64,
                "intermediate_size": 999,
                "moe_intermediate_size": 96,
                "n_routed_experts": 4,
                "num_experts_per_tok": 2,
                "num_hidden_layers": 3,
                "hidden_act": "silu",
            },
            id="deepseek",
        ),
        pytest.param(
            {
                "d_model": 64,
                "n_layers": 3,
                "ffn_config": {
                    "ffn_hidden_size": 96,
                    "moe_num_experts": 4,
                    "moe_top_k": 2,
                    "ffn_act_fn": {"name": "silu"},
                },
            },
            id="dbrx",
        ),
        pytest.param(
            {
                "model_type": "wrapper",
                "text_config": {
                    "hidden_size": 64,
                    "intermediate_size": 999,
                    "moe_intermediate_size": 96,
                    "num_experts": 4,
                    "top_k_experts": 2,
                    "num_hidden_layers": 3,
                    "hidden_activation": "silu",
                },
            },
            id="text_config",
        ),
        pytest.param(
            {
                "llm_config": {
                    "hidden_size": 64,
                    "moe_intermediate_size": 96,
                    "num_experts": 4,
                    "num_experts_per_token": 2,
                    "num_hidden_layers": 3,
                    "hidden_act": "swiglu",
                },
            },
            id="llm_config",
        ),
    ],
)
def test_aliases_resolve_to_same_shape(tmp_path: Path, config: dict) -> None:
    loaded = load_model_config(write_config(tmp_path, config))
    assert (
        loaded.hidden_size,
        loaded.intermediate_size,
        loaded.num_experts,
        loaded.num_experts_per_tok,
    ) == (
        64,
        96,
        4,
        2,
    )
    assert loaded.num_hidden_layers == loaded.num_moe_layers == 3
    assert loaded.activation == "silu"


def test_subconfig_wins_over_top_level(tmp_path: Path) -> None:
    config = {"hidden_size": 1, "text_config": mixtral_like()}
    assert load_model_config(write_config(tmp_path, config)).hidden_size == 64


def test_null_counts_as_absent(tmp_path: Path) -> None:
    config = mixtral_like(num_experts=None)  # num_local_experts still there
    assert load_model_config(write_config(tmp_path, config)).num_experts == 4


@pytest.mark.parametrize(
    ("hidden_act", "activation", "is_gated"),
    [
        ("silu", "silu", True),
        ("swiglu", "silu", True),
        ("gelu", "gelu", True),
        ("gelu_pytorch_tanh", "gelu_tanh", True),
        ("gelu_tanh", "gelu_tanh", True),
        ("gelu_new", "gelu_tanh", True),
        ("relu2", "relu2", False),
        ("swigluoai", "swigluoai", True),
    ],
)
def test_activation_mapping(
    tmp_path: Path, hidden_act: str, activation: str, is_gated: bool
) -> None:
    loaded = load_model_config(
        write_config(tmp_path, mixtral_like(hidden_act=hidden_act))
    )
    assert (loaded.hidden_act, loaded.activation, loaded.is_gated) == (
        hidden_act,
        activation,
        is_gated,
    )


def test_gpt_oss_detected_by_architecture(tmp_path: Path) -> None:
    config = mixtral_like(architectures=["GptOssForCausalLM"])
    assert load_model_config(write_config(tmp_path, config)).activation == "swigluoai"


def test_folder_with_config_json(tmp_path: Path) -> None:
    folder = tmp_path / "my-moe"
    folder.mkdir()
    write_config(folder, mixtral_like())
    loaded = load_model_config(folder)
    assert loaded.name == "my-moe"
    assert loaded.dtype is None


def test_parse_model_config_from_dict() -> None:
    loaded = parse_model_config(
        mixtral_like(torch_dtype="float16", _name_or_path="org/model")
    )
    assert (loaded.name, loaded.dtype) == ("org/model", "float16")


# ---------------------------------------------------------------------------
# MoE layer counting


def test_qwen_sparse_step_and_mlp_only_layers(tmp_path: Path) -> None:
    # 8 layers; MoE where (i + 1) % 2 == 0 -> 1, 3, 5, 7; minus mlp_only 3 -> 3 layers.
    config = mixtral_like(
        num_hidden_layers=8, decoder_sparse_step=2, mlp_only_layers=[3, 4]
    )
    assert load_model_config(write_config(tmp_path, config)).num_moe_layers == 3


def test_deepseek_first_dense_and_freq(tmp_path: Path) -> None:
    # 10 layers, i >= 3 and i % 2 == 0 -> 4, 6, 8.
    config = mixtral_like(
        num_hidden_layers=10, first_k_dense_replace=3, moe_layer_freq=2
    )
    assert load_model_config(write_config(tmp_path, config)).num_moe_layers == 3


def test_layers_block_type_words(tmp_path: Path) -> None:
    config = mixtral_like(
        num_hidden_layers=4, layers_block_type=["mamba", "moe", "attention", "moe"]
    )
    assert load_model_config(write_config(tmp_path, config)).num_moe_layers == 2


def test_pattern_length_mismatch_is_an_error(tmp_path: Path) -> None:
    config = mixtral_like(num_hidden_layers=4, hybrid_override_pattern="MEM")
    with pytest.raises(
        ModelConfigError, match="describes 3 layers but num_hidden_layers is 4"
    ):
        load_model_config(write_config(tmp_path, config))


def test_enable_moe_block_false_means_no_moe_layers(tmp_path: Path) -> None:
    config = mixtral_like(enable_moe_block=False)
    assert load_model_config(write_config(tmp_path, config)).num_moe_layers == 0


# ---------------------------------------------------------------------------
# Quantization


def test_compressed_tensors_groups_go_through_the_run_reader(tmp_path: Path) -> None:
    """quantization_config is read by layoutc run's reader (checkpoints/quant/config.py): an act-ordered
    int4 compressed-tensors group (a weight_g_idx) is not a declared scheme there (symmetric W4A16 without
    actorder is: quant/wna16.py), so the model keeps the reader's coded refusal naming the actorder (audit
    shows it) instead of raising."""
    weights = {
        "num_bits": 4,
        "group_size": 128,
        "strategy": "group",
        "actorder": "group",
        "type": "int",
    }
    config = mixtral_like(
        quantization_config={
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {"group_0": {"weights": weights, "targets": ["Linear"]}},
        }
    )
    loaded = load_model_config(write_config(tmp_path, config))
    assert (loaded.quant_method, loaded.group_size, loaded.quant_scheme) == ("compressed-tensors", None, None)
    assert loaded.quant_error is not None and loaded.quant_error[0] == "LR150"
    assert "int 4-bit, strategy 'group'" in loaded.quant_error[1] and "actorder 'group'" in loaded.quant_error[1]


def test_compressed_tensors_fp8_channel_is_the_readers_scheme(tmp_path: Path) -> None:
    weights = {"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": False, "symmetric": True}
    config = mixtral_like(quantization_config={
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"group_0": {"weights": weights, "targets": ["Linear"]}}})
    loaded = load_model_config(write_config(tmp_path, config))
    assert loaded.quant_scheme is not None and loaded.quant_scheme.name == "fp8_channel"
    assert (loaded.bits, loaded.block_size, loaded.quant_error) == (8, None, None)


def test_compressed_tensors_groups_without_targets_are_the_readers_error(tmp_path: Path) -> None:
    config = mixtral_like(
        quantization_config={
            "quant_method": "compressed-tensors",
            "config_groups": {
                "group_0": {"weights": {"num_bits": 4, "group_size": 128}},
                "group_1": {"weights": {"num_bits": 4, "group_size": 64}},
            },
        }
    )
    loaded = load_model_config(write_config(tmp_path, config))
    assert loaded.quant_error is not None and loaded.quant_error[0] == "LR151"
    assert "targets" in loaded.quant_error[1]


def test_per_channel_gptq(tmp_path: Path) -> None:
    config = mixtral_like(
        quantization_config={"quant_method": "gptq", "bits": 4, "group_size": -1}
    )
    loaded = load_model_config(write_config(tmp_path, config))
    assert (loaded.group_size, loaded.act_order) == (-1, False)


def test_bad_block_size_is_the_readers_error(tmp_path: Path) -> None:
    config = mixtral_like(
        quantization_config={"quant_method": "fp8", "weight_block_size": [128, 0]}
    )
    loaded = load_model_config(write_config(tmp_path, config))
    assert loaded.quant_error is not None and loaded.quant_error[0] == "LR151"
    assert "weight_block_size" in loaded.quant_error[1]


# ---------------------------------------------------------------------------
# Errors


def test_error_is_a_value_error() -> None:
    assert issubclass(ModelConfigError, ValueError)


def test_missing_field_lists_file_and_every_alias(tmp_path: Path) -> None:
    config = mixtral_like()
    del config["num_local_experts"]
    path = write_config(tmp_path, config)
    with pytest.raises(ModelConfigError) as caught:
        load_model_config(path)
    message = str(caught.value)
    assert str(path) in message
    assert "num_experts" in message
    for alias in NUM_EXPERTS_ALIASES:
        assert alias in message
    assert caught.value.field == "num_experts"
    assert caught.value.aliases == NUM_EXPERTS_ALIASES


def test_missing_intermediate_names_subconfigs_searched(tmp_path: Path) -> None:
    config = {
        "text_config": {
            k: v for k, v in mixtral_like().items() if k != "intermediate_size"
        }
    }
    with pytest.raises(ModelConfigError) as caught:
        load_model_config(write_config(tmp_path, config))
    message = str(caught.value)
    for alias in INTERMEDIATE_SIZE_ALIASES:
        assert alias in message
    assert "text_config" in message and "top level" in message


def test_missing_activation_lists_aliases(tmp_path: Path) -> None:
    config = mixtral_like()
    del config["hidden_act"]
    with pytest.raises(ModelConfigError) as caught:
        load_model_config(write_config(tmp_path, config))
    for alias in HIDDEN_ACT_ALIASES:
        assert alias in str(caught.value)


def test_unknown_activation_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="unsupported activation 'tanhshrink'"):
        load_model_config(write_config(tmp_path, mixtral_like(hidden_act="tanhshrink")))


@pytest.mark.parametrize("value", [True, 0, -4, "64", 64.0])
def test_bad_size_value_is_an_error(tmp_path: Path, value: object) -> None:
    with pytest.raises(ModelConfigError, match="hidden_size"):
        load_model_config(write_config(tmp_path, mixtral_like(hidden_size=value)))


def test_top_k_above_experts_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(
        ModelConfigError, match="5 experts per token but only 4 experts"
    ):
        load_model_config(write_config(tmp_path, mixtral_like(num_experts_per_tok=5)))


def test_bad_json_reports_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(
        '{\n  "hidden_size": 64,\n  "num_experts": ,\n}\n', encoding="utf-8"
    )
    with pytest.raises(ModelConfigError) as caught:
        load_model_config(path)
    assert f"{path}:3:18: invalid JSON" in str(caught.value)


def test_non_object_json_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ModelConfigError, match="expected a JSON object"):
        load_model_config(path)


def test_unknown_name_suggests_close_name() -> None:
    with pytest.raises(ModelConfigError) as caught:
        load_model_config("gemma-4-26b")
    message = str(caught.value)
    assert "did you mean 'gemma-4-26b-a4b'" in message
    for name in bundled_model_names():
        assert name in message


def test_unknown_name_fragment_suggests_by_substring() -> None:
    with pytest.raises(ModelConfigError, match=r"did you mean .*'mixtral-8x7b'"):
        load_model_config("mixtral")


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "config.json"
    with pytest.raises(ModelConfigError, match="no such file"):
        load_model_config(missing)


def test_module_imports_nothing_heavy() -> None:
    # In a fresh interpreter, so nothing another test imported can mask a failure: the
    # package loads only itself (and the empty layoutc, layoutc.tools packages above it), and
    # the standard-library-only vocabulary it names activations by (layoutc.runtime.vocab), and
    # the standard-library-only family table it reads its keys and layer rules from (issue 24:
    # one table; checkpoints.formats with its layout words, layoutc.runtime.algebra), and the
    # standard-library-only quantization reader `layoutc run` uses (issue 22: one reader;
    # importing checkpoints.quant loads the header reader its package imports), and the record,
    # error and bounded JSON reader both readers share (issue 41: moved below both readers).
    table = ("layoutc.runtime.algebra", "layoutc.tools.checkpoints", "layoutc.tools.checkpoints.errors",
             "layoutc.tools.checkpoints.families", "layoutc.tools.checkpoints.formats",
             "layoutc.tools.checkpoints.checkpoint_format", "layoutc.tools.checkpoints.jsonread",
             "layoutc.tools.checkpoints.moeconfig",
             "layoutc.tools.checkpoints.header", "layoutc.tools.checkpoints.reader",
             "layoutc.tools.checkpoints.quant", "layoutc.tools.checkpoints.quant.config",
             "layoutc.tools.checkpoints.quant.scheme", "layoutc.tools.checkpoints.quant.validate",
             "layoutc.tools.checkpoints.quant.wna16")  # standard library only: the reader's W4A16 / auto-round part
    code = (
        "import sys; import layoutc.tools.hfconfig; "
        "heavy = ('torch', 'numpy', 'z3', 'jinja2', 'lark'); "
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in heavy "
        "or (m.startswith('layoutc') and m not in ('layoutc', 'layoutc.tools', 'layoutc.runtime', "
        f"'layoutc.runtime.vocab', *{table!r}) "
        "and not m.startswith('layoutc.tools.hfconfig')))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


# ---- issue 16: provenance and bounded reading -------------------------------------


def test_sources_name_the_key_each_field_came_from() -> None:
    from layoutc.tools.hfconfig import load_model_config as load

    dbrx = load("dbrx")
    assert dbrx.source_of("intermediate_size") == "ffn_config.ffn_hidden_size"
    assert dbrx.source_of("num_experts") == "ffn_config.moe_num_experts"
    assert load("nemotron-3-nano-30b-a3b").source_of("num_moe_layers") == "hybrid_override_pattern"
    assert "first_k_dense_replace" in (load("deepseek-v3").source_of("num_moe_layers") or "")
    gpt = load("gpt-oss-120b")
    assert (gpt.swiglu_limit, gpt.source_of("swiglu_limit")) == (7.0, "swiglu_limit")
    assert gpt.swiglu_alpha == 1.702 and "the config states no swiglu_alpha" in (gpt.source_of("swiglu_alpha") or "")
    assert load("mixtral-8x7b").swiglu_limit is None


@pytest.mark.parametrize("text, needle", [
    ("[" * 65 + "]" * 65, "nested 65 levels"),
    ('{"a": ' + "1" * 31 + "}", "31 digits"),
    ('{"a": NaN}', "NaN is not a JSON number"),
    ('{"a": -Infinity}', "-Infinity is not a JSON number"),
])
def test_json_limits(tmp_path: Path, text: str, needle: str) -> None:
    from layoutc.tools.hfconfig import ModelConfigError
    from layoutc.tools.hfconfig import load_model_config as load

    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ModelConfigError, match=needle):
        load(str(path))


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path: Path) -> None:
    from layoutc.tools.hfconfig import load_model_config as load

    raw = json.loads((Path(__file__).resolve().parents[2] / "layoutc" / "tools" / "models" / "mixtral-8x7b.json").read_text())
    raw["note"] = "[" * 1000 + '\\"{' * 100
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert load(str(path)).num_experts == 8


def test_swiglu_limit_must_be_a_finite_number() -> None:
    from layoutc.tools.hfconfig import ModelConfigError

    raw = {"hidden_size": 64, "intermediate_size": 64, "num_local_experts": 8, "num_experts_per_tok": 2,
           "num_hidden_layers": 2, "hidden_act": "silu", "swiglu_limit": "seven"}
    with pytest.raises(ModelConfigError, match="swiglu_limit"):
        parse_model_config(raw)


def test_fixed_activation_when_the_config_has_no_hidden_act(tmp_path: Path) -> None:
    """LFM2-MoE's config carries no hidden_act (its experts hard-code F.silu): the stated
    default is used and named, while another family without hidden_act is still refused."""
    config = mixtral_like(model_type="lfm2_moe")
    del config["hidden_act"]
    loaded = load_model_config(write_config(tmp_path, config))
    assert (loaded.hidden_act, loaded.activation) == ("silu", "silu")
    config["model_type"] = "mixtral"
    with pytest.raises(ModelConfigError, match="missing hidden_act"):
        load_model_config(write_config(tmp_path, config))


@pytest.mark.transformers
def test_fixed_activations_agree_with_transformers() -> None:
    """Each FIXED_ACTIVATIONS entry against transformers' own code: the config class has no
    hidden_act, and the experts module's act_fn is the stated activation."""
    import importlib

    import torch.nn.functional as F
    import transformers

    from layoutc.tools.hfconfig.keys import FIXED_ACTIVATIONS

    functions = {"silu": F.silu}
    for model_type, (activation, _) in FIXED_ACTIVATIONS.items():
        config = transformers.AutoConfig.for_model(model_type)
        assert getattr(config, "hidden_act", None) is None, model_type
        modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
        experts = next(getattr(modeling, n) for n in dir(modeling) if n.endswith("Experts"))
        assert experts(config).act_fn is functions[activation], model_type


# ---------------------------------------------------------------------------
# dtype: transformers builds run's reference with it (red team F5: a list was an IndexError, LR199)


@pytest.mark.parametrize(
    ("overrides", "where"),
    [
        ({"dtype": ["bfloat16"]}, "dtype = ['bfloat16']"),
        ({"torch_dtype": 16}, "torch_dtype = 16"),
        ({"text_config": {"dtype": {"a": "bfloat16"}}}, "text_config.dtype"),
    ],
)
def test_a_dtype_that_is_not_a_name_is_refused(overrides: dict, where: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        parse_model_config(mixtral_like(**overrides), source="c.json")
    assert caught.value.field == "dtype" and where in str(caught.value), str(caught.value)
    assert parse_model_config(mixtral_like(dtype="bfloat16", torch_dtype=None)).dtype == "bfloat16"


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"])
def test_runs_config_reader_refuses_a_dtype_that_is_not_a_name(key: str) -> None:
    from layoutc.tools.checkpoints.formats import FormatError, describe

    config = {"model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 32, "num_experts": 4,
              "num_experts_per_tok": 2, "num_hidden_layers": 2, "hidden_act": "silu"}
    assert describe(config | {key: "bfloat16"}).dtype == "bfloat16"
    with pytest.raises(FormatError) as caught:
        describe(config | {key: ["bfloat16"]})
    assert caught.value.code == "LR102" and f"{key} must be a dtype name" in str(caught.value), str(caught.value)
