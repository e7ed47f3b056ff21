"""Raw ids to contiguous indices, fitted on the training ratings only.

Raw ids are the dataset's own (MovieLens user and movie ids); inner indices are rows of the
models' tables. Test ratings whose user or item never appears in training cannot be looked up:
`encode_split` sets them aside and counts them, and evaluation applies the chosen policy.
"""

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from recsys.data.id_columns import RawIds, id_values
from recsys.data.splits import Split
from recsys.errors import RecsysError

# Integer ids spanning at most this many times their count (MovieLens') are found through a table
# indexed by the id itself, instead of sorting and binary search.
DENSE_SPAN = 4
# Beyond this magnitude an id's offset from the smallest could overflow int64.
_DENSE_LIMIT = 2**62


@dataclass(frozen=True)
class IdMap:
    """Sorted unique raw ids; a raw id's inner index is its position."""

    raw_ids: np.ndarray

    @classmethod
    def fit(cls, raw: RawIds) -> "IdMap":
        if isinstance(raw, pd.Categorical):  # a table's text ids: each distinct one that occurs, once
            occurs = np.bincount(raw.codes, minlength=len(raw.categories)) > 0
            raw = raw.categories.to_numpy(dtype=object)[occurs]
        raw = np.asarray(raw)
        if raw.dtype.kind == "O":
            # Text ids: the distinct ones found by hashing, and only they sorted. np.unique sorts every
            # row, comparing Python strings one by one: minutes for 20M ratings of UUIDs.
            return cls(np.sort(pd.unique(raw)))
        bounds = _dense_range(raw)
        if bounds is None:
            return cls(np.unique(raw))
        present = np.flatnonzero(np.bincount(raw.astype(np.int64) - bounds[0]))
        return cls((present + bounds[0]).astype(raw.dtype))

    def __len__(self) -> int:
        return len(self.raw_ids)

    def known(self, raw: RawIds) -> np.ndarray:
        """Boolean mask of the raw ids that have an inner index (none where text meets integer ids)."""
        return self.positions(raw) >= 0

    def encode(self, raw: RawIds, kind: str = "id") -> np.ndarray:
        """Inner indices of `raw`; an id unseen in training is an error naming it."""
        positions = self.positions(raw)
        if (positions < 0).any():
            missing = np.asarray(raw)[positions < 0][:5].tolist()
            raise RecsysError(
                f"unknown {kind} id(s) {missing}: they do not occur in the training ratings "
                f"(a different dataset or split, or a new {kind})"
            )
        return positions

    def positions(self, raw: RawIds) -> np.ndarray:
        """Each raw id's inner index, -1 where it has none: a table lookup among dense integer ids, a
        binary search among other integer ids, a hash lookup among text ids (a binary search compares
        Python strings one by one), of each distinct one once where they come as codes."""
        if isinstance(raw, pd.Categorical):
            found = self.positions(raw.categories.to_numpy(dtype=object))
            return np.where(raw.codes >= 0, found[raw.codes], -1)
        raw = np.asarray(raw)
        if len(self.raw_ids) == 0 or (raw.dtype.kind in "OUS") == self.integer_ids:
            return np.full(np.shape(raw), -1, dtype=np.int64)
        if not self.integer_ids:
            return self._text_index.get_indexer(raw.astype(object)).astype(np.int64)
        table, bounds = self._dense_table, _integer_range(raw)
        if table is not None and bounds is not None:
            low = int(self.raw_ids[0])
            if low <= bounds[0] and bounds[1] < low + len(table):  # all inside: one gather, no masks
                return table[raw.astype(np.int64, copy=False) - low]  # an offset may not fit raw's type
            offset = raw.astype(np.int64) - low
            inside = (offset >= 0) & (offset < len(table))
            return np.where(inside, table[np.where(inside, offset, 0)], -1)
        position = np.searchsorted(self.raw_ids, raw).clip(max=len(self.raw_ids) - 1)
        return np.where(self.raw_ids[position] == raw, position, -1).astype(np.int64)

    @cached_property
    def _text_index(self) -> pd.Index:
        return pd.Index(self.raw_ids, dtype=object)

    @cached_property
    def _dense_table(self) -> np.ndarray | None:
        """Each raw id's inner index at (id - the smallest id), -1 at the absent ids between; None
        unless the ids are integers spanning at most DENSE_SPAN times their count."""
        bounds = _dense_range(self.raw_ids)
        if bounds is None:
            return None
        low, high = bounds
        table = np.full(high - low + 1, -1, np.int64)
        table[self.raw_ids.astype(np.int64) - low] = np.arange(len(self.raw_ids))
        return table

    def decode(self, inner: np.ndarray) -> np.ndarray:
        """Raw ids of inner indices."""
        return self.raw_ids[np.asarray(inner)]

    @property
    def integer_ids(self) -> bool:
        """Whether the raw ids are integers (MovieLens) rather than strings (ISBNs, UUIDs)."""
        return self.raw_ids.dtype.kind in "iu"

    def parse(self, text: str, kind: str = "id") -> int | str:
        """A raw id typed by a user, as this map's id type: an integer where the ids are integers;
        without spaces around it, as the readers keep ids."""
        if not self.integer_ids:
            return text.strip()
        try:
            return int(text)
        except ValueError:
            raise RecsysError(f"{kind} id {text!r}: this model's {kind} ids are integers") from None

    def to_plain(self) -> Tensor | list[str]:
        """The raw ids as a checkpoint stores them: a tensor of integers, or a list of strings."""
        return torch.from_numpy(self.raw_ids) if self.integer_ids else [str(raw) for raw in self.raw_ids]

    @classmethod
    def from_plain(cls, stored: Tensor | list[str]) -> "IdMap":
        """The map `to_plain` stored."""
        if isinstance(stored, Tensor):
            return cls(stored.numpy())
        if not isinstance(stored, list) or not all(isinstance(raw, str) for raw in stored):
            raise TypeError("raw ids are neither a tensor nor a list of strings")
        return cls(np.array(stored, dtype=object))


