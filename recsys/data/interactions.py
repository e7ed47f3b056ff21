"""Implicit feedback: user-item events (views, plays, purchases) summed into one strength per pair.

The table keeps the ratings' columns: `rating` holds each pair's strength, the number of its events or
the sum of their weights (always > 0), and `timestamp` its latest event's time, so a split by time
holds out the pairs last interacted with.
"""

from collections.abc import Mapping

import numpy as np
import pandas as pd

from recsys.data.id_columns import id_codes
from recsys.data.ratings_table import (
    Where,
    has_duplicate_pairs,
    latest_of_each_pair,
    pair_keys,
    ratings,
    user_item_times,
)
from recsys.errors import DataError


def interactions_table(
    raw: Mapping[str, pd.Series | None], n: int, source: str, where: Where
) -> tuple[pd.DataFrame, tuple[float, float]]:
    """The canonical table (user, item, rating = strength, timestamp) of raw event columns, one row
    per pair, and its (smallest, largest) strength. `raw["weight"]`, if any, weighs each event."""
    table = user_item_times(raw, n, source, where, kind="interactions")
    table.insert(2, "rating", event_weights(raw.get("weight"), n, source, where))
    table = sum_events(table)
    strength = table["rating"].to_numpy()
    return table, (float(strength.min()), float(strength.max()))


def event_weights(column: pd.Series | None, n: int, source: str, where: Where) -> np.ndarray:
    """Each event's weight as float32: 1 without a weight column; one that is not a positive finite
    number is an error naming its place."""
    if column is None:
        return np.ones(n, dtype=np.float32)
    weights = ratings(column, source, where, what="event weight")
    not_positive = np.flatnonzero(weights <= 0)
    if not_positive.size:
        row = int(not_positive[0])
        raise DataError(f"{source}: {where(row)}: an event weight must be positive, got {weights[row]:g}")
    return weights


def sum_events(events: pd.DataFrame) -> pd.DataFrame:
    """One row per (user, item) pair, where its latest event stands: its `rating` the sum of its
    events' weights (summed in float64, so counts stay exact), its timestamp the latest event's."""
    if not has_duplicate_pairs(events):
        return events
    pairs = pd.factorize(pair_keys(id_codes(events["user"]), id_codes(events["item"])))[0]
    strength = np.bincount(pairs, weights=events["rating"].to_numpy(dtype=np.float64))
    latest = latest_of_each_pair(events)
    table = events[latest].reset_index(drop=True)
    table["rating"] = strength[pairs[latest]].astype(np.float32)
    return table
