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
