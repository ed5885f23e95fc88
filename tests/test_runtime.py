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
    only, and the runtime's own standard-library-only layout algebra (algebra.py)."""
    for path in (RUNTIME / "__init__.py", RUNTIME / "interface.py", RUNTIME / "glue" / "__init__.py",
                 RUNTIME / "algebra.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] in sys.stdlib_module_names for a in node.names), path
            elif isinstance(node, ast.ImportFrom) and (node.level, node.module) == (1, "algebra"):
                assert path.name == "interface.py", (path, node.module)
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
