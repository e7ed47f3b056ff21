"""What users and items are: side-feature tables, and the sparse feature rows a factorisation machine
sums its vectors over.

A side-feature table has one row per raw id and one column per feature group. A column whose every
value is a number is numeric (standardised, one feature), unless it is a pandas category column; any
other is categorical, one feature per category, and a value holding '|' names several categories (a
film's genres), each weighted 1/count. A column of numbers but for a few values is read as
categories with a warning.
Defaults, documented in docs/data.md: an id with ratings but no row has no side features; a row
whose id has no ratings is not used in training; a category a new user or item brings that training
never saw adds nothing.
"""

import dataclasses
import itertools
import json
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from recsys.data.columns import ALIASES, DECIMAL_COMMA, ITEM_ID_ALIASES, SEPARATORS, normalised
from recsys.data.ratings_table import ids as read_ids
from recsys.errors import DataError, RecsysError, plain_value

SIDES = ("user", "item")

MULTIPLE = "|"
# A column at least this share of whose values are numbers, but not all, is read as categories with a
# warning: one stray text value is likelier a mistake than a category.
MOSTLY_NUMBERS = 0.9
# A numeric feature's values must be below this in size: their squares (its spread) stay finite.
LARGEST_FEATURE = 1e150
# MovieLens 1M's own age groups, used for ML-100K's exact ages too.
AGE_GROUPS = (0, 18, 25, 35, 45, 50, 56)
_YEAR = re.compile(r"\((\d{4})\)\s*$")


@dataclass(frozen=True)
class FeatureRows:
    """One side's features: row r (a user or an item) has features columns[starts[r]:starts[r + 1]]
    with those `values`; feature f belongs to group groups[f] of `group_names`."""

    starts: np.ndarray
    columns: np.ndarray
    values: np.ndarray
    groups: np.ndarray
    group_names: tuple[str, ...]
    # How the side-feature columns were coded (codings_text: their names, categories, means and
    # spreads), which a model keeps to code new users' rows as its own were. "" without.
    coding: str = ""

    @property
    def n_rows(self) -> int:
        return len(self.starts) - 1

    @property
    def n_features(self) -> int:
        return len(self.groups)


@dataclass(frozen=True)
class _Block:
    """Entries (row, column within the group, value) of one feature group of `size` features."""

    name: str
    rows: np.ndarray
    columns: np.ndarray
    values: np.ndarray
    size: int


def feature_rows(n_rows: int, blocks: Sequence[_Block], coding: str = "") -> FeatureRows:
    """The groups' entries laid side by side, each group's features after the previous group's;
    `coding`: the side columns' coding (`codings_text`)."""
    if not blocks:
        return FeatureRows(np.zeros(n_rows + 1, np.int64), np.zeros(0, np.int64), np.zeros(0),
                           np.zeros(0, np.int64), (), coding)  # fmt: skip
    offsets = np.cumsum([0, *(block.size for block in blocks)])
    rows = np.concatenate([block.rows for block in blocks]).astype(np.int64)
    columns = np.concatenate([block.columns + offset for block, offset in zip(blocks, offsets, strict=False)])
    values = np.concatenate([block.values for block in blocks]).astype(np.float64)
    order = np.lexsort((columns, rows))
    starts = np.zeros(n_rows + 1, np.int64)
    starts[1:] = np.cumsum(np.bincount(rows, minlength=n_rows))
    groups = np.repeat(np.arange(len(blocks), dtype=np.int64), [block.size for block in blocks])
    return FeatureRows(starts, columns[order].astype(np.int64), values[order], groups,
                       tuple(block.name for block in blocks), coding)  # fmt: skip


def id_block(n: int) -> _Block:
    """Each id its own feature."""
    every = np.arange(n, dtype=np.int64)
    return _Block("ids", every, every, np.ones(n), n)


