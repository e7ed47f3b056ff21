"""The device engine: the compiled engine's per-rating AdaGrad as whole-batch tensor steps, for a GPU.

The same objective and update rule as recsys.train.compiled (fastai's sigmoid squash, squared error
plus `l2` times the squared norms of the rows each rating uses, LIBMF's row-wise AdaGrad, a learning
rate falling linearly over the epochs), but each step takes a batch of ratings at once: every rating
of the batch is scored from the rows as they were before the step, and its updates are added into
the rows (`index_add_`). A batch in which no user, item or implicit row occurs twice is exactly that
many of the compiled engine's steps one after another. Where a row repeats, its updates add up,
each scaled by the row's AdaGrad sum as the compiled engine would have it by then, taking the step's
ratings sorted by user; only the gradients are stale (Hogwild's races, made deterministic on the CPU:
on a GPU the adds are atomic, in no set order, so two runs, or a run and its resume, differ in the
last bits). The ratings stay on the device; each epoch draws its order there and sorts all its
steps at once. A step is the same kernels whatever the batch size (for `dot` and `dotbias` on a GPU,
unless `KERNELS_SWITCH` says no, three Triton kernels of recsys.train.device_kernels and a few torch
operations), and on a GPU a member's epoch of steps is captured once as a CUDA graph and replayed,
one launch an epoch, so the GPU spends its time on the rows, not on Python. On the CPU it runs too,
in torch operations (the tests' path; they run the kernels under Triton's interpreter), never by
default: the compiled engine is the CPU's. Under torchrun each rank holds every rating and the whole
tables, finds the gradients of its share of each step, and applies the whole step's, gathered
(recsys.train.distributed.StepShares).
"""

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from importlib import import_module
from importlib.util import find_spec
from typing import Any

import torch
from torch import Tensor, nn
from torch import distributed as dist

from recsys.config import RunConfig
from recsys.data.encoding import RatingTensors
from recsys.errors import RecsysError
from recsys.evaluation.metrics import evaluate
from recsys.models import Factorisation, rating_model
from recsys.models.base import bag_vectors
from recsys.train.distributed import StepShares, distributed_rank
from recsys.train.per_rating import ACCUMULATOR_START, epoch_learning_rate, member_seed, seeded_generator

# An epoch in about STEPS_PER_EPOCH steps of MIN_BATCH to MAX_BATCH ratings: the fewer the steps, the
# fewer kernel launches, but the more often a popular row recurs within one step, its gradients stale.
# Validation RMSE at the ML-10M shape matched the compiled engine's with steps of 65,536 ratings and
# fell behind with 262,144; inside u1.base it did with 4,096 and fell behind with 8,192. SVD++'s bag
# rows step on the summed gradients of their user's ratings in the step, too far once a step holds
# many of them: its steps start at MIN_BAG_BATCH (docs/findings.md, "The device engine's batch").
MIN_BATCH = 4096
MIN_BAG_BATCH = 1024
MAX_BATCH = 65_536
STEPS_PER_EPOCH = 64
# The Triton kernels step `dot` and `dotbias` on a GPU unless this variable is 0 (which the benchmark
# sets to time torch's operations beside them: docs/findings.md, "The device engine on an H200").
KERNELS_SWITCH = "RECSYS_TRITON_KERNELS"
# Epochs a member's seed leaves room for before two seeds could meet: its orders' seed is
# member_seed * EPOCH_SEEDS + epoch.
EPOCH_SEEDS = 1_000_003


