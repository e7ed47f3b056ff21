"""MovieLens: the variants, their file layouts, and how each is read.

The ratings of the CSV layout (ml-latest-small, ml-20m, ml-25m, ml-32m) and ml-100k's tab-separated u.data
and fold files are sets of columns, named or by position, read by the reader of a user's own files
(recsys.data.ratings_file), so a byte-order mark, quoted fields or columns in another order read as
they do there, and a bad value is named by its line; ml-1m/10m's ratings.dat too, its "::" read
as one character. movies.dat and ml-100k's item files are read here, a bad value also named by its
line. Where a copy is found, or fetched and unpacked, is recsys.data.cache.
"""

import codecs
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recsys.data.cache import GROUPLENS_URL, local_copy
from recsys.data.columns import ITEM_FIELDS, find_columns
from recsys.data.dataset import FoldRows, RatingsDataset, span_text
from recsys.data.features import age_group, item_features_of, zip_region
from recsys.data.ratings_file import SNIFF_BYTES, packing, read_item_file, read_ratings_text
from recsys.data.ratings_table import (
    ITEM_COLUMNS,
    Where,
    first_entry_of_each_item,
    item_table,
    non_negative_integers,
    pair_keys,
    ratings_table,
    row_of_frame,
    titles_or_missing,
    warn_unnamed_items,
)
from recsys.errors import DataError
from recsys.names import PREDEFINED_FOLDS


@dataclass(frozen=True)
class Variant:
    """One MovieLens release: where it is served, how it is pinned, and how its files are laid out."""

    name: str
    folder: str  # the folder the zip unpacks to
    layout: str  # "100k" (u.data, u.item), "dat" (ratings.dat, movies.dat) or "csv"
    rating_scale: tuple[float, float]
    size: int | None
    sha256: str | None = None
    md5: str | None = None
    max_size: int | None = None  # where `size` is unknown: a bound on what a download may write

    @property
    def ratings_file(self) -> str:
        """The ratings file's name: every whole copy holds it."""
        return RATINGS_FILE[self.layout]


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant(
            "ml-100k",
            "ml-100k",
            "100k",
            (1, 5),
            4_924_029,
            sha256="50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
        ),
        Variant(
            "ml-1m",
            "ml-1m",
            "dat",
            (1, 5),
            5_917_549,
            sha256="a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
        ),
        # GroupLens publishes only an md5 for 10M and no size we could confirm offline.
        # GroupLens lists the zip at 63 MB: twice that bounds a server that sends without end.
        Variant(
            "ml-10m",
            "ml-10M100K",
            "dat",
            (0.5, 5),
            None,
            md5="ce571fd55effeba0271552578f2648bd",
            max_size=128 << 20,
        ),
        Variant(
            "ml-20m",
            "ml-20m",
            "csv",
            (0.5, 5),
            198_702_078,
            sha256="96f243c338a8665f6bcc89c53edf6ee39162a846940de6b7c8c48aeada765ff3",
        ),
        Variant(
            "ml-25m",
            "ml-25m",
            "csv",
            (0.5, 5),
            261_978_986,
            sha256="8b21cfb7eb1706b4ec0aac894368d90acf26ebdfb6aced3ebd4ad5bd1eb9c6aa",
        ),
        # GroupLens publishes only an md5 for 32M (ml-32m.zip.md5); the size is the zip's as served.
        Variant("ml-32m", "ml-32m", "csv", (0.5, 5), 238_950_008, md5="d472be332d4daa821edc399621853b57"),
        # "latest" changes over time: this pins one release, and a newer one fails closed.
        Variant(
            "ml-latest-small",
            "ml-latest-small",
            "csv",
            (0.5, 5),
            978_202,
            sha256="696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436",
        ),
    ]
}

RATINGS_FILE = {"100k": "u.data", "dat": "ratings.dat", "csv": "ratings.csv"}
ITEMS_FILE = {"100k": "u.item", "dat": "movies.dat", "csv": "movies.csv"}
# Who the users are: ml-100k's and ml-1m's demographics (the CSV variants have none).
USERS_FILE = {"100k": ("u.user", "|", "user|age|gender|occupation|zip"),
              "dat": ("users.dat", "::", "UserID::Gender::Age::Occupation::Zip-code")}  # fmt: skip
