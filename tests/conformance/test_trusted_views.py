"""Every trusted view (a contract view no runnable glue binds) against the engine's own code.

tests/support/conformance/trusted_views.py holds the machinery and the table (`HOLDERS`): each
engine function that fixes the w13 row order (vLLM 0.32's loader, `reorder_w1w3_to_w3w1`,
the `convert_*_mxfp4_moe_kernel_format` branches, the unquantized AITER conversion) runs on
tagged CPU tensors, and every row it hands the kernel must be the (role, index) that the
contract's declared view reads there, padded and unpadded. FlashInfer 0.7.4's own reference of
trtllm_fp4_block_scale_moe (LAYOUTC_FLASHINFER_PATH, a child process) computes the two FlashInfer
contracts' declared views. docs/verification.md, "Trusted views", lists the views and their holders.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.conformance import trusted_views as tv
from tests.support.regen_mutants import GPU_BASE, MUTANTS

pytestmark = pytest.mark.conformance

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / "contracts"
MUTANT_DIR = ROOT / "tests" / "cases" / "mutants"

# Held contracts whose w13 rows are never padded at tp 1 (the contract pads nothing there):
# the padded half of "padded and unpadded" is vacuous for them.
NEVER_PADDED = {"vllm_cpu_mxfp4_gpt_oss_moe": "shard_size == round_up(I_pp, 32) == the padded size",
                "vllm_cpu_mxfp4_moe": "I_pp must be whole 32-value blocks, and the padded size is round_up(I_pp, 32)",
                "vllm_cpu_int8_moe": "vLLM pads nothing for int8 (intermediate_size_per_partition_padded = I_pp)",
                "vllm_cpu_w4a8_int4_moe": "vLLM pads nothing for W4A8 int4",
                "sglang_cpu_fp8_moe": "admitted only with I % block == 0: I_pp = round_up(I, block) == I at tp 1",
                "vllm_zen_cpu_int8_moe": "zentorch takes any width: nothing is padded",
                "vllm_zen_cpu_int8_swigluoai_moe": "zentorch takes any width: nothing is padded"}


def _glueless() -> set[str]:
    from layoutc.compiler.source import load

    out = set()
    for path in sorted(CONTRACTS.glob("*.moe")):
        contract, _, _ = load(str(path))
        assert contract is not None, path
        if contract.glue is None:
            out.add(contract.name)
    return out


def test_every_trusted_view_is_held_or_listed() -> None:
    """Every contract that binds no glue is held by an engine function here, runs here through
    layoutc's own glue (RUN_HERE), or is listed as unheld with its reason, in the table and in
    docs/verification.md; each held contract is checked padded and unpadded."""
    held = set(tv.held_contracts())
    glueless = _glueless()
    assert glueless == held | set(tv.RUN_HERE) | set(tv.UNHELD), sorted(glueless ^ (held | set(tv.RUN_HERE)
                                                                                  | set(tv.UNHELD)))
    assert not (held & set(tv.UNHELD)) and not (held & set(tv.RUN_HERE))
    docs = (ROOT / "docs" / "verification.md").read_text(encoding="utf-8")
    section = docs[docs.index("## Trusted views"):]
    for name in (*tv.UNHELD, *held):
        assert f"`{name}`" in section, f"docs/verification.md, Trusted views, does not name {name}"
    assert set(tv.ACTIVATION_READ) <= held and "apply_moe_activation" in section
    for reader in tv.READERS:
        assert set(reader.contracts) <= held and set(reader.gated_rows) == set(reader.contracts), reader.name
        assert reader.function.split()[0] in section, reader.name
    for holder in tv.HOLDERS:
        assert holder.source.startswith((tv.VLLM, tv.SGLANG)) and holder.function and holder.function.split()[0] in section, \
            holder.name
    unpadded_only = set()
    for contract, holders in tv.held_contracts().items():
        sizes = [tv.declared_rows(CONTRACTS / f"{contract}.moe", c) for h in holders for c in h.contracts[contract]
                 if contract not in dict(h.refused)]
        assert any(d.logical == d.padded for d in sizes), f"{contract}: no unpadded configuration"
        if not any(d.logical < d.padded for d in sizes):
            unpadded_only.add(contract)
    assert unpadded_only == set(NEVER_PADDED), unpadded_only


def _cases() -> list[Any]:
    out = []
    for holder in tv.HOLDERS:
        for contract, configs in holder.contracts.items():
            for config in configs:
                cid = f"{holder.name}-{contract}-I{config['intermediate_size']}-{config['activation']}"
                if config.get("activation_passed") == 0:
                    cid += "-no_activation"
                out.append(pytest.param(holder, contract, config, id=cid))
    return out


@pytest.mark.parametrize("holder, contract, config", _cases())
def test_trusted_view_is_the_engines(holder: tv.Holder, contract: str, config: dict[str, Any]) -> None:
    """The shipped contract's view of w13.n (and every w13 tensor's n layout) puts each
    (role, index) where the engine function puts it, pads where it puts nothing."""
    path = CONTRACTS / f"{contract}.moe"
    reason = dict(holder.refused).get(contract)
    if reason is not None:  # the contract refuses what it cannot state; the engine still contradicts its view
        with pytest.raises(AssertionError, match="refuses"):
            tv.declared_rows(path, config)
        admitted = {**config, "activation": "silu"}
        found = tv.compare(tv.declared_rows(path, admitted), holder.run(config))
        assert found, f"{contract}: {holder.name} now hands the rows its view states: admit them again ({reason})"
        return
    found = tv.check(path, holder, config)
    assert not found, f"{contract} against {holder.function} ({holder.source}): " + "; ".join(found[:6])


def _gpu_mutants() -> list[Any]:
    return [pytest.param(m.name, GPU_BASE[m.base], id=m.name) for m in MUTANTS if m.base in GPU_BASE]


@pytest.mark.parametrize("name, base", _gpu_mutants())
def test_trusted_view_mutants_are_caught(name: str, base: str) -> None:
    """The red team's mutants (issue 39 item 4): w13 and its view changed together, which the
    verifier proves alike, disagree with every engine function that holds the base contract,
    in every configuration (tests/compiler/test_mutants.py pins them "conformance")."""
    holders = tv.held_contracts()[base]
    for holder in holders:
        for config in holder.contracts[base]:
            found = tv.check(MUTANT_DIR / f"{name}.moe", holder, config)
            assert found, f"{name} passes {holder.name} at {config}"
            assert any("the view reads" in m for m in found), found


def test_the_tags_survive_the_engine_and_a_swap_is_seen() -> None:
    """The machinery itself: a tagged [gate | up] is read back as it was written, and the same
    rows with the roles swapped disagree with a [gate | up] view at every row."""
    import torch

    I = 3  # noqa: E741
    tags = [tv.tag_of("gate", i, I) for i in range(I)] + [0] + [tv.tag_of("up", i, I) for i in range(I)] + [0]
    rows = tv.decode_rows(tv.encode_rows(tags, 2, 4), 1, I)
    want = [("gate", 0), ("gate", 1), ("gate", 2), None, ("up", 0), ("up", 1), ("up", 2), None]
    assert rows == [want, want]
    assert tv.decode_rows(torch.tensor([tags], dtype=torch.float32), 1, I) == [want]
    declared = tv.Declared("t", tuple(want), {}, I, 4)
    assert tv.compare(declared, tv.EngineRows({"weight": rows})) == []
    swapped = [r if r is None else ("up" if r[0] == "gate" else "gate", r[1]) for r in want]
    assert len(tv.compare(declared, tv.EngineRows({"weight": [swapped]}))) == 3  # the first three of six


# ---- FlashInfer's own reference of trtllm_fp4_block_scale_moe (a child process) ----------------

FLASHINFER_INSTALL = ("pip install --no-deps --target .venv-flashinfer -r tests/conformance/flashinfer-requirements.txt, "
                      "then LAYOUTC_FLASHINFER_PATH=.venv-flashinfer (README, Environment)")
REFERENCE_TOL = 1e-2  # the reference rounds its output to bfloat16: 1.6e-3 measured


def _flashinfer_path() -> str:
    """LAYOUTC_FLASHINFER_PATH when it holds the flashinfer package; else skip, or under CI fail."""
    path = os.environ.get("LAYOUTC_FLASHINFER_PATH", "")
    if path and (Path(path) / "flashinfer" / "trace" / "templates" / "moe.py").is_file():
        return str(Path(path).resolve())
    message = f"the trusted-view lane needs FlashInfer's Python: {FLASHINFER_INSTALL}; LAYOUTC_FLASHINFER_PATH={path!r}"
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"CI must run FlashInfer's reference, not skip it: {message}")
    pytest.skip(message)


def _reader_cases() -> list[tuple[str, str, Path, dict[str, Any], bool]]:
    """(reader, contract, path, config, gated_rows) for every shipped contract a reader holds
    and every GPU-base mutant of one."""
    out = []
    for reader in tv.READERS:
        for contract, configs in reader.contracts.items():
            paths = [CONTRACTS / f"{contract}.moe"]
            paths += [MUTANT_DIR / f"{m.name}.moe" for m in MUTANTS if GPU_BASE.get(m.base) == contract]
            for path in paths:
                for config in configs:
                    out.append((reader.name, contract, path, dict(config), reader.gated_rows[contract]))
    return out


@pytest.fixture(scope="module")
def flashinfer_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int, str], float]:
    """(file name, I, activation) -> the relative error of FlashInfer's reference against the
    model, for every reader case, from one child process."""
    import torch

    path = _flashinfer_path()
    cases, wants, keys = [], [], []
    for _, _, file, config, gated in _reader_cases():
        case, want = tv.reference_case(file, config, gated)
        cases.append(case)
        wants.append(want)
        keys.append((file.name, config["intermediate_size"], config["activation"]))
    tmp = tmp_path_factory.mktemp("flashinfer")
    torch.save(cases, tmp / "request.pt")
    env = {**os.environ, "LAYOUTC_FLASHINFER_PATH": path, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tests.support.conformance.flashinfer_oracle", str(tmp / "request.pt"),
                           str(tmp / "reply.pt")], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout)["flashinfer_version"] == "0.7.4"
    got = torch.load(tmp / "reply.pt")
    return {k: tv.reference_error(g, w) for k, g, w in zip(keys, got, wants, strict=True)}


def _reader_params() -> list[Any]:
    return [pytest.param(file, config, id=f"{file.stem}-I{config['intermediate_size']}-{config['activation']}")
            for _, _, file, config, _ in _reader_cases()]


@pytest.mark.parametrize("file, config", _reader_params())
def test_flashinfer_reference_reads_the_declared_view(file: Path, config: dict[str, Any],
                                                      flashinfer_answers: dict[tuple[str, int, str], float]) -> None:
    """A random gate and up placed by the contract's declared view, run through FlashInfer's own
    reference of trtllm_fp4_block_scale_moe, give silu(gate) * up: the shipped contracts within
    bf16 rounding; the red team's mutants (the roles or the pairing swapped) about 1."""
    err = flashinfer_answers[(file.name, config["intermediate_size"], config["activation"])]
    if file.parent == MUTANT_DIR:
        assert err > 0.3, f"{file.stem}: FlashInfer's reference computes the model with it (rel err {err:.2e})"
    else:
        assert err < REFERENCE_TOL, f"{file.stem}: FlashInfer's reference reads another view (rel err {err:.2e})"


def _activation_params() -> list[Any]:
    return [pytest.param(c, config, id=f"{c}-I{config['intermediate_size']}-{config['activation']}")
            for c, configs in tv.ACTIVATION_READ.items() for config in configs]


@pytest.mark.kernel
@pytest.mark.parametrize("contract, config", _activation_params())
def test_vllm_activation_reads_the_declared_view(contract: str, config: dict[str, Any]) -> None:
    """Marlin's path applies vLLM's own activation (apply_moe_activation, the `_C` CPU op) to the
    first GEMM's [tokens, 2 N] output: a gate and up placed there by the contract's view come out as
    act(gate) * up, padded and unpadded."""
    found = tv.activation_check(CONTRACTS / f"{contract}.moe", config)
    assert not found, f"{contract}: " + "; ".join(found)
