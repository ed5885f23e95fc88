"""`layoutc compile` under faults (issue 8): SIGKILL midway, concurrent compiles, failures.

(a) A compile killed with SIGKILL at a random moment (half of the kills land
    while files are being written, which a wrapper slows down) leaves every file
    complete: each `*.py` is byte-identical to either the earlier or the new
    compile, nothing else in the directory is importable, and the modules import.
(b) Two compiles of the same contracts into one directory at the same time
    leave exactly what one compile leaves.
(c) A compile that fails (a bad contract among good ones; a duplicate name; a
    verification counterexample; an output path that is a file) writes nothing.

LAYOUTC_KILL_ITERATIONS (default 20) sets the number of kills.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import filecmp
import io
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from robust_helpers import CASES, CONTRACTS, REPO, child_env, crashed, limit_child, run_python

from layoutc import cli

pytestmark = pytest.mark.slow

ITERATIONS = int(os.environ.get("LAYOUTC_KILL_ITERATIONS", "20"))
SEED = int(os.environ.get("LAYOUTC_FUZZ_SEED", "8"))

# Runs `layoutc` in a child whose file writes go out in 4 KiB chunks with a pause after
# each (and a line on stdout, so the parent can kill during the write phase).
SLOW_WRITER = r"""
import os, sys, time
pause = float(os.environ.get("SLOW_WRITE_PAUSE", "0.002"))
_fdopen = os.fdopen

class Slow:
    def __init__(self, f):
        self.f = f
    def write(self, s):
        for i in range(0, len(s), 4096):
            self.f.write(s[i:i + 4096])
            self.f.flush()
            sys.stdout.write("chunk\n")
            sys.stdout.flush()
            time.sleep(pause)
        return len(s)
    def __getattr__(self, name):
        return getattr(self.f, name)
    def __enter__(self):
        self.f.__enter__()
        return self
    def __exit__(self, *exc):
        return self.f.__exit__(*exc)

os.fdopen = lambda *a, **k: Slow(_fdopen(*a, **k))
from layoutc import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def _versions(root: Path) -> tuple[list[Path], list[Path]]:
    """A: every shipped contract but the last; B: all of them, each with one more comment line."""
    a_dir, b_dir = root / "A", root / "B"
    a_dir.mkdir()
    b_dir.mkdir()
    a, b = [], []
    for i, src in enumerate(CONTRACTS):
        text = src.read_text(encoding="utf-8")
        if i < len(CONTRACTS) - 1:
            (a_dir / src.name).write_text(text, encoding="utf-8")
            a.append(a_dir / src.name)
        (b_dir / src.name).write_text(text + "# revision B\n", encoding="utf-8")
        b.append(b_dir / src.name)
    return a, b


