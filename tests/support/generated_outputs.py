"""Every public function of every generated module, run over many cases, as bytes.

Holds a change to the templates or the emitter to "behaviour unchanged" (issue 41 item 4):

    python -m tests.support.generated_outputs --compare DIR   # DIR/<pkg>/ a copy of an older generated/
    python -m tests.support.generated_outputs --record        # tests/cases/generated_outputs.json

For each module: its `__all__`, each public function's signature and docstring, `LAYOUT`'s
records (functions by name), `plan()` over parameter points drawn from its declared domains
(the plan's fields, or the exception's type and message), and for supported plans every
tensor's shapes, axis table, pad / unpad of random bytes, full shape, shard and alloc of
every rank (and one past the last), load from a random checkpoint (plain and transposed),
the refusals of a wrong shape, a wrong dtype, a modified plan and a plan of another type,
`kernel_args`, `local_experts` of every EP rank and the glue's kernel configuration. Kernels
are not run (their outputs depend on the CPU). Every outcome is serialised to bytes;
`--compare` lists each call whose bytes differ, `--record` stores one sha256 per module, which
tests/compiler/test_generated_outputs.py holds the current generated/ to.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import inspect
import json
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "tests" / "cases" / "generated_outputs.json"
POINTS = 80  # parameter points per module
TENSOR_PLANS = 4  # supported plans whose tensors are exercised
MAX_ELEMENTS = 1 << 18
SMALL = (1, 2, 3, 4, 7, 8, 16, 32, 48, 64, 96, 128, 192, 256, 320, 512)


def modules(root: Path) -> list[str]:
    return sorted(p.stem for p in root.glob("*.py") if p.stem != "__init__")


def _ser(value: Any) -> str:
    """A canonical text of an outcome: tensors by dtype, shape and bytes."""
    if isinstance(value, torch.Tensor):
        t = value.detach().contiguous()
        raw = t.reshape(-1).view(torch.uint8) if t.numel() and t.element_size() else t.reshape(-1)
        digest = hashlib.sha256(bytes(raw.numpy().tobytes()) if t.numel() else b"").hexdigest()
        return f"tensor({t.dtype}, {tuple(t.shape)}, {digest})"
    if isinstance(value, tuple | list):
        return "(" + ", ".join(_ser(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_ser(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ", ".join(f"{f.name}={_ser(getattr(value, f.name))}" for f in dataclasses.fields(value))
        return f"{type(value).__name__}({fields})"
    if callable(value) and hasattr(value, "__name__"):
        return f"<fn {value.__name__}>"
    if isinstance(value, str):
        return repr(str(value))
    return repr(value)


def _call(fn: Callable[[], Any]) -> str:
    try:
        return "ok " + _ser(fn())
    except Exception as exc:  # the exception is the outcome
        return f"raise {type(exc).__name__}: {exc}"


def _random(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    n = 1
    for s in shape:
        n *= s
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=gen)
    return raw.view(dtype).reshape(shape)  # any bytes, NaN patterns included: compared as bytes


def _points(layout: Any, rng: random.Random) -> Iterator[dict[str, Any]]:
    params = layout.plan_params
    for i in range(POINTS):
        kw: dict[str, Any] = {}
        for p in params:
            if p.kind == "range":
                pool = [v for v in SMALL if p.low <= v <= p.high] + [p.low, min(p.high, p.low + 1)]
                value: Any = rng.choice(pool)
            elif p.kind == "bool":
                value = rng.choice((False, True))
            else:
                value = rng.choice(p.values)
            if p.default is not None and rng.random() < 0.3:
                continue  # the default
            kw[p.name] = value
        if i % 17 == 5 and params:  # a value outside the domain, or a wrong type
            victim = params[i % len(params)]
            kw[victim.name] = rng.choice((-1, 10**9, "nope", 2.5, None, True))
        yield kw


def outcomes(mod: Any) -> Iterator[tuple[str, str]]:
    """(what was called, its serialised outcome) for every case of module `mod`."""
    rng = random.Random(mod.CONTRACT)
    gen = torch.Generator().manual_seed(1234)
    yield "__all__", repr(sorted(mod.__all__))
    for name in sorted(mod.__all__):
        obj = getattr(mod, name)
        if inspect.isfunction(obj):
            yield f"{name}.signature", str(inspect.signature(obj))
            yield f"{name}.__doc__", repr(inspect.getdoc(obj))
    layout = mod.LAYOUT
    yield "LAYOUT", _ser(layout)
    if hasattr(mod, "INTERFACE"):
        yield "INTERFACE", _ser(mod.INTERFACE)
        yield "OPS", _ser(mod.OPS)
    for key in ("CONTRACT", "SOURCE_FILE", "SOURCE_SHA256", "SOURCES", "PROVED", "POLICY", "FALLBACK"):
        yield key, repr(getattr(mod, key, None))
    supported = []
    for kw in _points(layout, rng):
        result: list[Any] = []

        def make(kw: dict[str, Any] = kw, result: list[Any] = result) -> Any:
            result.append(mod.plan(**kw))
            return result[-1]

        yield f"plan({kw})", _call(make)
        if result and result[0].supported and len(supported) < TENSOR_PLANS:
            p = result[0]
            total = sum(_prod(t.shapes(p)[1]) for t in layout.tensors)
            if total <= MAX_ELEMENTS:
                supported.append(p)
    for p in supported:
        yield from _plan_outcomes(mod, layout, p, gen)


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _dtype_of(mod: Any, t: Any, p: Any) -> torch.dtype:
    return t.alloc(p, 0).dtype


def _plan_outcomes(mod: Any, layout: Any, p: Any, gen: torch.Generator) -> Iterator[tuple[str, str]]:
    tag = _ser(p)
    count = getattr(p, layout.shard_count) if layout.shard_count else 1
    forged = dataclasses.replace(p, **{layout.plan_params[0].name: getattr(p, layout.plan_params[0].name)})
    yield f"{tag} forged", _call(lambda: layout.tensors[0].shapes(forged))
    yield f"{tag} object", _call(lambda: layout.tensors[0].shapes(object()))
    if hasattr(mod, "kernel_args"):
        yield f"{tag} kernel_args", _call(lambda: mod.kernel_args(p))
    if layout.local_experts is not None:
        ep = getattr(p, "ep_size", 1)
        for r in range(ep + 1):
            yield f"{tag} local_experts({r})", _call(lambda r=r: layout.local_experts(r, p))
    if layout.kernel is not None:
        yield f"{tag} config", _call(lambda: layout.kernel.config(p))
    for t in layout.tensors:
        name = f"{tag} {t.name}"
        yield f"{name} shapes", _call(lambda t=t: t.shapes(p))
        yield f"{name} axes", _call(lambda t=t: t.axis_table(p))
        dtype = _dtype_of(mod, t, p)
        logical, padded = t.shapes(p)
        x = _random(logical, dtype, gen)
        yield f"{name} pad", _call(lambda t=t, x=x: t.pad(x, p))
        out = torch.full(padded, 0, dtype=dtype) if dtype.is_floating_point else torch.zeros(padded, dtype=dtype)
        yield f"{name} pad out", _call(lambda t=t, x=x, out=out: t.pad(x, p, out=out))
        yield f"{name} unpad", _call(lambda t=t, x=x: t.unpad(t.pad(x, p), p))
        yield f"{name} pad wrong shape", _call(lambda t=t, d=dtype: t.pad(torch.zeros(3, 5, dtype=d), p))
        other = torch.float64 if dtype != torch.float64 else torch.float32
        yield f"{name} pad wrong dtype", _call(lambda t=t, s=logical, o=other: t.pad(torch.zeros(s, dtype=o), p))
        yield f"{name} unpad wrong shape", _call(lambda t=t, d=dtype: t.unpad(torch.zeros(2, 2, dtype=d), p))
        ranks = sorted({0, 1, count - 1, count})
        for r in ranks:
            yield f"{name} alloc({r})", _call(lambda t=t, r=r: _alloc(t, p, r))
        if t.full_shape is None:
            yield f"{name} load", _call(lambda t=t, x=x: _load(t, p, 0, x, False))
            continue
        full = t.full_shape(p)
        yield f"{name} full_shape", _ser(full)
        if _prod(full) > MAX_ELEMENTS:
            continue
        src = _random(full, dtype, gen)
        for r in ranks:
            yield f"{name} shard({r})", _call(lambda t=t, r=r, src=src: t.shard(src, r, p))
            yield f"{name} load({r})", _call(lambda t=t, r=r, src=src: _load(t, p, r, src, False))
            if src.dim() >= 2:
                tr = src.transpose(-1, -2).contiguous()
                yield f"{name} load T({r})", _call(lambda t=t, r=r, tr=tr: _load(t, p, r, tr, True))


def _alloc(t: Any, p: Any, rank: int) -> torch.Tensor:
    """alloc into a tensor of known bytes (alloc writes the pads only; the rest is left as found)."""
    return t.alloc(p, rank, out=_patterned(t.alloc(p, 0)))


def _patterned(like: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(like)
    out.reshape(-1).view(torch.uint8).fill_(0x5A)
    return out


def _load(t: Any, p: Any, rank: int, src: torch.Tensor, transposed: bool) -> torch.Tensor:
    dst = _alloc(t, p, rank)
    t.load(dst, src, p, rank, transposed=transposed)
    return dst


def digests(package: str, root: Path) -> dict[str, str]:
    """sha256 of every module's outcomes, by module name."""
    out = {}
    for name in modules(root):
        mod = importlib.import_module(f"{package}.{name}")
        h = hashlib.sha256()
        for key, value in outcomes(mod):
            h.update(f"{key}\0{value}\n".encode())
        out[name] = h.hexdigest()
    return out


