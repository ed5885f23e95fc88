"""A red team's second pass over issue 40's fixes (adv40): hostile inputs the merged tests did not try.

publish (compile's swap): an output directory that is a mount point is refused before anything
is staged (it copied the whole volume into the parent, then failed EBUSY: 250 MiB of a tmpfs
copied for nothing); a FIFO or a socket among the old entries is kept (it was dropped silently).
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from layoutc.compiler.emit import publish as pub


def test_a_fifo_and_a_socket_in_the_output_directory_are_kept(tmp_path: Path) -> None:
    """_carry kept regular files, folders and symlinks only: a FIFO or a server's socket next to
    the modules vanished without a word."""
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "fifo")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(out / "sock"))
        pub.publish({"__init__.py": "", "m.py": "X = 1\n"}, str(out))
    finally:
        server.close()
    assert stat.S_ISFIFO(os.lstat(out / "fifo").st_mode)
    assert stat.S_ISSOCK(os.lstat(out / "sock").st_mode)
    assert (out / "m.py").read_text() == "X = 1\n"


def test_a_mount_point_is_refused_before_anything_is_staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mount point cannot be renamed (EBUSY): the old code first carried (copied, across file
    systems) every entry of the volume into a stage in the parent, then failed. Refused up front:
    no stage, nothing carried, the folder untouched."""
    out = tmp_path / "vol"
    out.mkdir()
    (out / "data").write_bytes(b"x" * 4096)
    real = os.path.ismount
    monkeypatch.setattr(pub.os.path, "ismount", lambda p: os.path.realpath(p) == str(out) or real(p))
    carried: list[str] = []
    monkeypatch.setattr(pub, "_carry", lambda old, new, written: carried.append(old))
    with pytest.raises(OSError) as info:
        pub.publish({"__init__.py": "", "m.py": "X = 1\n"}, str(out))
    assert "mount point" in str(info.value)
    assert not carried
    assert sorted(os.listdir(tmp_path)) == ["vol"]  # no stage left
    assert sorted(os.listdir(out)) == ["data"]


# ---- layoutc run: an index naming a shard that is no file name --------------------------------


@pytest.mark.parametrize("shard", ["a\x00b.safetensors", "\ud800.safetensors"])
def test_an_index_naming_a_shard_with_a_nul_or_a_surrogate_is_lr111(tmp_path: Path, shard: str) -> None:
    """JSON can spell a NUL byte (\\u0000) or a lone surrogate (\\ud800) in a file name; os.stat
    raises ValueError for both, which escaped as LR199 'embedded null byte'."""
    import json

    from tests.tools.test_run_failfast import _coded, make_qwen3, run_cli

    folder = make_qwen3(tmp_path / "m")
    (folder / "model.safetensors").rename(folder / "a.safetensors")
    weight_map = {
        f"model.layers.0.mlp.experts.{e}.{p}_proj.weight": "a.safetensors"
        for e in range(2)
        for p in ("gate", "up", "down")
    }
    weight_map["model.layers.0.mlp.gate.weight"] = shard
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}), encoding="utf-8")
    code, _, err, seconds = run_cli(str(folder))
    _coded(code, err, "LR111", seconds, "no file name")


# ---- layoutc run: an option's value echoed whole ---------------------------------------------


@pytest.mark.parametrize(
    ("option", "code"), [("--isa", "LR104"), ("--placement", "LR104"), ("--world", "LC801"), ("--seed", "LC801")]
)
def test_a_100000_character_option_is_not_echoed_whole(tmp_path: Path, option: str, code: str) -> None:
    """--isa reached the contract's refusal, which echoed it whole once per TP degree (300 KB of
    stderr); --placement the runtime's; argparse's own messages (LC801) quote any bad value whole."""
    from tests.tools.test_run_failfast import _coded, make_qwen3, run_cli

    folder = make_qwen3(tmp_path / "m")
    code_, _, err, seconds = run_cli(str(folder), option, "x" * 100_000)
    _coded(code_, err, code, seconds, " characters)")
    assert len(err) < 1000, len(err)


