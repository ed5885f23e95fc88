"""The verdict cache (layoutc/compiler/verify/cache.py, keyed and encoded by driver.py and
entries.py): reuse, invalidation, corruption, --no-cache."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

import layoutc.compiler.parse
from layoutc.cli import main
from layoutc.compiler.source import load
from layoutc.compiler.verify import driver, entries, prove
from layoutc.compiler.verify.verdicts import Options, Verdict
from tests.conftest import ROOT

SMALL = ROOT / "contracts" / "torch_grouped_mm.moe"
UNSOUND = ROOT / "tests" / "cases" / "unsound" / "end_padded_w13.moe"


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


def _timeless(doc: str) -> object:
    d = json.loads(doc)
    for c in d["contracts"]:
        for p in c["properties"]:
            p.pop("seconds")
    return d


def _forbid_solving(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("verified again instead of reusing the cache")
    monkeypatch.setattr(prove, "verify", boom)


def _store(k: str, name: str, verdicts: list[Verdict]) -> None:
    driver.verdict_cache().put(k, entries.encode(name, [], verdicts))


def _lookup(k: str, file: str) -> entries.Entry | None:
    return entries.decode(driver.verdict_cache().get(k), file)


def _copy(tmp_path: Path, src: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    return dst


def test_a_rerun_reuses_every_verdict_without_parsing(cache: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [str(_copy(tmp_path, SMALL)), str(_copy(tmp_path, UNSOUND))]
    first = _run("verify", "--format", "json", *paths)
    assert first[0] == 1  # the unsound case has a counterexample
    assert len(list(cache.glob("*.json"))) == 2 and not list(cache.glob(".tmp-*"))
    _forbid_solving(monkeypatch)
    monkeypatch.setattr(layoutc.compiler.parse, "parse", lambda *a: (_ for _ in ()).throw(AssertionError("parsed")))
    assert _run("verify", "--format", "json", *paths) == first
    # the text report too, counterexample picture included
    code, text = _run("verify", *paths)
    assert code == 1 and "| w13.n:" in text and "counterexample" in text


def test_verdicts_round_trip_exactly(cache: Path) -> None:
    contract, _, _ = load(str(UNSOUND))
    assert contract is not None
    verdicts = prove.verify(contract)
    k = entries.key(contract.source_text, Options())
    _store(k, contract.name, verdicts)
    hit = _lookup(k, contract.file)
    assert hit is not None and hit.name == contract.name and hit.verdicts == verdicts


@pytest.mark.parametrize("damage", ["truncate", "garbage", "checksum", "tamper", "other_key", "empty", "deep",
                                    "directory"])
def test_a_corrupt_entry_is_ignored_and_rewritten(cache: Path, tmp_path: Path, damage: str) -> None:
    path = str(_copy(tmp_path, UNSOUND))
    first = _run("verify", "--format", "json", path)
    (entry,) = cache.glob("*.json")
    raw = entry.read_text()
    doc = json.loads(raw)
    if damage == "truncate":
        entry.write_text(raw[: len(raw) // 2])
    elif damage == "garbage":
        entry.write_bytes(b"\xff\x00not json")
    elif damage == "checksum":
        doc["sha256"] = "0" * 64
        entry.write_text(json.dumps(doc))
    elif damage == "tamper":  # a counterexample turned into a proof, checksum left stale
        doc["payload"] = doc["payload"].replace('"counterexample"', '"proved"')
        entry.write_text(json.dumps(doc))
    elif damage == "other_key":  # a valid entry of another contract under this key
        contract, _, _ = load(str(SMALL))
        assert contract is not None
        other = entries.key(contract.source_text, Options())
        _store(other, contract.name, prove.verify(contract))
        shutil.copy(cache / f"{other}.json", entry)
    elif damage == "deep":  # nesting deeper than the JSON parser's recursion limit
        entry.write_text("[" * 200_000 + "]" * 200_000)
    elif damage == "directory":
        entry.unlink()
        entry.mkdir()
    else:
        entry.write_text("")
    assert _lookup(entry.stem, path) is None
    if damage == "directory":  # cannot be rewritten: verification still works, uncached
        again = _run("verify", "--format", "json", path)
        assert again[0] == first[0] and _timeless(again[1]) == _timeless(first[1])
        return
    again = _run("verify", "--format", "json", path)  # recomputed, same answer
    assert again[0] == first[0] and _timeless(again[1]) == _timeless(first[1])
    assert _lookup(entry.stem, path) is not None  # and stored again


def test_the_key_follows_text_options_and_code(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = SMALL.read_text()
    base = entries.key(text, Options())
    assert entries.key(text, Options()) == base
    assert entries.key(text + "\n# a comment\n", Options()) != base
    assert entries.key(text, Options(seed=1)) != base
    assert entries.key(text, Options(timeout_ms=1000)) != base
    assert entries.key(text, Options(), {"tp_size": 2}) != base
    monkeypatch.setattr(entries, "_code_digest", "another layoutc")
    assert entries.key(text, Options()) != base


def test_an_edited_contract_is_verified_again(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _copy(tmp_path, SMALL)
    assert _run("verify", str(path))[0] == 0
    path.write_text(path.read_text().replace("fill 0\n}\n\ntensor w2", "fill 1\n}\n\ntensor w2", 1))
    _forbid_solving(monkeypatch)
    code, _ = _run("verify", str(path))
    assert code == 2  # LC900: it tried to verify again (and the stub refused)


def test_inconclusive_runs_are_not_stored(cache: Path) -> None:
    hard = ROOT / "tests" / "cases" / "unsound" / "group_straddle.moe"
    contract, _, _ = load(str(hard))
    assert contract is not None
    verdicts = driver.verify_contract(contract, Options(budget_s=1e-9))
    assert any(v.status == "inconclusive" for v in verdicts)
    assert not list(cache.glob("*.json")) if cache.exists() else True


def test_no_cache_neither_reads_nor_writes(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(_copy(tmp_path, SMALL))
    assert _run("verify", "--no-cache", path)[0] == 0
    assert not cache.exists() or not list(cache.glob("*.json"))
    assert _run("verify", path)[0] == 0
    _forbid_solving(monkeypatch)
    assert _run("verify", "--no-cache", path)[0] == 2  # it verified (and the stub refused)


def test_compile_reuses_the_verdicts(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(_copy(tmp_path, SMALL))
    assert _run("verify", path)[0] == 0
    _forbid_solving(monkeypatch)
    assert _run("compile", path, "--out", str(tmp_path / "out"))[0] == 0
    assert (tmp_path / "out" / "torch_grouped_mm.py").is_file()


def test_parallel_verification_matches_serial(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [str(SMALL), str(UNSOUND), str(ROOT / "contracts" / "marlin_moe_fp8.moe")]
    serial = _run("verify", "--no-cache", "--format", "json", *paths)
    monkeypatch.setenv("LAYOUTC_JOBS", "2")
    parallel = _run("verify", "--no-cache", "--format", "json", *paths)

    assert serial[0] == parallel[0] == 1 and _timeless(serial[1]) == _timeless(parallel[1])


def test_max_bytes_matches_the_parser() -> None:
    assert driver.MAX_BYTES == layoutc.compiler.parse.MAX_BYTES
