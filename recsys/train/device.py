"""The device engine: the compiled engine's per-rating AdaGrad as whole-batch tensor steps, for a GPU.

The same objective and update rule as recsys.train.compiled (fastai's sigmoid squash, squared error
plus `l2` times the squared norms of the rows each rating uses, LIBMF's row-wise AdaGrad, a learning
rate falling linearly over the epochs), but each step takes a batch of ratings at once: every rating
of the batch is scored from the rows as they were before the step, and its updates are added into
the rows (`index_add_`). A batch in which no user, item or implicit row occurs twice is exactly that
many of the compiled engine's steps one after another. Where a row repeats, its updates add up,
each scaled by the row's AdaGrad sum as the compiled engine would have it by then; only the
gradients are stale (Hogwild's races, made deterministic on the CPU: on a GPU the adds are atomic,
in no set order, so two runs, or a run and its resume, differ in the last bits). The ratings stay on the
device, each epoch draws its order there, and a step is the same few dozen kernels whatever the
batch size, so a GPU spends its time on the rows, not on Python. On the CPU it runs too (the tests'
path), never by default: the compiled engine is the CPU's.
"""

from typing import Any

import torch
from torch import Tensor, nn

from recsys.config import RunConfig
from recsys.data.encoding import RatingTensors
from recsys.errors import RecsysError
from recsys.evaluate.metrics import evaluate
from recsys.models import Factorisation, rating_model
from recsys.models.base import bag_vectors
from recsys.train.distributed import refuse_processes
from recsys.train.per_rating import ACCUMULATOR_START, epoch_learning_rate, member_seed

# An epoch in about STEPS_PER_EPOCH steps of MIN_BATCH to MAX_BATCH ratings: the fewer the steps, the
# fewer kernel launches, but the more often a popular row recurs within one step, its gradients stale.
# Validation RMSE at the ML-10M shape matched the compiled engine's with steps of 65,536 ratings and
# fell behind with 262,144 (docs/findings.md, "The device engine's batch").
MIN_BATCH = 1024
MAX_BATCH = 65_536
STEPS_PER_EPOCH = 64
# Epochs a member's seed leaves room for before two seeds could meet: its orders' seed is
# member_seed * EPOCH_SEEDS + epoch.
EPOCH_SEEDS = 1_000_003


