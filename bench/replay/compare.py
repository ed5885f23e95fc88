"""Byte comparison of an engine's padded tensor with the contract's, naming the rows that differ.

Torch only (no layoutc import), so a kit can take it as it is.
"""

from __future__ import annotations

import torch


def _ranges(idx: list[int]) -> str:
    """[3, 4, 5, 9] -> '3..5, 9' (inclusive runs)."""
    out: list[str] = []
    start = prev = None
    for i in idx:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}..{prev}" if prev != start else f"{start}")
            start = prev = i
    if start is not None:
        out.append(f"{start}..{prev}" if prev != start else f"{start}")
    return ", ".join(out)


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """`t` as uint8 with a trailing byte axis (itemsize bytes per element); dims kept."""
    t = t.contiguous()
    if t.dtype == torch.uint8:
        return t.unsqueeze(-1)
    return t.view(torch.uint8).reshape(*t.shape, t.element_size())


def diff_rows(name: str, engine: torch.Tensor, contract: torch.Tensor, axis: int) -> list[str]:
    """Mismatch lines for `name`: shape first, else the indices along `axis` where any byte differs.

    engine, contract: the engine's and the contract's padded tensor (any dtype; compared bytewise).
    axis: the dim whose indices are reported as "rows". Returns [] when byte-equal.
    """
    if tuple(engine.shape) != tuple(contract.shape) or engine.dtype != contract.dtype:
        return [
            f"{name}: engine {tuple(engine.shape)} {engine.dtype}, contract {tuple(contract.shape)} {contract.dtype}"
        ]
    a, b = byte_view(engine.cpu()), byte_view(contract.cpu())
    bad = a != b
    dims = [d for d in range(bad.dim()) if d != axis]
    rows = bad.any(dim=dims[-1]) if dims else bad
    for d in sorted(dims[:-1], reverse=True):
        rows = rows.any(dim=d)
    idx = torch.nonzero(rows).flatten().tolist()
    if not idx:
        return []
    return [f"{name}: {len(idx)} of {engine.shape[axis]} rows along dim {axis} differ: {_ranges(idx)}"]
