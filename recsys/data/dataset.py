"""The in-memory form every loader returns: a ratings table, an item table and the rating scale."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import polars as pl

from recsys.data.columns import find_table_columns
from recsys.data.id_columns import id_dtype
from recsys.data.interactions import interactions_table
from recsys.data.ratings_table import (
    ITEM_COLUMNS,
    Where,
    check_scale,
    check_unique_columns,
    item_table,
    rating_step,
    ratings_table,
    row_of_frame,
    warn_unnamed_items,
)
from recsys.errors import DataError

RATING_COLUMNS = ["user", "item", "rating", "timestamp"]
# A predefined fold: row positions into the dataset's ratings of its training and its test part.
FoldRows = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class RatingsDataset:
    """Ratings with raw ids (`user`, `item`, `rating`, `timestamp`) and item titles and genres.

    `implicit`: the table holds interactions, not ratings: `rating` is each user-item pair's strength
    (its number of events, or their summed weights; always > 0), `timestamp` its latest event's, and
    `rating_scale` the smallest and largest strength. `folder` is where the files were read from
    (None for generated data). `folds` are the predefined splits the data comes with (ml-100k's
    u1..u5, ua, ub), by name: splits select them.
    """

    name: str
    ratings: pd.DataFrame
    items: pd.DataFrame
    rating_scale: tuple[float, float]
    folder: Path | None = None
    # Keyword-only, so the positional fields after it (folds, origin) keep their places.
    implicit: bool = field(default=False, kw_only=True)
    # Who the users are and what the items are (recsys.data.features): a table per side indexed by raw
    # id, a column per feature group; None where the data has none.
    user_features: pd.DataFrame | None = field(default=None, kw_only=True, compare=False, repr=False)
    item_features: pd.DataFrame | None = field(default=None, kw_only=True, compare=False, repr=False)
    folds: Mapping[str, FoldRows] = field(default_factory=dict, compare=False, repr=False)
    # How to load it again, as plain data a run folder records: {"folder": ...} for a dataset read
    # from a folder; empty for the built-in generated data, {"generator": ...} for synthetic data
    # generated with settings of its own.
    origin: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def titles(self, items: np.ndarray) -> np.ndarray:
        """Titles of raw item ids; an id the item table does not name shows as "[item <id>]", not blank."""
        named = self.items.drop_duplicates("item").set_index("item")["title"]
        titles = named.reindex(items).to_numpy(dtype=object, copy=True)
        missing = pd.isna(titles)
        titles[missing] = [f"[item {item}]" for item in items[missing]]
        return titles

    @classmethod
    def from_frame(
        cls,
        ratings: "pd.DataFrame | pl.DataFrame",
        *,
        user: str | None = None,
        item: str | None = None,
        rating: str | None = None,
        timestamp: str | None = None,
        items: "pd.DataFrame | pl.DataFrame | None" = None,
        name: str = "ratings",
        rating_scale: tuple[float, float] | None = None,
        implicit: bool | None = None,
    ) -> "RatingsDataset":
        """Ratings from a pandas or polars DataFrame, checked as a ratings file is. Columns not named
        are found by common names (userId, item_id, score, ...); without a timestamp, row order stands
        for time. `items` is a table of item ids and titles (and genres), for reports and
        recommendations.
        `implicit` as for `load_ratings`: a frame without a rating column is read as interactions,
        and with `implicit` True the `rating` column, if any, is each event's weight."""
        columns = {"user": user, "item": item, "rating": rating, "timestamp": timestamp}
        return dataset_from_frame(
            ratings, columns, items=items, name=name, rating_scale=rating_scale, implicit=implicit
        )

    @property
    def default_y_range(self) -> tuple[float, float]:
        """fastai's convention for this dataset's scale (see `default_y_range`)."""
        return default_y_range(self.rating_scale)

    @property
    def default_split(self) -> str:
        """u1 where the data comes with ml-100k's predefined folds, else a random split."""
        return "u1" if "u1" in self.folds else "random"

    @property
    def rating_unit(self) -> float:
        """The size of this dataset's ratings against five stars (see `rating_unit`)."""
        return rating_unit(self.rating_scale)


