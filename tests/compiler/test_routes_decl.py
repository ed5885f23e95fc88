"""`route ROUTE {FORMAT, ...} [rank N]` (docs/language.md 3.2b): the contracts' own claim on which
checkpoints `layoutc run` and `layoutc audit` pick them for.

The checker's codes (LC236-LC240), the cross-contract conflict (LC241 at `layoutc check` of the
folder, LR125 at run time), the generated `LAYOUT.routes` against the checked IR, the run-time query
(`layoutc.runtime.models.routed`, torch only), and the choices the tools now read from the lines,
pinned to the tables of contract names they replace (run's default, quant_run's int4pack / int8pack
contracts and REFERENCE_CONTRACTS, audit's CONTRACT_FORMATS), so that every choice is unchanged.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from layoutc.cli import main
from layoutc.compiler.check import check
from layoutc.compiler.check.routes import conflicts
from layoutc.compiler.parse import parse
from layoutc.compiler.source import load
from layoutc.runtime import interface
from layoutc.runtime import models as M
from layoutc.runtime.interface import RouteEntry
from tests.conftest import ROOT

BASE = (ROOT / "tests" / "cases" / "errors" / "_base.moe.txt").read_text(encoding="utf-8")
CONTRACTS = sorted((ROOT / "contracts").glob("*.moe"))
NO_GLUE = (ROOT / "contracts" / "marlin_moe_fp8.moe").read_text(encoding="utf-8")


def _checked(*lines: str, base: str = BASE) -> tuple[object, list[str]]:
    text = base.replace("policy error\n", "policy error\n" + "".join(f"{line}\n" for line in lines), 1)
    module, diags = parse(text, "mem.moe")
    if module is None:
        return None, [d.code for d in diags]
    contract, found = check(module, text)
    return contract, [d.code for d in found if d.severity == "error"]


# ---- the checker -------------------------------------------------------------------------------

@pytest.mark.parametrize("line, code", [
    ('route runn {"unquantized"}', "LC236"),
    ('route run {}', "LC237"),
    ('route run {"fp4"}', "LC237"),
    ('route run {"unquantized", "unquantized"}', "LC237"),
    ('route reference {"mxfp4"} rank 0', "LC238"),
    ('route audit {"mxfp4"} rank 2', "LC238"),
])
def test_a_malformed_route_line_is_refused_with_its_code(line: str, code: str) -> None:
    assert _checked(line)[1] == [code]


def test_route_run_for_unquantized_checkpoints_needs_a_glue() -> None:
    assert "policy error\n" in NO_GLUE and "glue " not in NO_GLUE
    assert _checked('route run {"unquantized"}', base=NO_GLUE)[1] == ["LC239"]
    assert _checked('route run {"unquantized"}')[1] == []  # the base binds vllm_cpu_moe
    assert _checked('route reference {"mxfp8"} rank 3', base=NO_GLUE)[1] == []


def test_a_second_line_for_the_same_route_and_format_is_lc240() -> None:
    assert _checked('route reference {"mxfp4", "nvfp4"}', 'route reference {"nvfp4"} rank 2')[1] == ["LC240"]
    assert _checked('route reference {"mxfp4"}', 'route audit {"mxfp4"}')[1] == []


def test_route_stays_usable_as_a_name() -> None:
    """`route` is a keyword only where a declaration starts (lark's contextual lexer)."""
    contract, codes = _checked("let route = 2", 'require route > 1: "r"', 'route reference {"mxfp4"} rank 2')
    assert codes == [] and contract is not None


def test_the_checked_lines_reach_the_ir_with_rank_1_by_default() -> None:
    contract, codes = _checked('route run {"unquantized"}', 'route audit {"mxfp4", "unquantized"}')
    assert codes == [] and contract is not None
    got = [(r.route, r.formats, r.rank) for r in contract.routes]  # type: ignore[attr-defined]
    assert got == [("run", ("unquantized",), 1), ("audit", ("mxfp4", "unquantized"), 1)]


def test_two_contracts_claiming_one_route_at_one_rank_is_lc241_at_check_of_the_folder(tmp_path, capsys) -> None:
    contract_line = next(line for line in BASE.splitlines() if line.startswith("contract "))
    for name, rank in (("a_moe", 1), ("b_moe", 1)):
        text = BASE.replace(contract_line, f"contract {name}", 1).replace(
            "policy error\n", f'policy error\nroute reference {{"mxfp4"}} rank {rank}\n', 1)
        (tmp_path / f"{name}.moe").write_text(text)
    assert main(["check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "error[LC241]" in err and "b_moe serves 'mxfp4' on route reference at rank 1" in err, err
    assert "a_moe claims it here" in err
    (tmp_path / "b_moe.moe").write_text((tmp_path / "b_moe.moe").read_text().replace("rank 1", "rank 2"))
    assert main(["check", str(tmp_path)]) == 0


def test_audit_routes_never_conflict() -> None:
    loaded = [load(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))[0] for p in CONTRACTS]
    assert all(c is not None for c in loaded)
    assert conflicts(c for c in loaded if c is not None) == []
    audits = [c for c in loaded if c is not None and any(r.route == "audit" for r in c.routes)]
    assert conflicts(audits + audits) == []  # the same formats twice: audit is not ranked


# ---- the generated package and the run-time query ----------------------------------------------

@pytest.mark.parametrize("path", CONTRACTS, ids=lambda p: p.stem)
def test_the_generated_layout_carries_the_route_lines(path: Path) -> None:
    contract, diags, _ = load(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
    assert contract is not None, diags
    layout = importlib.import_module(f"layoutc_generated.{contract.name}").LAYOUT
    assert [(r.route, r.formats, r.rank, r.contract_line) for r in layout.routes] == \
        [(r.route, r.formats, r.rank, r.span.line) for r in contract.routes]


def test_routed_answers_from_the_generated_package_lowest_rank_first() -> None:
    assert [r.contract for r in M.routed("run", "unquantized")] == ["vllm_cpu_grouped_gemm"]
    found = M.routed("reference", "mxfp4")
    assert [(r.contract, r.entry.rank) for r in found] == [("vllm_cpu_mxfp4_gpt_oss_moe", 1),
                                                           ("flashinfer_trtllm_mxfp4_moe", 2)]
    assert found[0].where.startswith("contracts/vllm_cpu_mxfp4_gpt_oss_moe.moe:")
    assert M.routed("run", "fp8_tensor") == ()


def test_routed_refuses_two_modules_at_one_rank_lr125(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "twin_routes_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, line in (("a", 7), ("b", 9)):
        (pkg / f"{name}.py").write_text(
            "from types import SimpleNamespace\nfrom layoutc.runtime.interface import RouteEntry\n"
            f"LAYOUT = SimpleNamespace(contract='{name}', source_file='contracts/{name}.moe', "
            f"routes=(RouteEntry('reference', ('nvfp4',), rank=1, contract_line={line}),))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(M.RouteConflictError, match=r"^LR125: contracts a \(contracts/a\.moe:7\) and b "
                       r"\(contracts/b\.moe:9\) both serve 'nvfp4' on route reference at rank 1") as exc:
        M.routed("reference", "nvfp4", package="twin_routes_pkg")
    assert [c.contract for c in exc.value.claims] == ["a", "b"]
    assert [r.contract for r in M.routed("audit", "nvfp4", package="twin_routes_pkg")] == []

    from layoutc.tools import routes as R
    from layoutc.tools.runplan import RunError

    monkeypatch.setattr(R, "GENERATED_PACKAGE", "twin_routes_pkg")
    with pytest.raises(RunError) as err:
        R.route_contracts("reference", "nvfp4")
    assert err.value.code == "LR125" and "both serve 'nvfp4'" in str(err.value)
    with pytest.raises(RunError) as err:
        R.run_contract("unquantized")
    assert err.value.code == "LR126" and 'route run {"unquantized"}' in str(err.value)


def test_the_query_runs_with_torch_only() -> None:
    code = ("import json, sys\n"
            "import layoutc_generated._runtime.models as G\n"
            "found = [r.contract for r in G.routed('run', 'unquantized')]\n"
            "print(json.dumps({'found': found, 'heavy': sorted(m for m in ('lark', 'z3', 'jinja2', 'layoutc.compiler')"
            " if m in sys.modules)}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"found": ["vllm_cpu_grouped_gemm"], "heavy": []}


def test_route_entry_reads_as_its_line() -> None:
    entry = RouteEntry("reference", ("fp8_block",), rank=2, contract_line=5)
    assert str(entry) == 'route reference {"fp8_block"} rank 2'
    assert entry.serves("reference", "fp8_block") and not entry.serves("run", "fp8_block")


# ---- the tools' choices, unchanged ----------------------------------------------------------------

#: What the tools named before the contracts declared it (layoutc/tools/run.py DEFAULT_CONTRACT,
#: quant_run/runner.py INT4_CONTRACT / INT8_CONTRACT with codes.py INT4PACK_SCHEMES and rank8.py
#: INT8PACK_SCHEMES, quant_run/padded.py REFERENCE_CONTRACTS, audit/formats.py CONTRACT_FORMATS).
OLD_RUN = {"unquantized": ("vllm_cpu_grouped_gemm",),
           "gptq_int4": ("torch_int4pack_gptq_moe",), "awq_int4": ("torch_int4pack_gptq_moe",),
           "ct_wna16_int4": ("torch_int4pack_gptq_moe",),
           "gptq_int8": ("torch_int8pack_gptq_moe",), "ct_wna16_int8": ("torch_int8pack_gptq_moe",)}
OLD_REFERENCE = {"gptq_int4": ("marlin_moe_wna16",), "gptq_int8": ("marlin_moe_gptq_int8",),
                 "ct_wna16_int4": ("marlin_moe_wna16",), "ct_wna16_int8": ("marlin_moe_gptq_int8",),
                 "awq_int4": ("marlin_moe_awq",), "fp8_block": ("marlin_moe_fp8", "marlin_moe_ct_fp8"),
                 "mxfp4": ("vllm_cpu_mxfp4_gpt_oss_moe", "flashinfer_trtllm_mxfp4_moe"),
                 "nvfp4": ("flashinfer_nvfp4_moe",), "mxfp4_ct": ("marlin_moe_ct_mxfp4",)}
OLD_AUDIT = {"aiter_fused_moe": ("unquantized", "mxfp4"), "aiter_mxfp4_w4a4_moe": ("mxfp4",)}


def test_the_declared_routes_are_the_tables_they_replace() -> None:
    from layoutc.tools.audit.formats import audit_formats
    from layoutc.tools.routes import route_contracts, run_contract

    for fmt in interface.CHECKPOINT_FORMATS:
        assert route_contracts("run", fmt) == OLD_RUN.get(fmt, ()), fmt
        assert route_contracts("reference", fmt) == OLD_REFERENCE.get(fmt, ()), fmt
    assert run_contract() == "vllm_cpu_grouped_gemm"
    listed = {}
    for path in CONTRACTS:
        contract = load(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))[0]
        assert contract is not None
        if audit_formats(contract) is not None:
            listed[contract.name] = audit_formats(contract)
    assert listed == OLD_AUDIT


def test_quant_run_picks_the_same_routes() -> None:
    from layoutc.tools.quant_run.runner import _routes

    def routes(scheme: str, contract: str | None = None) -> list[tuple[str, str | None]]:
        args = SimpleNamespace(contract=contract)
        return [(r.kind, r.contract) for r in _routes(args, SimpleNamespace(name=scheme, method=_METHOD[scheme]))]

    assert routes("gptq_int4") == [("int4pack", "torch_int4pack_gptq_moe"), ("padded", "marlin_moe_wna16")]
    assert routes("gptq_int8") == [("int8pack", "torch_int8pack_gptq_moe"), ("padded", "marlin_moe_gptq_int8")]
    assert routes("gptq_int4", "torch_int4pack_gptq_moe") == [("int4pack", "torch_int4pack_gptq_moe")]
    assert routes("gptq_int4", "marlin_moe_wna16") == [("padded", "marlin_moe_wna16")]
    assert routes("gptq_int8", "torch_int4pack_gptq_moe") == [("padded", "torch_int4pack_gptq_moe")]
    assert routes("fp8_block") == [("padded", "marlin_moe_fp8")]
    assert routes("mxfp4") == [("padded", "vllm_cpu_mxfp4_gpt_oss_moe")]
    assert routes("nvfp4") == [("padded", "flashinfer_nvfp4_moe")]
    assert routes("fp8_channel") == [("even", None)]


_METHOD = {"gptq_int4": "gptq", "gptq_int8": "gptq", "fp8_block": "fp8", "mxfp4": "mxfp4", "nvfp4": "modelopt",
           "fp8_channel": "fp8"}


def test_every_format_the_tools_name_is_one_a_route_may_name() -> None:
    from layoutc.tools.audit.formats import FORMAT_LABELS
    from layoutc.tools.quant_run.codes import INT4PACK_SCHEMES
    from layoutc.tools.quant_run.rank8 import INT8PACK_SCHEMES

    named = set(FORMAT_LABELS) | set(INT4PACK_SCHEMES) | set(INT8PACK_SCHEMES) | set(OLD_REFERENCE)
    assert named <= set(interface.CHECKPOINT_FORMATS), named - set(interface.CHECKPOINT_FORMATS)


# ---- kit drivers: the contracts they drive, from the contracts' `models` (and `route`) lines ---------

#: What each driver named before (`CONTRACTS = (...)` in layoutc/tools/kit/drivers/*.py).
OLD_DRIVEN = {"aiter_mxfp4": ("aiter_fused_moe",), "aiter_unquantized": ("aiter_unquantized_moe",),
              "flashinfer_mxfp8_align": ("flashinfer_trtllm_mxfp8_moe",),
              "flashinfer_nvfp4_align": ("flashinfer_nvfp4_moe",), "marlin_mxfp8": ("marlin_moe_fp8",),
              "marlin_wna16": ("marlin_moe_wna16",), "sglang_cpu_fp8": ("sglang_cpu_fp8_moe",),
              "sglang_cpu_mxfp4": ("sglang_cpu_mxfp4_moe",), "sglang_cpu_unquantized": ("sglang_cpu_moe",),
              "vllm_cpu_int8": ("vllm_cpu_int8_moe",), "vllm_cpu_unquantized": ("vllm_cpu_grouped_gemm",)}


def test_each_driver_drives_the_contracts_it_named() -> None:
    from layoutc.tools.kit.write import driven, drivers

    table = drivers()
    assert {name: driven(d) for name, d in table.items() if name in OLD_DRIVEN} == OLD_DRIVEN
    loaded = [load(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))[0] for p in CONTRACTS]
    for name, d in table.items():  # the checked contracts say the same as the generated modules
        from_ir = tuple(sorted(c.name for c in loaded if c is not None and d.drives(
            [(m.engine, m.target) for m in c.models], {f for r in c.routes for f in r.formats})))
        assert from_ir == driven(d), name


def test_a_driver_refuses_a_contract_that_models_its_objects_but_not_its_format(tmp_path, capsys) -> None:
    """marlin_moe_gptq_int8 models MarlinExperts and AutoGPTQMoEMethod as marlin_moe_wna16 does; the
    int4 driver's SERVES (gptq_int4, a format only marlin_moe_wna16's `route` serves) keeps it out."""
    out = tmp_path / "test_kit.py"
    assert main(["kit", str(ROOT / "contracts" / "marlin_moe_gptq_int8.moe"), "--path", "marlin_wna16",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error[LR180]: driver marlin_wna16 drives the contracts whose `models vllm` lines name " in err, err
    assert "and serve gptq_int4; marlin_moe_gptq_int8 is not one of them" in err and not out.exists()
