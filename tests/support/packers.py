"""Checkpoints written by the outside packers, for the tests (llm-compressor 0.14.0 / compressed-tensors
0.19.0 and auto-round 0.16.1, installed with `pip install --no-deps --target` into the folder
LAYOUTC_PACKERS_PATH names, as .ci/run does: tests/conformance/packers-requirements.txt). The packers
run in a child process (tests/support/packers_child.py) whose sys.path starts with that folder, so their
compressed-tensors 0.19 never meets vLLM 0.32's 0.17 in the test process.

`packers_path()` skips when the folder is not given (fails under CI); `write(...)` builds a bf16
checkpoint with transformers' save_pretrained (examples/make_checkpoint.py) and packs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VARIABLE = "LAYOUTC_PACKERS_PATH"
MARKERS = ("llmcompressor/entrypoints/model_free/__init__.py", "auto_round/__init__.py")


HIDDEN = 256
EXPERTS = 4
#: case -> (packer, bits, group (-1: channelwise), intermediate): I = 1024 where a group of 128 must
#: divide I / tp at tp 8 (vLLM 0.32's CompressedTensorsWNA16MoEMethod.create_weights needs it), 256 else
CASES = {
    "ct_w4a16_g128": ("llmcompressor", 4, 128, 1024),
    # I 256 at group 128: 64 / 32 per rank at tp 4 / 8, which CompressedTensorsWNA16MoEMethod refuses
    # (tests/tools/test_ct_wna16_admission.py)
    "ct_w4a16_g128_i256": ("llmcompressor", 4, 128, 256),
    "ct_w4a16_g32": ("llmcompressor", 4, 32, 256),
    "ct_w4a16_channel": ("llmcompressor", 4, -1, 256),
    "ct_w8a16_channel": ("llmcompressor", 8, -1, 256),
    "ct_w8a16_g128": ("llmcompressor", 8, 128, 1024),
    "autoround_int4_g128": ("autoround", 4, 128, 1024),
    "autoround_int8_channel": ("autoround", 8, -1, 256),
}
_WRITTEN: dict[str, Path] = {}


def checkpoint(case: str, tmp: pytest.TempPathFactory) -> Path:
    """CASES[case] written by its packer (once a session): returns its folder; the bf16 checkpoint it
    was packed from is `base_of(folder)`."""
    if case not in _WRITTEN:
        tool, bits, group, intermediate = CASES[case]
        base = _WRITTEN.get(f"base{intermediate}")
        if base is None:
            base = _WRITTEN[f"base{intermediate}"] = base_checkpoint(
                tmp.mktemp(f"base{intermediate}") / "ckpt", HIDDEN, intermediate, EXPERTS
            )
        out = tmp.mktemp(case) / "ckpt"
        out.mkdir()
        write(tool, base, out, bits, group)
        (out.parent / "base").symlink_to(base)
        _WRITTEN[case] = out
    return _WRITTEN[case]


def base_of(folder: Path) -> Path:
    """The bf16 checkpoint `checkpoint()` packed into `folder`."""
    return (folder.parent / "base").resolve()


def packers_path() -> Path:
    """The packers' folder; pytest.skip when LAYOUTC_PACKERS_PATH is unset or lacks a packer
    (pytest.fail under CI: the packers' tests must run there)."""
    path = os.environ.get(VARIABLE, "")
    if path and all((Path(path) / m).is_file() for m in MARKERS):
        return Path(path).resolve()
    message = (
        f"the outside packers need {VARIABLE} (pip install --no-deps --target DIR -r "
        f"tests/conformance/packers-requirements.txt); {VARIABLE}={path!r}"
    )
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"CI must run the packers' tests, not skip them: {message}")
    pytest.skip(message)


def base_checkpoint(out: Path, hidden: int, intermediate: int, experts: int = 4, family: str = "qwen3_moe") -> Path:
    """A one-layer bf16 MoE checkpoint written by transformers (examples/make_checkpoint.py)."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "make_checkpoint.py"),
            str(out),
            "--family",
            family,
            "--hidden",
            str(hidden),
            "--intermediate",
            str(intermediate),
            "--experts",
            str(experts),
            "--layers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def write(tool: str, base: Path, out: Path, bits: int, group: int, layer_config: str = "") -> Path:
    """`base` packed by `tool` ("llmcompressor": compressed-tensors pack-quantized; "autoround":
    auto-round's native format) at `bits`, `group` (-1: channelwise) into `out`. `layer_config`:
    auto-round's per-layer overrides as JSON (written as quantization_config.extra_config)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(packers_path()), str(ROOT)]),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "support" / "packers_child.py"),
            tool,
            str(base),
            str(out),
            str(bits),
            str(group),
        ]
        + ([layer_config] if layer_config else []),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (out / "config.json").is_file(), sorted(p.name for p in out.iterdir())
    return out
