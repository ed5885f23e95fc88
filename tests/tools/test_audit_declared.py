"""`layoutc audit --engine` and `explain --engine` pick contracts by their `models` declarations.

An engine's contract for a checkpoint format is the contract whose `models` lines name the
engine objects of that format's route (audit/engines.py `ROUTES`), whatever the contract is
called; the release the audit holds an engine to is the one those lines declare. On main these
were tables of contract names (`FORMAT_CONTRACTS`, `engine_of` by the `sglang_` prefix): the
renamed-contract tests below fail there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layoutc.cli import main
from layoutc.compiler import ir
from layoutc.compiler.source import load
from layoutc.tools.audit.engines import (
    counterpart,
    engine_contract,
    engine_label,
    engine_of,
    held_releases,
)
from layoutc.tools.audit.render import held_line
from layoutc.tools.audit.report import audit_report
from layoutc.tools.hfconfig import load_model_config
from tests.conftest import ROOT

CONTRACTS = ROOT / "contracts"
MODELS = ROOT / "layoutc" / "tools" / "models"


def _load(path: Path, text: str | None = None) -> ir.Contract:
    contract, diags, _ = load(str(path), text if text is not None else path.read_text(encoding="utf-8"))
    assert contract is not None, diags
    return contract


def _renamed(stem: str, new: str, keep_models: bool = True) -> ir.Contract:
    text = (CONTRACTS / f"{stem}.moe").read_text(encoding="utf-8").replace(f"contract {stem}\n", f"contract {new}\n")
    if not keep_models:
        text = "\n".join(line for line in text.splitlines() if not line.startswith("models ")) + "\n"
    return _load(Path(f"{new}.moe"), text)


BUNDLED = [_load(p) for p in sorted(CONTRACTS.glob("*.moe"))]


def test_a_renamed_contract_is_found_by_what_it_models() -> None:
    mixtral = load_model_config(str(MODELS / "mixtral-8x7b.json"))
    mine = _renamed("vllm_cpu_grouped_gemm", "my_cpu_gemm")
    assert engine_contract("vllm", mixtral, [mine]) == ("my_cpu_gemm", {"isa": "amx"})  # isa from its `when`
    assert engine_contract("vllm", mixtral, [_renamed("vllm_cpu_grouped_gemm", "x", keep_models=False)]) is None
    sglang = _renamed("sglang_cpu_moe", "cpu_moe_of_another_name")
    assert engine_of(sglang) == "sglang" and engine_of(mine) == "vllm"
    assert engine_contract("sglang", mixtral, [mine, sglang]) == ("cpu_moe_of_another_name", {})


def test_each_format_routes_to_the_contracts_main_routed_by_name() -> None:
    """The routes by declaration choose what the name table chose on main (behaviour unchanged)."""
    by_model = {"mixtral-8x7b": {"vllm": ("vllm_cpu_grouped_gemm", {"isa": "amx"}), "sglang": ("sglang_cpu_moe", {})},
                "gpt-oss-20b": {"vllm": ("vllm_cpu_mxfp4_gpt_oss_moe", {}), "sglang": ("sglang_cpu_mxfp4_moe", {})},
                "deepseek-v3": {"vllm": ("marlin_moe_fp8", {"scheme": "fp8_block128", "scale_dtype": "float32"}),
                                "sglang": ("sglang_cpu_fp8_moe", {"block": 128})}}
    for name, want in by_model.items():
        model = load_model_config(str(MODELS / f"{name}.json"))
        for engine, chosen in want.items():
            assert engine_contract(engine, model, BUNDLED) == chosen, (name, engine)
    by_name = {c.name: c for c in BUNDLED}
    assert counterpart(by_name["sglang_cpu_moe"], "vllm", BUNDLED) == ("vllm_cpu_grouped_gemm", {"isa": "amx"})
    assert counterpart(by_name["vllm_cpu_mxfp4_moe"], "sglang", BUNDLED) == ("sglang_cpu_mxfp4_moe", {})
    assert counterpart(by_name["sglang_cpu_fp8_moe"], "sglang", BUNDLED) == ("sglang_cpu_fp8_moe", {"block": 128})
    assert counterpart(by_name["aiter_unquantized_moe"], "sglang", BUNDLED) is None
    assert sorted(c.name for c in BUNDLED if engine_of(c) == "sglang") == [
        "sglang_cpu_fp8_moe", "sglang_cpu_moe", "sglang_cpu_mxfp4_moe"]


def test_the_release_an_engine_is_held_to_comes_from_the_declarations() -> None:
    # 0.33.0/0.34.0: the release matrix (issue 42); 0.29.0: flashinfer_fp8_moe's replay
    assert held_releases("vllm", BUNDLED) == ("0.29.0", "0.32.0", "0.33.0", "0.34.0")
    assert engine_label("sglang", BUNDLED) == "SGLang 0.5.23"
    newer = _load(Path("n.moe"), (CONTRACTS / "sglang_cpu_moe.moe").read_text(encoding="utf-8")
                  .replace('models sglang {"0.5.23"}', 'models sglang {"0.5.23", "0.5.24"}'))
    assert engine_label("sglang", [newer]) == "SGLang 0.5.23/0.5.24"
    assert engine_label("vllm", [newer]) == "vLLM (no release declared)"
    report = audit_report([("mixtral-8x7b", load_model_config(str(MODELS / "mixtral-8x7b.json")))], [2], BUNDLED)
    assert dict(report.held) == {"vllm": ("0.29.0", "0.32.0", "0.33.0", "0.34.0"), "flashinfer": ("0.7.4",),
                                 "sglang": ("0.5.23",), "torch": ("2.13.0",)}
    assert held_line(report).startswith("models (the contracts' `models` declarations): ")


def test_audit_text_says_which_release_it_holds_each_engine_to(in_root, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    assert main(["audit", "layoutc/tools/models/mixtral-8x7b.json", "--tp", "2", "--engine", "vllm,sglang"]) == 0
    out = capsys.readouterr().out
    # each row names the releases its own contract models, not the bundle's union
    assert "\n  vLLM 0.32.0/0.33.0/0.34.0  vllm_cpu_grouped_gemm   2 " in out
    assert "\n  SGLang 0.5.23              sglang_cpu_moe          2 " in out
    assert out.rstrip().splitlines()[-1].startswith(
        "models (the contracts' `models` declarations): vllm 0.29.0/0.32.0/0.33.0/0.34.0")


def test_no_contract_is_named_in_the_engine_tables() -> None:
    """audit/engines.py and slices.py route by the engines' objects, never by a contract's name."""
    names = [p.stem for p in CONTRACTS.glob("*.moe")]
    for rel in ("layoutc/tools/audit/engines.py", "layoutc/tools/slices.py"):
        text = (ROOT / rel).read_text(encoding="utf-8")
        assert not [n for n in names if n in text], rel
