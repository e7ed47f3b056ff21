"""The one trainer every model shares: batches by tensor indexing, AdamW or SGD, one-cycle.

Regularisation: by default an L2 penalty on the rows of the per-id tables that each batch uses
(`model.forward_with_penalty`), added to the loss. Decoupled weight decay shrinks every row of every
table on every step, used or not, so its strength depends on the number of steps (the batch size);
the batch-row penalty weighs each user and item by how often it is rated, as classic matrix
factorisation (Funk SVD, Surprise) does, and on ML-100K u1 it gave the lower RMSE at every batch size
we tried. fastai's decoupled weight decay is available as `wd` as well.
"""

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo  # torch.optim imports it (~1 s) on first use: pay that at import time
from torch import distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from recsys.config import RunConfig
from recsys.encoding import RatingTensors
from recsys.errors import RecsysError
from recsys.metrics import evaluate
from recsys.optim import LazyAdam


class _Objective(nn.Module):
    """One step's differentiable outputs (predictions, L2 penalty) behind a single forward, so that
    DistributedDataParallel, which hooks `forward`, sees everything a step computes."""

    def __init__(self, model: nn.Module, penalised: bool) -> None:
        super().__init__()
        self.model = model
        self.penalised = penalised and hasattr(model, "forward_with_penalty")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.penalised:
            return self.model.forward_with_penalty(x)  # type: ignore[operator]
        return self.model(x), torch.zeros((), device=x.device)


def distributed_rank() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) outside torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class TrainingDiverged(RecsysError):
    """The loss became NaN or infinite."""


@dataclass(frozen=True)
class EpochStats:
    """One row of the training history."""

    epoch: int
    train_loss: float  # mean squared error over the epoch's batches (without the penalty)
    valid_rmse: float
    valid_mae: float
    seconds: float
    ratings: int  # trained on by this process: its shard under torchrun, all of them otherwise


def make_optimizers(model: nn.Module, config: RunConfig) -> list[torch.optim.Optimizer]:
    """AdamW or SGD with momentum, with `config.wd` as decoupled weight decay.

    With `config.sparse`, embedding tables get sparse gradients and LazyAdam (only the rows in the
    batch are read and written, so a step costs the batch, not the table; torch's SparseAdam, which
    computes the same, off the CPU); any other parameters keep AdamW.
    """
    if config.optimizer == "sgd":
        return [torch.optim.SGD(model.parameters(), lr=config.lr, momentum=0.9, weight_decay=config.wd)]
    if config.optimizer != "adamw":
        raise AssertionError(f"RunConfig let optimizer {config.optimizer!r} through")
    sparse = [m.weight for m in model.modules() if isinstance(m, nn.Embedding) and m.sparse]
    dense = [p for p in model.parameters() if all(p is not s for s in sparse)]
    # fused: one kernel for the whole update; it halves the optimizer's share of a step on CPU.
    optimizers: list[torch.optim.Optimizer] = []
    if dense:
        optimizers.append(torch.optim.AdamW(dense, lr=config.lr, weight_decay=config.wd, fused=True))
    if sparse:
        on_cpu = all(p.device.type == "cpu" for p in sparse)
        optimizers.append((LazyAdam if on_cpu else torch.optim.SparseAdam)(sparse, lr=config.lr))
    return optimizers


def use_sparse_gradients(model: nn.Module, sparse: bool) -> None:
    """Switch every embedding table of `model` to sparse (or back to dense) gradients."""
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            module.sparse = sparse


def make_schedule(
    optimizer: torch.optim.Optimizer, config: RunConfig, total_steps: int
) -> torch.optim.lr_scheduler.LRScheduler:
    """fastai's one-cycle (warm up to `lr`, anneal to near zero) or a constant rate.

    One-cycle needs a step in each of its two phases: a run of 3 or 4 steps gets a longer warm-up
    share, and a run of 1 or 2 steps (nothing to anneal) a constant rate.
    """
    if config.schedule == "one-cycle" and total_steps >= 3:
        return torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=config.lr, total_steps=total_steps, pct_start=max(0.25, 2 / total_steps)
        )
    if config.schedule in ("one-cycle", "constant"):
        return torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
    raise AssertionError(f"RunConfig let schedule {config.schedule!r} through")


