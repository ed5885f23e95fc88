"""`models ENGINE {RELEASE, ...} "module:Qualified.name" [when COND]` (docs/language.md 3.2a).

The checker's codes (LC230-LC235), the generated `LAYOUT.models` against the checked IR, the
runtime `Condition` against the compiler's own evaluator on every parameter combination, and
the run-time query API (`layoutc.runtime.models`) on the generated package, without lark or z3.
Whether each target imports in the release it names is tests/conformance/test_models_targets.py.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from layoutc.compiler import ir
from layoutc.compiler.check import check
from layoutc.compiler.emit.render import condition_source
from layoutc.compiler.evaluate import eval_expr
from layoutc.compiler.parse import parse
from layoutc.compiler.source import load
from layoutc.runtime import interface
from layoutc.runtime import models as M
from layoutc.runtime.interface import Condition, ConditionError, ModelsEntry, release_key
from tests.conftest import ROOT

BASE = (ROOT / "tests" / "cases" / "errors" / "_base.moe.txt").read_text(encoding="utf-8")
CONTRACTS = sorted((ROOT / "contracts").glob("*.moe"))
CPU = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"


def _codes(*lines: str) -> list[str]:
    text = BASE.replace("policy error\n", "policy error\n" + "".join(f"{line}\n" for line in lines))
    module, diags = parse(text, "mem.moe")
    if module is None:
        return [d.code for d in diags]
    _, found = check(module, text)
    return [d.code for d in found if d.severity == "error"]


def _contract(*lines: str) -> ir.Contract:
    text = BASE.replace("policy error\n", "policy error\n" + "".join(f"{line}\n" for line in lines))
    module, diags = parse(text, "mem.moe")
    assert module is not None, diags
    contract, found = check(module, text)
    assert contract is not None, found
    return contract


# ---- the checker -------------------------------------------------------------------------

@pytest.mark.parametrize("line, code", [
    ('models vlm {"0.32.0"} "m.n:C"', "LC230"),
    ('models vllm {"0.32.0"} "vllm.x"', "LC231"),
    ('models vllm {"0.32.0"} "vllm.x:"', "LC231"),
    ('models vllm {"0.32.0"} "vllm x:C"', "LC231"),
    ('models vllm {"0.32.0"} "m:C:D"', "LC231"),
    ('models vllm {} "m:C"', "LC232"),
    ('models vllm {"0.32.0", "0.32.0"} "m:C"', "LC232"),
    ('models vllm {"latest"} "m:C"', "LC233"),
    ('models vllm {"0.32.0+cpu"} "m:C"', "LC233"),
    ('models vllm {"v0.32.0"} "m:C"', "LC233"),
    ('models vllm {"0.32.0"} "m:C" when tile == 32', "LC234"),  # a let
    ('models vllm {"0.32.0"} "m:C" when isaa == vec', "LC234"),  # unknown
    ('models vllm {"0.32.0"} "m:C" when w13 == 1', "LC234"),  # a tensor
    ('models vllm {"0.32.0"} "m:C" when match isa { vec => true, amx => false }', "LC234"),
    ('models vllm {"0.32.0"} "m:C" when if tp_size == 1 then true else false', "LC234"),
    ('models vllm {"0.32.0"} "m:C" when isa', "LC301"),
])
def test_a_malformed_models_line_is_refused_with_its_code(line: str, code: str) -> None:
    assert code in _codes(line)


def test_a_second_line_for_the_same_engine_release_and_target_is_lc235() -> None:
    assert _codes('models vllm {"0.32.0"} "m:C" when isa == vec',
                  'models vllm {"0.33.0", "0.32.0"} "m:C" when isa == amx') == ["LC235"]
    # another target, or the same target in other releases, is no duplicate
    assert _codes('models vllm {"0.32.0"} "m:C"', 'models vllm {"0.32.0"} "m:D"', 'models vllm {"0.33.0"} "m:C"',
                  'models sglang {"0.32.0"} "m:C"') == []


def test_a_models_line_may_stand_before_the_parameters_its_when_reads() -> None:
    text = BASE.replace('source "', 'models vllm {"0.32.0"} "m:C" when isa == amx and tp_size > 1\nsource "', 1)
    module, diags = parse(text, "mem.moe")
    assert module is not None, diags
    contract, found = check(module, text)
    assert contract is not None and [m.target for m in contract.models] == ["m:C"], found


def test_models_is_a_keyword_and_a_reserved_name() -> None:
    assert "LC203" in _codes("let models = 1")


def test_the_checked_lines_reach_the_ir_in_source_order() -> None:
    contract = _contract('models vllm {"0.32.0", "0.33.0"} "a.b:C.D" when isa == amx', 'models torch {"2.13.0"} "torch:mm"')
    first, second = contract.models
    assert (first.engine, first.releases, first.target, first.span.line) == ("vllm", ("0.32.0", "0.33.0"), "a.b:C.D",
                                                                             first.span.line)
    assert first.when is not None and second.when is None and second.engine == "torch"


# ---- the runtime condition against the compiler's evaluator ---------------------------------

WHENS = ("isa == amx", "isa != vec and tp_size > 1", "not (isa == vec) or dtype == float32",
         "tp_size * 2 >= 4 and activation == silu", "min(tp_size, 2) == 2 or hidden_size % 64 == 0")


@pytest.mark.parametrize("when", WHENS)
def test_the_generated_condition_is_what_the_compiler_evaluates(when: str) -> None:
    """The `Condition` source the emitter writes, evaluated on a parameter dict, agrees with the
    compiler's own evaluator (evaluate.py, which generated plan() and the verifier share) on every
    combination of the finite parameters and a few hidden sizes."""
    contract = _contract(f'models vllm {{"0.32.0"}} "m:C" when {when}')
    cond_ir = contract.models[0].when
    assert cond_ir is not None
    cond = eval(condition_source(cond_ir), {"Condition": Condition})  # the generated text, read back
    enums = {p.name: p.values for p in contract.params if p.kind in ("enum", "set")}
    names = sorted(enums)
    seen = set()
    for combo in itertools.product(*(enums[n] for n in names)):
        for hidden in (64, 96):
            env = {**dict(zip(names, combo, strict=True)), "hidden_size": hidden, "intermediate_size": 128}
            expected = eval_expr(cond_ir, env)
            # the tool passes enum values in any case, or as an object whose str ends in .member
            given = {k: (v.upper() if isinstance(v, str) else v) for k, v in env.items()}
            assert cond.holds(given) is bool(expected), (when, env)
            seen.add(bool(expected))
    assert seen == {True, False}, when  # the condition is neither always true nor always false here
    assert set(cond.params()) <= set(env)


def test_a_condition_names_the_parameter_it_lacks() -> None:
    cond = Condition("==", (Condition("param", value="isa"), Condition("const", value="amx")))
    with pytest.raises(ConditionError, match="isa") as info:
        cond.holds({"tp_size": 1})
    assert info.value.param == "isa" and isinstance(info.value, LookupError)
    entry = ModelsEntry("vllm", ("0.32.0",), f"{CPU}:CPUExpertsInt8", cond, 3)
    assert entry.applies({"isa": "AMX"}) and not entry.applies({"isa": "neon"})
    assert entry.models_release("0.32.0+cpu") and not entry.models_release("0.33.0")
    assert (entry.module, entry.qualname) == (CPU, "CPUExpertsInt8")
    assert str(entry) == f'models vllm {{"0.32.0"}} "{CPU}:CPUExpertsInt8" when isa == amx'


def test_releases_sort_as_versions() -> None:
    assert sorted(["0.32.0", "0.9.0", "0.33.0", "0.5.23"], key=release_key) == ["0.5.23", "0.9.0", "0.32.0", "0.33.0"]


# ---- the generated package ----------------------------------------------------------------------

@pytest.mark.parametrize("path", CONTRACTS, ids=lambda p: p.stem)
def test_the_generated_layout_carries_the_contracts_lines(path: Path) -> None:
    import importlib

    contract, diags, _ = load(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
    assert contract is not None, diags
    layout = importlib.import_module(f"layoutc_generated.{contract.name}").LAYOUT
    got = [(m.engine, m.releases, m.target, None if m.when is None else str(m.when), m.contract_line)
           for m in layout.models]
    want = [(m.engine, m.releases, m.target, None if m.when is None else str(eval(condition_source(m.when),
                                                                                   {"Condition": Condition})),
             m.span.line) for m in contract.models]
    assert got == want
    assert got, f"{contract.name} declares no `models` line: every shipped contract models an engine object"


def test_the_query_api_answers_from_the_generated_package() -> None:
    found = M.modelling("vllm", f"{CPU}:CPUExpertsInt8", "0.32.0+cpu", params={"isa": "amx"})
    assert [d.module for d in found] == ["layoutc_generated.vllm_cpu_int8_moe"]
    assert found[0].where.startswith("contracts/vllm_cpu_int8_moe.moe:")
    assert M.modelling("vllm", f"{CPU}:CPUExpertsInt8", "0.32.0", params={"isa": "neon"}) == ()
    # from 0.33.0 the amx class pads: another contract models it (issue 42 item 1)
    assert [d.contract for d in M.modelling("vllm", f"{CPU}:CPUExpertsInt8", "0.34.0", params={"isa": "amx"})] \
        == ["vllm_cpu_int8_padded_moe"]
    assert [d.contract for d in M.modelling("vllm", f"{CPU}:ArmCPUExpertsInt8", params={"isa": "neon"})] \
        == ["vllm_cpu_int8_moe"]
    unquantized = {d.contract: str(d.entry.when) for d in M.modelling("vllm", f"{CPU}:CPUUnquantizedExperts")}
    assert unquantized == {"vllm_cpu_grouped_gemm": "isa == vec", "zentorch_fused_moe": "None"}
    assert M.releases("vllm", "vllm_cpu_int8_moe") == ("0.32.0", "0.33.0", "0.34.0")
    assert M.releases("vllm", "vllm_cpu_int8_padded_moe") == ("0.33.0", "0.34.0")
    assert M.releases("sglang") == ("0.5.23",) and M.releases("flashinfer") == ("0.7.4",)
    assert M.is_modelled("vllm", "0.32.0") and not M.is_modelled("vllm", "0.31.0")
    assert set(M.contract_modules()) == {f"layoutc_generated.{p.stem}" for p in CONTRACTS}
    assert M.DEFAULT_PACKAGE == "layoutc_generated"


def test_target_of_names_a_class_as_a_models_line_does() -> None:
    assert M.target_of(ModelsEntry) == "layoutc.runtime.interface:ModelsEntry"
    with pytest.raises(TypeError):
        M.target_of(3)


def test_the_query_runs_with_torch_only_and_inside_the_generated_package() -> None:
    """No lark or z3 is imported by a query (torch only at run time); the generated package's own
    copy (`layoutc_generated._runtime.models`) answers for its package."""
    code = ("import json, sys\n"
            "import layoutc_generated._runtime.models as G\n"
            "found = [d.contract for d in G.modelling('vllm', release='0.32.0', params={'isa': 'amx'})]\n"
            "print(json.dumps({'package': G.DEFAULT_PACKAGE, 'found': found,\n"
            "                  'heavy': sorted(m for m in ('lark', 'z3', 'jinja2', 'layoutc.compiler') if m in sys.modules)}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    assert reply["package"] == "layoutc_generated" and reply["heavy"] == []
    assert "vllm_cpu_int8_moe" in reply["found"] and "vllm_cpu_grouped_gemm" in reply["found"]
    assert "sglang_cpu_moe" not in reply["found"]


def test_engines_are_one_table() -> None:
    assert interface.ENGINES == ("vllm", "sglang", "flashinfer", "aiter", "zentorch", "torch")
