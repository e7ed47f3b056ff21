"""Implicit ALS (`ials`): Hu, Koren and Volinsky's weighted matrix factorisation, one side at a time.

Every user-item cell is fitted: 1 where the user interacted (or rated the item at all), weighing c =
1 + alpha * strength, and 0 elsewhere, weighing 1. With the items fixed each user's row is a ridge
regression over every item, whose k x k system is the items' Gram matrix (shared by all users) plus
a term per positive only, so an epoch costs the positives and never a dense user x item matrix; then
the items likewise. A row is solved by a few steps of conjugate gradient from its last value
(`CG_STEPS`, as the `implicit` library does), or exactly (Cholesky) with `steps` 0. Rows are solved
in parallel on numba's threads, each by one thread in a fixed order, so the result is the same on
any number of them.

The penalty on a row is `l2` times the row's weight in the loss, as Rendle et al. ("Revisiting the
performance of iALS", 2021) scale it: the unobserved cells' weight shared by every row plus its
positives' extra confidence, so a row with many interactions is held as firmly as its data is.
"""

import math

import numba
import numpy as np
import torch

from recsys.config import RunConfig
from recsys.data.encoding import RatingTensors
from recsys.models.base import RatingModel
from recsys.models.ranking import als_penalty
from recsys.train.interactions import ByRow, RankingEpochs
from recsys.train.jit import compiled
from recsys.train.threads import NumbaThreads

# Conjugate-gradient steps per row and epoch, from the row's last value: `implicit`'s default, whose
# rows then reach the exact solve's ranking quality on u1 (docs/findings.md).
CG_STEPS = 3


# Rows per task of the parallel solve, on average: each task allocates its scratch once for them all.
ROWS_PER_TASK = 256
# Row chunks the Gram matrix is summed over: fixed, so the sum's order is the same on any threads.
GRAM_CHUNKS = 64
# Floats between the solve's scratch vectors beyond their length (256 bytes, an unrolled loop's reach
# of vector registers): the vectors lie the same distance apart in every task, on every thread.
SCRATCH_GAP = 64


