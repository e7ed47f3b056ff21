"""A new user's ratings as typed ("Star Wars (1977)=5") or as a CSV file of item and rating columns.

Light on purpose (no torch or pandas): the command parses them as it parses its flags.
"""

import csv
import math
from pathlib import Path

from recsys.data.columns import ALIASES, find_columns
from recsys.errors import RecsysError

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


def read_rated(path: Path) -> tuple[list[tuple[str, float]], list[str]]:
    """A new user's ratings from a CSV file with a header naming an item column (titles or ids) and a
    rating column, by the names a ratings file's may have (`item`, `movieId`, `title`; `rating`,
    `score`, `count`); and where each was ("FILE, line N"). A bad line is an error naming both."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            reader = csv.reader(file)
            header = [name.strip() for name in next(reader, [])]
            found = find_columns(header, ("item", "rating"), None, str(path), aliases=_COLUMN_NAMES)
            if len(found) < 2:
                raise RecsysError(f"{path}: expected a header naming item and rating columns, got {header}")
            item_column, rating_column = header.index(found["item"]), header.index(found["rating"])
            rated, places = [], []
            for row in reader:
                if not any(cell.strip() for cell in row):
                    continue
                where = f"{path}, line {reader.line_num}"
                if len(row) != len(header):
                    raise RecsysError(f"{where}: expected {len(header)} fields, got {len(row)}")
                try:
                    rated.append(rating_pair(f"{row[item_column]}={row[rating_column]}"))
                    places.append(where)
                except RecsysError:
                    raise RecsysError(
                        f"{where}: expected an item and a number, got {row[item_column]!r}, "
                        f"{row[rating_column]!r}"
                    ) from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RecsysError(f"cannot read ratings from {path}: {error}") from None
    if not rated:
        raise RecsysError(f"{path}: no ratings in it")
    return rated, places
