"""Reproducible train/test splits of a ratings table, each returning disjoint, complete parts.

Every split keeps the original row index, so a part can be traced back to its rows.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd

from recsys.data.dataset import RatingsDataset
from recsys.data.id_columns import id_codes
from recsys.data.split_settings import check_split_seed, check_test_frac, check_test_n
from recsys.errors import RecsysError
from recsys.names import PREDEFINED_FOLDS, SPLIT_KINDS


@dataclass(frozen=True)
class Split:
    """Training and test ratings with raw ids."""

    train: pd.DataFrame
    test: pd.DataFrame


def _by_mask(ratings: pd.DataFrame, test_mask: np.ndarray) -> Split:
    return Split(ratings[~test_mask], ratings[test_mask])


def random_split(ratings: pd.DataFrame, test_frac: float, seed: int) -> Split:
    """Hold out a random `test_frac` of all ratings."""
    check_test_frac(test_frac)
    n_test = round(len(ratings) * test_frac)
    order = np.random.default_rng(seed).permutation(len(ratings))
    mask = np.zeros(len(ratings), dtype=bool)
    mask[order[:n_test]] = True
    return _by_mask(ratings, mask)


def _rank_within_user(users: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's 0-based rank among its user's rows by ascending `keys`, and its user's count."""
    order = np.lexsort((keys, users))
    sorted_users = users[order]
    starts = np.flatnonzero(np.r_[True, sorted_users[1:] != sorted_users[:-1]])
    counts = np.diff(np.r_[starts, len(users)])
    rank_sorted = np.arange(len(users)) - np.repeat(starts, counts)
    rank = np.empty(len(users), dtype=np.int64)
    rank[order] = rank_sorted
    count = np.empty(len(users), dtype=np.int64)
    count[order] = np.repeat(counts, counts)
    return rank, count


def user_split(ratings: pd.DataFrame, test_frac: float, seed: int) -> Split:
    """Hold out a random `test_frac` of each user's ratings, always leaving one in training."""
    check_test_frac(test_frac)
    keys = np.random.default_rng(seed).random(len(ratings))
    rank, count = _rank_within_user(id_codes(ratings["user"]), keys)
    n_test = np.minimum(np.round(count * test_frac), count - 1)
    return _by_mask(ratings, rank < n_test)


def user_last_split(ratings: pd.DataFrame, test_n: int) -> Split:
    """Hold out each user's last `test_n` ratings by time (users with fewer stay in training)."""
    check_test_n(test_n)
    # No user has more ratings than the table: a larger test_n holds out as few (none), and may be too
    # large for the int64 counts it is compared with.
    test_n = min(test_n, len(ratings))
    # Oldest first, ties in time in file order (lexsort is stable): of two ratings in the same second
    # the later line is the later, as the time split takes it.
    rank, count = _rank_within_user(id_codes(ratings["user"]), ratings["timestamp"].to_numpy())
    return _by_mask(ratings, (rank >= count - test_n) & (count > test_n))


def time_split(ratings: pd.DataFrame, test_frac: float) -> Split:
    """Hold out the latest `test_frac` of all ratings: train on the past, test on the future. Ratings
    of one time keep their file order, the later line the later (a stable sort)."""
    check_test_frac(test_frac)
    order = np.argsort(ratings["timestamp"].to_numpy(), kind="stable")
    n_train = len(ratings) - round(len(ratings) * test_frac)
    mask = np.zeros(len(ratings), dtype=bool)
    mask[order[n_train:]] = True
    return _by_mask(ratings, mask)


def fold_split(dataset: RatingsDataset, fold: str) -> Split:
    """The predefined fold `fold` (ml-100k's u1..u5, ua, ub) that `dataset` carries."""
    if fold not in PREDEFINED_FOLDS:
        raise RecsysError(f"unknown fold {fold!r}; choose one of: {', '.join(PREDEFINED_FOLDS)}")
    if fold not in dataset.folds:
        raise RecsysError(
            f"`split` {fold} is one of ml-100k's predefined folds; the dataset is {dataset.name}, "
            "which comes without them"
        )
    train_rows, test_rows = dataset.folds[fold]
    return Split(dataset.ratings.iloc[train_rows], dataset.ratings.iloc[test_rows])


def make_split(
    dataset: RatingsDataset, kind: str, *, test_frac: float = 0.2, test_n: int = 10, seed: int = 0
) -> Split:
    """Split `dataset` by `kind` (see SPLIT_KINDS)."""
    check_split_seed(seed)
    ratings = dataset.ratings
    if kind == "random":
        return random_split(ratings, test_frac, seed)
    if kind == "user":
        return user_split(ratings, test_frac, seed)
    if kind == "user-last":
        return user_last_split(ratings, test_n)
    if kind == "time":
        return time_split(ratings, test_frac)
    if kind in PREDEFINED_FOLDS:
        return fold_split(dataset, kind)
    raise RecsysError(f"unknown `split` {kind!r}; choose one of: {', '.join(SPLIT_KINDS)}")
