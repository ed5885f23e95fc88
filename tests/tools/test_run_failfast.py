"""`layoutc run` fails fast and clearly (issue 24 item 4): every red-team input exits 2 with a
registered LR code, naming the file, tensor or option, within 10 s and bounded memory.

The checkpoints here are written by hand as safetensors files (8-byte header length, JSON
header, raw bytes; github.com/huggingface/safetensors "Format"), so no test builds a
transformers model; the ones that pass the header checks import torch and the generated
module, and stop before anything is loaded. The FIFO, /dev/zero and deep-JSON cases run
in a subprocess under a 1 GiB address-space limit and a 10 s timeout.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from layoutc.compiler.diagnostics import CODES

ROOT = Path(__file__).resolve().parents[2]
H, INTER, E = 64, 64, 2


def _tensor_bytes(shape: tuple[int, ...], fill: float = 0.01, dtype: str = "F32") -> bytes:
    count = 1
    for s in shape:
        count *= s
    if dtype == "F32":
        return struct.pack(f"<{count}f", *([fill] * count))
    raw = struct.pack(f"<{count}f", *([fill] * count))  # BF16: the high half of each float32
    return b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4))


def write_safetensors(path: Path, tensors: dict[str, tuple[tuple[int, ...], bytes, str]]) -> None:
    """A safetensors file from name -> (shape, raw bytes, dtype)."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (shape, data, dtype) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"".join(d for _, d, _ in tensors.values()))


