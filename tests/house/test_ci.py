"""House rules in CI (issue 41 item 5): `.ci/run` type-checks the package (`mypy layoutc`), runs
the README's test command as written, and ends its log with that run's `--durations` table
(`.ci/durations` extracts it from the run's output, pass or fail), so where CI's time goes is
read from the last lines of any CI log.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("Run the tests") :]
    return re.search(r"```bash\n(.*?)\n```", block, re.S).group(1).strip()  # type: ignore[union-attr]


def test_ci_runs_mypy_and_the_readmes_test_command() -> None:
    assert re.search(r"^\.venv-kernels/bin/mypy layoutc$", CI, re.M), "mypy layoutc is not in .ci/run"
    command = _readme_test_command()
    assert command.endswith("python -m pytest -q") and command in CI
    assert "--durations=" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_the_durations_table_is_the_logs_last_output() -> None:
    after = CI[CI.index(_readme_test_command()) :]
    lines = [ln.strip() for ln in after.splitlines()[1:] if ln.strip() and not ln.strip().startswith("#")]
    # the test run's output is kept, then the table is printed; nothing runs after it but the exit
    assert any(".ci/durations" in ln and "pytest.log" in ln for ln in lines), lines
    assert lines[-2].startswith(".ci/durations ") and lines[-1] == 'exit "$status"', lines
    assert 'status="${PIPESTATUS[0]}"' in lines  # the tests' exit status, not tee's


def test_durations_extracts_the_table_from_a_real_pytest_log(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        textwrap.dedent("""
            import time
            def test_slow():
                time.sleep(0.05)
            def test_fails():
                assert False
        """),
        encoding="utf-8",
    )
    log = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "--durations=40", "test_x.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    ).stdout  # fmt: skip
    assert "short test summary info" in log and "1 failed, 1 passed" in log  # what must not come through
    table = subprocess.run([str(ROOT / ".ci" / "durations")], input=log, capture_output=True, text=True, timeout=30)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert re.fullmatch(r"=+ slowest 40 durations =+", lines[0]), lines
    assert any(re.match(r"0\.0[5-9]\d*s call +test_x\.py::test_slow$", ln) for ln in lines), lines
    assert all(re.match(r"[\d.]+s (setup|call|teardown) |\(\d+ durations < ", ln) for ln in lines[1:]), lines
    missing = subprocess.run([str(ROOT / ".ci" / "durations")], input="1 passed in 0.1s\n", capture_output=True,
                             text=True, timeout=30)  # fmt: skip
    assert missing.returncode == 1 and missing.stdout == ""