# What users said of items: the CSV variants' tags.csv (userId,movieId,tag,timestamp) and ml-10m's
# tags.dat (the same fields joined by "::"), read as each item's tags, side features.
TAGS_FILE = {"dat": "tags.dat", "csv": "tags.csv"}
# A tag is a feature where it was given to at least this many items: one item's own tag is its id again.
MIN_TAGGED_ITEMS = 2
# The CSV layout's columns, found by name wherever they stand (and in another case where only one
# column matches), as a user's own file is read with `columns` given.
CSV_RATINGS = {"user": "userId", "item": "movieId", "rating": "rating", "timestamp": "timestamp"}
CSV_ITEMS = {"item": "movieId", "title": "title", "genres": "genres"}
# ml-100k's u.data and its fold files (u1.base ... ub.test): tab-separated, no header, these four
# fields by position on every line.
U_DATA_RATINGS = {"user": "1", "item": "2", "rating": "3", "timestamp": "4"}
# Each layout's ratings file: its columns, separator, and whether it has a header. ml-1m/10m's
# ratings.dat is u.data's four fields joined by "::", each read as one character (the reader's
# STAND_IN) so polars' fast reader splits it.
RATINGS_LAYOUT: dict[str, tuple[Mapping[str, str], str, bool]] = {
    "100k": (U_DATA_RATINGS, "\t", False),
    "dat": (U_DATA_RATINGS, "::", False),
    "csv": (CSV_RATINGS, ",", True),
}
# How item files are read: all text, no NA values, so a title such as "1984" or "NA" stays itself.
AS_TEXT: dict[str, Any] = {"dtype": str, "keep_default_na": False}


def _shown(text: str, limit: int = 40) -> str:
    """`text` quoted, escaped and cut short, so file content in a message stays one printable line."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _check_text(path: Path, encoding: str) -> None:
    """Reject a missing, compressed or binary file before parsing, so its bytes never reach a message."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    with path.open("rb") as file:
        head = file.read(SNIFF_BYTES)
    packed = packing(head)
    if packed is not None:
        raise DataError(f"{path}: is {packed[1]}; expected a plain-text file (unpack it first)")
    if b"\0" in head:
        raise DataError(f"{path}: is not a text file (it holds NUL bytes)")
    try:
        # Incremental: a character cut in two at the end of `head` is not an error.
        codecs.getincrementaldecoder(encoding)().decode(head)
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: is not a text file (byte {error.start + 1} is not {encoding})") from None


def _read(path: Path, **read_csv_args: Any) -> pd.DataFrame:
    """pandas.read_csv with missing, binary and malformed files turned into one-line DataErrors."""
    encoding = read_csv_args.get("encoding", "utf-8")
    _check_text(path, encoding)
    try:
        with warnings.catch_warnings():
            # pandas only warns when a row's field count does not match the header: make it an error.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(path, **read_csv_args)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: file is empty") from None
    except UnicodeDecodeError:  # past the bytes _check_text looked at
        raise DataError(f"{path}: is not a text file (not {encoding} throughout)") from None
    except (pd.errors.ParserError, pd.errors.ParserWarning, ValueError) as error:
        message = str(error).strip().splitlines()[-1]
        raise DataError(f"{path}: cannot parse ({message})") from None


def _line_of_row(path: Path, encoding: str) -> Where:
    """How a row of a table pandas read from `path` is named: its line in the file, found by reading
    the file again (only for a message), the blank lines pandas skips counted."""

    def where(row: int) -> str:
        with path.open(encoding=encoding) as file:  # "\n", "\r\n" and "\r" end a line, as for pandas
            kept = (number for number, line in enumerate(file, start=1) if line.strip(" \t\r\n"))
            return next(
                (f"line {number}" for index, number in enumerate(kept) if index == row), row_of_frame(row)
            )

    return where


