"""The SGLang contracts (sglang_cpu_moe, sglang_cpu_fp8_moe, sglang_cpu_mxfp4_moe) against SGLang 0.5.23's own code.

SGLang side, from the sglang 0.5.23 wheel (installed with `pip install --no-deps --target`,
found through LAYOUTC_SGLANG_PATH), called in one child process
(tests/support/conformance/sglang_oracle.py, whose docstring lists what it stubs and why:
`sgl_kernel` and `torchvision`, both device modules, and the model-registry lookup in
`loader._get_quantization_config`):
- padded size: `update_config.adjust_config_with_unaligned_cpu_tp` on a stub model config,
  with SGLang's own `Fp8Config` / `Mxfp4Config` parsed from a checkpoint's quantization_config;
- admission: the config update (which asserts a square block), `Fp8MoEMethod.create_fp8_moe_weight_`
  (whole blocks per rank), and `amx_utils.dim_is_supported` / `dtype_is_supported` (whether
  `_amx_process_weight_after_loading` packs the layer for `fused_experts_cpu`, or leaves it on
  the torch-native path);
- each rank's live rows and pad positions: `FusedMoE._load_w13` / `_load_w2` (CPU padded loading)
  on a stub layer, and `GptOssForCausalLM._load_mxfp4_experts_weights` through
  `FusedMoE.weight_loader` for MXFP4, on index-encoded checkpoints, against layoutc's
  `shard_*` on the same indices.

The sweep: TP degrees 1-16; unquantized (SGLang's 32), block FP8 with blocks 64 and 128, and
MXFP4; INTERMEDIATE x HIDDEN for admission and sizes, ROW_INTERMEDIATE for every rank's row
maps (sizes picked for coverage, below; the lane takes about 75 CPU-seconds). Every
disagreement is in tests/support/conformance/known.py and docs/kernels.md 10.
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.conformance import oracle
from tests.support.conformance.known import KNOWN

pytestmark = [pytest.mark.conformance, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TPS = tuple(range(1, 17))
# Sizes chosen for coverage, not count (each runs at every TP degree 1-16): models' sizes
# (gemma-4's 704, Qwen3-30B-A3B's 768, DeepSeek-V2-Lite's 1408, MiniMax-M2's 1536, gpt-oss's
# 2880), sizes below tp_size x block (32, 96: empty last ranks), and sizes off every block
# (176, 360, 1000: SGLang's ragged FP8 last block, no MXFP4 checkpoint).
INTERMEDIATE = (32, 96, 176, 360, 704, 768, 1000, 1408, 1536, 2880)
# The row maps: fewer sizes (each rank of each TP degree is compared), chosen for short, empty
# and full last ranks at every scheme; 1536 is whole 128-blocks (FP8 block 128's rows).
ROW_INTERMEDIATE = (96, 704, 1000, 1536, 2880)
# hidden sizes: below a tile (16), off the 32-tile or the block (48, 96, 2848: H / 2 off 32),
# whole tiles and blocks (32, 64, 2880, 4096)
HIDDEN = {"none": (16, 48, 64, 2880), "fp8": (64, 96, 2880, 4096), "mxfp4": (32, 64, 2848, 2880)}
SCHEMES = (("none", 32), ("fp8", 64), ("fp8", 128), ("mxfp4", 32))
CONTRACT = {"none": "sglang_cpu_moe", "fp8": "sglang_cpu_fp8_moe", "mxfp4": "sglang_cpu_mxfp4_moe"}
INSTALL = ("pip install --no-deps --target .venv-sglang -r tests/conformance/sglang-requirements.txt, then "
           "LAYOUTC_SGLANG_PATH=.venv-sglang (README, Environment)")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def _sglang_path() -> str:
    """LAYOUTC_SGLANG_PATH when it holds the sglang package; else skip, or under CI fail
    (.ci/run installs it, so a CI run that would skip is broken)."""
    path = os.environ.get("LAYOUTC_SGLANG_PATH", "")
    if path and (Path(path) / "sglang" / "srt" / "configs" / "update_config.py").is_file():
        return str(Path(path).resolve())  # the child process runs from the root, not the caller's cwd
    message = f"the SGLang conformance lane needs the sglang 0.5.23 wheel: {INSTALL}; LAYOUTC_SGLANG_PATH={path!r}"
    if _in_ci():
        pytest.fail(f"CI must run the SGLang conformance lane, not skip it: {message}")
    pytest.skip(message)


def _cases_for_i(I: int, scheme: str) -> bool:
    # a gpt-oss MXFP4 checkpoint is whole 32-value blocks: no other I can be built for the loader
    return scheme != "mxfp4" or I % 32 == 0


def _ask(path: str, cases: list[dict[str, Any]], tmp: Path) -> list[Any]:
    request = tmp / "request.json"
    request.write_text(json.dumps(cases))
    env = {**os.environ, "LAYOUTC_SGLANG_PATH": path, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tests.support.conformance.sglang_oracle", str(request)], env=env,
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    reply = json.loads(done.stdout)
    assert reply["sglang_version"] == "0.5.23"
    return reply["answers"]


@pytest.fixture(scope="module")
def sglang(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """SGLang's answers for the whole sweep, from one child process (one sglang import):
    padded sizes, admission and, for I in ROW_INTERMEDIATE, every rank's row maps."""
    path = _sglang_path()
    grid = [(I, tp, s, b) for (s, b) in SCHEMES for I in INTERMEDIATE for tp in TPS if _cases_for_i(I, s)]
    answers = _ask(path, [dict(kind="config", intermediate_size=I, tp_size=tp, scheme=s, block=b,
                               hidden_sizes=list(HIDDEN[s]), rows=I in ROW_INTERMEDIATE)
                          for I, tp, s, b in grid], tmp_path_factory.mktemp("sglang"))
    out: dict[Any, Any] = {"padded": {}}
    for (I, tp, s, b), answer in zip(grid, answers, strict=True):
        out["padded"][(I, tp, s, b)] = answer["padded"]
        for H in HIDDEN[s] if "amx" in answer else ():
            out[("amx", I, tp, s, b, H)] = answer["amx"][str(H)]
            if s == "fp8":
                out[("fp8_create", I, tp, s, b, H)] = answer["fp8_create"][str(H)]
        if "rows" in answer:
            out[("rows", I, tp, s, b)] = answer["rows"]
        if "scale_rows" in answer:
            out[("scale_rows", I, tp, s, b)] = answer["scale_rows"]
    return out


