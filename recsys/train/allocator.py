"""glibc's malloc told to keep the memory a run frees, for the run to reuse.

By default glibc hands a freed block of more than 128 KB back to the system and the next allocation
of that size faults its pages in again, until its first free of a larger block raises that
threshold by itself. torch's and numpy's buffers of a few hundred KB (a chunk of looked-up rows,
a copy of the ratings) paid those faults on every call at first (docs/performance.md). The
thresholds set here are the ones glibc itself would reach after a 32 MB free.
"""

import ctypes
import os
from functools import cache

# glibc's ceiling for the mmap threshold it raises by itself (on 64-bit), and the trim threshold it
# pairs with it; mallopt's parameter numbers for both (malloc.h).
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


@cache
def keep_freed_memory() -> bool:
    """Raise this process's glibc mmap and trim thresholds (once); False where the C library is not
    glibc or refuses, and then nothing changed."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        mallopt = ctypes.CDLL(None).mallopt
    except (ValueError, OSError, AttributeError):  # no such confstr name, or no mallopt: not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