def test_argparse_messages_escape_a_homoglyph(tmp_path: Path) -> None:
    """A Cyrillic e (U+0435) in a bad --seed read as a Latin e."""
    from tests.tools.test_run_failfast import make_qwen3, run_cli

    folder = make_qwen3(tmp_path / "m")
    code, _, err, _ = run_cli(str(folder), "--seed", "ch\u0435ck")
    assert code == 2 and "error[LC801]" in err and "ch\\u0435ck" in err, err


# ---- layoutc run: a config field transformers' strict config class refuses -------------------


@pytest.mark.transformers
@pytest.mark.parametrize(("key", "value"), [("rms_norm_eps", True), ("vocab_size", 1.5)])
def test_a_config_field_transformers_refuses_is_lr102(tmp_path: Path, key: str, value: object) -> None:
    """transformers 5's config classes are huggingface_hub strict dataclasses: AutoConfig raises
    StrictDataclassFieldValidationError (not a ValueError) for a field of the wrong type, which
    escaped as LR199 after transformers was imported."""
    from tests.tools.test_run_failfast import _coded, make_qwen3, run_cli

    folder = make_qwen3(tmp_path / "m", config={key: value})
    code, _, err, seconds = run_cli(str(folder), "--tp", "1")
    _coded(code, err, "LR102", seconds, f"field '{key}'", "config.json")


# ---- the verdict cache key: import forms the statement reader missed --------------------------


@pytest.mark.parametrize(
    "source",
    [
        b"from layoutc.runtime import \\\n    vocab\n",  # backslash-continued
        b"from layoutc.runtime import \\\r\n    vocab\r\n",
        b"import os; import layoutc.runtime.vocab\n",  # after a semicolon
        b"if True: import layoutc.runtime.vocab\n",  # a one-line if
        b"try: from layoutc.runtime import vocab\nexcept ImportError: pass\n",
        b"x = 1 + \\\n  0; from layoutc.runtime import vocab\n",
        b"from layoutc.runtime import (numformats,  # see f(x)\n    vocab)\n",  # a ')' in a comment
        b"import importlib\nm = importlib.import_module('layoutc.runtime.vocab')\n",  # named by a string
        b'm = __import__("layoutc.runtime.vocab")\n',
    ],
    ids=[
        "backslash",
        "backslash-crlf",
        "semicolon",
        "one-line-if",
        "one-line-try",
        "continued-then-semicolon",
        "paren-in-comment",
        "import_module",
        "__import__",
    ],
)
def test_the_key_reads_every_form_of_import(source: bytes) -> None:
    """entries._imported read statements only from a line's start and a parenthesised name list
    up to the first ')': a compiler module importing runtime/vocab.py in any of these forms left
    vocab.py out of the key (the shipped-contract test sees it only if a verify runs that line)."""
    from layoutc.compiler.verify import entries

    found = entries._imported(("layoutc", "compiler"), source)
    assert any(p.endswith(os.path.join("runtime", "vocab.py")) for p in found), found


@pytest.mark.parametrize("where", ["itself", "inside"])
def test_an_output_directory_holding_the_cwd_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """`layoutc compile contracts --out .` swapped the current directory for a copy: the shell's
    cwd became a deleted folder and every file under it was re-linked."""
    out = tmp_path / "proj"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "notes").write_text("keep")
    monkeypatch.chdir(out if where == "itself" else out / "sub")
    inode = os.stat(out).st_ino
    with pytest.raises(OSError) as info:
        pub.publish({"__init__.py": "", "m.py": "X = 1\n"}, str(out))
    assert "current directory" in str(info.value)
    assert os.stat(out).st_ino == inode and sorted(os.listdir(out)) == ["sub"]
    assert sorted(os.listdir(tmp_path)) == ["proj"]


# ---- contracts: text an editor shows that layoutc does not read (LC109) ----