def _plan(gen: Any, scheme: str, block: int, H: int, I: int, tp: int) -> Any:
    module = gen[CONTRACT[scheme]]
    params: dict[str, Any] = dict(num_experts=1, hidden_size=H, intermediate_size=I, tp_size=tp)
    if scheme == "none":
        params.update(activation="silu", dtype="bfloat16")
    elif scheme == "fp8":
        params.update(block=block, dtype="bfloat16")
    else:
        params.update(swiglu_alpha_milli=1702, swiglu_limit_milli=7000)
    return oracle.plan_or_none(module, **params)


def _sglang_admits(sglang: dict[str, Any], I: int, tp: int, scheme: str, block: int, H: int) -> bool:
    if "error" in sglang["padded"][(I, tp, scheme, block)]:
        return False
    if scheme == "fp8" and sglang[("fp8_create", I, tp, scheme, block, H)] is not None:
        return False
    return bool(sglang[("amx", I, tp, scheme, block, H)])


def _admission_key(scheme: str, block: int, H: int, I: int, sglang_admits: bool, layoutc_admits: bool) -> str:
    if scheme == "fp8" and sglang_admits and not layoutc_admits:
        if I % block != 0 and H % block == 0:
            return "sglang_fp8_ragged_last_block"
        if H % block != 0:
            return "sglang_fp8_hidden_not_block"
    return "unexplained"


