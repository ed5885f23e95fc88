"""The runtime (layoutc/runtime) on its own: interfaces, imports, layout, activations, typed weights."""

from __future__ import annotations

import ast
import importlib
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch

from layoutc.compiler import glues
from layoutc.runtime import activations, layout, packed, plans
from layoutc.runtime.errors import LayoutContractError
from tests.conftest import ROOT

RUNTIME = ROOT / "layoutc" / "runtime"


@pytest.mark.parametrize("kind", sorted(glues.registry()))
def test_static_interface_is_the_one_the_module_runs_with(kind: str) -> None:
    entry = glues.registry()[kind]
    module = importlib.import_module(f"layoutc.runtime.glue.{entry.module}")
    assert entry.interface == module.INTERFACE
    assert tuple(module.PUBLIC) == entry.public
    for name in entry.public:
        assert callable(getattr(module, name)), name
    assert all(hasattr(module, f) for f in ("load_kernel", "prepack_padded", "fused_moe"))
    # the ops a glue calls are the ones it declares
    declared = dict(entry.interface.ops)
    for slot, attr in (("forward", "FORWARD_OP"), ("prepack", "PREPACK_OP"), ("convert", "CONVERT_OP")):
        if slot in declared:
            assert getattr(module, attr) == declared[slot]


@pytest.mark.parametrize("kind", sorted(glues.registry()))
def test_router_weight_is_declared_with_its_option(kind: str) -> None:
    """A glue that says its kernel weights the input takes `apply_router_weight_on_input`, and only then."""
    interface = glues.registry()[kind].interface
    assert set(interface.router_weight) <= {"output", "input"} and "output" in interface.router_weight
    takes = "apply_router_weight_on_input" in interface.forward_options
    assert ("input" in interface.router_weight) == takes, interface.router_weight
    assert interface.router_weight_input_top_k is None or takes


