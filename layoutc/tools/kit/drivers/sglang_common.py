"""SGLang set-up shared by the SGLang drivers (copied into each SGLang kit as text; also imported by
tests/support/conformance/sglang_oracle.py): the import stubs of SGLang's device modules and the switch to
its CPU code paths.

Stubbed modules (each touches a device; nothing on the MoE padding path calls them): `sgl_kernel`
(SGLang's C++/CUDA kernel package, imported at module level under SGLANG_USE_CPU_ENGINE) and
`torchvision` (a CUDA build for torch 2.13 on PyPI; sglang.srt.configs imports it for multimodal
processors). Any attribute of a stub raises when called, naming itself: a path that reached a
kernel fails loudly (the kit reports it as its first device-only operation).
"""

import importlib.abc
import importlib.machinery
import os
import sys
import types
from typing import Any

SGLANG_STUBBED = ("sgl_kernel", "torchvision")


class DeviceStub(types.ModuleType):
    """A stubbed device module: attributes are placeholders that raise when called."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return DevicePlaceholder(f"{self.__name__}.{name}")


class DevicePlaceholder:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return DevicePlaceholder(f"{self._name}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name} is a stub of a device module (torch.ops-like device operation)")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class DeviceStubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in SGLANG_STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = DeviceStub(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def sglang_setup() -> None:
    """SGLANG_USE_CPU_ENGINE=1 (SGLang's own switch to its CPU paths: padded loading), LAYOUTC_SGLANG_PATH
    appended to sys.path where set (a `pip install --no-deps --target` folder), the device stubs."""
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    path = os.environ.get("LAYOUTC_SGLANG_PATH")
    if path and path not in sys.path:
        sys.path.append(path)
    import transformers.utils.import_utils  # noqa: F401  (its torchvision probe runs before the stub exists)

    if not any(isinstance(f, DeviceStubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, DeviceStubFinder())


def sglang_fused_moe(tp_size: int, rank: int, quant_method: str = "unquant") -> Any:
    """A FusedMoE built without __init__ (which needs SGLang's server and parallel state): only the
    attributes its loaders (`_load_w13`, `_load_w2`, `weight_loader`) and `create_*_weight_` read, for
    `rank` of `tp_size`; `quant_method` names the method class the loaders look at (unquant, fp8, mxfp4)."""
    import torch
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE

    if quant_method == "fp8":
        from sglang.srt.layers.quantization.fp8 import Fp8MoEMethod as method
    elif quant_method == "mxfp4":
        from sglang.srt.layers.quantization.mxfp4 import Mxfp4MoEMethod as method
    else:
        from sglang.srt.layers.quantization.unquant import UnquantizedFusedMoEMethod as method
    layer = object.__new__(FusedMoE)
    torch.nn.Module.__init__(layer)
    layer.moe_tp_size, layer.moe_tp_rank = tp_size, rank
    layer.moe_ep_size, layer.moe_ep_rank = 1, 0
    layer.use_presharded_weights = False
    layer.use_triton_kernels = False
    layer.use_flashinfer_trtllm_moe = False
    layer.quant_config = None
    # a plain attribute, not a submodule: the method is never initialised, only its class is read
    object.__setattr__(layer, "quant_method", object.__new__(method))
    layer.moe_runner_config = types.SimpleNamespace(is_gated=True)
    return layer
