"""recsys.data.interactions and the readers' `implicit`: user-item events (views, plays, purchases)
read from files and frames, summed into one strength per pair; and the synthetic interactions."""

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recsys.data.catalog import dataset_from_record
from recsys.data.dataset import RatingsDataset, describe_scale
from recsys.data.ratings_file import load_ratings
from recsys.data.synthetic import synthetic_interactions
from recsys.errors import DataError

# Ann views x three times (the latest at 9, on the third row), y once; bob views x once.
EVENTS = "user,item,timestamp\nann,x,5\nbob,x,3\nann,x,9\nann,y,1\nann,x,7\n"


def write(path: Path, content: str) -> Path:
    path.write_text(content)
    return path


def rows(dataset: RatingsDataset) -> list[tuple[object, ...]]:
    """The table's rows as (user, item, strength, timestamp), in its order."""
    return list(dataset.ratings[["user", "item", "rating", "timestamp"]].itertuples(index=False, name=None))


def quietly_loaded(path: Path, **options: object) -> RatingsDataset:
    """load_ratings with every warning an error: summing repeats is what interactions mean, not a fault."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load_ratings(path, **options)  # type: ignore[arg-type]


def test_a_file_without_ratings_is_interactions_with_repeats_summed(tmp_path: Path) -> None:
    dataset = quietly_loaded(write(tmp_path / "views.csv", EVENTS))
    assert dataset.implicit
    # Each pair where its latest event stands, with that event's time.
    assert rows(dataset) == [("bob", "x", 1.0, 3), ("ann", "x", 3.0, 9), ("ann", "y", 1.0, 1)]
    assert dataset.ratings["rating"].dtype == np.float32
    assert dataset.rating_scale == (1.0, 3.0)
    assert describe_scale(dataset) == "3 user-item pairs of strength 1-3, summing to 5"
    assert "implicit" not in dataset.origin  # not given: the file decides again when a run reloads it


def test_without_timestamps_the_row_order_stands_for_time(tmp_path: Path) -> None:
    dataset = quietly_loaded(write(tmp_path / "pairs.csv", "1,2\n3,4\n1,2\n1,5\n"))
    assert dataset.implicit
    assert rows(dataset) == [(3, 4, 1.0, 1), (1, 2, 2.0, 2), (1, 5, 1.0, 3)]


@pytest.mark.parametrize(
    "content",
    [
        "user,item\n1,2\n",
        "1,2\n3,4\n",
        "user,item,timestamp\n1,2,100\n2,3,101\n",
        "userId,movieId,timestamp\n1,2,100\n",
    ],
)
def test_implicit_false_refuses_a_file_without_ratings(content: str, tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", content)
    with pytest.raises(DataError, match=r"no rating column .* `implicit` is off; .* bpr and ials") as error:
        load_ratings(path, implicit=False)
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


def test_implicit_true_reads_the_rating_column_as_each_events_weight(tmp_path: Path) -> None:
    path = write(tmp_path / "plays.csv", "user,item,rating,timestamp\n1,2,4,10\n1,2,3,20\n2,2,1,15\n")
    interactions = quietly_loaded(path, implicit=True)
    assert interactions.implicit and interactions.origin["implicit"] is True
    assert rows(interactions) == [(1, 2, 7.0, 20), (2, 2, 1.0, 15)]
    assert interactions.rating_scale == (1.0, 7.0)
    with pytest.warns(UserWarning, match="1 duplicate"):  # unset: the same file is ratings, as before
        ratings = load_ratings(path)
    assert not ratings.implicit and rows(ratings) == [(1, 2, 3.0, 20), (2, 2, 1.0, 15)]


def test_a_weight_column_is_found_by_name_and_only_for_interactions(tmp_path: Path) -> None:
    plays = write(tmp_path / "plays.csv", "userID,artistID,weight\n1,7,30\n1,7,12\n2,7,5\n")
    dataset = quietly_loaded(plays)
    assert dataset.implicit and rows(dataset) == [(1, 7, 42.0, 1), (2, 7, 5.0, 2)]
    # A rating column wins over a count beside it: the table is ratings, the count is not read.
    rated = write(tmp_path / "rated.csv", "user,item,rating,count\n1,7,4,30\n2,7,2,5\n")
    assert rows(quietly_loaded(rated)) == [(1, 7, 4.0, 0), (2, 7, 2.0, 1)]
    # Read as interactions, the named weight column weighs the events, not the rating column.
    assert rows(quietly_loaded(rated, implicit=True)) == [(1, 7, 30.0, 0), (2, 7, 5.0, 1)]
    # A column named as the weight is no rating: the table is interactions.
    weighted = quietly_loaded(rated, columns={"user": "user", "item": "item", "weight": "rating"})
    assert weighted.implicit and rows(weighted) == [(1, 7, 4.0, 0), (2, 7, 2.0, 1)]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("user,item,plays\n1,2,3\n\n2,3,-1\n", "line 4: an event weight must be positive, got -1"),
        ("user,item,plays\n1,2,3\n2,3,0\n", "line 3: an event weight must be positive, got 0"),
        ("user,item,plays\n1,2,3\n2,3,x\n", "event weight 'x' on line 3 is not a number"),
        ("user,item,plays\n1,2,3\n2,3,inf\n", "event weight 'inf' on line 3 is infinite, or beyond 3.4e"),
        ("user,item,plays\n1,2,3\n2,3,\n", "missing event weight on line 3"),
        ("user,item\n", "no interactions in file"),
    ],
)
def test_a_bad_weight_is_one_line_naming_its_line(content: str, expected: str, tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", content)
    with pytest.raises(DataError, match=expected) as error:
        load_ratings(path)
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


def test_interactions_have_no_rating_scale_to_give(tmp_path: Path) -> None:
    path = write(tmp_path / "views.csv", EVENTS)
    with pytest.raises(DataError, match="`rating_scale` is given, but the table is read as interactions"):
        load_ratings(path, rating_scale=(1, 5))


def test_a_frame_is_read_as_a_file_is() -> None:
    frame = pd.DataFrame({"uid": ["ann", "bob", "ann"], "sku": ["x", "x", "x"], "when": [5, 3, 9]})
    dataset = RatingsDataset.from_frame(frame)
    assert dataset.implicit and rows(dataset) == [("bob", "x", 1.0, 3), ("ann", "x", 2.0, 9)]
    weighted = RatingsDataset.from_frame(frame.assign(qty=[2.5, 1.0, 0.5]), rating="qty", implicit=True)
    assert rows(weighted) == [("bob", "x", 1.0, 3), ("ann", "x", 3.0, 9)]
    assert describe_scale(weighted) == "2 user-item pairs of strength 1-3, summing to 4"
    with pytest.raises(DataError, match="the ratings frame: row 2: an event weight must be positive, got -1"):
        RatingsDataset.from_frame(frame.assign(qty=[1, -1, 1]), rating="qty", implicit=True)
    with pytest.raises(DataError, match=r"no rating column .* pass user=, item=, rating="):
        RatingsDataset.from_frame(frame, implicit=False)


def test_parquet_is_read_as_text_is(tmp_path: Path) -> None:
    pd.read_csv(write(tmp_path / "v.csv", EVENTS)).to_parquet(tmp_path / "views.parquet")
    from_parquet = quietly_loaded(tmp_path / "views.parquet")
    assert from_parquet.implicit and rows(from_parquet) == rows(quietly_loaded(tmp_path / "v.csv"))
    plays = pd.DataFrame({"user": [1, 1, 2], "item": [7, 7, 7], "rating": [4.0, 3.0, 1.0], "ts": [1, 2, 3]})
    plays.to_parquet(tmp_path / "plays.parquet")
    assert rows(quietly_loaded(tmp_path / "plays.parquet", implicit=True)) == [(1, 7, 7.0, 2), (2, 7, 1.0, 3)]
    plays.assign(rating=[1.0, -2.0, 1.0]).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(DataError, match="row 2: an event weight must be positive, got -2"):
        load_ratings(tmp_path / "bad.parquet", implicit=True)


def test_a_run_record_reads_interactions_again_the_same_way(tmp_path: Path) -> None:
    path = write(tmp_path / "plays.csv", "user,item,rating\n1,2,4\n1,2,3\n2,2,1\n")
    first = quietly_loaded(path, implicit=True)
    again = dataset_from_record({"dataset": first.name, **first.origin}, first.name)
    assert again.implicit and rows(again) == rows(first) == [(1, 2, 7.0, 1), (2, 2, 1.0, 2)]


def test_synthetic_interactions_are_reproducible_by_seed() -> None:
    first, first_truth = synthetic_interactions(n_users=40, n_items=30, per_user=5, seed=3)
    second, second_truth = synthetic_interactions(n_users=40, n_items=30, per_user=5, seed=3)
    other, other_truth = synthetic_interactions(n_users=40, n_items=30, per_user=5, seed=4)
    assert first.ratings.equals(second.ratings) and np.array_equal(
        first_truth.scores(), second_truth.scores()
    )
    assert not first.ratings[["user", "item"]].equals(other.ratings[["user", "item"]])
    assert not np.array_equal(first_truth.scores(), other_truth.scores())


def test_synthetic_interactions_follow_the_planted_ranking() -> None:
    dataset, truth = synthetic_interactions(n_users=200, n_items=100, n_factors=3, per_user=10, seed=0)
    table = dataset.ratings
    assert dataset.implicit and dataset.rating_scale == (1.0, 1.0) and (table["rating"] == 1).all()
    assert len(table) == 200 * 10 and not table.duplicated(["user", "item"]).any()
    assert (table.groupby("user").size() == 10).all() and table["timestamp"].is_monotonic_increasing
    assert truth.scores().shape == (200, 100) and len(dataset.items) == 100
    # The picked items rank high among their user's true scores: well above the middle, on average.
    scores = truth.scores()
    ranks = scores.argsort(axis=1).argsort(axis=1) / (scores.shape[1] - 1)  # 0 the lowest, 1 the highest
    picked = ranks[table["user"].to_numpy() - 1, table["item"].to_numpy() - 1]
    assert picked.mean() > 0.75
    with pytest.raises(ValueError, match="per_user <= n_items"):
        synthetic_interactions(n_items=5, per_user=6)
