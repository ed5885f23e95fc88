"""Where the glue modules are: `layoutc/runtime/glue/*.py` but `_*` (standard library only).

`glues.registry` reads each one's `INTERFACE` as text; the verdict cache's key hashes them
(`verify/entries.py`). One listing for both, in a module that imports nothing, so a fully
cached `layoutc verify` does not pay for importing the interface dataclasses.
"""

from __future__ import annotations

import os
from pathlib import Path

GLUE_DIR = Path(__file__).resolve().parent.parent / "runtime" / "glue"


def interface_files() -> list[Path]:
    """The glue modules whose INTERFACE the checker reads, sorted by name."""
    return sorted(GLUE_DIR / name for name in os.listdir(GLUE_DIR) if name.endswith(".py") and not name.startswith("_"))