def implicit_block(rows: np.ndarray, others: np.ndarray, n_rows: int, n_others: int) -> _Block:
    """Each row's rated others as features, weighted 1 / sqrt(their count) (as myFM's and SVD++'s):
    each pair once, sorted by row, then other."""
    keys = np.unique(np.asarray(rows, np.int64).ravel() * n_others + np.asarray(others, np.int64).ravel())
    rows, others = np.divmod(keys, n_others)
    counts = np.bincount(rows, minlength=n_rows)
    return _Block("implicit", rows, others, 1.0 / np.sqrt(counts[rows]), n_others)


@dataclass(frozen=True)
class ColumnCoding:
    """How one column of a side-feature table becomes features: its categories, or the mean and
    spread that standardise its numbers."""

    name: str
    categories: tuple[str, ...] | None
    mean: float = 0.0
    scale: float = 1.0

    @property
    def size(self) -> int:
        return 1 if self.categories is None else len(self.categories)

    def block(self, values: pd.Series, rows: np.ndarray) -> _Block:
        """Entries for `values` (a column's values of the ids at `rows`); a category never seen adds
        nothing."""
        if self.categories is None:
            return _Block(self.name, rows, np.zeros(len(rows), np.int64),
                          (values.to_numpy(np.float64) - self.mean) / self.scale, 1)  # fmt: skip
        place = {category: j for j, category in enumerate(self.categories)}
        known = ([place[name] for name in _categories(value) if name in place] for value in values)
        entries = [
            (row, column, 1.0 / len(columns))
            for row, columns in zip(rows, known, strict=True)
            for column in columns
        ]
        found = np.array(entries, dtype=np.float64).reshape(-1, 3)
        return _Block(self.name, found[:, 0].astype(np.int64), found[:, 1].astype(np.int64), found[:, 2],
                      self.size)  # fmt: skip


def _categories(value: object) -> list[str]:
    """A value's categories, each once ("a|a" is "a"): the names between its '|', or the items of a
    list (a Parquet file's or a DataFrame's list column, as a genres column often is)."""
    names = value if isinstance(value, list | tuple | np.ndarray) else str(value).split(MULTIPLE)
    return list(dict.fromkeys(str(name).strip() for name in names if str(name).strip()))


def codings_text(codings: Sequence[ColumnCoding]) -> str:
    """`codings` as JSON, which a checkpoint keeps (floats written to their last digit)."""
    return json.dumps([dataclasses.astuple(coding) for coding in codings])


def codings_from_text(text: str) -> tuple[ColumnCoding, ...]:
    """The codings `codings_text` wrote."""
    return tuple(
        ColumnCoding(name, None if categories is None else tuple(categories), mean, scale)
        for name, categories, mean, scale in json.loads(text)
    )


def _numbers(column: pd.Series) -> np.ndarray:
    """Which of `column`'s values are numbers (or spell one). Text that does not is NaN after
    to_numeric, which pyarrow's columns (`pd.ArrowDtype`) hold as a value, not as missing."""
    if pd.api.types.is_numeric_dtype(column.dtype):
        return column.notna().to_numpy(dtype=bool)
    return ~np.isnan(pd.to_numeric(column, errors="coerce").to_numpy(np.float64, na_value=np.nan))


def _is_numeric(column: pd.Series) -> bool:
    return bool(_numbers(column).all())


def _first_vast(numbers: pd.Series) -> int | None:
    """The place of the first of `numbers` that is not finite or not below LARGEST_FEATURE in size
    (its square, the column's spread, would overflow), if any."""
    vast = np.flatnonzero(~(np.abs(numbers.to_numpy(np.float64)) < LARGEST_FEATURE))
    return int(vast[0]) if len(vast) else None


