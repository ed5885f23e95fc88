"""The proposer (layoutc.tools.checkpoints.propose) on real `save_pretrained` checkpoints of
OLMoE (per-expert) and GraniteMoE (fused input_linear / output_linear), built locally with
transformers' own classes at tiny sizes (tests/support/family_models.py). Where the hidden size
equals the intermediate size (or twice it, for a fused gate/up tensor) the shapes cannot
tell the orientation: the proposal lists both and says so, `layoutc run` proves the right one
against transformers' own block, and without transformers it refuses AMBIGUOUS (LR118)
instead of guessing."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from layoutc.cli import main
from layoutc.tools.checkpoints.propose import propose, undecided

pytestmark = pytest.mark.transformers
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

# (family, hidden, intermediate): 64/48 decidable; 64/64 (H == I) and, fused, 64/32 (H == 2I) not
CASES = [("olmoe", 64, 48), ("olmoe", 64, 64), ("granitemoe", 64, 48), ("granitemoe", 64, 32),
         ("granitemoe", 64, 64)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int, int], Path]:
    from tests.support.family_models import make

    out = {}
    for family, h, i in CASES:
        folder = tmp_path_factory.mktemp(f"{family}-{h}-{i}")
        make(str(folder), family, hidden_size=h, intermediate_size=i, moe_intermediate_size=i)
        out[family, h, i] = folder
    return out


def _proposal(folder: Path) -> tuple[list[Any], str]:
    from safetensors import safe_open

    config = json.loads((folder / "config.json").read_text())
    shapes = {}
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
            shapes[name] = tuple(f.get_slice(name).get_shape())
    return propose(config, shapes)


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["run", *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("case", CASES, ids=[f"{f}-{h}-{i}" for f, h, i in CASES])
def test_proposal_names_the_real_tensors_and_what_shapes_leave_open(
        checkpoints: dict[tuple[str, int, int], Path], case: tuple[str, int, int]) -> None:
    family, h, i = case
    found, why = _proposal(checkpoints[case])
    assert found, why
    first = found[0]
    assert first.fused == (family == "granitemoe")
    assert first.transposed is False and first.down_transposed is False  # save_pretrained's [out, in]
    open_facts = undecided(found)
    ambiguous_up = first.fused and h == 2 * i
    ambiguous_down = h == i
    assert any(w.startswith("orientation of gate/up") for w in open_facts) == (ambiguous_up or (not first.fused
                                                                                                and h == i))
    assert any(w.startswith("orientation of down") for w in open_facts) == ambiguous_down
    if not (ambiguous_up or ambiguous_down):
        assert all(not c.transposed and not c.down_transposed for c in found)


@pytest.mark.kernel  # the run then calls the contract's real kernel
@pytest.mark.parametrize("case", [("olmoe", 64, 64), ("granitemoe", 64, 32)], ids=["olmoe-H=I", "granite-H=2I"])
def test_run_proves_the_right_orientation_against_transformers(
        checkpoints: dict[tuple[str, int, int], Path], case: tuple[str, int, int]) -> None:
    code, out, err = _run(str(checkpoints[case]), "--tp", "1,2", "--layers", "1")
    assert code == 0, err + out
    assert "proved on layer 0" in err and "transposed=False" in err


@pytest.mark.parametrize("case, want", [(("olmoe", 64, 64), "LR118"), (("granitemoe", 64, 32), "LR118"),
                                        (("olmoe", 64, 48), "LR117")], ids=["olmoe-H=I", "granite-H=2I", "olmoe"])
def test_without_transformers_an_undecidable_orientation_is_ambiguous(
        checkpoints: dict[tuple[str, int, int], Path], case: tuple[str, int, int], want: str) -> None:
    code, _out, err = _run(str(checkpoints[case]), "--tp", "1", "--layers", "1", "--no-transformers")
    assert code == 2 and f"error[{want}]" in err, err
    assert ("AMBIGUOUS" in err) == (want == "LR118")