def test_admission_and_padded_size_match_sglang(gen, sglang) -> None:  # type: ignore[no-untyped-def]
    """Admission and the padded full and per-rank sizes, every TP degree 1-16, block 32/64/128 and MXFP4."""
    tally = oracle.Tally()
    for (s, b), I, tp in itertools.product(SCHEMES, INTERMEDIATE, TPS):
        if not _cases_for_i(I, s):
            continue
        for H in HIDDEN[s]:
            tally.decisions += 1
            admitted = _sglang_admits(sglang, I, tp, s, b, H)
            plan = _plan(gen, s, b, H, I, tp)
            where = f"scheme={s} block={b} H={H} I={I} tp={tp}"
            if admitted != (plan is not None):
                tally.record(_admission_key(s, b, H, I, admitted, plan is not None),
                             f"{where}: sglang admits={admitted}, layoutc admits={plan is not None}")
                continue
            if plan is None:
                continue
            tally.sizes += 1
            P = sglang["padded"][(I, tp, s, b)]["padded"]
            if (P, P // tp, P // tp) != (plan.intermediate_size_padded, plan.intermediate_size_per_partition,
                                         plan.intermediate_size_per_partition_padded):
                tally.record("unexplained", f"{where}: sglang padded {P} ({P // tp} per rank), layoutc "
                                            f"{plan.intermediate_size_padded} ({plan.intermediate_size_per_partition_padded})")
    print("sglang:", tally.summary())
    assert tally.decisions > 2_000 and tally.sizes > 800
    assert set(tally.disagreements) == {"sglang_fp8_ragged_last_block", "sglang_fp8_hidden_not_block"}, tally.summary()


def _runs(values: list[int]) -> list[list[int]]:
    from tests.support.conformance.sglang_oracle import _runs as runs

    return runs(values)


