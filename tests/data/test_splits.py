"""Tests for recsys.data.splits on the tiny dataset, a hand-made frame and (when present) real ml-100k."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recsys.data.catalog import load_dataset
from recsys.data.dataset import RatingsDataset, ratings_frame
from recsys.data.movielens import load_movielens
from recsys.data.splits import PREDEFINED_FOLDS, SPLIT_KINDS, Split, fold_split, make_split
from recsys.errors import DataError, RecsysError

FRAC_KINDS = ("random", "user", "time")
SEEDED_KINDS = ("random", "user")
SOURCES = ("tiny", "hand")


def hand_made() -> RatingsDataset:
    """Users with 1, 2, 3, 4, 6, 9 and 15 ratings, distinct times per user, shuffled rows, and an
    index that is neither sorted nor 0-based, so a split that drops the index shows up."""
    counts = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 9, 7: 15}
    rng = np.random.default_rng(7)
    user = np.repeat(list(counts), list(counts.values()))
    n = len(user)
    item = np.concatenate([rng.choice(50, c, replace=False) + 1 for c in counts.values()])
    rating = rng.integers(1, 6, n)
    # Timestamps may repeat across users but not within one.
    timestamp = np.concatenate([1_000 + rng.choice(100, c, replace=False) * 10 for c in counts.values()])
    frame = ratings_frame(user, item, rating, timestamp)
    frame.index = pd.Index(np.arange(500, 500 + 3 * n, 3))
    frame = frame.iloc[rng.permutation(n)]
    items = pd.DataFrame({"item": np.arange(1, 51), "title": "t", "genres": ""})
    return RatingsDataset("hand", frame, items, (1.0, 5.0))


@pytest.fixture(params=SOURCES)
def dataset(request: pytest.FixtureRequest) -> RatingsDataset:
    return request.getfixturevalue("tiny") if request.param == "tiny" else hand_made()


def split(dataset: RatingsDataset, kind: str, **kwargs: object) -> Split:
    return make_split(dataset, kind, **kwargs)  # type: ignore[arg-type]


def check_partition(ratings: pd.DataFrame, parts: Split) -> None:
    """Train and test are disjoint by index, together all rows, and keep the rows' content."""
    assert parts.train.index.intersection(parts.test.index).empty
    assert len(parts.train) + len(parts.test) == len(ratings)
    assert parts.train.index.union(parts.test.index).sort_values().equals(ratings.index.sort_values())
    both = pd.concat([parts.train, parts.test]).loc[ratings.index]
    pd.testing.assert_frame_equal(both, ratings)


# ---------------------------------------------------------------------------------------------
# Properties common to every computed split
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["random", "user", "user-last", "time"])
def test_split_is_a_partition(dataset: RatingsDataset, kind: str) -> None:
    parts = split(dataset, kind, test_n=2)
    check_partition(dataset.ratings, parts)
    assert len(parts.test) > 0 and len(parts.train) > 0


@pytest.mark.parametrize("kind", ["random", "user", "user-last", "time"])
def test_split_is_reproducible(dataset: RatingsDataset, kind: str) -> None:
    a = split(dataset, kind, seed=3, test_n=2)
    b = split(dataset, kind, seed=3, test_n=2)
    pd.testing.assert_frame_equal(a.train, b.train)
    pd.testing.assert_frame_equal(a.test, b.test)


@pytest.mark.parametrize("kind", SEEDED_KINDS)
def test_seed_changes_the_split(dataset: RatingsDataset, kind: str) -> None:
    a = split(dataset, kind, seed=0)
    b = split(dataset, kind, seed=1)
    assert not a.test.index.sort_values().equals(b.test.index.sort_values())
    check_partition(dataset.ratings, b)


@pytest.mark.parametrize("kind", ["user-last", "time"])
def test_deterministic_splits_ignore_the_seed(dataset: RatingsDataset, kind: str) -> None:
    a = split(dataset, kind, seed=0, test_n=2)
    b = split(dataset, kind, seed=1, test_n=2)
    pd.testing.assert_frame_equal(a.test, b.test)


