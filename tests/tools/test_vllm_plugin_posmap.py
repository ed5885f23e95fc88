"""Check mode compares vLLM's prepacked weights through the contract's position map (issue 44 item 4).

posmap.py derives, once per plan, where each loaded element lands in the prepacked buffer: the pad's
runs from the contract's layout words (the generated LAYOUT's axis table, `algebra.runs`) and the
prepack's strided permutation from the contract's glue op probed on one expert of position codes.

Oracles, none written by us: the generated module's `pad` then the real `_C::prepack_moe_weight`
(through `prepack_padded`), and vLLM 0.32's own `CPUUnquantizedExperts.process_weights_after_loading`.

- The map's expectation equals the contract's pad then the kernel's prepack, bit for bit, for padded
  and unpadded plans, halves and interleaved pairs, run boundaries on and off the prepack's 16-row
  blocks; and reads back the loaded weights.
- vLLM's own layer passes through the map alone (the pad-and-prepack comparison never runs).
- One wrong element, in a pad position or a live one, of w13 or w2, is stopped and named.
- A map that is wrong by one run refuses vLLM's correct layer: the map never lets the check pass on
  its own say-so.
"""

from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch

from tests.tools.test_vllm_plugin import _layer, cpu_moe  # noqa: F401  (the fixture, by name)

pytestmark = [pytest.mark.kernel, pytest.mark.conformance]


def _gen():  # type: ignore[no-untyped-def]
    return importlib.import_module("layoutc_generated.vllm_cpu_grouped_gemm")


@pytest.mark.parametrize("tp, activation, intermediate, hidden", [
    (4, "silu", 704, 256),       # 176 -> 192: a pad run per half, on 16-row blocks
    (2, "silu", 704, 256),       # 352: nothing padded
    (3, "gelu", 600, 128),       # 200 -> 224: runs off the 16-row blocks (head and tail pieces)
    (4, "silu", 200, 64),        # 50 -> 64
    (4, "swigluoai", 704, 256),  # interleaved pairs, padded at the end
])
def test_the_map_is_the_contracts_pad_then_the_kernels_prepack(tp: int, activation: str, intermediate: int,
                                                              hidden: int) -> None:
    from layoutc.tools.vllm_plugin import check, posmap

    gen = _gen()
    lay = check.layout(gen)
    extra = {"swiglu_alpha_milli": 1702, "swiglu_limit_milli": 7000} if activation == "swigluoai" else {}
    plan = lay.plan(num_experts=3, hidden_size=hidden, intermediate_size=intermediate, tp_size=tp,
                    activation=activation, dtype=torch.bfloat16, isa="vec", **extra)
    torch.manual_seed(tp)
    logical = {p: torch.randn(tuple(lay.weight(p).shapes(plan)[0])).to(torch.bfloat16) for p in ("w13", "w2")}
    p13, p2 = check.kernel(gen).prepack_padded(lay.weight("w13").pad(logical["w13"], plan).contiguous(),
                                               lay.weight("w2").pad(logical["w2"], plan).contiguous(), plan)
    for projection, packed in (("w13", p13.data), ("w2", p2.data)):
        pm = posmap.position_map(gen, plan, projection, torch.bfloat16)
        assert pm is not None, projection
        got = posmap.expected(pm, logical[projection])
        assert torch.equal(got, packed), (projection, pm)
        assert torch.equal(posmap.logical_of(pm, got), logical[projection]), projection


