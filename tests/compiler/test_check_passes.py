"""The checker's passes one at a time, on small in-memory modules (no files, no solver, no kernels).

Each test builds a `Scope` and a `Sink` and runs the passes it is about, in `PASSES`
order, so a failure names the pass that broke. The whole-contract behaviour is pinned by
the error corpus (tests/cases/errors) and the verdict snapshot.
"""

from __future__ import annotations

from typing import get_args

import pytest

from layoutc.compiler import ir
from layoutc.compiler import syntax as A
from layoutc.compiler.check import PASSES, check, run_passes
from layoutc.compiler.check.declarations import ONCE, declarations, declare_once, default_policy, required
from layoutc.compiler.check.fills import check_fill_ranges, check_tail_fills, resolve_fills
from layoutc.compiler.check.params import declare_param
from layoutc.compiler.check.scope import MAX_ERRORS, MAX_PARAMS, OnceDecl, Scope, Sink
from layoutc.compiler.check.shard import check_shard
from layoutc.compiler.check.structure import check_structure
from layoutc.compiler.diagnostics import Diagnostic, Span
from layoutc.compiler.parse import parse
from tests.conftest import ROOT

FILE = "mem.moe"
BASE = (ROOT / "tests" / "cases" / "errors" / "_base.moe.txt").read_text(encoding="utf-8")


def _scope(text: str) -> tuple[Scope, Sink]:
    module, diags = parse(text, FILE)
    assert module is not None, diags
    return Scope(module, text), Sink()


def _codes(sink: Sink) -> list[str]:
    return [d.code for d in sink.diagnostics]


def _at(line: int) -> Span:
    return Span(FILE, line, 1, line, 1)


def _line(d: Diagnostic) -> int:
    return d.span.line


# ---- the once-per-contract table ----------------------------------------------------


def test_once_table_covers_every_once_declaration() -> None:
    assert set(ONCE) == set(get_args(OnceDecl))
    assert sorted(ONCE.values()) == ["contract", "experts ... over", "glue", "kernel", "policy", "shard"]


def test_declarations_report_each_duplicate_once_with_the_first_declaration() -> None:
    text = ("contract a\ncontract b\nsource \"s\"\npolicy error\npolicy fallback c\nshard x over tp_size\n"
            "contract d\nshard y over tp_size\nkernel k {}\nkernel k2 {}\nglue g {}\nglue g2 {}\n")
    scope, sink = _scope(text)
    declarations(scope, sink)
    found = [(d.code, _line(d), d.message, [(r.span.line, r.message) for r in d.related]) for d in sink.diagnostics]
    assert found == [
        ("LC206", 2, "more than one `contract` declaration", [(1, "first declared here")]),
        ("LC206", 5, "more than one `policy` declaration", [(4, "first declared here")]),
        ("LC206", 7, "more than one `contract` declaration", [(1, "first declared here")]),
        ("LC206", 8, "more than one `shard` declaration", [(6, "first declared here")]),
        ("LC206", 10, "more than one `kernel` declaration", [(9, "first declared here")]),
        ("LC206", 12, "more than one `glue` declaration", [(11, "first declared here")]),
    ]
    first = scope.first(A.ContractDecl)
    assert first is not None and first.name == "a"
    kernel = scope.first(A.KernelDecl)
    assert kernel is not None and kernel.name == "k"
    assert scope.sources == ["s"]


def test_declare_once_checks_the_first_name_only() -> None:
    scope, sink = _scope("contract ok\n")
    declarations(scope, sink)
    declare_once(scope, sink, A.ContractDecl("_bad", _at(2)))  # a second contract: LC206, its name unchecked
    assert _codes(sink) == ["LC206"]
    scope, sink = _scope("source \"s\"\n")
    declare_once(scope, sink, A.PolicyDecl("fallback", "class", _at(1)))
    assert _codes(sink) == ["LC203"]  # `class` is a Python keyword
    assert scope.first(A.PolicyDecl) is not None


def test_required_points_at_the_contract_or_line_one() -> None:
    scope, sink = _scope("param p: int in 1..2\n")
    declarations(scope, sink)
    required(scope, sink)
    assert [(d.code, _line(d)) for d in sink.diagnostics] == [("LC205", 1), ("LC209", 1)]
    scope, sink = _scope("param p: int in 1..2\n\ncontract c\n")
    declarations(scope, sink)
    required(scope, sink)
    assert [(d.code, _line(d)) for d in sink.diagnostics] == [("LC209", 3)]