class _IndexShards:
    """layoutc's shard of an index tensor whose values the storage dtype may not hold: each
    base-16 digit (exact in every storage, fp8 included) is converted once per configuration
    and sharded per rank, then rebuilt; a position holding anything but digits (a fill such
    as 127) or 0 is pad (0)."""

    def __init__(self, shard: Any, full_index: torch.Tensor, dtype: torch.dtype) -> None:
        passes = max(1, len(f"{int(full_index.max()):x}"))
        self.shard = shard
        self.digits = [((full_index // 16 ** d) % 16).to(dtype) for d in range(passes)]

    def rank(self, rank: int, plan: Any) -> torch.Tensor:
        total = torch.zeros(0, dtype=torch.int64)
        bad = None
        for d, digit in enumerate(self.digits):
            part = self.shard(digit, rank, plan).to(torch.int64)
            total = part if d == 0 else total + part * 16 ** d
            bad = (part > 15) if bad is None else bad | (part > 15)
        assert bad is not None
        return torch.where(bad, torch.zeros_like(total), total)


def _layoutc_shards(module: Any, scheme: str, block: int, H: int, I: int) -> dict[str, Any]:
    """The index tensors of one configuration, converted to each tensor's storage once."""
    rows = torch.arange(1, I + 1)
    if scheme == "mxfp4":
        pair = rows.repeat_interleave(2)
        return {
            "w13": _IndexShards(module.shard_w13_weight, pair[None, :, None].expand(1, 2 * I, H // 2), torch.uint8),
            "w2": _IndexShards(module.shard_w2_weight, torch.arange(1, I // 2 + 1)[None, None, :].expand(1, H, I // 2),
                               torch.uint8),
            "s13": _IndexShards(module.shard_w13_weight_scale, pair[None, :, None].expand(1, 2 * I, H // 32), torch.uint8),
            "s2": _IndexShards(module.shard_w2_weight_scale, torch.arange(1, I // 32 + 1)[None, None, :].expand(1, H, I // 32),
                               torch.uint8)}
    dtype = torch.float8_e4m3fn if scheme == "fp8" else torch.bfloat16
    out = {"w13": _IndexShards(module.shard_w13_weight, torch.cat([rows, rows])[None, :, None].expand(1, 2 * I, H), dtype),
           "w2": _IndexShards(module.shard_w2_weight, rows[None, None, :].expand(1, H, I), dtype)}
    if scheme == "fp8":
        blocks = torch.arange(1, I // block + 1)
        out["s13"] = _IndexShards(module.shard_w13_weight_scale_inv,
                                  torch.cat([blocks, blocks])[None, :, None].expand(1, 2 * (I // block), H // block),
                                  torch.float32)
        out["s2"] = _IndexShards(module.shard_w2_weight_scale_inv,
                                 blocks[None, None, :].expand(1, H // block, I // block), torch.float32)
    return out


def _layoutc_rows(module: Any, shards: dict[str, Any], plan: Any, scheme: str, block: int, H: int,
                  rank: int) -> dict[str, Any]:
    """One rank's row maps from layoutc's shard_*, in the oracle's encoding."""
    if scheme == "mxfp4":
        bias = torch.arange(1, H + 1, dtype=torch.float32)[None, :]
        b2 = module.shard_w2_bias(bias, rank, plan)
        return {"w13_pairs": _runs(shards["w13"].rank(rank, plan)[0, 0::2, 0].tolist()), "w13_written": None,
                "w2_bytes": _runs(shards["w2"].rank(rank, plan)[0, 0].tolist()),
                "w13_scale_pairs": _runs(shards["s13"].rank(rank, plan)[0, 0::2, 0].tolist()),
                "w2_scale_blocks": _runs(shards["s2"].rank(rank, plan)[0, 0].tolist()),
                "w2_bias_is_checkpoint": bool(torch.equal(b2, bias)), "w2_bias_is_zero": bool((b2 == 0).all())}
    L = plan.intermediate_size_per_partition_padded
    w13 = shards["w13"].rank(rank, plan)[0, :, 0].tolist()
    out: dict[str, Any] = {"gate": _runs(w13[:L]), "up": _runs(w13[L:]),
                           "w2": _runs(shards["w2"].rank(rank, plan)[0, 0].tolist())}
    if scheme == "fp8":
        s13 = shards["s13"].rank(rank, plan)[0, :, 0].tolist()
        out["scales"] = {"gate": _runs(s13[:L // block]), "up": _runs(s13[L // block:]),
                         "w2": _runs(shards["s2"].rank(rank, plan)[0, 0].tolist())}
    return out


def test_each_ranks_live_rows_and_pad_positions_match_sglang(gen, sglang) -> None:  # type: ignore[no-untyped-def]
    """Every rank of every admitted configuration with I in ROW_INTERMEDIATE (at the scheme's smallest
    admitted H), TP 1-16, each scheme: the checkpoint
    rows SGLang's loader puts at each position of w13's gate and up halves and of w2's intermediate,
    and the positions it leaves to the pad, equal layoutc's shard_* (weights, block scales, MXFP4
    row pairs, packed bytes and E8M0 blocks, and the w2 bias on rank 0 only)."""
    tally = oracle.Tally()
    hidden = {"none": 32, "fp8": 0, "mxfp4": 64}
    for (s, b), I in itertools.product(SCHEMES, ROW_INTERMEDIATE):
        H = b if s == "fp8" else hidden[s]
        module = gen[CONTRACT[s]]
        shards = None
        for tp in TPS:
            plan = _plan(gen, s, b, H, I, tp)
            if plan is None or ("rows", I, tp, s, b) not in sglang:
                continue
            shards = shards or _layoutc_shards(module, s, b, H, I)
            check_ranks(tally, module, shards, plan, sglang, s, b, H, I, tp)
    print("sglang rows:", tally.summary())
    assert tally.tensors > 700
    assert not tally.disagreements, tally.summary()


def check_ranks(tally: Any, module: Any, shards: dict[str, Any], plan: Any, sglang: dict[str, Any], s: str, b: int,
                H: int, I: int, tp: int) -> None:
    """Compare every rank of one configuration with SGLang's loader; record any difference."""
    theirs = sglang[("rows", I, tp, s, b)]
    for rank in range(tp):
        tally.tensors += 1
        ours = _layoutc_rows(module, shards, plan, s, b, H, rank)
        if s == "fp8":
            scales = sglang[("scale_rows", I, tp, s, b)][rank]
            if ours.pop("scales") != scales:
                tally.record("unexplained", f"scales scheme={s} block={b} I={I} tp={tp} rank={rank}")
        if s == "mxfp4":
            ours["w13_written"] = theirs[rank]["w13_written"]
        if ours != theirs[rank]:
            tally.record("unexplained", f"scheme={s} block={b} I={I} tp={tp} rank={rank}: sglang {theirs[rank]} "
                                        f"layoutc {ours}")


def test_gpt_oss_120b_at_tp_8_last_rank_holds_192_rows(sglang) -> None:  # type: ignore[no-untyped-def]
    """The issue's example, straight from SGLang: I = 2880, tp = 8, MXFP4 -> 3072, L = 384; ranks
    0-6 hold 384 row pairs each and rank 7 holds 192, then 192 pad pairs."""
    assert sglang["padded"][(2880, 8, "mxfp4", 32)] == {"padded": 3072}
    rows = sglang[("rows", 2880, 8, "mxfp4", 32)]
    assert [r["w13_pairs"] for r in rows[:7]] == [[[0, 1 + 384 * k, 384]] for k in range(7)]
    assert rows[7]["w13_pairs"] == [[0, 2689, 192], [192, 0, 192]]
    assert [r["w2_bias_is_checkpoint"] for r in rows] == [True] + [False] * 7


def test_sglang_known_list_is_pinned_and_documented() -> None:
    text = (ROOT / "docs" / "kernels.md").read_text()
    assert "## 10. Conformance with SGLang 0.5.23" in text
    for key in ("sglang_fp8_ragged_last_block", "sglang_fp8_hidden_not_block"):
        kind, heading = KNOWN[key]
        assert kind == "limitation" and heading in text


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_missing_sglang_fails_under_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str) -> None:
    """Under CI the lane fails rather than skips when LAYOUTC_SGLANG_PATH is unset or holds no sglang."""
    monkeypatch.setenv("CI", ci)
    for value in (None, str(tmp_path)):
        if value is None:
            monkeypatch.delenv("LAYOUTC_SGLANG_PATH", raising=False)
        else:
            monkeypatch.setenv("LAYOUTC_SGLANG_PATH", value)
        with pytest.raises(pytest.fail.Exception, match="CI must run the SGLang conformance lane"):
            _sglang_path()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match=r"sglang-requirements\.txt"):
        _sglang_path()


def test_the_pins_are_what_ci_and_the_readme_install() -> None:
    """.ci/run and the README's test command install tests/conformance/sglang-requirements.txt into
    the ignored .venv-sglang and export LAYOUTC_SGLANG_PATH before pytest; the pins are exact."""
    pins = [line for line in (ROOT / "tests/conformance/sglang-requirements.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert pins[0] == "sglang==0.5.23" and all("==" in pin for pin in pins)
    install = "pip install -q --no-deps --upgrade --target .venv-sglang -r tests/conformance/sglang-requirements.txt"
    readme = (ROOT / "README.md").read_text()
    command = readme.split("Run the tests", 1)[1].split("```bash\n", 1)[1].split("\n```", 1)[0]
    ci = (ROOT / ".ci" / "run").read_text()
    for text in (command, ci):
        assert install in text and "LAYOUTC_SGLANG_PATH=.venv-sglang" in text
        assert text.index(install) < text.index("python -m pytest -q")
