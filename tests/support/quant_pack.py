"""Test packers: float weights -> each quantized format's stored tensors, written from the
formats' own specifications and sharing no code with layoutc's declarations or its
dequantizer (layoutc/tools/checkpoints/quant). Pure torch.

Every packer takes one projection's weight `w` float32 `[out, in]` (the contract's order;
MXFP4 also `[E, out, in]`) and returns the tensors the real tool writes, keyed by the
suffix it appends to the module name:

- `pack_gptq`: GPTQ's quantizer (AutoGPTQ / GPTQModel `Quantizer.find_params`: the range
  includes 0; sym: zero (maxq + 1) / 2; asym: zero round(-xmin / scale)), one group per
  `group_size` input channels (ceil), act-order as a permutation whose i-th channel is in
  group i // group_size (`g_idx`); qweight [K / pack, N] int32 packed along K (value j of a
  word at bits j * bits), qzeros [G, N / pack] packed along N holding z - 1 (the v1
  "gptq" checkpoint format) or z ("gptq_v2"), scales [G, N] float16, g_idx [K] int32.
- `pack_awq`: AutoAWQ's pseudo_quantize_tensor (scale (max - min) / 15, zero
  round(-min / scale)) and WQLinear_GEMM's packing: qweight [K, N / 8], qzeros [G, N / 8]
  with AutoAWQ's order (bits 4i..4i+3 hold element AWQ_PACK_ORDER[i]), scales [G, N] float16.
- `pack_fp8`: E4M3 (torch's own float8 cast) with amax / 448 scales per block
  (`weight_scale_inv` [ceil(N / bn), ceil(K / bk)] float32), channel ([N, 1]) or tensor (()).
- `pack_mxfp4`: OCP MX v1.0 section 6.3: per 32 values of `in`, shared exponent
  floor(log2(amax)) - 2 (E2M1's emax) as an E8M0 byte, elements rounded to the nearest
  E2M1 value (saturating at 6), two a byte, the even element in the low nibble.
- `pack_nvfp4`: NVIDIA's two-level NVFP4 (ModelOpt's NVFP4QTensor; llm-compressor's
  tensor_group strategy): a per-tensor global scale amax / (6 * 448) (ModelOpt stores it as
  `weight_scale_2`; compressed-tensors stores its reciprocal as `weight_global_scale`), per
  16 values of `in` an E4M3 block scale amax_block / 6 relative to it (`weight_scale`
  [out, in / 16] float8_e4m3fn), elements the nearest E2M1 value of w / (block * global),
  two a byte, low nibble first (`weight` / `weight_packed` [out, in / 2] uint8), and a
  float32 activation scale (`input_scale` / `input_global_scale`, a stand-in value).
"""

from __future__ import annotations

import torch

#: AutoAWQ (awq/utils/packing_utils.py AWQ_ORDER; vLLM quant_utils.awq_pack's interleave):
#: the int32 slot i (bits 4i..4i+3) holds element AWQ_PACK_ORDER[i] of 8 consecutive columns.
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
#: OCP MX v1.0 Table: E2M1 magnitudes by the 3 low bits of a code (bit 3 is the sign).
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
FP8_MAX = 448.0


def to_int32(words: torch.Tensor) -> torch.Tensor:
    """Unsigned 32-bit words (int64) as the int32 bit pattern safetensors stores."""
    return (((words & 0xFFFFFFFF) + 2**31) % 2**32 - 2**31).to(torch.int32)


def pack_along(codes: torch.Tensor, bits: int, dim: int, order: tuple[int, ...] | None = None) -> torch.Tensor:
    """Pack unsigned `bits`-bit codes along `dim` into int32 words: slot i of each word holds
    element order[i] of its 32 // bits consecutive values (None: element i)."""
    per = 32 // bits
    order = order or tuple(range(per))
    c = codes.to(torch.int64).movedim(dim, -1)
    assert c.shape[-1] % per == 0, (c.shape, per)
    c = c.reshape(*c.shape[:-1], -1, per)
    words = torch.zeros(c.shape[:-1], dtype=torch.int64)
    for slot, element in enumerate(order):
        words |= (c[..., element] & ((1 << bits) - 1)) << (bits * slot)
    return to_int32(words).movedim(-1, dim)


