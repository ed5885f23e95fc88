"""Files `layoutc run` writes (`--write-format`): the target checked with the other options,
before anything is loaded, and written atomically after the report.

`check_target(path, option)` refuses, without opening it (so a FIFO never blocks), a target
that exists and is not a regular file (a FIFO, a directory, a device such as /dev/full, a
socket, a dangling or looping symlink) and a folder that is missing or not writable.
`write_atomic(path, text, option)` writes a temporary file beside the target, flushes it to
disk and renames it over the target (`os.replace`), with the mode a newly created file gets
under the umask (or the mode of the file it replaces); on any error the temporary file is
removed and the target is untouched. Both raise RunError LR104 naming the option and path.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

from layoutc.tools.runplan import RunError

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _shown(path: str) -> str:
    return path if len(path) <= 200 else path[:160] + f"... ({len(path)} characters)"


def check_target(path: str, option: str) -> None:
    """RunError LR104 unless `path` can be written as a regular file (see the module docstring);
    nothing is opened or created."""
    where = f"{option} {_shown(path)}"
    if not path or "\0" in path:
        raise RunError("LR104", f"{option} {path!r}: not a file name")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
        if os.path.islink(path):
            raise RunError("LR104", f"{where}: is a symlink to nothing; --write-format writes a regular file") from None
    except OSError as exc:  # a symlink loop (ELOOP), a name too long, a component that is a file
        raise RunError("LR104", f"{where}: cannot write: {exc.strerror or exc}") from None
    if info is not None:
        for test, kind in _KINDS:
            if test(info.st_mode):
                raise RunError("LR104", f"{where}: is {kind}; it writes a regular file (nothing was loaded)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise RunError("LR104", f"{where}: its folder {_shown(folder)} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RunError("LR104", f"{where}: its folder {_shown(folder)} is not writable")


def _mode(path: str) -> int:
    """The mode the written file gets: the replaced file's, else 0o666 under the umask."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(os.stat(path).st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: str, text: str, option: str) -> None:
    """Write `text` (UTF-8) to `path` atomically; RunError LR104 on any failure, with the target
    unchanged and no temporary file left."""
    check_target(path, option)  # again: the target may have changed during the run
    real = os.path.realpath(path)  # a symlink to a regular file: replace the file it names
    folder = os.path.dirname(real)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".layoutc-", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _mode(real))
        os.replace(tmp, real)
        tmp = None
    except OSError as exc:
        raise RunError("LR104", f"{option} {_shown(path)}: cannot write: {exc.strerror or exc} (nothing "
                       "was written)") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
