"""The one exception the vLLM plugin raises (torch-free)."""

from __future__ import annotations


class LayoutcVllmError(RuntimeError):
    """A vLLM MoE layer disagrees with its layoutc contract, or the contract refuses it.

    The message names layoutc, the layer, the tensor, the rows and the contract
    line. Raised while vLLM loads the model, so the engine does not start.
    """
