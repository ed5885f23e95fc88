"""One model-config record (issue 41 item 5): `layoutc run`'s reader (checkpoints.formats.describe,
a family's own keys) and `layoutc audit`'s (hfconfig.load_model_config, every family's spellings)
return the same `MoEModelConfig`, and on every bundled config whose family is declared they say
the same thing about the model. Before, run's `ModelMoE` and audit's `MoEModelConfig` were two
records of one model; merged, two disagreements showed (gpt-oss's hidden_act, Qwen1.5-MoE's
norm_topk_prob default).
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from layoutc.tools.checkpoints.formats import FORMATS, GENERIC, describe
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.hfconfig import bundled_model_names, load_model_config

MODELS = Path(__file__).resolve().parents[2] / "layoutc" / "tools" / "models"
#: what only one reader fills, or fills by its own rule (moeconfig.py says which)
READER_OWN = {"name", "format", "text_config", "sources", "group_size", "act_order", "block_size", "quant_method",
              "bits", "quant_scheme", "quant_error"}  # fmt: skip
DECLARED = [n for n in bundled_model_names() if json.loads((MODELS / f"{n}.json").read_text())["model_type"] in FORMATS]


def test_there_is_one_record_class() -> None:
    import layoutc.tools.checkpoints.formats as formats
    import layoutc.tools.hfconfig as hfconfig

    assert hfconfig.MoEModelConfig is MoEModelConfig and not hasattr(formats, "ModelMoE")


@pytest.mark.parametrize("name", DECLARED)
def test_both_readers_agree_on_a_declared_family(name: str) -> None:
    audit = load_model_config(name)
    run = describe(json.loads((MODELS / f"{name}.json").read_text()))
    assert type(audit) is type(run) is MoEModelConfig
    shared = [f.name for f in fields(MoEModelConfig) if f.name not in READER_OWN]
    assert {k: getattr(audit, k) for k in shared} == {k: getattr(run, k) for k in shared}
    assert audit.num_moe_layers == run.num_moe_layers == len(run.moe_layers)
    assert audit.format is GENERIC and run.format is FORMATS[run.format.model_type]


def test_the_declared_families_are_most_of_the_bundled_configs() -> None:
    assert len(DECLARED) >= 10, DECLARED  # the test above is not vacuous