def column_codings(table: pd.DataFrame) -> tuple[ColumnCoding, ...]:
    """The coding of each column of a side-feature table (indexed by raw id), fitted on all its rows."""
    codings = []
    for name in table.columns:
        column = table[name]
        # A pandas category column is categories whatever its values spell (MovieLens' years).
        labelled = isinstance(column.dtype, pd.CategoricalDtype)
        if not labelled and _is_numeric(column):
            numbers = pd.to_numeric(column)
            if _first_vast(numbers) is not None:
                raise RecsysError(
                    f"feature {name!r} holds a number that is not finite or above {LARGEST_FEATURE:g}"
                )
            numbers = numbers.to_numpy(np.float64)
            spread = float(numbers.std())
            codings.append(
                ColumnCoding(str(name), None, float(numbers.mean()), spread if spread > 0 else 1.0)
            )
        else:
            numbers = _numbers(column)
            if not labelled and numbers.mean() >= MOSTLY_NUMBERS:
                odd, count = column[~numbers].iloc[0], int((~numbers).sum())
                warnings.warn(
                    f"feature {name!r} is read as categories, one per value: {count:,} of its "
                    f"{len(column):,} values {'is not a number' if count == 1 else 'are not numbers'} "
                    f"(such as {odd!r})",
                    stacklevel=2,
                )
            found = sorted({name for value in column for name in _categories(value)})
            if not found:
                warnings.warn(
                    f"feature {name!r} names no category in any row (each value is empty between its "
                    f"'{MULTIPLE}'): it adds nothing",
                    stacklevel=2,
                )
            codings.append(ColumnCoding(str(name), tuple(found)))
    return tuple(codings)


def table_rows(table: pd.DataFrame, ids: np.ndarray) -> np.ndarray:
    """The row of `table` (a feature table, indexed by raw id) of each of raw `ids`, -1 where it has
    none. Text ids in one and numbers in the other meet as text, as the ratings' ids do."""
    index, ids = pd.Index(table.index), np.asarray(ids)
    if index.dtype != ids.dtype:
        index, ids = index.astype(str), ids.astype(str)
    return np.asarray(index.get_indexer(ids), dtype=np.int64)


def side_blocks(table: pd.DataFrame, codings: Iterable[ColumnCoding], ids: np.ndarray) -> list[_Block]:
    """The side-feature entries of `ids` (raw ids, in encoded order), one block per column."""
    place = table_rows(table, ids)
    rows = np.flatnonzero(place >= 0)
    found = table.iloc[place[rows]]
    # Columns are looked up by their codings' names, which are text: a table whose labels are numbers
    # (or tuples) is read under the names column_codings gave them.
    found = found.set_axis([str(name) for name in found.columns], axis=1)
    blocks = []
    for coding in codings:
        if coding.name not in found:
            raise RecsysError(
                f"the feature table lacks column {coding.name!r}, which the model was trained with"
            )
        values = found[coding.name]
        if coding.categories is None:
            values = pd.to_numeric(values, errors="coerce")
            if not np.isfinite(values.to_numpy(np.float64, na_value=np.nan)).all():
                raise RecsysError(
                    f"feature {coding.name!r} was a number in training; here it holds another value"
                )
        blocks.append(coding.block(values, rows))
    return blocks


def rows_for_new(
    groups: Sequence[str],
    codings: Sequence[ColumnCoding] | None,
    new: pd.DataFrame | None,
    ids: np.ndarray,
    rated: Sequence[np.ndarray] = (),
    n_others: int = 0,
) -> FeatureRows:
    """Feature rows, less the ids, of users (or items) the model never saw: `ids` (raw) with the side
    features of the table `new` (None: none) coded by the trained model's `codings` (None: it read no
    side table), and (where `rated` gives each one's rated others, inner indices of n_others) their
    implicit feedback. The columns number the trained model's features after its ids, for the
    `groups` it was trained with: what BayesianFM.feature_scores and fold-in take."""
    owners = np.repeat(np.arange(len(rated), dtype=np.int64), [len(others) for others in rated])
    others = np.concatenate([np.asarray(found, np.int64) for found in rated]) if rated else owners
    return feature_rows(len(ids), *_feature_blocks(groups, codings, new, ids, (owners, others), n_others))


