"""A new user's ratings as typed ("Star Wars (1977)=5") or as a CSV file of item and rating columns.

Light on purpose (no torch or pandas): the command parses them as it parses its flags.
"""

import csv
import math
import re
from pathlib import Path
from typing import NamedTuple

from recsys.data.columns import ALIASES, DECIMAL_COMMA, SEPARATORS, find_columns, normalised
from recsys.errors import RecsysError

# What a new user's file may separate its fields by (a title holds spaces): the one its header holds
# most of, a comma where none is more common.
_SEPARATORS = (",", *(sep for sep in SEPARATORS if sep not in ", "))
# The item column may hold titles or ids, and the rating column counts, as a ratings file's may.
_COLUMN_NAMES = {"item": ALIASES["item"] | ALIASES["title"], "rating": ALIASES["rating"] | ALIASES["weight"]}


def rating_pair(text: str) -> tuple[str, float]:
    """ "TITLE=RATING" (a title or an item id, then a number) as (name, rating); the last "=" splits,
    so a title may hold one. A malformed pair is an error quoting it."""
    name, sep, rating = text.rpartition("=")
    try:
        value = float(rating)
    except ValueError:
        value = math.nan
    if not sep or not name.strip() or not math.isfinite(value):
        raise RecsysError(f"expected TITLE=RATING (e.g. 'Star Wars (1977)=5'), got {text!r}")
    return name.strip(), value


class RatedFile(NamedTuple):
    """A new user's ratings read from a file: (item, rating) pairs, where each was ("FILE, line N"),
    and whether the item column is named for ids (`movieId`), not titles, so that an item is looked
    for by id first."""

    rated: list[tuple[str, float]]
    places: list[str]
    ids: bool


def read_rated(path: Path, events: bool = False) -> RatedFile:
    """A new user's ratings from a CSV file with a header naming an item column (titles or ids) and a
    rating column, by the names a ratings file's may have (`item`, `movieId`, `title`; `rating`,
    `score`, `count`), its fields separated by the separator its header holds most of (comma, tab,
    semicolon or pipe). A bad line is an error naming its place.
    `events`: for a model trained on interactions, whose file may have no rating column: each line
    is then one event of its item, and an item's lines are its count (as in an interactions file)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            header_line = file.readline()
            file.seek(0)
            delimiter = max(_SEPARATORS, key=header_line.count)
            reader = csv.reader(file, delimiter=delimiter)
            header = [name.strip() for name in next(reader, [])]
            found = find_columns(header, ("item", "rating"), None, str(path), aliases=_COLUMN_NAMES)
            counted = events and "item" in found and "rating" not in found
            if len(found) < 2 and not counted:
                wanted = (
                    "an item column (a count or weight column optional)"
                    if events
                    else "item and rating columns"
                )
                raise RecsysError(f"{path}: expected a header naming {wanted}, got {header}")
            item_column = header.index(found["item"])
            ids = normalised(found["item"]) in ALIASES["item"]
            rating_column = None if counted else header.index(found["rating"])
            rated, places = [], []
            for row in reader:
                if not any(cell.strip() for cell in row):
                    continue
                where = f"{path}, line {reader.line_num}"
                if len(row) != len(header):
                    raise RecsysError(f"{where}: expected {len(header)} fields, got {len(row)}")
                value = "1" if rating_column is None else row[rating_column]
                if delimiter != "," and re.fullmatch(DECIMAL_COMMA, value.strip()):  # "3,5" beside ";"
                    value = value.replace(",", ".")
                try:
                    rated.append(rating_pair(f"{row[item_column]}={value}"))
                    places.append(where)
                except RecsysError:
                    raise RecsysError(
                        f"{where}: expected an item and a number, got {row[item_column]!r}, {value!r}"
                    ) from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RecsysError(f"cannot read ratings from {path}: {error}") from None
    if not rated:
        raise RecsysError(f"{path}: no ratings in it")
    if rating_column is None:  # events: an item's lines counted, placed at its first
        counts: dict[str, float] = {}
        first: dict[str, str] = {}
        for (name, count), where in zip(rated, places, strict=True):
            counts[name] = counts.get(name, 0.0) + count
            first.setdefault(name, where)
        return RatedFile(list(counts.items()), [first[name] for name in counts], ids)
    return RatedFile(rated, places, ids)
