"""The one trainer every model shares, with engines that fit the same objective.

autograd: batches by tensor indexing through torch's autograd, AdamW or SGD, one-cycle; every model,
any device, torchrun and fastai's way of working. compiled: whole epochs of per-rating AdaGrad in
numba for the factorisation models (dot, dotbias, svdpp) on the CPU threads (recsys.train.compiled);
device: the same AdaGrad in whole-batch tensor steps, for a GPU (recsys.train.device). The loop
around the epochs (validation, history, checkpoints, resume) is the same for all.

Regularisation: by default an L2 penalty on the rows of the per-id tables that each batch uses
(`model.forward_with_penalty`), added to the loss. Decoupled weight decay shrinks every row of every
table on every step, used or not, so its strength depends on the number of steps (the batch size);
the batch-row penalty weighs each user and item by how often it is rated, as classic matrix
factorisation (Funk SVD, Surprise) does, and on ML-100K u1 it gave the lower RMSE at every batch size
we tried. fastai's decoupled weight decay is available as `wd` as well.
"""

import dataclasses
import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar, cast

import numpy as np
import torch
from torch import distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from recsys.config import (
    RunConfig,
    check_device,
    check_threads,
    default_threads,
    unread,
)
from recsys.data.encoding import RatingTensors
from recsys.data.ratings_table import FLOAT32_MAX
from recsys.errors import RecsysError, short_reason
from recsys.evaluation.metrics import evaluate, mae, rmse
from recsys.models import RatingModel, SampledModel, model_entry, rating_model
from recsys.models.layers import check_pair_range, float32_default
from recsys.status import status_line
from recsys.train.allocator import keep_freed_memory
from recsys.train.distributed import (
    average_gradients,
    broadcast_parameters,
    distributed_rank,
    refuse_processes,
)
from recsys.train.engine import Engine
from recsys.train.optim import LazyAdam
from recsys.train.per_rating import epoch_learning_rate, member_seed, seeded_generator
from recsys.train.threads import NumbaThreads, side_by_side, torch_threads

T = TypeVar("T")


class _Objective(nn.Module):
    """One step's differentiable outputs (predictions, L2 penalty) behind a single forward, so that
    DistributedDataParallel, which hooks `forward`, sees everything a step computes."""

    def __init__(self, model: nn.Module, penalised: bool) -> None:
        super().__init__()
        # Every RatingModel implements forward_with_penalty (it is abstract), so a positive l2 always
        # reaches the loss; any other module is refused here rather than trained without its penalty.
        self.model = rating_model(model)
        self.penalised = penalised

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.penalised:
            return self.model.forward_with_penalty(x)
        # `forward`, not the call that checks the pairs: fit has checked them, and on a GPU the check
        # would wait for the device each step.
        return self.model.forward(x), torch.zeros((), device=x.device)


class TrainingDiverged(RecsysError):
    """The loss became NaN or infinite."""


@dataclass(frozen=True)
class EpochStats:
    """One row of the training history."""

    epoch: int
    train_loss: float  # mean squared error over the epoch's batches (without the penalty)
    valid_rmse: float  # NaN for a ranking model, whose scores are no ratings
    valid_mae: float
    seconds: float
    ratings: int  # trained on by this process: its shard under torchrun, all of them otherwise
    # A ranking model's NDCG@10 on (a sample of) the validation users; NaN for a rating model.
    valid_ndcg: float = math.nan


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