# Five stars' span from 0, which fastai's y_range (0, 5.5) stretches by a tenth: the scale every
# default was tuned on.
FIVE_STARS = 5.0


def default_y_range(scale: tuple[float, float], margin: float = 0.1) -> tuple[float, float]:
    """fastai's convention, (0, 1.1 * max): (0, 5.5) for ratings 1-5 or 0.5-5, (0, 11) for 1-10;
    a scale reaching below zero (-10 to 10) stretches by a tenth at both ends instead. `margin`: the
    stretch, a tenth by default (tune.py searches it)."""
    low, high = scale
    return (min(0.0, low * (1 + margin)), max(0.0, high * (1 + margin)))


def rating_unit(scale: tuple[float, float]) -> float:
    """How large ratings on `scale` are against five stars: 1 for 1-5 and 0.5-5, 2 for 1-10, 20 for
    0-100. Training divides errors by it, so the tuned learning rates and penalties hold on any scale.
    The span default_y_range stretches by a tenth, from 0 (or the scale's negative end) to its top,
    against five stars': the stretch, the same on both, is left out (0-100 is 20, not 110 / 5.5)."""
    return (max(0.0, scale[1]) - min(0.0, scale[0])) / FIVE_STARS


def check_ratings(ratings: pd.DataFrame, source: Path | str, scale: tuple[float, float]) -> None:
    """Reject a ratings table that is empty, has missing values or leaves the rating scale."""
    if len(ratings) == 0:
        raise DataError(f"{source}: no ratings in file")
    if ratings[RATING_COLUMNS].isna().to_numpy().any():
        row = int(np.flatnonzero(ratings[RATING_COLUMNS].isna().any(axis=1).to_numpy())[0])
        raise DataError(f"{source}: missing or non-numeric value in rating row {row + 1}")
    rating = ratings["rating"].to_numpy()
    outside = np.flatnonzero((rating < scale[0]) | (rating > scale[1]))
    if outside.size:
        row = int(outside[0])
        raise DataError(
            f"{source}: rating {rating[row]} in row {row + 1} is outside the scale {span_text(*scale)}"
        )


def ratings_frame(
    user: np.ndarray, item: np.ndarray, rating: np.ndarray, timestamp: np.ndarray
) -> pd.DataFrame:
    """Build a ratings table with the canonical columns and compact dtypes."""
    return pd.DataFrame(
        {
            "user": user.astype(np.int64),
            "item": item.astype(np.int64),
            "rating": rating.astype(np.float32),
            "timestamp": timestamp.astype(np.int64),
        }
    )


def span_text(low: float, high: float) -> str:
    """A scale's ends as a message shows them: "1-5", or "-5 to 5" where a dash would read "-5-5"."""
    return f"{low:g} to {high:g}" if low < 0 else f"{low:g}-{high:g}"


def describe_scale(dataset: RatingsDataset) -> str:
    """The rating scale as a user reads it, e.g. "1-10 in steps of 1 (12,000 ratings)"; for
    interactions their pairs and strengths, e.g. "5,000 user-item pairs of strength 1-12, summing to
    7,200" (the number of events, where each weighs 1)."""
    low, high = dataset.rating_scale
    if dataset.implicit:
        total = float(dataset.ratings["rating"].to_numpy().sum(dtype=np.float64))
        shown = f"{total:,.0f}" if total == round(total) else f"{total:,.2f}"
        strength = f"{low:g}" if low == high else f"{low:g}-{high:g}"
        return f"{len(dataset.ratings):,} user-item pairs of strength {strength}, summing to {shown}"
    step = rating_step(dataset.ratings["rating"].to_numpy())
    spacing = f"in steps of {step:g}" if step is not None else "continuous"
    return f"{span_text(low, high)} {spacing} ({len(dataset.ratings):,} ratings)"


