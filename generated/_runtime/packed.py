# Copied by `layoutc compile` from layoutc/runtime/packed.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""What a glue receives from a generated module, and the typed weights it returns.

`KernelConfig` is built by the generated module from a validated `Plan`, by role
rather than by parameter name: sizes come from the contract's axis tables (the
experts axis of w13, its hidden axis, the padded intermediate per segment), the
activation and other arguments from the contract's `glue` block. `PackedWeight`
is what `prepack` returns; `fused_moe` refuses anything else, so raw or
differently padded weights never reach a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .errors import LayoutContractError
from .interface import GlueInterface
from .twin import adopt


@dataclass(frozen=True)
class KernelConfig:
    """One configuration as a glue sees it.

    num_experts: w13's logical experts axis, the model's experts (the bound on expert ids:
        a padded expert holds the fill and is never routed).
    hidden_size: w13's k axis (never padded by glues with pads_hidden False).
    intermediate_padded: padded entries per gate/up segment of w13.n (= w2.k).
    dtype: the weights' storage dtype.
    activation: the activation name; w13_view: `halves` or `interleave` (from the interface).
    shapes: (tensor role, padded shape) for w13, w2 and any bias the contract declares.
    args: (role, value) of every other glue argument (isa, group_size, ...).
    """

    contract: str
    num_experts: int
    hidden_size: int
    intermediate_padded: int
    dtype: torch.dtype
    activation: str
    w13_view: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    args: tuple[tuple[str, Any], ...] = ()

    def shape(self, role: str) -> tuple[int, ...] | None:
        """Padded shape of `role` ("w13", "w2", "w13_bias", "w2_bias"), None if the contract has no such tensor."""
        return next((s for r, s in self.shapes if r == role), None)

    @property
    def experts_axis(self) -> int:
        """The weights' experts axis, padding included (>= num_experts, the routed experts)."""
        shape = self.shape("w13")
        return self.num_experts if shape is None else shape[0]

    def arg(self, role: str) -> Any:
        """The value of glue argument `role`; KeyError if the contract binds none."""
        for r, v in self.args:
            if r == role:
                return v
        raise KeyError(role)


@dataclass(frozen=True, eq=False)
class PackedWeight:
    """One projection's weights as `prepack` made them for one contract and configuration.

    role: "w13" or "w2"; config: the KernelConfig it was packed for; data: the
    kernel's own representation (a re-blocked tensor, per-expert tuples, ...).
    """

    role: str
    config: KernelConfig
    data: Any


def check_packed(who: str, what: str, packed: object, role: str, config: KernelConfig) -> Any:
    """`packed.data` if `packed` came from this contract's `prepack` for `config`, else LayoutContractError."""
    if not isinstance(packed, PackedWeight):
        raise LayoutContractError(f"{who}: {what} must come from {who}.prepack() (a PackedWeight), got "
                                  f"{type(packed).__name__}: raw or differently padded weights are refused")
    if packed.role != role:
        raise LayoutContractError(f"{who}: {what} is the packed {packed.role}, expected the packed {role}")
    if packed.config != config:
        raise LayoutContractError(f"{who}: {what} was packed for another configuration "
                                  f"({packed.config.contract}); prepack it with this plan")
    return packed.data


def refuse_prepack_out(cfg: KernelConfig, out: object) -> None:
    """`prepack_padded(out=...)` for a kernel whose packed form is per-expert codes and tables,
    not tensors of the padded shape (int4pack, int8pack): LayoutContractError unless `out` is None."""
    if out is not None:
        raise LayoutContractError(f"{cfg.contract}: prepack_padded(out=...) is not supported: this kernel's "
                                  "packed form is per-expert codes and tables, not tensors of the padded shape")


def check_bias(who: str, what: str, bias: object, config: KernelConfig) -> torch.Tensor | None:
    """An optional bias of the padded shape the contract gives `what` ("w13_bias" / "w2_bias")."""
    if bias is None:
        return None
    from .layout import check_tensor

    shape = config.shape(what)
    if shape is None:
        raise LayoutContractError(f"{who}: the contract declares no {what}; it cannot be passed")
    return check_tensor(who, f"{what} (padded)", bias, shape, config.dtype)


@dataclass(frozen=True)
class Forward:
    """The checked inputs of one forward: token count, the packed data and the routing."""

    tokens: int
    w13: Any
    w2: Any
    weights: torch.Tensor
    ids: torch.Tensor


def check_forward(interface: GlueInterface, cfg: KernelConfig, hidden_states: object, packed_w13: object,
                  packed_w2: object, topk_weights: object, topk_ids: object, *, dense: bool = False) -> Forward:
    """Every check a glue's `fused_moe` makes before its kernel: the activation is one the glue
    computes with cfg.w13_view, hidden_states [tokens, hidden_size] of cfg.dtype, both weights from
    this contract's `prepack` for `cfg`, and the routing (ids bounded by cfg.num_experts).
    `dense`: the packed data are tensors of the padded shapes and cfg.dtype (a PackedWeight
    built by hand with this config must still hold data the kernel can read: a wrong shape
    would reach the kernel as a raw error, or a read past the tensor).

    Raises LayoutContractError naming what is wrong.
    """
    from .layout import check_tensor
    from .routing import check_hidden, check_routing

    who = cfg.contract
    declared = interface.activation(cfg.activation)
    if declared is None or declared.view != cfg.w13_view:
        raise LayoutContractError(f"{who}: {interface.kind} computes {cfg.activation!r} with w13 read as "
                                  f"{declared.view if declared else 'nothing'}, not {cfg.w13_view!r}")
    tokens = check_hidden(who, hidden_states, cfg.hidden_size, cfg.dtype)
    w13 = check_packed(who, "packed_w13", packed_w13, "w13", cfg)
    w2 = check_packed(who, "packed_w2", packed_w2, "w2", cfg)
    if dense:
        w13, w2 = (check_tensor(who, f"packed_{role} (packed data)", data, cfg.shape(role) or (), cfg.dtype)
                   for role, data in (("w13", w13), ("w2", w2)))
    weights, ids = check_routing(who, tokens, topk_weights, topk_ids, cfg.num_experts)
    return Forward(tokens, w13, w2, weights, ids)


adopt(globals())  # one class per process beside layoutc (twin.py)
