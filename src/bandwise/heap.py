"""Keep freed heap memory in the process, for the planner's array churn.

The cost model prices candidates in blocks of a few hundred numpy temporaries each, allocated and
freed thousands of times. glibc's malloc returns the top of its heap to the kernel once more than
M_TRIM_THRESHOLD is free, and serves blocks above M_MMAP_THRESHOLD with fresh mappings; both
thresholds move with the sizes it has seen (mallopt(3), "Dynamic mmap threshold"). Each return
comes back as zero-filled pages, one fault per page: the DeepSeek-V3 × 2048 plan took 200,000 page
faults and 0.45 s of system time (of 2.7 s) with the defaults, 40,000 and 0.1 s with the thresholds
fixed at 32 MiB and 256 MiB, at the same peak RSS (181 MB; benchmarks/RESULTS.md, "The cost
model's structure"). Elsewhere (not glibc) this does nothing.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""mallopt's parameter numbers (glibc's malloc.h)."""
MMAP_THRESHOLD = 32 << 20
"""Blocks above this are mapped afresh: glibc's own ceiling for the dynamic threshold on 64-bit."""
TRIM_THRESHOLD = 256 << 20
"""Free memory at the top of the heap kept before it goes back to the kernel."""


def keep_freed_memory() -> bool:
    """Fix glibc's thresholds for the rest of the process; True where they were set."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