def batch_size(n_ratings: int, bags: bool = False) -> int:
    """Ratings per step for an epoch of `n_ratings` (`bags`: of SVD++)."""
    return min(MAX_BATCH, max(MIN_BAG_BATCH if bags else MIN_BATCH, -(-n_ratings // STEPS_PER_EPOCH)))


@dataclass(frozen=True)
class RowRuns:
    """Where a step's rows repeat: the places that sort the step by row, stably (None where it is
    sorted already), and at each sorted place where its run of equal rows starts."""

    order: Tensor | None
    run_start: Tensor

    def earlier(self, squares: Tensor) -> Tensor:
        """For each entry (a row of `squares`, a column per table), the sum of the squares of the entries
        before it in the step with its row (0 for a row's first)."""
        found = self.sorted_earlier(squares)
        if self.order is None:
            return found
        earlier = torch.empty_like(found)
        earlier[self.order] = found
        return earlier

    def sorted_earlier(self, squares: Tensor) -> Tensor:
        """`earlier` in sorted order: a segmented exclusive prefix sum, in float64 so that the
        differences of long running sums keep their digits. The columns are laid end to end for one
        scan over a vector, the kind a GPU does fast (scans over a matrix's rows or columns took most
        of an epoch on an H200); a run never crosses a column, so what the scan carries from one column
        to the next cancels in the differences."""
        sorted_squares = (squares if self.order is None else squares[self.order]).double()
        entries, tables = sorted_squares.shape
        end_to_end = sorted_squares.t().reshape(-1)
        before = (torch.cumsum(end_to_end, dim=0) - end_to_end).view(tables, entries)
        return (before - before[:, self.run_start]).t().to(squares.dtype).contiguous()


@dataclass(frozen=True)
class Step:
    """One step's ratings, sorted by user: the order in which a repeated row takes its falling steps."""

    users: Tensor
    items: Tensor
    values: Tensor
    user_runs: RowRuns
    item_runs: RowRuns


@dataclass(frozen=True)
class Batches:
    """An epoch's ratings in steps of `size`, each step's sorted by user (stably, so that a user's
    ratings keep their drawn order), with the indices, local to each step, that its `RowRuns` read:
    found for all steps at once, a few sorts an epoch instead of two a step."""

    users: Tensor
    items: Tensor
    values: Tensor
    user_run_start: Tensor
    item_order: Tensor
    item_run_start: Tensor
    size: int

    @classmethod
    def drawn(
        cls, users: Tensor, items: Tensor, values: Tensor, order: Tensor, size: int, tables: tuple[int, int]
    ) -> "Batches":
        """The ratings in `order`, cut into steps of `size`; `tables`: the users' and items' rows."""
        step = torch.arange(len(order), device=order.device) // size
        step_start = step * size
        steps = -(-len(order) // size)
        user_order, user_keys = _sorted_within_steps(step, steps, users[order], tables[0])
        by_user = order[user_order]
        users, items, values = users[by_user], items[by_user], values[by_user]
        item_order, item_keys = _sorted_within_steps(step, steps, items, tables[1])
        return cls(
            users,
            items,
            values,
            _run_starts(user_keys) - step_start,
            item_order - step_start,
            _run_starts(item_keys) - step_start,
            size,
        )

    def steps(self) -> Iterator[Step]:
        """The steps in turn (views of the epoch's tensors)."""
        for start in range(0, len(self.values), self.size):
            part = slice(start, start + self.size)
            yield Step(
                self.users[part],
                self.items[part],
                self.values[part],
                RowRuns(None, self.user_run_start[part]),
                RowRuns(self.item_order[part], self.item_run_start[part]),
            )

    def copy_(self, other: "Batches") -> None:
        """Take `other`'s ratings and indices into these tensors, where a captured graph reads them."""
        for field in fields(self):
            if field.name != "size":
                getattr(self, field.name).copy_(getattr(other, field.name))


def _sorted_within_steps(step: Tensor, steps: int, rows: Tensor, table_rows: int) -> tuple[Tensor, Tensor]:
    """The places that sort each step's `rows` (of a table of `table_rows`), stably, keeping the steps
    where they are, and the sorted keys (step and row in one number, rising through the epoch)."""
    keys = step * table_rows + rows
    if steps * table_rows <= 2**31:  # a radix sort's passes go by the key's bits
        keys = keys.int()
    keys, order = torch.sort(keys, stable=True)
    return order, keys


def _run_starts(sorted_keys: Tensor) -> Tensor:
    """For each place of `sorted_keys`, where its run of equal keys starts: a binary search, which a
    GPU does for all places at once (torch's running maximum, the other way, scans on one block)."""
    return torch.searchsorted(sorted_keys, sorted_keys)


class DeviceTables:
    """One model's tables (trained in place) and AdaGrad's per-row sums for each, on their device.

    SVD++'s bag rows step for each user and batch, where the compiled engine steps them once per user
    and epoch on the sum of the user's ratings' gradients. So that their AdaGrad sums still grow as
    the compiled engine's do, each step's square joins them scaled by the user's training ratings
    over its ratings in the step (`user_ratings`): the sum of the parts' squares then estimates the
    square of their sum. Unscaled, the sums grew too slowly and the rows overshot once `lr` was 0.07
    or more (docs/findings.md, "The device engine's batch")."""

    def __init__(
        self,
        tables: Factorisation,
        y_range: tuple[float, float] | None,
        user_ratings: Tensor | None = None,
        kernels: bool | None = None,
        shares: StepShares | None = None,
    ) -> None:
        """`kernels`: step by the Triton kernels of recsys.train.device_kernels (None: where the tables
        are float32 on a GPU, have no SVD++ bags, Triton is installed and $RECSYS_TRITON_KERNELS is
        not 0; the kernels' products are float32's). `shares`: under torchrun, this rank's share of
        each step (None: one process finds every rating's gradient)."""
        if shares is not None and tables.implicit is not None:
            raise RecsysError(
                "`engine` device under torchrun trains dot and dotbias, not svdpp (its bags step per "
                "user); train svdpp in one process, or with `engine` autograd under torchrun"
            )
        self.tables = tables
        self.user_ratings = user_ratings
        self.shares = shares
        if kernels is None:
            kernels = (
                tables.user_factors.is_cuda
                and tables.user_factors.dtype == torch.float32
                and tables.implicit is None
                and os.environ.get(KERNELS_SWITCH) != "0"
                and find_spec("triton") is not None
            )
        if kernels and tables.implicit is not None:
            raise RecsysError("the device engine's Triton kernels step `dot` and `dotbias`, not `svdpp`")
        self.kernels = import_module("recsys.train.device_kernels") if kernels else None
        # The tables a side's rows index, stepped together: their sums side by side in one tensor.
        found = {
            "user": {"user_factors": tables.user_factors, "user_bias": tables.user_bias},
            "item": {"item_factors": tables.item_factors, "item_bias": tables.item_bias},
            "implicit": {"implicit_factors": tables.implicit and tables.implicit.factors},
        }
        self.sides = {
            side: {name: table for name, table in named.items() if table is not None}
            for side, named in found.items()
        }
        self.sums = {
            side: torch.full(
                (len(next(iter(named.values()))), len(named)),
                ACCUMULATOR_START,
                device=tables.user_factors.device,
            )
            for side, named in self.sides.items()
            if named
        }
        # Each table's sums by its name (views of its side's).
        self.accumulators = {
            name: self.sums[side][:, column]
            for side, named in self.sides.items()
            for column, name in enumerate(named)
        }
        self.low, self.high = y_range if y_range is not None else (0.0, 1.0)
        self.squash = y_range is not None

    def step(self, step: Step, lr: float | Tensor, l2: float, twice_weight: float) -> Tensor:
        """One step on `step`'s ratings, each scored from the rows as they were before it; the ratings'
        summed squared error (a device scalar, not read here)."""
        if self.kernels is not None:
            return self._kernel_step(step, lr, l2, twice_weight)
        user_factors, item_factors, user_bias, item_bias, implicit = self.tables
        users, items, values = self._share_of(step)
        decay = 2 * l2
        user_rows, item_rows = user_factors[users], item_factors[items]
        whole_users = user_rows
        if implicit is not None:
            # Each step gathers the whole bag of each of its users, so an epoch reads a busy user's bag
            # once per step it meets the user in; finding the users and their entries waits for a GPU.
            bags = implicit.bags(users)
            vectors = bag_vectors(implicit.factors, bags)
            whole_users = user_rows + vectors[bags.inverse]
        score = torch.linalg.vecdot(whole_users, item_rows)
        biases = None if user_bias is None or item_bias is None else (user_bias[users], item_bias[items])
        if biases is not None:
            score = score + (biases[0] + biases[1])[:, 0]
        if self.squash:
            span = self.high - self.low
            sigmoid = torch.sigmoid(score)
            error = torch.add(self.low - values, sigmoid, alpha=span)
            gradient = error * sigmoid * (1 - sigmoid) * (twice_weight * span)
        else:
            error = score - values
            gradient = twice_weight * error
        gradient_column = gradient[:, None]
        user_gradients = [torch.add(gradient_column * item_rows, user_rows, alpha=decay)]
        item_gradients = [torch.add(gradient_column * whole_users, item_rows, alpha=decay)]
        if biases is not None:
            user_gradients.append(torch.add(gradient_column, biases[0], alpha=decay))
            item_gradients.append(torch.add(gradient_column, biases[1], alpha=decay))
        if self.shares is not None:  # every rank's share, for the whole step's updates
            user_gradients, item_gradients, (error,) = _gathered(
                self.shares, len(step.values), user_gradients, item_gradients, [error[:, None]]
            )
            error = error.view(-1)
        self._rows_step("user", step.users, step.user_runs, user_gradients, lr)
        self._rows_step("item", step.items, step.item_runs, item_gradients, lr)
        if implicit is not None:
            # A bag row's gradient: its weight times the summed gradient of its user's ratings in the
            # step, plus the penalty of each of those ratings (weight squared, as the compiled engine).
            summed = torch.zeros_like(vectors).index_add_(0, bags.inverse, gradient_column * item_rows)
            rated = bags.counts.to(gradient.dtype)
            owner, weights = bags.owners, bags.weights.to(gradient.dtype)[:, None]
            rows = implicit.factors[bags.columns]
            row_gradients = weights * summed[owner] + decay * rated[owner, None] * weights**2 * rows
            assert self.user_ratings is not None, "SVD++'s tables come with each user's rating count"
            scale = (self.user_ratings[bags.users].to(gradient.dtype) / rated)[owner]
            self._rows_step(
                "implicit",
                bags.columns,
                _runs(bags.columns, len(implicit.factors)),
                [row_gradients],
                lr,
                scale,
            )
        return torch.dot(error, error)

    def _share_of(self, step: Step) -> tuple[Tensor, Tensor, Tensor]:
        """The users, items and values of the ratings whose gradients this process finds: the whole
        step's, or under torchrun its rank's share."""
        part = slice(None) if self.shares is None else self.shares.part(len(step.values))
        return step.users[part], step.items[part], step.values[part]

    def _kernel_step(self, step: Step, lr: float | Tensor, l2: float, twice_weight: float) -> Tensor:
        """`step` by the Triton kernels: the same updates, each rating's rows read and written once."""
        assert self.kernels is not None
        user_factors, item_factors, user_bias, item_bias, _ = self.tables
        users, items, values = self._share_of(step)
        entries, width = len(values), user_factors.shape[1]
        columns = self.sums["user"].shape[1]
        user_gradients, item_gradients = (user_factors.new_empty((entries, width)) for _ in range(2))
        bias_gradients = user_factors.new_empty((entries, 2))
        user_squares, item_squares = (user_factors.new_empty((entries, columns)) for _ in range(2))
        squared_error = user_factors.new_zeros(())
        self.kernels.gradients(
            users,
            items,
            values,
            (user_factors, item_factors, user_bias, item_bias),
            (user_gradients, item_gradients, bias_gradients, user_squares, item_squares, squared_error),
            (self.low, self.high) if self.squash else None,
            twice_weight,
            2 * l2,
        )
        if self.shares is not None:  # every rank's share, for the whole step's updates
            gathered = _gathered(
                self.shares,
                len(step.values),
                [user_gradients, item_gradients, bias_gradients, user_squares, item_squares],
            )
            user_gradients, item_gradients, bias_gradients, user_squares, item_squares = gathered[0]
            dist.all_reduce(squared_error)
        learning_rate = lr if isinstance(lr, Tensor) else torch.tensor(lr, device=user_factors.device)
        sides = (
            ("user", step.users, step.user_runs, user_gradients, user_squares, user_factors, user_bias),
            ("item", step.items, step.item_runs, item_gradients, item_squares, item_factors, item_bias),
        )
        for place, (side, rows, runs, gradients, squares, table, bias) in enumerate(sides):
            earlier = runs.sorted_earlier(squares)
            args = (rows, gradients, bias_gradients, self.sums[side], earlier, table, bias, learning_rate)
            self.kernels.apply(place, runs.order, *args)
            # After the side's updates, which read the sums before.
            self.kernels.add_squares(runs.order, rows, squares, earlier, self.sums[side])
        return squared_error

    def _rows_step(
        self,
        side: str,
        rows: Tensor,
        runs: RowRuns,
        gradients: list[Tensor],
        lr: float | Tensor,
        scale: Tensor | None = None,
    ) -> None:
        """AdaGrad on the `rows` of `side`'s tables, by `gradients` (one per table): each update by its
        gradient over the root of the row's sum as the compiled engine would have it by then (the sum
        before the step plus the squares of the row's earlier updates in the batch), then the updates'
        mean squares over the factors (times `scale`, where given) join the sums. A row met k times in
        a batch so takes k steps of falling size, as it would one after another; only its gradients
        are stale (from the rows before the step)."""
        sums = self.sums[side]
        # A factor row's mean square over its factors; a bias's own square.
        squares = torch.stack([gradient.square().mean(dim=1) for gradient in gradients], dim=1)
        if scale is not None:
            squares = squares * scale[:, None]
        steps = torch.rsqrt(sums[rows] + runs.earlier(squares)) * lr
        for column, (table, gradient) in enumerate(zip(self.sides[side].values(), gradients, strict=True)):
            table.index_add_(0, rows, gradient * steps[:, column, None], alpha=-1)
        sums.index_add_(0, rows, squares)


def _gathered(shares: StepShares, entries: int, *groups: list[Tensor]) -> list[list[Tensor]]:
    """Each of `groups`' tensors (a row per entry of this rank's share of a step of `entries`) with
    every rank's rows: one gather of them all, side by side, split back as given."""
    local = [tensor for group in groups for tensor in group]
    whole = shares.gathered(torch.cat(local, dim=1), entries)
    # Each its own contiguous tensor, as one process's: a sum over a strided view's rows (a square's
    # mean, the loss) may add in another order.
    parts = iter(part.contiguous() for part in whole.split([tensor.shape[1] for tensor in local], dim=1))
    return [[next(parts) for _ in group] for group in groups]


def _runs(rows: Tensor, table_rows: int) -> RowRuns:
    """The runs of one step's `rows` (of a table of `table_rows`) in the order given."""
    order, keys = _sorted_within_steps(torch.zeros_like(rows), 1, rows, table_rows)
    return RowRuns(order, _run_starts(keys))


class DeviceEpochs:
    """Epochs of whole-batch AdaGrad steps for the factorisation models on `config.device`; an ensemble's
    members one after another, each over its own order."""

    def __init__(self, model: nn.Module, train: RatingTensors, config: RunConfig) -> None:
        rank, world_size = distributed_rank()
        # Under torchrun every rank holds every rating and the whole tables (ML-25M's fit one GPU).
        self.shares = StepShares(rank, world_size) if world_size > 1 else None
        self.model = model
        self.members = []
        user_ratings = None  # each user's training ratings, for SVD++'s bags
        for member in rating_model(model).member_models():
            tables = member.factorisation()
            if tables is None:
                raise RecsysError(f"`engine` device cannot train {config.model}; use `engine` autograd")
            if tables.implicit is not None and user_ratings is None:
                user_ratings = torch.bincount(train.x[:, 0], minlength=len(tables.user_factors))
            self.members.append(DeviceTables(tables, member.y_range, user_ratings, shares=self.shares))
        self.users, self.items = train.x[:, 0].contiguous(), train.x[:, 1].contiguous()
        self.values = train.y.to(self.members[0].tables.user_factors.dtype)
        self.config = config
        bags = any(member.tables.implicit is not None for member in self.members)
        self.batch_size = batch_size(len(train), bags)
        first = self.members[0].tables
        self.table_rows = (len(first.user_factors), len(first.item_factors))
        self.twice_weight = 2 / config.unit**2  # errors in units of five stars
        self.lr = torch.zeros((), device=self.values.device)  # read by the captured graphs
        # SVD++'s steps find their users' bags, whose sizes the host must read: no graph for them. Nor
        # under torchrun, whose gathers in a captured graph no GPU here has yet run.
        self.captures = self.values.is_cuda and not bags and self.shares is None
        self.captured: list[EpochGraph | None] = [None] * len(self.members)
        self.batches: Batches | None = None  # where the captured graphs read each epoch's ratings

    def state_dict(self) -> dict[str, Any]:
        """AdaGrad's accumulators of each member, on the CPU."""
        return {
            "member_accumulators": [
                {name: table.cpu() for name, table in member.accumulators.items()} for member in self.members
            ]
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict`."""
        for member, saved in zip(self.members, state["member_accumulators"], strict=True):
            for name, table in member.accumulators.items():
                table.copy_(saved[name])

    def run_epoch(self, epoch: int, generator: torch.Generator, progress: bool) -> tuple[float, int]:
        """One pass of each member over the ratings in an order drawn on the device from the run's seed,
        the member's place and the epoch (so a member's orders are a one-model run's, and a resumed
        run's the same): (mean squared error of the ratings as they were met, ratings trained on)."""
        self.lr.fill_(epoch_learning_rate(self.config.lr, epoch, self.config.epochs))
        device = self.values.device
        squared_error = torch.zeros((), device=device)
        with torch.no_grad():
            for place, member in enumerate(self.members):
                seed = (member_seed(self.config.seed, place) * EPOCH_SEEDS + epoch) % 2**63
                drawn = seeded_generator(seed, device)
                order = torch.randperm(len(self.values), generator=drawn, device=device)
                if self.shares is not None:  # one order for every rank, whatever its GPU draws
                    self.shares.as_rank_0([order])
                batches = Batches.drawn(
                    self.users, self.items, self.values, order, self.batch_size, self.table_rows
                )
                squared_error += self._member_epoch(place, member, batches)
                if self.shares is not None:
                    self.shares.as_rank_0(
                        [table for named in member.sides.values() for table in named.values()]
                        + list(member.sums.values())
                    )
        ratings = len(self.values) * len(self.members)
        return float(squared_error) / ratings, ratings  # read once an epoch: a device sync point

    def _member_epoch(self, place: int, member: DeviceTables, batches: Batches) -> Tensor:
        """`member`'s steps over `batches`: on a GPU replayed from the graph captured in its second epoch
        (the first, run step by step, loads the kernels that a capture records but does not run)."""
        config = self.config

        def epoch(batches: Batches) -> Tensor:
            squared_error = torch.zeros((), device=batches.values.device)
            for step in batches.steps():
                squared_error += member.step(step, self.lr, config.l2, self.twice_weight)
            return squared_error

        if not self.captures:
            return epoch(batches)
        if self.batches is None:  # the first epoch: its tensors are where the graphs will read
            self.batches = batches
            return epoch(batches)
        static = self.batches
        static.copy_(batches)
        graph = self.captured[place]
        if graph is None:
            graph = self.captured[place] = EpochGraph(lambda: epoch(static))
        return graph.replay()

    def evaluate(self, valid: RatingTensors) -> dict[str, float]:
        """RMSE and MAE on `valid` (an ensemble's: its members' mean, as its `forward`)."""
        return evaluate(self.model, valid)

    def close(self) -> None:
        """Nothing to give back: the tables were trained in place."""


class EpochGraph:
    """A member's epoch of steps captured once as a CUDA graph: each replay launches its few thousand
    kernels at once, where Python launched them one by one. It reads and writes the tensors it was
    captured on (the rows, AdaGrad's sums, the epoch's batches and learning rate)."""

    def __init__(self, epoch: Callable[[], Tensor]) -> None:
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.squared_error = epoch()

    def replay(self) -> Tensor:
        """The epoch's steps again; the summed squared error, overwritten by the next replay."""
        self.graph.replay()
        return self.squared_error