@compiled(parallel=True, fastmath=True)
def gram(table: np.ndarray) -> np.ndarray:
    """table.T @ table in float64: GRAM_CHUNKS partial sums over runs of rows, in parallel, added in
    a fixed order (BLAS's order can change with its threads)."""
    n, k = table.shape
    partial = np.zeros((GRAM_CHUNKS, k, k))
    for chunk in numba.prange(GRAM_CHUNKS):
        out = partial[chunk]
        for r in range(chunk * n // GRAM_CHUNKS, (chunk + 1) * n // GRAM_CHUNKS):
            for a in range(k):
                value = np.float64(table[r, a])
                for b in range(k):
                    out[a, b] += value * table[r, b]
    total = np.zeros((k, k))
    for chunk in range(GRAM_CHUNKS):
        total += partial[chunk]
    return total


@compiled(fastmath=True, inline=True)
def _times_system(
    out: np.ndarray,
    vector: np.ndarray,
    other: np.ndarray,
    other_gram: np.ndarray,
    lam: np.float32,
    others: np.ndarray,
    extras: np.ndarray,
    first: int,
    last: int,
) -> None:
    """out = (other_gram + lam I + sum over the row's positives t of extras[t] o_t o_t^T) @ vector,
    o_t = other[others[t]]: the row's system times `vector`, without forming it (float32)."""
    k = vector.shape[0]
    for a in range(k):
        total = lam * vector[a]
        for b in range(k):
            total += other_gram[a, b] * vector[b]
        out[a] = total
    for t in range(first, last):
        j = others[t]
        dot = np.float32(0)
        for a in range(k):
            dot += other[j, a] * vector[a]
        weight = extras[t] * dot
        for a in range(k):
            out[a] += weight * other[j, a]


@compiled(fastmath=True, inline=True)
def _exact_row(
    out: np.ndarray,
    other: np.ndarray,
    other_gram: np.ndarray,
    lam: float,
    others: np.ndarray,
    extras: np.ndarray,
    first: int,
    last: int,
) -> None:
    """The row's exact solution (a Cholesky solve in float64) written into `out`."""
    k = out.shape[0]
    system = other_gram.copy()
    rhs = np.zeros(k)
    for d in range(k):
        system[d, d] += lam
    for t in range(first, last):
        j = others[t]
        for a in range(k):
            rhs[a] += (1.0 + extras[t]) * other[j, a]
            for b in range(k):
                system[a, b] += extras[t] * other[j, a] * other[j, b]
    solution = np.linalg.solve(system, rhs)
    for a in range(k):
        out[a] = solution[a]


@compiled(parallel=True, fastmath=True)
def solve_side(
    rows: np.ndarray,
    other: np.ndarray,
    other_gram: np.ndarray,
    by_row: tuple[np.ndarray, np.ndarray, np.ndarray],
    alpha: float,
    regularisation: np.ndarray,
    steps: int,
) -> None:
    """Refit every row of `rows` given `other` (whose Gram matrix is `other_gram`), in place: row r
    minimises sum over every other-side j of c_rj (p_rj - rows[r] . other[j])^2 + regularisation[r]
    |rows[r]|^2, with p_rj 1 and c_rj 1 + alpha * strength for r's positives (`by_row`), else 0 and 1.
    `steps` 0: exactly (a Cholesky solve); else that many conjugate-gradient steps from rows[r], in
    float32 as the tables are (its sums over a row's positives then run twice as wide)."""
    starts, others, strengths = by_row
    n, k = rows.shape
    extras = (alpha * strengths).astype(np.float32)  # c - 1 of each positive
    gram32 = other_gram.astype(np.float32)
    # Tasks of consecutive rows with about equal work (a row costs its positives and its Gram
    # product): numba hands each thread a run of tasks, which a row's id order alone would leave
    # unequal where the popular items cluster.
    tasks = max(1, min(n, (n + ROWS_PER_TASK - 1) // ROWS_PER_TASK))
    work = np.cumsum(np.diff(starts) + k)
    bounds = np.searchsorted(work, np.linspace(0, work[-1] if n else 0, tasks + 1)[1:-1], side="right")
    bounds = np.concatenate((np.zeros(1, np.int64), bounds.astype(np.int64), np.full(1, n, np.int64)))
    for task in numba.prange(tasks):
        # The four vectors as rows of one array, a fixed distance apart. With four arrays of their
        # own, wherever the thread's allocator put them, LLVM's check of how far apart a loop's
        # stores and loads lie sent the loops down their vectorised or their scalar path (a sum in
        # another order): the rows came out differently on different threads and runs.
        scratch = np.empty((4, k + SCRATCH_GAP), np.float32)
        x, residual, direction, product = scratch[0, :k], scratch[1, :k], scratch[2, :k], scratch[3, :k]
        for r in range(bounds[task], bounds[task + 1]):
            first, last = starts[r], starts[r + 1]
            if steps == 0:
                _exact_row(rows[r], other, other_gram, regularisation[r], others, extras, first, last)
                continue
            lam = np.float32(regularisation[r])
            for a in range(k):
                x[a] = rows[r, a]
            # residual = rhs - system @ x: the Gram part, then each positive's c o - (c - 1)(o . x) o
            for a in range(k):
                total = lam * x[a]
                for b in range(k):
                    total += gram32[a, b] * x[b]
                residual[a] = -total
            for t in range(first, last):
                j = others[t]
                dot = np.float32(0)
                for a in range(k):
                    dot += other[j, a] * x[a]
                weight = np.float32(1) + extras[t] - extras[t] * dot
                for a in range(k):
                    residual[a] += weight * other[j, a]
            squared = np.float32(0)
            for a in range(k):
                direction[a] = residual[a]
                squared += residual[a] * residual[a]
            for _ in range(steps):
                if squared < 1e-20:
                    break
                _times_system(product, direction, other, gram32, lam, others, extras, first, last)
                curvature = np.float32(0)
                for a in range(k):
                    curvature += direction[a] * product[a]
                step = squared / curvature
                next_squared = np.float32(0)
                for a in range(k):
                    x[a] += step * direction[a]
                    residual[a] -= step * product[a]
                    next_squared += residual[a] * residual[a]
                for a in range(k):
                    direction[a] = residual[a] + (next_squared / squared) * direction[a]
                squared = next_squared
            for a in range(k):
                rows[r, a] = x[a]


@compiled(parallel=True, fastmath=True)
def _positive_terms(
    users: np.ndarray, items: np.ndarray, by_user: tuple[np.ndarray, np.ndarray, np.ndarray], alpha: float
) -> float:
    """The loss's terms of the positive cells beyond the weight-1 fit to 0 that the Gram matrices give
    for every cell: c (1 - s)^2 - s^2 summed over them. Summed by user, then over the users in order:
    a reduction over the threads would sum in an order that depends on their number."""
    starts, others, strengths = by_user
    per_user = np.zeros(users.shape[0])
    for u in numba.prange(users.shape[0]):
        for t in range(starts[u], starts[u + 1]):
            j = others[t]
            score = 0.0
            for a in range(users.shape[1]):
                score += users[u, a] * items[j, a]
            confidence = 1.0 + alpha * strengths[t]
            per_user[u] += confidence * (1.0 - score) ** 2 - score**2
    total = 0.0  # a loop, not per_user.sum(), which numba also splits over the threads here
    for u in range(users.shape[0]):
        total += per_user[u]
    return total


def row_strengths(by_row: ByRow) -> np.ndarray:
    """The sum of each row's positives' strengths (0 for a row without one): what its weight in the
    loss, and so its penalty (recsys.models.ranking.als_penalty), grows with."""
    return np.add.reduceat(np.append(by_row.strengths, 0), by_row.starts[:-1]) * (np.diff(by_row.starts) > 0)


class ALSEpochs(RankingEpochs):
    """Epochs of implicit ALS over a model's two factor tables (recsys.train.engine's protocol).

    Every rated item is a 1, a choice the user made; a rating at or above the threshold is held more
    firmly the higher it is. Rated items below it counted as 0s scored lower on validation
    (docs/findings.md)."""

    reads_choices = True

    def __init__(
        self, model: RatingModel, train: RatingTensors, valid: RatingTensors, config: RunConfig, threads: int
    ) -> None:
        super().__init__(model, train, valid, config)
        self.alpha = float(config.alpha)
        self.users = self.tables.user_factors.detach().numpy()  # views: written in place
        self.items = self.tables.item_factors.detach().numpy()
        n_users, n_items = len(self.users), len(self.items)
        # The penalty per cell of weight: l2 scaled to the weight of an average row's cells.
        self.user_penalty = als_penalty(config.l2, self.alpha, row_strengths(self.positives.by_user), n_items)
        self.item_penalty = als_penalty(config.l2, self.alpha, row_strengths(self.positives.by_item), n_users)
        self.threads = NumbaThreads(threads)
        self.item_gram = gram(self.items)  # kept from each epoch's loss for the next epoch's users

    def run_epoch(self, epoch: int, generator: torch.Generator, progress: bool) -> tuple[float, int]:
        """Users given items, then items given users: (the loss per positive, positives fitted)."""
        self.epoch = epoch
        by_user, by_item = self.positives
        solve_side(self.users, self.items, self.item_gram, by_user, self.alpha, self.user_penalty, CG_STEPS)
        user_gram = gram(self.users)
        solve_side(self.items, self.users, user_gram, by_item, self.alpha, self.item_penalty, CG_STEPS)
        self.item_gram = gram(self.items)
        return self._loss(user_gram, self.item_gram), self.positives.n_positives

    def _loss(self, user_gram: np.ndarray, item_gram: np.ndarray) -> float:
        """The weighted squared error over every cell, and the penalties, per positive (from the two
        tables' Gram matrices, `user_gram` and `item_gram`)."""
        every_cell = float(np.sum(user_gram * item_gram))  # the sum of every score squared
        fit = every_cell + _positive_terms(self.users, self.items, self.positives.by_user, self.alpha)
        penalty = float(self.user_penalty @ np.square(self.users, dtype=np.float64).sum(1)) + float(
            self.item_penalty @ np.square(self.items, dtype=np.float64).sum(1)
        )
        total = fit + penalty
        return total / self.positives.n_positives if math.isfinite(total) else math.inf

    def close(self) -> None:
        self.threads.restore()
