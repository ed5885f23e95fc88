"""The part of every kit that is the same for every engine path (copied into the kit as text).

A kit is one pytest module: the literals `layoutc kit` computed (GENERATED, ENGINE,
RELEASES, TARGETS, ADMITTED, REFUSED), then this file's text, then one driver's text (the
functions that run the engine's own code: `engine_run(params, plan, gen, poison)` and
`engine_admits(params, gen)`). It needs torch, pytest, the engine and the generated module; it
never imports layoutc. Everything here reads the module-level literals at call time.

Honesty rules (docs/kits.md):
- a release outside RELEASES fails (refused by name), unless LAYOUTC_KIT_ANY_RELEASE=1;
- a target that no longer resolves, or whose parameters changed, fails naming it;
- the first device-only operation (a non-CPU tensor, an op with no CPU kernel, a
  torch.cuda call) fails naming the op and where it was called: the kit checks CPU
  tensors, and a path it cannot run is not a pass;
- bytes are compared through a uint8 view, and a difference names the rows (per dim).
"""

# The kit's literals (defined above this text in a kit) are declared here for linters only.
# ruff: noqa: F821

import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Marks the engine's own pytest configuration registers for CPU unit tests (the driver's MARKS; vLLM:
# skip_global_cleanup, without which its conftest's cleanup_fixture calls torch.accelerator.empty_cache(),
# which raises on a CPU-only torch).
pytestmark = [getattr(pytest.mark, name) for name in globals().get("MARKS", ())]

POISON_BYTE = 0xFF  # NaN in every float format the contracts store (bf16, fp16, fp32, fp8 e4m3fn), 255 in uint8


class DeviceOnlyOperation(Exception):
    """The engine's path reached an operation that needs a device: `op` names it, `where` the call site."""

    def __init__(self, op: str, where: str) -> None:
        super().__init__(f"{op} at {where}")
        self.op, self.where = op, where


def generated_module() -> Any:
    """The generated contract module: LAYOUTC_KIT_GENERATED (a dotted module name) or GENERATED."""
    name = os.environ.get("LAYOUTC_KIT_GENERATED", GENERATED)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        pytest.fail(f"the kit needs the generated module {name!r} (layoutc compile's output, torch only): {exc}; "
                    "copy generated/ beside the kit as layoutc_generated/ or set LAYOUTC_KIT_GENERATED", pytrace=False)


def engine_release() -> str:
    """The engine's version; an engine that does not import is a named skip (never a pass) with the
    command that fails."""
    try:
        module = importlib.import_module(ENGINE_MODULE)
    except Exception as exc:  # a --no-deps or foreign-platform install fails deep inside the engine
        pytest.skip(f"{ENGINE} does not import here: `python -c 'import {ENGINE_MODULE}'` fails with "
                    f"{type(exc).__name__}: {exc}")
    return str(getattr(module, "__version__", "unknown"))


def _resolve(target: str) -> Any:
    module_name, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def modelled_releases(gen: Any) -> tuple[str, ...]:
    """The releases of ENGINE the generated module's `LAYOUT.models` names (the contract's `models`
    lines, the truth at run time); RELEASES (the same, baked when the kit was written) for a module
    compiled before `models` existed."""
    models = getattr(getattr(gen, "LAYOUT", None), "models", ()) or ()
    found = tuple(dict.fromkeys(r for m in models if m.engine == ENGINE for r in m.releases))
    return found or tuple(RELEASES)


def model_target(gen: Any, params: dict[str, Any], prefix: str) -> Any:
    """The engine object the contract's first `models` line of ENGINE whose target starts with
    `prefix` and whose `when` holds under `params` names, imported."""
    for m in getattr(gen.LAYOUT, "models", ()):
        if m.engine == ENGINE and m.target.startswith(prefix) and m.applies(params):
            return _resolve(m.target)
    pytest.fail(f"contract {CONTRACT} has no `models {ENGINE}` line under {prefix} for {params}", pytrace=False)


