"""BPR (`bpr`): one step of the kernel against autograd's gradient of the same objective, and what an
epoch's negatives are drawn from."""

import numpy as np
import pytest
import torch

from recsys.train.bpr import _has, _stride, _train_blocks
from recsys.train.compiled import _next_random


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
    pairs = (np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32))
    by_user = (np.array([[0, 1]], np.int64), np.zeros(1, np.int32))  # user 0's one positive: item 0
    groups = (np.zeros(2, np.int32), np.array([0, 2], np.int64))  # one group: every item
    losses = np.zeros(1)
    _train_blocks(
        users, items, bias, pairs, np.array([0, 1], np.int64), np.zeros(1, np.int64), groups, by_user,
        (lr, l2, 7, 1), losses,
    )  # fmt: skip
    np.testing.assert_allclose(users[0], expected[0], rtol=1e-5)
    np.testing.assert_allclose(items, np.stack(expected[1:3]), rtol=1e-5)
    np.testing.assert_allclose(bias, expected[3], rtol=1e-5)
    assert losses[0] == pytest.approx(-torch.nn.functional.logsigmoid(score).item(), rel=1e-6)


def test_a_negative_is_never_one_of_the_users_positives() -> None:
    """A user with positives for every item but one: every step's negative is that one item, so
    only its row (of the items not the positive) moves against the user."""
    users = np.full((1, 4), 0.1, np.float32)
    items = np.full((6, 4), 0.1, np.float32)
    bias = np.zeros(6, np.float32)
    positives = np.array([0, 1, 2, 4, 5], np.int32)  # every item but 3
    pairs = (np.zeros(5, np.int32), positives, np.zeros(5, np.int32), np.zeros(5, np.int32))
    by_user = (np.array([[0, 5]], np.int64), positives)  # its positives in its one item group
    groups = (np.zeros(6, np.int32), np.array([0, 6], np.int64))
    _train_blocks(
        users, items, bias, pairs, np.array([0, 5], np.int64), np.zeros(1, np.int64), groups, by_user,
        (0.1, 0.0, 3, 1), np.zeros(1),
    )  # fmt: skip
    assert sorted(pairs[3]) == sorted(positives)  # the block's positives reordered, none lost
    # Each positive's bias rose once, and item 3's fell as much five times over.
    assert np.all(bias[positives] > 0)
    assert bias[3] == pytest.approx(-bias[positives].sum(), rel=1e-5)


def test_the_membership_check_agrees_with_python_on_every_run_and_item() -> None:
    rng = np.random.default_rng(5)
    items = np.sort(rng.choice(60, size=25, replace=False)).astype(np.int32)
    for first in range(0, 26, 3):
        for last in range(first, 26, 4):
            present = set(items[first:last].tolist())
            for item in range(-2, 63):
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
    pairs = tuple(np.zeros(steps, np.int32) for _ in range(4))
    by_user = (np.array([[0, 1]], np.int64), np.zeros(1, np.int32))
    groups = (np.zeros(2, np.int32), np.array([0, 2], np.int64))
    losses = np.zeros(1)
    _train_blocks(
        users, items, bias, pairs, np.array([0, steps], np.int64), np.zeros(1, np.int64), groups, by_user,
        (0.0, 0.0, 3, 1), losses,
    )  # fmt: skip
    expected = steps * float(torch.nn.functional.softplus(torch.tensor(-score, dtype=torch.float64)))
    assert losses[0] == pytest.approx(expected, rel=1e-6)


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


def test_an_epoch_is_its_steps_one_at_a_time_in_the_drawn_order() -> None:
    """The kernel draws each step's negative a few steps ahead of the step (so that its row can be
    fetched early): the epoch must still be the steps taken one at a time, in the drawn order, each
    negative drawn just before its step, as written out here in Python."""
    rng = np.random.default_rng(3)
    n_users, n_items, width, size = 6, 12, 3, 40
    group_starts = np.array([0, 5, 12], np.int64)  # two item groups: items 0-4 and 5-11
    group_of = np.repeat(np.arange(2, dtype=np.int32), np.diff(group_starts))
    cells = rng.choice(n_users * n_items, size=size, replace=False)
    cells.sort()
    users_of, items_of = (cells // n_items).astype(np.int32), (cells % n_items).astype(np.int32)
    user_group_starts = np.zeros((n_users, 3), np.int64)
    for user in range(n_users):
        mine = items_of[users_of == user]
        first = np.searchsorted(users_of, user)
        user_group_starts[user] = first + np.searchsorted(mine, group_starts)
    shuffled = rng.permutation(size)
    block_users, block_items = users_of[shuffled].copy(), items_of[shuffled].copy()
    tables = [rng.normal(0, 0.3, shape).astype(np.float32) for shape in ((n_users, width), (n_items, width))]
    bias = rng.normal(0, 0.3, n_items).astype(np.float32)
    lr, l2, seed, epoch = 0.2, 0.05, 11, 3

    expected = [table.astype(np.float64) for table in (*tables, bias)]
    state = np.array([seed ^ (epoch * 0x9E3779B97F4A7C15 % 2**64)], np.uint64)  # block 0 mixes in nothing
    place = int(_next_random(state) % np.uint64(size))
    stride = int(_stride(state, size))
    keep = 1 - lr * l2
    for k in range(size):
        at = (place + k * stride) % size
        user, item = int(block_users[at]), int(block_items[at])
        group = group_of[item]
        mine = set(items_of[user_group_starts[user, 0] : user_group_starts[user, 2]].tolist())
        for _ in range(16):
            drawn = int(group_starts[group] + _next_random(state) % np.uint64(np.diff(group_starts)[group]))
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

    pairs = (block_users, block_items, np.zeros(size, np.int32), np.zeros(size, np.int32))
    _train_blocks(
        tables[0], tables[1], bias, pairs, np.array([0, size], np.int64), np.zeros(1, np.int64),
        (group_of, group_starts), (user_group_starts, items_of), (lr, l2, seed, epoch), np.zeros(1),
    )  # fmt: skip
    for got, want in zip((*tables, bias), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
