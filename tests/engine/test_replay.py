"""bench/replay (docs/replay.md): the row-naming comparison, the verdicts, and the drivers against
the installed vLLM (0.32.0, which has every fix replayed) and against a deliberately end-padding
stand-in, which must be caught with the rows named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
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
@pytest.mark.parametrize(
    "key", ["vllm-nvfp4-endpad", "vllm-nvfp4-gated-alignment", "vllm-fp8-endpad", "vllm-aiter-intermediate-pad"]
)
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


def _fake_cpu_fused_moe_module(end_pad: bool) -> tuple[type, object]:
    """A stand-in for vLLM's cpu_fused_moe module whose CPUFusedMOE pads w13 wrongly ([gate | up | 0])
    when end_pad is set, or not at all; only the names the driver touches."""
    import enum
    from types import ModuleType

    mod = ModuleType("fake_cpu_fused_moe")
    mod.MoEActivation = enum.Enum("MoEActivation", "SILU SWIGLUOAI")  # type: ignore[attr-defined]
    mod.CpuArchEnum = enum.Enum("CpuArchEnum", "X86 ARM")  # type: ignore[attr-defined]
    mod.torch = torch  # type: ignore[attr-defined]
    mod.current_platform = None  # type: ignore[attr-defined]

    class CPUFusedMOE:
        def __init__(self, layer: torch.nn.Module) -> None:
            if end_pad:
                e, _n, h = layer.w13_weight.shape
                w13 = torch.cat([layer.w13_weight.data, layer.w13_weight.new_zeros(e, 32, h)], 1)
                layer.w13_weight = torch.nn.Parameter(w13, requires_grad=False)
                w2 = layer.w2_weight.data
                w2 = torch.cat([w2, w2.new_zeros(*w2.shape[:2], 16)], 2)
                layer.w2_weight = torch.nn.Parameter(w2, requires_grad=False)
            self.isa = "vec"
            self.init_moe_grouped_gemm(layer)

        def init_moe_grouped_gemm(self, layer: torch.nn.Module) -> None:
            raise AssertionError("the driver stands in for the prepack")

        def init_moe_torch(self, layer: torch.nn.Module) -> None:
            raise AssertionError("the driver stands in for the torch path")

    return CPUFusedMOE, mod


def test_cpu_grouped_gemm_driver_names_unpadded_and_end_padded_rows() -> None:
    import layoutc_generated.vllm_cpu_grouped_gemm as gen

    cfg = dict(num_experts=2, hidden_size=64, intermediate_size=704, tp_size=4, isa="vec", activation="silu")
    cls, mod = _fake_cpu_fused_moe_module(end_pad=False)
    bad, _ = drivers.cpu_fused_moe_init(cls, mod, gen, cfg)  # type: ignore[arg-type]
    assert bad[0].startswith("grouped GEMM admitted at I_pp 176, not a multiple of the 32-wide tile")
    assert bad[1:] == [
        "w13_weight: engine (2, 352, 64) torch.bfloat16, contract (2, 384, 64) torch.bfloat16",
        "w2_weight: engine (2, 64, 176) torch.bfloat16, contract (2, 64, 192) torch.bfloat16",
    ]
    cls, mod = _fake_cpu_fused_moe_module(end_pad=True)
    bad, info = drivers.cpu_fused_moe_init(cls, mod, gen, cfg)  # type: ignore[arg-type]
    assert bad == ["w13_weight: 192 of 384 rows along dim 1 differ: 176..367"]
    assert info == ["I_pp 176: engine path grouped_gemm isa vec, engine I_pp 192, contract grouped GEMM at 192"]
    assert mod.torch is torch and mod.current_platform is None  # type: ignore[attr-defined]


def test_nvfp4_caller_driver_names_the_missing_pad_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in caller asking the 16 alignment (vLLM 0.25's) is caught with its rows; 64 passes."""
    import enum
    from types import ModuleType

    import layoutc_generated.flashinfer_nvfp4_moe as gen

    oracle = ModuleType("fakevllm.model_executor.layers.fused_moe.oracle.nvfp4")
    oracle.NvFp4MoeBackend = enum.Enum("NvFp4MoeBackend", "FLASHINFER_TRTLLM")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, oracle.__name__, oracle)
    mod = ModuleType("fakevllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe")

    def align(w13, w13s, w2, w2s, is_act_and_mul, min_alignment):  # type: ignore[no-untyped-def]
        n = w13.shape[1] // 2
        return w13, w13s, w2, w2s, -(-n // min_alignment) * min_alignment

    mod.align_fp4_moe_weights_for_fi = align  # type: ignore[attr-defined]
    cfg = dict(num_experts=2, hidden_size=256, intermediate_size=704, tp_size=4)
    for alignment, want in ((16, 1), (64, 0)):

        def caller(backend, layer, w13, w13s, _a, _b, w2, w2s, _c, _d, act, k=alignment):  # type: ignore[no-untyped-def]
            return mod.align_fp4_moe_weights_for_fi(w13, w13s, w2, w2s, act, k)

        bad, _ = drivers.fi_nvfp4_caller_alignment(caller, mod, gen, cfg)
        assert len(bad) == want, bad
        if want:
            assert bad[0].startswith("intermediate: engine 176, contract 192: contract pad rows 176..191")
    assert mod.align_fp4_moe_weights_for_fi is align  # type: ignore[attr-defined]


@pytest.mark.conformance
@pytest.mark.slow
@pytest.mark.parametrize("against", ["vllm==0.34.0", "sglang==installed"])
def test_replay_small_mode_in_ci(against: str) -> None:
    """Issue 42: CI runs the replay against vLLM 0.34 (the wheel's Python, fetched by pip into the
    ignored .engines/, shared with the release matrix) and the installed SGLang 0.5.23; every verdict
    must be the expected one (exit 0). A wheel pip cannot fetch is a SKIP that the script names; under CI that is a failure."""
    import os

    if against.startswith("sglang") and not os.environ.get("LAYOUTC_SGLANG_PATH"):
        if os.environ.get("CI"):
            pytest.fail("CI must set LAYOUTC_SGLANG_PATH (README, Environment)")
        pytest.skip("the SGLang replay needs LAYOUTC_SGLANG_PATH (README, Environment)")
    proc = subprocess.run(
        [sys.executable, "bench/replay_bugs.py", "--against", against],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1500,
        check=False,
    )
    text = proc.stdout + proc.stderr
    if "SKIP" in text and not os.environ.get("CI"):
        pytest.skip(f"replay --against {against}: a release could not be fetched or imported:\n{text[-2000:]}")
    assert proc.returncode == 0, text[-4000:]
    assert "SKIP" not in text, text[-4000:]


def _loader_module(stride: str) -> ModuleType:
    """A stand-in engine module whose `FusedMoE` loads a gated w13 / w2 shard the way `stride` says:
    "padded" slices the checkpoint at rank * (padded shard) (the reported bug), "logical" at
    rank * (checkpoint rows / tp) (the fix). Written here from the reports' description, not copied."""
    mod = ModuleType("fake_fused_moe_layer")

    class FusedMoE:
        def _slice(self, loaded: torch.Tensor, dim: int, padded: int) -> torch.Tensor:
            tp = self.moe_config.moe_parallel_config.tp_size  # type: ignore[attr-defined]
            per = padded if stride == "padded" else loaded.shape[dim] // tp
            start = per * self.moe_tp_rank  # type: ignore[attr-defined]
            return loaded.narrow(dim, start, min(per, loaded.shape[dim] - start))

        def _load_w13(self, expert_data, shard_dim, shard_id, loaded_weight):  # type: ignore[no-untyped-def]
            half = expert_data.shape[shard_dim] // 2
            part = self._slice(loaded_weight, shard_dim, half)
            start = 0 if shard_id == "w1" else half
            expert_data.narrow(shard_dim, start, part.shape[shard_dim]).copy_(part)

        def _load_w2(self, expert_data, shard_dim, shard_id, loaded_weight):  # type: ignore[no-untyped-def]
            part = self._slice(loaded_weight, shard_dim, expert_data.shape[shard_dim])
            expert_data.narrow(shard_dim, 0, part.shape[shard_dim]).copy_(part)

    mod.FusedMoE = FusedMoE  # type: ignore[attr-defined]
    return mod


def test_loader_driver_names_the_padded_stride_rows() -> None:
    """vllm#43865 / sglang#32781: a loader slicing at the padded stride is caught rank by rank (its
    neighbour's rows, then a rank past the checkpoint's end that loads nothing, its live rows left
    poisoned); the logical stride matches."""
    import layoutc_generated.aiter_mxfp4_w4a4_moe as gen

    cfg = dict(num_experts=1, hidden_size=256, intermediate_size=768, tp_size=4, activation="silu")
    mod = _loader_module("padded")  # I_pp 192 padded to 256
    bad, info = drivers.moe_loader_stride(mod.FusedMoE._load_w13, mod, gen, cfg)  # type: ignore[attr-defined]
    assert info == ["I 768 at tp 4: I_pp 192 padded 256"]
    assert bad[:3] == [
        "rank 0 w13: 128 of 512 rows along dim 1 differ: 192..255, 448..511",
        "rank 0 w2: 64 of 256 rows along dim 2 differ: 192..255",
        "rank 1 w13: 512 of 512 rows along dim 1 differ: 0..511",
    ]
    assert bad[-2:] == [  # rank 3 starts at row 768, past the checkpoint: it loads nothing
        "rank 3 w13: 384 of 512 rows along dim 1 differ: 0..191, 256..447",
        "rank 3 w2: 192 of 256 rows along dim 2 differ: 0..191",
    ]
    mod = _loader_module("logical")
    assert drivers.moe_loader_stride(mod.FusedMoE._load_w13, mod, gen, cfg)[0] == []  # type: ignore[attr-defined]


def test_aiter_unquantized_driver_checks_the_count_and_the_pad_bytes() -> None:
    """vllm#55368: an unpadded allocation is named with the missing rows; a padded one whose pad is
    not zeroed (torch.empty left as it is) is named by its rows; zeroed per half, it matches."""
    import enum

    import layoutc_generated.aiter_unquantized_moe as gen

    cfg = dict(num_experts=2, hidden_size=64, intermediate_size=704, tp_size=4, activation="silu")
    mod = ModuleType("fake_unquantized")
    mod.UnquantizedMoeBackend = enum.Enum("UnquantizedMoeBackend", "AITER")  # type: ignore[attr-defined]
    bad, _ = drivers.aiter_unquantized_roundup(lambda _b, h, i: (h, i), mod, gen, cfg)
    assert bad == [
        "intermediate_size_per_partition: engine 176, contract 192: I_pp 176 is not a multiple of the CK "
        "2-stage 64-wide tile; contract pad rows 176..191 of each w13 half and w2 k 176..191 missing"
    ]
    pad = lambda _b, h, i: (h, -(-i // 64) * 64)  # noqa: E731
    mod._zero_intermediate_padding = lambda moe, w13, w2: None  # type: ignore[attr-defined]
    bad, _ = drivers.aiter_unquantized_roundup(pad, mod, gen, cfg)
    assert bad == [
        "w13_weight: 32 of 384 rows along dim 1 differ: 176..191, 368..383",
        "w2_weight: 16 of 192 rows along dim 2 differ: 176..191",
    ]

    def zero(moe, w13, w2):  # type: ignore[no-untyped-def]
        i, p = moe.intermediate_size_per_partition_unpadded, moe.intermediate_size_per_partition
        w13[:, i:p].zero_()
        w13[:, p + i :].zero_()
        w2[:, :, i:].zero_()

    mod._zero_intermediate_padding = zero  # type: ignore[attr-defined]
    assert drivers.aiter_unquantized_roundup(pad, mod, gen, cfg)[0] == []


def _fake_pip(wheel_members: dict[str, str]):  # type: ignore[no-untyped-def]
    """A stand-in for `pip download` that writes a wheel holding `wheel_members` into `-d DIR`."""
    import zipfile

    calls: list[list[str]] = []

    def run(cmd, **_kw):  # type: ignore[no-untyped-def]
        calls.append(cmd)
        req = cmd[cmd.index("--only-binary=:all:") + 1]
        name, version = req.split("==")
        dest = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(dest / f"{name}-{version}-py3-none-any.whl", "w") as whl:
            for member, text in wheel_members.items():
                whl.writestr(member, text)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    return run, calls


def test_one_fetcher_unpacks_once_for_the_replay_and_the_release_matrix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/replay/fetch.py is the one wheel fetcher: tests/support/vllm_release.py's folder and fetch are
    its folder and unpack; only Python (and vLLM's JSON) is unpacked, under a `.complete` marker, the
    wheel is deleted, and a second call (the replay after CI's release step) downloads nothing."""
    from bench.replay import fetch
    from tests.support import vllm_release

    monkeypatch.setenv("LAYOUTC_ENGINES_DIR", str(tmp_path))
    run, calls = _fake_pip(
        {"vllm/__init__.py": "", "vllm/a.json": "{}", "vllm/_C.abi3.so": "x", "vllm-0.99.0.dist-info/RECORD": ""}
    )
    monkeypatch.setattr(fetch.subprocess, "run", run)
    where = vllm_release.fetch("0.99.0")
    assert where == vllm_release.folder("0.99.0") == fetch.folder("vllm", "0.99.0") == tmp_path / "vllm-0.99.0"
    assert sorted(p.name for p in where.rglob("*") if p.is_file()) == [".complete", "__init__.py", "a.json"]
    assert not list((tmp_path / "wheels").glob("*.whl"))
    assert fetch.unpacked("vllm==0.99.0") == where and len(calls) == 1
    run, _ = _fake_pip({"sglang/x.py": ""})  # no package __init__: a named failure, nothing left behind
    monkeypatch.setattr(fetch.subprocess, "run", run)
    with pytest.raises(fetch.FetchError, match=r"holds no sglang/__init__\.py"):
        fetch.unpacked("sglang==9.9.9")
    assert not fetch.folder("sglang", "9.9.9").exists()
    with pytest.raises(vllm_release.ReleaseUnavailable, match="pip download"):
        monkeypatch.setattr(
            fetch.subprocess, "run", lambda cmd, **_: subprocess.CompletedProcess(cmd, 1, "", "ERROR: no such version")
        )
        vllm_release.fetch("0.98.0")
    with pytest.raises(fetch.FetchError, match="NAME==VERSION"):
        fetch.unpacked("vllm")


@pytest.mark.conformance
@pytest.mark.slow
def test_installed_vllm_passes_the_loader_and_unquantized_aiter_rows() -> None:
    """The installed vLLM (0.32.0) holds the three fixes (the loader stride, the unquantized AITER round-up,
    the block-FP8 TP-shard pad); the rows run in one child (one import)."""
    import json

    keys = ["vllm-moe-loader-padded-stride", "vllm-aiter-unquantized-intermediate-pad", "vllm-block-fp8-tp-shard-pad"]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.replay.child", ",".join(keys)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    outs = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert [o["bug"] for o in outs] == keys, proc.stderr[-2000:]
    for key, out in zip(keys, outs, strict=True):
        assert out["version"].startswith("0.32"), out
        assert verdict(by_key(key), out) == "PASS", out


_BLOCK_FP8_CHILD = """
import importlib, json, sys
from unittest import mock
importlib.import_module("vllm.model_executor.layers.fused_moe.experts.cpu_moe")
oracle = importlib.import_module("vllm.model_executor.layers.fused_moe.oracle.fp8")
fp8 = importlib.import_module("vllm.model_executor.layers.quantization.fp8")
import layoutc_generated.marlin_moe_fp8 as gen
from bench.replay.drivers import marlin_block_fp8_tp_pad
cfg = dict(num_experts=1, hidden_size=3072, intermediate_size=1536, tp_size=8)
fixed = marlin_block_fp8_tp_pad(fp8.Fp8MoEMethod, fp8, gen, dict(cfg))
with mock.patch.object(oracle, "pad_tp_shard_to_weight_blocks", lambda config, weight_block_size: False):
    buggy = marlin_block_fp8_tp_pad(fp8.Fp8MoEMethod, fp8, gen, dict(cfg))
print(json.dumps({"fixed": fixed, "buggy": buggy}))
"""


@pytest.mark.conformance
@pytest.mark.slow
def test_block_fp8_driver_names_the_rows_a_release_without_the_tp_shard_pad_refuses() -> None:
    """vllm#48173 on the installed vLLM: as released (0.32 pads the TP shard) MiniMax-M2.7's block-FP8
    layer at tp 8 matches marlin_moe_fp8 on every rank; with `pad_tp_shard_to_weight_blocks` taken out
    (what 0.30.0 lacked) the layer is refused and the driver names each rank's rows from the contract."""
    import json

    proc = subprocess.run(
        [sys.executable, "-c", _BLOCK_FP8_CHILD], capture_output=True, text=True, cwd=ROOT, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["fixed"][0] == [], out["fixed"]
    (line,) = out["buggy"][0]
    assert line.startswith("engine refused the layer (ValueError: "), line
    assert "contract loads it at I_pp 256 a rank" in line and "rank 5 1280..1535; ranks 6, 7 only pad" in line, line
