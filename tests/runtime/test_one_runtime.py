"""One runtime per process (issue 41 item 3, layoutc/runtime/twin.py).

Beside layoutc, a generated module and layoutc share one class for each error and each
interface record, so one `except` catches what either side raises; a vendored generated
package still runs with torch only, and keeps its own classes where layoutc's runtime text
differs from its copy.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import layoutc.runtime.errors as errors
import layoutc.runtime.experts as experts
import layoutc.runtime.interface as interface
import layoutc.runtime.packed as packed
from layoutc.tools.checkpoints.loader import load_layer_rank_packed
from tests.conftest import ROOT

MODULES = sorted(p.stem for p in (ROOT / "generated").glob("*.py") if p.stem != "__init__")


def _plan(mod):  # type: ignore[no-untyped-def]
    return mod.plan(
        num_experts=2, hidden_size=64, intermediate_size=64, tp_size=1, isa="vec", activation="silu", dtype="float32"
    )


def test_one_except_catches_the_loader_and_the_generated_module() -> None:
    mod = importlib.import_module("layoutc_generated.vllm_cpu_grouped_gemm")
    plan = _plan(mod)
    caught = []
    for call in (
        lambda: load_layer_rank_packed(None, None, 0, mod, plan, 0, chunk_experts=0),  # type: ignore[arg-type]
        lambda: mod.pad_w13(torch.zeros(3, 3), plan),
    ):
        try:
            call()
        except mod.LayoutContractError as exc:
            caught.append(exc)
    assert len(caught) == 2, caught
    assert all(isinstance(e, errors.LayoutContractError) for e in caught)
    assert "chunk_experts=0" in str(caught[0]) and "w13" in str(caught[1])


@pytest.mark.parametrize("name", MODULES)
def test_each_module_shares_layoutcs_classes(name: str) -> None:
    mod = importlib.import_module(f"layoutc_generated.{name}")
    own = importlib.import_module("layoutc_generated._runtime.experts")
    assert mod.LayoutContractError is errors.LayoutContractError
    assert mod.KernelUnavailableError is errors.KernelUnavailableError
    assert own.ExpertParallelError is experts.ExpertParallelError
    assert isinstance(mod.LAYOUT, interface.ModuleLayout)
    assert all(isinstance(t, interface.TensorEntry) for t in mod.LAYOUT.tensors)
    assert all(isinstance(p, interface.PlanParam) for p in mod.LAYOUT.plan_params)
    if mod.LAYOUT.kernel is not None:
        assert isinstance(mod.LAYOUT.kernel, interface.KernelEntry)
        assert isinstance(mod.INTERFACE, interface.GlueInterface)
        assert mod.PackedWeight is packed.PackedWeight


# A vendored copy of the generated package (as `vend`), pad / unpad / a refused tensor.
VENDORED = """
import sys
{block}
sys.path.insert(0, {root!r})
import torch
import vend.vllm_cpu_grouped_gemm as mod
plan = mod.plan(num_experts=2, hidden_size=64, intermediate_size=48, tp_size=1, isa="vec",
                activation="silu", dtype="float32")
x = torch.randn(2, 96, 64)
padded = mod.pad_w13(x, plan)
assert padded.shape == (2, 128, 64) and torch.equal(mod.unpad_w13(padded, plan), x)
try:
    mod.pad_w13(torch.zeros(3, 3), plan)
except mod.LayoutContractError as exc:
    assert "w13" in str(exc)
