"""torchrun: this process's place in the process group, and the group's lifetime around a run."""

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn
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


def refuse_processes(
    instead: str = "run it without torchrun (a new run under torchrun may take `engine` autograd)",
) -> None:
    """The compiled engine trains in one process: under torchrun, a one-line error saying what to do
    `instead`."""
    if distributed_rank()[1] > 1:
        raise RecsysError(f"`engine` compiled trains in one process; {instead}")


def broadcast_parameters(model: nn.Module) -> None:
    """Every rank starts from rank 0's parameters (as DistributedDataParallel does at its start)."""
    with torch.no_grad():
        for parameter in model.parameters():
            dist.broadcast(parameter, 0)


def average_gradients(model: nn.Module, world_size: int) -> None:
    """Average each parameter's gradient over the ranks, in place: dense ones by all-reduce, sparse
    ones (an embedding's rows) gathered as dense index and value tensors. gloo's own sparse
    all-reduce, which DistributedDataParallel takes for sparse gradients, corrupted a rank's heap
    now and then (docs/distributed.md), so runs with sparse gradients sync here instead."""
    for parameter in model.parameters():
        if parameter.grad is None:  # unused on this rank: no rows, or zeros, as the others' kind
            empty = torch.zeros_like(parameter)
            parameter.grad = empty.to_sparse(1) if _sparse_table(model, parameter) else empty
        if parameter.grad.is_sparse:
            parameter.grad = _gathered_mean(parameter.grad, world_size)
        else:
            dist.all_reduce(parameter.grad)
            parameter.grad /= world_size


def _sparse_table(model: nn.Module, parameter: nn.Parameter) -> bool:
    """Whether `parameter` is an embedding table of `model` with sparse gradients."""
    return any(
        module.weight is parameter
        for module in model.modules()
        if isinstance(module, nn.Embedding) and module.sparse
    )


def _gathered_mean(gradient: Tensor, world_size: int) -> Tensor:
    """The mean over the ranks of a sparse gradient over a table's rows, each rank's rows padded to
    the most any rank has, since a gather takes tensors of one size."""
    local = gradient.coalesce()
    rows, values = local.indices()[0], local.values()
    counts = [torch.zeros(1, dtype=torch.int64, device=rows.device) for _ in range(world_size)]
    dist.all_gather(counts, torch.tensor([len(rows)], device=rows.device))
    found = [int(count) for count in counts]
    padded_rows = rows.new_zeros(max(found))
    padded_rows[: len(rows)] = rows
    padded_values = values.new_zeros((max(found), *values.shape[1:]))
    padded_values[: len(values)] = values
    gathered_rows = [torch.empty_like(padded_rows) for _ in range(world_size)]
    gathered_values = [torch.empty_like(padded_values) for _ in range(world_size)]
    dist.all_gather(gathered_rows, padded_rows)
    dist.all_gather(gathered_values, padded_values)
    all_rows = torch.cat([part[:count] for part, count in zip(gathered_rows, found, strict=True)])
    all_values = torch.cat([part[:count] for part, count in zip(gathered_values, found, strict=True)])
    return torch.sparse_coo_tensor(all_rows[None], all_values / world_size, gradient.shape).coalesce()


# Entries of a step in a rank's share: a multiple of any CPU's vector width, unrolled.
SHARE_ALIGNMENT = 64


@dataclass(frozen=True)
class StepShares:
    """The device engine under torchrun: each rank finds the gradients of its share of a step's
    ratings, and every rank then applies the whole step's, gathered, to its copy of the tables. The
    steps are one process's, as each rating's gradient reads only the rows as they were before the
    step."""

    rank: int
    world_size: int

    def _share(self, entries: int) -> int:
        """Entries a rank's share holds (the last ones' fewer): a multiple of SHARE_ALIGNMENT, so that
        torch's vectorised loops on the CPU meet each entry in the lanes one process would (a sigmoid
        in a loop's scalar tail rounds otherwise)."""
        share = -(-entries // self.world_size)
        return -(-share // SHARE_ALIGNMENT) * SHARE_ALIGNMENT

    def part(self, entries: int) -> slice:
        """This rank's share of a step of `entries`: the ranks' shares in rank order tile the step, each
        as long as the first but for those at the end."""
        share = self._share(entries)
        return slice(min(self.rank * share, entries), min((self.rank + 1) * share, entries))

    def gathered(self, local: Tensor, entries: int) -> Tensor:
        """Every rank's `local` rows (its share's, from `part`) in rank order: the whole step's."""
        padded = local.new_zeros((self._share(entries), *local.shape[1:]))
        padded[: len(local)] = local
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded)  # gloo's and nccl's alike; a gather takes parts of one size
        return torch.cat(parts)[:entries]

    def as_rank_0(self, tensors: Iterable[Tensor]) -> None:
        """Every rank takes rank 0's `tensors`, in place: the tables at an epoch's end (on a GPU the adds
        into a row land in no set order, so the ranks' copies could part in their last bits) and each
        epoch's order (drawn on each rank's GPU, it must be one order)."""
        for tensor in tensors:
            dist.broadcast(tensor, 0)
