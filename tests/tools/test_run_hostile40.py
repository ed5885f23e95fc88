"""What a red team broke in `layoutc run` (issue 40, "What else broke"): each input below exits 2
with a registered LR code (or, for a dtype the config disagrees with, a warning), within 10 s,
without a hang, a signal, LR199 or more than a small multiple of its input's size in memory.

Checkpoints are written by hand (tests/tools/test_run_failfast.py `make_qwen3`: a qwen3_moe model of
hidden 64, 2 experts). Cases that must not block (FIFOs) or that bound memory run in a child
under a 1 GiB address-space cap and a timeout (`run_bounded`); the rest run in this process.
The one case that needs the kernel (`--write-format` after a real run) is marked `kernel`.
"""

from __future__ import annotations

import errno
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from layoutc.tools.checkpoints.formats import FORMATS, format_json
from tests.tools.test_run_failfast import _coded, _needs_generated, make_qwen3, run_bounded, run_cli

# ---- 1. a safetensors file truncated while run reads it -------------------------------------


def test_a_file_truncated_while_run_reads_it_is_lr115(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file shrinks after `slice()` checked its size and before the bytes are read (the
    window in which the memory-mapped reader raised SIGBUS): the read comes back short, LR115."""
    _needs_generated()
    from layoutc.tools.checkpoints import reader

    folder = make_qwen3(tmp_path / "m")
    path = folder / "model.safetensors"
    real = reader.Checkpoint.slice

    def slice_then_truncate(self: Any, name: str) -> Any:
        got = real(self, name)
        if "experts.1.down_proj" in name:  # the last tensor of the file: cut it while it is read
            with open(path, "r+b") as f:
                f.truncate(path.stat().st_size - 1000)
        return got

    monkeypatch.setattr(reader.Checkpoint, "slice", slice_then_truncate)
    code, _, err, seconds = run_cli(str(folder), "--tp", "1")
    _coded(code, err, "LR115", seconds, "truncated", "experts.1.down_proj", "while it was read")


def test_safetensors_own_error_inside_from_pretrained_is_lr115(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' from_pretrained reads through safetensors, whose SafetensorError on a file
    truncated after run's own checks is LR115, not LR199."""
    _needs_generated()
    from safetensors import safe_open

    import layoutc.tools.checkpoints.reference as reference

    folder = make_qwen3(tmp_path / "m")
    damaged = tmp_path / "d.safetensors"
    damaged.write_bytes((folder / "model.safetensors").read_bytes()[:-1000])

    def oracle(model_dir: str, layers: list[int]) -> Any:
        with safe_open(str(damaged), framework="pt"):
            raise AssertionError("safetensors opened a truncated file")

    monkeypatch.setattr(reference, "transformers_oracle", oracle)
    code, _, err, seconds = run_cli(str(folder), "--tp", "1")
    _coded(code, err, "LR115", seconds, "SafetensorError")


# ---- 2. --write-format: checked before loading, never blocking ------------------------------


@pytest.mark.parametrize("kind", ["fifo", "directory", "dev_full", "missing_folder", "symlink_loop"])
def test_write_format_target_is_checked_before_loading(tmp_path: Path, kind: str) -> None:
    folder = make_qwen3(tmp_path / "m", shapes={"model.layers.0.mlp.experts.0.gate_proj.weight": (1, 1)})
    target = tmp_path / "out.json"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    elif kind == "dev_full":
        target = Path("/dev/full")
    elif kind == "missing_folder":
        target = tmp_path / "no" / "out.json"
    else:
        os.symlink(target, target)
    # the checkpoint is damaged (LR116): the target is refused first, so nothing was loaded
    proc = run_bounded(str(folder), "--write-format", str(target))
    assert proc.returncode == 2 and "error[LR104]" in proc.stderr and "--write-format" in proc.stderr, proc.stderr
    assert "LR116" not in proc.stderr, proc.stderr
    if kind == "fifo":
        assert "FIFO" in proc.stderr


def test_write_atomic_leaves_the_target_untouched_on_a_full_disk(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from layoutc.tools import runwrite
    from layoutc.tools.runplan import RunError

    target = tmp_path / "fmt.json"
    target.write_text("old\n", encoding="utf-8")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runwrite.os, "fsync", full)
    with pytest.raises(RunError) as err:
        runwrite.write_atomic(str(target), "new\n", "--write-format")
    assert err.value.code == "LR104" and "No space left" in str(err.value)
    assert target.read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fmt.json"]  # no temporary file left


def test_write_atomic_gives_a_new_file_the_umask_mode(tmp_path: Path) -> None:
    from layoutc.tools import runwrite

    old = os.umask(0o022)
    try:
        runwrite.write_atomic(str(tmp_path / "a.json"), "{}\n", "--write-format")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "a.json").read_text(encoding="utf-8") == "{}\n"


