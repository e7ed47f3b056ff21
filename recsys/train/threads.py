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
    given back by `restore`: the caller's, not the engine's, afterwards. torch's threads are left as
    they were."""

    def __init__(self, threads: int) -> None:
        import numba  # imported only by runs that use it

        self._numba = numba
        torch_before = torch.get_num_threads()
        self.before = numba.get_num_threads()
        numba.set_num_threads(min(threads, getattr(numba.config, "NUMBA_NUM_THREADS")))  # noqa: B009
        # numba's OpenMP pool, launched by a process's first of these calls, sets OpenMP's threads, and
        # so torch's, to all of numba's: a sampler's float64 sums in torch then split over the cores, and
        # the first run in a process differed from the next in the last bits (train loss, noise draws).
        torch.set_num_threads(torch_before)

    def restore(self) -> None:
        self._numba.set_num_threads(self.before)