def _feature_blocks(
    groups: Sequence[str],
    codings: Sequence[ColumnCoding] | None,
    table: pd.DataFrame | None,
    ids: np.ndarray,
    rated: tuple[np.ndarray, np.ndarray],
    n_others: int,
) -> tuple[list[_Block], str]:
    """The non-id blocks of rows `ids` (raw), in the one order every model's columns follow: with "side"
    in `groups` their rows of `table` coded by `codings` (the training table's), then with "implicit"
    the others each row rated (`rated`: pairs of row, other; n_others of them); and the side columns'
    coding (`codings_text`, "" without)."""
    blocks: list[_Block] = []
    coding = ""
    if "side" in groups and codings is not None:
        rows = table if table is not None else pd.DataFrame(columns=[coding.name for coding in codings])
        blocks += side_blocks(rows, codings, ids)
        coding = codings_text(codings)
    if "implicit" in groups:
        blocks.append(implicit_block(*rated, len(ids), n_others))
    return blocks, coding


def read_feature_file(path: str | Path, side: str) -> pd.DataFrame:
    """A side-feature file of `side` ("user" or "item"): an id column (found by its name, else the
    first) and one column per feature. One line names a missing value, a repeated id, or a file
    without features."""
    from recsys.data.ratings_file import SeparatorUnknown, packing, read_item_file

    path = Path(path)
    try:
        raw, where = read_item_file(path)
    except SeparatorUnknown:
        # A column of ids alone has no separator for the sniffer to find: say what is missing instead.
        with path.open("rb") as file:
            start = file.readline()
        header = start.decode("utf-8", "replace").strip()
        if packing(start) is None and not any(sep in header for sep in SEPARATORS):
            raise DataError(f"{path}: no feature columns beside the {side} id column {header!r}") from None
        raise
    names = [str(label) for label in raw.columns]
    aliases = _id_aliases(side)
    id_column = next((name for name in names if normalised(name) in aliases), names[0])
    other = "item" if side == "user" else "user"
    if normalised(id_column) in ALIASES[other] and normalised(id_column) not in aliases:  # not "id"
        # The ids would be taken for the other side's wherever the two share numbers (1..n both).
        raise DataError(
            f"{path}: its id column {id_column!r} names {other}s, but it was given as the {side} features"
        )
    if len(names) < 2:
        raise DataError(f"{path}: no feature columns beside the {side} id column {id_column!r}")
    if raw.empty:
        raise DataError(f"{path}: no rows below its header")
    for name in raw.columns:
        empty = raw[name].isna() | (raw[name].astype(str).str.strip() == "")
        if empty.any():
            row = int(np.flatnonzero(empty.to_numpy())[0])
            raise DataError(f"{path}: {name} is missing on {where(row)}")
    for name in raw.columns.drop(id_column):
        _read_decimal_commas(raw, name, path)
        numbers = pd.to_numeric(raw[name], errors="coerce")
        vast = _first_vast(numbers) if numbers.notna().all() else None
        if vast is not None:
            raise DataError(
                f"{path}: {name} {raw[name].iloc[vast]} on {where(vast)} is not a finite number of at most "
                f"{LARGEST_FEATURE:g} in size"
            )
    # Read as a ratings file's ids are, then as plain values: a feature table is indexed by them.
    ids = pd.Series(np.asarray(read_ids(raw[id_column], side, str(path), where)))
    repeated = ids.duplicated(keep=False).to_numpy()
    if repeated.any():
        first, second = np.flatnonzero(repeated)[:2]
        raise DataError(
            f"{path}: {side} {ids.iloc[first]} has two rows, on {where(int(first))} and {where(int(second))}"
        )
    return raw.drop(columns=id_column).set_index(pd.Index(ids, name=side))


def _read_decimal_commas(raw: pd.DataFrame, name: str, path: Path) -> None:
    """Column `name` of a feature file as numbers, with a warning, where every value is one and some
    are written with a decimal comma ("1,5", as spreadsheets in many locales export them), as a
    ratings file's ratings are read."""
    if pd.api.types.is_numeric_dtype(raw[name]):
        return
    text = raw[name].astype(str).str.strip()
    comma = text.str.fullmatch(DECIMAL_COMMA)
    if not comma.any() or not (comma | pd.to_numeric(text, errors="coerce").notna()).all():
        return
    raw[name] = pd.to_numeric(text.str.replace(",", ".", regex=False))
    warnings.warn(
        f"{path}: {name} is written with a decimal comma, read as decimals (e.g. {text[comma].iloc[0]!r} as "
        f"{raw[name][comma].iloc[0]})",
        stacklevel=3,
    )