# ---------------------------------------------------------------------------------------------
# Each kind's own rule
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("frac", [0.1, 0.2, 0.37, 0.5, 0.9])
def test_random_test_size(dataset: RatingsDataset, frac: float) -> None:
    parts = split(dataset, "random", test_frac=frac, seed=5)
    assert len(parts.test) == round(len(dataset.ratings) * frac)


@pytest.mark.parametrize("frac", [0.1, 0.2, 0.5, 0.9])
def test_user_split_keeps_every_user_in_training(dataset: RatingsDataset, frac: float) -> None:
    parts = split(dataset, "user", test_frac=frac, seed=2)
    counts = dataset.ratings.groupby("user").size()
    train_counts = parts.train.groupby("user").size().reindex(counts.index, fill_value=0)
    test_counts = parts.test.groupby("user").size().reindex(counts.index, fill_value=0)

    assert (train_counts >= 1).all()
    assert ((test_counts - counts * frac).abs() <= 1).all()
    assert (train_counts + test_counts == counts).all()


def test_user_split_with_one_rating_stays_in_training() -> None:
    ds = hand_made()
    for seed in range(5):
        parts = split(ds, "user", test_frac=0.9, seed=seed)
        assert 1 not in set(parts.test["user"])  # user 1 has a single rating


def expected_user_last(ratings: pd.DataFrame, test_n: int) -> set[int]:
    """Each user's latest `test_n` rows by timestamp, for users with more than `test_n` ratings."""
    picked: set[int] = set()
    for _, rows in ratings.groupby("user"):
        if len(rows) > test_n:
            picked |= set(rows.sort_values("timestamp", ascending=False).index[:test_n])
    return picked


@pytest.mark.parametrize("test_n", [1, 2, 3, 10, 14])
def test_user_last_holds_out_the_latest(dataset: RatingsDataset, test_n: int) -> None:
    ratings = dataset.ratings
    assert not ratings.duplicated(["user", "timestamp"]).any()  # so "latest" is unambiguous

    parts = split(dataset, "user-last", test_n=test_n)

    assert set(parts.test.index) == expected_user_last(ratings, test_n)
    counts = ratings.groupby("user").size()
    small = set(counts.index[counts <= test_n])
    assert not small & set(parts.test["user"])
    assert (parts.test.groupby("user").size() == test_n).all()


def test_user_last_exact_on_hand_made() -> None:
    ds = hand_made()
    parts = split(ds, "user-last", test_n=3)
    # Users 1-3 have at most 3 ratings; users 4-7 give up exactly 3 each.
    assert sorted(parts.test["user"].unique()) == [4, 5, 6, 7]
    assert len(parts.test) == 12
    for user, rows in parts.test.groupby("user"):
        train_times = parts.train.loc[parts.train["user"] == user, "timestamp"]
        assert rows["timestamp"].min() > train_times.max()


@pytest.mark.parametrize("frac", [0.1, 0.2, 0.5, 0.9])
def test_time_split_tests_on_the_future(dataset: RatingsDataset, frac: float) -> None:
    parts = split(dataset, "time", test_frac=frac)
    assert len(parts.test) == round(len(dataset.ratings) * frac)
    assert parts.test["timestamp"].min() >= parts.train["timestamp"].max()


def test_time_split_with_tied_times() -> None:
    frame = ratings_frame(
        np.arange(1, 11), np.full(10, 7), np.full(10, 3.0), np.array([5, 1, 5, 2, 5, 3, 5, 4, 5, 5])
    )
    ds = RatingsDataset("ties", frame, pd.DataFrame(columns=["item", "title", "genres"]), (1.0, 5.0))
    parts = split(ds, "time", test_frac=0.3)
    assert len(parts.test) == 3
    assert (parts.test["timestamp"] == 5).all()
    assert parts.test["timestamp"].min() >= parts.train["timestamp"].max()
    check_partition(frame, parts)


