"""recsys.data.synthetic: the generator with planted biases and factors, and the tiny sample made from it."""

from __future__ import annotations

import dataclasses
import math
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from recsys.data.catalog import TINY_FOLDER
from recsys.data.synthetic import SyntheticConfig, make_synthetic
from recsys.errors import RecsysError

SMALL = SyntheticConfig(n_users=60, n_items=150, n_ratings=2_000, n_factors=3, seed=7)


def test_synthetic_is_reproducible_for_a_seed() -> None:
    first, first_truth = make_synthetic(SMALL)
    second, second_truth = make_synthetic(SMALL)
    assert first.ratings.equals(second.ratings)
    assert first.items.equals(second.items)
    assert np.array_equal(first_truth.user_factors, second_truth.user_factors)
    assert np.array_equal(first_truth.item_bias, second_truth.item_bias)


def test_synthetic_differs_across_seeds() -> None:
    first, first_truth = make_synthetic(SMALL)
    other, other_truth = make_synthetic(dataclasses.replace(SMALL, seed=8))
    assert not first.ratings.equals(other.ratings)
    assert not np.array_equal(
        first.ratings[["user", "item"]].to_numpy(), other.ratings[["user", "item"]].to_numpy()
    )
    assert not np.array_equal(first_truth.user_bias, other_truth.user_bias)


def test_synthetic_shape_and_values() -> None:
    dataset, truth = make_synthetic(SMALL)
    ratings = dataset.ratings
    assert dataset.name == "synthetic" and dataset.rating_scale == (1.0, 5.0)
    assert len(ratings) == SMALL.n_ratings
    assert not ratings.duplicated(["user", "item"]).any()
    assert ratings["user"].between(1, SMALL.n_users).all()
    assert ratings["item"].between(1, SMALL.n_items).all()
    values = ratings["rating"].to_numpy()
    assert np.array_equal(values, np.round(values))
    assert values.min() >= 1 and values.max() <= 5
    assert set(np.unique(values)) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert truth.user_bias.shape == (SMALL.n_users,)
    assert truth.item_bias.shape == (SMALL.n_items,)
    assert truth.user_factors.shape == (SMALL.n_users, SMALL.n_factors)
    assert truth.item_factors.shape == (SMALL.n_items, SMALL.n_factors)
    assert truth.global_mean == SMALL.global_mean
    assert len(dataset.items) == SMALL.n_items


def test_synthetic_ratings_follow_the_planted_biases() -> None:
    dataset, truth = make_synthetic(SyntheticConfig(n_users=100, n_items=200, n_ratings=8_000, seed=3))
    ratings = dataset.ratings
    item_means = ratings.groupby("item")["rating"].mean()
    planted = truth.item_bias[item_means.index.to_numpy() - 1]
    assert np.corrcoef(item_means.to_numpy(), planted)[0, 1] > 0.5


