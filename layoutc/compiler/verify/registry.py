"""The properties `layoutc verify` proves, in the order they are run and reported.

One entry per property: its id (the JSON `properties[].id`), its one-line doc, its module
under layoutc/compiler/verify/properties/ (whose `check(run, earlier)` decides it; the
module, and so z3, is imported only when the property is run, so that a fully cached
verification never imports the solver) and whether it runs while the run's shared solver
holds the contract's admitted set (`Run.holding`; its queries all entail it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from layoutc.compiler.verify.run import Run
    from layoutc.compiler.verify.verdicts import Verdict

Check = Callable[["Run", Mapping[str, "Verdict"]], "Verdict"]


@dataclass(frozen=True)
class Property:
    id: str
    doc: str
    module: str  # layoutc.compiler.verify.properties.<module>
    holds_admitted: bool = False

    def check(self) -> Check:
        """The property's `check(run, earlier) -> Verdict` (`earlier`: the verdicts so far)."""
        module = importlib.import_module(f"layoutc.compiler.verify.properties.{self.module}")
        function: Check = module.check
        return function


PROPERTIES: tuple[Property, ...] = (
    Property("vacuity", "the contract admits at least one configuration", "vacuity"),
    Property("alignment", "every kernel divisibility rule holds on the padded sizes", "alignment", True),
    Property("placement", "the kernel finds every logical element at its own role and index", "placement", True),
    Property("roundtrip", "pad is injective into the padded tensor and unpad inverts it", "roundtrip", True),
    Property("inertness", "every padded lane adds exactly 0 to the layer output", "inertness", True),
    Property("groups", "groups and packed elements stay whole and never straddle the pad boundary", "groups", True),
    Property("kernel-arguments", "pad counts passed to the kernel describe padding that really exists",
             "kernel_arguments", True),
    Property("coverage", "over all ranks, every element of the full checkpoint is read by exactly one rank",
             "coverage", True),
    Property("expert-coverage", "under expert parallelism every expert is on its rank, once, below the experts "
             "axis, and every pair a rank's kernel computes is a routed, local pair", "experts", True),
    Property("admission", "no admitted configuration breaks a kernel rule or a layout assumption", "admission"),
    Property("waste", "worst-case pad fraction over the domain (informational)", "waste"),
)
PROPERTY_IDS = tuple(p.id for p in PROPERTIES)
