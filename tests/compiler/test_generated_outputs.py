"""Every generated function behaves as the modules before issue 41's template rewrite did.

tests/cases/generated_outputs.json holds, per module, the sha256 of every public function's
outcomes over many cases (tests/support/generated_outputs.py: signatures, docstrings, LAYOUT, plan()
over its parameter domains, pad / unpad / shard / alloc / load of random bytes, the refusals),
recorded from the modules generated before the rewrite and checked equal to them call by call
(`python -m tests.support.generated_outputs --compare` against a copy of that generated/). A change
that alters any output, message or docstring changes a hash.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from tests.support.generated_outputs import RECORD, digests


@pytest.mark.slow
def test_every_module_gives_the_recorded_outputs() -> None:
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))
    now = digests("layoutc_generated", ROOT / "generated")
    assert sorted(now) == sorted(recorded)
    differ = [name for name in now if now[name] != recorded[name]]
    assert not differ, f"outputs changed: {differ}; `python -m tests.support.generated_outputs --compare` says which"
