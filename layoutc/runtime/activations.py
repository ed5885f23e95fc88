"""The gated activations the Python glues compute, each by its exact formula.

`gated(h, name, view)` takes the w13 output h [tokens, 2 * I] and returns
act(gate) * H(up) [tokens, I], with gate and up read by the w13 view:
`halves` (gate = h[:, :I], up = h[:, I:]) or `interleave` (gate = h[:, 0::2],
up = h[:, 1::2]). An unknown name raises: there is no fallback formula.

- silu: silu(gate) * up
- gelu: gelu(gate) * up (erf form)
- gelu_tanh: gelu(gate, approximate="tanh") * up
- swigluoai (gpt-oss): g = min(gate, limit), u = clamp(up, -limit, limit),
  (u + 1) * g * sigmoid(alpha * g) with alpha 1.702 and limit 7.0
  (vLLM 0.32 `swigluoai_and_mul`, csrc/activation_kernels.cu and
  vllm/model_executor/layers/activation.py SwigluOAIAndMul).
"""

from __future__ import annotations

import torch

from .algebra import ViewWord
from .errors import LayoutContractError
from .vocab import ACTIVATIONS

SWIGLUOAI_ALPHA = 1.702  # interface.SWIGLUOAI_CONSTANTS: swiglu_alpha_milli 1702
SWIGLUOAI_LIMIT = 7.0  # swiglu_limit_milli 7000
#: The gated activations computed here (vocab.ACTIVATIONS: silu, gelu, gelu_tanh, swigluoai).
NAMES = tuple(a.name for a in ACTIVATIONS.values() if a.gated)


def split(h: torch.Tensor, view: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate, up) of a w13 output [tokens, 2 * I] under `view` (algebra.ViewWord: `halves`
    or `interleave`). Raises LayoutContractError for any other view."""
    if view == ViewWord.HALVES:
        half = h.shape[1] // 2
        return h[:, :half], h[:, half:]
    if view == ViewWord.INTERLEAVE:
        return h[:, 0::2], h[:, 1::2]
    raise LayoutContractError(f"unknown w13 view {view!r}; the glues read {ViewWord.HALVES.value!r} "
                              f"or {ViewWord.INTERLEAVE.value!r}")


def gated(h: torch.Tensor, name: str, view: str) -> torch.Tensor:
    """act(gate) * H(up) for activation `name`; returns a new contiguous [tokens, I] tensor.

    Raises LayoutContractError for a name outside NAMES.
    """
    gate, up = split(h, view)
    if name == "silu":
        out = torch.nn.functional.silu(gate) * up
    elif name == "gelu":
        out = torch.nn.functional.gelu(gate) * up
    elif name == "gelu_tanh":
        out = torch.nn.functional.gelu(gate, approximate="tanh") * up
    elif name == "swigluoai":
        g = gate.clamp(max=SWIGLUOAI_LIMIT)
        u = up.clamp(min=-SWIGLUOAI_LIMIT, max=SWIGLUOAI_LIMIT)
        out = (u + 1) * g * torch.sigmoid(SWIGLUOAI_ALPHA * g)
    else:
        raise LayoutContractError(f"activation {name!r} has no formula here; known: {', '.join(NAMES)}")
    return out.contiguous()
