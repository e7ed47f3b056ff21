"""torchrun: this process's place in the process group, and the group's lifetime around a run."""

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import distributed as dist

from recsys.errors import RecsysError


def distributed_rank() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) outside torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@contextmanager
def distributed_session(device: str) -> Iterator[tuple[int, str]]:
    """Within it, this process's rank and device, in the process group when started by torchrun.

    gloo on CPU, nccl on CUDA with one GPU per local rank; a plain `python` start is rank 0 alone.
    On the way out the ranks wait for each other and the group is destroyed: a rank that simply
    exits while another still works (rank 0 writing the run folder) tears its connections down under
    it, and torchrun then reports a failed run.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        yield 0, device
        return
    if device.startswith("cuda"):
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    try:
        yield torch.distributed.get_rank(), device
        torch.distributed.barrier()  # not after an error: the other ranks may never get here
    finally:
        torch.distributed.destroy_process_group()


def refuse_processes(instead: str = "under torchrun use `engine` autograd") -> None:
    """The compiled engine trains in one process: under torchrun, a one-line error saying what to do
    `instead`."""
    if distributed_rank()[1] > 1:
        raise RecsysError(f"`engine` compiled trains in one process; {instead}")