def test_default_policy_is_a_warning() -> None:
    scope, sink = _scope("contract c\n")
    declarations(scope, sink)
    default_policy(scope, sink)
    assert [(d.code, d.severity) for d in sink.diagnostics] == [("LC210", "warning")]
    assert not sink.has_errors() and sink.error_count == 0


# ---- params, lets and source order ---------------------------------------------------


def test_param_domains() -> None:
    scope, sink = _scope("param r: int in 4..1\nparam s: int in {2, 1, 2}\nparam d: int in 1..4 = 9\n"
                         "param ok: int in {8, 2} = 8\nparam b: bool\n")
    declarations(scope, sink)
    assert [(d.code, _line(d)) for d in sink.diagnostics] == [("LC302", 1), ("LC202", 2), ("LC302", 3)]
    assert set(scope.params) == {"ok", "b"}
    assert scope.params["ok"].values == (2, 8) and scope.params["ok"].default == 8
    assert scope.bounds == {"ok": (2, 8)}
    assert {"r", "s", "d"} <= scope.poisoned and "ok" not in scope.poisoned


def test_enum_members() -> None:
    scope, sink = _scope("param e: enum {a, b, a}\nparam f: enum {x, Y}\nparam g: enum {b2, x}\n")
    declarations(scope, sink)
    found = [(d.code, _line(d), [r.span.line for r in d.related]) for d in sink.diagnostics]
    # `x` joined the members before `Y` failed: g's `x` clashes with it
    assert found == [("LC202", 1, [1]), ("LC204", 2, []), ("LC207", 3, [2])]
    assert scope.params == {}
    assert scope.members.keys() == {"x", "b2"}


def test_too_many_params() -> None:
    text = "".join(f"param p{i}: int in 0..1\n" for i in range(MAX_PARAMS + 1))
    scope, sink = _scope(text)
    declarations(scope, sink)
    assert [(d.code, _line(d)) for d in sink.diagnostics] == [("LC307", MAX_PARAMS + 1)]
    assert len(scope.params) == MAX_PARAMS


def test_declare_param_on_a_bare_node() -> None:
    scope, sink = _scope("contract c\n")
    declare_param(scope, sink, A.ParamDecl("n", A.RangeDomain(1, 3, _at(1)), _at(1), None))
    declare_param(scope, sink, A.ParamDecl("n", A.BoolDomain(_at(2)), _at(2), None))
    assert [(d.code, d.message) for d in sink.diagnostics] == [("LC202", "`n` is already defined")]
    assert scope.params["n"].kind == "range" and scope.defined_at["n"] == _at(1)


def test_names_are_visible_from_their_declaration_on() -> None:
    scope, sink = _scope("let a = b + 1\nlet b = c\nparam c: int in 1..4\nlet d = c * 2\n")
    declarations(scope, sink)
    assert [(d.code, _line(d)) for d in sink.diagnostics] == [("LC208", 1), ("LC201", 2)]
    assert set(scope.lets) == {"d"} and scope.bounds["d"] == (2, 8)


def test_rules_are_bool() -> None:
    scope, sink = _scope("param c: int in 1..4\nrequire c > 1 : \"m\"\nadmit c + 1 : \"n\"\n")
    declarations(scope, sink)
    assert [(d.code, _line(d)) for d in sink.diagnostics] == [("LC301", 3)]
    assert [(r.kind, r.message) for r in scope.rules] == [("require", "m")]


# ---- the sink ------------------------------------------------------------------------


def test_sink_stops_after_max_errors() -> None:
    sink = Sink()
    for i in range(MAX_ERRORS + 5):
        sink.error("LC201", _at(i + 1), f"e{i}")
    assert len(sink.diagnostics) == MAX_ERRORS + 1
    assert sink.diagnostics[-1].code == "LC107" and sink.full()
    sink.extend([])
    assert sink.error_count == MAX_ERRORS + 5


# ---- tensors, fills, structure, shard ---------------------------------------------------