@pytest.mark.kernel
def test_write_format_prints_the_table_first_then_writes(tmp_path: Path) -> None:
    _needs_generated()
    folder = make_qwen3(tmp_path / "m")
    target = tmp_path / "fmt.json"
    code, out, err, _ = run_cli(str(folder), "--tp", "1", "--no-transformers", "--write-format", str(target))
    assert code == 1, err  # --no-transformers: every row is "unchecked"
    assert "contract vllm_cpu_grouped_gemm" in out and "unchecked" in out, out
    assert f"wrote the format to {target}" in err, err
    assert json.loads(target.read_text(encoding="utf-8"))["model_type"] == "qwen3_moe"


# ---- 3. --format-file values: templates and types -------------------------------------------


def _format_file(tmp_path: Path, **changes: object) -> str:
    data = format_json(FORMATS["qwen3_moe"])
    data.update(changes)
    path = tmp_path / "fmt.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("key", "value"), [
    ("layer_prefix", "model.layers.{layer:>999999999}."),
    ("gate", "{e.__class__.__init__.__globals__}"),
    ("gate", "{e[0]}"),
    ("up", "{0}"),
    ("down", "{e}.down_proj.weight{"),
    ("down", "{e!z}"),
    ("down", "{e!r}"),
    ("layer_prefix", "model.layers.{e}."),
    ("layer_prefix", 5),
    ("experts", None),
    ("num_experts", [8]),
    ("num_experts", []),
    ("fused", "false"),
    ("transposed", "false"),
    ("moe_layers", [True]),
    ("swiglu_defaults", ["a", 1]),
    ("routing", "softmax"),
    ("fixed_activation", "nope"),
])
def test_bad_format_file_values_are_lr103_naming_the_key(tmp_path: Path, key: str, value: object) -> None:
    folder = make_qwen3(tmp_path / "m")
    argv = (str(folder), "--format-file", _format_file(tmp_path, **{key: value}))
    if isinstance(value, str) and (":" in value or "__" in value):  # 4 GiB or attribute access before: in a child
        proc = run_bounded(*argv)
        code, err = proc.returncode, proc.stderr
    else:
        code, _, err, _ = run_cli(*argv)
    assert code == 2 and "error[LR103]" in err and key in err, err
    assert len(err) < 2000, len(err)


# ---- 4. a safetensors header of a million entries -------------------------------------------


def test_a_header_of_too_many_tensors_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """250,000 one-byte tensors (18 MiB of header): refused from a count of the raw header
    (header.MAX_TENSORS), before json.loads builds a dict per entry (1.1 M entries cost 2.3 GiB)."""
    folder = make_qwen3(tmp_path / "m")
    n = 250_000
    entry = '"t{i}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{j}]}}'
    blob = ("{" + ",".join(entry.format(i=i, j=i + 1) for i in range(n)) + "}").encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + b"\0" * n)
    proc = run_bounded(str(folder))
    assert proc.returncode == 2 and "error[LR115]" in proc.stderr and "200000" in proc.stderr, proc.stderr


# ---- 5. checked before transformers builds the model ----------------------------------------


@pytest.mark.parametrize(("config", "code", "needle"), [
    ({"num_experts_per_tok": 3}, "LR102", "num_experts_per_tok"),
    ({"norm_topk_prob": "no"}, "LR102", "norm_topk_prob"),
])
def test_bad_routing_config_is_refused_before_loading(tmp_path: Path, config: dict[str, Any], code: str,
                                                      needle: str) -> None:
    folder = make_qwen3(tmp_path / "m", config=config)
    proc = run_bounded(str(folder))
    assert proc.returncode == 2 and f"error[{code}]" in proc.stderr and needle in proc.stderr, proc.stderr


def test_a_30_digit_seed_is_lr104(tmp_path: Path) -> None:
    folder = make_qwen3(tmp_path / "m")
    proc = run_bounded(str(folder), "--seed", "9" * 30)
    assert proc.returncode == 2 and "error[LR104]" in proc.stderr and "--seed" in proc.stderr, proc.stderr


def test_metadata_that_is_not_strings_is_lr115(tmp_path: Path) -> None:
    folder = make_qwen3(tmp_path / "m")
    path = folder / "model.safetensors"
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    header["__metadata__"] = {"format": 5}
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data[8 + length:])
    proc = run_bounded(str(folder))
    assert proc.returncode == 2 and "error[LR115]" in proc.stderr and "__metadata__" in proc.stderr, proc.stderr


