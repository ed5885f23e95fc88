"""Test-only process setup for engine children (on PYTHONPATH of the child only).

Every process of a vLLM engine (the child, its engine core, its workers) starts
Python afresh and imports this, so both switches reach the processes that load
the model:

- LAYOUTC_TEST_BLOCK_ZENTORCH=1: `import zentorch` raises ImportError, so vLLM's
  platform detection (vllm/platforms/__init__.py cpu_platform_plugin) picks the
  plain CpuPlatform and MoE runs the grouped-GEMM route that pads.
- LAYOUTC_TEST_BREAK=end_pad|double_pad|garbage_pad: after vLLM's cpu_moe module
  is imported, its `CPUUnquantizedExperts._pad_moe_intermediate` is replaced by a
  deliberately wrong one (vllm#48624's end pad; vllm#44679's pad counted twice;
  vllm#55251's uninitialised pad, made deterministic with 7.0 in the pad rows).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

_CPU_MOE = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"


class _BlockZentorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name == "zentorch" or name.startswith("zentorch."):
            raise ImportError(f"{name} is blocked by the layoutc engine test (LAYOUTC_TEST_BLOCK_ZENTORCH=1)")
        return None


def _broken_pad(kind: str):  # type: ignore[no-untyped-def]
    from vllm.model_executor.utils import replace_parameter

    def pad(self, layer):  # type: ignore[no-untyped-def]
        i = self.moe_config.intermediate_size_per_partition
        p = self._padded_intermediate_size(self.moe_config)
        if p == i:
            return
        if kind == "double_pad":
            p = i + 2 * (p - i)
        w13 = layer.w13_weight
        e, _, h = w13.shape
        new = w13.new_zeros(e, 2 * p, h)
        if kind == "end_pad":
            new[:, : 2 * i] = w13
        else:
            new[:, :i] = w13[:, :i]
            new[:, p : p + i] = w13[:, i:]
            if kind == "garbage_pad":
                new[:, i:p] = 7.0
        replace_parameter(layer, "w13_weight", new)
        w2 = layer.w2_weight.new_zeros(e, h, p)
        w2[:, :, :i] = layer.w2_weight
        replace_parameter(layer, "w2_weight", w2)

    return pad


class _LoaderWrapper(importlib.abc.Loader):
    def __init__(self, inner, patch):  # type: ignore[no-untyped-def]
        self.inner, self.patch = inner, patch

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self.inner.create_module(spec)

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        self.inner.exec_module(module)
        self.patch(module)


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Run `patch(module)` right after module `name` is first executed."""

    def __init__(self, name: str, patch) -> None:  # type: ignore[no-untyped-def]
        self.name, self.patch = name, patch

    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderWrapper(spec.loader, self.patch)
        return spec


def _break(module, kind: str) -> None:  # type: ignore[no-untyped-def]
    module.CPUUnquantizedExperts._pad_moe_intermediate = _broken_pad(kind)


if os.environ.get("LAYOUTC_TEST_BLOCK_ZENTORCH") == "1":
    sys.meta_path.insert(0, _BlockZentorch())
if os.environ.get("LAYOUTC_TEST_BREAK"):
    _KIND = os.environ["LAYOUTC_TEST_BREAK"]
    sys.meta_path.insert(0, _PatchAfterImport(_CPU_MOE, lambda m: _break(m, _KIND)))
