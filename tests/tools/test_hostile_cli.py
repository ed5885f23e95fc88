"""Hostile inputs to the CLI (issue 16 item 4): special files, runaway JSON, bad numbers.

Each case runs the real CLI in a subprocess with a timeout and an address-space cap
(robust_helpers.run_layoutc). Every one must end within BOUND_S with the documented
exit code and a located, coded diagnostic, and never with a traceback or LC900. The
cases come from an outside hostile-input run: ``audit /dev/zero`` read without limit,
``audit`` on a FIFO hung, ``check``/``verify``/``compile``/``explain`` on /proc/kmsg
hung, ``verify --budget-s inf`` overflowed, deep JSON and a 5000-digit integer
crashed the config reader, a missing contract exited 1 with ``file:0:0``, and
uppercase enum members compiled to a plan() that could never accept them.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from robust_helpers import PEAK_SCRIPT, REPO, crashed, run_layoutc, run_python

pytestmark = pytest.mark.slow

BOUND_S = 30.0
CONTRACT = str(REPO / "contracts" / "torch_grouped_mm.moe")
SET = ["--set", "num_experts=8", "--set", "hidden_size=64", "--set", "intermediate_size=64",
       "--set", "tp_size=2", "--set", "activation=silu", "--set", "dtype=bfloat16"]


def _fifo(tmp: Path, name: str) -> str:
    path = tmp / name
    os.mkfifo(path)
    return str(path)


def _write(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _config(**extra: object) -> dict[str, object]:
    base: dict[str, object] = {"hidden_size": 64, "intermediate_size": 64, "num_local_experts": 8,
                               "num_experts_per_tok": 2, "num_hidden_layers": 2, "hidden_act": "silu"}
    base.update(extra)
    return base


# 3 x 10^7 combinations of parameters no config determines (audit enumerated them all before)
MANY_VARIANTS = (REPO / "contracts" / "torch_grouped_mm.moe").read_text(encoding="utf-8").replace(
    "param dtype: enum {bfloat16, float16, float32}",
    "param dtype: enum {bfloat16, float16, float32}\n"
    + "".join(f"param {p}: enum {{{', '.join(f'{p}{i}' for i in range(10))}}}\n" for p in "abcdefg")).replace(
    # an always-true align reads the seven: a parameter nothing the contract states reads is LC309
    "  activation activation\n",
    "  activation activation\n  align " + " and ".join(f"({p} == {p}0 or {p} != {p}0)" for p in "abcdefg")
    + " : \"reads a..g\"\n", 1)

UPPER_ENUM = (REPO / "contracts" / "torch_grouped_mm.moe").read_text(encoding="utf-8").replace(
    "param dtype: enum {bfloat16, float16, float32}", "param dtype: enum {bfloat16, Float16, float32}")

# name -> (args built from a temporary folder, exit code, code the diagnostic must carry,
#          a pattern the located diagnostic must match; PATH is the first path argument)
Case = tuple[Callable[[Path], list[str]], int, str]
CASES: dict[str, Case] = {
    "audit_dev_zero": (lambda t: ["audit", "/dev/zero"], 2, "LC704"),
    "audit_fifo_without_writer": (lambda t: ["audit", _fifo(t, "config.json")], 2, "LC704"),
    "audit_folder_holding_a_fifo": (lambda t: (os.mkfifo(t / "config.json"), ["audit", str(t)])[1], 2, "LC704"),
    "audit_proc_kmsg": (lambda t: ["audit", "/proc/kmsg"], 2, "LC704"),
    "audit_deep_arrays": (lambda t: ["audit", _write(t, "deep.json", "[" * 100_000 + "]" * 100_000)], 2, "LC704"),
    "audit_deep_objects": (lambda t: ["audit", _write(t, "deep.json", '{"a":' * 50_000 + "1" + "}" * 50_000)],
                           2, "LC704"),
    "audit_deep_inside_a_config": (lambda t: ["audit", _write(t, "c.json", json.dumps(_config())[:-1]
                                                              + ', "x": ' + "[" * 5000 + "]" * 5000 + "}")],
                                   2, "LC704"),
    "audit_5000_digit_int": (lambda t: ["audit", _write(t, "big.json", json.dumps(_config())[:-1]
                                                        + ', "num_local_experts": ' + "9" * 5000 + "}")],
                             2, "LC704"),
    "audit_nan_constant": (lambda t: ["audit", _write(t, "nan.json", json.dumps(_config())[:-1]
                                                      + ', "swiglu_limit": NaN}')], 2, "LC704"),
    "audit_9_mib_config": (lambda t: ["audit", _write(t, "huge.json", '{"pad": "' + "x" * (9 << 20) + '"}')],
                           2, "LC704"),
    "audit_not_utf8": (lambda t: ["audit", (t / "bad.json").write_bytes(b'{"a": "\xff"}') and str(t / "bad.json")],
                       2, "LC704"),
    "audit_missing_config": (lambda t: ["audit", str(t / "absent.json")], 2, "LC704"),
    "audit_bad_tp": (lambda t: ["audit", "gemma-4-26b-a4b", "--tp", "1," + "9" * 5000], 2, "LC801"),
    "audit_10k_tp_degrees": (lambda t: ["audit", "gemma-4-26b-a4b", "--tp", ",".join(map(str, range(1, 10_001)))],
                              2, "LC801"),
    "audit_10_29_layers": (lambda t: ["audit", _write(t, "layers.json", json.dumps(_config(num_hidden_layers=10**29)))],
                           2, "LC704"),
    "audit_contracts_folder_without_contracts": (lambda t: ["audit", "gemma-4-26b-a4b", "--contracts", str(t)],
                                                 2, "LC705"),
    "audit_contract_is_a_fifo": (lambda t: ["audit", "gemma-4-26b-a4b", "--contracts", _fifo(t, "c.moe")],
                                 2, "LC100"),
    "check_proc_kmsg": (lambda t: ["check", "/proc/kmsg"], 2, "LC100"),
    "verify_proc_kmsg": (lambda t: ["verify", "/proc/kmsg"], 2, "LC100"),
    "compile_proc_kmsg": (lambda t: ["compile", "/proc/kmsg", "--out", str(t / "out")], 2, "LC100"),
    "explain_proc_kmsg": (lambda t: ["explain", "/proc/kmsg"], 2, "LC100"),
    "check_fifo": (lambda t: ["check", _fifo(t, "c.moe")], 2, "LC100"),
    "verify_fifo": (lambda t: ["verify", _fifo(t, "c.moe")], 2, "LC100"),
    "compile_fifo": (lambda t: ["compile", _fifo(t, "c.moe"), "--out", str(t / "out")], 2, "LC100"),
    "explain_fifo": (lambda t: ["explain", _fifo(t, "c.moe")], 2, "LC100"),
    "check_dev_zero": (lambda t: ["check", "/dev/zero"], 2, "LC100"),
    "explain_dev_zero": (lambda t: ["explain", "/dev/zero"], 2, "LC100"),
    "check_missing_file": (lambda t: ["check", str(t / "absent.moe")], 2, "LC100"),
    "verify_missing_file": (lambda t: ["verify", str(t / "absent.moe")], 2, "LC100"),
    "compile_missing_file": (lambda t: ["compile", str(t / "absent.moe"), "--out", str(t / "o")], 2, "LC100"),
    "explain_missing_file": (lambda t: ["explain", str(t / "absent.moe")], 2, "LC100"),
    "check_folder_without_contracts": (lambda t: ["check", str(t)], 2, "LC801"),
    "verify_budget_inf": (lambda t: ["verify", CONTRACT, "--budget-s", "inf"], 2, "LC801"),
    "verify_budget_nan": (lambda t: ["verify", CONTRACT, "--budget-s", "nan"], 2, "LC801"),
    "verify_budget_1e400": (lambda t: ["verify", CONTRACT, "--budget-s", "1e400"], 2, "LC801"),
    "verify_budget_negative": (lambda t: ["verify", CONTRACT, "--budget-s", "-1"], 2, "LC801"),
    "verify_timeout_huge": (lambda t: ["verify", CONTRACT, "--timeout-ms", "9" * 5000], 2, "LC801"),
    "verify_seed_2_64": (lambda t: ["verify", CONTRACT, "--seed", str(1 << 64)], 2, "LC801"),
    "explain_set_5000_digits": (lambda t: ["explain", CONTRACT, *SET, "--set", "hidden_size=" + "9" * 5000],
                                2, "LC703"),
    "explain_unknown_parameter": (lambda t: ["explain", CONTRACT, "--set", "nope=1"], 2, "LC703"),
    "compile_out_is_a_file": (lambda t: ["compile", CONTRACT, "--no-verify", "--out", _write(t, "f", "x")],
                              2, "LC702"),
    "rule_unknown_code": (lambda t: ["rule", "LC999"], 2, "LC801"),
    "uppercase_enum_member": (lambda t: ["check", _write(t, "upper.moe", UPPER_ENUM)], 1, "LC204"),
    # issue 40: the last key silently won
    "audit_duplicate_key": (lambda t: ["audit", _write(t, "dup.json", json.dumps(_config())[:-1]
                                                       + ', "num_local_experts": 16}')], 2, "LC704"),
    "audit_duplicate_nested_key": (lambda t: ["audit", _write(t, "dup.json", json.dumps(_config())[:-1]
                                                              + ', "rope_scaling": {"a": 1, "a": 2}}')], 2, "LC704"),
}

# issue 40: hostile environment variables -> (args, variables, exit code, code)
ENV_CASES: dict[str, tuple[list[str], dict[str, str], int, str]] = {
    "jobs_superscript_two": (["verify", CONTRACT], {"LAYOUTC_JOBS": "\u00b2"}, 2, "LC802"),  # isdigit, int() fails
    "jobs_arabic_indic_three": (["verify", CONTRACT], {"LAYOUTC_JOBS": "\u0663"}, 2, "LC802"),  # int() reads 3
    "jobs_zero": (["verify", CONTRACT], {"LAYOUTC_JOBS": "0"}, 2, "LC802"),
    "jobs_huge": (["verify", CONTRACT], {"LAYOUTC_JOBS": "9" * 5000}, 2, "LC802"),
    "jobs_compile": (["compile", CONTRACT, "--out", "/nonexistent/never"], {"LAYOUTC_JOBS": "two"}, 2, "LC802"),
}


@pytest.mark.parametrize("name", sorted(ENV_CASES))
def test_hostile_environment_gets_a_coded_error(name: str) -> None:
    args, env, expected_rc, code = ENV_CASES[name]
    res = run_layoutc(args, timeout=BOUND_S, env=env)
    assert not res.timed_out and not crashed(res.out + res.err), res.describe()
    assert res.rc == expected_rc and f"error[{code}]" in res.err, res.describe()
    assert len(res.err) < 400 and res.err.isascii(), res.describe()  # cut, and shown escaped


def test_cr_only_line_endings_are_lines(tmp_path: Path) -> None:
    """Issue 40: a contract saved with CR-only (old Mac) or CR LF line endings checks as with LF:
    the first `#` comment no longer swallows the file, and a diagnostic has the LF line and column."""
    good = (REPO / "contracts" / "torch_grouped_mm.moe").read_text(encoding="utf-8")
    for ending in ("\r", "\r\n"):
        path = tmp_path / "cr.moe"
        path.write_bytes(good.replace("\n", ending).encode("utf-8"))
        res = run_layoutc(["check", str(path)], timeout=BOUND_S)
        assert res.rc == 0 and "ok (torch_grouped_mm)" in res.out, res.describe()
    lf = run_layoutc(["check", _write(tmp_path, "lf.moe", UPPER_ENUM)], timeout=BOUND_S)
    assert lf.rc == 1 and "error[LC204]" in lf.err, lf.describe()
    for ending in ("\r", "\r\n"):
        path = tmp_path / "upper_cr.moe"
        path.write_bytes(UPPER_ENUM.replace("\n", ending).encode("utf-8"))
        res = run_layoutc(["check", str(path)], timeout=BOUND_S)
        assert res.rc == 1, res.describe()
        assert LOCATED.search(res.err).group(0).split(":", 1)[1] == LOCATED.search(lf.err).group(0).split(":", 1)[1]


def test_audit_accepts_a_byte_order_mark(tmp_path: Path) -> None:
    """Issue 40: a config.json starting with a UTF-8 byte-order mark is read, as contracts are."""
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_config()).encode("utf-8"))
    res = run_layoutc(["audit", str(path), "--format", "json"], timeout=BOUND_S)
    assert res.rc == 0 and not crashed(res.out + res.err), res.describe()
    assert json.loads(res.out)["rows"], res.out[:2000]




def _peak_kib(args: list[str]) -> tuple[int, int]:
    res = run_python(PEAK_SCRIPT, args, timeout=BOUND_S)
    assert not res.timed_out and not crashed(res.out + res.err), res.describe()
    return res.rc or 0, int(res.err.splitlines()[-1].removeprefix("peak_kib="))


@pytest.mark.parametrize("string", ["plain", "escapes"])
def test_audit_memory_is_a_small_multiple_of_the_config(string: str, tmp_path: Path) -> None:
    """Issue 40: a 7.9 MiB config holding one long string took 985 MiB (the bounded reader's
    regex kept a backtracking mark per character). Now the peak stays under the peak of a
    small config plus 8 times the file."""
    small = _write(tmp_path, "small.json", json.dumps(_config()))
    body = "x" * 7_900_000 if string == "plain" else "\\n" * 3_950_000
    big = _write(tmp_path, "big.json", json.dumps(_config())[:-1] + ', "pad": "' + body + '"}')
    size_kib = os.path.getsize(big) // 1024
    rc_small, base = _peak_kib(["audit", small])
    rc_big, peak = _peak_kib(["audit", big])
    assert rc_small == rc_big == 0
    assert peak < base + 8 * size_kib, f"peak {peak} KiB for a {size_kib} KiB config (baseline {base} KiB)"

LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error\[(?P<code>LC\d{3})\]: ", re.M)


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_input_gets_a_coded_diagnostic(name: str, tmp_path: Path) -> None:
    make, expected_rc, code = CASES[name]
    if "kmsg" in name and not os.path.exists("/proc/kmsg"):
        pytest.skip("/proc/kmsg does not exist here")
    res = run_layoutc(make(tmp_path), timeout=BOUND_S)
    assert not res.timed_out, f"hang:\n{res.describe()}"
    assert not crashed(res.out + res.err), res.describe()
    assert res.rc == expected_rc, res.describe()
    assert f"error[{code}]" in res.err, res.describe()
    if code != "LC801":  # a command-line argument has no file position; every file problem has one
        match = LOCATED.search(res.err)
        assert match and match.group("code") == code and int(match.group("line")) >= 1, res.describe()


def test_audit_with_thirty_million_variants_is_bounded(tmp_path: Path) -> None:
    contract = _write(tmp_path, "many.moe", MANY_VARIANTS)
    config = _write(tmp_path, "config.json", json.dumps(_config()))
    res = run_layoutc(["audit", config, "--contracts", contract, "--format", "json"], timeout=BOUND_S)
    assert not res.timed_out and res.rc == 0 and not crashed(res.out + res.err), res.describe()
    doc = json.loads(res.out)
    assert doc["rows"] == [] and "30000000 combinations" in doc["skipped"][0]["reason"]


@pytest.mark.parametrize("fmt", ["json", "github"])
def test_hostile_input_diagnostics_in_machine_formats(fmt: str, tmp_path: Path) -> None:
    """The same channel in --format json and github: parseable, coded, located."""
    fifo = _fifo(tmp_path, "c.moe")
    for args in (["check", fifo], ["verify", fifo], ["explain", fifo], ["audit", "/dev/zero"]):
        res = run_layoutc([*args, "--format", fmt], timeout=BOUND_S)
        assert not res.timed_out and res.rc == 2 and not crashed(res.out + res.err), res.describe()
        if fmt == "json":
            diags = json.loads(res.out)
            assert diags and all(d["code"].startswith("LC") and d["span"]["line"] >= 1 for d in diags), res.out
        else:
            assert re.search(r"^::error file=.+,line=\d+,col=\d+,title=layoutc LC\d{3}::", res.out, re.M), res.out


def test_a_reader_that_closes_stdout_early_gets_the_pipe_status_and_no_noise() -> None:
    """`layoutc explain ... | head -1`: 141 (128 + SIGPIPE), as a tool killed by the signal, and
    nothing on stderr (it was exit 2, the status of a usage error, before)."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", "layoutc", "explain", CONTRACT, *SET],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first write: that write fails (EPIPE)
    err = proc.stderr.read()
    assert proc.wait(timeout=BOUND_S) == 141, err
    assert err == b"", err
