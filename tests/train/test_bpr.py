"""BPR (`bpr`): one step of the kernel against autograd's gradient of the same objective, and what an
epoch's negatives are drawn from."""

import numpy as np
import pytest
import torch

from recsys.train.bpr import (
    RUN_FIRST,
    RUN_LAST,
    RUN_MASK,
    _group_runs,
    _has,
    _positive_records,
    _stride,
    _train_blocks,
)
from recsys.train.compiled import _next_random


def _one_group(n_items: int) -> np.ndarray:
    """Where the one item group, holding every item, starts and ends."""
    return np.array([0, n_items], np.int64)


def _one_user_block(positives: np.ndarray) -> np.ndarray:
    """User 0's positives (sorted) as one block of one item group: their records (each one's run among
    the user's positives, all of them, and that run's mask)."""
    users, user_starts = np.zeros(len(positives), np.int32), np.array([0, len(positives)], np.int64)
    return _positive_records(users, positives, np.zeros(64, np.int64), user_starts, positives)


def test_a_step_is_autograds_step_on_log_sigmoid_less_the_penalty() -> None:
    """One positive (user 0, item 0) and one other item to draw as its negative: the kernel's step is
    plain SGD on -log sigmoid(u . (i - j) + b_i - b_j) + l2 / 2 (|u|^2 + |i|^2 + |j|^2 + b_i^2 + b_j^2)."""
    rng = np.random.default_rng(0)
    users = rng.normal(0, 0.5, (1, 5)).astype(np.float32)
    items = rng.normal(0, 0.5, (2, 5)).astype(np.float32)
    bias = rng.normal(0, 0.5, 2).astype(np.float32)
    lr, l2 = 0.1, 0.03
    u, i, j = (torch.tensor(row, dtype=torch.float64, requires_grad=True) for row in (users[0], *items))
    b = torch.tensor(bias, dtype=torch.float64, requires_grad=True)
    score = u @ (i - j) + b[0] - b[1]
    penalty = l2 / 2 * (u @ u + i @ i + j @ j + b @ b)
    (-torch.nn.functional.logsigmoid(score) + penalty).backward()
    expected = [(tensor - lr * tensor.grad).detach().numpy() for tensor in (u, i, j, b)]
    losses = np.zeros((1, 2))
    _train_blocks(
        users, items, bias, _one_user_block(np.zeros(1, np.int32)), np.array([0, 1], np.int64),
        np.zeros(1, np.int64), _one_group(2), np.zeros(1, np.int32), (lr, l2, 7, 1), losses,
    )  # fmt: skip
    np.testing.assert_allclose(users[0], expected[0], rtol=1e-5)
    np.testing.assert_allclose(items, np.stack(expected[1:3]), rtol=1e-5)
    np.testing.assert_allclose(bias, expected[3], rtol=1e-5)
    assert losses[0, 0] == pytest.approx(-torch.nn.functional.logsigmoid(score).item(), rel=1e-6)
    assert losses[0, 1] == 1  # the one step taken


def test_a_negative_is_never_one_of_the_users_positives() -> None:
    """A user with positives for every item but one: every step's negative is that one item, so
    only its row (of the items not the positive) moves against the user."""
    users = np.full((1, 4), 0.1, np.float32)
    items = np.full((6, 4), 0.1, np.float32)
    bias = np.zeros(6, np.float32)
    positives = np.array([0, 1, 2, 4, 5], np.int32)  # every item but 3
    _train_blocks(
        users, items, bias, _one_user_block(positives), np.array([0, 5], np.int64),
        np.zeros(1, np.int64), _one_group(6), positives, (0.1, 0.0, 3, 1), np.zeros((1, 2)),
    )  # fmt: skip
    # Each positive's bias rose once, and item 3's fell as much five times over.
    assert np.all(bias[positives] > 0)
    assert bias[3] == pytest.approx(-bias[positives].sum(), rel=1e-5)


