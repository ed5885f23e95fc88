"""Reading a contract: the file's bytes (bounded), its text, its AST and its checked IR.

``load(path)`` reads the file once and returns ``(contract | None, diagnostics, text | None)``;
a caller that already holds the bytes (``load_bytes``) or the text (``load(path, text)``)
passes them in, and the file is not read again. Bad input, an unreadable or oversized
file included, is a located diagnostic, never an exception.
"""

from __future__ import annotations

from layoutc.compiler import ir
from layoutc.compiler.check import check
from layoutc.compiler.diagnostics import Diagnostic, Span, error
from layoutc.compiler.parse import MAX_BYTES, parse
from layoutc.compiler.safeio import ReadError, contract_text, read_bounded

__all__ = ["Loaded", "decode", "load", "load_bytes", "read_text"]

Loaded = tuple[ir.Contract | None, list[Diagnostic], str | None]  # (contract, diagnostics, text)


def read_text(path: str) -> tuple[str | None, list[Diagnostic]]:
    """The text of the contract file `path`, or None with the reason (LC100, LC105).

    The read is bounded (MAX_BYTES) and non-blocking: FIFOs, devices and /proc files are
    refused (safeio, issue 16). The text is `decode`d."""
    try:
        raw = read_bounded(path, MAX_BYTES)
    except ReadError as exc:
        if exc.too_large:
            return None, [error("LC105", Span(path, 1, 1, 1, 1), f"contract file is larger than {MAX_BYTES} bytes")]
        return None, [error("LC100", Span(path, 1, 1, 1, 1), f"cannot read contract: {exc.reason}")]
    return decode(path, raw)


def decode(path: str, raw: bytes) -> tuple[str | None, list[Diagnostic]]:
    """`raw` as UTF-8 text without a byte-order mark and with LF line endings (safeio.contract_text),
    or None with the first bad byte located (LC100)."""
    try:
        text = contract_text(raw)
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        return None, [error("LC100", Span(path, line, column, line, column + 1),
                            f"contract is not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}")]
    return text, []


def load_bytes(path: str, raw: bytes) -> Loaded:
    """Parse and check a contract whose bytes the caller already read from `path`."""
    text, diags = decode(path, raw)
    return (None, diags, None) if text is None else load(path, text)


def load(path: str, text: str | None = None) -> Loaded:
    """Read (unless `text` is given), parse and check one contract file.

    Args:
        path: the file; diagnostics point into it.
        text: its contents, when the caller already has them (used as given: no
            byte-order mark is removed).

    Returns:
        (contract, diagnostics, text): contract is None when a diagnostic is an error;
        text is None when the file could not be read or decoded.
    """
    if text is None:
        text, diags = read_text(path)
        if text is None:
            return None, diags, None
    module, diags = parse(text, path)
    if module is None:
        return None, diags, text
    contract, more = check(module, text)
    return contract, diags + more, text
