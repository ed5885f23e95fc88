"""config.json's quantization_config for compressed-tensors pack-quantized int weights (llm-compressor's
W4A16 / W8A16) and auto-round's native format, read as quant/wna16.py declares them: the configs the
packers write (tests/tools/test_quant_packers.py reads the checkpoints themselves), and every variant still
undeclared refused by name (LR150), malformed values (LR151) and skip entries that reach the experts
(LR152). Before issue 45 item 5 every one of these configs was LR150."""

from __future__ import annotations

from typing import Any

import pytest

from layoutc.tools.checkpoints.formats import FormatError
from layoutc.tools.checkpoints.quant.config import read_quantization
from tests.tools.test_quant_formats import _config


def _ct(**weights: Any) -> dict[str, Any]:
    """llm-compressor 0.14.0 model_free_ptq's quantization_config (W4A16 preset), weights edited."""
    w = {
        "num_bits": 4,
        "type": "int",
        "symmetric": True,
        "strategy": "group",
        "group_size": 128,
        "actorder": None,
        "dynamic": False,
        "block_structure": None,
        "observer": None,
    }
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*mlp\\.gate$"],
        "config_groups": {
            "W4A16": {
                "targets": ["Linear"],
                "format": "pack-quantized",
                "weights": w | weights,
                "input_activations": None,
                "output_activations": None,
            }
        },
    }


def _autoround(**extra: Any) -> dict[str, Any]:
    """auto-round 0.16.1's quantization_config (RTN, native format)."""
    return {
        "quant_method": "auto-round",
        "bits": 4,
        "group_size": 128,
        "sym": True,
        "data_type": "int",
        "packing_format": "auto_round:auto_gptq",
        "autoround_version": "0.16.1",
        "extra_config": {".*mlp\\.gate.*": {"bits": 16}},
    } | extra


@pytest.mark.parametrize(
    ("quant", "want"),
    [
        (_ct(), ("ct_wna16_int4", "compressed-tensors", 128)),
        (_ct(group_size=32), ("ct_wna16_int4", "compressed-tensors", 32)),
        (_ct(strategy="channel", group_size=None), ("ct_wna16_int4", "compressed-tensors", -1)),
        (_ct(num_bits=8, strategy="channel", group_size=None), ("ct_wna16_int8", "compressed-tensors", -1)),
        (_ct(num_bits=8), ("ct_wna16_int8", "compressed-tensors", 128)),
        # compressed-tensors' QuantizationArgs (pydantic, lax) reads an integral float as its int
        (_ct(num_bits=4.0), ("ct_wna16_int4", "compressed-tensors", 128)),
        (_ct(num_bits=8.0, strategy="channel", group_size=None), ("ct_wna16_int8", "compressed-tensors", -1)),
        (_autoround(), ("gptq_int4", "auto-round", 128)),
        (_autoround(bits=8, group_size=-1), ("gptq_int8", "auto-round", -1)),
        (_autoround(packing_format=None), ("gptq_int4", "auto-round", 128)),  # vLLM's default packing
    ],
)
def test_packer_configs_read(quant: dict[str, Any], want: tuple[str, str, int]) -> None:
    scheme = read_quantization(_config("qwen3_moe", quant))
    assert scheme is not None and (scheme.name, scheme.method, scheme.group_size) == want
    assert scheme.zero == "implicit" and scheme.zero_point == 1 << (scheme.bits - 1) and type(scheme.bits) is int


def test_a_missing_symmetric_is_compressed_tensors_default() -> None:
    """compressed-tensors 0.17 / 0.19 quantization/quant_args.py QuantizationArgs: `symmetric: bool = True`."""
    quant = _ct()
    del quant["config_groups"]["W4A16"]["weights"]["symmetric"]
    scheme = read_quantization(_config("qwen3_moe", quant))
    assert scheme is not None and scheme.name == "ct_wna16_int4" and scheme.zero == "implicit"


@pytest.mark.parametrize(
    ("quant", "code", "named"),
    [
        (_ct(symmetric=False), "LR150", "asymmetric weights"),
        # compressed-tensors' pydantic reads "false" as False: a string is refused, never read as symmetric
        (_ct(symmetric="false"), "LR151", "symmetric 'false'"),
        (_ct(symmetric=None), "LR151", "symmetric None"),
        (_ct(symmetric=0), "LR151", "symmetric 0"),
        (_ct(actorder="group"), "LR150", "actorder 'group'"),
        (_ct(num_bits=2), "LR150", "int 2-bit"),
        (_ct(num_bits=4.5), "LR151", "num_bits 4.5"),
        (_ct(num_bits=True), "LR151", "num_bits True"),
        (_ct(num_bits="4"), "LR151", "num_bits '4'"),
        (_ct(strategy="tensor"), "LR150", "strategy 'tensor'"),
        (_ct(group_size=0), "LR151", "group_size 0"),
        (
            _ct()
            | {
                "format": "int-quantized",
                "config_groups": {
                    "W8A8": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}
                },
            },
            "LR150",
            "type 'int', 8-bit",
        ),
        (_autoround(packing_format="auto_round:auto_awq"), "LR150", "'auto_round:auto_awq'"),
        (_autoround(data_type="mx_fp"), "LR150", "data_type 'mx_fp'"),
        (_autoround(bits=3), "LR150", "3-bit"),
        (_autoround(group_size="128"), "LR151", "group_size"),
        (_autoround(extra_config={".*experts.*": {"bits": 16}}), "LR152", "'.*experts.*'"),
        (
            _autoround(extra_config={"model.layers.1.mlp.experts.3.down_proj": {"bits": 16}}),
            "LR152",
            "experts.3.down_proj",
        ),
    ],
)
def test_undeclared_and_malformed_are_named(quant: dict[str, Any], code: str, named: str) -> None:
    with pytest.raises(FormatError) as info:
        read_quantization(_config("qwen3_moe", quant))
    assert info.value.code == code and named in str(info.value), str(info.value)