def _integer_range(ids: np.ndarray) -> tuple[int, int] | None:
    """The smallest and largest of non-empty integer `ids` whose offsets from each other fit int64;
    else None."""
    if ids.dtype.kind not in "iu" or len(ids) == 0:
        return None
    low, high = int(ids.min()), int(ids.max())
    return (low, high) if low > -_DENSE_LIMIT and high < _DENSE_LIMIT else None


def _dense_range(ids: np.ndarray) -> tuple[int, int] | None:
    """`_integer_range` of `ids` where it spans at most DENSE_SPAN times their count; else None."""
    bounds = _integer_range(ids)
    if bounds is None or bounds[1] - bounds[0] + 1 > DENSE_SPAN * len(ids):
        return None
    return bounds


@dataclass(frozen=True)
class RatingTensors:
    """Encoded ratings as compact tensors: x is (n, 2) [user, item] int64, y is (n,) float32. For a
    model that reads the ratings' times (bfm's time group) x is (n, 3) [user, item, time in seconds].
    Integer indices of a narrower type (int32, fastai's int8 and int16 codes) are widened to int64: the
    device engine's kernels multiply an index by the row width, which in int32 passes 2**31 beyond 33
    million rows of 64 factors. A bool tensor is no indices and is left for the model to refuse.

    The shapes are checked here because the compiled kernels index y by x's rows unchecked: a y shorter
    than x would be read past its end. A (n, 1) y, fastai's usual target shape, is flattened.
    """

    x: Tensor
    y: Tensor

    def __post_init__(self) -> None:
        if self.x.ndim != 2 or self.x.shape[1] not in (2, 3):
            raise ValueError(
                "x must be a (n, 2) tensor of [user, item] indices (or (n, 3) [user, item, time]), got "
                f"shape {tuple(self.x.shape)}"
            )
        if self.x.dtype not in (torch.int64, torch.bool) and not (
            self.x.is_floating_point() or self.x.is_complex()
        ):
            object.__setattr__(self, "x", self.x.long())
        if self.y.ndim == 2 and self.y.shape[1] == 1:
            object.__setattr__(self, "y", self.y.reshape(-1))
        if self.y.ndim != 1:
            raise ValueError(f"y must be a (n,) tensor of ratings, got shape {tuple(self.y.shape)}")
        if len(self.x) != len(self.y):
            raise ValueError(f"x has {len(self.x)} rows but y has {len(self.y)} ratings")

    def __len__(self) -> int:
        return len(self.y)

    def to(self, device: torch.device | str) -> "RatingTensors":
        return RatingTensors(self.x.to(device), self.y.to(device))

    def pairs(self) -> "RatingTensors":
        """The same ratings as [user, item] pairs, without their times."""
        return self if self.x.shape[1] == 2 else RatingTensors(self.x[:, :2], self.y)