def dataset_from_table(
    name: str,
    raw: Mapping[str, pd.Series | None],
    n: int,
    *,
    raw_items: pd.DataFrame | None,
    rating_scale_given: tuple[float, float] | None,
    source: str,
    items_source: str,
    where: Where,
    items_where: Where = row_of_frame,
    origin: Mapping[str, Any],
) -> RatingsDataset:
    """A RatingsDataset from raw rating columns and an optional raw item table (its rows named by
    `items_where`); rated items the item table does not name are counted in a warning. Columns
    without a rating are interactions (see `columns_to_read`), which have no scale to give."""
    implicit = raw.get("rating") is None
    if implicit and rating_scale_given is not None:
        raise DataError(
            f"{source}: `rating_scale` is given, but the table is read as interactions (it has no rating "
            "column, or `implicit` is on), whose strengths (counts of events) have no scale; drop it"
        )
    if implicit:
        table, scale = interactions_table(raw, n, source, where)
    else:
        table, scale = ratings_table(raw, n, rating_scale_given, source, where)
    if raw_items is None:  # no titles: reports and recommend.py show raw ids
        items = pd.DataFrame({column: pd.Series(dtype=id_dtype(table["item"])) for column in ITEM_COLUMNS})
    else:
        items = item_table(raw_items, id_dtype(table["item"]), items_source, items_where)
        warn_unnamed_items(table, items, items_source)
    return RatingsDataset(name, table, items, scale, None, {}, dict(origin), implicit=implicit)


def _as_pandas(frame: object, expected: str) -> pd.DataFrame:
    """A pandas frame as it is; a polars frame as pandas over the same Arrow columns, so that ids keep
    their types (polars' plain conversion turns an integer column with a gap into floats)."""
    if isinstance(frame, pd.DataFrame):
        return frame
    kind = type(frame)
    if kind.__module__.startswith("polars.") and kind.__name__ == "DataFrame":  # not imported for a check
        return frame.to_pandas(use_pyarrow_extension_array=True)  # type: ignore[attr-defined]
    package = kind.__module__.partition(".")[0]
    raise TypeError(
        f"{expected}, got {kind.__name__ if package == 'builtins' else f'{package}.{kind.__name__}'}"
    )


def _named_index_as_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its named index levels after its columns, found or named as columns are: a frame
    indexed by its times (`set_index("timestamp")`) had them passed over, its row order read as time."""
    levels = dict.fromkeys(frame.index.names)  # each name once, in order
    names = [name for name in levels if name is not None and name not in frame.columns]
    if not names:
        return frame
    return frame.reset_index(level=names)[[*frame.columns, *names]]


def dataset_from_frame(
    frame: "pd.DataFrame | pl.DataFrame",
    columns: Mapping[str, str | None],
    *,
    items: "pd.DataFrame | pl.DataFrame | None",
    name: str,
    rating_scale: tuple[float, float] | None,
    implicit: bool | None = None,
) -> RatingsDataset:
    """`RatingsDataset.from_frame`: the columns given (None: found by common names) checked as a
    file's are; a bad value is named by its row position."""
    frame = _as_pandas(frame, "from_frame takes a pandas or polars DataFrame of ratings")
    if items is not None:
        items = _as_pandas(
            items, "from_frame's `items` is a pandas or polars DataFrame of item ids and titles"
        )
    check_scale(rating_scale, "the ratings frame")
    check_unique_columns(frame, "the ratings frame")
    frame = _named_index_as_columns(frame)
    labels = {str(label): label for label in frame.columns}
    given = {field: str(column) for field, column in columns.items() if column is not None}
    found = find_table_columns(
        list(labels), given, "the ratings frame", implicit=implicit, how_to_name="pass user=, item=, rating="
    )
    raw: dict[str, pd.Series | None] = {field: frame[labels[column]] for field, column in found.items()}
    raw.setdefault("timestamp", None)
    return dataset_from_table(
        name,
        raw,
        len(frame),
        raw_items=items,
        rating_scale_given=rating_scale,
        source="the ratings frame",
        items_source="the items frame",
        where=row_of_frame,
        origin={},
    )
