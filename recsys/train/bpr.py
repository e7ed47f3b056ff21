"""BPR (`bpr`): Rendle et al.'s Bayesian personalised ranking, by SGD over sampled triples.

For each positive pair (u, i) of an epoch an item j the user has no positive for is drawn, and the
model takes a step up the log-likelihood that u prefers i to j: log sigmoid(u . (i - j) + b_i - b_j),
less `l2` times the squared norms of the rows it used. The learning rate falls linearly over the
epochs, as the rating engine's does.

On threads without locks, and with the same result on any number of them, as the rating engine
(recsys.train.compiled): the positives are cut into a grid of user groups x item groups, and a
stratum's blocks, which share no user and no item, run at once. So that they keep sharing none, a
positive's negative is drawn from its own item group (from every item where the data is small
enough to be one block, as u1 is), and so the item groups are BPR's own, each a cross-section of
the catalogue (_dealt_groups). Each block draws its order and its negatives from a generator keyed
on the seed, the epoch and the block.

The epochs train working copies of the item rows and biases with the items renumbered group by group,
so that each group is a run of rows: dealt groups interleave the model's item ids, and two threads
then wrote the biases of different groups on the same cache lines (about a third of a two-thread
epoch at the ML-20M shape, docs/findings.md).
"""

from collections.abc import Sequence

import numpy as np
import torch

from recsys.config import RunConfig
from recsys.data.encoding import RatingTensors
from recsys.errors import RecsysError
from recsys.models.base import RatingModel
from recsys.train.compiled import (
    _groups,
    _next_random,
    _padded,
    _shuffle_blocks,
    _sorted_by_block,
    draw_strata,
    grid_size,
    run_strata,
    write_back,
)
from recsys.train.grouping import rows_of
from recsys.train.interactions import RankingEpochs
from recsys.train.jit import compiled
from recsys.train.per_rating import epoch_learning_rate
from recsys.train.prefetch import prefetch_row

# The pipeline's stage length in steps: a step's negative is drawn this many steps before it runs.
NEGATIVE_AHEAD = 4
# Items an item group holds at least (the grid is cut down to leave them): its positives' negatives
# are drawn from it.
MIN_GROUP_ITEMS = 256
# The longest run of a user's positives `_has` scans: a longer one is first halved down to this.
SCANNED_RUN = 32
# Draws of a negative for one positive before the positive is passed over: a user with positives
# for nearly every item of a group leaves few to draw.
NEGATIVE_TRIES = 16
# Below this, a running product of sigmoids (each above e^LOSS_TAIL, 1e-35) is turned into its
# logarithm before the next factor could take it under float64's smallest number. Below LOSS_TAIL,
# e^x nears float32's denormals, whose few digits would spoil the logarithm.
PRODUCT_FLOOR, LOSS_TAIL = 1e-250, -80.0


@compiled(fastmath=True, inline=True)
def _has(sorted_items: np.ndarray, first: int, last: int, item: int | np.int64) -> bool:
    """Whether `item` is among sorted_items[first:last]. A scan where the run is short, as a user's
    few positives in one item group are (one or two cache lines, where a binary search would jump);
    a binary search down to that length first, or a user with most of a group's items would cost each
    draw a scan of them all."""
    low, high = np.int64(first), np.int64(last)
    while high - low > SCANNED_RUN:
        middle = (low + high) // 2
        if sorted_items[middle] < item:
            low = middle + 1
        else:  # the first place at or past `item` is `middle` or before it
            high = middle + 1
    for place in range(low, high):
        if sorted_items[place] >= item:
            return bool(sorted_items[place] == item)
    return False


@compiled(fastmath=True, inline=True)
def _stride(state: np.ndarray, size: int) -> np.int64:
    """A step in 1..size-1 that shares no factor with `size` (1 for a block of one or two), drawn
    from `state`: stepping by it from any start meets each of `size` places once."""
    if size <= 2:
        return np.int64(1)
    while True:
        stride = np.int64(1 + _next_random(state) % np.uint64(size - 1))
        a, b = stride, np.int64(size)
        while b:
            a, b = b, a % b
        if a == 1:
            return stride