def batch_size(n_ratings: int) -> int:
    """Ratings per step for an epoch of `n_ratings`."""
    return min(MAX_BATCH, max(MIN_BATCH, -(-n_ratings // STEPS_PER_EPOCH)))


class DeviceTables:
    """One model's tables (trained in place) and AdaGrad's per-row sums for each, on their device.

    SVD++'s bag rows step for each user and batch, where the compiled engine steps them once per user
    and epoch on the sum of the user's ratings' gradients. So that their AdaGrad sums still grow as
    the compiled engine's do, each step's square joins them scaled by the user's training ratings
    over its ratings in the step (`user_ratings`): the sum of the parts' squares then estimates the
    square of their sum. Unscaled, the sums grew too slowly and the rows overshot once `lr` was 0.07
    or more (docs/findings.md, "The device engine's batch")."""

    def __init__(
        self, tables: Factorisation, y_range: tuple[float, float] | None, user_ratings: Tensor | None = None
    ) -> None:
        self.tables = tables
        self.user_ratings = user_ratings
        named = {
            "user_factors": tables.user_factors,
            "item_factors": tables.item_factors,
            "user_bias": tables.user_bias,
            "item_bias": tables.item_bias,
            "implicit_factors": tables.implicit and tables.implicit.factors,
        }
        self.accumulators = {
            name: torch.full((len(table),), ACCUMULATOR_START, device=table.device)
            for name, table in named.items()
            if table is not None
        }
        self.low, self.high = y_range if y_range is not None else (0.0, 1.0)
        self.squash = y_range is not None

    def step(
        self, users: Tensor, items: Tensor, values: Tensor, lr: float, l2: float, twice_weight: float
    ) -> Tensor:
        """One step on the ratings (users[j], items[j], values[j]), each scored from the rows as they
        were before it; the ratings' summed squared error (a device scalar, not read here)."""
        user_factors, item_factors, user_bias, item_bias, implicit = self.tables
        decay = 2 * l2
        user_rows, item_rows = user_factors[users], item_factors[items]
        whole_users = user_rows
        if implicit is not None:
            # Each step gathers the whole bag of each of its users, so an epoch reads a busy user's bag
            # once per step it meets the user in; finding the users and their entries waits for a GPU.
            bags = implicit.bags(users)
            vectors = bag_vectors(implicit.factors, bags)
            whole_users = user_rows + vectors[bags.inverse]
        score = (whole_users * item_rows).sum(dim=1)
        if user_bias is not None and item_bias is not None:
            score = score + user_bias[users, 0] + item_bias[items, 0]
        if self.squash:
            span = self.high - self.low
            sigmoid = torch.sigmoid(score)
            error = self.low + span * sigmoid - values
            gradient = twice_weight * span * error * sigmoid * (1 - sigmoid)
        else:
            error = score - values
            gradient = twice_weight * error
        gradient_column = gradient[:, None]
        user_repeats, item_repeats = _Repeats(users), _Repeats(items)
        user_gradients = gradient_column * item_rows + decay * user_rows
        item_gradients = gradient_column * whole_users + decay * item_rows
        self._rows_step(user_factors, "user_factors", users, user_repeats, user_gradients, lr)
        self._rows_step(item_factors, "item_factors", items, item_repeats, item_gradients, lr)
        if user_bias is not None and item_bias is not None:
            user_bias_gradients = gradient_column + decay * user_bias[users]
            item_bias_gradients = gradient_column + decay * item_bias[items]
            self._rows_step(user_bias, "user_bias", users, user_repeats, user_bias_gradients, lr)
            self._rows_step(item_bias, "item_bias", items, item_repeats, item_bias_gradients, lr)
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
                implicit.factors,
                "implicit_factors",
                bags.columns,
                _Repeats(bags.columns),
                row_gradients,
                lr,
                scale,
            )
        return (error * error).sum()

    def _rows_step(
        self,
        table: Tensor,
        name: str,
        rows: Tensor,
        repeats: "_Repeats",
        gradients: Tensor,
        lr: float,
        scale: Tensor | None = None,
    ) -> None:
        """AdaGrad on `table`'s `rows`: each update by its gradient over the root of the row's sum as
        the compiled engine would have it by then (the sum before the step plus the squares of the
        row's earlier updates in the batch), then the updates' mean squares over the factors (times
        `scale`, where given) join the sums. A row met k times in a batch so takes k steps of falling
        size, as it would one after another; only its gradients are stale (from the rows before the
        step)."""
        accumulators = self.accumulators[name]
        width = table.shape[1]  # a factor row's mean square over its factors; a bias's own square
        squares = (gradients * gradients).sum(dim=1) / width
        if scale is not None:
            squares = squares * scale
        steps = lr / (accumulators[rows] + repeats.earlier(squares)).sqrt()
        table.index_add_(0, rows, -steps[:, None] * gradients)
        accumulators.index_add_(0, rows, squares)


class _Repeats:
    """Where a step's rows repeat: the entries sorted by row (stably, so each row's entries keep their
    order in the batch) and where each entry's run of equal rows starts. Found once per side, for its
    factor and bias tables both."""

    def __init__(self, rows: Tensor) -> None:
        self.order = torch.argsort(rows, stable=True)
        sorted_rows = rows[self.order]
        first = torch.ones_like(sorted_rows, dtype=torch.bool)
        first[1:] = sorted_rows[1:] != sorted_rows[:-1]
        positions = torch.arange(len(rows), device=rows.device)
        self.run_start = torch.cummax(torch.where(first, positions, 0), dim=0).values

    def earlier(self, squares: Tensor) -> Tensor:
        """For each entry, the sum of `squares` of the entries before it in the batch with its row (0
        for a row's first): a segmented exclusive prefix sum, in float64 so that the differences of
        long running sums keep their digits."""
        sorted_squares = squares[self.order].double()
        before = torch.cumsum(sorted_squares, dim=0) - sorted_squares
        earlier = torch.empty_like(before)
        earlier[self.order] = before - before[self.run_start]
        return earlier.to(squares.dtype)


class DeviceEpochs:
    """Epochs of whole-batch AdaGrad steps for the factorisation models on `config.device`; an ensemble's
    members one after another, each over its own order."""

    def __init__(self, model: nn.Module, train: RatingTensors, config: RunConfig) -> None:
        refuse_processes()
        self.model = model
        self.members = []
        user_ratings = None  # each user's training ratings, for SVD++'s bags
        for member in rating_model(model).member_models():
            tables = member.factorisation()
            if tables is None:
                raise RecsysError(f"`engine` device cannot train {config.model}; use `engine` autograd")
            if tables.implicit is not None and user_ratings is None:
                user_ratings = torch.bincount(train.x[:, 0], minlength=len(tables.user_factors))
            self.members.append(DeviceTables(tables, member.y_range, user_ratings))
        self.users, self.items = train.x[:, 0].contiguous(), train.x[:, 1].contiguous()
        self.values = train.y.to(self.members[0].tables.user_factors.dtype)
        self.config = config
        self.batch_size = batch_size(len(train))
        self.twice_weight = 2 / (config.rating_unit or 1.0) ** 2  # errors in units of five stars

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
        lr = epoch_learning_rate(self.config.lr, epoch, self.config.epochs)
        device = self.values.device
        squared_error = torch.zeros((), device=device)
        with torch.no_grad():
            for place, member in enumerate(self.members):
                seed = (member_seed(self.config.seed, place) * EPOCH_SEEDS + epoch) % 2**63
                drawn = torch.Generator(device).manual_seed(seed)
                order = torch.randperm(len(self.values), generator=drawn, device=device)
                for start in range(0, len(order), self.batch_size):
                    batch = order[start : start + self.batch_size]
                    squared_error += member.step(
                        self.users[batch],
                        self.items[batch],
                        self.values[batch],
                        lr,
                        self.config.l2,
                        self.twice_weight,
                    )
        ratings = len(self.values) * len(self.members)
        return float(squared_error) / ratings, ratings  # read once an epoch: a device sync point

    def evaluate(self, valid: RatingTensors) -> dict[str, float]:
        """RMSE and MAE on `valid` (an ensemble's: its members' mean, as its `forward`)."""
        return evaluate(self.model, valid)

    def close(self) -> None:
        """Nothing to give back: the tables were trained in place."""
