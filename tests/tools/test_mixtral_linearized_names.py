"""Mixtral's linearized expert names (issue 45 item 5): llm-compressor writes Mixtral experts as
`block_sparse_moe.experts.N.gate_proj/up_proj/down_proj` where the release has w1/w3/w2. vLLM 0.32
reads both (models/mixtral.py MixtralModel.hf_to_vllm_mapper); `layoutc run` read only w1/w3/w2
(LR112) while `layoutc audit` said the fast path works. Now run reads the set the checkpoint
holds (layoutc/tools/checkpoints/namesets.py), and its rows equal those of the same weights
under the release's names, bit for bit.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from layoutc.tools.checkpoints.formats import FORMATS
from layoutc.tools.checkpoints.namesets import for_checkpoint

ROOT = Path(__file__).resolve().parents[2]
LINEAR = {".w1.": ".gate_proj.", ".w3.": ".up_proj.", ".w2.": ".down_proj."}


def _names(linear: bool, layers: int = 2, experts: int = 2) -> list[str]:
    out = ["model.layers.0.block_sparse_moe.gate.weight"]
    for layer in range(layers):
        for e in range(experts):
            for w in ("w1", "w2", "w3"):
                n = f"model.layers.{layer}.block_sparse_moe.experts.{e}.{w}.weight"
                out.append(n.replace(f".{w}.", LINEAR[f".{w}."]) if linear else n)
    return out


def test_for_checkpoint_picks_the_stored_name_set() -> None:
    config = {"model_type": "mixtral", "num_hidden_layers": 2}
    assert for_checkpoint(config, None, _names(False)) is None  # the declared names: the built-in format
    fmt = for_checkpoint(config, None, _names(True))
    assert fmt is not None and fmt.names(1, 3) == {
        "gate": "model.layers.1.block_sparse_moe.experts.3.gate_proj.weight",
        "up": "model.layers.1.block_sparse_moe.experts.3.up_proj.weight",
        "down": "model.layers.1.block_sparse_moe.experts.3.down_proj.weight"}
    assert "hf_to_vllm_mapper" in fmt.source
    # quantized modules (compressed-tensors' .weight_packed) are found by their module names too
    packed = [n.replace(".weight", ".weight_packed") for n in _names(True)]
    assert for_checkpoint(config, None, packed) == fmt
    # neither set: the declared format stays (LR112 names its tensor later); a family without alternates
    assert for_checkpoint(config, None, ["x.weight"]) is None
    assert for_checkpoint({"model_type": "qwen3_moe", "num_hidden_layers": 2}, None, _names(True)) is None
    # a --format-file's format is kept when the checkpoint holds its names
    assert for_checkpoint(config, FORMATS["mixtral"], _names(False)) is FORMATS["mixtral"]


def test_a_non_gated_format_gets_no_alternate_names() -> None:
    """A --format-file saying gated: false, gate: null for Mixtral (red team F4: a KeyError 'gate',
    LR199): the format is returned as declared, for run to refuse it by name (LR148)."""
    from dataclasses import replace

    config = {"model_type": "mixtral", "num_hidden_layers": 2}
    flat = replace(FORMATS["mixtral"], gated=False, gate=None, gate_up=None)
    for names in (_names(True), _names(False)):
        assert for_checkpoint(config, flat, names) is flat


def _maker() -> Any:
    spec = importlib.util.spec_from_file_location("make_checkpoint", ROOT / "examples" / "make_checkpoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.kernel  # vLLM's CPU grouped GEMM (the default contract's glue)
@pytest.mark.transformers
def test_run_reads_linearized_mixtral_and_matches_the_release_names(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from safetensors.torch import load_file, save_file

    from layoutc.cli import main

    release = tmp_path / "release"
    assert _maker().main([str(release), "--family", "mixtral", "--layers", "1", "--experts", "4",
                          "--dtype", "float32"]) == 0
    linear = tmp_path / "linear"
    linear.mkdir()
    (linear / "config.json").write_text((release / "config.json").read_text())
    tensors = load_file(str(release / "model.safetensors"))
    renamed = {}
    for name, t in tensors.items():
        for old, new in LINEAR.items():
            name = name.replace(old, new)
        renamed[name] = t
    assert any(".gate_proj." in n for n in renamed)
    save_file(renamed, str(linear / "model.safetensors"), metadata={"format": "pt"})

    reports = {}
    for label, folder in (("release", release), ("linear", linear)):
        capsys.readouterr()
        code = main(["run", str(folder), "--tp", "1,2,4", "--format", "json", "--no-transformers"])
        reports[label] = (code, json.loads(capsys.readouterr().out))
    code, linear_report = reports["linear"]
    assert linear_report["rows"], linear_report
    assert [r["tp_size"] for r in linear_report["rows"]] == [1, 2, 4]
    got = [(r["tp_size"], r["rel_error"], r["intermediate_size_per_partition_padded"]) for r in linear_report["rows"]]
    want = [(r["tp_size"], r["rel_error"], r["intermediate_size_per_partition_padded"])
            for r in reports["release"][1]["rows"]]
    assert got == want  # the same weights read under either name set: the same numbers
    assert code == reports["release"][0]