def test_fill_ranges_and_tail_fills() -> None:
    text = ("param tp_size: int in {1, 2}\nparam intermediate_size: int in 1..64\n"
            "tensor w: weight w13 {\n  axis n = intermediate_size\n  storage int8\n  fill 200\n  tail fill 1\n}\n")
    scope, sink = _scope(text)
    declarations(scope, sink)
    assert sink.diagnostics == [] and set(scope.tensors) == {"w"}
    resolve_fills(scope, sink)
    check_fill_ranges(scope, sink)
    assert [(d.code, _line(d), d.message) for d in sink.diagnostics] == [
        ("LC308", 6, "pad code 200 of `w` does not fit int8 (-128..127)")]
    check_shard(scope, sink)
    assert scope.shard is not None and scope.shard.implicit and scope.shard.blocks is None
    check_tail_fills(scope, sink)
    assert [d.code for d in sink.diagnostics] == ["LC308", "LC415"]


def test_fill_decoded_resolves_to_a_code() -> None:
    text = ("tensor s: scale w13 {\n  axis n = 4\n  storage uint8\n  code 0..255\n  decode = code - 128\n"
            "  fill decoded 0\n}\n")
    scope, sink = _scope(text)
    declarations(scope, sink)
    resolve_fills(scope, sink)
    assert sink.diagnostics == []
    assert scope.tensors["s"].fill == 128 and scope.tensors["s"].fill_kind == "decoded"


def test_structure_runs_only_without_errors() -> None:
    scope, sink = _scope("contract c\ntensor w: weight w13 {\n  axis n = 4\n  storage int8\n  fill 0\n}\n")
    declarations(scope, sink)
    check_structure(scope, sink)
    assert [(d.code, _line(d)) for d in sink.diagnostics] == [("LC410", 2), ("LC409", 1)]
    sink = Sink()
    sink.error("LC201", _at(1), "an earlier error")
    check_structure(scope, sink)
    assert _codes(sink) == ["LC201"]


def test_shard_named_otherwise_and_per_rank_sizes() -> None:
    scope, sink = _scope("contract c\nparam tp: int in {1, 2}\n")
    declarations(scope, sink)
    check_shard(scope, sink)
    assert [(d.code, _line(d)) for d in sink.diagnostics] == [("LC414", 2)] and scope.shard is None
    text = ("param i: int in 1..64\nparam ranks_here: int in {1, 2}\n"
            "tensor w: weight w13 {\n  axis n = i / ranks_here\n  storage int8\n  fill 0\n}\n")
    scope, sink = _scope(text)
    declarations(scope, sink)
    check_shard(scope, sink)
    assert [(d.code, _line(d)) for d in sink.diagnostics] == [("LC414", 4)]
    assert "`ranks_here`" in sink.diagnostics[0].message


# ---- the pipeline ----------------------------------------------------------------------


def test_passes_are_functions_run_in_order() -> None:
    assert all(callable(p) for p in PASSES) and len(set(PASSES)) == len(PASSES)
    assert PASSES[0] is declarations
    names = [p.__name__ for p in PASSES]
    assert names.index("check_kernel") < names.index("glue_matches_kernel") < names.index("build_contract")
    assert names.index("check_shard") < names.index("check_tail_fills")


def test_the_base_contract_builds() -> None:
    module, diags = parse(BASE, FILE)
    assert module is not None, diags
    scope, sink = run_passes(module, BASE)
    assert sink.diagnostics == []
    assert isinstance(scope.contract, ir.Contract) and scope.contract.name == "base"
    assert scope.kernel is not None and scope.glue is not None and scope.shard is not None
    assert check(module, BASE) == (scope.contract, [])


def test_stopping_before_build_leaves_no_contract() -> None:
    module, _ = parse(BASE, FILE)
    assert module is not None
    scope, sink = run_passes(module, BASE, PASSES[:3])
    assert scope.contract is None and scope.kernel is None and sink.diagnostics == []


@pytest.mark.parametrize("text, code", [
    ("contract c\nsource \"s\"\n", "LC409"),
    (BASE.replace("op forward", "op forwards"), "LC502"),
    (BASE.replace("activation activation\n", "activation silu\n"), "LC502"),
])
def test_check_refuses(text: str, code: str) -> None:
    module, _ = parse(text, FILE)
    assert module is not None
    contract, diags = check(module, text)
    assert contract is None and code in [d.code for d in diags]


_W2_PACKED = '''  axis k = pad(per_rank -> padded)
  storage dtype
  fill 0
}'''


def _packed_w2(spec: str) -> str:
    """The base contract, without its glue, with w2's k packed as `spec` (int32 storage) and a
    zero point tied `like` it."""
    assert _W2_PACKED in BASE and "\nglue vllm_cpu_moe {" in BASE
    return BASE[:BASE.index("\nglue vllm_cpu_moe {")].replace(_W2_PACKED, f'''  axis k = pad(per_rank -> padded) {spec}
  storage int32
  fill 0
}}
tensor w2_zero: zero w2 {{
  axis experts = 8
  axis n = hidden_size
  axis k = like w2.k
  storage int32
  fill 0
}}''')


