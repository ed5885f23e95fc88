"""How much memory a runner's rank took: the process's resident set (Linux /proc/self/status
VmRSS, and its peak VmHWM, reset through /proc/self/clear_refs), and glibc's malloc_trim so a
rank's peak is measured from what the previous rank left. Standard library only; on another
system the reads give 0 and the reset False (the peak is then not measured).

Used by the one rank loop (layoutc.tools.rankloop.run_ranks) and the per-layer figures of run.py and quant_run.
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


#: glibc's mallopt parameter number of the mmap threshold (malloc.h M_MMAP_THRESHOLD)
_M_MMAP_THRESHOLD = -3
#: Allocations of at least this many bytes get a mapping of their own, unmapped when freed
HEAP_MMAP_BYTES = 4 << 20


def bound_heap() -> bool:
    """Fix glibc's mmap threshold at HEAP_MMAP_BYTES for the rest of the process (mallopt
    M_MMAP_THRESHOLD), so every block of that size or more is unmapped when freed. glibc's default
    threshold rises to the size of the largest block freed so far (up to 32 MiB), after which
    blocks of a few MiB (an expert's dequantized weight, its unpacked int64 codes) come from the
    heap, whose freed middle stays resident: on the int4 checkpoint of issue 44 the reference build
    peaked 2.3 GB higher for it. The price is a page fault per 4 KiB of every such block. False
    where there is no glibc (nothing changes)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, HEAP_MMAP_BYTES))
    except (OSError, AttributeError):
        return False

