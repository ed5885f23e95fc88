"""`layoutc CMD --help` for every subcommand (issue 24 item 5): a description, an example that
runs with an exit code the help lists, the exit codes, every positional argument described,
and the accepted values of every option with choices listed."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from layoutc.cli import build_parser, main


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


COMMANDS = sorted(_subparsers())


def _help(capsys: pytest.CaptureFixture[str], cmd: str) -> str:
    assert main([cmd, "--help"]) == 0
    return capsys.readouterr().out


def test_every_command_is_covered() -> None:
    assert {"check", "verify", "compile", "explain", "audit", "run", "formats", "rule"} <= set(COMMANDS)


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_has_description_example_and_exit_codes(capsys: pytest.CaptureFixture[str], cmd: str) -> None:
    text = _help(capsys, cmd)
    assert "examples:" in text and f"layoutc {cmd}" in text.split("examples:", 1)[1]
    codes = re.findall(r"^  ([0-9])  ", text.split("exit codes:", 1)[1], flags=re.M)
    assert "0" in codes and "2" in codes, text
    assert _subparsers()[cmd].description


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_positional_is_described_and_choices_listed(capsys: pytest.CaptureFixture[str], cmd: str) -> None:
    text = _help(capsys, cmd)
    for action in _subparsers()[cmd]._actions:
        if not action.option_strings:
            assert action.help, (cmd, action.metavar)
            assert action.help.split(",")[0][:30] in " ".join(text.split()), (cmd, action.metavar)
        if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
            assert "{" + ",".join(map(str, action.choices)) + "}" in text, (cmd, action.dest)


def _examples(text: str) -> list[list[str]]:
    block = text.split("examples:", 1)[1].split("\n\n", 1)[0]
    return [shlex.split(line.strip()) for line in block.splitlines() if line.strip().startswith("layoutc ")]


# The examples that run in a second or two on a checkout (verify / compile / run take minutes or
# need a checkpoint: their examples are parsed, not run).
RUNNABLE = ("check", "explain", "audit", "formats", "rule")


@pytest.mark.parametrize("cmd", RUNNABLE)
def test_examples_run_with_a_listed_exit_code(capsys: pytest.CaptureFixture[str], cmd: str) -> None:
    text = _help(capsys, cmd)
    listed = {int(c) for c in re.findall(r"^  ([0-9])  ", text.split("exit codes:", 1)[1], flags=re.M)}
    for argv in _examples(text):
        if ">" in argv:
            argv = argv[: argv.index(">")]
        code = main(argv[1:])
        capsys.readouterr()
        assert code in listed and code == 0, (argv, code)


@pytest.mark.parametrize("cmd", sorted(set(COMMANDS) - set(RUNNABLE)))
def test_other_examples_parse(capsys: pytest.CaptureFixture[str], cmd: str) -> None:
    examples = _examples(_help(capsys, cmd))
    assert examples
    for argv in examples:
        build_parser().parse_args(argv[1:])


def test_formats_help_lists_the_built_in_names(capsys: pytest.CaptureFixture[str]) -> None:
    from layoutc.tools.checkpoints.formats import FORMATS

    text = " ".join(_help(capsys, "formats").split())
    assert all(name in text for name in FORMATS)


@pytest.mark.slow
def test_entry_exits_at_once_after_torch_and_flushes_its_output() -> None:
    import subprocess
    import sys

    code = ("import atexit, sys, torch; atexit.register(lambda: print('atexit ran', flush=True)); "
            "sys.argv = ['layoutc', 'rule', 'LR118']; from layoutc.cli import entry; entry()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("LR118:") and "atexit ran" in done.stdout
    bad = subprocess.run([sys.executable, "-c", code.replace("LR118", "LR999")], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "LC801" in bad.stderr


@pytest.mark.parametrize("argv", [["rule"], ["rule", "--list"]])
def test_rule_without_a_code_lists_every_code(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """Issue 40: `layoutc rule` (or `rule --list`) lists every registered code with its title."""
    from layoutc.compiler.diagnostics import CODES

    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{code}  {title}" for code, title in sorted(CODES.items())]
    assert main(["rule", "LC201", "--list"]) == 2
    assert "error[LC801]" in capsys.readouterr().err


def test_no_arguments_prints_a_usage_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 40: `layoutc` alone: a usage line and a coded error on stderr, exit 2."""
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("usage: layoutc ") and "error[LC801]: no command given" in captured.err
