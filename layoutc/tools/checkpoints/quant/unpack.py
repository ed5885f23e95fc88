"""A packed quantized tensor's codes, unpacked (`unpack`, torch): the one step the validator
(validate.check_sym_qzeros reads GPTQ's qzeros through it) and the dequantizer (dequant.py)
share. Below both, so the validator never imports the dequantizer that imports it.
"""

from __future__ import annotations

import torch

from layoutc.tools.checkpoints.quant import scheme as S


def unpack(spec: S.TensorSpec, stored: torch.Tensor) -> torch.Tensor:
    """A packed tensor's codes (int64), its packed dim expanded (a split dim pair merged
    first): element order[i] of each pack is read from slot i. Unpacked tensors pass
    through as their bytes (uint8 view of a float8 tensor). Shapes: stored -> the stored
    dims with the packed one `per_element` times longer."""
    if spec.packing is None:
        return stored.view(torch.uint8) if stored.dtype.itemsize == 1 and stored.is_floating_point() else stored
    pk = spec.packing
    axis = next(i for i, d in enumerate(spec.dims) if d.pack > 1)
    base = stored.dim() - sum(2 if d.split else 1 for d in spec.dims)  # leading (experts) dims
    pos = base + sum(2 if d.split else 1 for d in spec.dims[:axis])
    t = stored.view(torch.uint8) if stored.dtype == torch.int8 else stored
    if spec.dims[axis].split:
        t = t.flatten(pos, pos + 1)
    t = t.to(torch.int64) & ((1 << pk.storage_bits) - 1)  # an int32 word as unsigned
    mask = (1 << pk.bits) - 1
    slot_of = {element: slot for slot, element in enumerate(pk.order)}
    values = [(t >> (pk.bits * slot_of[j])) & mask for j in range(pk.per_element)]
    return torch.stack(values, dim=pos + 1).flatten(pos, pos + 1)
