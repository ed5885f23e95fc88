"""`layoutc explain` draws the layout its configuration selects: an axis's `when` alternative
(vllm_cpu_grouped_gemm's w13.n is interleaved (gate, up) pairs for swigluoai, halves otherwise),
the glue's view of it, and a `when`-chosen `pack N order (...)`. The oracle for the layout is
the compiled module's `_<tensor>_axes(plan)`, rendered from the contract by
layoutc/compiler/emit (not by the picture code). Before the fix explain drew every axis's
default: swigluoai's w13 as per-half padded [gate | up], which the loader never stores.
"""

from __future__ import annotations

import pytest

from layoutc.cli import main

GEMM = ["explain", "contracts/vllm_cpu_grouped_gemm.moe", "--set", "num_experts=8", "--set", "hidden_size=256",
        "--set", "intermediate_size=200", "--set", "tp_size=2", "--set", "dtype=float32", "--set", "isa=vec"]
SWIGLUOAI = ["--set", "activation=swigluoai", "--set", "swiglu_alpha_milli=1702", "--set", "swiglu_limit_milli=7000"]


def _section(out: str, head: str) -> list[str]:
    """The picture of one axis: its head line (starting `head`) and its indented lines."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    body = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        body.append(line)
    return body


@pytest.mark.parametrize(("activation", "layout"), [(SWIGLUOAI, "interleave"), (["--set", "activation=silu"], "halves")])
def test_explain_draws_the_when_alternative_the_module_stores(in_root, capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
                                                              activation: list[str], layout: str) -> None:
    from generated import vllm_cpu_grouped_gemm as module

    config = {"num_experts": 8, "hidden_size": 256, "intermediate_size": 200, "tp_size": 2, "dtype": "float32",
              "isa": "vec", **{a.split("=")[0]: a.split("=")[1] for a in activation[1::2]}}
    config = {k: int(v) if isinstance(v, str) and v.isdigit() else v for k, v in config.items()}
    n = next(a for a in module._w13_axes(module.plan(**config)) if a.name == "n")
    assert n.layout == layout and (n.logical, n.padded) == (100, 128)  # the oracle: the compiled module
    assert main([*GEMM, *activation]) == 0
    picture = _section(capsys.readouterr().out, "w13.n: ")
    assert picture[0].startswith(f"w13.n: {layout}(gate | up), 100 -> 128 values per segment, 256 in all"), picture
    if layout == "interleave":  # pairs (gate[i], up[i]) at (2i, 2i + 1), then whole pad pairs
        assert picture[1:] == ["  0..199 gate/up pairs [0..99]", "  200..255 fill 0",
                               "  0..255 kernel: pairs (gate, up) at (2i, 2i+1)"], picture
    else:  # the glue's view: the kernel reads [gate | up] halves of the padded axis
        assert picture[1:] == ["  0..99 gate[0..99]", "  100..127 fill 0", "  128..227 up[0..99]", "  228..255 fill 0",
                               "  0..127 kernel: gate[0..127]", "  128..255 kernel: up[0..127]"], picture


def test_explain_draws_a_when_chosen_pack_order(in_root, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    awq = (in_root / "contracts" / "marlin_moe_awq.moe").read_text()
    line = ("  axis n = halves(gate | up, intermediate_size_per_partition -> intermediate_size_per_partition_padded)"
            " pack 8 order (0, 2, 4, 6, 1, 3, 5, 7)\n")
    assert awq.count(line) == 1
    path = tmp_path / "awq_when.moe"  # AWQ's order only when channelwise, the identity otherwise
    path.write_text(awq.replace(line, line.replace("\n", " when group_size == -1\n") +
                                line.replace("order (0, 2, 4, 6, 1, 3, 5, 7)", "order (0, 1, 2, 3, 4, 5, 6, 7)")))
    base = ["explain", str(path), "--set", "num_experts=2", "--set", "hidden_size=256", "--set", "intermediate_size=192",
            "--set", "tp_size=2", "--set", "activation=silu", "--set", "dtype=float16"]
    for group, shown in (("-1", True), ("32", False)):
        assert main([*base, "--set", f"group_size={group}"]) == 0
        head = _section(capsys.readouterr().out, "w13_qweight.n: ")[0]
        assert ("(slot i holds value (0, 2, 4, 6, 1, 3, 5, 7)[i])" in head) == shown, (group, head)