def test_ties_in_time_go_by_file_order_alike_in_both_time_splits() -> None:
    # One user's six ratings, the last four in one second: the later lines are the later ratings.
    frame = ratings_frame(np.full(6, 1), np.arange(1, 7), np.full(6, 3.0), np.array([1, 2, 9, 9, 9, 9]))
    ds = RatingsDataset("ties", frame, pd.DataFrame(columns=["item", "title", "genres"]), (1.0, 5.0))
    assert sorted(split(ds, "user-last", test_n=2).test["item"]) == [5, 6]
    assert sorted(split(ds, "time", test_frac=2 / 6).test["item"]) == [5, 6]


@pytest.mark.parametrize("test_n", [15, 2**63, 10**30])
def test_user_last_with_more_to_hold_out_than_any_user_has_holds_out_none(test_n: int) -> None:
    """Regression: a test_n past int64 (a typo of many digits) ended in numpy's OverflowError, a
    traceback, where any count at least the largest user's keeps every rating in training."""
    parts = split(hand_made(), "user-last", test_n=test_n)
    assert parts.test.empty
    check_partition(hand_made().ratings, parts)


# ---------------------------------------------------------------------------------------------
# Bad arguments
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FRAC_KINDS)
@pytest.mark.parametrize("frac", [0.0, 1.0, -0.1, 1.5])
def test_bad_fraction(kind: str, frac: float) -> None:
    with pytest.raises(RecsysError, match="`test_frac`") as err:
        split(hand_made(), kind, test_frac=frac)
    assert str(frac) in str(err.value)


@pytest.mark.parametrize("test_n", [0, -1])
def test_bad_test_n(test_n: int) -> None:
    with pytest.raises(RecsysError, match="`test_n`"):
        split(hand_made(), "user-last", test_n=test_n)


def test_unknown_kind_lists_the_kinds() -> None:
    with pytest.raises(RecsysError, match="'leave-one-out'") as err:
        split(hand_made(), "leave-one-out")
    for kind in SPLIT_KINDS:
        assert kind in str(err.value)
    assert set(SPLIT_KINDS) == {"random", "user", "user-last", "time", *PREDEFINED_FOLDS}


@pytest.mark.parametrize("fold", ["u1", "ua"])
def test_fold_needs_ml100k(tiny: RatingsDataset, fold: str) -> None:
    with pytest.raises(RecsysError, match=fold) as err:
        make_split(tiny, fold)
    assert "tiny" in str(err.value)
    # Named ml-100k but not read from a folder (no fold files to read) is refused too.
    detached = RatingsDataset("ml-100k", tiny.ratings, tiny.items, (1.0, 5.0), folder=None)
    with pytest.raises(RecsysError, match=fold):
        make_split(detached, fold)


# ---------------------------------------------------------------------------------------------
# Predefined ml-100k folds: a small made-up folder, then the real one
# ---------------------------------------------------------------------------------------------

FAKE_BASE = [(1, 10, 4, 1_000_000_001), (1, 20, 2, 1_000_000_002), (2, 10, 5, 1_000_000_003)]
FAKE_TEST = [(2, 30, 1, 1_000_000_004)]


def tsv(rows: list[tuple]) -> str:
    return "".join("\t".join(map(str, row)) + "\n" for row in rows)


@pytest.fixture
def fake_ml100k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RatingsDataset:
    monkeypatch.delenv("RECSYS_DATA", raising=False)
    folder = tmp_path / "ml-100k"
    folder.mkdir()
    (folder / "u.data").write_text(tsv(FAKE_BASE + FAKE_TEST))
    (folder / "u.genre").write_text("".join(f"Kind{i}|{i}\n" for i in range(19)))
    flags = "|".join(["0"] * 19)
    (folder / "u.item").write_bytes(
        "".join(
            f"{i}|Made-up {i} (1990)|01-Jan-1990||http://example.invalid/{i}|{flags}\n" for i in (10, 20, 30)
        ).encode("latin-1")
    )
    (folder / "u1.base").write_text(tsv(FAKE_BASE))
    (folder / "u1.test").write_text(tsv(FAKE_TEST))
    return load_movielens("ml-100k", data_dir=folder, allow_download=False)