def _expect_fields(raw: pd.DataFrame, path: Path, n_fields: int, layout: str) -> pd.DataFrame:
    """Reject a table of ml-100k's (latin-1, "|" between fields, no quoting) whose lines do not each
    have exactly `n_fields` fields: pandas pads a short line with empty fields, which read as values
    (a gender of "student", a zip of "")."""
    if raw.shape[1] != n_fields:
        raise DataError(f"{path}: expected {layout} on every line, found {raw.shape[1]} fields")
    with path.open(encoding="latin-1") as file:
        for number, line in enumerate(file, start=1):
            if line.strip(" \t\r\n") and (found := line.count("|") + 1) != n_fields:
                raise DataError(f"{path}: line {number} has {found} fields; expected {layout}")
    return raw


def read_ratings(path: Path, layout: str, scale: tuple[float, float]) -> pd.DataFrame:
    """Parse a ratings file of `layout` into the canonical table, validated against `scale`."""
    if layout not in RATINGS_LAYOUT:
        raise ValueError(f"unknown layout {layout!r}")
    columns, sep, header = RATINGS_LAYOUT[layout]
    return _read_rating_columns(path, scale, columns, sep, header=header, fields=None if header else 4)[0]


def _read_rating_columns(
    path: Path,
    scale: tuple[float, float],
    columns: Mapping[str, str],
    sep: str,
    *,
    header: bool,
    fields: int | None = None,
) -> tuple[pd.DataFrame, int, Where]:
    """A ratings file read as a user's own file with its `columns` named (by position where it has
    no header); its ids non-negative integers and its ratings on the variant's scale, a bad value
    named by its line. Also the count of rows read (before duplicate pairs are dropped), and how a
    row is named."""
    raw, n, where = read_ratings_text(path, columns, sep, header, fields=fields, integer_ids=True)
    table, _ = ratings_table(
        raw,
        n,
        scale,
        str(path),
        where,
        integer_ids=True,
        scale_name=f"the scale {span_text(*scale)}",
    )
    return table, n, where


def read_items(folder: Path, layout: str) -> pd.DataFrame:
    """Parse item titles and genres ('|'-joined) for `layout` from `folder`."""
    path = folder / ITEMS_FILE[layout]
    where: Where
    if layout == "100k":
        items, where = _read_100k_items(path, _read_genres(folder / "u.genre")), _line_of_row(path, "latin-1")
    elif layout == "dat":
        items, where = _read_dat_items(path), _line_of_line
    else:
        return _read_csv_items(path)
    items["item"] = non_negative_integers(items["item"], "item id", str(path), where)
    items["title"] = titles_or_missing(items["title"])
    return first_entry_of_each_item(items, str(path), where)


def _read_csv_items(path: Path) -> pd.DataFrame:
    """movies.csv, read as a user's own item file, its three columns named; a bad id named by its line."""
    raw, where = read_item_file(path)
    found = find_columns([str(label) for label in raw.columns], ITEM_FIELDS, CSV_ITEMS, str(path))
    raw = raw[[found[field] for field in ITEM_FIELDS]].set_axis(ITEM_FIELDS, axis=1)
    non_negative_integers(raw["item"], "item id", str(path), where)  # MovieLens' ids, as the ratings'
    return item_table(raw, np.dtype(np.int64), str(path), where)


