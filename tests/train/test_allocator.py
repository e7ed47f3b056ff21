"""recsys.train.allocator: after keep_freed_memory, glibc serves blocks under its threshold from the
heap (kept for reuse) and only larger ones from fresh mappings."""

import ctypes

import pytest

from recsys.train.allocator import MMAP_THRESHOLD, keep_freed_memory

_MALLINFO2_FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS.split()]


def _mapped_blocks_while_holding(libc: ctypes.CDLL, size: int) -> int:
    """How many more blocks glibc has mapped while one malloc of `size` bytes is held."""
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    assert block
    try:
        return int(libc.mallinfo2().hblks - before)
    finally:
        libc.free(block)


def test_blocks_under_the_threshold_come_from_the_heap() -> None:
    if not keep_freed_memory():
        pytest.skip("the C library is not glibc: nothing to set")
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("glibc older than 2.33 has no mallinfo2 to count mapped blocks with")
    libc.mallinfo2.restype = _Mallinfo2
    libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    assert _mapped_blocks_while_holding(libc, 1 << 20) == 0  # over glibc's default 128 KB
    assert _mapped_blocks_while_holding(libc, MMAP_THRESHOLD // 2) == 0
    assert _mapped_blocks_while_holding(libc, 2 * MMAP_THRESHOLD) == 1  # the count does see mappings