else:
    raise AssertionError("a wrong shape was padded")
{check}
print("ok")
"""
BLOCK = """
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('layoutc', 'layoutc_generated', 'lark', 'jinja2', 'z3'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
"""


def _vendor(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "generated", tmp_path / "vend", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "vend"


def _run(tmp_path: Path, block: str, check: str) -> None:
    script = VENDORED.format(block=block, root=str(tmp_path), check=check)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


@pytest.mark.slow
def test_vendored_package_runs_without_layoutc(tmp_path: Path) -> None:
    _vendor(tmp_path)
    _run(
        tmp_path,
        BLOCK,
        "assert mod.LayoutContractError.__module__ == 'vend._runtime.errors'\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('layoutc', 'layoutc_generated')]",
    )


@pytest.mark.slow
def test_vendored_package_adopts_layoutc_when_the_runtime_text_is_the_same(tmp_path: Path) -> None:
    _vendor(tmp_path)
    _run(
        tmp_path,
        "",
        "import layoutc.runtime.errors as e, layoutc.runtime.interface as i\n"
        "assert mod.LayoutContractError is e.LayoutContractError\n"
        "assert isinstance(mod.LAYOUT, i.ModuleLayout)",
    )


@pytest.mark.slow
def test_vendored_package_keeps_its_own_classes_when_layoutcs_runtime_differs(tmp_path: Path) -> None:
    """Another layoutc (here: one glue file of the copy differs) is never adopted: the copy's
    classes stay its own, whole, and it still runs."""
    vend = _vendor(tmp_path)
    glue = vend / "_runtime" / "glue" / "zentorch.py"
    glue.write_text(glue.read_text(encoding="utf-8") + "# another release\n", encoding="utf-8")
    _run(
        tmp_path,
        "",
        "import layoutc.runtime.errors as e\n"
        "assert mod.LayoutContractError is not e.LayoutContractError\n"
        "assert mod.LayoutContractError.__module__ == 'vend._runtime.errors'\n"
        "import vend._runtime.interface as own\n"
        "assert type(mod.LAYOUT) is own.ModuleLayout and own.ModuleLayout.__module__ == 'vend._runtime.interface'",
    )


# Which files of the generated package importing one module reads (layoutc blocked).
NEEDS = """
import json, sys
{block}
sys.path.insert(0, {root!r})
import importlib
import json
mod = importlib.import_module("vend." + {name!r})
files = sorted({{m.__file__[len({root!r}) + 1:] for k, m in list(sys.modules.items())
                if k.split(".")[0] == "vend" and getattr(m, "__file__", None)}})
print(json.dumps({{"files": files, "glue": mod._glue.__name__.rsplit(".", 1)[-1]}}))
"""
# The same module, vendored with only those files, planned, padded, unpadded and refused.
ALONE = """
import sys
{block}
sys.path.insert(0, {root!r})
import torch
import importlib
import json
mod = importlib.import_module("vend." + {name!r})
import itertools
params = mod.LAYOUT.plan_params
domains = [[v for v in (64, 128, 256, 8, 2, 1) if p.low <= v <= p.high] if p.kind == "range"
           else [False, True] if p.kind == "bool" else list(p.values) for p in params]
for values in itertools.islice(itertools.product(*domains), 20000):
    try:
        plan = mod.plan(**dict(zip([p.name for p in params], values)))
    except mod.LayoutContractError:
        continue
    if plan.supported:
        break
for t in mod.LAYOUT.tensors:
    logical, padded = t.shapes(plan)
    x = torch.zeros(logical, dtype=t.alloc(plan).dtype)
    assert torch.equal(t.unpad(t.pad(x, plan), plan), x)
try:
    mod.LAYOUT.tensors[0].pad(torch.zeros(1), plan)
except mod.LayoutContractError:
    print("ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vllm_cpu_grouped_gemm", "torch_int4pack_moe", "zentorch_fused_moe"])
def test_vendoring_one_module_brings_only_the_glue_it_uses(name: str, tmp_path: Path) -> None:
    _vendor(tmp_path)
    script = NEEDS.format(block=BLOCK, root=str(tmp_path), name=name)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    needs = json.loads(result.stdout.strip().splitlines()[-1])
    glue_files = {f for f in needs["files"] if f.startswith("vend/_runtime/glue/")}
    own = {"vend/_runtime/glue/__init__.py", f"vend/_runtime/glue/{needs['glue']}.py", "vend/_runtime/glue/_loop.py"}
    assert f"vend/_runtime/glue/{needs['glue']}.py" in glue_files and glue_files <= own, glue_files
    alone = tmp_path / "alone"
    for rel in needs["files"]:
        (alone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / rel, alone / rel)
    assert len(list((alone / "vend" / "_runtime" / "glue").glob("*.py"))) < len(
        list((tmp_path / "vend" / "_runtime" / "glue").glob("*.py"))
    )
    script = ALONE.format(block=BLOCK, root=str(alone), name=name)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=alone, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