def test_synthetic_item_popularity_is_long_tailed() -> None:
    dataset, _ = make_synthetic(SMALL)
    counts = np.sort(dataset.ratings["item"].value_counts().to_numpy())[::-1]
    top = counts[: SMALL.n_items // 10].sum()
    assert top / SMALL.n_ratings > 0.25
    uniform, _ = make_synthetic(dataclasses.replace(SMALL, popularity_exponent=0.0))
    uniform_counts = np.sort(uniform.ratings["item"].value_counts().to_numpy())[::-1]
    assert uniform_counts[: SMALL.n_items // 10].sum() / SMALL.n_ratings < 0.2


def test_a_split_by_time_of_synthetic_data_tests_items_as_popular_as_it_trains_on() -> None:
    # Times rising in the order pairs were first drawn put popular items' ratings early: the last
    # fifth in time then held items 0.72 times as popular as the rest.
    ratings = make_synthetic(SyntheticConfig())[0].ratings.sort_values("timestamp", kind="stable")
    popularity = ratings["item"].map(ratings["item"].value_counts()).to_numpy()
    cut = len(ratings) * 4 // 5
    assert popularity[cut:].mean() / popularity[:cut].mean() > 0.95


def test_synthetic_rejects_too_many_ratings() -> None:
    with pytest.raises(RecsysError, match=r"^`n_ratings` 51 is more than half of the 10 x 10 user-item"):
        make_synthetic(SyntheticConfig(n_users=10, n_items=10, n_ratings=51))
    assert len(make_synthetic(SyntheticConfig(n_users=10, n_items=10, n_ratings=50))[0].ratings) == 50


@pytest.mark.parametrize(
    ("setting", "value", "expected"),
    [
        ("n_users", 0, "a whole number of at least 1"),
        ("n_items", -3, "a whole number of at least 1"),
        ("n_ratings", 0, "a whole number of at least 1"),
        ("n_ratings", 2.5, "a whole number of at least 1"),
        ("n_factors", -1, "a whole number of at least 0"),
        ("seed", -1, "a whole number of at least 0"),
        ("seed", True, "a whole number of at least 0"),
        ("noise_std", -0.5, "zero or positive and finite"),
        ("noise_std", math.nan, "zero or positive and finite"),
        ("noise_std", math.inf, "zero or positive and finite"),
        ("user_bias_std", -1.0, "zero or positive and finite"),
        ("factor_std", math.nan, "zero or positive and finite"),
        ("global_mean", math.nan, "a finite number"),
        ("popularity_exponent", math.inf, "a finite number"),
        ("activity_exponent", "0.5", "a finite number"),
    ],
)
def test_synthetic_rejects_settings_no_data_can_come_from(setting: str, value: object, expected: str) -> None:
    """Regression: a NaN setting made every rating NaN and an infinite noise every rating 1 or 5, with no
    word; a negative one ended in numpy's `scale < 0`. Each is now refused, naming the setting."""
    small = {"n_users": 20, "n_items": 20, "n_ratings": 100}
    with pytest.raises(RecsysError, match=f"^`{setting}` must be {expected}, got {value!r}$"):
        make_synthetic(SyntheticConfig(**{**small, setting: value}))  # type: ignore[arg-type]


def test_synthetic_refuses_exponents_that_leave_too_few_pairs_to_draw() -> None:
    """Regression: with a steep popularity nearly every draw fell on one item, fewer distinct pairs
    than asked for, and make_synthetic drew on for ever; it now gives up, naming the exponents."""
    steep = SyntheticConfig(n_users=50, n_items=50, n_ratings=500, popularity_exponent=50.0)
    with pytest.raises(RecsysError, match=r"^`n_ratings` 500: 100,000 draws fell on only \d+ distinct"):
        make_synthetic(steep)
    # Steep, but not past drawing: every pair asked for, distinct.
    ratings = make_synthetic(dataclasses.replace(steep, popularity_exponent=3.0))[0].ratings
    assert len(ratings) == 500 and not ratings.duplicated(["user", "item"]).any()


def test_synthetic_takes_the_extremes_it_can_generate() -> None:
    """No noise, no factors, one user or one item: the data is the formula's, every pair distinct."""
    config = SyntheticConfig(n_users=30, n_items=40, n_ratings=300, n_factors=0, noise_std=0.0, seed=5)
    dataset, truth = make_synthetic(config)
    users, items = dataset.ratings["user"].to_numpy() - 1, dataset.ratings["item"].to_numpy() - 1
    score = truth.global_mean + truth.user_bias[users] + truth.item_bias[items]
    assert np.array_equal(dataset.ratings["rating"].to_numpy(), np.clip(np.round(score), 1, 5))
    for shape in ({"n_users": 1, "n_items": 10}, {"n_users": 10, "n_items": 1}):
        ratings = make_synthetic(SyntheticConfig(**shape, n_ratings=5))[0].ratings
        assert len(ratings) == 5 and not ratings.duplicated(["user", "item"]).any()


def test_make_tiny_regenerates_the_committed_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # scripts/make_tiny.py run in this process as `python scripts/make_tiny.py --out ...` runs it.
    out, books = tmp_path / "tiny", tmp_path / "books"
    argv = ["scripts/make_tiny.py", "--out", str(out), "--books-out", str(books)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(ROOT / "scripts" / "make_tiny.py"), run_name="__main__")
    assert ended.value.code == 0 and capsys.readouterr().out == ""
    committed = {out: TINY_FOLDER, books: ROOT / "data" / "books"}
    files = ((out, "ratings.csv"), (out, "movies.csv"), (books, "ratings.csv"), (books, "books.csv"))
    for folder, name in files:
        assert (folder / name).read_bytes() == (committed[folder] / name).read_bytes(), name
    # A folder that cannot be made is one line and exit 2, not a traceback.
    monkeypatch.setattr(sys, "argv", ["scripts/make_tiny.py", "--out", str(out / "ratings.csv" / "x")])
    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(ROOT / "scripts" / "make_tiny.py"), run_name="__main__")
    assert ended.value.code == 2
    assert (
        capsys.readouterr().err.strip()
        == f"error: cannot write {out}/ratings.csv/x/ratings.csv: Not a directory"
    )
