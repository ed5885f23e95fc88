"""Publish a generated package as one unit: stage every file in a sibling directory, then swap.

`layoutc compile` renders every module in memory, then :func:`publish` writes the whole
package (modules, `_runtime/`, `__init__.py`) into a new directory next to the output
directory (`.<name>.layoutc-stage-*`, same file system) and swaps it in at the end:

* on Linux with ``renameat2(RENAME_EXCHANGE)`` (glibc 2.28, Linux 3.15; ext4, xfs, btrfs,
  tmpfs) the two directories trade places in one atomic step: an importer sees the whole
  old package or the whole new one, never a mix, and a kill at any moment leaves one of
  them whole at the output path;
* elsewhere (or on a file system that refuses the exchange) two renames, old out of the
  way and new in, with the old one put back if the second fails; a kill between the two
  leaves no output directory for that instant (the old one stays in the sibling).

A compile that fails while writing (a full disk, an exception, an interrupt) removes its
stage and leaves the output directory as it was. Files are created with mode ``0o666``
and directories with ``0o777``, both less the umask (as any other tool's output); an
existing output directory keeps its own mode. Entries of the old directory that compile
does not write (a README, a stale module of a removed contract, a sub-folder) are carried
into the new one (hard links where the file system allows, else copies); `__pycache__`
and temporaries are not. A stage a killed compile left behind is removed by the next
compile into the same place once it is 10 minutes old. The stage needs write permission in the output
directory's parent (OSError otherwise, before the output directory is touched). An output directory
that is a mount point (`/`, a container's volume) cannot be renamed: it is refused (EBUSY) before
anything is staged or carried (it used to copy the whole volume into the parent first, then fail).
An output directory that is or holds the current directory (`--out .`) is refused the same way (the
swap left the shell in a deleted directory, and re-linked every file under it).
A FIFO, socket or device among the old entries is hard-linked into the new directory (never read);
where it cannot be, the compile fails and writes nothing (it used to be dropped silently).

Standard library only. Source: issue 40 (a full disk left 27 `_runtime` files, 2 modules
and no `__init__.py`; every module had mode 0600).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import sys
import tempfile
import time

STAGE = ".layoutc-stage-"
STALE_S = 600.0


def write_file(path: str, text: str) -> None:
    """Create `path` (it must not exist: a fresh stage) holding `text` (UTF-8, LF), fsynced.

    Mode ``0o666`` less the umask. Raises OSError (ENOSPC, EDQUOT, ...)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def publish(files: dict[str, str], out_dir: str) -> None:
    """Make `out_dir` hold exactly `files` (relative path -> text) plus the old directory's
    entries compile does not write, all at once (see the module docstring).

    Raises OSError: `out_dir` is not a directory, or a write, link or rename failed; the
    output directory is then as it was, and no stage is left behind."""
    target = os.path.realpath(out_dir)  # a symlinked output directory: swap its target
    if os.path.lexists(target) and not os.path.isdir(target):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", out_dir)
    here = os.path.realpath(os.getcwd()) if os.path.isdir(target) else ""
    if here == target or here.startswith(target + os.sep):  # the swap would leave the shell in a deleted folder
        raise OSError(errno.EBUSY, "it is (or holds) the current directory, which the swap would replace with a "
                      "copy (every file under it re-linked); compile into a folder of its own", out_dir)
    if os.path.isdir(target) and os.path.ismount(target):  # '/', a volume: no rename can move it
        raise OSError(errno.EBUSY, "a mount point cannot be swapped whole; compile into a folder inside it",
                      out_dir)
    parent, name = os.path.split(target)
    made = _make_parents(parent)
    stage = ""
    try:
        _remove_stale_stages(parent, name)
        stage = tempfile.mkdtemp(prefix=f".{name}{STAGE}", dir=parent)
        exists = os.path.isdir(target)
        os.chmod(stage, stat.S_IMODE(os.stat(target).st_mode) if exists else 0o777 & ~_umask())
        for rel in sorted(files, key=lambda n: (n == "__init__.py", n)):
            path = os.path.join(stage, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_file(path, files[rel])
        while not os.path.isdir(target):
            try:
                os.rename(stage, target)
                return
            except OSError as exc:  # a concurrent compile made it first: swap with its package
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        _carry(target, stage, {rel.split("/")[0] for rel in files})
        if _exchange(stage, target):
            shutil.rmtree(stage, ignore_errors=True)  # the stage now holds the old package
        else:
            _replace(stage, target)
    except BaseException:
        if stage:
            shutil.rmtree(stage, ignore_errors=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise


def _make_parents(parent: str) -> list[str]:
    """Create the missing ancestors of the output directory; return them, outermost first."""
    missing: list[str] = []
    folder = parent
    while folder and not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for folder in reversed(missing):
        os.mkdir(folder)
    return list(reversed(missing))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _carry(old: str, new: str, written: set[str]) -> None:
    """Hard-link (or copy) into `new` the entries of `old` that compile does not write."""
    with os.scandir(old) as found:
        entries = [e for e in found if e.name not in written and e.name != "__pycache__"
                   and not e.name.startswith(".layoutc-")]
    for entry in entries:
        dst = os.path.join(new, entry.name)
        try:
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), dst)
            elif entry.is_dir():
                shutil.copytree(entry.path, dst, symlinks=True, copy_function=_link_or_copy,
                                ignore=shutil.ignore_patterns("__pycache__"))
            elif entry.is_file():
                _link_or_copy(entry.path, dst)
            else:  # a FIFO, a socket, a device: linked (never read), or the compile fails
                os.link(entry.path, dst)
        except FileNotFoundError:  # removed meanwhile (a concurrent compile swapped it out)
            continue


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _exchange(a: str, b: str) -> bool:
    """Swap directories `a` and `b` atomically (Linux renameat2 RENAME_EXCHANGE); False where
    the platform or the file system cannot (the caller then renames twice)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), b)


def _replace(stage: str, target: str) -> None:
    """Two renames: the old directory aside, the stage in; the old one back if that fails."""
    aside = f"{stage}-old"
    os.rename(target, aside)
    try:
        os.rename(stage, target)
    except BaseException:
        os.rename(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _remove_stale_stages(parent: str, name: str) -> None:
    """Stages (and set-aside old packages) a killed compile left next to the output directory,
    older than STALE_S so that a concurrent compile's live stage is kept."""
    now = time.time()
    with contextlib.suppress(OSError), os.scandir(parent) as found:
        for entry in found:
            if entry.name.startswith(f".{name}{STAGE}"):
                with contextlib.suppress(OSError):
                    if now - entry.stat(follow_symlinks=False).st_mtime > STALE_S:
                        shutil.rmtree(entry.path, ignore_errors=True)