@pytest.mark.parametrize(("n_positives", "step"), [(25, 1), (300, 23)])
def test_the_membership_check_agrees_with_python_on_every_run_and_item(n_positives: int, step: int) -> None:
    """Short runs are scanned; runs longer than SCANNED_RUN are halved first (a user with most of a
    group's items)."""
    rng = np.random.default_rng(5)
    items = np.sort(rng.choice(2 * n_positives + 10, size=n_positives, replace=False)).astype(np.int32)
    for first in range(0, n_positives + 1, 3 * step):
        for last in range(first, n_positives + 1, 4 * step):
            present = set(items[first:last].tolist())
            for item in range(-2, 2 * n_positives + 13):
                assert _has(items, first, last, item) == (item in present), (first, last, item)


@pytest.mark.parametrize("score", [2.0, -50.0, -100.0])
def test_a_blocks_loss_is_its_steps_summed_however_small_their_sigmoids(score: float) -> None:
    """With no learning rate every step of one positive against one negative has the same score: the
    block's loss is the count times -log sigmoid(score), also where the sigmoids' running product
    would underflow (-50: 1e-22 each) and where e^score itself does in float32 (-100)."""
    steps = 40
    users = np.ones((1, 1), np.float32)
    items = np.array([[score], [0.0]], np.float32)  # the positive's row gives the score; the negative's 0
    bias = np.zeros(2, np.float32)
    in_block = _one_user_block(np.zeros(1, np.int32))
    in_block = np.repeat(in_block, steps, axis=0)  # the one positive, `steps` times
    losses = np.zeros((1, 2))
    _train_blocks(
        users, items, bias, in_block, np.array([0, steps], np.int64), np.zeros(1, np.int64), _one_group(2),
        np.zeros(1, np.int32), (0.0, 0.0, 3, 1), losses,
    )  # fmt: skip
    expected = steps * float(torch.nn.functional.softplus(torch.tensor(-score, dtype=torch.float64)))
    assert losses[0, 0] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("size", [1, 2, 3, 12, 97, 1000])
def test_an_epochs_order_meets_every_positive_of_a_block_once_and_changes_by_epoch(size: int) -> None:
    walks = set()
    for epoch in range(1, 6):
        state = np.array([np.uint64(epoch) * np.uint64(0x9E3779B97F4A7C15)], np.uint64)
        place, stride = int(state[0] % np.uint64(size)), int(_stride(state, size))
        walk = [(place + k * stride) % size for k in range(size)]
        assert sorted(walk) == list(range(size)) and 1 <= stride < max(size, 2)
        walks.add(tuple(walk))
    if size >= 12:
        assert len(walks) == 5  # a new order each epoch
    else:  # few orders to draw from: more than one, but for a block of one
        assert len(walks) > 1 or size == 1


def test_each_positives_run_and_mask_come_from_its_users_positives_alone() -> None:
    """Runs and masks are found from each user's own positives (where a table of every user and group
    held 16 bytes per user and group): users with no positive, or none in some groups, among many
    groups, give each positive the run of its user's items in its group and that run's mask."""
    rng = np.random.default_rng(5)
    n_users, n_items, grid = 50, 40, 8
    group_of = np.arange(n_items) // (n_items // grid)
    cells = np.sort(rng.choice(n_users * n_items, size=90, replace=False))
    users_of, items_of = cells // n_items, cells % n_items  # by user, items ascending
    user_starts = np.searchsorted(users_of, np.arange(n_users + 1))
    user_items = _group_runs(user_starts, items_of, group_of, grid)
    order = rng.permutation(len(cells))
    records = _positive_records(
        users_of[order].astype(np.int32), items_of[order].astype(np.int32), group_of, user_starts, user_items
    )
    for record, user, item in zip(records, users_of[order], items_of[order], strict=True):
        first, last = int(record[RUN_FIRST]), int(record[RUN_LAST])
        run = items_of[(users_of == user) & (group_of[items_of] == group_of[item])]
        assert user_starts[user] <= first < last <= user_starts[user + 1]
        assert list(user_items[first:last]) == list(run)
        assert int(record[RUN_MASK]) == sum({1 << (int(other) % 64) for other in run})