def test_a_comment_hiding_a_require_behind_a_line_separator_is_refused(tmp_path: Path) -> None:
    from layoutc.compiler.source import load

    text = (Path(__file__).resolve().parents[2] / "contracts" / "vllm_cpu_grouped_gemm.moe").read_text()
    line = next(x for x in text.splitlines() if x.startswith("require intermediate_size % tp_size"))
    path = tmp_path / "hidden.moe"
    path.write_text(text.replace(line, "# the kernel's rule:\u2028" + line), encoding="utf-8")
    contract, diags, _ = load(str(path))
    assert contract is None and [d.code for d in diags] == ["LC109"], diags
    assert (diags[0].span.line, diags[0].span.column) == (text[: text.index(line)].count("\n") + 1, 21), diags[0].span


# ---- layoutc run: --format-file experts_class ---------------------------------------------------


def _format_file(tmp_path: Path, **changes: object) -> Path:
    import json

    from layoutc.tools.checkpoints.formats import FORMATS, format_json

    doc = dict(format_json(FORMATS["qwen3_moe"]))
    doc.update(changes)
    path = tmp_path / "format.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "value",
    [
        "os:system",
        "qwen3_moe",
        "a:b:c",
        "",
        "..qwen3_moe.modeling_qwen3_moe:Qwen3MoeExperts",
        "qwen3_moe.modeling_qwen3_moe:torch",
        "qwen3_moe.modeling_qwen3_moe:__class__",
    ],
)
def test_an_experts_class_of_no_module_class_shape_is_lr103_before_loading(tmp_path: Path, value: str) -> None:
    """experts_class was the one --format-file key left unchecked: it is imported as
    transformers.models.<module>, its attribute called with the config; each of these was LR199
    after loading (a module transformers lacks, split(':') unpacking, a module called)."""
    from tests.tools.test_run_failfast import _coded, make_qwen3, run_cli

    folder = make_qwen3(tmp_path / "m")
    fmt = _format_file(tmp_path, experts_class=value)
    code, _, err, seconds = run_cli(str(folder), "--tp", "1", "--no-from-pretrained", "--format-file", str(fmt))
    _coded(code, err, "LR103", seconds, "experts_class")


@pytest.mark.transformers
@pytest.mark.slow
@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("mixtral.modeling_mixtral:MixtralExperts", "has shape"),
        ("qwen3_moe.modeling_qwen3_moe:Qwen3MoeRMSNorm", "cannot be built"),
        ("qwen3_moe.modeling_qwen3_moe:NoSuchExperts", "is not in transformers"),
    ],
)
def test_an_experts_class_transformers_cannot_fill_is_lr103(tmp_path: Path, value: str, needle: str) -> None:
    """Another family's experts class (shapes differ: a ValueError), a module that is no experts
    module, a class the module lacks: LR199 before, LR103 naming experts_class now."""
    from tests.tools.test_run_failfast import make_qwen3, run_cli

    folder = make_qwen3(tmp_path / "m")
    fmt = _format_file(tmp_path, experts_class=value)
    code, _, err, _ = run_cli(str(folder), "--tp", "1", "--no-from-pretrained", "--format-file", str(fmt))
    assert code == 2 and "error[LR103]" in err and "experts_class" in err and needle in err, err


# ---- layoutc run: --write-format over the checkpoint's own files ------------------------------


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "model.safetensors.index.json"])
def test_write_format_over_the_checkpoint_is_refused(tmp_path: Path, name: str) -> None:
    """`--write-format MODEL/model.safetensors` replaced the weights with a 1.3 KB JSON format and
    reported ok; refused with the options now, the checkpoint untouched."""
    from tests.tools.test_run_failfast import _coded, make_qwen3, run_cli

    folder = make_qwen3(tmp_path / "m")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    code, _, err, seconds = run_cli(str(folder), "--tp", "1", "--write-format", str(folder / name))
    _coded(code, err, "LR104", seconds, "the checkpoint's own")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
