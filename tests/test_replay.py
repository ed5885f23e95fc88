"""bench/replay (docs/replay.md): the row-naming comparison, the verdicts, and the drivers against
the installed vLLM (0.32.0, which has every fix replayed) and against a deliberately end-padding
stand-in, which must be caught with the rows named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.replay import drivers  # noqa: E402
from bench.replay.bugs import BUGS, by_key  # noqa: E402
from bench.replay.compare import diff_rows  # noqa: E402
from bench.replay_bugs import expected, verdict  # noqa: E402


def test_diff_rows_names_the_rows_that_differ() -> None:
    a = torch.zeros(2, 10, 4, dtype=torch.uint8)
    b = a.clone()
    b[1, 3:6, 2] = 1
    b[0, 9, 0] = 2
    assert diff_rows("w", a, b, 1) == ["w: 4 of 10 rows along dim 1 differ: 3..5, 9"]
    assert diff_rows("w", a, a.clone(), 1) == []
    assert diff_rows("w", a, b[:, :9], 1)[0].startswith("w: engine (2, 10, 4)")


def test_diff_rows_compares_bytes_not_values() -> None:
    a = torch.zeros(1, 4, 2, dtype=torch.uint8)
    b = a.clone()
    b[0, 2, 0] = 0x80  # e4m3fn -0.0: equal as a value, not as a byte
    fa, fb = a.view(torch.float8_e4m3fn), b.view(torch.float8_e4m3fn)
    assert diff_rows("s", fa, fb, 1) == ["s: 1 of 4 rows along dim 1 differ: 2"]


def _out(*mismatch: list[str]) -> dict[str, object]:
    return {"results": [{"config": {}, "mismatch": m, "info": []} for m in mismatch]}


def test_verdicts() -> None:
    bug = by_key("vllm-nvfp4-endpad")
    assert verdict(bug, _out(["w: rows"], [], [])) == "CAUGHT"
    assert verdict(bug, _out([], [], [])) == "PASS"
    assert verdict(bug, _out(["w: rows"], [], ["control"])) == "WRONG"
    assert verdict(bug, {"results": [{"config": {}, "error": "TypeError: x"}]}) == "WRONG"
    assert verdict(bug, {"skip": "pip download failed"}) == "SKIP"
    assert expected(bug, "0.28.0", None) == "CAUGHT"
    assert expected(bug, "0.34.0", None) == "PASS"
    aiter = by_key("vllm-aiter-intermediate-pad")
    assert expected(aiter, "0.34.0", None) == "UNMODELED"
    assert expected(aiter, "installed", "0.32.0") == "PASS"
    assert len({b.key for b in BUGS}) == len(BUGS)


def _end_pad(
    w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor, gated: bool, align: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """A stand-in with the reported bug: the fused [gate | up] copied whole, the pad at the end."""
    half = w2.shape[2]
    inter = half * 2
    padded = -(-inter // align) * align

    def grow(t: torch.Tensor, dim: int, size: int) -> torch.Tensor:
        shape = list(t.shape)
        shape[dim] = size
        out = torch.zeros(shape, dtype=torch.uint8)
        out.narrow(dim, 0, t.shape[dim]).copy_(t.view(torch.uint8))
        return out.view(t.dtype)

    return (
        grow(w13, 1, 2 * padded),
        grow(w13_scale, 1, 2 * padded),
        grow(w2, 2, padded // 2),
        grow(w2_scale, 2, padded // 16),
        padded,
    )


def test_nvfp4_driver_catches_an_end_pad_and_names_the_rows() -> None:
    import layoutc_generated.flashinfer_nvfp4_moe as gen

    cfg = dict(num_experts=2, hidden_size=256, intermediate_size=704, tp_size=2)
    bad, info = drivers.fi_nvfp4_align(_end_pad, None, gen, cfg)  # type: ignore[arg-type]
    assert bad == [
        "w13_weight: 384 of 768 rows along dim 1 differ: 352..735",
        "w13_weight_scale: 384 of 768 rows along dim 1 differ: 352..735",
    ]
    assert info == ["I_pp 352 -> engine 384, contract 384"]


@pytest.mark.conformance
@pytest.mark.slow
@pytest.mark.parametrize("key", ["vllm-nvfp4-endpad", "vllm-fp8-endpad", "vllm-aiter-intermediate-pad"])
def test_installed_vllm_has_every_fix(key: str) -> None:
    """The installed vLLM (0.32.0) passes every configuration, the bug ones and the control."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.replay.child", key],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    import json

    out = json.loads(line)
    assert out["version"].startswith("0.32"), out
    assert verdict(by_key(key), out) == "PASS", out
