"""The family table's schema, `layoutc formats`, and formats proposed from safetensors headers
(issue 24 items 1-3), without transformers: headers are written by hand
(tests/tools/test_run_failfast.py's writer); tests/tools/test_run_families.py runs real families."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from layoutc.tools.checkpoints.formats import FORMATS, FormatError, describe, format_json, load_format_file
from layoutc.tools.checkpoints.propose import propose

H, INTER, E = 64, 96, 4


def _per_expert(prefix: str, path: str, roles: tuple[str, str, str], layers: list[int]) -> dict[str, tuple[int, ...]]:
    gate, up, down = roles
    out: dict[str, tuple[int, ...]] = {}
    for layer in layers:
        base = f"{prefix}{layer}.{path}"
        out[f"{base}gate.weight"] = (E, H)
        for e in range(E):
            out[f"{base}experts.{e}.{gate}.weight"] = (INTER, H)
            out[f"{base}experts.{e}.{up}.weight"] = (INTER, H)
            out[f"{base}experts.{e}.{down}.weight"] = (H, INTER)
    return out


CONFIG = {"model_type": "olmoe_like", "num_hidden_layers": 4, "hidden_size": H, "intermediate_size": INTER,
          "num_experts": E, "num_experts_per_tok": 2, "hidden_act": "silu"}


def test_per_expert_proposal_uses_the_tensors_and_config_keys_by_value() -> None:
    shapes = _per_expert("model.layers.", "mlp.", ("gate_proj", "up_proj", "down_proj"), [1, 3])
    found, why = propose({**CONFIG, "moe_intermediate_size": 7}, shapes)
    assert found and not why
    fmt = found[0]
    assert (fmt.layer_prefix, fmt.experts, fmt.gate, fmt.fused) == \
        ("model.layers.{layer}.", "mlp.experts.", "{e}.gate_proj.weight", False)
    assert fmt.intermediate_size == ("intermediate_size",)  # 7 is not the measured 96
    assert fmt.router == "mlp.gate.weight" and fmt.moe_layers == "tensors"
    assert found[1].gate == fmt.up and found[1].up == fmt.gate  # the other gate/up order, to be proved
    moe = describe(CONFIG, fmt, shapes)
    assert moe.moe_layers == (1, 3) and moe.intermediate_size == INTER


def test_mixtral_style_names_are_proposed() -> None:
    shapes = _per_expert("model.layers.", "block_sparse_moe.", ("w1", "w3", "w2"), [0, 1])
    found, _ = propose(CONFIG, shapes)
    assert found[0].gate == "{e}.w1.weight" and found[0].up == "{e}.w3.weight" and found[0].down == "{e}.w2.weight"


@pytest.mark.parametrize("transposed", [False, True])
def test_fused_proposal_reads_the_orientation_from_the_shapes(transposed: bool) -> None:
    up, down = ((E, H, 2 * INTER), (E, INTER, H)) if transposed else ((E, 2 * INTER, H), (E, H, INTER))
    shapes = {"model.layers.0.moe.input_linear.weight": up, "model.layers.0.moe.output_linear.weight": down,
              "model.layers.0.moe.router.layer.weight": (E, H)}
    found, _ = propose(CONFIG, shapes)
    fmt = found[0]
    assert fmt.fused and fmt.gate_up == "moe.input_linear.weight" and fmt.down == "moe.output_linear.weight"
    assert (fmt.transposed, fmt.down_transposed) == (transposed, transposed)
    assert fmt.router == "moe.router.layer.weight"
    assert {f.gate_up_layout for f in found} == {"halves", "interleave"}


def test_nothing_to_propose_says_what_was_looked_for() -> None:
    found, why = propose(CONFIG, {"model.layers.0.mlp.fc.weight": (INTER, H)})
    assert not found and "experts" in why and "3-D" in why


def test_a_proposal_round_trips_through_a_format_file(tmp_path: Path) -> None:
    shapes = _per_expert("model.layers.", "mlp.", ("gate_proj", "up_proj", "down_proj"), [0])
    fmt = propose(CONFIG, shapes)[0][0]
    path = tmp_path / "f.json"
    path.write_text(json.dumps(format_json(fmt)), encoding="utf-8")
    assert load_format_file(str(path)) == fmt


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_built_in_format_round_trips(tmp_path: Path, name: str) -> None:
    path = tmp_path / "f.json"
    path.write_text(json.dumps(format_json(FORMATS[name])), encoding="utf-8")
    assert load_format_file(str(path)) == FORMATS[name]


@pytest.mark.parametrize(("rule", "config", "want"), [
    ([2, 0], {}, (0, 2)),
    ("moe_layer_interval", {"moe_layer_interval": 2, "moe_layer_start_index": 1}, (1, 3)),
    ("expert_layer_period", {"expert_layer_period": 2, "expert_layer_offset": 1}, (1, 3)),
    ("num_dense_layers", {"num_dense_layers": 2}, (2, 3)),
    ("first_k_dense_replace", {"first_k_dense_replace": 1}, (1, 2, 3)),
])
def test_moe_layer_rules(tmp_path: Path, rule: object, config: dict[str, int], want: tuple[int, ...]) -> None:
    data = {**format_json(FORMATS["qwen3_moe"]), "model_type": "x", "moe_layers": rule,
            "intermediate_size": ["intermediate_size"]}
    path = tmp_path / "f.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert describe({**CONFIG, **config}, load_format_file(str(path))).moe_layers == want


def test_config_keys_under_other_names_and_dotted() -> None:
    config = {"model_type": "dbrx", "n_layers": 2, "d_model": H,
              "ffn_config": {"moe_num_experts": E, "ffn_hidden_size": INTER, "moe_top_k": 2,
                             "ffn_act_fn": {"name": "silu"}}}
    moe = describe(config)
    assert (moe.hidden_size, moe.num_experts, moe.intermediate_size, moe.num_experts_per_tok, moe.activation,
            moe.moe_layers) == (H, E, INTER, 2, "silu", (0, 1))


@pytest.mark.parametrize("bad", [{"moe_layers": "every_other"}, {"moe_layers": [0, 99]},
                                 {"experts_flattened": True, "fused": False}])
def test_bad_schema_values_are_lr103(tmp_path: Path, bad: dict[str, object]) -> None:
    data = {**format_json(FORMATS["qwen3_moe"]), **bad, "intermediate_size": ["intermediate_size"]}
    path = tmp_path / "f.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(FormatError) as info:
        describe(CONFIG, load_format_file(str(path)))
    assert info.value.code == "LR103", info.value


def test_formats_command_lists_every_built_in() -> None:
    from layoutc.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["formats"]) == 0
    for name in FORMATS:
        assert f"  {name} " in out.getvalue(), name
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["formats", "dbrx"]) == 0
    assert json.loads(out.getvalue())["gate"] == "w1"
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert main(["formats", "nope"]) == 2
    assert "LC801" in err.getvalue()


@pytest.mark.parametrize(("config", "want"), [
    ({"model_type": "ernie4_5_moe", "moe_layer_interval": 2, "moe_layer_start_index": 1}, 3),
    ({"model_type": "qwen2_moe", "decoder_sparse_step": 2, "mlp_only_layers": [1]}, 2),
    ({"model_type": "deepseek_v3", "first_k_dense_replace": 3, "n_routed_experts": E}, 3),
])
def test_audit_counts_moe_layers_by_the_family_table(tmp_path: Path, config: dict[str, object], want: int) -> None:
    """audit (layoutc.tools.hfconfig) and run (formats.describe) read one rule per family."""
    from layoutc.tools.hfconfig import load_model_config

    full = {"num_hidden_layers": 6, "hidden_size": H, "moe_intermediate_size": INTER, "num_experts": E,
            "moe_num_experts": E, "num_experts_per_tok": 2, "moe_k": 2, "hidden_act": "silu", **config}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(full), encoding="utf-8")
    audited = load_model_config(str(path))
    assert audited.num_moe_layers == len(describe(full).moe_layers) == want
    assert "family's rule" in dict(audited.sources)["num_moe_layers"]


def test_a_missing_config_key_is_named() -> None:
    shapes = _per_expert("model.layers.", "mlp.", ("gate_proj", "up_proj", "down_proj"), [0])
    config = {k: v for k, v in CONFIG.items() if k != "num_experts_per_tok"}
    assert not propose(config, shapes)[0]
    assert "top_k" in propose(config, shapes)[1]
    assert propose({**config, "moe_topk": 2}, shapes)[0][0].top_k == ("moe_topk",)  # Hunyuan's spelling
