"""What using a trained run needs of the data it was trained on, saved in its run folder at training
(RECOMMEND_FILE), so that recommend.py answers without reading and splitting the ratings again.

The file is a numpy .npz of plain arrays, by name: `rating_scale` and `implicit`; each user's rated
items as compressed rows (`rated_starts`, `rated_items`: inner item indices, every rating of an
item the model knows), a row per user of the model in its order, then one per user who rated only
in the test part (`other_users`, sorted); and the item table's titles of the model's items in the
table's order (`titled_items`, `titles`); and `model_ids`, a digest of the users and items the model
knows, so that the file is read only beside its own run's checkpoint. Text is stored as UTF-8 bytes
with the end of each value.
"""

import hashlib
import io
import zipfile
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recsys.data.dataset import RatingsDataset
from recsys.data.encoding import IdMap
from recsys.data.id_columns import id_values
from recsys.errors import RecsysError
from recsys.files import atomic_write, read_file

# What numpy and zipfile raise for a file that is not what `save` wrote: an empty one is an EOFError, a
# garbled zip header can be NotImplementedError ("zip file version").
DAMAGE = (OSError, ValueError, KeyError, IndexError, EOFError, NotImplementedError, zipfile.BadZipFile)


@dataclass(frozen=True)
class RecommendData:
    """The rating scale, every user's rated items and the model's items' titles (see the module)."""

    rating_scale: tuple[float, float]
    implicit: bool
    rated_starts: np.ndarray
    rated_items: np.ndarray
    other_users: IdMap
    titled_items: np.ndarray
    titles: np.ndarray
    model_ids: str  # model_ids(users, items) of the model's maps

    @classmethod
    def of(cls, dataset: RatingsDataset, users: IdMap, items: IdMap) -> "RecommendData":
        """What `dataset` tells of a run whose model knows `users` and `items`."""
        user, item = dataset.ratings["user"], dataset.ratings["item"]
        rows = users.positions(id_values(user))
        newcomers = rows < 0
        other_users = IdMap.fit(id_values(user[newcomers]))
        rows[newcomers] = len(users) + other_users.positions(id_values(user[newcomers]))
        rated = items.positions(id_values(item))
        rows, rated = rows[rated >= 0], rated[rated >= 0].astype(np.int32)
        from recsys.train.grouping import grouped  # numba's: recommending loads none of it

        starts, rated, _ = grouped(rows, rated, rated, len(users) + len(other_users))
        titles = dataset.items["title"].to_numpy(dtype=object)
        titled = items.positions(dataset.items["item"].to_numpy())
        titled[pd.isna(titles)] = -1  # shown as untitled
        return cls(
            dataset.rating_scale,
            dataset.implicit,
            starts,
            rated,
            other_users,
            titled[titled >= 0].astype(np.int32),
            titles[titled >= 0],
            model_ids(users, items),
        )

    def rated_by(self, users: IdMap, user: int | str) -> np.ndarray:
        """The inner indices of the items raw `user` rated, `users` being the model's map (none for a
        user the data does not hold)."""
        row = int(users.positions(np.array([user]))[0])
        if row < 0 and (other := int(self.other_users.positions(np.array([user]))[0])) >= 0:
            row = len(users) + other
        if row < 0:
            return np.empty(0, dtype=self.rated_items.dtype)
        return self.rated_items[self.rated_starts[row] : self.rated_starts[row + 1]]

    def popularity(self, n_items: int) -> np.ndarray:
        """How many users rated each of the model's `n_items` items."""
        return np.bincount(self.rated_items, minlength=n_items)

    def titles_of(self, items: IdMap, inner: np.ndarray) -> np.ndarray:
        """The titles of the model's items `inner` (`items` its map), each item's first in the item
        table; an item the table does not name shows as "[item <id>]"."""
        by_item = np.full(len(items), None, dtype=object)
        first_named, first = np.unique(self.titled_items, return_index=True)
        by_item[first_named] = self.titles[first]
        named = by_item[inner]
        return np.array(
            [
                f"[item {raw}]" if title is None else title
                for raw, title in zip(items.decode(inner), named, strict=True)
            ],
            dtype=object,
        )

    def save(self, path: Path) -> None:
        """Write the arrays the module names to `path`, replacing it whole."""
        arrays: dict[str, Any] = {  # (numpy's stubs would take a dict of arrays for `allow_pickle`)
            "rating_scale": np.array(self.rating_scale, dtype=np.float64),
            "implicit": np.array(self.implicit),
            "rated_starts": self.rated_starts,
            "rated_items": self.rated_items,
            "titled_items": self.titled_items,
            "model_ids": np.array(self.model_ids),
            **_packed("titles", self.titles),
        }
        others = self.other_users.raw_ids
        arrays |= {"other_users": others} if self.other_users.integer_ids else _packed("other_users", others)
        atomic_write(path, lambda file: np.savez(file, **arrays))

    @classmethod
    def load(cls, path: Path, users: IdMap, items: IdMap) -> "RecommendData":
        """The data `save` wrote for a model that knows `users` and `items` (its checkpoint's maps); a
        file that is not one, cannot be read, or was written for another model (another run's) is an
        error naming it."""
        try:
            content = read_file(path)
        except FileNotFoundError:
            raise RecsysError(
                f"{path.parent} has no {path.name}, which train.py writes into every run folder (what "
                "each user rated, the items' titles): train the run again"
            ) from None
        except OSError as error:  # not damage: a folder in its place, or no permission to read it
            raise RecsysError(f"cannot read {path}: {error.strerror or error}") from None
        try:
            with np.load(io.BytesIO(content)) as stored:
                others = (
                    stored["other_users"] if "other_users" in stored else _unpacked(stored, "other_users")
                )
                data = cls(
                    (float(stored["rating_scale"][0]), float(stored["rating_scale"][1])),
                    bool(stored["implicit"]),
                    stored["rated_starts"],
                    stored["rated_items"],
                    IdMap(others),
                    stored["titled_items"],
                    _unpacked(stored, "titles"),
                    str(stored["model_ids"]),
                )
        except DAMAGE as error:
            raise RecsysError(f"{path} is damaged ({error}); train the run again") from None
        if data.model_ids != model_ids(users, items):
            raise RecsysError(
                f"{path} is another run's: it was written for other users and items than its checkpoint's "
                "model knows; train the run again"
            )
        return data


def model_ids(users: IdMap, items: IdMap) -> str:
    """A digest of the raw ids of a model's `users`, then its `items`."""
    digest = hashlib.blake2b(digest_size=16)
    for ids in (users, items):
        raw = ids.raw_ids
        parts = [raw.astype(np.int64)] if ids.integer_ids else list(_packed("ids", raw).values())
        digest.update(np.int64(len(raw)).tobytes())  # where the users end and the items begin
        for part in parts:
            digest.update(np.ascontiguousarray(part).data)
    return digest.hexdigest()


def _packed(name: str, texts: np.ndarray) -> dict[str, np.ndarray]:
    """Text values as one array of their UTF-8 bytes and one of where each ends."""
    encoded = [str(text).encode() for text in texts]
    return {
        f"{name}_utf8": np.frombuffer(b"".join(encoded), dtype=np.uint8),
        f"{name}_ends": np.cumsum([len(value) for value in encoded], dtype=np.int64),
    }


def _unpacked(stored: np.lib.npyio.NpzFile, name: str) -> np.ndarray:
    """The text values `_packed` stored under `name`."""
    data = stored[f"{name}_utf8"].tobytes()
    ends = stored[f"{name}_ends"]
    return np.array([data[start:end].decode() for start, end in pairwise([0, *ends])], dtype=object)