def gptq_groups(in_features: int, group_size: int, act_order: bool, seed: int = 0) -> torch.Tensor:
    """g_idx [K] int32: the group of each input channel (act-order: a seeded permutation, as
    GPTQ's desc_act orders channels by the Hessian's diagonal, which a test has no data for)."""
    size = in_features if group_size == -1 else group_size
    if not act_order:
        return (torch.arange(in_features) // size).to(torch.int32)
    perm = torch.randperm(in_features, generator=torch.Generator().manual_seed(seed))
    g_idx = torch.empty(in_features, dtype=torch.int64)
    g_idx[perm] = torch.arange(in_features) // size
    return g_idx.to(torch.int32)


def pack_gptq(w: torch.Tensor, bits: int, group_size: int, *, sym: bool = True, act_order: bool = False,
              v2: bool = False, seed: int = 0) -> dict[str, torch.Tensor]:
    """GPTQ tensors of `w` [N, K] (see the module docstring)."""
    n, k = w.shape
    maxq = (1 << bits) - 1
    g_idx = gptq_groups(k, group_size, act_order, seed).to(torch.int64)
    groups = int(g_idx.max()) + 1
    wt = w.T.to(torch.float32)  # [K, N]
    scale = torch.empty(groups, n)
    zero = torch.empty(groups, n)
    for g in range(groups):
        rows = wt[g_idx == g]
        xmin = torch.minimum(rows.min(0).values, torch.zeros(n))
        xmax = torch.maximum(rows.max(0).values, torch.zeros(n))
        if sym:
            xmax = torch.maximum(xmin.abs(), xmax)
            xmin = torch.where(xmin < 0, -xmax, xmin)
        flat = (xmin == 0) & (xmax == 0)
        xmin, xmax = torch.where(flat, -1.0, xmin), torch.where(flat, 1.0, xmax)
        scale[g] = ((xmax - xmin) / maxq).to(torch.float16).to(torch.float32)
        # v1 stores z - 1, so z = 0 would wrap (AutoGPTQ's known overflow): keep z >= 1 there
        zero[g] = torch.full((n,), (maxq + 1) / 2) if sym else \
            torch.round(-xmin / scale[g]).clamp(0 if v2 else 1, maxq)
    q = torch.clamp(torch.round(wt / scale[g_idx]) + zero[g_idx], 0, maxq).to(torch.int64)
    stored_zero = zero.to(torch.int64) - (0 if v2 else 1)
    return {".qweight": pack_along(q, bits, 0), ".qzeros": pack_along(stored_zero, bits, 1),
            ".scales": scale.to(torch.float16), ".g_idx": g_idx.to(torch.int32)}


def pack_awq(w: torch.Tensor, group_size: int) -> dict[str, torch.Tensor]:
    """AWQ GEMM tensors of `w` [N, K]; K must be whole groups (AutoAWQ asserts it)."""
    n, k = w.shape
    size = k if group_size == -1 else group_size
    if k % size:
        raise ValueError(f"AWQ needs in_features % group_size == 0 (AutoAWQ WQLinear_GEMM): {k} % {size}")
    wg = w.to(torch.float32).reshape(n, k // size, size)
    mx, mn = wg.amax(-1, keepdim=True), wg.amin(-1, keepdim=True)
    scale = ((mx - mn).clamp(min=1e-5) / 15).to(torch.float16).to(torch.float32)
    zero = torch.clamp(-torch.round(mn / scale), 0, 15)
    q = torch.clamp(torch.round(wg / scale) + zero, 0, 15).reshape(n, k).to(torch.int64)
    return {".qweight": pack_along(q.T, 4, 1, AWQ_PACK_ORDER),
            ".qzeros": pack_along(zero[..., 0].T.to(torch.int64), 4, 1, AWQ_PACK_ORDER),
            ".scales": scale[..., 0].T.contiguous().to(torch.float16)}


def pack_fp8(w: torch.Tensor, strategy: str, block: tuple[int, int] = (128, 128),
             scale_dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """(float8_e4m3fn weight [N, K], scale) with scale = amax / 448 per block ([ceil(N / bn),
    ceil(K / bk)], the last block ragged), per output channel ([N, 1]) or per tensor (())."""
    n, k = w.shape
    w = w.to(torch.float32)
    if strategy == "block":
        bn, bk = block
        s = torch.empty(-(-n // bn), -(-k // bk))
        for i in range(s.shape[0]):
            for j in range(s.shape[1]):
                s[i, j] = w[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk].abs().amax().clamp(min=1e-12) / FP8_MAX
        s = s.to(scale_dtype).to(torch.float32)
        full = s.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    elif strategy == "channel":
        s = (w.abs().amax(1, keepdim=True).clamp(min=1e-12) / FP8_MAX).to(scale_dtype).to(torch.float32)
        full = s
    else:
        s = (w.abs().amax().clamp(min=1e-12) / FP8_MAX).to(scale_dtype).to(torch.float32)
        full = s
    q = (w / full).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, s.to(scale_dtype)


def _e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 code (uint8 0..15) of each value, saturating at +-6."""
    mags = torch.tensor(E2M1_MAGNITUDES)
    idx = (x.abs().clamp(max=6.0)[..., None] - mags).abs().argmin(-1)
    return (idx | torch.where((x < 0) & (idx > 0), 8, 0)).to(torch.uint8)


def pack_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(blocks uint8 [..., out, in / 32, 16], scales uint8 [..., out, in / 32]) of `w` [..., out, in]."""
    *lead, out, k = w.shape
    assert k % 32 == 0, k
    blocks = w.to(torch.float32).reshape(*lead, out, k // 32, 32)
    amax = blocks.abs().amax(-1)
    exp = torch.where(amax > 0, torch.floor(torch.log2(amax.clamp(min=2.0**-127))) - 2, torch.full_like(amax, -127))
    exp = exp.clamp(-127, 127)
    codes = _e2m1_codes(blocks / torch.exp2(exp)[..., None])
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed.contiguous(), (exp + 127).to(torch.uint8)


def pack_nvfp4(w: torch.Tensor, *, compressed_tensors: bool = False, input_amax: float = 4.0,
               amax: float | None = None) -> dict[str, torch.Tensor]:
    """NVFP4 tensors of `w` [out, in] (see the module docstring), keyed by suffix. amax: the
    global scale's amax (None: w's own; ModelOpt's export gives gate and up one amax)."""
    out, k = w.shape
    assert k % 16 == 0, k
    w = w.to(torch.float32)
    top = w.abs().amax() if amax is None else torch.tensor(amax, dtype=torch.float32)
    second = (top.clamp(min=1e-12) / (6.0 * FP8_MAX)).reshape(())
    blocks = w.reshape(out, k // 16, 16)
    block = (blocks.abs().amax(-1) / 6.0 / second).clamp(max=FP8_MAX).to(torch.float8_e4m3fn)
    full = block.to(torch.float32)[..., None] * second
    codes = _e2m1_codes(torch.where(full > 0, blocks / full.clamp(min=1e-30), torch.zeros_like(blocks)))
    codes = codes.reshape(out, k)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()
    act = torch.tensor(input_amax / (6.0 * FP8_MAX), dtype=torch.float32)
    if compressed_tensors:
        return {".weight_packed": packed, ".weight_scale": block, ".weight_global_scale": (1.0 / second).reshape(1),
                ".input_global_scale": (1.0 / act).reshape(1)}
    return {".weight": packed, ".weight_scale": block, ".weight_scale_2": second.clone(), ".input_scale": act}
