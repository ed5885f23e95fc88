"""Reference-only rows through a contract's loaders: for a method whose kernel is not on this
machine (Marlin, AITER, FlashInfer: GPU), each rank's padded tensors are built by the
generated module's `alloc` / `load` (per expert, per role, from the checkpoint's own stored
tensors, as tests/conformance/test_vllm_quant_loading.py's `_layoutc_rank` does), decoded
back to float weights of the padded per-rank shape by the contract's own `decode`
expressions, and run through the reference; the ranks are summed. A pad the contract gets
wrong (not inert under decode) or a slice in the wrong place makes the row MISMATCH.

Decoding (`decode_rank`): a tensor's stored values are unpacked along its `pack N` axis in
the contract's slot order (`pack N order (...)`, ir.Axis.slot_of). The loaders copy the
checkpoint's words unchanged, so the scheme's `Packing` (checkpoints/quant/scheme.py) must
pack the contract's N along the contract's axis in the same order: RunError LR161 otherwise. A decode that applies a
number format to `code` (`e4m3fn(code)`, `e2m1(code)`, `e8m0(code)`) reads the stored bytes
through layoutc/runtime/numformats.py's DECODERS (the verifier's one definition; NaN codes
become NaN); any other `code` is the stored value. `tensor` terms are the named tensor's
decoded value at this element's group (`groups(axis, g)`: index // g within each segment of
a segmented axis; g = -1: one group), `match` / `if` read the plan's parameters and lets.

RunError codes: LR160 the contract cannot be read or declares no decode for a weight;
LR161 the contract stores the checkpoint's words in another packing (count or axis);
LR162 the contract has a parameter the scheme does not give, or cannot hold the scheme
(an asymmetric scheme on a contract whose decode has no zero point); LR163 no contract
declares the method (per-channel / per-tensor FP8), and the intermediate does not split
evenly for the dequantized-weights fallback; LR165 the contract text found is not the one the
generated module was compiled from (its SOURCE_SHA256); LR164 a stored tensor the contract's loader
needs is absent from the checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import torch

from layoutc.compiler import evaluate, ir
from layoutc.runtime import vocab
from layoutc.runtime.algebra import Word
from layoutc.runtime.numformats import CODES, DECODERS
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.checkpoints.quant import scheme as S
from layoutc.tools.checkpoints.quant.wna16 import CT_NAMES
from layoutc.tools.checkpoints.reader import Checkpoint
from layoutc.tools.quant_run.experts_ref import reference_output
from layoutc.tools.rankloop import run_ranks
from layoutc.tools.runplan import RunError

#: contract tensor kind -> the scheme's role of the stored tensor it is loaded from
_ROLE = {"weight": "weight", "scale": "scale", "zero": "zero"}
_AXIS = {"k": "in", "n": "out"}


@dataclass(frozen=True)
class Loaded:
    """One rank's padded contract tensors, by contract tensor name, and the contract's IR."""

    contract: ir.Contract
    env: dict[str, Any]
    tensors: dict[str, torch.Tensor]


def contract_ir(mod: Any) -> ir.Contract:
    """The checked IR of the generated module's contract (`SOURCE_FILE`): the file in this
    layoutc's source tree (the one its compiler reads), else the installed `layoutc_contracts`
    package's. A decode that disagreed with the module's loaders could only make rows MISMATCH,
    never hide one. RunError LR160 when it cannot be found or read."""
    import importlib.util

    source = Path(str(mod.SOURCE_FILE))
    candidates = [Path(__file__).resolve().parents[3] / source]
    try:
        spec = importlib.util.find_spec("layoutc_contracts")
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        candidates += [Path(p) / source.name for p in spec.submodule_search_locations or []]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        raise RunError("LR160", f"contract {mod.CONTRACT}: {source} is not installed; its decode cannot be read")
    return _load_ir(str(path), check_source(mod, path))


def check_source(mod: Any, path: Path) -> str:
    """RunError LR165 when the contract text at `path` is not the text `mod` was compiled from
    (the sha256 of its UTF-8 text, the module's `SOURCE_SHA256`, as emit/render.py computes it):
    a decode read from another text would check the other contract's loaders, not this
    module's. Returns the text (what the IR is then built from). LR160 when it cannot be read."""
    import hashlib

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError("LR160", f"contract {mod.CONTRACT}: {path} cannot be read ({exc})") from None
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    compiled = str(getattr(mod, "SOURCE_SHA256", ""))
    if digest != compiled:
        raise RunError("LR165", f"contract {mod.CONTRACT}: {path} (sha256 {digest[:12]}) is not the text the generated "
                       f"module {mod.__name__} was compiled from (SOURCE_SHA256 {compiled[:12] or 'absent'}); "
                       "recompile it (layoutc compile) or install the contract it was compiled from")
    return text


@cache
def _load_ir(path: str, text: str) -> ir.Contract:
    from layoutc.compiler.source import load

    contract, diags, _ = load(path, text)
    if contract is None:
        first = diags[0].message if diags else "no contract"
        raise RunError("LR160", f"{path}: the contract does not load ({first}); its decode cannot be read")
    return contract


def plan_values(layout: Any, moe: MoEModelConfig, scheme: S.QuantScheme, tp: int, dtype: str,
                stored_scale_dtype: str | None) -> dict[str, Any]:
    """The `plan()` arguments for this layer and scheme. `dtype` is the model dtype; a contract
    whose dtype domain lacks it (Marlin: float16 / bfloat16) stores its scales in the dtype the
    checkpoint stores them in (NVFP4's float8 scales, not a model dtype: the domain's first, an
    activation dtype no loader reads); block FP8's `scheme` / `block` / `scale_dtype` come from its block
    and its stored scales. RunError LR162 for a required parameter the scheme does not give."""
    values: dict[str, Any] = {"num_experts": moe.num_experts, "hidden_size": moe.hidden_size,
                              "intermediate_size": moe.intermediate_size, "tp_size": tp,
                              "activation": moe.activation, "act_order": scheme.act_order}
    if scheme.group_size is not None:
        values["group_size"] = scheme.group_size
    if scheme.block is not None:
        values["block"] = scheme.block[1]
        if scheme.block[0] == scheme.block[1]:  # marlin_moe_fp8's `scheme`: square blocks only
            values["scheme"] = f"fp8_block{scheme.block[1]}"
        values["scale_dtype"] = "uint8" if stored_scale_dtype in ("uint8", "float8_e8m0fnu") else "float32"
    param = layout.param("dtype")
    if param is not None:
        domain = tuple(str(v) for v in param.values)
        if dtype in domain or not domain:
            values["dtype"] = dtype
        elif stored_scale_dtype == "float8_e4m3fn":
            # the scales are float8 bytes (NVFP4's e4m3fn): not a model dtype; dtype is the activations'
            values["dtype"] = domain[0]
        else:
            values["dtype"] = stored_scale_dtype or dtype
    missing = layout.missing_params(values)
    if missing:
        raise RunError("LR162", f"contract {layout.contract} needs {', '.join(missing)}, which the {scheme.name} "
                       "scheme does not give; pass --contract with a contract for this method")
    return layout.plan_arguments(values)


def check_holds(contract: ir.Contract, scheme: S.QuantScheme) -> None:
    """RunError LR162 when the contract's decode cannot express the scheme: stored zero points
    (asymmetric GPTQ, AWQ) on a contract whose weight decode reads no zero tensor."""
    zeros = {t.name for t in contract.tensors if t.kind == "zero"}
    for t in contract.tensors:
        if t.kind != "weight":
            continue
        if t.decode is None:
            raise RunError("LR160", f"contract {contract.name}: {t.name} declares no decode; its padded codes "
                           "cannot be decoded")
        reads = {n.tensor for n in ir.walk(t.decode) if isinstance(n, ir.TensorValue)}
        if scheme.zero == "stored" and not reads & zeros:
            raise RunError("LR162", f"contract {contract.name} decodes {t.name} without a zero point "
                           f"(`{t.name}` decode reads {', '.join(sorted(reads)) or 'no tensor'}), but "
                           f"{scheme.name} stores zero points (asymmetric): the contract cannot hold this "
                           "checkpoint")


# ---- the checkpoint's stored tensors, per expert and role -------------------------------------


def expert_sources(ckpt: Checkpoint, moe: MoEModelConfig, scheme: S.QuantScheme, layer: int
                   ) -> dict[tuple[str, str], list[torch.Tensor]]:
    """The stored tensors of `layer`, by (projection role "gate" / "up" / "down", scheme role),
    one per expert, in the checkpoint's own dtype and dims. A fused gpt-oss tensor [E, 2I, ...]
    is split into its interleaved gate (even rows) and up (odd rows); MXFP4 blocks
    [.., G, 16] are merged to [.., G * 16] (the contract's `pack 2` axis of bytes). A per-tensor
    value (NVFP4's global scale) is one 0-dim tensor per expert, the multiplier (compressed-
    tensors' stored reciprocal inverted, as vLLM 0.32's process_weights_after_loading does)."""
    out: dict[tuple[str, str], list[torch.Tensor]] = {}
    fmt = moe.format
    if not fmt.fused:
        scalars = {t.role for t in scheme.tensors if t.scalar}
        for e in range(moe.num_experts):
            for proj, roles in S.tensor_names(scheme, fmt, layer, e).items():
                for role, name in roles.items():
                    if ckpt.has(name):
                        t = ckpt.tensor(name)
                        if role in scalars:  # stored () or (1,): one value per expert
                            t = t.reshape(())
                        if role == "global_scale" and scheme.global_inverse:
                            t = 1.0 / t  # vLLM's compressed-tensors NVFP4 hands the kernel 1 / weight_global_scale
                        if scheme.name in CT_NAMES.values() and t.dim() == 2:
                            # weight_packed.T is GPTQ's qweight word for word, weight_scale.T its scales
                            # (vLLM 0.32 int_wna16._process_weights_marlin / _cpu transpose them the same way)
                            t = t.T.contiguous()
                        out.setdefault((proj, role), []).append(t)
        return out
    names = S.tensor_names(scheme, fmt, layer)
    for proj, roles in names.items():
        for role, name in roles.items():
            if not ckpt.has(name):
                continue
            t = ckpt.tensor(name)
            if role == "weight" and t.dim() == 4:
                t = t.flatten(2, 3)
            if proj == "gate_up":
                out[("gate", role)] = list(t[:, 0::2])
                out[("up", role)] = list(t[:, 1::2])
            else:
                out[(proj, role)] = list(t)
    plain = fmt.names(layer, None)
    for key, proj in (("gate_up_bias", "gate_up"), ("down_bias", "down")):
        bias = plain.get(key)
        if bias is None or not ckpt.has(bias):
            continue
        b = ckpt.tensor(bias).to(torch.float32)
        if proj == "gate_up":
            out[("gate", "bias")], out[("up", "bias")] = list(b[:, 0::2]), list(b[:, 1::2])
        else:
            out[("down", "bias")] = list(b)
    return out


def load_rank(layout: Any, contract: ir.Contract, plan: Any, rank: int,
              sources: dict[tuple[str, str], list[torch.Tensor]]) -> Loaded:
    """Rank `rank`'s padded tensors: every contract tensor allocated by its generated `alloc`
    and each expert's stored tensor loaded into its slice by the generated `load` (role gate /
    up for w13, down for w2; a per-tensor global scale, NVFP4's, into a scale with no n / k
    axis). An optional tensor with no stored source (a bias the checkpoint
    lacks) is left out. RunError LR164 for a required one; the module's LayoutContractError
    for a stored tensor of the wrong shape."""
    try:
        env = evaluate.eval_lets(contract, {p.name: _param(getattr(plan, p.name)) for p in layout.plan_params})
    except evaluate.EvalError as exc:
        raise RunError("LR160", f"contract {contract.name} ({contract.file}): its lets do not evaluate at the "
                       f"module's plan ({exc}); the module and its contract file disagree") from None
    tensors: dict[str, torch.Tensor] = {}
    irs = {t.name: t for t in contract.tensors}
    for entry in layout.tensors:
        role = "bias" if entry.kind == "bias" else _ROLE.get(entry.kind)
        parts: tuple[str, ...] = ("gate", "up") if entry.projection == "w13" else ("down",)
        whole = False  # the source is loaded with role None (a tensor with no n axis to place it in)
        if _is_global(irs.get(entry.name), sources):
            # NVFP4's per-expert global scale: one for w13, vLLM 0.32 ModelOptNvFp4FusedMoE's
            # w13_weight_scale_2[:, 0] (the gate's; it warns when up's differs)
            role, whole = "global_scale", True
            parts = parts[:1]
        srcs = {p: sources.get((p, role or "")) for p in parts}
        if any(s is None for s in srcs.values()):
            if entry.optional or entry.kind == "zero":
                continue
            raise RunError("LR164", f"contract {layout.contract}'s {entry.name} ({entry.role}) loads from the "
                           f"checkpoint's {role} tensor of {'/'.join(parts)}, which this checkpoint does not store")
        dst = entry.alloc(plan, rank)
        for part, per_expert in srcs.items():
            assert per_expert is not None
            for e, src in enumerate(per_expert):
                if dst.is_floating_point() and dst.dtype.itemsize > 1 and src.dtype != dst.dtype:
                    src = src.to(dst.dtype)
                entry.load(dst, src, plan, rank, expert=e, role=None if whole else part)
        tensors[entry.name] = dst
    return Loaded(contract, env, tensors)


def _is_global(t: ir.Tensor | None, sources: dict[tuple[str, str], list[torch.Tensor]]) -> bool:
    """A contract scale with no n / k axis, where the checkpoint stores a per-tensor global scale."""
    return (t is not None and t.kind == "scale" and any(role == "global_scale" for _, role in sources)
            and not any(a.name in _AXIS for a in t.axes))


def _param(value: Any) -> Any:
    return str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value


# ---- decoding the padded tensors by the contract's decode ---------------------------------------


@cache
def _table(fmt: str) -> torch.Tensor:
    """float64 value of every code of number format `fmt` (NaN where numformats says not finite)."""
    lo, hi = CODES[fmt]
    values = [DECODERS[fmt](c) for c in range(lo, hi + 1)]
    return torch.tensor([float("nan") if v is None else float(v) for v in values], dtype=torch.float64)


def _packing(scheme: S.QuantScheme, t: ir.Tensor) -> tuple[int, S.Packing | None]:
    """(packed axis position, the scheme's Packing) of a contract tensor with a `pack N` axis;
    (-1, None) for one without, whose role the scheme stores unpacked too.
    RunError LR161 when the checkpoint's tensor of that role packs another count or along another
    axis, or packs where the contract holds one value an element."""
    axis = next((i for i, a in enumerate(t.axes) if a.pack > 1), None)
    spec = scheme.spec(_ROLE.get(t.kind, t.kind))
    pk = spec.packing if spec is not None else None
    packed_dim = next((d for d in spec.dims if d.pack > 1), None) if spec is not None else None
    if axis is None:
        if pk is not None and packed_dim is not None:  # e.g. GPTQ int8 words on int4pack's one-code-an-int32
            raise RunError("LR161", f"contract tensor {t.name} holds one value an element, but {scheme.name}'s "
                           f"{t.kind} tensor packs {pk.per_element} values a word along {packed_dim.axis}: its "
                           "stored words cannot be loaded unchanged")
        return -1, None
    ax = t.axes[axis]
    if pk is None or packed_dim is None or pk.per_element != ax.pack or packed_dim.axis != _AXIS.get(ax.name):
        have = "no packing" if pk is None or packed_dim is None else \
            f"{pk.per_element} values a word along {packed_dim.axis}"
        raise RunError("LR161", f"contract tensor {t.name} packs {ax.pack} values along {ax.name}, but {scheme.name}'s "
                       f"{t.kind} tensor has {have}: its stored words cannot be loaded unchanged")
    if tuple(ax.pack_order) != tuple(pk.order):  # the contract's `pack N order (...)` is the one read below
        raise RunError("LR161", f"contract tensor {t.name} states slot order {tuple(ax.pack_order)} along {ax.name}, "
                       f"but {scheme.name} stores its values in slot order {tuple(pk.order)}: the words would "
                       "decode to other values")
    return axis, pk


def _unpack(stored: torch.Tensor, axis: int, pk: S.Packing, slot_of: Callable[[int], int]) -> torch.Tensor:
    """int64 codes: each word of `stored` along `axis` expanded to its `per_element` values,
    element j read from slot `slot_of(j)` (bits [slot * bits, (slot + 1) * bits)): the contract
    axis's `pack N order (...)` (ir.Axis.slot_of), held equal to the scheme's order by _packing."""
    t = stored.view(torch.uint8) if stored.dtype == torch.int8 else stored
    t = t.to(torch.int64) & ((1 << pk.storage_bits) - 1)
    mask = (1 << pk.bits) - 1
    values = [(t >> (pk.bits * slot_of(j))) & mask for j in range(pk.per_element)]
    return torch.stack(values, dim=axis + 1).flatten(axis, axis + 1)


class _Decoder:
    """Decodes the tensors of one rank (see the module docstring); values float64 in each
    tensor's own axis order, packed axes expanded."""

    def __init__(self, loaded: Loaded, scheme: S.QuantScheme) -> None:
        self.loaded, self.scheme = loaded, scheme
        self.irs = {t.name: t for t in loaded.contract.tensors}
        self.memo: dict[str, torch.Tensor] = {}

    def codes(self, t: ir.Tensor) -> torch.Tensor:
        stored = self.loaded.tensors[t.name]
        axis, pk = _packing(self.scheme, t)
        if pk is not None:
            return _unpack(stored, axis, pk, t.axes[axis].slot_of)
        if ir.reads_format(t.decode) and stored.dtype.itemsize == 1:
            return stored.view(torch.uint8).to(torch.int64)
        return stored.to(torch.float64)

    def value(self, name: str) -> torch.Tensor:
        if name not in self.memo:
            t = self.irs[name]
            codes = self.codes(t)
            self.memo[name] = codes.to(torch.float64) if t.decode is None else self.eval(t.decode, t, codes)
        return self.memo[name]

    def expand(self, name: str, target: ir.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        """Tensor `name`'s value at each element of `target` (its groups broadcast)."""
        src, v = self.irs[name], self.value(name)
        names = [a.name for a in src.axes]
        for ax in target.axes:
            if ax.name not in names:  # an axis the value does not vary along: broadcast
                v = v.unsqueeze(-1)
                names.append(ax.name)
        v = v.permute([names.index(a.name) for a in target.axes])
        for i, ax in enumerate(target.axes):
            n, have = shape[i], v.shape[i]
            if have == n:
                continue
            sax = next((a for a in src.axes if a.name == ax.name), None)
            if sax is None:
                v = v.expand(*v.shape[:i], n, *v.shape[i + 1:])
                continue
            g = int(evaluate.eval_expr(sax.group_size, self.loaded.env)) if sax.group_size is not None else 0
            seg = ax.segments
            per, gper = n // seg, have // seg
            pos = torch.arange(n)
            idx = torch.zeros(n, dtype=torch.int64) if g <= 0 else (pos // per) * gper + (pos % per) // g
            v = v.index_select(i, idx)
        return v

    def eval(self, expr: ir.Expr, t: ir.Tensor, codes: torch.Tensor) -> torch.Tensor:
        match expr:
            case ir.Code():
                return codes.to(torch.float64)
            case ir.TensorValue():
                return self.expand(expr.tensor, t, tuple(codes.shape))
            case ir.Cond() if expr.type == ir.REAL:
                branch = expr.then if evaluate.eval_expr(expr.cond, self.loaded.env) else expr.orelse
                return self.eval(branch, t, codes)
            case ir.Select() if expr.type == ir.REAL:
                subject = evaluate.eval_expr(expr.subject, self.loaded.env)
                chosen = next((v for m, v in expr.cases if m == subject), expr.default)
                assert chosen is not None
                return self.eval(chosen, t, codes)
            case ir.Op() if expr.op.kind is vocab.OpKind.DECODE:
                fmt = str(expr.op.value)
                arg = self.eval(expr.args[0], t, codes).to(torch.int64)
                lo, hi = CODES[fmt]
                bad = (arg < lo) | (arg > hi)
                table = _table(fmt)
                out = table[(arg - lo).clamp(0, hi - lo)]
                return torch.where(bad, torch.full_like(out, float("nan")), out)
            case ir.Op() if expr.type == ir.REAL:
                if expr.op is vocab.Op.NEG:
                    return -self.eval(expr.args[0], t, codes)
                a, b = (self.eval(x, t, codes) for x in expr.args)
                if expr.op is vocab.Op.ADD:
                    return a + b
                if expr.op is vocab.Op.SUB:
                    return a - b
                if expr.op is vocab.Op.MUL:
                    return a * b
                raise RunError("LR160", f"contract {self.loaded.contract.name}: decode operator {expr.op} "
                               "is not one a decode allows")
            case _:
                return torch.tensor(float(evaluate.eval_expr(expr, self.loaded.env)), dtype=torch.float64)


@dataclass(frozen=True)
class RankWeights:
    """One rank's decoded float32 weights at the padded per-rank shape: gate_up [E, 2P, Hp]
    ([gate | up]), down [E, Hp, P], biases [E, 2P] / [E, Hp] or None."""

    gate_up: torch.Tensor
    down: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down_bias: torch.Tensor | None


def _gate_up(v: torch.Tensor, axis: ir.Axis) -> torch.Tensor:
    """w13's values [E, n, ...] with n as [gate | up]: the axis's segments, in its roles' order,
    are contiguous (`halves`, `concat`) or alternate row by row (`interleave`)."""
    roles = axis.roles or ("gate", "up")
    seg = len(roles)
    if axis.layout.value == Word.INTERLEAVE.value:
        parts = {r: v[:, i::seg] for i, r in enumerate(roles)}
    else:
        parts = dict(zip(roles, v.chunk(seg, dim=1), strict=True))
    return torch.cat([parts["gate"], parts["up"]], dim=1)


def decode_rank(loaded: Loaded, scheme: S.QuantScheme) -> RankWeights:
    """The rank's weights decoded from its padded tensors by the contract's decode (module
    docstring), reordered to [experts, n, k] with w13's n as [gate | up] (`_gate_up`: the n
    axis's segments in the order of its roles)."""
    dec = _Decoder(loaded, scheme)
    out: dict[str, torch.Tensor] = {}
    for t in loaded.contract.tensors:
        if t.kind != "weight":
            continue
        v = dec.value(t.name)
        names = [a.name for a in t.axes]
        v = v.permute(names.index("experts"), names.index("n"), names.index("k"))
        out[t.projection] = _gate_up(v.to(torch.float32), t.axis("n")) if t.projection == "w13" else v.to(torch.float32)
    biases: dict[str, torch.Tensor | None] = {"w13": None, "w2": None}
    for t in loaded.contract.tensors:
        if t.kind == "bias" and t.name in loaded.tensors:
            b = loaded.tensors[t.name].to(torch.float32)
            biases[t.projection] = _gate_up(b, t.axis("n")) if t.projection == "w13" else b
    gate_up = out["w13"]
    return RankWeights(gate_up.contiguous(), out["w2"].contiguous(), biases["w13"], biases["w2"])


# ---- a layer's rows ------------------------------------------------------------------------------


def reference_layer(mod: Any, ckpt: Checkpoint, moe: MoEModelConfig, scheme: S.QuantScheme, layer: int, tp: int,
                    dtype: str, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, use_transformers: bool,
                    sources: dict[tuple[str, str], list[torch.Tensor]]) -> tuple[torch.Tensor, Any, str, float, float]:
    """All ranks of one layer through `mod`'s loaders, decoded and run through the reference,
    summed in float32: (output [T, H], plan, reference name, slowest rank's load + decode
    seconds, slowest rank's reference seconds). Raises the module's LayoutContractError when the contract refuses
    the plan, RunError LR160-LR164."""
    from layoutc.tools.runplan import module_layout

    layout = module_layout(mod)
    contract = contract_ir(mod)
    check_holds(contract, scheme)
    for t in contract.tensors:  # LR161 before anything is loaded: the checkpoint's words pack another way
        if t.kind in _ROLE:
            _packing(scheme, t)
    if scheme.act_order and layout.param("act_order") is None:
        raise RunError("LR162", f"{scheme.name} is act-order (desc_act, a g_idx permutation of groups), but contract "
                       f"{contract.name} has no act_order parameter and no g_idx tensor: it reads groups as "
                       "k // group_size, so it cannot hold this checkpoint")
    scale = sources.get(("gate", "scale"))
    stored = str(scale[0].dtype).removeprefix("torch.") if scale else None
    plan = layout.plan(**plan_values(layout, moe, scheme, tp, dtype, stored))
    ranks = PaddedRanks(layout, contract, plan, scheme, sources, ckpt, moe, use_transformers)
    k = run_ranks(ranks, range(tp), x, (weights, ids), warmup=False, iters=1)
    return k.output, plan, ranks.name, k.load_s, k.kernel_s


@dataclass
class PaddedRanks:
    """The padded-quantized rank strategy (rankloop.RankStrategy): a rank's padded tensors through the contract's
    generated loaders (`load_rank`), decoded by its decode (`decode_rank`), run through the reference in float32
    (`reference_output`; w2's bias on rank 0 only, as vLLM adds it once). `name`: the reference's name."""

    layout: Any
    contract: Any
    plan: Any
    scheme: S.QuantScheme
    sources: dict[tuple[str, str], list[torch.Tensor]]
    ckpt: Checkpoint
    moe: MoEModelConfig
    use_transformers: bool
    name: str = ""

    def load(self, rank: int) -> tuple[int, RankWeights]:
        return rank, decode_rank(load_rank(self.layout, self.contract, self.plan, rank, self.sources), self.scheme)

    def compute(self, weights: tuple[int, RankWeights], x: torch.Tensor,
                routing: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        r, w = weights
        p, hp = w.down.shape[2], w.down.shape[1]
        xs = x if hp == x.shape[1] else torch.nn.functional.pad(x, (0, hp - x.shape[1]))
        params = {"gate_up_proj": w.gate_up[:, :, :hp], "down_proj": w.down}
        if w.gate_up_bias is not None:
            params["gate_up_proj_bias"] = w.gate_up_bias
        if w.down_bias is not None:
            # vLLM adds w2's bias once, on rank 0 (the all-reduce would add it tp times)
            params["down_proj_bias"] = w.down_bias if r == 0 else torch.zeros_like(w.down_bias)
        out, self.name = reference_output(self.ckpt, replace(self.moe, intermediate_size=p, hidden_size=hp), params,
                                          xs, routing[0], routing[1], self.use_transformers,
                                          f"the rank's padded tensors decoded by {self.contract.name}'s decode")
        return out[:, :x.shape[1]].to(torch.float32)