def read_tags(folder: Path, layout: str) -> pd.Series | None:
    """Each item's tags, "|"-joined, by item id: lowercased, each once, those given to fewer than
    MIN_TAGGED_ITEMS items left out; None where the variant has no tag file. A line without an item
    id and a tag is an error naming it."""
    path = folder / TAGS_FILE[layout] if layout in TAGS_FILE else None
    if path is None or not path.is_file():
        return None
    if layout == "dat":
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        rows = [(number, line.split("::")) for number, line in enumerate(lines, 1) if line.strip()]
        short = next((number for number, fields in rows if len(fields) < 3), None)
        if short is not None:
            raise DataError(f"{path}: line {short} is not UserID::MovieID::Tag::Timestamp")
        tags = pd.DataFrame([fields[1:3] for _, fields in rows], columns=["item", "tag"])
        lines_of = np.array([number for number, _ in rows])
    else:
        try:
            raw = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (ValueError, UnicodeDecodeError) as error:  # pandas' ParserError is a ValueError
            message = str(error).strip().splitlines()[-1]  # pandas' ends in a line break
            raise DataError(f"{path}: cannot read it as CSV ({message})") from None
        names = [str(label) for label in raw.columns]
        found = find_columns(names, ("item", "tag"), {"item": "movieId", "tag": "tag"}, str(path))
        tags = raw[[found["item"], found["tag"]]].set_axis(["item", "tag"], axis=1)
        lines_of = np.arange(len(tags)) + 2  # below the header
    items = pd.to_numeric(tags["item"].str.strip(), errors="coerce")
    bad = ~(items >= 0) | (items != items.round())
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(
            f"{path}: item id {tags['item'].iloc[row]!r} on line {lines_of[row]} is not a MovieLens id"
        )
    words = tags["tag"].str.strip().str.lower().str.replace("|", " ", regex=False)
    given = pd.DataFrame({"item": items.astype(np.int64), "tag": words})
    given = given[given["tag"] != ""].drop_duplicates()
    spread = given.groupby("tag")["item"].transform("size")
    given = given[spread >= MIN_TAGGED_ITEMS].sort_values(["item", "tag"])
    return given.groupby("item")["tag"].agg("|".join)


def _read_genres(path: Path) -> list[str]:
    """The genre names of u.genre, checked to be listed in the order of u.item's flag columns."""
    raw = _read(path, sep="|", header=None, encoding="latin-1", **AS_TEXT)
    raw = _expect_fields(raw, path, 2, "name|index")
    for row, index in enumerate(raw[1]):
        if index != str(row):
            place = _line_of_row(path, "latin-1")(row)
            raise DataError(f"{path}: genre index {_shown(index)} on {place} should be {row}")
    return raw[0].tolist()


def _read_100k_items(path: Path, genre_names: list[str]) -> pd.DataFrame:
    """Items of u.item, whose columns after the fifth are 0/1 flags for the genres of u.genre, in order."""
    raw = _read(path, sep="|", header=None, encoding="latin-1", **AS_TEXT)
    layout = (
        f"item|title|release date|video release date|url|{len(genre_names)} genre flags "
        f"(one per line of {path.with_name('u.genre')})"
    )
    raw = _expect_fields(raw, path, 5 + len(genre_names), layout)
    flags = raw.iloc[:, 5:].apply(pd.to_numeric, errors="coerce").to_numpy()
    bad = np.argwhere(~np.isin(flags, (0, 1)))
    if len(bad):
        row, column = bad[0]
        place = _line_of_row(path, "latin-1")(int(row))
        raise DataError(f"{path}: genre flag {_shown(raw.iat[row, 5 + column])} on {place} is not 0 or 1")
    genres = ["|".join(g for g, on in zip(genre_names, row, strict=True) if on) for row in flags == 1]
    return pd.DataFrame({"item": raw[0], "title": raw[1], "genres": genres})


def _line_of_line(row: int) -> str:
    """A row of movies.dat named by its line: each line is a row (a blank one is refused)."""
    return f"line {row + 1}"


def _read_dat_items(path: Path) -> pd.DataFrame:
    """Items of movies.dat, split by hand: a title may hold the ':' pandas would split on, and a '"'
    that is part of it, not a quote."""
    _check_text(path, "latin-1")
    with path.open(encoding="latin-1") as file:
        lines = [line.rstrip("\n") for line in file]
    if not lines:
        raise DataError(f"{path}: file is empty")
    rows = []
    for number, line in enumerate(lines, start=1):
        if (separators := line.count("::")) < 2:
            raise DataError(
                f"{path}: expected MovieID::Title::Genres on every line; line {number} has "
                f"{separators + 1} fields"
            )
        # The id is before the first "::" and the genres after the last (neither holds one): what is
        # between is the title, even where it holds a "::" itself.
        item, _, rest = line.partition("::")
        title, _, genres = rest.rpartition("::")
        rows.append((item, title, genres))
    return pd.DataFrame(rows, columns=ITEM_COLUMNS)


