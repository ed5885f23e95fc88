"""How much memory a runner's rank took: the process's resident set (Linux /proc/self/status
VmRSS, and its peak VmHWM, reset through /proc/self/clear_refs), and glibc's malloc_trim so a
rank's peak is measured from what the previous rank left. Standard library only; on another
system the reads give 0 and the reset False (the peak is then not measured).

Used by every runner's rank loop (layoutc.tools.run.kernel_sum, layoutc.tools.ep_run).
"""

from __future__ import annotations

import contextlib

#: the largest VmHWM (KiB) seen before a reset since `peak_mark()`: the rows reset the peak per
#: rank, so a layer's peak is the largest of the peaks between those resets
_PEAK_KIB = [0]


def peak_mark() -> None:
    """Start a new span for `peak_kib` (and reset the kernel's peak)."""
    rss_peak_reset()
    _PEAK_KIB[0] = 0


def peak_kib() -> int:
    """This process's peak RSS (KiB) since `peak_mark()`, over every reset in between; 0 where
    /proc cannot be read."""
    return max(_PEAK_KIB[0], status_kib("VmHWM"))


def rss_peak_reset() -> bool:
    """Reset this process's peak RSS (Linux: /proc/self/clear_refs 5), first keeping it for
    `peak_kib`."""
    _PEAK_KIB[0] = max(_PEAK_KIB[0], status_kib("VmHWM"))
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def status_kib(key: str) -> int:
    """`key`'s value in /proc/self/status (kB: "VmRSS", "VmHWM"); 0 where it cannot be read."""
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def trim() -> None:
    """Give freed heap memory back to the OS (glibc), so the next peak is measured from here."""
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