def check_coverage(table: pd.DataFrame, rated: np.ndarray, side: str, where: str) -> None:
    """A feature table (read from `where`) that names none of the ratings' ids is an error (the wrong
    file, or ids in another form); one that leaves more than half of them without a row, a warning."""
    index = pd.Index(table.index)
    if index.dtype != rated.dtype:  # text ids in one file and numbers in the other, as side_blocks does
        index, rated = index.astype(str), rated.astype(str)
    covered = int(index.isin(rated).sum())
    if covered == 0:
        raise DataError(
            f"{where}: none of its {len(index):,} {side} ids is among the ratings' {side}s (ids such as "
            f"{', '.join(map(str, rated[:3]))} there, {', '.join(map(str, index[:3]))} here)"
        )
    if covered < len(rated) / 2:
        warnings.warn(
            f"{where}: {len(rated) - covered:,} of the ratings' {len(rated):,} {side}s have no row; they get "
            "no side features",
            stacklevel=3,
        )


def check_feature_table(table: object, side: str, where: str) -> pd.DataFrame:
    """A side-feature table given in Python, checked as a file's rows are: a pandas DataFrame indexed
    by raw id, each id once, with no missing value."""
    if not isinstance(table, pd.DataFrame):
        raise RecsysError(
            f"{where} must be a pandas DataFrame indexed by {side} id, got {type(table).__name__}"
        )
    if table.columns.empty:
        raise RecsysError(f"{where} has no feature columns (its index holds the {side} ids)")
    if table.empty:
        raise RecsysError(f"{where} has no rows (one per {side}, indexed by its id)")
    # Columns are found by their labels as text (column_codings' names): 0 and "0" are one column twice.
    twice = table.columns[pd.Index([str(name) for name in table.columns]).duplicated()]
    if len(twice):
        raise RecsysError(f"{where}: column {str(twice[0])!r} appears more than once")
    repeated = table.index[table.index.duplicated()]
    if len(repeated):
        raise RecsysError(f"{where}: {side} {_shown(repeated[0])} has two rows")
    _refuse_ids_as_a_feature(table, side, where)
    missing = table.isna().any(axis=1)
    if missing.any():
        column = table.columns[table.loc[missing].iloc[0].isna().to_numpy()][0]
        raise RecsysError(
            f"{where}: {column} is missing for {side} {_shown(table.index[missing.to_numpy()][0])}"
        )
    for name in table.columns:  # as a file's numbers are checked: its square, the spread, stays finite
        column = table[name]
        if isinstance(column.dtype, pd.CategoricalDtype) or not _is_numeric(column):
            continue
        vast = _first_vast(pd.to_numeric(column))
        if vast is not None:
            raise RecsysError(
                f"{where}: {name} {_shown(column.iloc[vast])} for {side} {_shown(table.index[vast])} is not "
                f"a finite number of at most {LARGEST_FEATURE:g} in size"
            )
    return table


def _id_aliases(side: str) -> frozenset[str]:
    """The names a table's column of `side` ids goes by."""
    return ALIASES["user"] if side == "user" else ITEM_ID_ALIASES


def _refuse_ids_as_a_feature(table: pd.DataFrame, side: str, where: str) -> None:
    """A table indexed 0..n-1 (reset_index, read_csv) whose column named as ids are (userId) holds a
    value of its own in each row: the ids left as a feature, and each row's features given to the
    id that is its position, silently, wherever the positions are ids too."""
    if not isinstance(table.index, pd.RangeIndex) or table.index.name is not None:
        return
    for name in table.columns:
        if normalised(str(name)) in _id_aliases(side) and table[name].is_unique:
            raise RecsysError(
                f"{where}: column {str(name)!r} holds the {side} ids, but the table is indexed by row "
                f"number; index it by them (table.set_index({str(name)!r}))"
            )


