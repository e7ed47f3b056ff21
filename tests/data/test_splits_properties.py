"""Property-based tests (hypothesis) of recsys.data.splits: every split is a reproducible partition of
its input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recsys.data.dataset import ratings_frame
from recsys.data.splits import Split, random_split, time_split, user_last_split, user_split
from recsys.errors import RecsysError

# No example database: it would leave a .hypothesis/ folder in the repository.
SETTINGS = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def ratings_frames(draw: st.DrawFn) -> pd.DataFrame:
    """A small ratings table with few users (so users share rows), repeated timestamps, and a
    shuffled, non-contiguous index, so a split that loses or renumbers the index shows up."""
    n = draw(st.integers(1, 40))
    column = lambda lo, hi: np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)))  # noqa: E731
    frame = ratings_frame(column(1, 6), column(1, 20), column(1, 5), column(0, 10))
    index = draw(st.lists(st.integers(-1_000, 1_000), min_size=n, max_size=n, unique=True))
    frame.index = pd.Index(index)
    return frame


fractions = st.floats(0.0, 1.0, exclude_min=True, exclude_max=True)
seeds = st.integers(0, 2**32 - 1)


def assert_partition(ratings: pd.DataFrame, split: Split) -> None:
    train, test = split.train.index, split.test.index
    assert train.intersection(test).empty
    assert len(train) + len(test) == len(ratings)
    assert set(train) | set(test) == set(ratings.index)
    pd.testing.assert_frame_equal(split.train, ratings.loc[train])
    pd.testing.assert_frame_equal(split.test, ratings.loc[test])


def assert_same(a: Split, b: Split) -> None:
    pd.testing.assert_frame_equal(a.train, b.train)
    pd.testing.assert_frame_equal(a.test, b.test)


@SETTINGS
@given(ratings=ratings_frames(), frac=fractions, seed=seeds)
def test_random_split_partition(ratings: pd.DataFrame, frac: float, seed: int) -> None:
    split = random_split(ratings, frac, seed)
    assert_partition(ratings, split)
    assert len(split.test) == round(len(ratings) * frac)
    assert_same(split, random_split(ratings, frac, seed))


@SETTINGS
@given(ratings=ratings_frames(), frac=fractions, seed=seeds)
def test_user_split_partition(ratings: pd.DataFrame, frac: float, seed: int) -> None:
    split = user_split(ratings, frac, seed)
    assert_partition(ratings, split)
    assert set(split.train["user"]) == set(ratings["user"])  # every user keeps a training row
    assert_same(split, user_split(ratings, frac, seed))


@SETTINGS
@given(ratings=ratings_frames(), test_n=st.integers(1, 5))
def test_user_last_split_partition(ratings: pd.DataFrame, test_n: int) -> None:
    split = user_last_split(ratings, test_n)
    assert_partition(ratings, split)
    assert set(split.train["user"]) == set(ratings["user"])
    assert (split.test.groupby("user").size() <= test_n).all()
    assert_same(split, user_last_split(ratings, test_n))


@SETTINGS
@given(ratings=ratings_frames(), frac=fractions)
def test_time_split_partition(ratings: pd.DataFrame, frac: float) -> None:
    split = time_split(ratings, frac)
    assert_partition(ratings, split)
    if len(split.train) and len(split.test):
        assert split.train["timestamp"].max() <= split.test["timestamp"].min()
    assert_same(split, time_split(ratings, frac))


@SETTINGS
@given(
    ratings=ratings_frames(),
    frac=st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0), st.just(float("nan"))),
    seed=seeds,
)
def test_fraction_outside_unit_interval_is_rejected(ratings: pd.DataFrame, frac: float, seed: int) -> None:
    for split in (
        lambda: random_split(ratings, frac, seed),
        lambda: user_split(ratings, frac, seed),
        lambda: time_split(ratings, frac),
    ):
        with pytest.raises(RecsysError):
            split()