def test_an_epoch_is_its_steps_one_at_a_time_in_the_drawn_order() -> None:
    """The kernel draws each step's negative a few steps ahead of the step (so that its row can be
    fetched early): the epoch must still be the steps taken one at a time, block by block in the
    drawn order, each negative drawn from the block's item group just before its step, as written
    out here in Python. Two item groups (items 0-5 and 6-11: the kernel numbers items group by group),
    one block each."""
    rng = np.random.default_rng(3)
    n_users, n_items, width, size = 6, 12, 3, 40
    group_of = np.arange(n_items) // 6
    group_starts = np.array([0, 6, 12], np.int64)
    cells = rng.choice(n_users * n_items, size=size, replace=False)
    users_of, items_of = cells // n_items, cells % n_items
    by_user = np.lexsort((items_of, users_of))
    users_of, items_of = users_of[by_user], items_of[by_user]
    user_starts = np.searchsorted(users_of, np.arange(n_users + 1))
    user_items = _group_runs(user_starts, items_of, group_of, 2)
    for user in range(n_users):  # each user's positives by group, then item
        mine = items_of[users_of == user]
        regrouped = sorted(mine, key=lambda item: (group_of[item], item))
        assert list(user_items[user_starts[user] : user_starts[user + 1]]) == regrouped
    # One user group: block b holds the positives of item group b, shuffled.
    shuffled = rng.permutation(size)
    order = shuffled[np.argsort(group_of[items_of[shuffled]], kind="stable")]
    block_users, block_items = users_of[order].astype(np.int32), items_of[order].astype(np.int32)
    records = _positive_records(block_users, block_items, group_of, user_starts, user_items)
    assert np.array_equal(records[:, 0] & np.uint64(2**32 - 1), block_users)
    assert np.array_equal(records[:, 0] >> np.uint64(32), block_items)
    firsts, lasts = records[:, RUN_FIRST].astype(np.int64), records[:, RUN_LAST].astype(np.int64)
    for user, item, first, last in zip(block_users, block_items, firsts, lasts, strict=True):
        assert set(user_items[first:last]) == set(
            items_of[(users_of == user) & (group_of[items_of] == group_of[item])]
        )
    for record, first, last in zip(records, firsts, lasts, strict=True):
        assert int(record[RUN_MASK]) == sum({1 << (int(other) % 64) for other in user_items[first:last]})
    offsets = np.array([0, np.sum(group_of[block_items] == 0), size], np.int64)
    tables = [rng.normal(0, 0.3, shape).astype(np.float32) for shape in ((n_users, width), (n_items, width))]
    bias = rng.normal(0, 0.3, n_items).astype(np.float32)
    lr, l2, seed, epoch = 0.2, 0.05, 11, 3

    expected = [table.astype(np.float64) for table in (*tables, bias)]
    keep = 1 - lr * l2
    for block in (0, 1):
        start, block_size = int(offsets[block]), int(offsets[block + 1] - offsets[block])
        mixed = seed ^ (epoch * 0x9E3779B97F4A7C15 % 2**64) ^ (block * 0xD1B54A32D192ED03 % 2**64)
        state = np.array([mixed], np.uint64)
        place = int(_next_random(state) % np.uint64(block_size))
        stride = int(_stride(state, block_size))
        for k in range(block_size):
            at = start + (place + k * stride) % block_size
            user, item = int(block_users[at]), int(block_items[at])
            mine = set(items_of[users_of == user].tolist())
            for _ in range(16):
                drawn = 6 * block + int(_next_random(state) % np.uint64(6))
                if drawn not in mine:
                    break
            else:
                continue
            u, i, j = expected[0][user].copy(), expected[1][item].copy(), expected[1][drawn].copy()
            score = u @ (i - j) + expected[2][item] - expected[2][drawn]
            step = lr / (1 + np.exp(score))
            expected[0][user] = keep * u + step * (i - j)
            expected[1][item] = keep * i + step * u
            expected[1][drawn] = keep * j - step * u
            expected[2][item] = keep * expected[2][item] + step
            expected[2][drawn] = keep * expected[2][drawn] - step

    _train_blocks(
        tables[0], tables[1], bias, records, offsets, np.array([0, 1], np.int64),
        group_starts, user_items, (lr, l2, seed, epoch), np.zeros((2, 2)),
    )  # fmt: skip
    for got, want in zip((*tables, bias), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
