"""The compiled training path: whole epochs of per-rating SGD for the factorisation models.

rating = squash(user_factors[u] . item_factors[i] + user_bias[u] + item_bias[i]) with fastai's
sigmoid `y_range` squash (dot, dotbias; svdpp adds its implicit vector to the user's, see
`CompiledEpochs`), trained rating by rating in one numba call per block of ratings instead
of one autograd step per batch. The objective is the autograd path's: squared error plus `l2`
times the squared norms of the rows each rating uses. Steps follow LIBMF's row-wise AdaGrad (one
accumulated squared gradient per row and table, so a row's step shrinks as it is trained) with a
learning rate that falls linearly over the epochs.

Parallelism without locks or races: users and items are cut into `grid` groups each, runs of
consecutive indices holding about equal numbers of ratings (runs, so that two threads never write
neighbouring entries of one cache line), which cuts the ratings into grid x grid blocks. A stratum
is `grid` blocks that share no user and no item (LIBMF's and DSGD's scheme); its blocks run on any
number of threads at once, the strata in an order drawn each epoch, each block once its user and
item groups have finished the strata before it (the same order of updates per row as running the
strata one after another, without waiting at a barrier between them). Each block's
ratings are shuffled once, by a generator keyed on the seed and the block, so the result depends on
the data, the seed and the grid, never on the number of threads or how the blocks were shared out.
The grid is chosen from the number of ratings alone: small data trains as one block (a full shuffle,
the most accurate), large data in blocks of about `RATINGS_PER_BLOCK` ratings.
"""

import math
import threading
from collections.abc import Callable, Sequence
from functools import partial
from itertools import pairwise

import numpy as np
import torch
from torch import Tensor

from recsys.models import Factorisation
from recsys.train.jit import compiled
from recsys.train.per_rating import ACCUMULATOR_START
from recsys.train.prefetch import prefetch_row
from recsys.train.row_layout import CACHE_LINE, FLOATS_PER_LINE, padded_width
from recsys.train.threads import side_by_side

# A block's ratings, aimed at: enough that a block's work dwarfs handing it to a thread, few enough
# that the grid has blocks to share out (and its rows stay in cache).
RATINGS_PER_BLOCK = 50_000
MAX_GRID = 32
# How many ratings ahead to ask the CPU for the user and item rows (their cache misses overlap).
_PREFETCH_AHEAD = 4