def test_fold_on_a_fake_ml100k_folder(fake_ml100k: RatingsDataset) -> None:
    parts = make_split(fake_ml100k, "u1")

    assert parts.train.values.tolist() == [list(r) for r in FAKE_BASE]
    assert parts.test.values.tolist() == [list(r) for r in FAKE_TEST]
    assert parts.train.dtypes.tolist() == fake_ml100k.ratings.dtypes.tolist()
    assert parts.test.dtypes.tolist() == fake_ml100k.ratings.dtypes.tolist()


def test_missing_fold_file_names_it(fake_ml100k: RatingsDataset) -> None:
    with pytest.raises(DataError, match="not found") as err:
        make_split(fake_ml100k, "u2")
    assert str(fake_ml100k.folder / "u2.base") in str(err.value)


def test_fold_split_rejects_unknown_fold(fake_ml100k: RatingsDataset) -> None:
    with pytest.raises(RecsysError, match="'u6'") as err:
        fold_split(fake_ml100k, "u6")
    assert "u1" in str(err.value) and "ub" in str(err.value)


@pytest.fixture(scope="module")
def real_ml100k(ml100k_folder: Path) -> RatingsDataset:
    return load_movielens("ml-100k", data_dir=ml100k_folder, allow_download=False)


def pairs(frame: pd.DataFrame) -> pd.Index:
    return pd.MultiIndex.from_arrays([frame["user"], frame["item"]])


@pytest.mark.slow
def test_real_u_folds(real_ml100k: RatingsDataset) -> None:
    all_pairs = pairs(real_ml100k.ratings)
    assert all_pairs.is_unique and len(all_pairs) == 100_000
    tests = []
    for fold in ("u1", "u2", "u3", "u4", "u5"):
        parts = make_split(real_ml100k, fold)
        assert (len(parts.train), len(parts.test)) == (80_000, 20_000), fold
        assert pairs(parts.train).intersection(pairs(parts.test)).empty, fold
        assert pairs(parts.train).union(pairs(parts.test)).sort_values().equals(all_pairs.sort_values())
        tests.append(pairs(parts.test))
    together = tests[0].append(tests[1:])
    assert len(together) == 100_000 and together.is_unique
    assert together.sort_values().equals(all_pairs.sort_values())


@pytest.mark.slow
@pytest.mark.parametrize("fold", ["ua", "ub"])
def test_real_per_user_folds(real_ml100k: RatingsDataset, fold: str) -> None:
    parts = make_split(real_ml100k, fold)
    assert len(parts.test) == 9_430
    assert len(parts.train) == 100_000 - 9_430
    per_user = parts.test.groupby("user").size()
    assert len(per_user) == 943 and (per_user == 10).all()
    assert pairs(parts.train).intersection(pairs(parts.test)).empty


@pytest.mark.parametrize(("seed", "shown"), [(-1, "-1"), (1.5, "1.5"), (True, "True")])
def test_a_split_seed_that_is_no_whole_number_from_0_is_named(seed: object, shown: str) -> None:
    with pytest.raises(RecsysError, match=rf"`seed` must be a whole number of at least 0, got {shown}"):
        make_split(load_dataset("tiny"), "random", seed=seed)  # type: ignore[arg-type]


def test_a_test_frac_given_as_text_is_shown_as_text() -> None:
    with pytest.raises(RecsysError, match=r"`test_frac` must lie strictly between 0 and 1, got '0.2'"):
        make_split(load_dataset("tiny"), "random", test_frac="0.2")  # type: ignore[arg-type]
