"""The one run-report row (layoutc/tools/runrow.py, issue 41 item 1): each route's JSON keeps the
fields, in the order, its own record wrote before the two records became one (run.py's `Row`,
quant_run/runner.py's `QuantRow`), and the one text printer writes both routes' tables as their
own printers did. The expected texts are those printers' output for the same rows (commit 78be434).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from typing import Any

from layoutc.tools.runrow import Row, print_text, result_words, write_json

_SIZES = [
    "layer",
    "tp_size",
    "intermediate_size_per_partition",
    "intermediate_size_per_partition_padded",
    "rel_error",
    "tolerance",
    "ok",
]
DENSE_KEYS = [
    *_SIZES,
    "kernel_ms",
    "load_ms",
    "peak_mib",
    "reference",
    "routing",
    "independent",
    "matched",
    "router_weight",
    "result",
    "ep_size",
    "placement",
    "experts_by_rank",
    "input_scale",
    "input_reach",
    "block",
    "scale_ratio",
]
QUANT_KEYS = [
    *_SIZES,
    "kernel",
    "reference",
    "kernel_ms",
    "load_ms",
    "matched",
    "independent",
    "kernel_ran",
    "result",
    "input_scale",
    "input_reach",
]

DENSE = [
    Row(
        0,
        1,
        64,
        64,
        1.5e-6,
        1e-5,
        True,
        1.25,
        3.5,
        12.0,
        "transformers' Qwen3MoeSparseMoeBlock",
        "its router",
        ep_size=2,
        placement="linear",
        experts_by_rank=[[0, 1, 2, 3], [4, 5, 6, 7]],
        input_scale=8.0,
        input_reach="median 16",
    ),
    Row(
        1,
        2,
        32,
        48,
        0.5,
        1e-5,
        False,
        0.75,
        2.0,
        10.5,
        "a loop",
        "declared",
        independent=False,
        matched=False,
        result="MISMATCH (unchecked: --no-transformers, compared with a loop)",
        input_scale=8.0,
        input_reach="median 16",
    ),
]
QUANT = [
    Row(
        0,
        2,
        32,
        64,
        2e-3,
        2e-2,
        True,
        1.5,
        2.25,
        reference="ref",
        kernel="aten::op (c)",
        input_scale=4.0,
        input_reach="median 16",
    ),
    Row(
        0,
        4,
        16,
        16,
        3e-3,
        2e-2,
        False,
        0.5,
        0.0,
        reference="ref",
        kernel="no kernel",
        kernel_ran=False,
        result="unchecked: no kernel ran",
        input_scale=4.0,
        input_reach="median 16",
    ),
]

DENSE_TEXT = (
    "M (qwen3_moe, float32) · contract C\n"
    "layer  tp  ep  I_pp -> padded  rel error      tol  kernel ms   load ms  peak MiB  result\n"
    "    0   1   2        64 -> 64   1.50e-06    1e-05       1.25       3.5      12.0  ok\n"
    "    1   2   1        32 -> 48   5.00e-01    1e-05       0.75       2.0      10.5  MISMATCH (unchecked: "
    "--no-transformers, compared with a loop)\n"
    "reference (layer 0): transformers' Qwen3MoeSparseMoeBlock\n"
    "routing (layer 0): its router\n"
    "reference (layer 1): a loop\n"
    "routing (layer 1): declared\n"
    "router weight: on each expert's output\n"
    "inputs: seeded N(0, 1) hidden states, and the same scaled: times 8, median 16; the larger error of the two "
    "halves\n"
    "experts at ep 2, linear placement: rank 0: 0..3; rank 1: 4..7\n"
)
QUANT_TEXT = (
    "M (qwen3_moe, gptq_int4, group 64, act_order=False, float32)\n"
    "layer  tp  I_pp -> padded  rel error      tol  kernel ms   load ms  indep kernel  result | kernel | reference\n"
    "    0   2        32 -> 64   2.00e-03    2e-02       1.50       2.2    yes    yes  ok | aten::op (c) | ref\n"
    "    0   4        16 -> 16   3.00e-03    2e-02       0.50       0.0    yes     no  unchecked: no kernel ran | "
    "no kernel | ref\n"
    "inputs: seeded N(0, 1) hidden states, and the same scaled: times 4, median 16; the larger error of the two "
    "halves\n"
    "refused: layer 0 tp=3: no\n"
    "unchecked: 1 of 2\n"
)


def _out(fn: Callable[..., Any], *args: Any, **kw: Any) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(*args, **kw)
    return buf.getvalue()


def test_each_route_writes_only_its_own_fields_in_its_order() -> None:
    for rows, quantized, keys in ((DENSE, False, DENSE_KEYS), (QUANT, True, QUANT_KEYS)):
        doc = json.loads(_out(write_json, {"model": "M"}, rows, ["r"], {"layers": []}, quantized=quantized))
        assert list(doc) == ["model", "rows", "refused", "unchecked", "layers"]
        assert [list(r) for r in doc["rows"]] == [keys, keys]
        assert doc["unchecked"] == [f"layer {rows[1].layer} tp={rows[1].tp_size}: {rows[1].result}"]
    assert doc["rows"][1]["kernel_ran"] is False
    dense = json.loads(_out(write_json, {}, DENSE[:1], [], {}, quantized=False))["rows"][0]
    assert dense["scale_ratio"] is None and dense["experts_by_rank"] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_one_printer_writes_both_routes_tables() -> None:
    assert _out(print_text, "M (qwen3_moe, float32) · contract C", DENSE, [], [], quantized=False) == DENSE_TEXT
    title = "M (qwen3_moe, gptq_int4, group 64, act_order=False, float32)"
    assert _out(print_text, title, QUANT, ["layer 0 tp=3: no"], ["unchecked: 1 of 2"], quantized=True) == QUANT_TEXT


def test_result_words_are_both_routes_words() -> None:
    assert result_words(True, True, "x") == "ok"
    assert result_words(False, True, "x") == "MISMATCH"
    assert result_words(True, False, "why") == "unchecked: why"
    assert result_words(False, False, "why") == "MISMATCH (unchecked: why)"