def _shown(value: object) -> str:
    """An id as a message shows it: 3 or 'u3', not np.int64(3)."""
    return repr(plain_value(value))


def year_of_title(titles: pd.Series) -> pd.Series:
    """The year in a MovieLens title's closing "(1995)": itself from 1990 on (where most films are),
    a five-year span ("1980-1984") before, "<1950" before 1950; "unknown" where the title has none."""
    years = titles.astype(str).str.extract(_YEAR, expand=False)
    spans = years.map(lambda text: "unknown" if pd.isna(text) else _span(int(text)))
    return spans.astype(str)


def _span(year: int) -> str:
    if year >= 1990:
        return str(year)
    return "<1950" if year < 1950 else f"{year // 5 * 5}-{year // 5 * 5 + 4}"


def item_features_of(items: pd.DataFrame, tags: pd.Series | None = None) -> pd.DataFrame | None:
    """An item table's genres and the year in its titles, and the tags users gave each item ("|"-joined,
    by item id) where there are any, as side features (None without a genres column)."""
    if "genres" not in items or items["genres"].isna().all():
        return None
    table = items.drop_duplicates("item").set_index("item")
    genres = table["genres"].fillna("").replace("(no genres listed)", "")
    features = {"year": year_of_title(table["title"])}
    if (genres != "").any():  # a catalogue without genres (the tiny sample's) has no such feature
        features = {"genres": genres, **features}
    if tags is not None and len(tags):
        features["tags"] = tags.reindex(table.index).fillna("")
    return pd.DataFrame(features, index=table.index).astype("category")


def age_group(ages: pd.Series) -> pd.Series:
    """Ages as MovieLens 1M's groups ("18-24", ..., "56+")."""
    bounds = [*AGE_GROUPS, 200]
    names = [f"under {AGE_GROUPS[1]}"]
    names += [f"{low}-{high - 1}" for low, high in itertools.pairwise(AGE_GROUPS[1:])]
    names.append(f"{AGE_GROUPS[-1]}+")
    return pd.cut(ages, bounds, right=False, labels=names).astype(str)


def zip_region(codes: pd.Series) -> pd.Series:
    """A US zip code's first digit (its region), of five digits or ZIP+4 (ml-1m holds "55117-1234");
    "other" for a code that is not a US one."""
    text = codes.astype(str).str.strip()
    return text.str[0].where(text.str.fullmatch(r"\d{5}(-\d{4})?"), "other")


def features_of(
    groups: Sequence[str],
    users: np.ndarray,
    items: np.ndarray,
    pairs: np.ndarray,
    user_table: pd.DataFrame | None,
    item_table: pd.DataFrame | None,
) -> tuple[FeatureRows, FeatureRows]:
    """Every user's and item's feature rows: its id, then (with "side" in `groups`) its side features
    from the tables, then (with "implicit") the other side's ids it has ratings with in `pairs`
    (encoded [user, item] rows of the training ratings only). `users`, `items`: raw ids in encoded order."""
    if "side" in groups:  # tables set on a dataset in Python are checked here, as a file's rows are
        for side, table in (("user", user_table), ("item", item_table)):
            if table is not None:
                check_feature_table(table, side, f"the {side} side-feature table")
    user_codings, item_codings = (
        None if table is None or "side" not in groups else column_codings(table)
        for table in (user_table, item_table)
    )
    user_blocks, user_coding = _feature_blocks(
        groups, user_codings, user_table, users, (pairs[:, 0], pairs[:, 1]), len(items)
    )
    item_blocks, item_coding = _feature_blocks(
        groups, item_codings, item_table, items, (pairs[:, 1], pairs[:, 0]), len(users)
    )
    return (
        feature_rows(len(users), [id_block(len(users)), *user_blocks], user_coding),
        feature_rows(len(items), [id_block(len(items)), *item_blocks], item_coding),
    )