class PredefinedFolds(Mapping[str, FoldRows]):
    """ml-100k's folds as row positions into the loaded ratings, each read from its uN.base and uN.test
    files when first asked for (a run uses one of seven), in the files' order."""

    def __init__(self, folder: Path, ratings: pd.DataFrame, scale: tuple[float, float]) -> None:
        self._folder, self._ratings, self._scale = folder, ratings, scale
        self._read: dict[str, FoldRows] = {}
        # The ratings' rows in (user, item) order, and their ids in that order, once needed.
        self._by_pair: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def __getitem__(self, fold: str) -> FoldRows:
        if fold not in PREDEFINED_FOLDS:
            raise KeyError(fold)
        if fold not in self._read:
            base, test = self._rows(f"{fold}.base"), self._rows(f"{fold}.test")
            # Each fold's two files share out every rating of u.data: a short one is a damaged copy.
            if len(base) + len(test) != len(self._ratings):
                raise DataError(
                    f"{self._folder / f'{fold}.base'} and {fold}.test hold {len(base):,} + {len(test):,} "
                    f"ratings, where {RATINGS_FILE['100k']} has {len(self._ratings):,}: is one cut short?"
                )
            if len(np.union1d(base, test)) != len(self._ratings):
                raise DataError(
                    f"{self._folder / f'{fold}.base'} and {fold}.test list a rating in both (and so leave "
                    f"another of {RATINGS_FILE['100k']} out): a damaged or edited copy; download it again"
                )
            self._read[fold] = (base, test)
        return self._read[fold]

    def __contains__(self, fold: object) -> bool:
        # Mapping's own would read the fold's files (and raise on a missing one) to answer
        return fold in PREDEFINED_FOLDS

    def __iter__(self) -> Iterator[str]:
        return iter(PREDEFINED_FOLDS)

    def __len__(self) -> int:
        return len(PREDEFINED_FOLDS)

    def _rows(self, name: str) -> np.ndarray:
        """Positions in the ratings of the rows file `name` lists; a row u.data lacks is an error."""
        path = self._folder / name
        part, n, where = _read_rating_columns(path, self._scale, U_DATA_RATINGS, "\t", header=False, fields=4)
        if self._by_pair is None:
            user, item = self._ratings["user"].to_numpy(), self._ratings["item"].to_numpy()
            by_pair = np.lexsort((item, user))
            self._by_pair = by_pair, user[by_pair], item[by_pair]
        order, user, item = self._by_pair
        # One key space for both tables: the ratings' keys (no two alike: the loader kept one rating
        # per pair), in increasing order as integer ids are keyed, then the fold file's.
        keys = pair_keys(
            np.concatenate([user, part["user"].to_numpy()]), np.concatenate([item, part["item"].to_numpy()])
        )
        sorted_keys, wanted = keys[: len(user)], keys[len(user) :]
        if not (sorted_keys[1:] > sorted_keys[:-1]).all():  # ids keyed by codes: sort the keys
            resort = np.argsort(sorted_keys)
            sorted_keys, order = sorted_keys[resort], order[resort]
        found = np.searchsorted(sorted_keys, wanted).clip(max=len(sorted_keys) - 1)
        rows = order[found]
        same = (sorted_keys[found] == wanted) & (
            self._ratings["rating"].to_numpy()[rows] == part["rating"].to_numpy()
        )
        if not same.all():
            row = int(np.flatnonzero(~same)[0])
            pair = f"user {part['user'].iat[row]}, item {part['item'].iat[row]}"
            # A row's line is known while no duplicate pair was dropped (the reader warned of any).
            place = f"on {where(row)} ({pair})" if len(part) == n else f"of {pair}"
            raise DataError(
                f"{path}: the rating {place} is not in {RATINGS_FILE['100k']} "
                "(a fold file from another copy of ml-100k?)"
            )
        return rows