@compiled(fastmath=True, inline=True)
def _negative(
    state: np.ndarray,
    group_first: int,
    group_size: int,
    mask: np.uint64,
    user_items: np.ndarray,
    run: tuple[int, int],
) -> np.int64:
    """An item of the group group_first..group_first + group_size - 1 (in group order) that is not among
    the user's positives there, user_items[run[0]:run[1]], drawn from `state`; -1 after NEGATIVE_TRIES
    draws that all met positives. `mask` has bit (item % 64) set for each of those positives: a draw
    whose bit is clear is no positive, and only one whose bit is set is looked for among them."""
    for _ in range(NEGATIVE_TRIES):
        drawn = group_first + np.int64(_next_random(state) % np.uint64(group_size))
        if (mask >> np.uint64(drawn & 63)) & np.uint64(1) == 0 or not _has(user_items, run[0], run[1], drawn):
            return drawn  # type: ignore[no-any-return]
    return np.int64(-1)


@compiled()
def _group_runs(user_starts: np.ndarray, items: np.ndarray, item_groups: np.ndarray, grid: int) -> np.ndarray:
    """Each user's positives (items[user_starts[u]:user_starts[u + 1]], ascending within each group)
    reordered by item group, keeping that order: a user's run in a group is a stretch of its own
    places. One user's counts at a time: a (users, groups) table of them took 16 bytes per user and
    group, more than the positives' records where users are many and their positives few."""
    grouped = np.empty(len(items), np.int32)
    cursor = np.empty(grid + 1, np.int64)
    for user in range(len(user_starts) - 1):
        cursor[0] = user_starts[user]
        cursor[1:] = 0
        for place in range(user_starts[user], user_starts[user + 1]):
            cursor[item_groups[items[place]] + 1] += 1
        for group in range(grid):
            cursor[group + 1] += cursor[group]
        for place in range(user_starts[user], user_starts[user + 1]):
            group = item_groups[items[place]]
            grouped[cursor[group]] = items[place]
            cursor[group] += 1
    return grouped


@compiled(inline=True)
def _run_end(grouped: np.ndarray, item_groups: np.ndarray, first: int, last: int, group: int) -> int:
    """The first place of grouped[first:last] (ordered by item group) whose item's group is past
    `group`: a binary search."""
    low, high = first, last
    while low < high:
        middle = (low + high) // 2
        if item_groups[grouped[middle]] <= group:
            low = middle + 1
        else:
            high = middle
    return low


# A positive's record (a row of `_positive_records`): its user and item in one word (user | item << 32),
# where its user's run of positives in the item's group starts and ends, and that run's 64-bit mask.
USER_ITEM, RUN_FIRST, RUN_LAST, RUN_MASK = 0, 1, 2, 3
LOW_WORD = np.uint64(0xFFFFFFFF)


@compiled()
def _positive_records(
    users: np.ndarray,
    items: np.ndarray,
    item_groups: np.ndarray,
    user_starts: np.ndarray,
    grouped: np.ndarray,
) -> np.ndarray:
    """Each positive (users[k], items[k]) as a record of 32 bytes, (positives, 4) uint64: the user and
    item, where its user's run in the item's group starts and ends in `grouped` (`_group_runs`, the
    user's positives at user_starts[u]:user_starts[u + 1]), and that run's mask (bit item % 64 set
    for each of the run's items). One record is half a cache line (numba aligns arrays to 32 bytes),
    where five arrays read at the same place met five lines: the epoch walks a block by a stride, and
    each step reads its positive at a place of its own."""
    masks = np.zeros(len(grouped), np.uint64)  # each run's at its first place, once: a run of k has k records
    for user in range(len(user_starts) - 1):
        first = user_starts[user]
        for place in range(user_starts[user], user_starts[user + 1]):
            if item_groups[grouped[place]] != item_groups[grouped[first]]:
                first = place
            masks[first] |= np.uint64(1) << np.uint64(grouped[place] & 63)
    records = np.empty((len(users), 4), np.uint64)
    for k in range(len(users)):
        group = item_groups[items[k]]
        start, end = user_starts[users[k]], user_starts[users[k] + 1]
        first = _run_end(grouped, item_groups, start, end, group - 1)
        last = _run_end(grouped, item_groups, first, end, group)
        records[k, USER_ITEM] = np.uint64(users[k]) | (np.uint64(items[k]) << np.uint64(32))
        records[k, RUN_FIRST], records[k, RUN_LAST], records[k, RUN_MASK] = first, last, masks[first]
    return records


