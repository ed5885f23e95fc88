"""`layoutc run` on a quantized checkpoint runs in the dtype config.json states (issue 45 item 5):
auto-round's GPTQ / AWQ exports write `dtype: float16` while a bfloat16 model's tensors stay
bfloat16 (auto_round 0.16.1 export/utils.py save_model casts float32 tensors only), and vLLM 0.32
runs the config's dtype (config/model.py _get_and_verify_dtype, "auto"). run took the router's
stored dtype (bfloat16) instead.
"""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path
from typing import Any

import pytest

from layoutc.tools.quant_run.runner import config_dtype, model_dtype

ROOT = Path(__file__).resolve().parents[2]


def _stub(config: dict[str, Any], stored: str = "BF16") -> tuple[Any, Any]:
    ckpt = types.SimpleNamespace(config=config,
                                 slice=lambda name: types.SimpleNamespace(get_dtype=lambda: stored))
    moe = types.SimpleNamespace(format=types.SimpleNamespace(router_names=lambda layer: ("router.weight", None)))
    return ckpt, moe


def test_config_dtype_is_read_as_written() -> None:
    assert config_dtype({"dtype": "float16"}) == "float16"
    assert config_dtype({"torch_dtype": "torch.float16"}) == "float16"
    assert config_dtype({"text_config": {"dtype": "bfloat16"}}) == "bfloat16"
    assert config_dtype({"dtype": None}) is None


@pytest.mark.parametrize(("config", "stored", "want"), [
    ({"dtype": "float16"}, "BF16", "float16"),  # auto-round's export: config float16, tensors left bfloat16
    ({"torch_dtype": "float16"}, "BF16", "float16"),
    ({"dtype": "bfloat16"}, "F16", "bfloat16"),
    ({"dtype": "float32"}, "BF16", "bfloat16"),  # vLLM downcasts a float32 config: the stored dtype decides
    ({}, "F32", "float32"),
])
def test_model_dtype_follows_the_config(config: dict[str, Any], stored: str, want: str) -> None:
    ckpt, moe = _stub(config, stored)
    assert model_dtype(ckpt, moe, 0, None) == want
    assert model_dtype(ckpt, moe, 0, "float32") == "float32"  # --dtype wins


@pytest.mark.kernel  # aten::_weight_int4pack_mm_for_cpu
@pytest.mark.transformers
def test_run_takes_float16_from_an_autoround_style_config(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from layoutc.cli import main

    spec = importlib.util.spec_from_file_location("make_checkpoint", ROOT / "examples" / "make_checkpoint.py")
    assert spec is not None and spec.loader is not None
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    folder = tmp_path / "ckpt"
    assert maker.main([str(folder), "--layers", "1", "--experts", "4", "--quant", "gptq4", "--group-size", "64"]) == 0
    config = json.loads((folder / "config.json").read_text())
    assert config["dtype"] == "bfloat16"
    config["dtype"] = "float16"  # as auto-round's auto_gptq export writes it over bfloat16 tensors
    (folder / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    code = main(["run", str(folder), "--tp", "1,2", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert report["dtype"] == "float16", report["dtype"]
    assert code == 0 and [r["result"] for r in report["rows"]] == ["ok", "ok"], report