def make_qwen3(folder: Path, *, layers: int = 1, config: dict[str, Any] | None = None,
               shapes: dict[str, tuple[int, ...]] | None = None, dtypes: dict[str, str] | None = None,
               fills: dict[str, float] | None = None) -> Path:
    """A qwen3_moe checkpoint of `layers` MoE layers (hidden 64, expert intermediate 64, 2
    experts, top-1), every weight 0.01; `shapes` / `dtypes` / `fills` override single tensors."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {"model_type": "qwen3_moe", "num_hidden_layers": layers, "hidden_size": H, "moe_intermediate_size": INTER,
           "num_experts": E, "num_experts_per_tok": 1, "hidden_act": "silu", "dtype": "float32"}
    cfg.update(config or {})
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    tensors: dict[str, tuple[tuple[int, ...], bytes, str]] = {}
    for layer in range(layers):
        base = f"model.layers.{layer}.mlp."
        names = {base + "gate.weight": (E, H)}
        for e in range(E):
            names[f"{base}experts.{e}.gate_proj.weight"] = (INTER, H)
            names[f"{base}experts.{e}.up_proj.weight"] = (INTER, H)
            names[f"{base}experts.{e}.down_proj.weight"] = (H, INTER)
        for name, shape in names.items():
            shape = (shapes or {}).get(name, shape)
            dtype = (dtypes or {}).get(name, "F32")
            tensors[name] = (shape, _tensor_bytes(shape, (fills or {}).get(name, 0.01), dtype), dtype)
    write_safetensors(folder / "model.safetensors", tensors)
    return folder


def run_cli(*argv: str) -> tuple[int, str, str, float]:
    """`layoutc run ARGV` in this process: (exit code, stdout, stderr, seconds)."""
    from layoutc.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", *argv])
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def _coded(code: int, err: str, want: str, seconds: float, *needles: str) -> None:
    assert code == 2, (code, err)
    assert f"error[{want}]" in err and want in CODES, err
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert seconds < 10, seconds


def run_bounded(*argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """`python -m layoutc run ARGV` under a 1 GiB address-space cap and `timeout` seconds.

    A refusal takes 0.2-0.6 s; the bound only tells a hang from an answer, and is 30 s because a
    child on a 2-core machine at load average 5 once took more than 10 s (a fresh-user run)."""
    limit = ("import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
             "sys.argv = ['layoutc', 'run', *sys.argv[1:]]; runpy.run_module('layoutc', run_name='__main__')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", limit, *argv], capture_output=True, text=True, timeout=timeout,
                          env=env, check=False)


# ---- the format file, config.json and the index, read within bounds ------------------------


def test_format_file_fifo_does_not_hang(tmp_path: Path) -> None:
    folder = make_qwen3(tmp_path / "m")
    fifo = tmp_path / "fmt.fifo"
    os.mkfifo(fifo)
    proc = run_bounded(str(folder), "--format-file", str(fifo))
    assert proc.returncode == 2 and "error[LR103]" in proc.stderr and "FIFO" in proc.stderr, proc.stderr


def test_format_file_dev_zero_is_refused_at_once(tmp_path: Path) -> None:
    folder = make_qwen3(tmp_path / "m")
    proc = run_bounded(str(folder), "--format-file", "/dev/zero")
    assert proc.returncode == 2 and "error[LR103]" in proc.stderr and "/dev/zero" in proc.stderr, proc.stderr


@pytest.mark.parametrize("which", ["config", "index", "format"])
def test_json_nested_100000_deep_names_the_file(tmp_path: Path, which: str) -> None:
    folder = make_qwen3(tmp_path / "m")
    deep = "[" * 100_000 + "]" * 100_000
    argv = [str(folder)]
    if which == "config":
        target, code = folder / "config.json", "LR110"
        target.write_text('{"model_type": "qwen3_moe", "x": ' + deep + "}", encoding="utf-8")
    elif which == "index":
        target, code = folder / "model.safetensors.index.json", "LR111"
        target.write_text('{"weight_map": ' + deep + "}", encoding="utf-8")
    else:
        target, code = tmp_path / "fmt.json", "LR103"
        target.write_text('{"model_type": ' + deep + "}", encoding="utf-8")
        argv += ["--format-file", str(target)]
    proc = run_bounded(*argv)
    assert proc.returncode == 2 and f"error[{code}]" in proc.stderr, proc.stderr
    assert str(target) in proc.stderr and "nested" in proc.stderr, proc.stderr


def test_num_hidden_layers_is_capped(tmp_path: Path) -> None:
    folder = make_qwen3(tmp_path / "m", config={"num_hidden_layers": 10**9})
    code, _, err, seconds = run_cli(str(folder))
    _coded(code, err, "LR102", seconds, "num_hidden_layers", "100000")


# ---- safetensors files: four kinds of damage, named before torch -----------------------------


def _damage(path: Path, kind: str) -> None:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    if kind == "short":  # shorter than the 8-byte length
        path.write_bytes(data[:5])
    elif kind == "header_past_end":  # the length points past the end of the file
        path.write_bytes(struct.pack("<Q", len(data) * 2) + data[8:])
    elif kind == "garbage_header":  # the header is not JSON
        path.write_bytes(data[:8] + b"\xff" * length + data[8 + length:])
    elif kind == "truncated_data":  # the last tensor's bytes are cut off
        path.write_bytes(data[: len(data) - 100])
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["short", "header_past_end", "garbage_header", "truncated_data"])
def test_corrupt_safetensors_is_lr115_naming_the_file(tmp_path: Path, kind: str) -> None:
    folder = make_qwen3(tmp_path / "m")
    _damage(folder / "model.safetensors", kind)
    code, _, err, seconds = run_cli(str(folder))
    _coded(code, err, "LR115", seconds, "model.safetensors")


def test_offsets_that_disagree_with_the_shape_are_lr115(tmp_path: Path) -> None:
    path = tmp_path / "m" / "model.safetensors"
    make_qwen3(tmp_path / "m")
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    header["model.layers.0.mlp.gate.weight"]["shape"] = [E, H + 1]
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data[8 + length:])
    code, _, err, seconds = run_cli(str(tmp_path / "m"))
    _coded(code, err, "LR115", seconds, "model.layers.0.mlp.gate.weight")


# ---- what the headers say, against the format, config.json and the contract ----------------


def test_wrongly_shaped_expert_names_the_tensor_and_both_shapes(tmp_path: Path) -> None:
    name = "model.layers.0.mlp.experts.1.up_proj.weight"
    folder = make_qwen3(tmp_path / "m", shapes={name: (INTER + 32, H)})
    code, _, err, seconds = run_cli(str(folder))
    _coded(code, err, "LR116", seconds, name, f"[{INTER + 32}, {H}]", f"[{INTER}, {H}]")


def test_huge_intermediate_size_is_caught_from_the_headers(tmp_path: Path) -> None:
    folder = make_qwen3(tmp_path / "m", config={"moe_intermediate_size": 10**12})
    code, _, err, seconds = run_cli(str(folder))
    _coded(code, err, "LR116", seconds, str(10**12))


def test_mixed_expert_dtypes_are_refused(tmp_path: Path) -> None:
    name = "model.layers.0.mlp.experts.0.down_proj.weight"
    folder = make_qwen3(tmp_path / "m", dtypes={name: "BF16"})
    code, _, err, seconds = run_cli(str(folder))
    _coded(code, err, "LR113", seconds, name, "BF16", "F32", "--dtype", "config.json says float32")


def test_a_missing_expert_is_lr112(tmp_path: Path) -> None:
    # the router agrees with config.json's 3 experts (else LR119: tests/tools/test_ep_input.py); expert 2 is absent
    folder = make_qwen3(tmp_path / "m", config={"num_experts": 3}, shapes={"model.layers.0.mlp.gate.weight": (3, H)})
    code, _, err, seconds = run_cli(str(folder))
    _coded(code, err, "LR112", seconds, "experts.2.gate_proj.weight")


# ---- options, checked before torch is imported ---------------------------------------------


@pytest.mark.parametrize(("argv", "needle"), [(["--tp", "a"], "--tp"), (["--tp", "0"], "--tp"),
                                               (["--tp", "1,,65"], "--tp"), (["--layers", "-1"], "--layers"),
                                               (["--tokens", "0"], "--tokens")])
def test_bad_options_are_named_before_torch(tmp_path: Path, argv: list[str], needle: str) -> None:
    folder = make_qwen3(tmp_path / "m")
    proc = run_bounded(str(folder), *argv, "--contract", "no_such_contract")
    assert proc.returncode == 2 and "error[LR104]" in proc.stderr and needle in proc.stderr, proc.stderr


def test_options_and_headers_need_no_torch(tmp_path: Path) -> None:
    """Everything up to the contract module is checked without importing torch."""
    folder = make_qwen3(tmp_path / "m", shapes={"model.layers.0.mlp.experts.0.gate_proj.weight": (1, 1)})
    code = ("import sys; from layoutc.cli import main; rc = main(['run', sys.argv[1]]); "
            "print('torch' in sys.modules); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=30,
                          check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "error[LR116]" in proc.stderr and proc.stdout.strip() == "False", proc


def test_more_layers_than_the_model_has_says_so(tmp_path: Path) -> None:
    folder = make_qwen3(tmp_path / "m", layers=2)
    code, _, err, seconds = run_cli(str(folder), "--layers", "1000")
    _coded(code, err, "LR104", seconds, "--layers 1000", "2 MoE layers")


# ---- the contract's plan and the weights' values, before any model is built -----------------


def _needs_generated() -> None:
    """torch and the generated module, imported before the clock starts: under load their
    import alone takes 30 s or more, and the 10 s bound is on layoutc's own checks."""
    pytest.importorskip("torch")
    import importlib

    from layoutc.tools.contract_module import GENERATED_PACKAGE

    importlib.import_module(f"{GENERATED_PACKAGE}.vllm_cpu_grouped_gemm")


