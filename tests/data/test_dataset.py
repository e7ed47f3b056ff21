"""recsys.data.dataset: the ratings table's canonical form, its checks, and titles by raw id."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from movielens_files import WHOLE_RATINGS, check_dtypes, expected_ratings

from recsys.data.dataset import RatingsDataset, check_ratings, default_y_range, rating_unit, ratings_frame
from recsys.errors import DataError


def test_ratings_frame_has_the_canonical_columns_and_dtypes() -> None:
    frame = ratings_frame(np.array([1, 2]), np.array([10, 20]), np.array([4, 3.5]), np.array([7, 8]))
    check_dtypes(frame)
    assert frame.values.tolist() == [[1, 10, 4.0, 7], [2, 20, 3.5, 8]]


def test_titles_of_unknown_ids_on_an_empty_item_table() -> None:
    no_items = pd.DataFrame(columns=["item", "title", "genres"])
    ds = RatingsDataset("x", expected_ratings(WHOLE_RATINGS), no_items, (1.0, 5.0))
    assert ds.titles(np.array([7, 8])).tolist() == ["[item 7]", "[item 8]"]


def test_titles_follow_the_ids_asked_for() -> None:
    items = pd.DataFrame({"item": [10, 20], "title": ["Ten", "Twenty"], "genres": ""})
    ds = RatingsDataset("x", expected_ratings(WHOLE_RATINGS), items, (1.0, 5.0))
    assert ds.titles(np.array([20, 30, 10, 20])).tolist() == ["Twenty", "[item 30]", "Ten", "Twenty"]


@pytest.mark.parametrize(
    ("scale", "y_range"),
    [
        ((1.0, 5.0), (0.0, 5.5)),
        ((0.5, 5.0), (0.0, 5.5)),
        ((1.0, 10.0), (0.0, 11.0)),
        ((-10.0, 10.0), (-11.0, 11.0)),
    ],
)
def test_default_y_range_is_fastais_zero_to_1_1_times_the_top(
    scale: tuple[float, float], y_range: tuple[float, float]
) -> None:
    ds = RatingsDataset("x", expected_ratings(WHOLE_RATINGS), pd.DataFrame(), scale)
    assert ds.default_y_range == pytest.approx(y_range)


@pytest.mark.parametrize(
    ("scale", "unit"),
    [((1.0, 5.0), 1.0), ((0.5, 5.0), 1.0), ((1.0, 10.0), 2.0), ((0.0, 100.0), 20.0), ((1.0, 7.0), 1.4),
     ((-10.0, 10.0), 4.0), ((-5.0, -1.0), 1.0)],
)  # fmt: skip
def test_the_rating_unit_is_the_scales_size_against_five_stars_as_written(
    scale: tuple[float, float], unit: float
) -> None:
    # Exactly: config.json shows it (20.000000000000004 for 0-100 had been read from 110 / 5.5).
    assert rating_unit(scale) == unit
    low, high = default_y_range(scale)
    assert (high - low) / 5.5 == pytest.approx(unit)  # the y_range's width against fastai's (0, 5.5)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([], "source: no ratings in file"),
        ([(1, 10, float("nan"), 5)], "source: missing or non-numeric value in rating row 1"),
        ([(1, 10, 4.0, 5), (2, 10, 5.5, 6)], "source: rating 5.5 in row 2 is outside the scale 1-5"),
        ([(1, 10, 0.5, 5)], "source: rating 0.5 in row 1 is outside the scale 1-5"),
    ],
    ids=["empty", "missing", "above", "below"],
)
def test_check_ratings_names_the_first_bad_row(rows: list[tuple], message: str) -> None:
    columns = [np.array(column) for column in zip(*rows, strict=True)] if rows else [np.zeros(0)] * 4
    with pytest.raises(DataError) as error:
        check_ratings(ratings_frame(*columns), "source", (1.0, 5.0))
    assert str(error.value) == message


def test_check_ratings_accepts_ratings_on_the_scale() -> None:
    check_ratings(expected_ratings(WHOLE_RATINGS), "source", (1.0, 5.0))


@pytest.mark.parametrize(
    ("offset", "step", "refused"), [(1e9, 1.0, True), (2.0**24, 0.5, True), (1e5, 0.5, False)]
)
def test_ratings_float32_cannot_keep_apart_are_refused(offset: float, step: float, refused: bool) -> None:
    """Ratings are held as float32 (about 7 digits): 1e9 + 1 ... 1e9 + 5 all read as 1e9, and 2**24 +
    0.5 steps round to whole numbers. Such a common offset is named, not silently merged or rounded."""
    frame = pd.DataFrame(
        {"user": np.repeat(np.arange(20), 5), "item": np.tile(np.arange(5), 20),
         "rating": offset + step * np.tile(np.arange(1, 6), 20)}
    )  # fmt: skip
    if refused:
        with pytest.raises(DataError, match=r"too close beside their size for float32 .* common offset"):
            RatingsDataset.from_frame(frame)
    else:
        held = RatingsDataset.from_frame(frame).ratings["rating"].to_numpy(np.float64)
        np.testing.assert_array_equal(np.unique(held), offset + step * np.arange(1, 6))


def test_a_negative_scale_is_written_with_to_not_a_dash() -> None:
    """ "-5-5" reads as a subtraction: a scale below zero is "-5 to 5"."""
    frame = pd.DataFrame({"user": [1, 2], "item": [1, 2], "rating": [-5.0, 7.0], "timestamp": [0, 0]})
    with pytest.raises(DataError, match=r"rating 7\.0 in row 2 is outside the scale -5 to 5$"):
        check_ratings(frame, "own.csv", (-5.0, 5.0))
    with pytest.raises(DataError, match=r"outside the scale 1-5$"):
        check_ratings(frame.assign(rating=[1.0, 6.0]), "own.csv", (1.0, 5.0))