@pytest.mark.parametrize("spec, want", [
    ("pack 8", tuple(range(8))),
    ("pack 8 order (0, 2, 4, 6, 1, 3, 5, 7)", (0, 2, 4, 6, 1, 3, 5, 7)),
    ("pack 4 order (3, 2, 1, 0,)", (3, 2, 1, 0)),
    ("pack 1 order (0)", (0,)),
])
def test_pack_order_reaches_the_ir_and_like_axes(spec: str, want: tuple[int, ...]) -> None:
    """`pack N order (...)`: the IR axis's pack_order (identity when omitted), copied by `like`."""
    text = _packed_w2(spec)
    module, diags = parse(text, FILE)
    assert module is not None and not diags, diags
    contract, diags = check(module, text)
    assert contract is not None, [d.message for d in diags]
    k = contract.tensor("w2").axis("k")
    assert k.pack_order == want and contract.tensor("w2_zero").axis("k").pack_order == want
    assert [k.slot_of(v) for v in range(k.pack)] == [want.index(v) for v in range(k.pack)]
    assert contract.tensor("w13").axis("n").pack_order == (0,)  # unpacked: the one slot


@pytest.mark.parametrize("spec", ["pack 8 order (0, 2, 4, 6, 1, 3, 5)", "pack 4 order (0, 1, 2, 4)",
                                  "pack 2 order (1, 1)", "pack 2 order (0, 1, 2)"])
def test_pack_order_must_be_a_permutation(spec: str) -> None:
    text = _packed_w2(spec)
    module, diags = parse(text, FILE)
    assert module is not None and not diags, diags
    contract, diags = check(module, text)
    assert contract is None and [d.code for d in diags if d.severity == "error"] == ["LC417"], diags


def test_a_long_pack_order_is_shown_cut() -> None:
    """LC417 on a 5000-slot order names its first pack + 1 slots and its length, not all 5000
    (it printed a 15 KB message; the parser's token limit allows about 50,000 slots)."""
    text = _packed_w2("pack 2 order (" + ", ".join(["1"] * 5000) + ")")
    module, diags = parse(text, FILE)
    assert module is not None and not diags, diags
    contract, diags = check(module, text)
    assert contract is None and [d.code for d in diags] == ["LC417"], diags
    assert "`pack 2 order (1, 1, 1, ... (5000 in all))` is not a permutation of 0..1" in diags[0].message
    assert len(diags[0].message) < 200, len(diags[0].message)


_AWQ_QWEIGHT = "  storage int32\n  code 0..15\n  # uint4 with a zero point"


@pytest.mark.parametrize("storage, codes, refused", [
    ("int32", "0..15", False),  # the shipped contract: 8 nibbles per int32
    ("int32", "-8..7", False),  # a signed nibble fits too
    ("int32", "0..16", True),  # 5-bit codes in 4-bit slots
    ("int16", "0..15", True),  # 8 per int16: 2 bits each
    ("int8", "0..15", True),  # 8 per int8: 1 bit each
])
def test_a_packed_integer_code_range_must_fit_its_slot(storage: str, codes: str, refused: bool) -> None:
    """docs/language.md: a packed integer storage holds each code in its bits / pack bits (LC416).
    It was enforced only for codes a number format decodes (`e2m1(code)`); marlin_moe_awq's
    integer `(code - z) * s` passed with `code 0..15` in 1-bit slots (`pack 8` of int8) or
    `code 0..16` in nibbles, and verify proved all 10 properties of both."""
    text = (ROOT / "contracts" / "marlin_moe_awq.moe").read_text()
    assert text.count(_AWQ_QWEIGHT) == 1
    text = text.replace(_AWQ_QWEIGHT, _AWQ_QWEIGHT.replace("int32", storage).replace("0..15", codes))
    module, diags = parse(text, FILE)
    assert module is not None and not diags, diags
    contract, diags = check(module, text)
    errors = [d for d in diags if d.severity == "error"]
    if not refused:
        assert contract is not None and not errors, errors
        return
    assert contract is None and [d.code for d in errors] == ["LC416"], errors
    assert f"`w13_qweight` declares `code {codes}`, but it packs 8 per {storage}" in errors[0].message