def fit(
    model: nn.Module,
    train: RatingTensors,
    valid: RatingTensors,
    config: RunConfig,
    generator: torch.Generator,
    *,
    progress: bool = True,
    on_epoch: Callable[[EpochStats], None] | None = None,
    on_checkpoint: Callable[[EpochStats, dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
) -> list[EpochStats]:
    """Train `model` in place for `config.epochs`, evaluating on `valid` after each epoch.

    `generator` drives the shuffle (CPU), so the same seed, data and config give the same result.
    `on_epoch` gets each epoch's stats; `on_checkpoint` also the training state (optimizers,
    schedules, shuffle RNG, history) that `resume` takes back to continue after that epoch exactly
    as if never stopped.
    Under torch.distributed (torchrun) every rank draws the same permutation and takes its slice of
    each batch, and DistributedDataParallel averages the gradients: the same steps as one process
    with the whole batch, up to floating-point summation order.
    """
    if len(train) == 0:
        raise RecsysError("no training ratings")
    rank, world_size = distributed_rank()
    # DistributedDataParallel all-reduces sparse gradients through gloo only (nccl has none).
    if world_size > 1 and config.sparse and (backend := dist.get_backend()) != "gloo":
        raise RecsysError(f"--sparse under torchrun needs the gloo backend (CPU), not {backend}")
    device = torch.device(config.device)
    model.to(device)
    train, valid = train.to(device), valid.to(device)
    n_batches = -(-len(train) // config.batch_size)
    use_sparse_gradients(model, config.sparse)
    optimizers = make_optimizers(model, config)
    schedules = [make_schedule(optimizer, config, config.epochs * n_batches) for optimizer in optimizers]
    objective: nn.Module = _Objective(model, penalised=config.l2 > 0)
    if world_size > 1:
        objective = DistributedDataParallel(objective)
    history: list[EpochStats] = []
    if resume is not None:
        for optimizer, state in zip(optimizers, resume["optimizers"], strict=True):
            optimizer.load_state_dict(state)
        for schedule, state in zip(schedules, resume["schedules"], strict=True):
            schedule.load_state_dict(state)
        generator.set_state(resume["generator"])
        history = [EpochStats(**stats) for stats in resume["history"]]
    model.train()
    for epoch in range(len(history) + 1, config.epochs + 1):
        start = time.perf_counter()
        order = torch.randperm(len(train), generator=generator).to(device)
        loss_sum = torch.zeros((), device=device)
        ratings = 0
        bar = tqdm(
            range(n_batches),
            desc=f"epoch {epoch}/{config.epochs}",
            leave=False,
            disable=not progress or rank != 0,
        )
        for batch in bar:
            index = order[batch * config.batch_size : (batch + 1) * config.batch_size]
            if world_size > 1:
                index = index.tensor_split(world_size)[rank]
            ratings += len(index)
            x, y = train.x.index_select(0, index), train.y.index_select(0, index)  # faster than x[index]
            prediction, penalty = objective(x)
            mse = torch.mean((prediction - y) ** 2)
            loss = mse + config.l2 * penalty
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            for optimizer, schedule in zip(optimizers, schedules, strict=True):
                optimizer.step()
                schedule.step()
            loss_sum += mse.detach()
        if world_size > 1:
            dist.all_reduce(loss_sum)
            loss_sum /= world_size
        # One check per epoch, not per step: reading the loss is a device sync point.
        train_loss = float(loss_sum) / n_batches
        if not torch.isfinite(torch.tensor(train_loss)):
            raise TrainingDiverged(
                f"training loss became {train_loss} in epoch {epoch}; lower --lr (now {config.lr})"
            )
        metrics = evaluate(model, valid) if len(valid) else {"rmse": float("nan"), "mae": float("nan")}
        seconds = time.perf_counter() - start
        stats = EpochStats(epoch, train_loss, metrics["rmse"], metrics["mae"], seconds, ratings)
        history.append(stats)
        if on_epoch is not None:
            on_epoch(stats)
        if on_checkpoint is not None:
            on_checkpoint(
                stats,
                {
                    "optimizers": [optimizer.state_dict() for optimizer in optimizers],
                    "schedules": [schedule.state_dict() for schedule in schedules],
                    "generator": generator.get_state(),
                    "history": [dataclasses.asdict(entry) for entry in history],
                },
            )
    use_sparse_gradients(model, False)  # a trained model leaves as it came: dense, for any other loop
    return history
