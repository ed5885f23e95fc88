"""A tiny examples/make_checkpoint.py checkpoint and `layoutc run` in this process, for the
`run` tests of issue 39 (tests/tools/test_run_independent.py, tests/tools/test_redteam39.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_MAKER: list[Any] = []


def run(*argv: str) -> tuple[int, str, str]:
    """`layoutc run ARGV` in this process: (exit code, stdout, stderr)."""
    from layoutc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", *argv])
    return code, out.getvalue(), err.getvalue()


def make(out: Path, *flags: str) -> Path:
    """examples/make_checkpoint.py into `out`: one MoE layer, hidden 128, intermediate 256,
    4 experts, float32, then `flags` (e.g. `--quant gptq4`). Returns `out`."""
    if not _MAKER:
        spec = importlib.util.spec_from_file_location("make_checkpoint", ROOT / "examples" / "make_checkpoint.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MAKER.append(module)
    argv = [str(out), "--layers", "1", "--hidden", "128", "--intermediate", "256", "--experts", "4",
            "--dtype", "float32", *flags]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert _MAKER[0].main(argv) == 0
    return out
