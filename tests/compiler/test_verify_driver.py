"""The verifier's driver (layoutc/compiler/verify/driver.py) and the shape of verify/.

The cache knows nothing of the verifier; the report renders only; no module of verify/
imports in a cycle; a verifier exception becomes a tool failure (LC900), never a
verdict; `layoutc verify` reads each contract file once, cold or cached; a cached run
reports the checker's warnings as a cold one does.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from layoutc.cli import main
from layoutc.compiler.safeio import read_bounded
from layoutc.compiler.verify import driver, prove
from layoutc.compiler.verify.cache import Cache
from layoutc.compiler.verify.registry import PROPERTIES, PROPERTY_IDS
from layoutc.compiler.verify.report import render_json
from layoutc.compiler.verify.verdicts import Options
from tests.conftest import ROOT

VERIFY = ROOT / "layoutc" / "compiler" / "verify"
SMALL = ROOT / "contracts" / "torch_grouped_mm.moe"
UNSOUND = ROOT / "tests" / "cases" / "unsound" / "end_padded_w13.moe"


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at module level or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("LAYOUTC_CACHE_DIR", str(d))
    monkeypatch.setenv("LAYOUTC_JOBS", "1")
    return d


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, out.getvalue()


def test_the_cache_imports_nothing_of_the_verifier() -> None:
    imported = _imports(VERIFY / "cache.py")
    layoutc = sorted(m for m in imported if m.split(".")[0] == "layoutc")
    assert layoutc == ["layoutc", "layoutc.__version__"], layoutc
    assert not {m for m in imported if m.split(".")[0] in ("z3", "lark")}


def test_the_report_imports_neither_the_driver_nor_the_cache_nor_z3() -> None:
    imported = _imports(VERIFY / "report.py")
    banned = {"layoutc.compiler.verify.driver", "layoutc.compiler.verify.cache", "layoutc.compiler.verify.entries",
              "layoutc.compiler.verify.prove", "z3"}
    assert not imported & banned, imported & banned


def test_no_import_cycle_in_verify() -> None:
    modules = {_module(p): p for p in VERIFY.rglob("*.py")}
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    # a package's __init__ is imported with any of its modules: `from pkg import mod` names mod, not pkg
    state: dict[str, int] = {}

    def visit(m: str, trail: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            assert state.get(n) != 1, f"import cycle: {' -> '.join([*trail, m, n])}"
            if n not in state:
                visit(n, [*trail, m])
        state[m] = 2
    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert "layoutc.compiler.verify.driver" in graph and len(graph) > 20


def test_one_module_per_property_in_registry_order() -> None:
    assert [p.id for p in PROPERTIES] == list(PROPERTY_IDS)
    modules = [p.module for p in PROPERTIES]
    assert len(set(modules)) == len(modules)
    for p in PROPERTIES:
        assert (VERIFY / "properties" / f"{p.module}.py").is_file(), p
        assert callable(p.check()) and p.doc


def test_a_verifier_exception_is_a_tool_failure(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("simulated bug in a property")
    monkeypatch.setattr(prove, "verify", broken)
    outcome = driver.verify_files([str(SMALL), str(UNSOUND)], Options(), use_cache=True)
    assert outcome.results == [] and outcome.diagnostics == []
    assert [d.code for d in outcome.failures] == ["LC900", "LC900"]
    assert all("simulated bug in a property" in d.message and d.span.file in (str(SMALL), str(UNSOUND))
               for d in outcome.failures)
    doc = json.loads(render_json(outcome.results, outcome.failures))
    assert doc["summary"]["tool_failures"] == 2 and {f["cause"] for f in doc["tool_failures"]} == {"tool"}
    assert not cache.exists() or not list(cache.glob("*.json"))  # nothing stored
    results, failures = driver.verify_contracts([(str(SMALL), _load(SMALL))], use_cache=True)  # `compile`'s path
    assert results == [] and [d.code for d in failures] == ["LC900"]


def _load(path: Path):  # type: ignore[no-untyped-def]
    from layoutc.compiler.source import load
    contract, diags, _ = load(str(path))
    assert contract is not None, diags
    return contract


def _count_opens(monkeypatch: pytest.MonkeyPatch, paths: list[str]) -> dict[str, int]:
    """Count every open of the given paths, through os.open and the builtin open."""
    counts = dict.fromkeys(paths, 0)
    wanted = {os.path.abspath(p): p for p in paths}
    real_os_open, real_open = os.open, builtins.open

    def note(file: object) -> None:
        if isinstance(file, str | os.PathLike) and os.path.abspath(os.fspath(file)) in wanted:
            counts[wanted[os.path.abspath(os.fspath(file))]] += 1

    def os_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        note(file)
        return real_os_open(file, *args, **kwargs)

    def open_(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        note(file)
        return real_open(file, *args, **kwargs)
    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)
    return counts


def test_verify_reads_each_file_once(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [str(shutil.copy(SMALL, tmp_path)), str(shutil.copy(UNSOUND, tmp_path))]
    counts = _count_opens(monkeypatch, paths)
    assert _run("verify", *paths)[0] == 1  # cold: read, parsed and checked from that text, proved
    assert counts == dict.fromkeys(paths, 1), counts
    assert _run("verify", *paths)[0] == 1  # cached
    assert counts == dict.fromkeys(paths, 2), counts
    assert _run("verify", "--no-cache", *paths)[0] == 1
    assert counts == dict.fromkeys(paths, 3), counts


def _without_policy(tmp_path: Path) -> str:
    text = SMALL.read_text(encoding="utf-8")
    assert "policy error\n" in text
    path = tmp_path / "no_policy.moe"
    path.write_text(text.replace("policy error\n", ""), encoding="utf-8")
    return str(path)


def test_a_cached_run_reports_the_checkers_warnings(cache: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = _without_policy(tmp_path)
    cold = _run("verify", "--format", "json", path)
    assert cold[0] == 0 and [d["code"] for d in json.loads(cold[1])["diagnostics"]] == ["LC210"]
    monkeypatch.setattr(prove, "verify", lambda *a, **k: (_ for _ in ()).throw(AssertionError("proved again")))
    warm = _run("verify", "--format", "json", path)
    assert warm[0] == cold[0] and json.loads(warm[1])["diagnostics"] == json.loads(cold[1])["diagnostics"]


def test_verdicts_stored_by_compile_are_reused_with_the_warnings(cache: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`compile` stores verdicts without the checker's diagnostics; `verify` then checks the
    text (for its warnings) but proves nothing again, and stores the diagnostics."""
    path = _without_policy(tmp_path)
    assert _run("compile", path, "--out", str(tmp_path / "out"))[0] == 0
    monkeypatch.setattr(prove, "verify", lambda *a, **k: (_ for _ in ()).throw(AssertionError("proved again")))
    code, out = _run("verify", "--format", "json", path)
    assert code == 0 and [d["code"] for d in json.loads(out)["diagnostics"]] == ["LC210"]
    (entry,) = cache.glob("*.json")
    assert Cache(cache, read=read_bounded).get(entry.stem)["diagnostics"][0]["code"] == "LC210"


def test_the_store_checks_version_and_key(tmp_path: Path) -> None:
    store = Cache(tmp_path, read=read_bounded, version="1.0")
    store.put("ab" * 16, {"x": [1, 2]})
    assert store.get("ab" * 16) == {"x": [1, 2]}
    assert Cache(tmp_path, read=read_bounded, version="1.1").get("ab" * 16) is None  # another layoutc
    shutil.copy(tmp_path / f"{'ab' * 16}.json", tmp_path / f"{'cd' * 16}.json")
    assert store.get("cd" * 16) is None  # an entry under another key
    with pytest.raises(ValueError, match="hex digest"):
        store.put("../escape", 1)
