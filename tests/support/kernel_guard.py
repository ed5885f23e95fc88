"""Keeps the `kernel` marker honest: a test not marked `kernel` or `engine` may not reach a real kernel.

While a test that is not so marked sets up and runs (tests/conftest.py arms this guard around
`pytest_runtest_setup` and `pytest_runtest_call`, so module fixtures it starts are covered),
`torch.ops.load_library` (how layoutc's vLLM glue loads `vllm/_C*.abi3.so`) and a call of any
op of the `_C` or `zentorch` namespace, or of torch's own kernel ops (`aten::_grouped_mm`, the
int4pack convert/matmul pair, `aten::_weight_int8pack_mm`) through `torch.ops` (how the glue's
`op(...)` and vLLM's `_custom_ops` call them) raise KernelInUnmarkedTest, and the test fails
even if the code under test swallowed that error.

Calls are caught, not lookups or imports: importing vLLM's `fused_moe` package imports
`vllm._C*` and asks `hasattr(torch.ops._C, ...)` (vllm/_custom_ops.py), and importing
torch.distributed.tensor looks `aten::_grouped_mm` up; which test pays such an import depends
on the order, and none of it runs a kernel.

Limits: child processes are not guarded (tests that run kernels in a child, like the engine
and examples tests, are marked by reading them); nor is code run at collection; nor are
torch's ops while torch is not imported yet (importing it just to guard it would cost a
compiler-only run seconds); nor `import zentorch` (vLLM's platform probe imports it on AMD Zen
CPUs), so the zentorch glue's load_kernel alone is not caught, its fused_moe is; nor an op
called through torch's C++ API (`torch._grouped_mm` as a function rather than `torch.ops`).
The check is decisive in the fast lane: it imports torch at collection and runs no kernel
test first.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

NAMESPACES = frozenset({"_C", "zentorch"})  # vLLM's CPU extension and zentorch register these
ATEN_KERNELS = frozenset({"_grouped_mm", "_convert_weight_to_int4pack_for_cpu", "_weight_int4pack_mm_for_cpu",
                          "_weight_int8pack_mm"})


class KernelInUnmarkedTest(Exception):
    """A test not marked kernel/engine reached a real kernel (not an OSError or RuntimeError, so
    no glue turns it into KernelUnavailableError or a LayoutContractError)."""


_seen: list[str] = []


def take() -> list[str]:
    """What the armed guard caught since the last call, and forget it (tests of the guard use this)."""
    caught = list(_seen)
    _seen.clear()
    return caught


def _caught(what: str) -> KernelInUnmarkedTest:
    _seen.append(what)
    return KernelInUnmarkedTest(f"{what}: a test that reaches a real kernel must be marked "
                                "@pytest.mark.kernel (pyproject.toml [tool.pytest.ini_options] markers)")


def _is_kernel(qualified: str) -> bool:
    namespace, _, name = qualified.partition("::")
    return namespace in NAMESPACES or (namespace == "aten" and name in ATEN_KERNELS)


@contextlib.contextmanager
def armed() -> Iterator[None]:
    """Guard the kernels (see the module docstring) for the duration of the block."""
    torch = sys.modules.get("torch")
    if torch is None:  # not imported (a compiler-only run): not worth importing to guard it
        yield
        return
    saved = [(torch._ops._Ops, "load_library"), (torch._ops.OpOverloadPacket, "__call__"),
             (torch._ops.OpOverload, "__call__")]
    originals = [getattr(cls, name) for cls, name in saved]
    _, call_packet, call_overload = originals

    def load_library(self: Any, path: str) -> None:
        raise _caught(f"torch.ops.load_library({path!r})")

    def packet_call(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        if _is_kernel(self._qualified_op_name):
            raise _caught(f"a call of {self._qualified_op_name}")
        return call_packet(self, *args, **kwargs)

    def overload_call(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        if _is_kernel(self._name):
            raise _caught(f"a call of {self._name}")
        return call_overload(self, *args, **kwargs)

    for (cls, name), replacement in zip(saved, (load_library, packet_call, overload_call), strict=True):
        setattr(cls, name, replacement)
    try:
        yield
    finally:
        for (cls, name), original in zip(saved, originals, strict=True):
            setattr(cls, name, original)
