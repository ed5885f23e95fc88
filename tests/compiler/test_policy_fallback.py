"""`policy fallback NAME`: an unadmitted configuration gives a visible, logged fallback plan."""

from __future__ import annotations

import logging

import pytest
import torch

from layoutc.cli import main
from tests.conftest import ROOT
from tests.support.loading import load_generated


@pytest.fixture(scope="module")
def fallback_module(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    text = (ROOT / "contracts" / "vllm_cpu_grouped_gemm.moe").read_text()
    text = text.replace("contract vllm_cpu_grouped_gemm", "contract cpu_with_fallback")
    text = text.replace("policy error", "policy fallback torch_loop")
    folder = tmp_path_factory.mktemp("fallback")
    path = folder / "cpu_with_fallback.moe"
    path.write_text(text)
    assert main(["compile", str(path), "--out", str(folder / "out")]) == 0
    return load_generated(folder / "out", "cpu_with_fallback")


def test_unadmitted_config_falls_back_visibly(fallback_module, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    m = fallback_module
    with caplog.at_level(logging.WARNING):
        plan = m.plan(num_experts=4, hidden_size=100, intermediate_size=704, tp_size=4, isa="vec",
                      activation="silu", dtype="bfloat16")
    assert plan.supported is False
    assert "hidden_size must be a multiple" in plan.reason and "cpu_with_fallback.moe:" in plan.reason
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "falling back to torch_loop" in warnings[0].getMessage()
    # nothing downstream silently uses an unsupported plan
    with caplog.at_level(logging.WARNING), pytest.raises(m.LayoutContractError, match="not supported"):
        m.pad_w13(torch.zeros(4, 352, 100), plan)
    # the plan checker re-derives the plan with plan() itself, which logs nothing then
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_well_formedness_still_raises_under_fallback(fallback_module) -> None:  # type: ignore[no-untyped-def]
    m = fallback_module
    with pytest.raises(m.LayoutContractError, match="split evenly"):
        m.plan(num_experts=4, hidden_size=128, intermediate_size=705, tp_size=4, isa="vec", activation="silu",
               dtype="bfloat16")


def test_admitted_config_is_supported(fallback_module) -> None:  # type: ignore[no-untyped-def]
    plan = fallback_module.plan(num_experts=4, hidden_size=128, intermediate_size=704, tp_size=4, isa="vec",
                                activation="silu", dtype="bfloat16")
    assert plan.supported and plan.reason is None
