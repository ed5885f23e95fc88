"""The markers stay honest: this file is not marked, so it runs in the fast lane under
tests/support/kernel_guard.py, and every way to a real kernel must be caught here."""

from __future__ import annotations

import pytest
import torch

from layoutc.runtime import ops
from tests.conftest import NOT_FAST
from tests.support import kernel_guard


def test_an_unmarked_test_is_fast(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("fast") is not None
    assert not any(request.node.get_closest_marker(name) for name in NOT_FAST)


def test_every_way_to_a_kernel_is_caught_in_an_unmarked_test(monkeypatch: pytest.MonkeyPatch) -> None:
    from layoutc.runtime.glue import vllm_cpu

    # in the full suite a kernel test may have loaded _C already; make the glue load it again
    monkeypatch.setattr(vllm_cpu, "_LOADED", [])
    monkeypatch.setattr(vllm_cpu, "has_op", lambda name: False)

    int8 = torch.zeros(1, 32, dtype=torch.int8)
    attempts = {
        "load_library": lambda: torch.ops.load_library("/nonexistent/_C.abi3.so"),
        "the vLLM glue's load_kernel": lambda: vllm_cpu.load_kernel("test"),
        "an aten kernel through op()": lambda: ops.op("aten::_weight_int8pack_mm")(torch.zeros(1, 32), int8,
                                                                                   torch.ones(1)),
        "its default overload": lambda: torch.ops.aten._weight_int8pack_mm.default(torch.zeros(1, 32), int8,
                                                                                   torch.ones(1)),
    }
    for what, attempt in attempts.items():
        with pytest.raises(kernel_guard.KernelInUnmarkedTest, match="must be marked"):
            attempt()
        assert kernel_guard.take(), what  # recorded (and forgotten, so that this test passes)
    # looking ops up is no kernel call (torch.distributed.tensor and vLLM's _custom_ops do it on import)
    assert ops.has_op("aten::_grouped_mm")
    assert not ops.has_op("layoutc_no_such_namespace::op")
    assert kernel_guard.take() == []


def test_the_kernel_namespaces() -> None:
    assert kernel_guard._is_kernel("_C::cpu_fused_moe") and kernel_guard._is_kernel("zentorch::zentorch_fused_moe")
    assert kernel_guard._is_kernel("aten::_grouped_mm") and not kernel_guard._is_kernel("aten::mm")
    assert not kernel_guard._is_kernel("_C_other::x")


def test_the_guard_puts_torch_back_as_it_was() -> None:
    before = (torch._ops._Ops.load_library, torch._ops._OpNamespace.__getattr__,
              torch._ops.OpOverloadPacket.__call__, torch._ops.OpOverload.__call__)
    with kernel_guard.armed():  # nested inside the guard this test already runs under
        assert torch._ops._Ops.load_library is not before[0]
    after = (torch._ops._Ops.load_library, torch._ops._OpNamespace.__getattr__,
             torch._ops.OpOverloadPacket.__call__, torch._ops.OpOverload.__call__)
    assert after == before
    assert torch.ops.aten.add(torch.ones(1), torch.ones(1)).item() == 2.0  # ordinary ops still run
