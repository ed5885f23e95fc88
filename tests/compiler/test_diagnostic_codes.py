"""Every diagnostic code is registered and documented.

* each code in ``layoutc.compiler.diagnostics.CODES`` appears in ``docs/language.md``;
* each code the sources use (``error("LCxxx"``, ``warning("LCxxx"``, ``err("LCxxx"``,
  or any other ``"LCxxx"`` literal in ``layoutc/*.py``) is in ``CODES``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layoutc.compiler.diagnostics import CODES

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "language.md"
SOURCES = sorted(p for p in (ROOT / "layoutc").rglob("*.py") if "runtime" not in p.parts)
CODE = re.compile(r"\bL[CR]\d{3}\b")
CALL = re.compile(r"""\b(?:error|warning|err)\(\s*["'](LC\d{3})["']""")


def _used_codes() -> dict[str, list[str]]:
    used: dict[str, list[str]] = {}
    for path in SOURCES:
        if path.name == "diagnostics.py":
            continue
        text = path.read_text(encoding="utf-8")
        for m in CODE.finditer(text):
            used.setdefault(m.group(0), []).append(f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}")
    return used


def test_codes_are_well_formed() -> None:
    assert CODES
    for code, meaning in CODES.items():
        assert re.fullmatch(r"L[CR]\d{3}", code), code
        assert meaning.strip(), code


@pytest.mark.parametrize("code", sorted(CODES))
def test_code_is_documented(code: str) -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert re.search(rf"`{code}`", doc), f"{code} ({CODES[code]}) is not documented in docs/language.md"


def test_documented_codes_exist() -> None:
    doc = DOC.read_text(encoding="utf-8")
    unknown = sorted(set(CODE.findall(doc)) - set(CODES))
    assert not unknown, f"docs/language.md mentions codes that are not in CODES: {unknown}"


def test_sources_use_only_registered_codes() -> None:
    used = _used_codes()
    unknown = {code: where for code, where in used.items() if code not in CODES}
    assert not unknown, f"codes used in layoutc/ but missing from CODES: {unknown}"


def test_diagnostic_calls_are_found() -> None:
    """The scan above must see the checker's calls (guards against a silent regex miss)."""
    calls = set()
    for path in SOURCES:
        calls.update(CALL.findall(path.read_text(encoding="utf-8")))
    assert {"LC201", "LC301", "LC101"} <= calls
    assert calls <= set(CODES), sorted(calls - set(CODES))


def test_every_code_a_command_prints_is_explained_by_rule() -> None:
    """`layoutc rule CODE` explains every LC and LR code the sources can print (issue 24)."""
    from layoutc.compiler.ruledoc import rule_text

    used = _used_codes()
    assert {"LR101", "LR104", "LR115", "LR116", "LR199", "LC801"} <= set(used), sorted(used)
    for code in sorted(used):
        text = rule_text(code)
        assert text is not None and text.startswith(f"{code}: {CODES[code]}"), code
        assert "meaning: " in text, f"{code} has no row in a code table of docs/language.md"


def test_rule_reads_no_foreign_docs_from_site_packages(tmp_path: Path) -> None:
    """Installed, ruledoc.py sits at site-packages/layoutc/compiler/, so its parents[2] is
    site-packages itself: a docs/language.md another distribution put there was read as
    layoutc's (any code: "no documentation beyond its summary"). Only a checkout's docs/ (its
    pyproject.toml names the project layoutc) is read before the layoutc_docs data package."""
    import importlib.util

    import layoutc.compiler.ruledoc as real

    site = tmp_path / "site-packages"
    (site / "layoutc" / "compiler").mkdir(parents=True)
    (site / "docs").mkdir()
    (site / "docs" / "language.md").write_text("# someone else's language\n", encoding="utf-8")
    copy = site / "layoutc" / "compiler" / "ruledoc.py"
    copy.write_text(Path(real.__file__).read_text(encoding="utf-8"), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("_installed_ruledoc", copy)
    assert spec is not None and spec.loader is not None
    installed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(installed)
    doc = installed.language_doc()  # layoutc_docs' copy (the editable install's docs/), or None
    assert doc != "# someone else's language\n" and (doc is None or "`LC417`" in doc)
    (site / "pyproject.toml").write_text('[project]\nname = "layoutc"\n', encoding="utf-8")  # a checkout's root
    assert installed.language_doc() == "# someone else's language\n"
