"""The verifier's division encoding (quotient/remainder variables, layoutc/compiler/verify/smt.py) against a
brute force: on small domains every configuration is evaluated in Python
(layoutc/compiler/evaluate.py, floor division) and each size property decided there
(tests/support/division_oracle.py); the verifier's status per property must be the same, its
redundant-gate warnings the same gates, its waste bound at most the true worst case,
and every counterexample's configuration admitted, breaking its property, with the
numbers of its message equal to the contract's values there.

Inputs: 40 division-heavy random contracts with fixed seeds (tests/support/division_gen.py:
divisors that are lets over several finite parameters, nested round_up/cdiv, % in
rules and align clauses, block shards in blocks of a finite let) and the hand-written
cases of tests/cases/division/, each with its expected statuses in a `.expected` file
(two of them, `large_values*`, have sizes up to 2^40 and tp_size up to 4096: too large
to enumerate, checked against their expected statuses and their counterexample's
numbers only).
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
import z3

from layoutc.compiler import ir
from layoutc.compiler.source import load
from layoutc.compiler.verify.prove import verify
from tests.support.division_gen import DivGen
from tests.support.division_oracle import SIZE_PROPS, Skip, check_message, truth

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted((ROOT / "tests" / "cases" / "division").glob("*.moe"))
SEEDS = range(40)


def _agree(contract: ir.Contract, name: str) -> list[str]:
    """Disagreements of the verifier with the brute force (and its messages with the contract)."""
    verdicts = {v.property: v for v in verify(contract)}
    problems = [f"{name} {p}: {m}" for v in verdicts.values() for m in check_message(contract, v)
                for p in [v.property]]
    try:
        want = truth(contract)
    except Skip as exc:
        return [*problems, f"{name}: not brute-forceable ({exc})"]
    for prop in SIZE_PROPS:
        got = verdicts[prop].status
        if got != want[prop]:
            problems.append(f"{name} {prop}: verifier {got}, brute force {want[prop]}: {verdicts[prop].detail[:300]}")
    admission = verdicts["admission"]
    if admission.status == "proved":
        lines = {int(w.split()[1].rstrip(":")) for w in admission.warnings}
        if lines != want["redundant"]:
            problems.append(f"{name} admission: redundant gates {sorted(lines)}, brute force {sorted(want['redundant'])}")
    waste = verdicts["waste"]
    if waste.counterexample is not None:
        bound = int(waste.detail.split(">= ")[1].split("%")[0])
        if want["worst"] is None or bound > want["worst"]:
            problems.append(f"{name} waste: bound {bound}% above the true worst {want['worst']}%")
    return problems


@pytest.mark.slow
def test_generated_division_contracts_agree_with_brute_force() -> None:
    problems: list[str] = []
    checked = 0
    statuses: set[tuple[str, str]] = set()
    for seed in SEEDS:
        text = DivGen(random.Random(f"differential:{seed}"), small=True).contract()
        contract, diags, _ = load(f"divgen_{seed}.moe", text)
        assert contract is not None, (seed, [d.message for d in diags])
        found = _agree(contract, f"seed {seed}")
        assert not any("not brute-forceable" in p for p in found), found
        problems += found
        checked += 1
        statuses |= {(v.property, v.status) for v in verify(contract) if v.property in SIZE_PROPS}
    assert checked == len(SEEDS)
    # the sample exercises both answers (else agreement would prove little)
    assert {s for _, s in statuses} >= {"proved", "counterexample"}, statuses
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_division_case(path: Path) -> None:
    contract, diags, _ = load(str(path))
    assert contract is not None, [d.message for d in diags]
    expected = json.loads(path.with_suffix(".expected").read_text())["statuses"]
    got = {v.property: v.status for v in verify(contract)}
    assert {p: got[p] for p in expected} == expected
    problems = _agree(contract, path.stem)
    if path.stem.startswith("large_values"):
        problems = [p for p in problems if "not brute-forceable" not in p]
    else:
        assert not any("not brute-forceable" in p for p in problems), problems
    assert not problems, "\n".join(problems)


def test_the_division_corpus_is_complete() -> None:
    assert len(CASES) >= 10
    for path in CASES:
        assert path.with_suffix(".expected").exists(), path


def test_a_divisor_with_zero_or_negative_values_is_expanded_over_its_values() -> None:
    """The checker refuses such a divisor (LC303), so the IR is edited here: tp_size's
    domain becomes {-2, 0, 3}. The encoder then makes no quotient variable for I / tp_size
    and keeps the If over the values; at tp_size = 3 the let is floor division."""
    from layoutc.compiler.verify.smt import Encoder

    path = ROOT / "tests" / "cases" / "division" / "product_divisor.moe"
    contract, _, _ = load(str(path))
    assert contract is not None
    tp = contract.param("tp_size")
    params = tuple(replace(p, values=(-2, 0, 3)) if p is tp else p for p in contract.params)
    edited = replace(contract, params=params)
    enc = Encoder(edited)
    ipp = next(x for x in edited.lets if x.name == "ipp")
    term = enc.expr(ipp.value)
    # no definition divides by tp_size (nor by the require's tp_size * group_size): both fall back
    assert enc.aux and not any("tp_size" in str(a) for a in enc.aux), enc.aux
    assert z3.is_app_of(term, z3.Z3_OP_ITE), term
    for size in (0, 1, 2, 3, 7, 240):
        s = z3.Solver(ctx=enc.ctx)
        s.add(*enc.aux, enc.vars["tp_size"] == 3, enc.vars["intermediate_size"] == size, term != size // 3)
        assert s.check() == z3.unsat, size