def read_users(folder: Path, layout: str) -> pd.DataFrame | None:
    """The users' demographics of `layout` as side features (age group, gender, occupation, zip
    region), None where the layout has none or the folder lacks the file."""
    if layout not in USERS_FILE or not (folder / USERS_FILE[layout][0]).is_file():
        return None
    name, sep, fields = USERS_FILE[layout]
    path = folder / name
    if sep == "::":  # pandas' C parser takes one character: the fields hold no ':' of their own
        _check_text(path, "latin-1")
        with path.open(encoding="latin-1") as file:
            numbered = [
                (number, line.rstrip("\n").split("::")) for number, line in enumerate(file, 1) if line.strip()
            ]
        rows = [row for _, row in numbered]
        short = next((number for number, row in numbered if len(row) != 5), None)
        if short is not None:
            raise DataError(f"{path}: line {short} is not {fields}")
        raw = pd.DataFrame(rows)[[0, 2, 1, 3, 4]].set_axis(range(5), axis=1)
    else:
        raw = _expect_fields(
            _read(path, sep=sep, header=None, encoding="latin-1", **AS_TEXT), path, 5, fields
        )
    ids = non_negative_integers(raw[0], "user id", str(path), _line_of_row(path, "latin-1"))
    ages = pd.to_numeric(raw[1], errors="coerce")
    if ages.isna().any():
        row = int(np.flatnonzero(ages.isna().to_numpy())[0])
        raise DataError(
            f"{path}: age {_shown(raw.iat[row, 1])} on {_line_of_row(path, 'latin-1')(row)} is not a number"
        )
    table = {"age": age_group(ages), "gender": raw[2], "occupation": raw[3], "zip": zip_region(raw[4])}
    return pd.DataFrame(table).set_index(pd.Index(ids, name="user")).astype("category")


def _check_count(folder: Path, n_ratings: int) -> None:
    """ml-100k's u.info states how many ratings u.data holds: a copy with fewer was cut short."""
    info = folder / "u.info"
    if not info.is_file():
        return
    stated = re.search(r"^\s*(\d+)\s+ratings\s*$", info.read_text(encoding="latin-1"), re.MULTILINE)
    if stated is not None and int(stated.group(1)) != n_ratings:
        raise DataError(
            f"{folder / RATINGS_FILE['100k']}: {n_ratings:,} ratings where u.info states "
            f"{int(stated.group(1)):,}: cut short, or from another copy?"
        )


def read_folder(name: str, folder: Path, layout: str, scale: tuple[float, float]) -> RatingsDataset:
    """Read an unpacked dataset folder of `layout`, with its users' and items' side features; warn
    when rated items lack an entry."""
    ratings = read_ratings(folder / RATINGS_FILE[layout], layout, scale)
    if layout == "100k":
        _check_count(folder, len(ratings))
    items = read_items(folder, layout)
    warn_unnamed_items(ratings, items, folder / ITEMS_FILE[layout])
    folds = PredefinedFolds(folder, ratings, scale) if layout == "100k" else {}
    return RatingsDataset(
        name, ratings, items, scale, folder, folds, {"folder": str(folder.resolve())},
        user_features=read_users(folder, layout),
        item_features=item_features_of(items, read_tags(folder, layout)),
    )  # fmt: skip


def load_movielens(
    name: str,
    data_dir: Path | str | None = None,
    *,
    allow_download: bool = True,
    base_url: str = GROUPLENS_URL,
    allow_http: bool = False,
    progress: bool = True,
) -> RatingsDataset:
    """Load MovieLens variant `name` from a local copy, or download, verify and cache it once."""
    if name not in VARIANTS:
        raise DataError(f"unknown MovieLens variant {name!r}; choose one of: {', '.join(VARIANTS)}")
    variant = VARIANTS[name]
    folder = local_copy(
        variant,
        None if data_dir is None else Path(data_dir),  # a path given as text, as a notebook writes it
        allow_download=allow_download,
        base_url=base_url,
        allow_http=allow_http,
        progress=progress,
    )
    return read_folder(name, folder, variant.layout, variant.rating_scale)