def compare(old_parent: Path, old_package: str) -> int:
    sys.path.insert(0, str(old_parent))
    calls = differ = 0
    for name in modules(ROOT / "generated"):
        old = list(outcomes(importlib.import_module(f"{old_package}.{name}")))
        new = list(outcomes(importlib.import_module(f"layoutc_generated.{name}")))
        calls += len(new)
        if len(old) != len(new):
            print(f"{name}: {len(old)} outcomes before, {len(new)} now")
            differ += 1
        for (k1, v1), (k2, v2) in zip(old, new, strict=False):
            if (k1, v1) != (k2, v2):
                differ += 1
                print(f"{name}: {k1}\n  before: {v1[:400]}\n  now:    {v2[:400]}")
    print(f"{calls} outcomes over {len(modules(ROOT / 'generated'))} modules; {differ} differ")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compare", type=Path, help="a folder holding an older copy of generated/ as a package")
    ap.add_argument("--package", default="genmod_old", help="that copy's package name")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(args.compare, args.package)
    if args.record:
        RECORD.write_text(
            json.dumps(digests("layoutc_generated", ROOT / "generated"), indent=1, sort_keys=True) + "\n",
            encoding="utf-8",
        )
        return 0
    ap.print_usage()
    return 2


if __name__ == "__main__":
    sys.exit(main())
