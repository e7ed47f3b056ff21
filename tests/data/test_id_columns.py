"""recsys.data.id_columns: text ids are held as codes into their distinct values, from the reader
through the splits to the id maps, and give what one Python string per rating gave."""

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from recsys.data.dataset import RatingsDataset
from recsys.data.encoding import encode_split
from recsys.data.ratings_file import load_ratings
from recsys.data.splits import Split, make_split

USERS = [f"{n:08x}-9f00-4c3e-8a1d-2b6d7e0a1c55" for n in range(20)]
ITEMS = [f"isbn-{n:04d}" for n in range(30)]
KINDS = ("random", "user", "user-last", "time")


def uuid_ratings(path: Path) -> Path:
    """2,000 ratings of 20 users and 30 items, a few ids with spaces around them, some pairs twice."""
    rng = np.random.default_rng(7)
    lines = ["user,item,rating,timestamp"]
    for row in range(2000):
        user = USERS[rng.integers(len(USERS))]
        item = ITEMS[rng.integers(len(ITEMS))]
        spaced = " " + user if row % 97 == 0 else user
        lines.append(f"{spaced},{item},{rng.integers(1, 6)},{rng.integers(10**6)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def as_objects(split: Split) -> Split:
    """`split` with its ids as one Python string per rating, as tables held them before."""
    return Split(*(part.astype({"user": object, "item": object}) for part in (split.train, split.test)))


def per_rating_strings(*args: object, **kwargs: object) -> np.ndarray:
    raise AssertionError("text ids turned into a Python string per rating")


def test_text_ids_are_read_split_and_encoded_as_codes_into_their_distinct_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pd.Categorical, "__array__", per_rating_strings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the repeated pairs
        dataset = load_ratings(uuid_ratings(tmp_path / "r.csv"))
    ratings = dataset.ratings
    for column, distinct in (("user", USERS), ("item", ITEMS)):
        assert isinstance(ratings[column].dtype, pd.CategoricalDtype)
        assert sorted(ratings[column].cat.categories) == sorted(distinct)  # " a" read as "a"
        assert ratings[column].cat.codes.dtype.itemsize <= 4
    splits = {kind: make_split(dataset, kind, seed=3) for kind in KINDS}
    encoded = {kind: encode_split(split) for kind, split in splits.items()}
    monkeypatch.undo()
    for kind, split in splits.items():
        reference = encode_split(as_objects(split))
        assert encoded[kind].users.raw_ids.tolist() == reference.users.raw_ids.tolist()
        assert encoded[kind].items.raw_ids.tolist() == reference.items.raw_ids.tolist()
        assert all(type(raw) is str for raw in encoded[kind].users.raw_ids)
        for part in ("train", "test"):
            assert torch.equal(getattr(encoded[kind], part).x, getattr(reference, part).x)
            assert torch.equal(getattr(encoded[kind], part).y, getattr(reference, part).y)
        assert np.array_equal(encoded[kind].unknown_test_ratings, reference.unknown_test_ratings)


def test_a_table_of_text_ids_sorts_and_groups_them_as_text() -> None:
    """Its categories are the ids in their own order, not in order of first appearance: a notebook's
    `sort_values("user")` or `groupby("user")` orders them as it did when they were strings."""
    frame = pd.DataFrame(
        {"user": ["u9", "u1", "u5", "u1"], "item": ["b", "a", "c", "b"], "rating": [3, 4, 5, 1]}
    )
    ratings = RatingsDataset.from_frame(frame).ratings
    assert ratings.sort_values("user", kind="stable")["user"].tolist() == ["u1", "u1", "u5", "u9"]
    assert ratings.groupby("user", observed=True).size().to_dict() == {"u1": 2, "u5": 1, "u9": 1}
    assert list(ratings["item"].cat.categories) == ["a", "b", "c"]
