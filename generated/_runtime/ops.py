# Copied by `layoutc compile` from layoutc/runtime/ops.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""Registered torch ops by their qualified name (`namespace::name`)."""

from __future__ import annotations

from typing import Any

import torch


def op(qualified: str) -> Any:
    """The registered torch op `namespace::name` (an OpOverloadPacket).

    Raises AttributeError when it is not registered; callers check `has_op` first.
    """
    namespace, name = qualified.split("::")
    return getattr(getattr(torch.ops, namespace), name)


def has_op(qualified: str) -> bool:
    """Whether `namespace::name` is registered with torch right now."""
    namespace, name = qualified.split("::")
    return hasattr(torch.ops, namespace) and hasattr(getattr(torch.ops, namespace), name)
