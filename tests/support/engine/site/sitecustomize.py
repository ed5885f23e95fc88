"""Test-only process setup for engine children (on PYTHONPATH of the child only).

Every process of a vLLM engine (the child, its engine core, its workers) starts
Python afresh and imports this, so both switches reach the processes that load
the model:

- LAYOUTC_TEST_BLOCK_ZENTORCH=1: `import zentorch` raises ImportError, so vLLM's
  platform detection (vllm/platforms/__init__.py cpu_platform_plugin) picks the
  plain CpuPlatform and MoE runs the grouped-GEMM route that pads.
- LAYOUTC_TEST_BREAK=end_pad|double_pad|garbage_pad|nan_pad|ones_pad|ones_w13|w2_front|up_double|
  swap_halves|one_expert: after vLLM's cpu_moe module is imported, its
  `CPUUnquantizedExperts._pad_moe_intermediate` is replaced by a deliberately wrong one
  (vllm#48624's end pad; vllm#44679's pad counted twice; vllm#55251's uninitialised pad, made
  deterministic with 7.0 in the pad rows, or NaN; ones in every pad, w2's too; ones in w13's pads
  only; w2's live columns at the end instead of the front; the up half placed after its pad counted
  twice (at p + (p - i)); the
  gate and up halves swapped; 7.0 in one expert's (3) gate pad only).
- LAYOUTC_TEST_BREAK=w8a8_pad_ones|w8a8_scale_swap|w8a8_scale_expert: the W8A8 int8 path
  (compressed_tensors_moe_w8a8_int8's `convert_to_int8_moe_kernel_format`, which its
  process_weights_after_loading calls before it builds the kernel) is broken first: the
  intermediate padded to a multiple of 32 with zero weights and scales of ones at the end of
  each half (vLLM 0.34's CPU int8 padding, where the contract pads nothing); the w13 scales'
  gate and up halves swapped (the weights left right); expert 3's w13 scale rows 5..7 set to 1.0.
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
        gate, upper = (w13[:, i:], w13[:, :i]) if kind == "swap_halves" else (w13[:, :i], w13[:, i:])
        if kind == "end_pad":
            new[:, : 2 * i] = w13
        else:
            new[:, :i] = gate
            if kind == "up_double":  # the up half starts after its pad counted twice: p + (p - i)
                new[:, 2 * p - i :] = upper
            else:
                new[:, p : p + i] = upper
            if kind == "garbage_pad":
                new[:, i:p] = 7.0
            fill = {"nan_pad": float("nan"), "ones_pad": 1.0, "ones_w13": 1.0}.get(kind)
            if fill is not None:  # both halves' pads
                new[:, i:p] = fill
                new[:, p + i :] = fill
            if kind == "one_expert":
                new[3, i:p] = 7.0
        replace_parameter(layer, "w13_weight", new)
        w2 = layer.w2_weight.new_full((e, h, p), 1.0 if kind == "ones_pad" else 0.0)
        if kind == "w2_front":
            w2[:, :, p - i :] = layer.w2_weight
        else:
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


_W8A8 = (
    "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe.compressed_tensors_moe_w8a8_int8"
)


def _broken_w8a8(kind: str, convert):  # type: ignore[no-untyped-def]
    import torch
    from vllm.model_executor.utils import replace_parameter

    def broken(int8_backend, w13, w2, layer=None, w13_scale=None):  # type: ignore[no-untyped-def]
        scale = layer.w13_weight_scale.data
        half = scale.shape[1] // 2
        if kind == "w8a8_scale_swap":
            replace_parameter(layer, "w13_weight_scale", torch.cat([scale[:, half:], scale[:, :half]], dim=1))
        elif kind == "w8a8_scale_expert":
            scale[3, 5:8] = 1.0
        elif kind == "w8a8_pad_ones":
            p = -(-half // 32) * 32
            e = w13.shape[0]

            def halves(t, fill):  # type: ignore[no-untyped-def]
                new = t.new_full((e, 2 * p, *t.shape[2:]), fill)
                new[:, :half], new[:, p : p + half] = t[:, :half], t[:, half:]
                return new

            w13 = halves(w13.data, 0)
            replace_parameter(layer, "w13_weight_scale", halves(scale, 1.0))
            w2 = torch.nn.functional.pad(w2.data, (0, p - half))
        return convert(int8_backend, w13, w2, layer=layer, w13_scale=layer.w13_weight_scale)

    return broken


def _break_w8a8(module, kind: str) -> None:  # type: ignore[no-untyped-def]
    module.convert_to_int8_moe_kernel_format = _broken_w8a8(kind, module.convert_to_int8_moe_kernel_format)


def _patch(name: str, patch) -> None:  # type: ignore[no-untyped-def]
    """`patch` module `name` now if it is imported (a worker forked from tests/support/engine/forkserve.py's
    preloaded server), else right after its import."""
    if name in sys.modules:
        patch(sys.modules[name])
    else:
        sys.meta_path.insert(0, _PatchAfterImport(name, patch))


def setup() -> None:
    """Install the switches this process's environment asks for: at start, and again in a worker
    forked from tests/support/engine/forkserve.py's server once the worker's own environment is in place
    (the server ran this with the environment it started with, which planted no break)."""
    if os.environ.get("LAYOUTC_TEST_BLOCK_ZENTORCH") == "1" and not any(
        isinstance(f, _BlockZentorch) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _BlockZentorch())
    kind = os.environ.get("LAYOUTC_TEST_BREAK", "")
    if kind == _STATE.get("break", ""):
        return
    if _STATE.get("break"):
        raise RuntimeError(f"sitecustomize: break {_STATE['break']!r} is already planted; cannot plant {kind!r}")
    _STATE["break"] = kind
    if kind.startswith("w8a8_"):
        _patch(_W8A8, lambda m: _break_w8a8(m, kind))
    elif kind:
        _patch(_CPU_MOE, lambda m: _break(m, kind))


_STATE: dict[str, str] = {}
setup()