def grid_size(n_ratings: int) -> int:
    """User and item groups for `n_ratings`: 1 (one fully shuffled block) for small data, else about
    `RATINGS_PER_BLOCK` ratings per block, at most MAX_GRID."""
    return max(1, min(MAX_GRID, math.isqrt(n_ratings // RATINGS_PER_BLOCK)))


@compiled(fastmath=True)
def _next_random(state: np.ndarray) -> np.uint64:
    """splitmix64: the next 64 random bits from a one-entry uint64 state."""
    state[0] += np.uint64(0x9E3779B97F4A7C15)
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))  # type: ignore[no-any-return]


@compiled(fastmath=True)
def _implicit_vector(
    out: np.ndarray,
    implicit_factors: np.ndarray,
    columns: np.ndarray,
    weights: np.ndarray,
    first: int,
    last: int,
) -> None:
    """Write the weighted sum of the implicit rows of a user's bag, columns[first:last] with those
    `weights`, into `out`."""
    out[:] = 0
    for k in range(first, last):
        weight = weights[k]
        for c in range(out.shape[0]):
            out[c] += weight * implicit_factors[columns[k], c]


@compiled(fastmath=True, inline=True)
def _error_and_gradient(
    score: np.float32,
    value: np.float32,
    squash: bool,
    low: np.float32,
    span: np.float32,
    twice_weight: np.float32,
) -> tuple[np.float32, np.float32]:
    """A rating's error and d(weighted squared error)/d(score), through fastai's sigmoid squash
    into (low, low + span) where `squash`."""
    one = np.float32(1)
    if squash:
        sigmoid = one / (one + np.exp(-score))
        error = low + span * sigmoid - value
        return error, twice_weight * error * span * sigmoid * (one - sigmoid)
    error = score - value
    return error, twice_weight * error


@compiled(fastmath=True, inline=True)
def _bias_step(
    bias: np.ndarray,
    sums: np.ndarray,
    row: int,
    gradient: np.float32,
    decay: np.float32,
    learning_rate: np.float32,
) -> None:
    """One AdaGrad step of a bias: the rating's gradient plus its penalty's."""
    row_gradient = gradient + decay * bias[row]
    bias[row] -= learning_rate * row_gradient / np.sqrt(sums[row])
    sums[row] += row_gradient * row_gradient


@compiled(fastmath=True, inline=True)
def _step_terms(
    learning_rate: np.float32, row_sum: np.float32, decay: np.float32, gradient: np.float32
) -> tuple[np.float32, np.float32]:
    """A row's AdaGrad step against the other row `other` of its rating, as keep * row + take * other:
    row - step * (gradient * other + decay * row), with the row's step lr / sqrt(its sum)."""
    step = learning_rate / np.sqrt(row_sum)
    return np.float32(1) - step * decay, -step * gradient


@compiled(fastmath=True, inline=True)
def _squared_norm(
    a: np.float32, x_norm: np.float32, cross: np.float32, b: np.float32, y_norm: np.float32
) -> np.float32:
    """|a x + b y|^2 from |x|^2, x . y and |y|^2 (never below 0, which rounding could give): a row's
    squared gradient from the sums its rating's dot product loop gathers, so that the update loop
    need not form the gradient."""
    return max(a * a * x_norm + 2 * a * b * cross + b * b * y_norm, np.float32(0))  # type: ignore[no-any-return]


@compiled(fastmath=True)
def _train_blocks(
    tables: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    accumulators: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    ratings: tuple[np.ndarray, np.ndarray, np.ndarray],
    offsets: np.ndarray,
    blocks: np.ndarray,
    squared_errors: np.ndarray,
    settings: tuple[float, float, float, float, bool, float, float],
    implicit: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    paired: bool,
) -> None:
    """Train on each block in `blocks`, rating by rating in the block's order; each block's summed
    squared error goes to `squared_errors[block]`.

    paired: two neighbouring ratings that share neither user nor item (without implicit factors)
    train side by side, the two ratings' chains of dependent steps overlapping in the CPU: the same
    steps as one after the other, up to the rounding of sums that fastmath orders differently
    (about 17% less CPU an epoch at the ML-10M shape; docs/performance.md).

    tables: (user_factors, item_factors, user_bias, item_bias), biases empty for a model without;
    accumulators: AdaGrad's per-row sums for each table (same order); ratings: (users, items,
    values), block b's ratings at offsets[b]:offsets[b + 1]; settings: (lr, l2, low, high, squash,
    the model's number of factors, the weight of a squared error: 1 / rating unit squared);
    implicit: SVD++'s (implicit_factors, their AdaGrad sums, the users' bags: columns, weights and
    where each user's starts), all empty for a model without. With them each block is one user's
    ratings (block b is user b): the user's implicit vector is summed once at the block's start,
    held while its ratings train, and its rows then take the block's summed gradient in one step
    each.
    """
    user_factors, item_factors, user_bias, item_bias = tables
    user_sums, item_sums, user_bias_sums, item_bias_sums = accumulators
    implicit_factors, implicit_sums, bag_columns, bag_weights, bag_starts = implicit
    users, items, values = ratings
    lr, l2, low, high, squash, factor_count, error_weight = settings
    learning_rate, decay, span = np.float32(lr), np.float32(2 * l2), np.float32(high - low)
    # d(weight * error^2)/d(prediction): the squared error's 2 times its weight (1 / rating unit^2).
    low32, twice_weight = np.float32(low), np.float32(2 * error_weight)
    # A row's accumulator takes the mean of its squared gradient over the model's factors.
    per_factor = np.float32(1 / factor_count)
    n_factors = user_factors.shape[1]  # padded: the columns past the model's stay zero
    has_bias = user_bias.shape[0] > 0
    has_implicit = implicit_factors.shape[0] > 0
    # The user's implicit vector and its gradient summed over the block (zero without implicit factors).
    implicit_vector = np.zeros(n_factors, np.float32)
    implicit_gradient = np.zeros(n_factors, np.float32)
    for block in blocks:
        start, end = offsets[block], offsets[block + 1]
        total = 0.0
        if has_implicit:
            first, last = bag_starts[block], bag_starts[block + 1]
            _implicit_vector(implicit_vector, implicit_factors, bag_columns, bag_weights, first, last)
            implicit_gradient[:] = 0
        j, fetched = start, start
        while j < end:
            # Ask for the rows of the ratings a few ahead, each once (a pair takes two at a time).
            while fetched < min(j + _PREFETCH_AHEAD + 2, end):
                prefetch_row(user_factors, users[fetched])
                prefetch_row(item_factors, items[fetched])
                fetched += 1
            user, item = users[j], items[j]
            if paired and not has_implicit and j + 1 < end and users[j + 1] != user and items[j + 1] != item:
                user2, item2 = users[j + 1], items[j + 1]
                score, score2 = np.float32(0), np.float32(0)
                user_norm, item_norm = np.float32(0), np.float32(0)
                user_norm2, item_norm2 = np.float32(0), np.float32(0)
                for c in range(n_factors):
                    old_user, old_item = user_factors[user, c], item_factors[item, c]
                    old_user2, old_item2 = user_factors[user2, c], item_factors[item2, c]
                    score += old_user * old_item
                    score2 += old_user2 * old_item2
                    user_norm += old_user * old_user
                    item_norm += old_item * old_item
                    user_norm2 += old_user2 * old_user2
                    item_norm2 += old_item2 * old_item2
                dot, dot2 = score, score2
                if has_bias:
                    score += user_bias[user] + item_bias[item]
                    score2 += user_bias[user2] + item_bias[item2]
                error, gradient = _error_and_gradient(score, values[j], squash, low32, span, twice_weight)
                error2, gradient2 = _error_and_gradient(
                    score2, values[j + 1], squash, low32, span, twice_weight
                )
                total += float(error * error)
                total += float(error2 * error2)
                user_keep, user_take = _step_terms(learning_rate, user_sums[user], decay, gradient)
                item_keep, item_take = _step_terms(learning_rate, item_sums[item], decay, gradient)
                user_keep2, user_take2 = _step_terms(learning_rate, user_sums[user2], decay, gradient2)
                item_keep2, item_take2 = _step_terms(learning_rate, item_sums[item2], decay, gradient2)
                for c in range(n_factors):
                    old_user, old_item = user_factors[user, c], item_factors[item, c]
                    user_factors[user, c] = user_keep * old_user + user_take * old_item
                    item_factors[item, c] = item_keep * old_item + item_take * old_user
                    old_user, old_item = user_factors[user2, c], item_factors[item2, c]
                    user_factors[user2, c] = user_keep2 * old_user + user_take2 * old_item
                    item_factors[item2, c] = item_keep2 * old_item + item_take2 * old_user
                # g_user = gradient * item + decay * user, g_item = gradient * user + decay * item.
                user_sums[user] += _squared_norm(gradient, item_norm, dot, decay, user_norm) * per_factor
                item_sums[item] += _squared_norm(gradient, user_norm, dot, decay, item_norm) * per_factor
                user_sums[user2] += _squared_norm(gradient2, item_norm2, dot2, decay, user_norm2) * per_factor
                item_sums[item2] += _squared_norm(gradient2, user_norm2, dot2, decay, item_norm2) * per_factor
                if has_bias:
                    _bias_step(user_bias, user_bias_sums, user, gradient, decay, learning_rate)
                    _bias_step(item_bias, item_bias_sums, item, gradient, decay, learning_rate)
                    _bias_step(user_bias, user_bias_sums, user2, gradient2, decay, learning_rate)
                    _bias_step(item_bias, item_bias_sums, item2, gradient2, decay, learning_rate)
                j += 2
                continue
            # Rows indexed in place, never sliced: a slice is a reference-counted view (an atomic
            # increment and decrement per rating). The user's whole vector is user + implicit.
            score, dot = np.float32(0), np.float32(0)
            user_norm, item_norm, whole_norm = np.float32(0), np.float32(0), np.float32(0)
            for c in range(n_factors):
                old_user, old_item = user_factors[user, c], item_factors[item, c]
                whole_user = old_user + implicit_vector[c]
                score += whole_user * old_item
                dot += old_user * old_item
                user_norm += old_user * old_user
                item_norm += old_item * old_item
                whole_norm += whole_user * whole_user
            whole_dot = score
            if has_bias:
                score += user_bias[user] + item_bias[item]
            error, gradient = _error_and_gradient(score, values[j], squash, low32, span, twice_weight)
            total += float(error * error)
            # g_user = gradient * item + decay * user, g_item = gradient * whole_user + decay * item.
            user_square = _squared_norm(gradient, item_norm, dot, decay, user_norm)
            item_square = _squared_norm(gradient, whole_norm, whole_dot, decay, item_norm)
            # Row-wise AdaGrad (LIBMF's): a step scaled by the row's accumulated squared gradient so
            # far, then the mean squared gradient of this step joins it; one pass over the factors.
            user_keep, user_take = _step_terms(learning_rate, user_sums[user], decay, gradient)
            item_keep, item_take = _step_terms(learning_rate, item_sums[item], decay, gradient)
            for c in range(n_factors):
                old_user, old_item = user_factors[user, c], item_factors[item, c]
                user_factors[user, c] = user_keep * old_user + user_take * old_item
                item_factors[item, c] = item_keep * old_item + item_take * (old_user + implicit_vector[c])
                implicit_gradient[c] += gradient * old_item
            user_sums[user] += user_square * per_factor
            item_sums[item] += item_square * per_factor
            if has_bias:
                _bias_step(user_bias, user_bias_sums, user, gradient, decay, learning_rate)
                _bias_step(item_bias, item_bias_sums, item, gradient, decay, learning_rate)
            j += 1
        if has_implicit:
            # Each rating's penalty weighs a row of the user's bag by its weight squared (1 / |N(u)| for
            # a rated item: the autograd objective's).
            block_ratings = np.float32(end - start)
            for k in range(first, last):
                row, weight = bag_columns[k], bag_weights[k]
                row_decay = decay * block_ratings * weight * weight
                step = learning_rate / np.sqrt(implicit_sums[row])
                square = np.float32(0)
                for c in range(n_factors):
                    row_gradient = weight * implicit_gradient[c] + row_decay * implicit_factors[row, c]
                    implicit_factors[row, c] -= step * row_gradient
                    square += row_gradient * row_gradient
                implicit_sums[row] += square * per_factor
        squared_errors[block] = total


@compiled(fastmath=True)
def _predictions(
    tables: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    users: np.ndarray,
    items: np.ndarray,
    settings: tuple[float, float, float, float, bool, float, float],
    out: np.ndarray,
) -> None:
    """Write the model's prediction for each pair (users[j], items[j]) into out[j] (the forward of
    the model the tables belong to, without a trip through torch).

    The score is written out here as in `_train_blocks` on purpose: a shared helper, even one numba
    inlines, made the training kernel's epoch ~35% slower.
    """
    user_factors, item_factors, user_bias, item_bias = tables
    _, _, low, high, squash, _, _ = settings
    has_bias = user_bias.shape[0] > 0
    for j in range(users.shape[0]):
        user, item = users[j], items[j]
        score = np.float32(0)
        for c in range(user_factors.shape[1]):
            score += user_factors[user, c] * item_factors[item, c]
        if has_bias:
            score += user_bias[user] + item_bias[item]
        out[j] = low + (high - low) / (1 + np.exp(-score)) if squash else score


@compiled(fastmath=True)
def _shuffle_blocks(
    ratings: tuple[np.ndarray, np.ndarray, np.ndarray], offsets: np.ndarray, seed: int, first: int, last: int
) -> None:
    """Shuffle the ratings of blocks first..last-1 in place (Fisher-Yates, a splitmix64 stream per
    block, so a block's order depends on the seed and the block alone)."""
    users, items, values = ratings
    state = np.empty(1, np.uint64)
    for block in range(first, last):
        start, end = offsets[block], offsets[block + 1]
        state[0] = np.uint64(seed) ^ (np.uint64(block) * np.uint64(0xD1B54A32D192ED03))
        for j in range(end - 1, start, -1):
            k = start + np.int64(_next_random(state) % np.uint64(j - start + 1))
            users[j], users[k] = users[k], users[j]
            items[j], items[k] = items[k], items[j]
            values[j], values[k] = values[k], values[j]


@compiled()
def _groups(ids: np.ndarray, n: int, grid: int) -> np.ndarray:
    """Each of `n` indices' group: `grid` runs of consecutive indices with about equal rating counts."""
    counts = np.zeros(n, np.int64)
    for j in range(ids.shape[0]):
        counts[ids[j]] += 1
    groups = np.empty(n, np.int64)
    before = 0
    for index in range(n):
        groups[index] = min(before * grid // max(ids.shape[0], 1), grid - 1)
        before += counts[index]
    return groups


@compiled()
def _count_blocks(
    ratings: tuple[np.ndarray, np.ndarray, np.ndarray],
    groups: tuple[np.ndarray, np.ndarray],
    item_grid: int,
    first: int,
    last: int,
    counts: np.ndarray,
) -> None:
    """Add how many of ratings first..last-1 fall in each block (user group * item_grid + item
    group) to `counts`."""
    users, items, _ = ratings
    user_groups, item_groups = groups
    for j in range(first, last):
        counts[user_groups[users[j]] * item_grid + item_groups[items[j]]] += 1


@compiled()
def _scatter_blocks(
    ratings: tuple[np.ndarray, np.ndarray, np.ndarray],
    groups: tuple[np.ndarray, np.ndarray],
    item_grid: int,
    first: int,
    last: int,
    positions: np.ndarray,
    out: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """Write ratings first..last-1 into `out` in their order, each at its block's next position."""
    users, items, values = ratings
    user_groups, item_groups = groups
    sorted_users, sorted_items, sorted_values = out
    for j in range(first, last):
        block = user_groups[users[j]] * item_grid + item_groups[items[j]]
        position = positions[block]
        sorted_users[position], sorted_items[position] = users[j], items[j]
        sorted_values[position] = values[j]
        positions[block] += 1


def _sorted_by_block(
    ratings: tuple[np.ndarray, np.ndarray, np.ndarray],
    groups: tuple[np.ndarray, np.ndarray],
    item_grid: int,
    n_blocks: int,
    threads: int,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """The ratings (users, items, values) in block order, keeping their order within a block, as
    32-bit ids and float32 values, and where each block starts (n_blocks + 1 offsets).

    A counting sort on `threads` threads, each over a run of the ratings: a run's ratings of a block
    go after those of the runs before it, so the result is the same on any number of threads.
    """
    n = len(ratings[0])
    runs = list(pairwise(n * part // threads for part in range(threads + 1)))
    counts = np.zeros((threads, n_blocks), np.int64)
    side_by_side(
        [
            partial(_count_blocks, ratings, groups, item_grid, first, last, row)
            for (first, last), row in zip(runs, counts, strict=True)
        ]
    )
    offsets = np.zeros(n_blocks + 1, np.int64)
    np.cumsum(counts.sum(axis=0), out=offsets[1:])
    # Where each run's ratings of each block start: after the block's ratings of the runs before.
    positions = offsets[:-1] + np.cumsum(counts, axis=0) - counts
    out = (np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.float32))
    side_by_side(
        [
            partial(_scatter_blocks, ratings, groups, item_grid, first, last, row, out)
            for (first, last), row in zip(runs, positions, strict=True)
        ]
    )
    return out, offsets


def draw_strata(grid: int, generator: torch.Generator) -> list[list[int]]:
    """An epoch's strata of a `grid` x `grid` cut, in an order drawn from `generator`: stratum s holds
    the blocks (g, (g + s) mod grid), which share no user and no item."""
    shifts = torch.randperm(grid, generator=generator).tolist()
    return [[g * grid + (g + s) % grid for g in range(grid)] for s in shifts]


@compiled(fastmath=True)
def _with_implicit(
    user_factors: np.ndarray, implicit: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
) -> np.ndarray:
    """Every user's whole vector: user_factors[u] + the weighted sum of its bag's implicit rows."""
    implicit_factors, _, columns, weights, starts = implicit
    vectors = user_factors.copy()
    implicit_vector = np.empty(user_factors.shape[1], np.float32)
    for user in range(user_factors.shape[0]):
        _implicit_vector(implicit_vector, implicit_factors, columns, weights, starts[user], starts[user + 1])
        for c in range(user_factors.shape[1]):
            vectors[user, c] += implicit_vector[c]
    return vectors


def load_kernels() -> None:
    """Load the kernels now (from numba's disk cache, else by compiling them) instead of on first use,
    which costs about half a second in a fresh process: numba sets itself up then."""
    model = Factorisation(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 1), torch.zeros(1, 1))
    # Strided columns of an (n, 2) tensor, as the trainer passes them (one row would be contiguous).
    x = torch.zeros(2, 2, dtype=torch.int64)
    epochs = CompiledEpochs(model, x[:, 0], x[:, 1], torch.ones(2), (0.0, 1.0), 0.0, seed=0, threads=1)
    epochs.run_epoch(0.0, torch.Generator())
    epochs.predict(x[:, 0], x[:, 1])


def _padded(table: np.ndarray) -> np.ndarray:
    """`table` laid out so that its rows start on 64-byte cache lines and span whole lines (zeros
    past its columns): a row then spans the fewest lines and the vectorised loops have no remainder.
    A table laid out so already is trained in place (a copy of 5M users' rows was gigabytes); any
    other is copied, and written back with `write_back`."""
    rows, width = table.shape
    if width % FLOATS_PER_LINE == 0 and table.flags.c_contiguous and table.ctypes.data % CACHE_LINE == 0:
        return table
    widened = padded_width(width)
    buffer = np.zeros(rows * widened + FLOATS_PER_LINE, np.float32)
    start = (-buffer.ctypes.data % CACHE_LINE) // buffer.itemsize
    padded = buffer[start : start + rows * widened].reshape(rows, widened)
    padded[:, :width] = table
    return padded


def write_back(table: np.ndarray, padded: np.ndarray) -> None:
    """A model's `table` given the values of its working copy `padded` (`_padded`'s): nothing to do
    where it was trained in place."""
    if padded is not table:
        table[:] = padded[:, : table.shape[1]]


def _accumulator(table: np.ndarray) -> np.ndarray:
    """AdaGrad's per-row sums for `table`, each at ACCUMULATOR_START (empty for an empty table)."""
    return np.full(len(table), ACCUMULATOR_START, np.float32)


def _as_array(table: Tensor | None, *, bias: bool = False) -> np.ndarray:
    """A writable float32 numpy view of a CPU table (a bias table's one column flattened to 1-d);
    empty for None."""
    if table is None:
        return np.empty(0, np.float32)
    if table.dtype != torch.float32 or table.device.type != "cpu" or not table.is_contiguous():
        raise ValueError("the compiled path trains contiguous float32 CPU tables")
    array = table.detach().numpy()
    return array.reshape(len(array)) if bias else array


class CompiledEpochs:
    """Runs epochs of per-rating AdaGrad over `tables` on up to `threads` threads.

    With implicit factors (SVD++) each block is one user's ratings, the users in an order drawn each
    epoch, on one thread: the rows a user's implicit vector sums are shared with every other user.
    """

    def __init__(
        self,
        tables: Factorisation,
        users: Tensor,
        items: Tensor,
        values: Tensor,
        y_range: tuple[float, float] | None,
        l2: float,
        seed: int,
        threads: int,
        rating_unit: float = 1.0,
    ) -> None:
        # The model's factor tables, written back after every epoch from padded working copies (or
        # trained in place, where they are laid out as the copies would be).
        implicit = tables.implicit
        self.factor_tables = tuple(
            _as_array(table)
            for table in (tables.user_factors, tables.item_factors, implicit and implicit.factors)
            if table is not None
        )
        self.n_factors = self.factor_tables[0].shape[1]
        padded = [_padded(table) for table in self.factor_tables]
        self.tables = (
            padded[0],
            padded[1],
            _as_array(tables.user_bias, bias=True),
            _as_array(tables.item_bias, bias=True),
        )
        user_sums, item_sums, user_bias_sums, item_bias_sums = (_accumulator(t) for t in self.tables)
        self.accumulators = (user_sums, item_sums, user_bias_sums, item_bias_sums)
        self.has_implicit = implicit is not None
        if implicit is not None:
            implicit_factors = padded[2]
            bags = (
                implicit.columns.cpu().numpy(),
                implicit.weights.cpu().numpy().astype(np.float32),
                implicit.starts.cpu().numpy(),
            )
        else:
            implicit_factors = np.empty((0, padded[0].shape[1]), np.float32)
            bags = (np.empty(0, np.int64), np.empty(0, np.float32), np.empty(0, np.int64))
        self.implicit = (implicit_factors, _accumulator(implicit_factors), *bags)
        if len(values) >= 2**31:
            raise ValueError("the compiled path indexes ratings with 32-bit integers: fewer than 2**31")
        user_array, item_array = users.numpy(), items.numpy()
        n_users, n_items = len(self.tables[0]), len(self.tables[1])
        if self.has_implicit:
            # One block per user (its group is itself), every item in one group.
            self.grid = 1
            groups = (np.arange(n_users, dtype=np.int64), np.zeros(n_items, np.int64))
            item_grid, self.n_blocks = 1, n_users
        else:
            self.grid = grid_size(len(values))
            groups = (_groups(user_array, n_users, self.grid), _groups(item_array, n_items, self.grid))
            item_grid, self.n_blocks = self.grid, self.grid * self.grid
        # Private copies in block order (32-bit ids: the kernel reads 12 bytes a rating, not 20),
        # shuffled within their blocks once: reshuffling every epoch cost more time than the
        # accuracy it bought (docs/performance.md).
        # More threads than blocks in a stratum would only wait.
        self.threads = max(1, min(threads, self.grid))
        self.ratings, self.offsets = _sorted_by_block(
            (user_array, item_array, values.numpy()), groups, item_grid, self.n_blocks, self.threads
        )
        # Each thread shuffles a run of consecutive blocks (about equal numbers of ratings).
        cuts = [self.n_blocks * part // self.threads for part in range(self.threads + 1)]
        side_by_side(
            [
                partial(_shuffle_blocks, self.ratings, self.offsets, seed, first, last)
                for first, last in pairwise(cuts)
            ]
        )
        self.y_range = y_range
        self.l2 = l2
        self.error_weight = 1.0 / rating_unit**2  # errors in units of five stars, as the autograd loss
        self.paired = True  # two ratings side by side where they share no row (False: one at a time)
        self.stopped = False  # `stop`: no further blocks, for good (the run was interrupted)

    def _named_accumulators(self) -> dict[str, np.ndarray]:
        names = [*Factorisation._fields[:4], *(["implicit_factors"] if self.has_implicit else [])]
        return dict(zip(names, [*self.accumulators, self.implicit[1]], strict=False))

    def state_dict(self) -> dict[str, Tensor]:
        """AdaGrad's accumulators, to resume from (the ratings' order is re-derived)."""
        return {name: torch.from_numpy(array.copy()) for name, array in self._named_accumulators().items()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        for name, array in self._named_accumulators().items():
            array[:] = state[name].numpy()

    def run_epoch(self, lr: float, generator: torch.Generator) -> float:
        """One epoch at learning rate `lr` in an order drawn from `generator`: `train_epoch` after
        `draw_order`."""
        return self.train_epoch(lr, self.draw_order(generator))

    def draw_order(self, generator: torch.Generator) -> list[list[int]]:
        """The order of an epoch's blocks, from `generator` (so a seeded run repeats): the strata, each
        a list of blocks that share no row; with implicit factors, one list of the users' blocks."""
        if self.has_implicit:
            return [torch.randperm(self.n_blocks, generator=generator).tolist()]
        return draw_strata(self.grid, generator)

    def train_epoch(self, lr: float, order: list[list[int]]) -> float:
        """One epoch at learning rate `lr`, the blocks in `order` (`draw_order`'s); the mean squared
        error of the ratings as they were met."""
        squared_errors = np.zeros(self.n_blocks)
        settings = self._settings(lr)

        def train(blocks: Sequence[int] | np.ndarray) -> None:
            _train_blocks(
                self.tables,
                self.accumulators,
                self.ratings,
                self.offsets,
                np.asarray(blocks, np.int64),
                squared_errors,
                settings,
                self.implicit,
                self.paired,
            )

        if self.threads == 1:
            for stratum in order:  # a call a stratum, so that a stop takes effect between them
                if self.stopped:
                    break
                train(stratum)
        else:
            run_strata(order, self.grid, self.threads, train, lambda: self.stopped)
        for table, padded in zip(self.factor_tables, (*self.tables[:2], self.implicit[0]), strict=False):
            write_back(table, padded)
        return float(squared_errors.sum()) / len(self.ratings[2])

    def stop(self) -> None:
        """Take no further blocks: an ensemble's member trains on its own thread, which an interruption
        of the run (Ctrl-C in a notebook) does not reach, and had trained the rest of its epoch on."""
        self.stopped = True

    def _settings(self, lr: float) -> tuple[float, float, float, float, bool, float, float]:
        low, high = self.y_range if self.y_range is not None else (0.0, 1.0)
        # Floats throughout, whatever the caller's types: numba compiles one kernel per argument type.
        return (
            float(lr),
            float(self.l2),
            float(low),
            float(high),
            self.y_range is not None,
            float(self.n_factors),
            float(self.error_weight),
        )

    def predict(self, users: Tensor, items: Tensor) -> Tensor:
        """The current tables' predictions for the pairs (users[j], items[j]), float32."""
        tables = self.tables
        if self.has_implicit:  # the users' whole vectors in place of their own factors
            tables = (_with_implicit(tables[0], self.implicit), *tables[1:])
        out = np.empty(len(users), np.float32)
        _predictions(tables, users.numpy(), items.numpy(), self._settings(0.0), out)
        return torch.from_numpy(out)


def run_strata(
    strata: list[list[int]],
    grid: int,
    threads: int,
    train: Callable[[Sequence[int]], None],
    stopped: Callable[[], bool] = lambda: False,
) -> None:
    """The strata's blocks (of a `grid` x `grid` cut) on `threads` threads, each taken by whichever
    thread is free (a thread slowed by other processes takes fewer), without a barrier between
    strata: a block starts once its user group and its item group have finished every earlier
    stratum. Each row then sees the same updates in the same order as with strata run one after
    another, so the result is the same; a thread that finishes early starts on the next stratum.
    `stopped` is asked before each block: once true, the threads take no more."""
    ready = threading.Condition()
    # Strata finished so far by each user group and by each item group.
    users_done, items_done = [0] * grid, [0] * grid
    taken = [[False] * grid for _ in strata]  # by stratum, then user group
    first_open = [0]  # the earliest stratum with a block not yet taken
    failed = [False]  # a block raised: the others stop taking blocks instead of waiting on it

    def take() -> tuple[int, int] | None:
        with ready:
            while True:
                if failed[0] or stopped():
                    return None
                while first_open[0] < len(strata) and all(taken[first_open[0]]):
                    first_open[0] += 1
                if first_open[0] == len(strata):
                    return None
                for k in range(first_open[0], len(strata)):
                    for group in range(grid):
                        item_group = strata[k][group] % grid
                        if not taken[k][group] and users_done[group] == k == items_done[item_group]:
                            taken[k][group] = True
                            return k, group
                ready.wait()

    def worker() -> None:
        while (next_block := take()) is not None:
            k, group = next_block
            try:
                train([strata[k][group]])
            except BaseException:
                with ready:
                    failed[0] = True
                    ready.notify_all()
                raise
            with ready:
                users_done[group] += 1
                items_done[strata[k][group] % grid] += 1
                ready.notify_all()

    def stop() -> None:  # interrupted: no more blocks (an assignment, so without the lock)
        failed[0] = True

    side_by_side([worker] * threads, stop)
