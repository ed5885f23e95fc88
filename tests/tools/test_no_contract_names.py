"""No contract is named in `layoutc/tools/`: the tools pick contracts from the contracts' own
declarations (`route` and `models` lines, read from each generated module's `LAYOUT`), never from
a table of contract names (issue 41 item 2; docs/architecture.md, "Add a kernel route").

The rule is read with `ast`: every string constant of every module under layoutc/tools/ (f-string
pieces included; docstrings are prose and are not read) must not hold a contract's name (the stem
of a file in contracts/) as a whole word. An engine's own function that shares a contract's name is
written with its namespace (`zentorch::zentorch_fused_moe`, torch's op), which the word rule does not
count: the namespace says it is the engine's, not ours.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "layoutc" / "tools"
STEMS = sorted(p.stem for p in (ROOT / "contracts").glob("*.moe"))


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (module, class, function)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _named(text: str) -> list[str]:
    """The contract names `text` holds as a whole word, not after an engine namespace (`ns::`)."""
    return [s for s in STEMS if re.search(rf"(?<![\w:]){re.escape(s)}(?!\w)", text)]


def offences(root: Path) -> list[str]:
    """`file:line: <contract>` for every string constant under `root` that names a contract."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                found += [f"{path.relative_to(root.parent)}:{node.lineno}: {s}" for s in _named(node.value)]
    return found


#: The names still written in tools, each with why, until its owner moves it onto a declaration. Every
#: entry must still occur (a stale one fails), and no other name may appear. None is left.
PENDING: dict[str, str] = {}


def _pending(entry: str) -> bool:
    where, _, name = entry.partition(": ")
    return PENDING.get(where.rpartition(":")[0]) == name


def test_there_are_contracts_to_look_for() -> None:
    assert len(STEMS) >= 20 and "vllm_cpu_grouped_gemm" in STEMS


def test_no_contract_is_named_in_tools() -> None:
    """Adding a kernel route is writing its contract: no tool keeps a table of contract names."""
    found = offences(TOOLS)
    named = [f for f in found if not _pending(f)]
    assert not named, "contract names in layoutc/tools/ (declare a `route` or `models` line instead):\n" + "\n".join(
        named)
    stale = sorted(set(PENDING.items()) - {(f.partition(": ")[0].rpartition(":")[0], f.partition(": ")[2])
                                           for f in found})
    assert not stale, f"no longer named there: remove from PENDING {stale}"


@pytest.mark.parametrize(("source", "named"), [
    ('DEFAULT = "vllm_cpu_grouped_gemm"\n', True),
    ('TABLE = {"mxfp4": ("vllm_cpu_mxfp4_gpt_oss_moe", "flashinfer_trtllm_mxfp4_moe")}\n', True),
    ('def f(c):\n    return f"contract vllm_cpu_grouped_gemm remaps {c}"\n', True),
    ('M = "layoutc_generated.marlin_moe_fp8"\n', True),
    ('def f():\n    """The default is vllm_cpu_grouped_gemm."""\n', False),  # a docstring is prose
    ('OP = "zentorch::zentorch_fused_moe"\n', False),  # the engine's op, by its namespace
    ('K = "torch_int4pack"\n', False),  # a glue kind, not a contract (torch_int4pack_moe is one)
])
def test_the_rule_sees_a_table_a_default_and_a_message(tmp_path: Path, source: str, named: bool) -> None:
    (tmp_path / "m.py").write_text(source)
    assert bool(offences(tmp_path)) is named
