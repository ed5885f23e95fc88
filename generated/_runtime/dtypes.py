# Copied by `layoutc compile` from layoutc/runtime/dtypes.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""The torch dtype of each storage dtype the vocabulary names (vocab.DTYPES).

A generated module whose tensor stores `storage P` (an enum parameter of dtype
names) looks the plan's dtype up here, so no generated module carries its own
table; the names are torch's attribute names (`torch.bfloat16`, ...).
"""

from __future__ import annotations

import torch

from .vocab import DTYPES

#: Storage dtype name (a key of vocab.DTYPES) -> the torch dtype.
TORCH: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPES}