def check_engine(gen: Any) -> str:
    """The release, once it is one the contract models and every target (the driver's, and every
    `models` target of ENGINE) resolves with its parameters."""
    globals().get("engine_setup", lambda: None)()  # the driver's set-up (SGLang: device stubs, CPU switch)
    for name in globals().get("PRELOAD", ()):  # modules the engine must import first (its own import order)
        importlib.import_module(name)
    release = engine_release()
    releases = modelled_releases(gen)
    if release.partition("+")[0] not in releases and os.environ.get("LAYOUTC_KIT_ANY_RELEASE") != "1":
        pytest.fail(f"{ENGINE} {release} is not modelled by contract {CONTRACT} (it models {ENGINE} "
                    f"{', '.join(releases)}): refused. Regenerate the kit from a contract that models {release}, "
                    "or set LAYOUTC_KIT_ANY_RELEASE=1 to hold this release to these rules anyway", pytrace=False)
    models = getattr(getattr(gen, "LAYOUT", None), "models", ()) or ()
    targets = {**TARGETS, **{m.target: None for m in models if m.engine == ENGINE and m.target not in TARGETS}}
    for target, params in targets.items():
        try:
            obj = _resolve(target)
        except (ImportError, AttributeError) as exc:
            pytest.fail(f"{ENGINE} {release} renamed or removed {target} ({type(exc).__name__}: {exc})", pytrace=False)
        if params is None:
            continue
        try:
            got = tuple(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            continue
        if got != tuple(params):
            pytest.fail(f"{ENGINE} {release} changed the signature of {target}: ({', '.join(got)}), "
                        f"the kit was written for ({', '.join(params)})", pytrace=False)
    return release


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _call_site(frames: list[traceback.FrameSummary]) -> str:
    """The innermost frame outside torch and this kit: the engine line that called the operation."""
    inside = [f for f in frames if not f.filename.startswith(_TORCH_DIR) and f.filename != __file__
              and f"{os.sep}contextlib.py" not in f.filename] or frames
    f = inside[-1]
    return f"{f.filename}:{f.lineno} ({f.name}: {(f.line or '').strip()})"


def _engine_frame(tb: Any) -> str:
    return _call_site(traceback.extract_tb(tb))


def _caller() -> str:
    return _call_site(traceback.extract_stack()[:-2])


_ALLOCATORS = ("aten::empty", "aten::empty_like", "aten::new_empty", "aten::empty_strided", "aten::new_empty_strided")


class _CPUOnly(TorchDispatchMode):
    """Every aten/custom op the engine runs: a non-CPU result or an op without a CPU kernel is
    DeviceOnlyOperation; with `poison`, every uninitialised allocation (torch.empty and kin)
    is filled with POISON_BYTE, so a pad left to whatever memory held is seen."""

    def __init__(self, poison: bool) -> None:
        super().__init__()
        self.poison = poison

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = str(func._schema.name) if hasattr(func, "_schema") else str(func)
        try:
            out = func(*args, **(kwargs or {}))
        except NotImplementedError as exc:
            if "backend" in str(exc) or "CPU" in str(exc):
                raise DeviceOnlyOperation(f"torch.ops.{name.replace('::', '.')} (no CPU kernel)", _caller()) from exc
            raise
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                if t.device.type not in ("cpu", "meta"):
                    raise DeviceOnlyOperation(f"torch.ops.{name.replace('::', '.')} (a {t.device.type} tensor)",
                                              _caller())
                if self.poison and name in _ALLOCATORS and t.numel():
                    t.view(-1).view(torch.uint8).fill_(POISON_BYTE) if t.is_contiguous() else None
        return out


@contextmanager
def cpu_only(poison: bool) -> Iterator[None]:
    """Run the engine's code; the first device-only operation raises DeviceOnlyOperation."""
    try:
        with _CPUOnly(poison):
            yield
    except DeviceOnlyOperation:
        raise
    except (AssertionError, RuntimeError, AttributeError, ImportError) as exc:
        text = str(exc)
        if any(word in text for word in ("CUDA", "cuda", "HIP", "ROCm", "NVIDIA", "_C.", "torch.ops")):
            raise DeviceOnlyOperation(f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}",
                                      _engine_frame(exc.__traceback__)) from exc
        raise


def poisoned(shape: Any, dtype: torch.dtype) -> torch.Tensor:
    """A destination whose every byte is POISON_BYTE (NaN for floats)."""
    t = torch.empty(shape, dtype=dtype)
    t.view(torch.uint8).fill_(POISON_BYTE) if t.element_size() == 1 else t.view(-1).view(torch.uint8).fill_(POISON_BYTE)
    return t


def _ranges(values: list[int]) -> str:
    out, start, prev = [], None, None
    for v in values:
        if start is None:
            start = prev = v
        elif v == prev + 1:
            prev = v
        else:
            out.append(f"{start}" if start == prev else f"[{start}, {prev + 1})")
            start = prev = v
    if start is not None:
        out.append(f"{start}" if start == prev else f"[{start}, {prev + 1})")
    return ", ".join(out[:8]) + (f", ... ({len(out)} runs)" if len(out) > 8 else "")


