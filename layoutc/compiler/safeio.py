"""Bounded, non-blocking reads of input files (contracts, model configs, generated modules).

Every file layoutc reads goes through :func:`read_bounded`, so no input can make it
hang or read without limit:

* the file is opened with ``O_NONBLOCK``, so opening a FIFO with no writer returns at
  once instead of waiting for one, and reading a file that would block (``/proc/kmsg``)
  fails with EAGAIN instead of waiting for data;
* anything but a regular file (FIFO, character or block device such as ``/dev/zero``,
  socket) is refused after ``fstat``, before any byte is read;
* the size ``fstat`` reports is checked against the cap before reading, and the read
  itself stops at ``max_bytes + 1`` bytes (``/proc`` files report size 0).

Standard library only. Source: issue 16 item 4 (the outside hostile-input run).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable

__all__ = ["ReadError", "UsageError", "contract_paths", "contract_text", "read_bounded"]


class ReadError(OSError):
    """A file could not be read within the limits.

    Attributes:
        path: the path as given.
        reason: a short phrase for a diagnostic, e.g. ``"no such file"``.
        too_large: the file exceeds the cap (its content is a finding, not an I/O failure).
    """

    def __init__(self, path: str, reason: str, *, too_large: bool = False) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.too_large = too_large


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bounded(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """Read a whole regular file of at most ``max_bytes`` bytes, without blocking.

    Args:
        path: the file.
        max_bytes: the cap in bytes (>= 0).

    Returns:
        The file's bytes (at most ``max_bytes``).

    Raises:
        ReadError: the file is missing, not a regular file, unreadable, would block,
            or larger than ``max_bytes`` (``too_large``). Never blocks on a FIFO,
            a device or a ``/proc`` file that has no data.
    """
    name = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags)
    except FileNotFoundError:
        raise ReadError(name, "no such file") from None
    except IsADirectoryError:
        raise ReadError(name, "is a directory") from None
    except OSError as exc:
        raise ReadError(name, exc.strerror or type(exc).__name__) from None
    except ValueError:  # an embedded NUL in the path
        raise ReadError(name, "the path contains a NUL character") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ReadError(name, f"not a regular file ({_kind(info.st_mode)})")
        if info.st_size > max_bytes:
            raise ReadError(name, f"larger than {max_bytes} bytes ({info.st_size} bytes)", too_large=True)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            try:
                chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            except BlockingIOError:
                raise ReadError(name, "reading would block (a special file with no data)") from None
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise ReadError(name, exc.strerror or type(exc).__name__) from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise ReadError(name, f"larger than {max_bytes} bytes", too_large=True)
        return b"".join(chunks)
    finally:
        os.close(fd)


def contract_text(raw: bytes) -> str:
    """A contract file's bytes as its text: UTF-8, a leading byte-order mark dropped, and
    every line ending (CR LF, a lone CR as old Mac files have) made LF, so that a `#`
    comment ends at the end of its line and lines and columns count as an editor shows them
    (`str.splitlines` agrees). Raises UnicodeDecodeError."""
    text = raw.decode("utf-8").removeprefix("\ufeff")
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


class UsageError(ValueError):
    """A command-line argument names nothing usable (the CLI exits 2)."""


def contract_paths(paths: Iterable[str]) -> list[str]:
    """Expand directories into their ``*.moe`` files (sorted); keep files as given.

    Raises:
        UsageError: a directory holds no contracts (a mistyped path must not pass CI).
    """
    from pathlib import Path

    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(str(Path(p) / f) for f in os.listdir(p) if f.endswith(".moe"))
            if not found:
                raise UsageError(f"layoutc: error[LC801]: no *.moe contracts in directory {p}")
            out.extend(found)
        else:
            out.append(p)
    return out