# ---- 6. config.json's dtype against the tensors ---------------------------------------------


def test_a_config_dtype_the_tensors_do_not_have_is_warned(tmp_path: Path) -> None:
    """F32 tensors under a bfloat16 config: the run computes in float32 (the stored dtype) and
    says so (a warning, repeated in the report); --tp 3 stops it at the plan, after the warning."""
    _needs_generated()
    folder = make_qwen3(tmp_path / "m", config={"dtype": "bfloat16"})
    code, _, err, seconds = run_cli(str(folder), "--tp", "3")
    _coded(code, err, "LR132", seconds, "config.json's dtype is bfloat16", "stored as F32")


# ---- 7. messages that say what is wrong -----------------------------------------------------


@pytest.mark.parametrize(("kind", "needle"), [("fifo", "a FIFO"), ("directory", "a directory"),
                                              ("device", "a character device"), ("loop", "a symlink loop")])
def test_a_model_safetensors_that_is_not_a_file_says_what_it_is(tmp_path: Path, kind: str, needle: str) -> None:
    folder = make_qwen3(tmp_path / "m")
    path = folder / "model.safetensors"
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        os.symlink("/dev/null", path)
    else:
        os.symlink(path, path)
    proc = run_bounded(str(folder))
    assert proc.returncode == 2 and "error[LR111]" in proc.stderr and needle in proc.stderr, proc.stderr
    assert "no model.safetensors" not in proc.stderr, proc.stderr


def test_a_tensor_in_two_shards_says_so(tmp_path: Path) -> None:
    folder = make_qwen3(tmp_path / "m")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").rename(folder / "a.safetensors")
    (folder / "b.safetensors").write_bytes(data)
    (length,) = struct.unpack("<Q", data[:8])
    names = [n for n in json.loads(data[8:8 + length]) if n != "__metadata__"]
    index = {"weight_map": {n: ("a" if i % 2 else "b") + ".safetensors" for i, n in enumerate(names)}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    code, _, err, seconds = run_cli(str(folder))
    _coded(code, err, "LR111", seconds, "in two shards", "a.safetensors and b.safetensors")


def test_runtime_is_not_a_contract(tmp_path: Path) -> None:
    folder = make_qwen3(tmp_path / "m")
    code, _, err, seconds = run_cli(str(folder), "--contract", "_runtime")
    _coded(code, err, "LR120", seconds, "not a contract module")
    assert "older layoutc" not in err, err


def test_a_contract_without_a_glue_says_why_it_cannot_run(tmp_path: Path) -> None:
    _needs_generated()
    folder = make_qwen3(tmp_path / "m")
    code, _, err, seconds = run_cli(str(folder), "--contract", "marlin_moe_wna16")
    _coded(code, err, "LR120", seconds, "binds no glue", "marlin_moe_wna16")
    assert "LR140" not in err, err


def test_a_format_file_of_another_model_type_is_noted(tmp_path: Path) -> None:
    _needs_generated()
    folder = make_qwen3(tmp_path / "m")
    code, _, err, seconds = run_cli(str(folder), "--tp", "3", "--format-file",
                                    _format_file(tmp_path, model_type="my_moe"))
    _coded(code, err, "LR132", seconds, "note: --format-file declares model_type 'my_moe'", "'qwen3_moe'")


def test_a_10000_segment_key_is_not_echoed_whole(tmp_path: Path) -> None:
    folder = make_qwen3(tmp_path / "m")
    path = folder / "model.safetensors"
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    key = ".".join(["a"] * 10_000)
    header[key] = {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}  # wrong span: LR115 names it
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data[8 + length:])
    code, _, err, seconds = run_cli(str(folder))
    _coded(code, err, "LR115", seconds, "19999 characters")
    assert len(err) < 1000, len(err)


# ---- 8. --format json reports errors as JSON diagnostics ------------------------------------


def test_run_format_json_prints_errors_as_json_diagnostics(tmp_path: Path) -> None:
    folder = make_qwen3(tmp_path / "m", config={"norm_topk_prob": "no"})
    code, out, err, _ = run_cli(str(folder), "--format", "json")
    assert code == 2 and err == "", err
    diags = json.loads(out)
    assert [d["code"] for d in diags] == ["LR102"] and diags[0]["severity"] == "error"
    assert "norm_topk_prob" in diags[0]["message"] and diags[0]["span"]["file"] == str(folder)
