"""`layoutc run`'s options, parsed once (issue 41 item 1): the command turns argparse's Namespace
into a frozen `RunOptions` and nothing below it sees the Namespace. The options are checked later,
before torch is imported (run.py `_check_options`: LR104-LR106); this record only holds them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class RunOptions:
    """The `layoutc run` command line (run.py `add_parser` documents each flag).

    tp / ep: the comma-separated degree text as given (`_tp_list` parses it); layers: the first N MoE
    layers, 0 for all; layer_range: "A:B" or None; tokens: tokens per forward; format: "text" or "json";
    contract: the generated module's name, None until the route is chosen; world: the rank count every
    tp x ep product must equal, None for none.
    """

    model_dir: str
    tp: str = "1,2,4"
    ep: str = "1"
    placement: str = "linear"
    world: int | None = None
    contract: str | None = None
    layers: int = 0
    layer_range: str | None = None
    tokens: int = 16
    format: str = "text"
    format_file: str | None = None
    write_format: str | None = None
    dtype: str | None = None
    isa: str = "vec"
    seed: int = 0
    threads: int = 0
    no_transformers: bool = False
    no_from_pretrained: bool = False

    @classmethod
    def from_namespace(cls, ns: Any) -> RunOptions:
        """The options of an argparse Namespace (or any object with those attributes); an attribute it
        lacks takes the flag's default. Raises TypeError when it has no `model_dir`."""
        values = {f.name: getattr(ns, f.name) for f in fields(cls) if hasattr(ns, f.name)}
        return cls(**values)