@compiled(fastmath=True, inline=True)
def _advance(place: np.int64, stride: np.int64, size: np.int64) -> np.int64:
    """The next place of a walk by `stride` around a block of `size`."""
    place += stride
    return place - size if place >= size else place


@compiled(fastmath=True, inline=True)
def _user_and_item(records: np.ndarray, at: int) -> tuple[int, int]:
    """The user and item of the positive at record `at`."""
    pair = records[at, USER_ITEM]
    return int(pair & LOW_WORD), int(pair >> np.uint64(32))


@compiled(fastmath=True)
def _train_blocks(
    users_table: np.ndarray,
    items_table: np.ndarray,
    item_bias: np.ndarray,
    records: np.ndarray,
    offsets: np.ndarray,
    blocks: np.ndarray,
    group_starts: np.ndarray,
    user_items: np.ndarray,
    settings: tuple[float, float, int, int],
    losses: np.ndarray,
) -> None:
    """BPR steps for the positives of each block in `blocks`, in an order drawn afresh for the
    epoch; each block's summed -log sigmoid(x_uij) goes to losses[block, 0], and its steps taken (a
    positive whose user has no other item of its group to draw takes none) to losses[block, 1].

    records: the positives in block order (`_positive_records`: user, item, and where the user's
    positives in the item's group start and end in `user_items`, each user's positives' items by
    group, sorted, with their mask), block b's at offsets[b]:offsets[b + 1]; items are numbered in
    group order, group g's being group_starts[g]..group_starts[g + 1] - 1; settings: (lr, l2, seed,
    epoch). A block's order and negatives are drawn from the seed, the epoch and the block alone, so
    a resumed run draws what the whole run drew.
    """
    lr, l2, seed, epoch = settings
    rate, decay = np.float32(lr), np.float32(lr * l2)
    keep = np.float32(1) - decay
    width = users_table.shape[1]
    state = np.empty(1, np.uint64)
    negatives = np.empty(NEGATIVE_AHEAD, np.int64)
    for block in blocks:
        state[0] = (
            np.uint64(seed)
            ^ (np.uint64(epoch) * np.uint64(0x9E3779B97F4A7C15))
            ^ (np.uint64(block) * np.uint64(0xD1B54A32D192ED03))
        )
        start, end = offsets[block], offsets[block + 1]
        size = end - start
        # Block b's positives all lie in item group b % groups, from which their negatives are drawn.
        group = block % (len(group_starts) - 1)
        group_first, group_size = group_starts[group], group_starts[group + 1] - group_starts[group]
        # The block's positives in a new order each epoch: met in one order every epoch, SGD's last
        # steps favour the same positives each time (validation NDCG@10 inside u1.base fell from
        # 0.279 to 0.219; docs/findings.md). The order walks the block (shuffled once) from a drawn
        # start by a drawn stride that shares no factor with its size, where a shuffle's swaps cost
        # about a tenth of the epoch.
        first_place = np.int64(_next_random(state) % np.uint64(max(size, 1)))
        stride = _stride(state, size)
        # The block's -sum log sigmoid(x): a logarithm per step cost a sixth of BPR's time, so the
        # sigmoids are multiplied together and the product's logarithm taken before it underflows.
        total, product, taken = 0.0, 1.0, 0
        # The steps as a pipeline, so that each cache miss is asked for well before it is needed:
        # step t + 3 * AHEAD's record; t + 2 * AHEAD's rows and its user's positives in the group;
        # t + AHEAD's negative, drawn (in step order, as one at a time would be) and its row asked
        # for; step t itself. Each stage walks the block's order with a place of its own.
        recording, fetching, drawing, stepping = first_place, first_place, first_place, first_place
        for t in range(start - 3 * NEGATIVE_AHEAD, end):
            negative = negatives[t % NEGATIVE_AHEAD] if t >= start else -1  # before its slot is reused
            if start <= t + 3 * NEGATIVE_AHEAD < end:
                prefetch_row(records, start + recording)
                recording = _advance(recording, stride, size)
            if start <= t + 2 * NEGATIVE_AHEAD < end:
                at = start + fetching
                user, item = _user_and_item(records, at)
                prefetch_row(users_table, user)
                prefetch_row(items_table, item)
                prefetch_row(user_items, int(records[at, RUN_FIRST]))
                fetching = _advance(fetching, stride, size)
            if start <= t + NEGATIVE_AHEAD < end:
                at = start + drawing
                drawn = _negative(
                    state,
                    group_first,
                    group_size,
                    records[at, RUN_MASK],
                    user_items,
                    (int(records[at, RUN_FIRST]), int(records[at, RUN_LAST])),
                )
                negatives[(t + NEGATIVE_AHEAD) % NEGATIVE_AHEAD] = drawn
                prefetch_row(items_table, max(int(drawn), 0))
                drawing = _advance(drawing, stride, size)
            if t < start:
                continue
            at = start + stepping
            stepping = _advance(stepping, stride, size)
            if negative < 0:  # no negative found
                continue
            taken += 1
            user, item = _user_and_item(records, at)
            score = item_bias[item] - item_bias[negative]
            for c in range(width):
                score += users_table[user, c] * (items_table[item, c] - items_table[negative, c])
            # d(log sigmoid(x))/dx = sigmoid(-x) = 1 / (1 + e^x); -log sigmoid(x) = log(1 + e^x) - x
            grown = np.exp(min(score, np.float32(30)))
            gradient = np.float32(1) / (np.float32(1) + grown)
            if score > LOSS_TAIL:  # sigmoid(x) = e^x / (1 + e^x), in float64
                product *= np.float64(grown) / (1.0 + np.float64(grown))
                if product < PRODUCT_FLOOR:
                    total -= np.log(product)
                    product = 1.0
            else:  # e^x is a float32 denormal or 0: -log sigmoid(x) is -x to float64 precision
                total -= np.float64(score)
            step = rate * gradient
            for c in range(width):
                user_value = users_table[user, c]
                difference = items_table[item, c] - items_table[negative, c]
                users_table[user, c] = keep * user_value + step * difference
                items_table[item, c] = keep * items_table[item, c] + step * user_value
                items_table[negative, c] = keep * items_table[negative, c] - step * user_value
            item_bias[item] = keep * item_bias[item] + step
            item_bias[negative] = keep * item_bias[negative] - step
        losses[block, 0], losses[block, 1] = total - np.log(product), taken


