"""The errors of a checkpoint format or its files, and of a model config (a leaf, so the
header reader, the bounded JSON reader, the formats and the audit's config reader
(layoutc.tools.hfconfig, which re-exports ModelConfigError) can all raise them)."""

from __future__ import annotations


class FormatError(Exception):
    """config.json names no declared format, or a declared format is malformed."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"error[{code}]: {message}")
        self.code = code


class ModelConfigError(ValueError):
    """A model config could not be read or does not describe an MoE model.

    Attributes:
        source: the file (or ``"<dict>"``, or the bundled name) the error is about.
        field: what was being read, e.g. ``"num_experts"``; ``None`` for
            file-level errors (unreadable file, bad JSON, unknown name).
        aliases: every field name that was tried for ``field``, in order.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str,
        field: str | None = None,
        aliases: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.source = source
        self.field = field
        self.aliases = aliases
