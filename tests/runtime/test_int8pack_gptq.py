"""torch_int8pack_gptq_moe's decode, `(code - 128) * scale` per output channel, is what torch's
`aten::_weight_int8pack_mm` computes from the glue's packing of the same padded tensors (the
real op is the oracle): random GPTQ uint8b128 codes and scales are loaded by the generated
module's alloc / load at an uneven split (I = 70 over tp = 3: 24, 24, 22 rows and a tail;
bf16 pads the 24 to 32), decoded by the contract's own decode (quant_run/padded.py
`decode_rank`), and each expert's projection through the kernel is held to x @ decoded.T.
The pad and tail rows of w13 give exactly 0 from the kernel; the decode without the 128
offset does not match it, so the comparison can fail.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

E, H, INTER, TP, T = 2, 64, 70, 3, 5


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.kernel  # aten::_weight_int8pack_mm
@pytest.mark.parametrize(("dtype", "tol", "padded"), [("float32", 1e-6, 24), ("bfloat16", 1e-2, 32)])
def test_the_contract_decode_is_what_int8pack_computes(dtype: str, tol: float, padded: int) -> None:
    import generated.torch_int8pack_gptq_moe as mod
    from layoutc.runtime.glue import int8pack
    from layoutc.runtime.ops import op
    from layoutc.tools.checkpoints.quant import scheme as S
    from layoutc.tools.quant_run import padded as P
    from layoutc.tools.quant_run import rank8
    from layoutc.tools.runplan import module_layout

    tdtype = getattr(torch, dtype)
    plan = mod.plan(num_experts=E, hidden_size=H, intermediate_size=INTER, tp_size=TP, group_size=-1,
                    activation="silu", dtype=dtype)
    assert (plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded) == (24, padded)
    layout, contract = module_layout(mod), P.contract_ir(mod)
    # the sources below are unpacked codes (one a value, as quant_run/codes.py unpacks GPTQ's words
    # before this contract's loaders): the scheme they are decoded with stores its weight so
    packed = S.gptq(8, -1, sym=True, act_order=False)
    words = packed.weight()
    codes = dataclasses.replace(words, packing=None, dims=(S.Dim("out"), S.Dim("in")))
    scheme = dataclasses.replace(packed, tensors=tuple(codes if t is words else t for t in packed.tensors))
    gen = torch.Generator().manual_seed(0)
    sources: dict[tuple[str, str], list[torch.Tensor]] = {}
    for role, (out, inn) in (("gate", (INTER, H)), ("up", (INTER, H)), ("down", (H, INTER))):
        sources[(role, "weight")] = [torch.randint(0, 256, (out, inn), dtype=torch.int32, generator=gen)
                                     for _ in range(E)]
        sources[(role, "scale")] = [(torch.rand(out, 1, generator=gen) / 64 + 1e-3).to(tdtype) for _ in range(E)]
    mm = op(int8pack.FORWARD_OP)
    cfg = rank8.kernel_config(mod, plan, tdtype)
    p = padded
    for rank in range(TP):
        loaded = P.load_rank(layout, contract, plan, rank, sources)
        w = P.decode_rank(loaded, scheme)  # gate_up [E, 2P, H] ([gate | up]), down [E, H, P]
        t = loaded.tensors
        w13 = int8pack.pack_codes(cfg, "w13", t["w13_qweight"], t["w13_scales"]).data
        w2 = int8pack.pack_codes(cfg, "w2", t["w2_qweight"], t["w2_scales"]).data
        live = min(24, INTER - rank * 24)
        for e in range(E):
            x = torch.randn(T, H, generator=gen).to(tdtype)
            y = mm(x, w13.weights[e], w13.scales[e])
            assert _rel(y, x.double() @ w.gate_up[e].double().T) < tol, (rank, e)
            dead = torch.cat([torch.arange(live, p), p + torch.arange(live, p)])
            assert bool((y[:, dead] == 0).all()), (rank, e)  # pad / tail rows: code 128, scale 0
            unbiased = t["w13_qweight"][e].double() * t["w13_scales"][e].double()  # no `- 128`: wrong
            assert _rel(y, x.double() @ unbiased.T) > 0.1
            h = torch.randn(T, p, generator=gen).to(tdtype)
            y2 = mm(h, w2.weights[e], w2.scales[e])
            assert _rel(y2, h.double() @ w.down[e].double().T) < tol, (rank, e)
            # w2's pad / tail columns are code 128 (the value 0): no input on them reaches the output
            cut = h.clone()
            cut[:, live:] = 0
            assert _rel(mm(cut, w2.weights[e], w2.scales[e]), y2) < tol, (rank, e)


def test_pack_codes_refuses_what_the_kernel_cannot_take() -> None:
    """The glue's pack_codes names the problem before any kernel runs: codes not int32, a code
    outside uint8b128's 0..255, scales not [E, N, 1] of the plan's dtype, a bf16 K that the
    kernel would read past (K % 16; docs/kernels.md 6.3). A good input packs to int8 q - 128."""
    from layoutc.runtime.errors import LayoutContractError
    from layoutc.runtime.glue import int8pack
    from layoutc.runtime.packed import KernelConfig

    cfg = KernelConfig("c", 1, 32, 16, torch.bfloat16, "silu", "halves", (("w13", (1, 32, 32)), ("w2", (1, 32, 16))))
    codes = torch.full((1, 32, 32), 128, dtype=torch.int32)
    codes[0, 0, :2] = torch.tensor([0, 255], dtype=torch.int32)
    scales = torch.ones(1, 32, 1, dtype=torch.bfloat16)
    packed = int8pack.pack_codes(cfg, "w13", codes, scales).data
    assert packed.weights[0].dtype == torch.int8 and packed.weights[0][0, :3].tolist() == [-128, 127, 0]
    assert packed.scales[0].shape == (32,)
    bad = codes.clone()
    bad[0, 1, 1] = 256
    for args, words in (((codes.to(torch.uint8), scales), "dtype"), ((bad, scales), "0..255"),
                        ((codes, scales.to(torch.float32)), "dtype"), ((codes, scales[:, :, 0]), "shape")):
        with pytest.raises(LayoutContractError, match=words):
            int8pack.pack_codes(cfg, "w13", *args)
    odd = KernelConfig("c", 1, 24, 16, torch.bfloat16, "silu", "halves", (("w13", (1, 32, 24)), ("w2", (1, 24, 16))))
    with pytest.raises(LayoutContractError, match="K % 16"):
        int8pack.pack_codes(odd, "w13", codes[:, :, :24].contiguous(), scales)