def bpr_grid(n_positives: int, n_items: int) -> int:
    """User and item groups for BPR: the rating engine's for `n_positives`, cut down so that each item
    group holds MIN_GROUP_ITEMS of the `n_items` or more. A positive's negative comes from its own
    group, and in a group of a few items its user may hold them all (two items in two groups trained
    nothing at all)."""
    return max(1, min(grid_size(n_positives), n_items // MIN_GROUP_ITEMS))


@compiled()
def _dealt_groups(items: np.ndarray, n_items: int, grid: int) -> np.ndarray:
    """Each of `n_items` items' group, of `grid`: the items dealt out from the most positives down,
    each to the group with the fewest positives so far, so that each group is a cross-section of the
    catalogue (the `grid` most popular items each in a group of their own) with about as many
    positives as any other.

    A positive's negative is drawn from its own item group, so BPR only ever compares items of one
    group: groups cut as runs of popularity (the rating engine's) left the most popular few items to
    be compared with one another alone, and NDCG@10 fell towards the popularity chart's, and below
    it, as the grid grew (docs/findings.md)."""
    counts = np.zeros(n_items, np.int64)
    for item in items:
        counts[item] += 1
    loads = np.zeros(grid, np.int64)
    groups = np.empty(n_items, np.int64)
    for item in np.argsort(-counts, kind="mergesort"):
        lightest = np.argmin(loads)
        groups[item] = lightest
        loads[lightest] += counts[item]
    return groups


class BPREpochs(RankingEpochs):
    """Epochs of BPR over a model's factor tables and item bias (recsys.train.engine's protocol)."""

    def __init__(
        self, model: RatingModel, train: RatingTensors, valid: RatingTensors, config: RunConfig, threads: int
    ) -> None:
        super().__init__(model, train, valid, config)
        tables = self.tables
        assert tables.item_bias is not None, "the registry checked bpr's item bias"
        # The model's tables, written back after every epoch from the working copies.
        self.factor_tables = (tables.user_factors.detach().numpy(), tables.item_factors.detach().numpy())
        self.item_bias = tables.item_bias.detach().numpy().reshape(-1)
        self.n_factors = self.factor_tables[0].shape[1]
        n_users, n_items = (len(table) for table in self.factor_tables)
        found = self.positives
        users = rows_of(found.by_user.starts)
        self.grid = bpr_grid(found.n_positives, n_items)
        dealt = _dealt_groups(found.by_user.others, n_items, self.grid)
        # The items in group order (group by group, each group's by id): the working copies' numbering.
        self.group_order = np.lexsort((np.arange(n_items), dealt))
        renumbered = np.empty(n_items, np.int64)
        renumbered[self.group_order] = np.arange(n_items)
        items, item_groups = renumbered[found.by_user.others], dealt[self.group_order]
        self.group_starts = np.searchsorted(item_groups, np.arange(self.grid + 1)).astype(np.int64)
        self.padded = (_padded(self.factor_tables[0]), _padded(self.factor_tables[1][self.group_order]))
        self.group_bias = self.item_bias[self.group_order]
        self.threads = max(1, min(threads, self.grid))
        # BPR weighs every positive alike: their strengths play no part.
        in_blocks, self.offsets = _sorted_by_block(
            (users, items, found.by_user.strengths),
            (_groups(users, n_users, self.grid), item_groups),
            self.grid,
            self.grid * self.grid,
            self.threads,
        )
        # Shuffled within their blocks once, from the seed: each epoch's order walks them by a stride.
        _shuffle_blocks(in_blocks, self.offsets, int(config.seed), 0, self.grid * self.grid)
        sorted_users, sorted_items, _ = in_blocks
        # Each user's positives by item group, then item (a group's run sorted, as _has reads it): a
        # negative drawn from a group is looked for among the user's few positives there alone, and
        # each positive carries that run and its mask, so that a step reads no table to find them.
        starts = found.by_user.starts
        self.user_items = _group_runs(starts, items, item_groups, self.grid)
        self.records = _positive_records(sorted_users, sorted_items, item_groups, starts, self.user_items)

    def run_epoch(self, epoch: int, generator: torch.Generator, progress: bool) -> tuple[float, int]:
        """One pass over the positives, each against a drawn negative: (mean -log sigmoid, positives
        that met a negative); none meeting one is an error, as nothing would be learnt."""
        self.epoch = epoch
        config = self.config
        lr = epoch_learning_rate(config.lr, epoch, config.epochs)
        settings = (float(lr), float(config.l2), int(config.seed), int(epoch))
        losses = np.zeros((self.grid * self.grid, 2))

        def train(blocks: Sequence[int]) -> None:
            _train_blocks(
                self.padded[0], self.padded[1], self.group_bias, self.records, self.offsets,
                np.asarray(blocks, np.int64), self.group_starts, self.user_items, settings, losses,
            )  # fmt: skip

        strata = draw_strata(self.grid, generator)
        if self.threads == 1:
            train([block for stratum in strata for block in stratum])
        else:
            run_strata(strata, self.grid, self.threads, train)
        user_table, item_table = self.factor_tables
        write_back(user_table, self.padded[0])
        item_table[self.group_order] = self.padded[1][:, : self.n_factors]
        self.item_bias[self.group_order] = self.group_bias
        taken = int(losses[:, 1].sum())
        if taken == 0:
            raise RecsysError(
                f"bpr found no item to rank below any positive: every user has interacted with every "
                f"item it could be compared with (of {len(self.item_bias)}), so there is nothing to learn"
            )
        return float(losses[:, 0].sum()) / taken, taken