def test_a_tp_degree_the_contract_refuses_is_found_by_plan_first(tmp_path: Path) -> None:
    _needs_generated()
    folder = make_qwen3(tmp_path / "m")
    code, _, err, seconds = run_cli(str(folder), "--tp", "3")
    _coded(code, err, "LR132", seconds, "tp=3")


def test_non_finite_weight_names_the_tensor(tmp_path: Path) -> None:
    _needs_generated()
    name = "model.layers.0.mlp.experts.1.down_proj.weight"
    folder = make_qwen3(tmp_path / "m", fills={name: float("nan")})
    code, _, err, seconds = run_cli(str(folder), "--tp", "1")
    _coded(code, err, "LR114", seconds, name)


def test_a_large_audit_config_is_refused_within_bounded_memory(tmp_path: Path) -> None:
    """7.8 MB of empty objects (2.6 million values): refused from a linear scan, before
    json.loads builds them (measured before: 955 MiB peak for a 7.5 MiB config)."""
    base = json.loads((ROOT / "layoutc" / "tools" / "models" / "qwen3-30b-a3b.json").read_text())
    path = tmp_path / "big.json"
    path.write_text(json.dumps(base)[:-1] + ', "junk": [' + ",".join(["{}"] * 2_600_000) + "]}", encoding="utf-8")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from layoutc.cli import main; rc = main(['audit', sys.argv[1], '--tp', '1']); "
            "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM'))); sys.exit(rc)")
    # VmHWM, not ru_maxrss: the latter keeps the forked parent's peak across exec
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=30,
                          check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "error[LC704]" in proc.stderr and "values" in proc.stderr, proc.stderr
    assert int(proc.stdout.split()[-1]) < 8 * path.stat().st_size // 1024, proc.stdout  # KiB: a few times the input