class _AutogradEpochs:
    """Epochs of batches through autograd and torch's optimizers: every model, any device, torchrun."""

    def __init__(self, model: nn.Module, train: RatingTensors, config: RunConfig) -> None:
        self.rank, self.world_size = distributed_rank()
        # Sparse gradients are averaged by average_gradients, checked under gloo only.
        if self.world_size > 1 and config.sparse and (backend := dist.get_backend()) != "gloo":
            raise RecsysError(f"`sparse` under torchrun needs the gloo backend (CPU), not {backend}")
        if config.sparse and not rating_model(model).sparse_gradients:
            raise RecsysError(f"`sparse`: {config.model} takes dense gradients only; leave `sparse` out")
        self.model, self.train, self.config = model, train, config
        self.error_weight = config.unit**2  # errors in units of five stars
        self.n_batches = -(-len(train) // config.batch_size)
        use_sparse_gradients(model, config.sparse)
        self.optimizers = make_optimizers(model, config)
        self.schedules = [
            make_schedule(optimizer, config, config.epochs * self.n_batches) for optimizer in self.optimizers
        ]
        objective: nn.Module = _Objective(model, penalised=config.l2 > 0)
        # Sparse gradients are averaged after each backward by average_gradients, not by
        # DistributedDataParallel (whose sparse all-reduce through gloo crashed now and then).
        self.averages = self.world_size > 1 and config.sparse
        if self.averages:
            broadcast_parameters(model)
        self.objective = (
            objective if self.world_size == 1 or self.averages else DistributedDataParallel(objective)
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizers": [optimizer.state_dict() for optimizer in self.optimizers],
            "schedules": [schedule.state_dict() for schedule in self.schedules],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for optimizer, saved in zip(self.optimizers, state["optimizers"], strict=True):
            optimizer.load_state_dict(saved)
        for schedule, saved in zip(self.schedules, state["schedules"], strict=True):
            schedule.load_state_dict(saved)

    def run_epoch(self, epoch: int, generator: torch.Generator, progress: bool) -> tuple[float, int]:
        """One pass over the shuffled batches: (mean batch MSE, ratings this process trained on)."""
        config, train, device = self.config, self.train, self.train.x.device
        order = torch.randperm(len(train), generator=generator).to(device)
        loss_sum = torch.zeros((), device=device)
        ratings = 0
        bar = tqdm(
            range(self.n_batches),
            desc=f"epoch {epoch}/{config.epochs}",
            leave=False,
            disable=not progress or self.rank != 0,
        )
        for batch in bar:
            index = order[batch * config.batch_size : (batch + 1) * config.batch_size]
            batch_ratings = len(index)
            if self.world_size > 1:
                index = index.tensor_split(self.world_size)[self.rank]
            ratings += len(index)
            x, y = train.x.index_select(0, index), train.y.index_select(0, index)  # faster than x[index]
            prediction, penalty = self.objective(x)
            # The ranks' gradients and losses are averaged: each weighs its slice's means (of the
            # errors, and of the penalty's rows) by its share of the batch, so that the average is the
            # whole batch's mean however the batch splits (1 in one process). A rank whose slice is
            # empty (a last batch smaller than the ranks) adds nothing: its mean would be 0 / 0, NaN.
            share = len(index) * self.world_size / batch_ratings
            if len(index) == 0:
                mse = loss = prediction.sum()  # 0, through the model, so every gradient is still found
            else:
                mse = share * torch.mean((prediction - y) ** 2)
                loss = mse / self.error_weight + share * config.l2 * penalty
            for optimizer in self.optimizers:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.averages:
                average_gradients(self.model, self.world_size)
            for optimizer, schedule in zip(self.optimizers, self.schedules, strict=True):
                optimizer.step()
                schedule.step()
            loss_sum += mse.detach()
        if self.world_size > 1:
            dist.all_reduce(loss_sum)
            loss_sum /= self.world_size
        # Read once per epoch, not per step: reading the loss is a device sync point.
        return float(loss_sum) / self.n_batches, ratings

    def evaluate(self, valid: RatingTensors) -> dict[str, float]:
        return evaluate(self.model, valid)

    def close(self) -> None:
        use_sparse_gradients(self.model, False)  # the model leaves as it came: dense, for any other loop


class _CompiledEpochs:
    """Epochs of per-rating AdaGrad in one compiled call per block (recsys.train.compiled), on threads.

    An ensemble's members train apart, each on its own squared error, from its own shuffle (seeded by
    the run's seed and its place): one at a time, or side by side on the threads when there are
    enough of them, which gives the same result.
    """

    def __init__(self, model: nn.Module, train: RatingTensors, config: RunConfig, threads: int) -> None:
        rating = rating_model(model)
        members = rating.member_models()
        tables = [member.factorisation() for member in members]
        refuse_processes()
        from recsys.train.compiled import CompiledEpochs  # numba: imported only by runs that use it

        x = train.x.cpu()
        # Members side by side, as many at once as there are threads, each on its share of them.
        at_once = min(len(members), threads)
        member_threads = max(1, threads // at_once)
        self.members = []
        for place, member_tables in enumerate(tables):
            if member_tables is None:
                raise RecsysError(f"`engine` compiled cannot train {config.model}; use `engine` autograd")
            self.members.append(
                CompiledEpochs(
                    member_tables,
                    x[:, 0],
                    x[:, 1],
                    train.y.cpu(),
                    rating.y_range,
                    config.l2,
                    member_seed(config.seed, place),
                    member_threads,
                    config.unit,
                )
            )
        self.config = config
        self.at_once = at_once

    def state_dict(self) -> dict[str, Any]:
        states = [member.state_dict() for member in self.members]
        return {"accumulators": states[0]} if len(states) == 1 else {"member_accumulators": states}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        states = [state["accumulators"]] if len(self.members) == 1 else state["member_accumulators"]
        for member, saved in zip(self.members, states, strict=True):
            member.load_state_dict(saved)

    def run_epoch(self, epoch: int, generator: torch.Generator, progress: bool) -> tuple[float, int]:
        """One pass over the ratings at a learning rate falling linearly from `lr` over the epochs:
        (mean squared error of the ratings as they were met, over the members; ratings trained on)."""
        lr = epoch_learning_rate(self.config.lr, epoch, self.config.epochs)
        # Drawn here, in the members' order, so that threads cannot change what each member draws.
        orders = [member.draw_order(generator) for member in self.members]
        losses = self._on_members(
            [
                partial(member.train_epoch, lr, order)
                for member, order in zip(self.members, orders, strict=True)
            ]
        )
        return sum(losses) / len(losses), sum(len(member.ratings[2]) for member in self.members)

    def evaluate(self, valid: RatingTensors) -> dict[str, float]:
        """In the compiled kernels (through torch this took as long as a u1 epoch); an ensemble's
        prediction is its members' mean, as its `forward`."""
        if len(valid) == 0:
            return {"rmse": math.nan, "mae": math.nan}
        x = valid.x.cpu()
        predictions = self._on_members([partial(member.predict, x[:, 0], x[:, 1]) for member in self.members])
        mean = torch.stack(predictions).mean(dim=0)
        return {"rmse": rmse(mean, valid.y.cpu()), "mae": mae(mean, valid.y.cpu())}

    def _on_members(self, tasks: list[Callable[[], T]]) -> list[T]:
        """Each member's task, `at_once` of them side by side, and their results in the members' order."""
        return side_by_side(tasks, self._stop_members, self.at_once)

    def _stop_members(self) -> None:
        """Interrupted: each member takes no further blocks (they train on threads of their own)."""
        for member in self.members:
            member.stop()

    def close(self) -> None:
        """Nothing to give back: the members' threads end with each call."""


class _SampledEpochs:
    """Sweeps of a Gibbs sampler over a Bayesian model's posterior (recsys.train.gibbs), on threads: of
    `members` independent chains, side by side in each epoch, whose kept draws the model pools."""

    def __init__(
        self, model: SampledModel, train: RatingTensors, valid: RatingTensors, config: RunConfig, threads: int
    ) -> None:
        refuse_processes()
        from recsys.models.bayes import BayesianFM
        from recsys.train.fm_gibbs import FMGibbsEpochs
        from recsys.train.gibbs import GibbsEpochs

        first: GibbsEpochs | FMGibbsEpochs
        if model_entry(config.model).fit == "fm":  # its features' first draw from the run's seed
            start = torch.Generator().manual_seed(config.seed)
            first = FMGibbsEpochs(
                cast(BayesianFM, model), train, valid, config.epochs, config.n_factors, start, config.members,
                config.ordinal,
            )  # fmt: skip
        else:
            first = GibbsEpochs(model, train, valid, config.epochs, config.n_factors, config.members)
        # The members: independent chains, each from its own start, their kept draws pooled.
        self.chains = [first]
        for place in range(1, config.members):
            start = seeded_generator(member_seed(config.seed, place))
            self.chains.append(self.chains[-1].next_chain(start))
        self.threads = NumbaThreads(threads)

    def state_dict(self) -> dict[str, Any]:
        return {"chains": [chain.state_dict() for chain in self.chains]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for chain, saved in zip(self.chains, state["chains"], strict=True):
            chain.load_state_dict(saved)

    def run_epoch(self, epoch: int, generator: torch.Generator, progress: bool) -> tuple[float, int]:
        """One sweep of each chain, in turn: (mean squared error of their draws on the training ratings,
        ratings swept by one)."""
        errors = [chain.run_epoch(epoch, generator) for chain in self.chains]
        return sum(errors) / len(errors), len(self.chains[0].targets)

    def evaluate(self, valid: RatingTensors) -> dict[str, float]:
        """The kept draws' mean on the validation ratings the sampler was given (`valid`, the same
        each epoch), from its running sums."""
        return self.chains[0].evaluate()

    def close(self) -> None:
        self.threads.restore()


def fit(
    model: nn.Module,
    train: RatingTensors,
    valid: RatingTensors,
    config: RunConfig,
    generator: torch.Generator,
    *,
    threads: int | None = None,
    progress: bool = True,
    on_epoch: Callable[[EpochStats], None] | None = None,
    on_checkpoint: Callable[[EpochStats, dict[str, Any]], None] | None = None,
    checkpoint_every: float = 0.0,
    resume: dict[str, Any] | None = None,
) -> list[EpochStats]:
    """Train `model` in place for `config.epochs` with `config.engine`, evaluating on `valid` after each.

    `generator` drives the shuffle (CPU), so the same seed, data and config give the same result (on
    the compiled engine, with any number of `threads`: None, the cores this process may use, while
    torch keeps COMPILED_TORCH_THREADS; on the autograd engine on the CPU, `threads` are torch's, None:
    AUTOGRAD_CPU_THREADS).
    `on_checkpoint` gets an epoch's stats and the training state (optimizer state, shuffle RNG,
    history) that `resume` takes back to continue after that epoch exactly as if never stopped: after
    the last epoch, and after any other once `checkpoint_every` seconds have passed since the last
    (0: every epoch), so that short epochs are not slowed by writing them. `on_epoch` gets every
    epoch's stats, after its checkpoint.
    Under torch.distributed (torchrun) every rank draws the same permutation and takes its slice of
    each batch, and DistributedDataParallel averages the gradients: the same steps as one process
    with the whole batch, up to floating-point summation order.
    """
    if len(train) == 0:
        raise RecsysError("no training ratings")
    with torch_threads(torch_threads_for(config, threads)), float32_default():
        return _fit(model, train, valid, config, generator, threads, progress, on_epoch, on_checkpoint,
                    checkpoint_every, resume)  # fmt: skip


# torch's own threads for the autograd engine on the CPU when none are asked for: its batches are
# small enough that a second thread gains little, and a second thread that another process holds
# costs ten times over (docs/training.md#threads).
AUTOGRAD_CPU_THREADS = 1
# torch's own threads beside the compiled engine, whose threads are numba's: bpmf's sampler sums its
# squared errors, chi-squares and scatter matrices in torch, which cuts a sum by its threads once it
# passes 32,768 entries, so on the caller's two threads a fit's chains came out in other last bits.
COMPILED_TORCH_THREADS = 1


def torch_threads_for(config: RunConfig, threads: int | None) -> int | None:
    """torch's threads while `config` trains on the CPU: on the autograd or device engine `threads`,
    else AUTOGRAD_CPU_THREADS; on the compiled engine COMPILED_TORCH_THREADS. For the device engine
    one is also what each torchrun rank runs on: more threads cut a step's sigmoid and sums at other
    places, which rounds their last bits otherwise once a step passes torch's grain (32,768 entries).
    None leaves them as they are (on a GPU)."""
    if config.device != "cpu":
        return None
    if config.engine == "compiled":
        return COMPILED_TORCH_THREADS
    return AUTOGRAD_CPU_THREADS if threads is None else check_threads(threads)


def _fit(
    model: nn.Module,
    train: RatingTensors,
    valid: RatingTensors,
    config: RunConfig,
    generator: torch.Generator,
    threads: int | None,
    progress: bool,
    on_epoch: Callable[[EpochStats], None] | None,
    on_checkpoint: Callable[[EpochStats, dict[str, Any]], None] | None,
    checkpoint_every: float,
    resume: dict[str, Any] | None,
) -> list[EpochStats]:
    """`fit`, with torch's threads set."""
    threads = check_threads(default_threads() if threads is None else threads)
    check_device(config.device)
    _check_members(rating_model(model), config)
    keep_freed_memory()
    model.to(config.device)
    train, valid = train.to(config.device), valid.to(config.device)
    rating_model(model).set_training_pairs(train.x)
    for part, what in ((train, "training "), (valid, "validation ")):
        # Once here, not in each step: the compiled kernels read rows unchecked, and torch's lookups
        # name no column.
        check_pair_range(part.x, rating_model(model).n_users, rating_model(model).n_items, what)
    lead = progress and distributed_rank()[0] == 0
    with status_line(f"setting up the {config.engine} engine on {len(train):,} ratings", lead):
        epochs = _epochs_for(model, train, valid, config, threads)
    try:
        ratings = ratings_fingerprint(train, valid) if on_checkpoint is not None or resume is not None else ""
        history = _restore(epochs, generator, resume, ratings) if resume is not None else []
        model.train()
        last_checkpoint = time.monotonic()
        for epoch in range(len(history) + 1, config.epochs + 1):
            stats = _train_one_epoch(epochs, epoch, generator, valid, config, progress, train)
            history.append(stats)
            due = epoch == config.epochs or time.monotonic() - last_checkpoint >= checkpoint_every
            if on_checkpoint is not None and due:
                on_checkpoint(stats, {**_training_state(epochs, generator, history), "ratings": ratings})
                last_checkpoint = time.monotonic()
            if on_epoch is not None:
                on_epoch(stats)
    finally:
        epochs.close()  # sparse gradients off, numba's threads back, also when training failed
    return history


def _check_members(model: RatingModel, config: RunConfig) -> None:
    """The model has as many members as `config` says: a single model given an ensemble's settings
    (or the reverse) would train to something neither describes, and its checkpoint, rebuilt from
    the config, would not load."""
    members = len(model.member_models())
    if members != config.built_members:
        raise RecsysError(
            f"the model has {members} member(s) and the config {config.members} (members); build the model "
            "from the config with recsys.config.model_for, or set members in config_for"
        )


def _epochs_for(
    model: nn.Module, train: RatingTensors, valid: RatingTensors, config: RunConfig, threads: int
) -> Engine:
    """The engine of `config.engine`: on the compiled engine, the model's fit (per-rating AdaGrad, a
    Gibbs sampler for a sampled model, BPR or implicit ALS for a ranking model)."""
    if config.samples:
        return _SampledEpochs(cast(SampledModel, model), train, valid, config, threads)
    fit = model_entry(config.model).fit
    if config.engine == "compiled" and fit == "als":
        from recsys.train.als import ALSEpochs  # numba: imported only by runs that use it

        return ALSEpochs(rating_model(model), train, valid, config, threads)
    if config.engine == "compiled" and fit == "bpr":
        from recsys.train.bpr import BPREpochs

        return BPREpochs(rating_model(model), train, valid, config, threads)
    if config.engine == "compiled":
        return _CompiledEpochs(model, train, config, threads)
    if config.engine == "device":
        from recsys.train.device import DeviceEpochs

        return DeviceEpochs(model, train, config)
    return _AutogradEpochs(model, train, config)


# A training rating this many times the ratings' typical size (their median magnitude, at least 1)
# is named as the likelier cause of a diverged loss than the step size.
EXTREME_RATING = 1e4
# An initial scale this large, or a penalty whose step (lr x l2) shrinks a row by this much of itself
# or more, is named beside the step size as a cause of a diverged loss (a step of 2 flips its sign).
LARGE_INIT_SCALE, LARGE_PENALTY_STEP = 100.0, 1.0
# An ials penalty this large is named before the data: the sums it weighs reach float32's range.
LARGE_SOLVED_PENALTY = 1e15


def _advice(config: RunConfig, train: RatingTensors) -> str:
    """What to change when the loss diverged: the step size, unless the engine takes no steps, or a
    rating far out of line with the rest, a penalty step of a whole row or a vast initial scale is
    there to explain it."""
    magnitudes = train.y.abs()
    largest = float(magnitudes.max())
    # Out of line with the rest, or so large that its squared error is beyond float32's range.
    if largest > EXTREME_RATING * max(float(magnitudes.median()), 1.0) or largest**2 > FLOAT32_MAX:
        return f"look for extreme values in the data: its largest training rating is {largest:g}"
    # A range far beyond the ratings (`--y-range 0 1e10`, or the range of `--rating-scale 0,1e20`)
    # diverges at any step size: its sigmoid's gradients alone leave float32's range.
    if config.y_range is not None and max(map(abs, config.y_range)) > EXTREME_RATING * max(largest, 1.0):
        low, high = config.y_range
        return (
            f"narrow `y_range` (now {low:g} to {high:g}; unless given, 1.1 x the rating scale's top): it "
            f"reaches far beyond the largest training rating, {largest:g}"
        )
    steps = config.engine == "autograd" or "lr" not in unread(model_entry(config.model).fit)
    if steps and config.l2 > 1 and config.lr * config.l2 >= LARGE_PENALTY_STEP:  # not lr's doing alone
        return (
            f"lower `l2` (now {config.l2:g}) or `lr` (now {config.lr:g}): a step's penalty shrinks a row "
            f"by lr x l2 = {config.lr * config.l2:g} of itself"
        )
    if config.init_scale >= LARGE_INIT_SCALE:
        return f"lower `init_scale` (now {config.init_scale:g}): the initial factors start far too large"
    if config.engine == "autograd" and config.wd * config.lr >= LARGE_PENALTY_STEP:
        decay = config.lr * config.wd
        return f"lower `wd` (now {config.wd:g}): a step's weight decay shrinks a row by lr x wd = {decay:g}"
    if steps:
        return f"lower `lr` (now {config.lr})"
    if model_entry(config.model).fit == "als" and config.l2 >= LARGE_SOLVED_PENALTY:
        return f"lower `l2` (now {config.l2:g}): the sums it weighs leave float32's range"
    return "look for extreme values in the data (ratings, weights or features): it takes no steps"


def _train_one_epoch(
    epochs: Engine,
    epoch: int,
    generator: torch.Generator,
    valid: RatingTensors,
    config: RunConfig,
    progress: bool,
    train: RatingTensors,
) -> EpochStats:
    """One epoch and its validation; a loss, or a validation RMSE, that is no longer finite stops
    training with advice. The loss is each rating's error before its step, so an epoch's last steps
    can diverge unseen by it: all of them on the device engine where the epoch is one step (fewer
    ratings than a step holds), which without the RMSE's check ended the run with a NaN model."""
    start = time.perf_counter()
    train_loss, ratings = epochs.run_epoch(epoch, generator, progress)
    if not math.isfinite(train_loss):
        raise TrainingDiverged(
            f"training loss became {train_loss} in epoch {epoch}; {_advice(config, train)}"
        )
    metrics = epochs.evaluate(valid)
    if len(valid) and not math.isfinite(metrics.get("rmse", 0.0)):  # empty: NaN, no divergence
        raise TrainingDiverged(
            f"validation RMSE became {metrics['rmse']} in epoch {epoch}; {_advice(config, train)}"
        )
    return EpochStats(
        epoch,
        train_loss,
        metrics.get("rmse", math.nan),
        metrics.get("mae", math.nan),
        time.perf_counter() - start,
        ratings,
        metrics.get("ndcg@10", math.nan),
    )


def _training_state(epochs: Engine, generator: torch.Generator, history: list[EpochStats]) -> dict[str, Any]:
    """What `resume` takes back to continue after the last epoch of `history` exactly."""
    return {
        **epochs.state_dict(),
        "generator": generator.get_state(),
        "history": [dataclasses.asdict(entry) for entry in history],
    }


def ratings_fingerprint(*parts: RatingTensors) -> str:
    """A digest of the ratings trained and validated on, kept with the training state: the same users
    and items with other ratings would resume silently onto other data."""
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        for tensor in (part.x, part.y):
            digest.update(np.ascontiguousarray(tensor.cpu().numpy()).data)
    return digest.hexdigest()


def _restore(
    epochs: Engine, generator: torch.Generator, state: dict[str, Any], ratings: str
) -> list[EpochStats]:
    """Load a `_training_state` back into the runner and the shuffle RNG; the history so far. Its
    `ratings` fingerprint must match the ratings now given."""
    if state["ratings"] != ratings:
        raise RecsysError(
            "cannot resume: the ratings differ from those the run was trained on (the data changed "
            "since the run started)"
        )
    try:
        epochs.load_state_dict(state)
        generator.set_state(state["generator"])
        return [EpochStats(**stats) for stats in state["history"]]
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as error:
        # A checkpoint rewritten with its header made anew (its checksum catches any other change).
        raise RecsysError(
            f"cannot resume: the checkpoint's training state is damaged ({type(error).__name__}: "
            f"{short_reason(error)})"
        ) from None
