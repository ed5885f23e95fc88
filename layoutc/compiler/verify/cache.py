"""A small persistent store: key -> JSON-able value, one file per entry, written atomically.

The caller computes the key (a hex digest of everything the value depends on); the
store adds layoutc's version and checks both on every read. An entry is one JSON file,
`<key>.json`, written through a temporary file in the same directory and `os.replace`
(a reader sees the old entry or the new one, never half of one), holding the payload
(format, version, key, value) as a string and the SHA-256 of that string. An entry whose
checksum, format, version or key is wrong, or that is not JSON at all, reads as absent
(and is overwritten by the next `put`), never trusted. Entries are read with
the reader the caller gives (the driver: `safeio.read_bounded`, at most MAX_ENTRY_BYTES,
regular files only, never blocking): an entry that is a FIFO, a device or a symlink to one
is a miss. A directory that cannot be read
or written is skipped silently: the store only ever saves time.

Standard library only; it knows nothing of what it stores (the verifier's driver,
layoutc/compiler/verify/driver.py, keys and encodes its verdicts itself).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from layoutc import __version__

FORMAT = 2
MAX_ENTRY_BYTES = 64 << 20  # a larger entry is not one this module wrote
_KEY = re.compile(r"[0-9a-f]{16,128}")


def default_dir(namespace: str) -> Path:
    """Where entries of `namespace` live: `$LAYOUTC_CACHE_DIR` itself where it is set, else
    `$XDG_CACHE_HOME/layoutc/<namespace>`, else `~/.cache/layoutc/<namespace>` (not created here)."""
    explicit = os.environ.get("LAYOUTC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "layoutc" / namespace


class Cache:
    """Entries in one directory, each valid for one layoutc `version` only.

    `read(path, max_bytes)` reads an entry's bytes and raises OSError for anything but a
    regular file of at most `max_bytes` without blocking: the driver passes
    `layoutc.compiler.safeio.read_bounded`, so an entry that is a FIFO or a symlink to
    /dev/zero is a miss, not a hang or a read without limit.

    Raises ValueError for a key that is not a lower-case hex digest (16 to 128 digits:
    a key names a file); never raises for anything found on disk.
    """

    def __init__(self, directory: Path, *, read: Callable[[Path, int], bytes], version: str = __version__) -> None:
        self.directory = directory
        self.read = read
        self.version = version

    def _path(self, key: str) -> Path:
        if not _KEY.fullmatch(key):
            raise ValueError(f"cache key must be a hex digest, not {key[:40]!r}")
        return self.directory / f"{key}.json"

    def get(self, key: str) -> Any:
        """The value stored under `key`, or None (absent, unreadable, damaged, or written by
        another version or format)."""
        path = self._path(key)
        try:
            # bounded and regular files only: a FIFO, a device or a symlink to /dev/zero planted
            # as an entry is a miss, never a hang or a read without limit
            outer = json.loads(self.read(path, MAX_ENTRY_BYTES).decode("utf-8"))
            payload = outer["payload"]
            if hashlib.sha256(payload.encode()).hexdigest() != outer["sha256"]:
                return None
            doc = json.loads(payload)
            if doc["format"] != FORMAT or doc["version"] != self.version or doc["key"] != key:
                return None
            return doc["value"]
        except Exception:  # any damage at all (bad JSON, deep nesting, wrong types): not trusted
            return None

    def put(self, key: str, value: Any) -> None:
        """Store `value` (JSON-able) under `key`, atomically; skipped on any OS error."""
        path = self._path(key)
        payload = json.dumps({"format": FORMAT, "version": self.version, "key": key, "value": value},
                             sort_keys=True)
        text = json.dumps({"payload": payload, "sha256": hashlib.sha256(payload.encode()).hexdigest()})
        import tempfile  # here: a cached run never writes, and tempfile imports random

        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=self.directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(text)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            return
