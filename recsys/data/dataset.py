"""The in-memory form every loader returns: a ratings table, an item table and the rating scale."""

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recsys.errors import DataError

RATING_COLUMNS = ["user", "item", "rating", "timestamp"]
# A predefined fold: row positions into the dataset's ratings of its training and its test part.
FoldRows = tuple[np.ndarray, np.ndarray]
ITEM_COLUMNS = ["item", "title", "genres"]


@dataclass(frozen=True)
class RatingsDataset:
    """Ratings with raw ids (`user`, `item`, `rating`, `timestamp`) and item titles and genres.

    `folder` is where the files were read from (None for generated data). `folds` are the
    predefined splits the data comes with (ml-100k's u1..u5, ua, ub), by name: splits select them.
    """

    name: str
    ratings: pd.DataFrame
    items: pd.DataFrame
    rating_scale: tuple[float, float]
    folder: Path | None = None
    folds: Mapping[str, FoldRows] = field(default_factory=dict, compare=False, repr=False)
    # How to load it again, as plain data a run folder records: {"folder": ...} for a dataset read
    # from a folder; empty for generated data.
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
        ratings: pd.DataFrame,
        *,
        user: str | None = None,
        item: str | None = None,
        rating: str | None = None,
        timestamp: str | None = None,
        items: pd.DataFrame | None = None,
        name: str = "ratings",
        rating_scale: tuple[float, float] | None = None,
    ) -> "RatingsDataset":
        """Ratings from a DataFrame, checked as a ratings file is. Columns not named are found by
        common names (userId, item_id, score, ...); without a timestamp, row order stands for time.
        `items` is a table of item ids and titles (and genres), for reports and recommendations."""
        from recsys.data.ratings_table import dataset_from_frame

        columns = {"user": user, "item": item, "rating": rating, "timestamp": timestamp}
        return dataset_from_frame(ratings, columns, items=items, name=name, rating_scale=rating_scale)

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


# The width of fastai's y_range (0, 5.5) for five stars: the scale every default was tuned on.
FIVE_STAR_WIDTH = 5.5


def default_y_range(scale: tuple[float, float], margin: float = 0.1) -> tuple[float, float]:
    """fastai's convention, (0, 1.1 * max): (0, 5.5) for ratings 1-5 or 0.5-5, (0, 11) for 1-10;
    a scale reaching below zero (-10 to 10) stretches by a tenth at both ends instead. `margin`: the
    stretch, a tenth by default (tune.py searches it)."""
    low, high = scale
    return (min(0.0, low * (1 + margin)), max(0.0, high * (1 + margin)))


def rating_unit(scale: tuple[float, float]) -> float:
    """How large ratings on `scale` are against five stars: 1 for 1-5 and 0.5-5, 2 for 1-10, 20 for
    0-100. Training divides errors by it, so the tuned learning rates and penalties hold on any scale."""
    low, high = default_y_range(scale)
    return (high - low) / FIVE_STAR_WIDTH


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
            f"{source}: rating {rating[row]} in row {row + 1} is outside the scale {scale[0]:g}-{scale[1]:g}"
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


def warn_unnamed_items(ratings: pd.DataFrame, items: pd.DataFrame, source: Path | str) -> None:
    """Warn, with a count and an example, when rated items have no entry in the item table."""
    unnamed = np.setdiff1d(ratings["item"].to_numpy(), items["item"].to_numpy())
    if unnamed.size:
        warnings.warn(
            f"{source}: no entry for {unnamed.size} rated item "
            f"id{'s' if unnamed.size > 1 else ''}, e.g. {unnamed[0]} (titles shown as their raw id)",
            stacklevel=3,
        )


def _pair_keys(ratings: pd.DataFrame) -> np.ndarray:
    """One int64 per (user, item) pair, equal only for equal pairs: from the ids' offsets where
    integer ids allow it, else from codes of the distinct ids. Built in place: one array in all."""
    user, item = ratings["user"].to_numpy(), ratings["item"].to_numpy()
    spans = [int(ids.max()) - int(ids.min()) + 1 if ids.dtype.kind in "iu" else 0 for ids in (user, item)]
    if 0 in spans or spans[0] * spans[1] >= 2**63:  # text ids, or integers too far apart
        user, item = (pd.factorize(ids)[0].astype(np.int64) for ids in (user, item))
        spans = [int(user.max()) + 1, int(item.max()) + 1]
    keys = user - user.min()
    keys *= spans[1]
    keys += item
    keys -= item.min()
    return keys


def _has_duplicate_pairs(ratings: pd.DataFrame) -> bool:
    """Whether some (user, item) pair is rated twice: by sorting the pair keys, far cheaper than
    pandas' hashing on tens of millions of rows."""
    keys = _pair_keys(ratings)
    keys.sort()
    return bool((keys[1:] == keys[:-1]).any())


def keep_latest_duplicates(ratings: pd.DataFrame, source: Path | str) -> pd.DataFrame:
    """Keep one rating per (user, item), the latest by timestamp, and warn with the count dropped.

    MovieLens has none; a hand-made file may, and two answers for one pair would both be trained on
    and tested against.
    """
    if not _has_duplicate_pairs(ratings):
        return ratings
    order = np.argsort(ratings["timestamp"].to_numpy(), kind="stable")
    latest = ~ratings.iloc[order].duplicated(["user", "item"], keep="last").to_numpy()
    keep = np.zeros(len(ratings), dtype=bool)
    keep[order[latest]] = True
    warnings.warn(
        f"{source}: {len(ratings) - keep.sum()} duplicate (user, item) ratings dropped; "
        "kept the latest of each by timestamp (the later row where the file has no timestamps)",
        stacklevel=3,
    )
    return ratings[keep].reset_index(drop=True)
