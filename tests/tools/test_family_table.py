"""One family table (issue 24 item 1): audit, run, the proposer, the TP runner and the vLLM
plugin read layoutc.tools.checkpoints.{formats,families}, and which layers are MoE agrees
with transformers' own decoder layers (the oracle: which layers of a model built from the
config hold an `experts` module)."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from layoutc.tools.checkpoints import families
from layoutc.tools.checkpoints.formats import FORMATS, GENERIC, FormatError, describe, swiglu_params
from layoutc.tools.hfconfig import keys, layers, parse_model_config

ROOT = Path(__file__).resolve().parents[2]


def test_audit_reads_the_generic_entry_and_holds_no_second_copy() -> None:
    assert keys.NUM_EXPERTS_ALIASES == GENERIC.num_experts == families.GENERIC_KEYS["num_experts"]
    assert GENERIC.top_k == keys.NUM_EXPERTS_PER_TOK_ALIASES and {"moe_topk", "moe_k"} <= set(GENERIC.top_k)
    assert FORMATS["gpt_oss"].swiglu_defaults[0] == keys.GPT_OSS_SWIGLU_ALPHA  # type: ignore[index]
    for mod in (keys, layers):
        src = inspect.getsource(mod)
        for literal in ('"n_routed_experts"', '"first_k_dense_replace"', '"expert_layer_period"', "= 1.702"):
            assert literal not in src, (mod.__name__, literal)


def test_hunyuan_and_ernie_top_k_spellings_read_by_audit() -> None:
    base = {"hidden_size": 64, "moe_intermediate_size": 32, "num_experts": 4, "num_hidden_layers": 2,
            "hidden_act": "silu"}
    assert parse_model_config({**base, "moe_topk": 2}).num_experts_per_tok == 2
    assert parse_model_config({**base, "moe_k": 3}).num_experts_per_tok == 3


def test_gpt_oss_without_swiglu_alpha_takes_the_default() -> None:
    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 64, "num_local_experts": 4,
           "intermediate_size": 64, "num_experts_per_tok": 2, "swiglu_limit": 5.0}
    moe = describe(cfg)
    assert (moe.swiglu_alpha, moe.swiglu_limit) == (1.702, 5.0)
    del cfg["swiglu_limit"]
    assert describe(cfg).swiglu_limit == 7.0
    assert swiglu_params({"model_type": "mixtral"}) is None
    with pytest.raises(FormatError, match="swiglu_limit"):
        swiglu_params({"model_type": "gpt_oss", "swiglu_limit": "seven"})


def test_gpt_oss_defaults_are_transformers_own() -> None:
    transformers = pytest.importorskip("transformers")
    hf = transformers.GptOssConfig()
    assert FORMATS["gpt_oss"].swiglu_defaults == (hf.swiglu_alpha, hf.swiglu_limit)
    released = {k: v for k, v in hf.to_dict().items() if k != "swiglu_alpha"}  # as gpt-oss-120b's config.json
    assert swiglu_params(released) == (hf.swiglu_alpha, hf.swiglu_limit)
    src = inspect.getsource(transformers.models.gpt_oss.modeling_gpt_oss.GptOssExperts.__init__)
    assert "config.swiglu_alpha" in src and "config.swiglu_limit" in src


def test_the_plugin_reads_the_model_swiglu_through_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("vllm")
    import vllm.config

    from layoutc.tools.vllm_plugin import hook

    hf = transformers.GptOssConfig(swiglu_limit=6.5)
    monkeypatch.setattr(vllm.config, "get_current_vllm_config_or_none",
                        lambda: SimpleNamespace(model_config=SimpleNamespace(hf_config=hf)))
    assert hook.model_swiglu() == (1.702, 6.5)
    moe = SimpleNamespace(swiglu_alpha=None, swiglu_limit=None)
    assert hook._swiglu(moe, "swigluoai") == (1.702, 6.5)
    assert hook._swiglu(moe, "silu") == (None, None)
    monkeypatch.setattr(vllm.config, "get_current_vllm_config_or_none", lambda: None)
    assert hook.model_swiglu() == (None, None)


def _sizes(**extra: Any) -> dict[str, Any]:
    from tests.support.family_models import SIZES

    return {**SIZES, **extra}


# (model_type, config overrides): one per layer rule, dense layers among the MoE layers
RULE_CASES = [
    ("qwen2_moe", {"num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [3]}),
    ("deepseek_v3", {"num_hidden_layers": 5, "first_k_dense_replace": 2}),
    ("ernie4_5_moe", {"num_hidden_layers": 6, "moe_layer_start_index": 1, "moe_layer_interval": 2}),
    ("jamba", {"num_hidden_layers": 5, "expert_layer_period": 2, "expert_layer_offset": 1}),
    ("jamba", {"num_hidden_layers": 6, "expert_layer_period": 3, "expert_layer_offset": 2}),
    ("lfm2_moe", {"num_hidden_layers": 4, "num_dense_layers": 2,
                  "layer_types": ["full_attention", "conv", "full_attention", "conv"]}),
]


@pytest.mark.transformers
@pytest.mark.parametrize("model_type, extra", RULE_CASES, ids=[f"{m}-{i}" for i, (m, _) in enumerate(RULE_CASES)])
def test_moe_layers_agree_with_transformers_decoder_layers(model_type: str, extra: dict[str, Any]) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(model_type, **_sizes(**extra))
    model = transformers.AutoModelForCausalLM.from_config(config)
    decoder = next(m for name, m in model.named_modules() if name.endswith(("model.layers", "blocks"))
                   and hasattr(m, "__len__"))
    truth = tuple(i for i, layer in enumerate(decoder) if any(n.endswith("experts") for n, _ in layer.named_modules()))
    assert 0 < len(truth) < len(decoder)  # dense layers among the MoE layers
    raw = config.to_dict()
    # LFM2-MoE's config has no activation key (Lfm2MoeExperts fixes silu): audit needs one
    assert parse_model_config({"hidden_act": "silu", **raw}).num_moe_layers == len(truth)  # audit
    fmt = FORMATS.get(model_type)
    rule = fmt.moe_layers if fmt is not None else "generic"
    assert isinstance(rule, str)
    assert families.moe_layers_by_rule(rule, raw, len(decoder))[0] == truth  # run
    if fmt is not None:
        assert describe(raw).moe_layers == truth


@pytest.mark.parametrize("cfg, want", [
    ({"hybrid_override_pattern": "MEM*E"}, (1, 4)),
    ({"layers_block_type": ["mamba", "moe", "attention", "moe", "moe"]}, (1, 3, 4)),
    ({"enable_moe_block": False}, ()),
    ({"model_type": "jamba"}, (1, 3)),
    ({"num_dense_layers": 2}, (2, 3, 4)),
    ({"first_k_dense_replace": 1, "decoder_sparse_step": 2}, (1, 3)),
    ({}, (0, 1, 2, 3, 4)),
])
def test_generic_layer_rules(cfg: dict[str, Any], want: tuple[int, ...]) -> None:
    assert families.generic_moe_layers(cfg, 5)[0] == want


@pytest.mark.parametrize("cfg, needle", [
    ({"hybrid_override_pattern": "ME"}, "describes 2 layers"),
    ({"expert_layer_period": 2, "expert_layer_offset": 2}, "must be smaller"),
    ({"decoder_sparse_step": 0}, "decoder_sparse_step"),
    ({"mlp_only_layers": [9]}, "mlp_only_layers"),
])
def test_generic_layer_rules_refuse_bad_keys(cfg: dict[str, Any], needle: str) -> None:
    with pytest.raises(FormatError, match=needle) as info:
        families.generic_moe_layers(cfg, 5)
    assert info.value.code == "LR102"


# ---- docs/formats.md: the table generated from FORMATS, the worked examples load --------


def test_docs_family_table_is_generated_from_the_table() -> None:
    from layoutc.tools.checkpoints.formats import DOC_MARKERS, families_markdown

    page = (ROOT / "docs" / "formats.md").read_text()
    start, end = page.index(DOC_MARKERS[0]) + len(DOC_MARKERS[0]) + 1, page.index(DOC_MARKERS[1])
    assert page[start:end] == families_markdown(), (
        "docs/formats.md's family table differs from FORMATS: paste the output of python -c "
        "'from layoutc.tools.checkpoints.formats import families_markdown; print(families_markdown(), end=\"\")' "
        "between the markers")
    for name in FORMATS:
        assert f"| {name} |" in page[start:end]


def test_drift_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from layoutc.tools.checkpoints import formats

    before = formats.families_markdown()
    monkeypatch.setitem(formats.FORMATS, "mixtral", replace(FORMATS["mixtral"], router_weight="input"))
    assert formats.families_markdown() != before


def _json_examples() -> list[dict[str, Any]]:
    import json
    import re

    page = (ROOT / "docs" / "formats.md").read_text()
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", page, flags=re.S)]


def test_docs_worked_examples_are_valid_format_files(tmp_path: Path) -> None:
    import json

    from layoutc.tools.checkpoints.formats import load_format_file

    examples = _json_examples()
    assert {e["model_type"] for e in examples} >= {"olmoe", "ernie4_5_moe", "dbrx"}
    for i, example in enumerate(examples):
        path = tmp_path / f"{i}.json"
        path.write_text(json.dumps(example))
        fmt = load_format_file(str(path))
        built_in = FORMATS.get(fmt.model_type)
        if built_in is None:
            continue
        # the worked example of a built-in family describes a config as the built-in does
        cfg = {"model_type": fmt.model_type, **_sizes(num_hidden_layers=4, moe_layer_start_index=1,
                                                     moe_layer_interval=2, n_layers=2, d_model=64),
               "ffn_config": {"moe_num_experts": 4, "ffn_hidden_size": 64, "moe_top_k": 2,
                              "ffn_act_fn": {"name": "silu"}}, "hidden_act": "silu"}
        mine, theirs = describe(cfg, fmt), describe(cfg)
        keys = ("moe_layers", "hidden_size", "intermediate_size", "num_experts", "num_experts_per_tok")
        assert [getattr(mine, k) for k in keys] == [getattr(theirs, k) for k in keys]
        assert fmt.names(1, 0) == built_in.names(1, 0)