@dataclass(frozen=True)
class EncodedSplit:
    """A split with ids encoded on its training part; test rows with unseen ids set aside."""

    users: IdMap
    items: IdMap
    train: RatingTensors
    test: RatingTensors
    unknown_test_ratings: np.ndarray  # ratings of test rows whose user or item is unseen
    train_mean: float
    train_times: np.ndarray | None = None  # each training rating's timestamp: a user's first ratings

    def pairs(self) -> "EncodedSplit":
        """The split with its ratings as [user, item] pairs, for what reads no times (another model
        than the one that read them, a baseline)."""
        return dataclasses.replace(self, train=self.train.pairs(), test=self.test.pairs())


def encode_ratings(
    ratings: pd.DataFrame, users: IdMap, items: IdMap, with_times: bool = False
) -> RatingTensors:
    """Encode a ratings table whose ids are all known; `with_times`: x's third column its timestamps."""
    columns = [
        users.encode(id_values(ratings["user"]), "user"),
        items.encode(id_values(ratings["item"]), "item"),
    ]
    if with_times:
        columns.append(ratings["timestamp"].to_numpy(np.int64))
    x = np.stack(columns, axis=1).astype(np.int64, copy=False)
    return RatingTensors(torch.from_numpy(x), torch.tensor(ratings["rating"].to_numpy(np.float32)))


def as_held(threshold: float) -> float:
    """A rating threshold as the ratings are held (float32), to compare them with: a rating of 7.7,
    held as 7.6999998, is at or above a threshold of 7.7."""
    return float(np.float32(threshold))


Held = TypeVar("Held", np.ndarray, Tensor)


def positive_strength(values: Held, threshold: float, rating_unit: float) -> Held:
    """How strongly ratings at or above a relevance `threshold` say the user likes the item, as the
    ranking models weigh them (training and fold-in alike): 1 at the threshold, one more per five-star
    unit above it, so that a 10 of ten weighs as a 5 of five (interactions' counts: unit 1)."""
    return 1 + (values - threshold) / rating_unit


def encode_split(split: Split, with_times: bool = False) -> EncodedSplit:
    """Fit id maps on `split.train` and encode both parts (`with_times`: as `encode_ratings`)."""
    users, items = IdMap.fit(id_values(split.train["user"])), IdMap.fit(id_values(split.train["item"]))
    known = users.known(id_values(split.test["user"])) & items.known(id_values(split.test["item"]))
    return EncodedSplit(
        users=users,
        items=items,
        train=encode_ratings(split.train, users, items, with_times),
        test=encode_ratings(split.test[known], users, items, with_times),
        unknown_test_ratings=split.test["rating"].to_numpy(np.float32)[~known],
        train_mean=float(split.train["rating"].mean()),
        train_times=split.train["timestamp"].to_numpy() if "timestamp" in split.train else None,
    )
