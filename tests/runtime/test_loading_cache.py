"""runtime/loading.py remembers each load's reads per (axis table, rank, role, layout, orientation):
a remembered plan must never serve a call it does not fit, and no check may be skipped on a hit.

Oracle: vLLM 0.32's FusedMoE weight loader reads rank r's slice of a column-parallel gate/up
projection as `loaded_weight.narrow(shard_dim, shard_size * tp_rank, shard_size)`
(model_executor/layers/fused_moe/layer.py `_load_w13`), and of the row-parallel down
projection the same way along its input dim (`_load_w2`); torch's `narrow` does the slicing here.
"""

from __future__ import annotations

import pytest
import torch

from generated import marlin_moe_wna16 as mod
from generated._runtime import loading
from generated._runtime.errors import LayoutContractError

E, H, I = 3, 256, 704  # noqa: E741 (the field's names)


def _plan(tp: int) -> mod.Plan:
    return mod.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, group_size=-1,
                    act_order=False, activation="silu", dtype="float16")


def _codes(e: int, proj: str) -> torch.Tensor:
    """A GPTQ qweight [in / 8, out] of random int32 words (each one eight 4-bit codes)."""
    gen = torch.Generator().manual_seed(3 * e + ("gate", "up", "down").index(proj))
    shape = (H // 8, I) if proj != "down" else (I // 8, H)
    return torch.randint(-2**31, 2**31 - 1, shape, generator=gen, dtype=torch.int32)


def test_remembered_reads_fit_every_rank_role_orientation_and_plan() -> None:
    """Ranks, roles, orientations and plans interleaved (each call after the first hits a table that
    another call filled): every loaded region equals vLLM's narrow of the checkpoint tensor."""
    for tp in (4, 2):
        plan = _plan(tp)
        i_pp, pad = plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded
        w13 = {r: mod.alloc_w13_qweight(plan, r) for r in range(tp)}
        w2 = {r: mod.alloc_w2_qweight(plan, r) for r in range(tp)}
        for e in range(E):
            for r in range(tp):
                for k, role in enumerate(("gate", "up")):
                    src = _codes(e, role)
                    transposed = (e + r) % 2 == 1  # a `x @ W` source every other call
                    mod.load_w13_qweight(w13[r], src.T.contiguous() if transposed else src, plan, r, expert=e,
                                         role=role, transposed=transposed)
                    want = src.narrow(1, i_pp * r, i_pp)
                    assert torch.equal(w13[r][e, :, k * pad: k * pad + i_pp], want), (tp, r, e, role)
                down = _codes(e, "down")
                mod.load_w2_qweight(w2[r], down, plan, r, expert=e)
                assert torch.equal(w2[r][e, : i_pp // 8], down.narrow(0, i_pp // 8 * r, i_pp // 8)), (tp, r, e)
        for r in range(tp):  # pads still hold the fill 0 after every load
            assert int(torch.count_nonzero(w13[r][:, :, i_pp:pad])) == 0
            assert int(torch.count_nonzero(w13[r][:, :, pad + i_pp:])) == 0
            assert int(torch.count_nonzero(w2[r][:, i_pp // 8:])) == 0


def test_every_check_still_runs_on_a_remembered_call() -> None:
    plan = _plan(4)
    dst = mod.alloc_w13_qweight(plan, 1)
    good = _codes(0, "gate")
    mod.load_w13_qweight(dst, good, plan, 1, expert=0, role="gate")  # fills the table
    before = dst.clone()
    bad = {
        "has shape": lambda: mod.load_w13_qweight(dst, good[:, :-8], plan, 1, expert=0, role="gate"),
        "declare transposed=True": lambda: mod.load_w13_qweight(dst, good.T, plan, 1, expert=0, role="gate"),
        "has dtype": lambda: mod.load_w13_qweight(dst, good.to(torch.int64), plan, 1, expert=0, role="gate"),
        "expert=3": lambda: mod.load_w13_qweight(dst, good, plan, 1, expert=3, role="gate"),
        "expert=True": lambda: mod.load_w13_qweight(dst, good, plan, 1, expert=True, role="gate"),
        "rank=4": lambda: mod.load_w13_qweight(dst, good, plan, 4, expert=0, role="gate"),
        "role='down'": lambda: mod.load_w13_qweight(dst, good, plan, 1, expert=0, role="down"),
        "destination": lambda: mod.load_w13_qweight(dst[:, :, 1:], good, plan, 1, expert=0, role="gate"),
    }
    for needle, call in bad.items():
        with pytest.raises(LayoutContractError, match=needle.replace("(", r"\(").replace("[", r"\[")):
            call()
        assert torch.equal(dst, before), needle  # nothing written by a refused call

    class Lying:  # a foreign slice whose reads do not match its get_shape()
        def get_shape(self) -> list[int]:
            return list(good.shape)

        def __getitem__(self, index: object) -> torch.Tensor:
            return torch.zeros(1, 1, dtype=torch.int32)

    with pytest.raises(LayoutContractError, match="does not read what its get_shape"):
        mod.load_w13_qweight(dst, Lying(), plan, 1, expert=0, role="gate")


def test_the_table_cache_keys_on_the_tuple_object_and_stays_bounded() -> None:
    plan = _plan(4)
    axes = mod._w13_qweight_axes(plan)
    fresh = mod._w13_qweight_axes(plan)  # equal, another object: its own table, the same reads
    assert fresh == axes and fresh is not axes
    assert loading._table(axes) is loading._table(axes)
    assert loading._table(fresh) is not loading._table(axes)
    assert loading._table(list(axes)) is not loading._table(list(axes))  # a list is never remembered
    for _ in range(loading._TABLES_LIMIT + 5):
        loading._table(mod._w13_qweight_axes(plan))
    assert len(loading._TABLES) <= loading._TABLES_LIMIT
