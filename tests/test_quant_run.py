"""`layoutc run` on local GPTQ / AWQ int4 checkpoints (examples/make_checkpoint.py --quant): the
int4pack kernel from the checkpoint's own codes against transformers' experts module over the
independent dequantizer; float32 makes the comparison tight (the codes pass through exactly)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.kernel  # aten::_weight_int4pack_mm_for_cpu


def _make(out: Path, *flags: str) -> Path:
    subprocess.run([sys.executable, str(ROOT / "examples" / "make_checkpoint.py"), str(out), "--layers", "1",
                    *flags], check=True, capture_output=True)
    return out


@pytest.mark.parametrize("flags", [("--quant", "gptq4", "--group-size", "64"),
                                   ("--quant", "gptq4", "--group-size", "64", "--act-order", "--asym"),
                                   ("--quant", "awq4", "--group-size", "64")])
def test_int4_runs_on_int4pack_at_tp_1_2_4(tmp_path, capsys, flags):
    from layoutc.cli import main

    folder = _make(tmp_path / "ckpt", *flags)
    assert main(["run", str(folder), "--tp", "1,2,4", "--dtype", "float32", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["tp_size"] for r in report["rows"]] == [1, 2, 4]
    for r in report["rows"]:
        assert r["kernel"].startswith("aten::_weight_int4pack_mm_for_cpu")
        assert "dequantizer" in r["reference"] and r["rel_error"] < 1e-5