def _compile_in_process(paths: list[Path], out: Path) -> int:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        return cli.main(["compile", "--no-verify", *map(str, paths), "--out", str(out)])


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every generated file by its path relative to `folder` (modules and the `_runtime/` copy)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def _start(paths: list[Path], out: Path, pause: float = 0.002) -> subprocess.Popen[str]:
    env = child_env()
    env["SLOW_WRITE_PAUSE"] = str(pause)
    return subprocess.Popen([sys.executable, "-c", SLOW_WRITER, "compile", "--no-verify", *map(str, paths),
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env=env, preexec_fn=limit_child, start_new_session=True)


IMPORTABLE_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pyd")


def _check_directory(out: Path, allowed: dict[str, set[bytes]]) -> list[str]:
    """Every module is one complete known version; nothing else could be imported."""
    problems = []
    entries = [*out.iterdir(), *(p for p in (out / "_runtime").rglob("*") if p.is_file())] \
        if (out / "_runtime").is_dir() else list(out.iterdir())
    for entry in sorted(entries):
        name = entry.relative_to(out).as_posix()
        if entry.name == "__pycache__" or "__pycache__" in entry.parts or name == "_runtime" \
                or (entry.is_dir() and name.startswith("_runtime/")):
            continue
        if name in allowed:
            data = entry.read_bytes()
            if data not in allowed[name]:
                problems.append(f"{name}: partial or unknown content ({len(data)} bytes)")
            else:
                try:
                    compile(data, str(entry), "exec")
                except SyntaxError as exc:
                    problems.append(f"{name}: not valid Python: {exc}")
        elif entry.is_dir() or entry.name.endswith(IMPORTABLE_SUFFIXES) or \
                (entry.name.split(".")[0].isidentifier() and "." not in entry.name):
            problems.append(f"{entry.name}: unexpected importable entry")
    return problems


def _dangling_all(out: Path) -> list[str]:
    """Names in __init__.__all__ without a module file (`from pkg import *` would fail)."""
    init = out / "__init__.py"
    if not init.exists():
        return []
    tree = ast.parse(init.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names = list(ast.literal_eval(node.value))
    return [n for n in names if not (out / f"{n}.py").exists()]


_IMPORT_ALL = r"""
import importlib, sys
sys.path.insert(0, sys.argv[1])
pkg = importlib.import_module(sys.argv[2])
for name in pkg.__all__:
    importlib.import_module(f"{sys.argv[2]}.{name}")
print("ok", len(pkg.__all__))
"""


def _import_package(out: Path) -> None:
    """Import the output directory as a package, and every module its __all__ names."""
    res = run_python(_IMPORT_ALL, [str(out.parent), out.name], timeout=120)
    assert res.rc == 0 and res.out.startswith("ok"), res.describe()


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("versions")
    a, b = _versions(root)
    ref_a, ref_b = root / "ref_a", root / "ref_b"
    assert _compile_in_process(a, ref_a) == 0
    assert _compile_in_process(b, ref_b) == 0
    allowed: dict[str, set[bytes]] = {}
    for ref in (ref_a, ref_b):
        for name, data in _snapshot(ref).items():
            allowed.setdefault(name, set()).add(data)
    return {"a": a, "b": b, "ref_a": ref_a, "ref_b": ref_b, "allowed": allowed}


def test_sigkill_midway_leaves_complete_files(versions: dict[str, object], tmp_path: Path) -> None:
    """(a) 20 compiles killed at random moments; after each, every file is one whole version."""
    a, b = versions["a"], versions["b"]
    allowed = versions["allowed"]
    out = tmp_path / "gen_out"
    shutil.copytree(versions["ref_a"], out)  # the previously generated files
    rng = random.Random(f"{SEED}:kill")
    # How long one slow compile takes here (the random kill times are drawn from it).
    start = time.monotonic()
    proc = _start(b, tmp_path / "timing")
    proc.communicate(timeout=120)
    total = time.monotonic() - start
    problems: list[str] = []
    killed_writing = 0
    for i in range(ITERATIONS):
        target = b if i % 4 != 3 else a
        proc = _start(target, out)
        if i % 2 == 0:  # anywhere: start-up, parsing, rendering or writing
            time.sleep(rng.uniform(0, total))
        else:  # during the write phase: after the first chunk reached the disk
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line:
                killed_writing += 1
            time.sleep(rng.uniform(0, 0.15))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        problems += [f"kill {i}: {p}" for p in _check_directory(out, allowed)]  # type: ignore[arg-type]
    leftovers = sorted(p.name for p in out.iterdir() if p.name.startswith(".layoutc-"))
    print(f"\n{ITERATIONS} kills ({killed_writing} during writes), {len(leftovers)} temp file(s) left behind")
    assert not problems, "\n".join(problems)
    _import_package(out)
    # A later complete compile still succeeds and yields exactly the new version.
    assert _compile_in_process(b, out) == 0  # type: ignore[arg-type]
    for name, data in _snapshot(versions["ref_b"]).items():  # type: ignore[arg-type]
        assert (out / name).read_bytes() == data, name


def test_sigkill_midway_keeps_init_consistent(versions: dict[str, object], tmp_path: Path) -> None:
    """(a') After a kill, __init__.__all__ only names modules that exist (`from pkg import *` works).

    The modules are written one by one in sorted order and `__init__.py` sorts first, so a
    compile that adds a contract and is killed after __init__.py but before the new module
    leaves an __all__ naming a missing module."""
    b = versions["b"]
    rng = random.Random(f"{SEED}:init")
    problems = []
    for i in range(max(4, ITERATIONS // 4)):
        out = tmp_path / f"gen_{i}"
        shutil.copytree(versions["ref_a"], out)  # type: ignore[arg-type]
        proc = _start(b, out, pause=0.01)  # type: ignore[arg-type]
        assert proc.stdout is not None
        for _ in range(rng.randrange(1, 4)):  # a few chunks into the write phase
            proc.stdout.readline()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        dangling = _dangling_all(out)
        if dangling:
            problems.append(f"kill {i}: __all__ names missing module(s) {dangling}")
    assert not problems, "\n".join(problems)


def test_concurrent_compiles_agree(versions: dict[str, object], tmp_path: Path) -> None:
    """(b) Two compiles of the same contracts into one directory at once == one compile."""
    b = versions["b"]
    expected = _snapshot(versions["ref_b"])  # type: ignore[arg-type]
    for round_ in range(3):
        out = tmp_path / f"gen_{round_}"
        if round_ == 2:
            shutil.copytree(versions["ref_a"], out)  # type: ignore[arg-type]
        procs = [_start(b, out, pause=0.001 * (k + 1)) for k in range(2)]  # type: ignore[arg-type]
        results = [p.communicate(timeout=120) for p in procs]
        for p, (o, e) in zip(procs, results, strict=True):
            assert p.returncode == 0 and not crashed(o + e), e
        got = _snapshot(out)
        assert got == expected, f"round {round_}: files differ from a single compile: " \
                                f"{sorted(set(got) ^ set(expected))} / " \
                                f"{[n for n in got if n in expected and got[n] != expected[n]]}"


def _unsound(tmp_path: Path) -> Path:
    """A contract that checks but fails verification (its own corpus: tests/cases/unsound)."""
    corpus = sorted((CASES / "unsound").glob("*.moe"))
    if corpus:
        return corpus[0]
    pytest.skip("no tests/cases/unsound/*.moe")


BAD_CONTRACTS = {
    "parse_error": "contract broken\nsource \"s\"\nparam x: int in 1..\n",
    "check_error": "contract broken\nsource \"s\"\npolicy error\nlet y = unknown_name + 1\n",
}


@pytest.mark.parametrize("kind", [*BAD_CONTRACTS, "duplicate_name", "counterexample", "out_is_a_file"])
def test_failed_compile_writes_nothing(kind: str, versions: dict[str, object], tmp_path: Path) -> None:
    """(c) One bad input among good ones: exit != 0, no traceback, the directory is untouched."""
    good = list(versions["b"])  # type: ignore[call-overload]
    out = tmp_path / "gen_out"
    shutil.copytree(versions["ref_a"], out)  # type: ignore[arg-type]
    before = _snapshot(out)
    args = ["compile", "--no-verify"]
    if kind in BAD_CONTRACTS:
        bad = tmp_path / "zz_bad.moe"
        bad.write_text(BAD_CONTRACTS[kind], encoding="utf-8")
        paths = [*good[:2], bad, *good[2:]]
    elif kind == "duplicate_name":
        dup = tmp_path / "copy.moe"
        dup.write_text(good[0].read_text(encoding="utf-8"), encoding="utf-8")
        paths = [*good, dup]
    elif kind == "counterexample":
        args = ["compile"]  # verification on: the unsound contract must stop the whole compile
        paths = [_unsound(tmp_path), *good[:1]]
    else:
        blocker = tmp_path / "a_file"
        blocker.write_text("not a directory\n", encoding="utf-8")
        out = blocker
        before = {"a_file": blocker.read_bytes()}
        paths = good
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = cli.main([*args, *map(str, paths), "--out", str(out)])
    assert rc in (1, 2), f"{kind}: exit {rc}\n{buf.getvalue()[-2000:]}"
    assert not crashed(buf.getvalue()), buf.getvalue()[-2000:]
    if kind == "out_is_a_file":
        assert blocker.read_bytes() == before["a_file"]
        assert not any(p.name.startswith(".layoutc-") for p in tmp_path.iterdir())
    else:
        assert _snapshot(out) == before, f"{kind}: the failed compile changed {out}"


def test_failed_compile_creates_no_directory(tmp_path: Path) -> None:
    """(c) A failing compile into a directory that does not exist yet leaves no directory."""
    bad = tmp_path / "bad.moe"
    bad.write_text(BAD_CONTRACTS["check_error"], encoding="utf-8")
    out = tmp_path / "never"
    assert _compile_in_process([*CONTRACTS[:1], bad], out) == 1
    assert not out.exists()


def test_reference_compiles_match(versions: dict[str, object]) -> None:
    """Sanity: compiling is deterministic (the byte comparisons above rely on it)."""
    ref_b = versions["ref_b"]
    again = Path(str(ref_b) + "_again")
    assert _compile_in_process(versions["b"], again) == 0  # type: ignore[arg-type]
    cmp = filecmp.dircmp(ref_b, again)  # type: ignore[arg-type]
    assert not cmp.diff_files and not cmp.left_only and not cmp.right_only


def _stages(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".layoutc-" in p.name)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_compiled_files_get_the_umask_mode(mask: int, versions: dict[str, object], tmp_path: Path) -> None:
    """(d) Modules, `_runtime/` files and folders get 0o666/0o777 less the umask (mkstemp gave 0600)."""
    old = os.umask(mask)
    try:
        out = tmp_path / "gen_out"
        assert _compile_in_process(versions["b"], out) == 0  # type: ignore[arg-type]
    finally:
        os.umask(old)
    modes = {p.relative_to(out).as_posix(): p.stat().st_mode & 0o777 for p in [out, *out.rglob("*")]
             if "__pycache__" not in p.parts}
    want = {name: (0o777 if (out / name).is_dir() else 0o666) & ~mask for name in modes}
    assert modes == want, {n: (oct(m), oct(want[n])) for n, m in modes.items() if m != want[n]}


@pytest.mark.parametrize("fault", ["ENOSPC", "interrupt"])
@pytest.mark.parametrize("after", [1, 20, 40])
def test_a_compile_failing_while_writing_writes_nothing(fault: str, after: int, versions: dict[str, object],
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(e) A full disk (ENOSPC from the writer) or an interrupt after `after` files: the old
    package stays whole (no half package: it left 27 `_runtime` files and 2 modules), no stage
    is left behind, and a compile into a folder that did not exist creates nothing."""
    from layoutc.compiler.emit import publish

    real = publish.write_file
    count = {"n": 0}

    def failing(path: str, text: str) -> None:
        count["n"] += 1
        if count["n"] > after:
            if fault == "ENOSPC":
                raise OSError(errno.ENOSPC, "No space left on device", path)
            raise KeyboardInterrupt
        real(path, text)

    monkeypatch.setattr(publish, "write_file", failing)
    out = tmp_path / "gen_out"
    shutil.copytree(versions["ref_a"], out)  # type: ignore[arg-type]
    before = _snapshot(out)
    for target in (out, tmp_path / "new" / "gen"):
        count["n"] = 0
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            assert cli.main(["compile", "--no-verify", *map(str, versions["b"]), "--out", str(target)]) == 2
        if fault == "ENOSPC":
            assert "error[LC702]" in buf.getvalue() and "nothing was written" in buf.getvalue(), buf.getvalue()
        else:
            assert "interrupted" in buf.getvalue(), buf.getvalue()
    assert _snapshot(out) == before
    assert not (tmp_path / "new").exists()
    assert _stages(tmp_path) == []


def test_a_compile_replaces_the_package_whole_and_keeps_other_entries(versions: dict[str, object],
                                                                      tmp_path: Path) -> None:
    """(e) The package is swapped in whole: a stale `_runtime` file goes, a README and a
    sub-folder of the user's stay, a symlinked output folder stays a symlink, mode kept."""
    real = tmp_path / "real_out"
    shutil.copytree(versions["ref_a"], real)  # type: ignore[arg-type]
    (real / "_runtime" / "gone.py").write_text("STALE = 1\n", encoding="utf-8")
    (real / "README.md").write_text("mine\n", encoding="utf-8")
    (real / "notes").mkdir()
    (real / "notes" / "a.txt").write_text("a\n", encoding="utf-8")
    real.chmod(0o750)
    link = tmp_path / "gen_out"
    link.symlink_to(real)
    assert _compile_in_process(versions["b"], link) == 0  # type: ignore[arg-type]
    assert link.is_symlink() and (real.stat().st_mode & 0o777) == 0o750
    assert not (real / "_runtime" / "gone.py").exists()
    assert (real / "README.md").read_text(encoding="utf-8") == "mine\n"
    assert (real / "notes" / "a.txt").read_text(encoding="utf-8") == "a\n"
    for name, data in _snapshot(versions["ref_b"]).items():  # type: ignore[arg-type]
        assert (real / name).read_bytes() == data, name
    assert _stages(tmp_path) == []
    _import_package(real)