def test_the_fit_refuses_what_is_not_one_strided_view() -> None:
    from layoutc.tools.vllm_plugin import posmap

    rows, cols = 32, 8
    blocked = torch.arange(rows * cols).reshape(rows // 16, 16, cols).permute(0, 2, 1).reshape(-1)
    assert posmap.fit_digits(blocked, rows, cols) is not None
    swapped = blocked.clone()
    swapped[[5, 6]] = swapped[[6, 5]]
    assert posmap.fit_digits(swapped, rows, cols) is None


def test_vllms_own_layer_passes_through_the_map_alone(cpu_moe, monkeypatch: pytest.MonkeyPatch  # noqa: F811
                                                      ) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import check, hook

    def never(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the pad-and-prepack comparison ran")

    monkeypatch.setattr(check, "_packed_blocks_equal", never)
    monkeypatch.setattr(check, "_unpack", never)
    hook.install("check")
    ex, layer = _layer(cpu_moe, experts=3, tp=4, bias=True)
    ex.process_weights_after_loading(layer)
    assert hook.handled() == {"vllm_cpu_grouped_gemm": 1}


# (projection, place, index): w13 rows 176..191 are gate's pad at tp 4 (176 -> 192); w2's columns 176..191
_SPOTS = [("w13", "pad", (1, 180, 5)), ("w13", "live", (1, 3, 7)), ("w13", "live", (2, 200, 0)),
          ("w2", "pad", (1, 5, 185)), ("w2", "live", (0, 255, 175))]


@pytest.mark.parametrize("projection, place, index", _SPOTS)
def test_one_wrong_element_is_stopped(cpu_moe, monkeypatch: pytest.MonkeyPatch, projection: str,  # noqa: F811
                                      place: str, index: tuple[int, int, int]) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import LayoutcVllmError, check, hook

    real = cpu_moe.CPUUnquantizedExperts._pad_moe_intermediate

    def pad_then_spoil(self, layer):  # type: ignore[no-untyped-def]
        real(self, layer)
        w = getattr(layer, f"{projection}_weight").data
        w[index] = 0.5 if place == "pad" else w[index] + 1.0

    def never(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the blocked pad-and-prepack comparison ran")

    monkeypatch.setattr(cpu_moe.CPUUnquantizedExperts, "_pad_moe_intermediate", pad_then_spoil)
    monkeypatch.setattr(check, "_packed_blocks_equal", never)  # found by the map, described after
    hook.install("check")
    ex, layer = _layer(cpu_moe, experts=3, tp=4)
    with pytest.raises(LayoutcVllmError) as info:
        ex.process_weights_after_loading(layer)
    message = str(info.value)
    unit = "rows" if projection == "w13" else "columns"
    assert f"{projection} is not laid out as contract vllm_cpu_grouped_gemm says" in message, message
    assert f"1 of {384 if projection == 'w13' else 192} {unit} wrong, in expert {index[0]} of 3)" in message, message
    if place == "pad":
        assert "where the contract puts pad" in message, message


@pytest.mark.parametrize("broken", ["shifted run", "no pad run"])
def test_a_wrong_map_refuses_vllms_correct_layer(cpu_moe, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                 broken: str) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook, posmap

    real = posmap.position_map

    def wrong(gen, plan, projection, dtype):  # type: ignore[no-untyped-def]
        pm = real(gen, plan, projection, dtype)
        if pm is None or projection != "w13":
            return pm
        if broken == "shifted run":  # up's live rows one row late (into its pad), read back the same way
            (s0, d0, n0), (s1, d1, n1) = pm.copies
            return dataclasses.replace(pm, copies=((s0, d0, n0), (s1, d1 + 1, n1)))
        return dataclasses.replace(pm, pads=(), fill=float("nan"))  # pads left as allocated (NaN-filled below)

    monkeypatch.setattr(posmap, "position_map", wrong)
    real_expected = posmap.expected

    def expected(pm, logical):  # type: ignore[no-untyped-def]
        if broken == "no pad run" and pm.dim == 1:
            out = torch.full((logical.shape[0], *pm.shape[1:]), float("nan"), dtype=logical.dtype)
            view = posmap.padded_view(pm, out)
            for source, dest, length in pm.copies:
                posmap._put(pm, view, dest, length, logical.narrow(pm.dim, source, length))
            return out
        return real_expected(pm, logical)

    monkeypatch.setattr(posmap, "expected", expected)
    hook.install("check")
    ex, layer = _layer(cpu_moe, experts=3, tp=4)
    with pytest.raises(LayoutcVllmError) as info:
        ex.process_weights_after_loading(layer)
    assert "position map" in str(info.value) and "the map" in str(info.value), str(info.value)


@pytest.mark.parametrize("kind", ["end_pad", "double_pad", "garbage_pad", "nan_pad", "ones_pad", "ones_w13",
                                  "w2_front", "up_double", "swap_halves", "one_expert"])
def test_the_engine_tests_planted_bugs_are_stopped_through_the_map(cpu_moe, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                                   kind: str) -> None:  # type: ignore[no-untyped-def]
    """The planted kinds of tests/engine/test_vllm_plugin_engine.py (tests/support/engine/site/sitecustomize.py), here in
    vLLM's own method at the same sizes (8 experts, I_pp 176 -> 192, hidden 256), found by the map alone
    and described as the engine test expects."""
    from layoutc.tools.vllm_plugin import LayoutcVllmError, check, hook
    from tests.engine.test_vllm_plugin_engine import CALLER_NEEDLES
    from tests.tools.test_vllm_plugin import _broken

    def never(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the blocked pad-and-prepack comparison ran")

    monkeypatch.setattr(check, "_packed_blocks_equal", never)
    monkeypatch.setattr(cpu_moe.CPUUnquantizedExperts, "_pad_moe_intermediate", _broken(kind))
    hook.install("check")
    ex, layer = _layer(cpu_moe, experts=8, tp=4)
    with pytest.raises(LayoutcVllmError) as info:
        ex.process_weights_after_loading(layer)
    message = str(info.value)
    for needle in CALLER_NEEDLES[kind]:
        if not needle.startswith("tensor "):
            assert needle in message, (needle, message)
    assert "contracts/vllm_cpu_grouped_gemm.moe:" in message, message


@pytest.mark.parametrize("projection, index", [("w13", (1, 180, 5)), ("w2", (1, 5, 185)), ("w13", (1, 3, 7))])
def test_a_negative_zero_or_another_nan_is_a_difference(cpu_moe, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                        projection: str, index: tuple[int, int, int]
                                                        ) -> None:  # type: ignore[no-untyped-def]
    """The pad code is proved as bytes (docs/verification.md), so check compares bits, not values: -0.0 in
    a pad of 0.0 (w13's gate pad row, w2's pad column), and a live value's NaN with another payload, are
    stopped. Before: compared as values, both passed (-0.0 == 0.0; NaN taken as equal to NaN)."""
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    real = cpu_moe.CPUUnquantizedExperts._pad_moe_intermediate
    live = index == (1, 3, 7)

    def pad_then_spoil(self, layer):  # type: ignore[no-untyped-def]
        real(self, layer)
        w = getattr(layer, f"{projection}_weight").data
        if live:  # a NaN with a payload the loaded one lacks: same value class, other bits
            w[index] = torch.tensor(0x7FC1, dtype=torch.int16).view(torch.bfloat16)
        else:
            w[index] = -0.0

    monkeypatch.setattr(cpu_moe.CPUUnquantizedExperts, "_pad_moe_intermediate", pad_then_spoil)
    hook.install("check")
    ex, layer = _layer(cpu_moe, experts=3, tp=4)
    if live:  # the loaded weight holds the canonical NaN there
        layer.w13_weight.data[index] = float("nan")
    with pytest.raises(LayoutcVllmError, match=f"{projection} is not laid out as contract") as info:
        ex.process_weights_after_loading(layer)
    # described bit for bit too: the one row (w2: column) in expert 1, not "0 of N rows wrong"
    unit = "rows" if projection == "w13" else "columns"
    assert f"1 of {384 if projection == 'w13' else 192} {unit} wrong, in expert 1 of 3)" in str(info.value), info.value
    if not live:
        assert f"neither the pad code nor any loaded {unit[:-1]}" in str(info.value), info.value


def test_a_declared_bias_vllm_drops_is_stopped(cpu_moe, monkeypatch: pytest.MonkeyPatch  # noqa: F811
                                              ) -> None:  # type: ignore[no-untyped-def]
    """A loaded w13 bias the contract declares, deleted by vLLM's processing, would leave the kernel
    without it: check refuses the layer naming the bias. Before: the pair was skipped and the layer passed."""
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    real = cpu_moe.CPUUnquantizedExperts._pad_moe_intermediate

    def pad_then_drop(self, layer):  # type: ignore[no-untyped-def]
        real(self, layer)
        del layer.w13_bias

    monkeypatch.setattr(cpu_moe.CPUUnquantizedExperts, "_pad_moe_intermediate", pad_then_drop)
    hook.install("check")
    ex, layer = _layer(cpu_moe, experts=3, tp=4, bias=True)
    with pytest.raises(LayoutcVllmError, match=r"loaded a bias of w13.*no longer holds it"):
        ex.process_weights_after_loading(layer)
