"""The conformance lane against each later vLLM release's own functions (issue 42 item 1).

For every release in tests/support/vllm_release.py RELEASES (0.33.0, 0.34.0) the lane's vLLM modules
(every tests/conformance/test_*.py but SGLang's and this one; `kernel` tests left out: the
release's compiled ops are not unpacked) run again in a child pytest whose PYTHONPATH starts
with that release's Python, fetched by pip at test time (conftest.py checks `vllm.__file__`).
Both children start at once, each after its own release's fetch and probe, which run side by side.
Each child's outcome must be exactly the pinned record of tests/support/conformance/release_findings.py:
every test that fails there is a named finding (a changed signature, "vLLM 0.34 renamed X", or a
changed rule with its rows), and every finding must still fail, with its message. A release that cannot be fetched or imported is a named
skip with the failing command outside CI and a failure under CI=true, never a pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support import vllm_release
from tests.support.conformance.release_findings import FINDINGS, matrix

pytestmark = [pytest.mark.conformance, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
SKIPPED = ("test_sglang.py", "test_releases.py")
MODULES = tuple(sorted(p.name for p in HERE.glob("test_*.py") if p.name not in SKIPPED))
TIMEOUT = 1800


def _start(version: str, out: Path) -> tuple[subprocess.Popen[str], Path] | vllm_release.ReleaseUnavailable:
    try:
        env = vllm_release.child_env(version)
        vllm_release.probe(version)
    except vllm_release.ReleaseUnavailable as exc:
        return exc
    report = out / f"vllm-{version}.xml"
    log = (out / f"vllm-{version}.log").open("w")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "not kernel",
        # the zentorch W8A8 holders hold vllm_zen_cpu_int8_*, and the compressed-tensors method tests
        # (test_compressed_tensors_*, test_ct_wna16_*) hold marlin_moe_ct_fp8, marlin_moe_ct_mxfp4 and
        # vllm_ct_wna16_int4/int8_moe, whose `models` lines name vLLM 0.32.0 alone: not a release they claim;
        # test_vllm_cpu_backends_for_the_packers_formats pins which experts 0.32's CPU path picks on this host
        "-k",
        "not w8a8_zen and not test_compressed_tensors_ and not test_ct_wna16_ "
        "and not test_vllm_cpu_backends_for_the_packers_formats",
        "--tb=short",
        f"--junitxml={report}",
        *(f"tests/conformance/{m}" for m in MODULES),
    ]
    child = subprocess.Popen(cmd, cwd=vllm_release.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    return child, report


@pytest.fixture(scope="module")
def children(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    out = tmp_path_factory.mktemp("releases")
    # Each release's fetch and probe (an import in a child of its own) run side by side, each child started
    # as soon as its probe passes: the probes were one after the other, the second child waiting on both.
    with ThreadPoolExecutor(max_workers=len(vllm_release.RELEASES)) as pool:
        futures = {v: pool.submit(_start, v, out) for v in vllm_release.RELEASES}
        started = {v: f.result() for v, f in futures.items()}
    yield started
    for value in started.values():
        if isinstance(value, tuple) and value[0].poll() is None:
            value[0].kill()


def outcomes(report: Path) -> dict[str, list[tuple[str, str]]]:
    """module::function -> [(test id, failure message)] for every failed or erroring case, and
    "<skipped>" -> the skipped cases, read from a child's JUnit XML."""
    failed: dict[str, list[tuple[str, str]]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        name = case.get("name", "")
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            text = f"{bad.get('message', '')}\n{bad.text or ''}"
            failed.setdefault(f"{module}::{name.split('[')[0]}", []).append((f"{module}::{name}", text))
        elif case.find("skipped") is not None:
            failed.setdefault("<skipped>", []).append((f"{module}::{name}", case.find("skipped").get("message", "")))
    return failed


@pytest.mark.parametrize("version", vllm_release.RELEASES)
def test_lane_against_release(children: dict[str, Any], version: str) -> None:
    started = children[version]
    if isinstance(started, vllm_release.ReleaseUnavailable):
        if os.environ.get("CI"):
            pytest.fail(f"CI must hold the contracts to vLLM {version}, not skip it: {started}")
        pytest.skip(str(started))
    child, report = started
    try:
        rc = child.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        child.kill()
        pytest.fail(f"vLLM {version}: the conformance child ran past {TIMEOUT} s")
    assert report.is_file(), f"vLLM {version}: the child (exit {rc}) wrote no report: {report.with_suffix('.log')}"
    failed = outcomes(report)
    skipped = failed.pop("<skipped>", [])
    pinned = FINDINGS[version]
    problems = []
    for key, cases in sorted(failed.items()):
        finding = pinned.get(key)
        if finding is None:
            problems.append(f"vLLM {version}: {cases[0][0]} fails, and no finding names it: {cases[0][1][:600]}")
            continue
        for test_id, text in cases:
            if finding.match not in text:
                problems.append(
                    f"vLLM {version}: {test_id} fails otherwise than its finding "
                    f"({finding.summary(version)}): {text[:600]}"
                )
    for key, finding in sorted(pinned.items()):
        if key not in failed:
            problems.append(f"vLLM {version}: {key} no longer fails: the finding ({finding.summary(version)}) is stale")
    print(
        f"vLLM {version}: {sum(len(c) for c in failed.values())} failing cases in {len(failed)} pinned findings, "
        f"{len(skipped)} skipped; matrix:"
    )
    for contract, verdict in matrix(version).items():
        print(f"  {contract}: {verdict}")
    assert not problems, "\n".join(problems)
    assert not (os.environ.get("CI") and skipped), f"vLLM {version}: CI skipped {[s[0] for s in skipped[:5]]}"

