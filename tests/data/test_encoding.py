"""Tests for recsys.data.encoding: id maps fitted on training ratings and encoded splits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from recsys.data.dataset import ratings_frame
from recsys.data.encoding import DENSE_SPAN, IdMap, RatingTensors, encode_split
from recsys.data.splits import Split
from recsys.errors import RecsysError


def test_fit_gives_sorted_unique_ids() -> None:
    ids = IdMap.fit(np.array([30, 7, 30, 1000, 7, 2]))
    assert ids.raw_ids.tolist() == [2, 7, 30, 1000]
    assert len(ids) == 4


class _CountedText(str):
    """A text id that counts how often it is compared by order."""

    comparisons = 0

    def __lt__(self, other: str) -> bool:
        _CountedText.comparisons += 1
        return str.__lt__(self, other)


def test_fitting_text_ids_sorts_only_the_distinct_ones() -> None:
    """Sorting every row's Python string took minutes for 20M UUID ratings: the distinct ids are
    found by hashing, and only they are sorted."""
    names = [f"user-{n:02d}" for n in range(20)]
    raw = np.array([_CountedText(names[n % 20]) for n in range(4000)], dtype=object)
    _CountedText.comparisons = 0
    ids = IdMap.fit(raw)
    assert ids.raw_ids.tolist() == sorted(names)
    assert _CountedText.comparisons < 200


def test_encode_decode_round_trip() -> None:
    raw = np.array([1000, 2, 30, 30, 7, 2])
    ids = IdMap.fit(raw)

    inner = ids.encode(raw)

    assert inner.tolist() == [3, 0, 2, 2, 1, 0]
    assert ids.decode(inner).tolist() == raw.tolist()
    assert ids.decode(np.arange(len(ids))).tolist() == [2, 7, 30, 1000]


@pytest.mark.parametrize("unknown", [5, 1, 2000])  # between, below and above the known ids
def test_encode_unknown_id_names_it(unknown: int) -> None:
    ids = IdMap.fit(np.array([2, 7, 30, 1000]))
    with pytest.raises(RecsysError, match="training") as err:
        ids.encode(np.array([7, unknown, 30]), "user")
    message = str(err.value)
    assert str(unknown) in message and "user" in message


def test_known_mask() -> None:
    ids = IdMap.fit(np.array([10, 20, 30]))
    query = np.array([10, 15, 20, 30, 31, 1_000_000, 9, 0, -5, 30])
    assert ids.known(query).tolist() == [True, False, True, True, False, False, False, False, False, True]


def test_known_with_a_single_id() -> None:
    ids = IdMap.fit(np.array([4, 4]))
    assert ids.known(np.array([3, 4, 5])).tolist() == [False, True, False]


@settings(max_examples=200, deadline=None, database=None)
@given(
    dtype=st.sampled_from([np.int64, np.int32, np.uint16, np.uint64]),
    low=st.integers(0, 1000),
    width=st.integers(1, 300),
    count=st.integers(1, 60),
    data=st.data(),
)
def test_ids_map_the_same_whether_dense_or_sparse(dtype, low, width, count, data) -> None:
    """Narrow ranges go through the dense table, wide ones through sorting: both give np.unique's
    ids, and the same inner index (or none) for any query, including ids outside the range."""
    signed = np.dtype(dtype).kind == "i"
    offset = -500 if signed else 0
    draws = st.integers(low + offset, low + offset + width)
    raw = np.array(data.draw(st.lists(draws, min_size=count, max_size=count)), dtype=dtype)
    ids = IdMap.fit(raw)
    assert ids.raw_ids.dtype == raw.dtype
    assert ids.raw_ids.tolist() == np.unique(raw).tolist()
    lowest = 0 if not signed else -2000
    query = np.array(data.draw(st.lists(st.integers(lowest, 3000), max_size=30)), dtype=dtype)
    index = {raw_id: position for position, raw_id in enumerate(ids.raw_ids.tolist())}
    assert ids.known(query).tolist() == [value in index for value in query.tolist()]
    known = query[ids.known(query)]
    assert ids.encode(known).tolist() == [index[value] for value in known.tolist()]


def test_narrow_integer_ids_take_the_table_and_wide_ones_the_binary_search() -> None:
    """So that the property above meets both paths (its widths run from 1 to 300 over 1 to 60 ids)."""
    assert IdMap.fit(np.arange(1, 944))._dense_table is not None
    assert IdMap.fit(np.arange(1, 944) * (DENSE_SPAN + 1))._dense_table is None
    assert IdMap.fit(np.array(["a", "b"]))._dense_table is None


def test_ids_all_within_a_dense_tables_range_are_looked_up_as_any_others() -> None:
    """Queries inside the table's range skip its bounds checks: the ids absent between still have
    no index."""
    ids = IdMap.fit(np.array([10, 12, 13, 17, 12]))
    assert ids._dense_table is not None
    inside = np.array([17, 10, 11, 13, 16, 12])
    assert ids.positions(inside).tolist() == [3, 0, -1, 2, -1, 1]
    assert ids.positions(np.append(inside, 18)).tolist() == [3, 0, -1, 2, -1, 1, -1]
    assert ids.positions(inside.astype(np.int32)).tolist() == [3, 0, -1, 2, -1, 1]


def test_narrow_queries_inside_a_dense_table_below_zero_are_looked_up_exactly() -> None:
    """An id's offset from a table that starts below zero may not fit the query's own type: a 16-bit
    30000 lies 40000 past -10000, and an unsigned id cannot take a negative start."""
    ids = IdMap.fit(np.arange(-10000, 30001))
    assert ids.decode(ids.encode(np.array([30000, -10000], dtype=np.int16))).tolist() == [30000, -10000]
    small = IdMap.fit(np.arange(-5, 11))
    assert small.encode(np.array([3, 10], dtype=np.uint64)).tolist() == [8, 15]


def test_huge_integer_ids_are_looked_up_without_overflow() -> None:
    raw = np.array([2**63 - 10, 2**63 - 3, 2**63 - 10], dtype=np.uint64)
    ids = IdMap.fit(raw)
    assert ids.encode(np.array([2**63 - 3], dtype=np.uint64)).tolist() == [1]
    assert not ids.known(np.array([0, 2**64 - 1], dtype=np.uint64)).any()


# ---------------------------------------------------------------------------------------------
# encode_split
# ---------------------------------------------------------------------------------------------


def frame(rows: list[tuple]) -> pd.DataFrame:
    user, item, rating, timestamp = (np.array(col) for col in zip(*rows, strict=True))
    return ratings_frame(user, item, rating, timestamp)


TRAIN = [
    (100, 7, 4.0, 1),
    (5, 7, 2.0, 2),
    (100, 42, 5.0, 3),
    (60, 3, 1.0, 4),
    (5, 3, 3.5, 5),
]
TEST = [
    (5, 42, 4.5, 6),  # known user and item
    (999, 7, 2.5, 7),  # unknown user
    (60, 8, 1.5, 8),  # unknown item
    (1, 2, 3.0, 9),  # both unknown
    (100, 3, 5.0, 10),  # known
]


@pytest.fixture
def encoded():
    return encode_split(Split(frame(TRAIN), frame(TEST)))


def test_indices_are_contiguous(encoded) -> None:
    assert encoded.users.raw_ids.tolist() == [5, 60, 100]
    assert encoded.items.raw_ids.tolist() == [3, 7, 42]
    users, items = encoded.train.x[:, 0], encoded.train.x[:, 1]
    assert sorted(users.unique().tolist()) == list(range(len(encoded.users)))
    assert sorted(items.unique().tolist()) == list(range(len(encoded.items)))


def test_train_tensors(encoded) -> None:
    x, y = encoded.train.x, encoded.train.y
    assert x.dtype == torch.int64 and x.shape == (len(TRAIN), 2)
    assert y.dtype == torch.float32 and y.shape == (len(TRAIN),)
    assert len(encoded.train) == len(TRAIN)
    # Row order is kept and each row decodes back to its raw ids.
    assert encoded.users.decode(x[:, 0].numpy()).tolist() == [r[0] for r in TRAIN]
    assert encoded.items.decode(x[:, 1].numpy()).tolist() == [r[1] for r in TRAIN]
    assert y.tolist() == [r[2] for r in TRAIN]


def test_unseen_test_rows_are_set_aside(encoded) -> None:
    assert len(encoded.test) == 2
    assert encoded.test.x.dtype == torch.int64 and encoded.test.y.dtype == torch.float32
    assert encoded.users.decode(encoded.test.x[:, 0].numpy()).tolist() == [5, 100]
    assert encoded.items.decode(encoded.test.x[:, 1].numpy()).tolist() == [42, 3]
    assert encoded.test.y.tolist() == [4.5, 5.0]
    assert encoded.unknown_test_ratings.dtype == np.float32
    assert encoded.unknown_test_ratings.tolist() == [2.5, 1.5, 3.0]
    assert len(encoded.test) + len(encoded.unknown_test_ratings) == len(TEST)


def test_train_mean(encoded) -> None:
    assert encoded.train_mean == pytest.approx(np.mean([r[2] for r in TRAIN]))
    assert isinstance(encoded.train_mean, float)


def test_all_test_rows_known_leaves_nothing_aside() -> None:
    train = frame(TRAIN)
    enc = encode_split(Split(train, train.iloc[[4, 0]]))
    assert len(enc.test) == 2 and enc.unknown_test_ratings.size == 0
    assert enc.test.y.tolist() == [3.5, 4.0]


def test_encode_split_on_tiny(tiny) -> None:
    from recsys.data.splits import make_split

    parts = make_split(tiny, "random", test_frac=0.2, seed=0)
    enc = encode_split(parts)

    test = parts.test
    known = test["user"].isin(parts.train["user"]) & test["item"].isin(parts.train["item"])
    assert len(enc.test) == int(known.sum())
    assert enc.unknown_test_ratings.tolist() == test.loc[~known, "rating"].tolist()
    assert len(enc.users) == parts.train["user"].nunique()
    assert len(enc.items) == parts.train["item"].nunique()
    assert int(enc.train.x[:, 0].max()) == len(enc.users) - 1
    assert int(enc.train.x[:, 1].max()) == len(enc.items) - 1
    assert enc.train_mean == pytest.approx(float(parts.train["rating"].mean()))


def test_rating_tensors_refuse_shapes_the_kernels_would_misread() -> None:
    x = torch.tensor([[0, 1], [1, 0], [1, 1]])
    column = RatingTensors(x, torch.tensor([[4.0], [3.0], [5.0]]))  # fastai's (n, 1) targets
    assert column.y.shape == (3,) and len(column) == 3
    with pytest.raises(ValueError, match="x has 3 rows but y has 2 ratings"):
        RatingTensors(x, torch.tensor([4.0, 3.0]))
    with pytest.raises(ValueError, match=r"x must be a \(n, 2\) tensor.*\(3, 4\)"):
        RatingTensors(torch.zeros(3, 4, dtype=torch.long), torch.ones(3))
    with pytest.raises(ValueError, match=r"y must be a \(n,\) tensor.*\(3, 2\)"):
        RatingTensors(x, torch.ones(3, 2))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
def test_rating_tensors_widen_narrow_indices_to_int64(dtype: torch.dtype) -> None:
    # The device engine's kernels multiply an index by the row width: in int32 that passes 2**31.
    x = torch.tensor([[0, 1], [2, 0]], dtype=dtype)
    tensors = RatingTensors(x, torch.tensor([4.0, 3.0]))
    assert tensors.x.dtype == torch.int64 and tensors.x.tolist() == [[0, 1], [2, 0]]
    assert tensors.to("cpu").x.dtype == torch.int64


def test_rating_tensors_take_no_bool_tensor_for_indices() -> None:
    # Widened, True and False would read as users and items 1 and 0, silently.
    assert RatingTensors(torch.tensor([[True, False]]), torch.tensor([4.0])).x.dtype == torch.bool