def test_runtime_imports_only_torch_and_the_standard_library() -> None:
    for path in sorted(RUNTIME.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [str(node.module).split(".")[0]]
            else:
                continue
            for name in names:
                assert name == "torch" or name in sys.stdlib_module_names or name == "__future__", (path, name)


def test_interface_module_and_package_need_no_torch() -> None:
    """The compiler imports these (glues.py) and must run without torch: the standard library
    only, and the runtime's own standard-library-only layout algebra (algebra.py), operator
    semantics (vocab.py, which a `models ... when` Condition evaluates with) and twin (twin.py:
    one runtime per process)."""
    for path in (RUNTIME / "__init__.py", RUNTIME / "interface.py", RUNTIME / "glue" / "__init__.py",
                 RUNTIME / "algebra.py", RUNTIME / "vocab.py", RUNTIME / "twin.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] in sys.stdlib_module_names for a in node.names), path
            elif isinstance(node, ast.ImportFrom) and (node.level, node.module) in ((1, "algebra"), (1, "twin")):
                assert path.name == "interface.py", (path, node.module)
            elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
                assert path.name == "interface.py" and [a.name for a in node.names] == ["vocab"], path
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0 and str(node.module).split(".")[0] in sys.stdlib_module_names | {"__future__"}, \
                    (path, node.module)


def test_copied_runtime_is_byte_identical_below_its_header() -> None:
    for rel, text in glues.runtime_files():
        copy = (ROOT / "generated" / "_runtime" / rel).read_text(encoding="utf-8")
        assert copy.split("\n", 2)[2] == text, rel


def _axes(layout_name: str, logical: int, padded: int) -> tuple[layout.Axis, ...]:
    return (layout.Axis("experts", "none", 1, 2, 2, False), layout.Axis("n", layout_name, 2, logical, padded, True),
            layout.Axis("k", "none", 1, 3, 3, False))


@pytest.mark.parametrize("name", ["halves", "concat", "interleave"])
def test_pad_places_rows_by_layout(name: str) -> None:
    x = torch.arange(2 * 2 * 3 * 3, dtype=torch.float32).reshape(2, 6, 3) + 1
    out = layout.pad("c", "w13", x, _axes(name, 3, 4), torch.float32, 0.0, None)
    assert out.shape == (2, 8, 3)
    rows = {"halves": [0, 1, 2, 4, 5, 6], "concat": [0, 1, 2, 3, 4, 5], "interleave": [0, 1, 2, 3, 4, 5]}[name]
    assert torch.equal(out[:, rows], x)
    pad_rows = sorted(set(range(8)) - set(rows))
    assert not out[:, pad_rows].any()
    assert torch.equal(layout.unpad("c", "w13", out, _axes(name, 3, 4), torch.float32), x)


def test_interleaved_shard_is_a_block_of_pairs() -> None:
    full = torch.arange(2 * 8 * 3, dtype=torch.float32).reshape(2, 8, 3)  # 4 pairs
    axes = _axes("interleave", 2, 3)
    for rank in (0, 1):
        shard = layout.shard("c", "w13", full, rank, 2, axes, torch.float32, 0.0, None)
        assert torch.equal(shard[:, :4], full[:, 4 * rank:4 * rank + 4])
        assert not shard[:, 4:].any()


def test_output_bias_is_given_once_over_the_ranks() -> None:
    axes = (layout.Axis("experts", "none", 1, 2, 2, False), layout.Axis("n", "none", 1, 3, 3, False))
    bias = torch.ones(2, 3)
    shards = [layout.shard("c", "w2_bias", bias, r, 4, axes, torch.float32, 0.0, None, once=True) for r in range(4)]
    assert torch.equal(sum(shards), bias)  # type: ignore[arg-type]


def test_sparse_and_other_layouts_get_a_named_error() -> None:
    axes = _axes("halves", 3, 4)
    with pytest.raises(LayoutContractError, match=r"w13 has layout torch\.sparse_coo"):
        layout.pad("c", "w13", torch.zeros(2, 6, 3).to_sparse(), axes, torch.float32, 0.0, None)


def test_swigluoai_is_the_published_formula() -> None:
    torch.manual_seed(0)
    h = torch.randn(5, 8, dtype=torch.float64) * 6
    gate, up = h[:, 0::2], h[:, 1::2]
    g = torch.minimum(gate, torch.tensor(7.0, dtype=torch.float64))
    u = torch.clamp(up, -7.0, 7.0)
    expected = (u + 1) * g / (1 + torch.exp(-1.702 * g))  # csrc/activation_kernels.cu swigluoai_and_mul
    assert torch.allclose(activations.gated(h, "swigluoai", "interleave"), expected)
    with pytest.raises(LayoutContractError, match="no formula"):
        activations.gated(h, "relu2", "halves")


def test_packed_weights_are_typed() -> None:
    cfg = packed.KernelConfig("c", 2, 3, 4, torch.float32, "silu", "halves", (("w13", (2, 8, 3)),))
    weight = packed.PackedWeight("w13", cfg, torch.zeros(1))
    assert packed.check_packed("c", "packed_w13", weight, "w13", cfg) is weight.data
    with pytest.raises(LayoutContractError, match="PackedWeight"):
        packed.check_packed("c", "packed_w13", torch.zeros(1), "w13", cfg)
    with pytest.raises(LayoutContractError, match=r"packed w13, expected the packed w2"):
        packed.check_packed("c", "packed_w2", weight, "w2", cfg)
    with pytest.raises(LayoutContractError, match="another configuration"):
        packed.check_packed("c", "packed_w13", weight, "w13", replace(cfg, intermediate_padded=8))


@dataclass(frozen=True)
class _Plan:
    size: int
    doubled: int
    supported: bool = True
    reason: str | None = None


def test_plan_checker_refuses_forged_plans() -> None:
    checker: plans.PlanChecker[_Plan] = plans.PlanChecker("c", _Plan, lambda p: _Plan(p.size, 2 * p.size))
    checker.require(_Plan(3, 6))
    with pytest.raises(LayoutContractError, match=r"dataclasses\.replace"):
        checker.require(_Plan(3, 7))
    with pytest.raises(LayoutContractError, match="expected a Plan"):
        checker.require(object())


def test_generated_lines_are_short() -> None:
    """Reviewable output: code lines stay under 100 columns (a lone string literal may not)."""
    for path in sorted((ROOT / "generated").glob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            stripped = line.strip().rstrip(",")
            if len(line) > 100 and not (stripped[:1] in "'\"" and stripped[-1:] in "'\""):
                raise AssertionError(f"{path.name}:{number}: {len(line)} columns: {line[:80]}...")


def test_runtime_file_list_matches_the_package() -> None:
    listed = {rel for rel, _ in glues.runtime_files()}
    on_disk = {p.relative_to(RUNTIME).as_posix() for p in RUNTIME.rglob("*.py")}
    assert listed == on_disk
    assert Path(ROOT / "generated" / "_runtime").is_dir()


def _fused(gate: torch.Tensor, up: torch.Tensor, source_layout: str, source_roles: tuple[str, ...]) -> torch.Tensor:
    """A fused [E, 2I, K] checkpoint tensor: the segments in `source_roles` order, as halves or pairs."""
    first, second = (gate, up) if source_roles == ("gate", "up") else (up, gate)
    if source_layout == "halves":
        return torch.cat([first, second], 1)
    return torch.stack([first, second], 2).flatten(1, 2)


@pytest.mark.parametrize("contract_roles", [("gate", "up"), ("up", "gate")])
@pytest.mark.parametrize("contract_layout", ["halves", "concat", "interleave"])
@pytest.mark.parametrize("source_roles", [("gate", "up"), ("up", "gate")])
@pytest.mark.parametrize("source_layout", ["halves", "interleave"])
def test_fused_source_lands_in_the_contract_segment_of_its_role(source_layout: str, source_roles: tuple[str, ...],
                                                               contract_layout: str,
                                                               contract_roles: tuple[str, ...]) -> None:
    """Every (source order, contract order) pair: a fused gate/up source loads its gate rows into
    the contract's gate segment and its up rows into its up segment, whatever either side's
    layout word and role order (the per-role loads, which name each role, are the oracle), at
    every rank of tp 1 and 2. Regression: an interleaved (gate, up) source was copied pair for
    pair into an interleaved (up, gate) contract (flashinfer_trtllm_mxfp4_moe), and a halves
    source segment by segment into a halves (up | gate) one (flashinfer_nvfp4_moe)."""
    from layoutc.runtime import loading

    E, inter, K = 2, 4, 3
    gate = torch.arange(E * inter * K, dtype=torch.float32).reshape(E, inter, K) + 1
    up = -gate
    src = _fused(gate, up, source_layout, source_roles)
    for tp in (1, 2):
        axes = (layout.Axis("experts", "none", 1, E, E, False),
                layout.Axis("n", contract_layout, 2, inter // tp, inter // tp + 1, True),
                layout.Axis("k", "none", 1, K, K, False))
        for rank in range(tp):
            want = loading.allocate("c", "w13", axes, torch.float32, 0.0, rank, tp)
            for role, part in (("gate", gate), ("up", up)):
                loading.load("c", "w13", want, part, axes, torch.float32, rank, tp, roles=contract_roles, role=role)
            got = loading.allocate("c", "w13", axes, torch.float32, 0.0, rank, tp)
            loading.load("c", "w13", got, src, axes, torch.float32, rank, tp, roles=contract_roles,
                         source_layout=source_layout, source_roles=source_roles)
            assert torch.equal(got, want), (tp, rank)
            # and by hand: the contract's segment 0 holds its first role's rows of this rank
            first = gate if contract_roles[0] == "gate" else up
            rows = inter // tp
            seg0 = {"halves": got[:, :rows], "concat": got[:, :rows], "interleave": got[:, 0:2 * rows:2]}[contract_layout]
            assert torch.equal(seg0, first[:, rank * rows:(rank + 1) * rows]), (tp, rank)


def test_fused_source_roles_must_order_the_contract_roles() -> None:
    from layoutc.runtime import loading

    axes = _axes("halves", 3, 4)
    dst = loading.allocate("c", "w13", axes, torch.float32, 0.0, 0, 1)
    for bad in (("gate", "gate"), ("gate",), ["gate", "up"], ("gate", "down")):
        with pytest.raises(LayoutContractError, match="source_roles"):
            loading.load("c", "w13", dst, torch.zeros(2, 6, 3), axes, torch.float32, 0, 1, roles=("gate", "up"),
                         source_roles=bad)  # type: ignore[arg-type]
