"""The error of a checkpoint format or its files (a leaf, so the header reader and the
formats can both raise it)."""

from __future__ import annotations


class FormatError(Exception):
    """config.json names no declared format, or a declared format is malformed."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"error[{code}]: {message}")
        self.code = code