def byte_diff(what: str, got: torch.Tensor, want: torch.Tensor) -> str | None:
    """None when `got` and `want` have the same shape, dtype and bytes; else the rows that differ."""
    if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
        return f"{what}: engine {tuple(got.shape)} {got.dtype}, contract {tuple(want.shape)} {want.dtype}"
    if got.numel() == 0:
        return None
    g = got.detach().contiguous().reshape(*got.shape, 1).view(torch.uint8)
    w = want.detach().contiguous().reshape(*want.shape, 1).view(torch.uint8)
    bad = (g != w).any(dim=-1)
    if not bool(bad.any()):
        return None
    parts = []
    for d in range(bad.dim()):
        rest = [i for i in range(bad.dim()) if i != d]
        idx = bad.any(dim=rest).nonzero().flatten().tolist() if rest else bad.nonzero().flatten().tolist()
        if len(idx) < bad.shape[d] or bad.dim() == 1:
            parts.append(f"dim {d} indices {_ranges(idx)} of {bad.shape[d]}")
    first = tuple(bad.nonzero()[0].tolist())
    return (f"{what}: {int(bad.sum())} of {bad.numel()} elements differ ({'; '.join(parts) or 'everywhere'}); "
            f"first at {first}: engine bytes {g[first].tolist()}, contract bytes {w[first].tolist()}")


def _ids(configs: list[tuple[tuple[str, ...], dict[str, Any]]]) -> list[str]:
    return [f"{i}-" + labels[0].split(":")[0].replace(" ", "_").replace(",", "") for i, (labels, _) in enumerate(configs)]


@pytest.fixture(scope="module")
def gen() -> Any:
    return generated_module()


@pytest.fixture(scope="module")
def engine(gen: Any) -> str:
    return check_engine(gen)


def _run(engine: str, gen: Any, params: dict[str, Any], poison: bool) -> None:
    plan = gen.plan(**params)
    try:
        with cpu_only(poison):
            pairs = list(engine_run(params, plan, gen, poison))
    except DeviceOnlyOperation as stop:
        pytest.fail(f"{ENGINE} {engine}: the path stopped at the first device-only operation {stop.op}, called at "
                    f"{stop.where}; this kit runs CPU tensors only", pytrace=False)
    assert pairs, "the driver compared nothing"
    # the contract's tensors are computed here, outside the engine's CPU-only, poisoning mode
    problems = [d for d in (byte_diff(what, got, want() if callable(want) else want) for what, got, want in pairs) if d]
    if problems:
        state = "poisoned destination (every byte 0xFF before the engine wrote)" if poison else "clean destination"
        pytest.fail(f"{ENGINE} {engine} differs from contract {CONTRACT} at {params} ({state}):\n  "
                    + "\n  ".join(problems[:12]), pytrace=False)


@pytest.mark.parametrize("labels, params", ADMITTED, ids=_ids(ADMITTED))
def test_engine_pads_like_the_contract(engine: str, gen: Any, labels: tuple[str, ...], params: dict[str, Any]) -> None:
    """The engine's own code, at a configuration the solver picked, gives the contract's bytes."""
    verdict = engine_admits(params, gen)
    if verdict is False:
        pytest.fail(f"{ENGINE} {engine} refuses {params}, which contract {CONTRACT} admits ({'; '.join(labels)})",
                    pytrace=False)
    _run(engine, gen, params, poison=False)


@pytest.mark.parametrize("labels, params", ADMITTED, ids=_ids(ADMITTED))
def test_poisoned_pad_comes_out_as_the_fill(engine: str, gen: Any, labels: tuple[str, ...],
                                            params: dict[str, Any]) -> None:
    """Every destination and every uninitialised allocation holds 0xFF (NaN) before the engine
    writes: the pad must still come out as the contract's fill."""
    _run(engine, gen, params, poison=True)


@pytest.mark.parametrize("labels, params", REFUSED, ids=_ids(REFUSED))
def test_just_outside_admission_is_refused(engine: str, gen: Any, labels: tuple[str, ...],
                                           params: dict[str, Any]) -> None:
    """The contract refuses it (plan() raises LayoutContractError); the engine's gate, where the
    path has one (engine_admits returns True/False, None where it has none), refuses it too."""
    with pytest.raises(gen.LayoutContractError):
        gen.plan(**params)
    if engine_admits(params, gen) is True:
        key = globals().get("known", lambda p: None)(params)
        if key:  # a documented disagreement the driver names (never an unnamed one)
            pytest.xfail(f"{ENGINE} {engine} admits {params}, which contract {CONTRACT} refuses: known {key}")
        pytest.fail(f"{ENGINE} {engine} admits {params}, which contract {CONTRACT} refuses: {labels[0]}",
                    pytrace=False)


def test_kit_covers_a_pad() -> None:
    """The kit is sensitive only if some admitted configuration pads (or, for a contract that pads
    nothing, some configuration is refused): at least one must."""
    if CONTRACT_PADS:
        assert any(any(lb.startswith("unaligned") or lb.endswith(", padded") for lb in labels) for labels, _ in ADMITTED), \
            "no admitted configuration pads: this kit would not see a pad bug"
    else:
        assert REFUSED, "the contract pads nothing and refuses nothing: this kit would not see a pad bug"


_ = sys  # kept: drivers may use sys
