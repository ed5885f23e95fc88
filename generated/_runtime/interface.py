# Copied by `layoutc compile` from layoutc/runtime/interface.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""The declared interface of a kernel glue (standard library only).

Each module in `glue/` starts with `INTERFACE = GlueInterface(...)`, written with
literals only. The compiler reads that declaration from the module's source text
without importing it (so it needs no torch), and the checker holds every contract
that binds the glue to it: tensor axis orders and roles, the w13 view per
activation, the activations computed, dtypes, hidden-dim padding and the
output-bias rule. `layoutc run` holds a checkpoint's format to where the kernel
can apply the routing weight (`router_weight`). A test imports each glue and
checks that the declaration read statically is the one the module runs with.
"""

from __future__ import annotations

from dataclasses import dataclass

from .algebra import ViewWord


@dataclass(frozen=True)
class TensorSlot:
    """A tensor the glue passes to its kernel.

    kind / projection: as in a contract (`weight w13`, `bias w2`, ...).
    axes: the axis names in the order the kernel reads them.
    optional: the contract may leave it out.
    tied: (axis, "tensor_kind projection.axis") pairs: the axis must be declared
        `like` that weight axis (a w13 bias follows w13's rows).
    """

    kind: str
    projection: str
    axes: tuple[str, ...]
    optional: bool = False
    tied: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Activation:
    """One activation the kernel computes and how it reads w13's rows.

    view: an algebra.ViewWord spelling: `halves` ([gate | up], split at half) or `interleave` ((gate, up) pairs).
    roles: the order of the two segments in that view.
    formula: the exact formula, for documentation and review.
    constants: (parameter, value) of every constant the kernel fixes for this activation,
        in the contract's integer unit (thousandths: swiglu_limit 7.0 is 7000). A contract
        admitting the activation declares these parameters and admits only these values.
    """

    name: str
    view: str
    roles: tuple[str, str]
    formula: str
    constants: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class GlueInterface:
    """What a glue module reads from a contract and passes to its kernel.

    kind: the name a contract's `glue KIND { ... }` block uses.
    package: the pip requirement that provides the kernel.
    ops: (slot, "namespace::name") of every op the glue calls.
    args: argument roles the contract binds with `arg ROLE = expr`.
    tensors: the tensors passed to the kernel (anything else is refused).
    activations: every activation computed; any other is refused.
    dtypes: storage dtypes of the weights the kernel accepts.
    pads_hidden: whether the glue pads hidden states and unpads the output; when
        False a padded hidden dim (w13.k, w2.n) is refused.
    output_bias: "once": a w2 bias is added once over all ranks (rank 0's shard
        holds it, the others zeros), never once per rank.
    source: the kernel file the facts come from.
    forward_options: extra bool keyword options of `fused_moe` (default False).
    router_weight: where the kernel can apply the routing weight: "output"
        (`out = sum_k w_k * expert_k(x)`) and, for a glue whose `fused_moe` takes
        `apply_router_weight_on_input`, "input" (`out = sum_k expert_k(w_k * x)`, vLLM's
        apply_router_weight_on_input: the glue scales the hidden states by the weight and
        the kernel skips the output weighting). A checkpoint format's `router_weight`
        (Llama-4: "input") must be one of these.
    router_weight_input_top_k: the only top_k at which "input" is computed (vLLM's CPU
        kernels: 1), or None for any.
    """

    kind: str
    summary: str
    package: str
    ops: tuple[tuple[str, str], ...]
    args: tuple[str, ...]
    tensors: tuple[TensorSlot, ...]
    activations: tuple[Activation, ...]
    dtypes: tuple[str, ...]
    pads_hidden: bool
    output_bias: str
    source: str
    forward_options: tuple[str, ...] = ()
    router_weight: tuple[str, ...] = ("output",)
    router_weight_input_top_k: int | None = None

    def activation(self, name: str) -> Activation | None:
        """The declared activation `name`, or None when the kernel does not compute it."""
        return next((a for a in self.activations if a.name == name), None)

    def slot(self, kind: str, projection: str) -> TensorSlot | None:
        """The tensor slot of `kind projection`, or None when the glue passes no such tensor."""
        return next((s for s in self.tensors if s.kind == kind and s.projection == projection), None)


WEIGHTS = (
    TensorSlot("weight", "w13", ("experts", "n", "k")),
    TensorSlot("weight", "w2", ("experts", "n", "k")),
)
BIASES = (
    TensorSlot("bias", "w13", ("experts", "n"), optional=True, tied=(("n", "weight w13.n"),)),
    TensorSlot("bias", "w2", ("experts", "n"), optional=True),
)

# gpt-oss's swigluoai as vLLM's kernels fix it: alpha 1.702, clamp limit 7.0
# (csrc/activation_kernels.cu swigluoai_and_mul; the CPU kernels hard-code both).
SWIGLUOAI_CONSTANTS = (("swiglu_alpha_milli", 1702), ("swiglu_limit_milli", 7000))

# The gated activations every glue here computes on [gate | up] halves, and gpt-oss's
# swigluoai on interleaved (gate, up) pairs.
GATED_HALVES = (
    Activation("silu", ViewWord.HALVES.value, ("gate", "up"), "silu(gate) * up"),
    Activation("gelu", ViewWord.HALVES.value, ("gate", "up"), "gelu(gate) * up"),
    Activation("gelu_tanh", ViewWord.HALVES.value, ("gate", "up"), "gelu_tanh(gate) * up"),
)
SWIGLUOAI_PAIRS = Activation("swigluoai", ViewWord.INTERLEAVE.value, ("gate", "up"),
                             "(clamp(up, -7, 7) + 1) * g * sigmoid(1.702 * g), g = min(gate, 7)",
                             SWIGLUOAI_CONSTANTS)
