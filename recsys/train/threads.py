"""torch's own intra-op threads, set for a block of work and restored after."""

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's own threads set to `threads` for the block and restored after (None: left as they are).

    On cores that other work contends for, torch's OpenMP workers wait on each other at the end of
    every parallel operation, for as long as another process holds one of them: the autograd
    engine's small steps ran ten times slower on two threads than on one beside a search's parallel
    fits, and a compiled u1 run several times slower beside two busy processes.
    """
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class NumbaThreads:
    """numba's threads set to `threads` (at most what numba started with) for an engine's run, and
    given back by `restore`: the caller's, not the engine's, afterwards."""

    def __init__(self, threads: int) -> None:
        import numba  # imported only by runs that use it

        self._numba = numba
        self.before = numba.get_num_threads()
        numba.set_num_threads(min(threads, getattr(numba.config, "NUMBA_NUM_THREADS")))  # noqa: B009

    def restore(self) -> None:
        self._numba.set_num_threads(self.before)
