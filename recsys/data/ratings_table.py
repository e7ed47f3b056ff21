"""A user's own ratings, from any table, checked and turned into a RatingsDataset.

The file reader and `RatingsDataset.from_frame` both end here, so a DataFrame in a notebook gets every
check a file does. A bad value is named by `where(row)`: "line N" of a file, "row N" of a frame.
"""

import numbers
import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format

from recsys.data.columns import (
    ALIASES,
    DECIMAL_COMMA,
    ITEM_FIELDS,
    ITEM_ID_ALIASES,
    find_columns,
    shown,
)
from recsys.data.id_columns import distinct_ids, distinct_text, id_codes
from recsys.errors import DataError

# Text that reads as an integer and back unchanged ("42", "-7"; not "007", "-0", "+7" or "4.0"), at
# most 18 digits so that it fits an int64: an id column of such text is a column of integers; one id
# spelled otherwise ("0345391802", an ISBN) keeps the whole column as text.
INTEGER_TEXT = r"(?:0|-?[1-9][0-9]{0,17})"
Where = Callable[[int], str]  # a row position as the user can find it ("line 7", "row 5")
# Distinct ratings up to which a step (stars, half stars) is looked for; beyond, the scale is continuous.
MAX_STEPPED_VALUES = 1000
STEP_RESOLUTION = 1000  # steps are told to a thousandth of a rating
ORDERS = (False, True)  # a date's day order: month first, day first (pandas' `dayfirst`)
INT64_LIMIT = 2**63  # a count of seconds at or past it (either way) does not fit the int64 timestamps
YEAR_FIRST = r"\s*\d{4}\D"  # a date that opens with its year: month then day, as everyone writes it
# A time of day alone, as text: "9:30", "21:00:05.25", "9:30 pm".
TIME_OF_DAY = r"\s*\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\s*([AaPp]\.?[Mm]\.?)?\s*"


ITEM_COLUMNS = ["item", "title", "genres"]


def warn_unnamed_items(ratings: pd.DataFrame, items: pd.DataFrame, source: Path | str) -> None:
    """Warn, with a count and an example, when rated items have no entry in the item table."""
    unnamed = np.setdiff1d(distinct_ids(ratings["item"]), items["item"].to_numpy())
    if unnamed.size:
        warnings.warn(
            f"{source}: no entry for {unnamed.size} rated item "
            f"id{'s' if unnamed.size > 1 else ''}, e.g. {unnamed[0]} (titles shown as their raw id)",
            stacklevel=3,
        )


def whole_numbers(values: np.ndarray) -> np.ndarray:
    """Which of the float64 `values` are whole numbers that int64 holds exactly (not NaN, inf or
    past 2**53, where a float no longer tells neighbouring integers apart)."""
    return (values == np.round(values)) & (np.abs(values) < 2**53)


def pair_keys(user: np.ndarray, item: np.ndarray) -> np.ndarray:
    """One int64 per (user, item) pair, equal only for equal pairs: from the ids' offsets (text ids'
    codes: `id_codes`) where they allow it, else from codes of the distinct ids. Built in place: one
    array in all. Keys from two calls do not compare: to match the pairs of two tables, key their ids
    together."""
    spans = [int(ids.max()) - int(ids.min()) + 1 if ids.dtype.kind in "iu" else 0 for ids in (user, item)]
    if 0 in spans or spans[0] * spans[1] >= 2**63:  # text ids, or integers too far apart
        user, item = (pd.factorize(ids)[0].astype(np.int64) for ids in (user, item))
        spans = [int(user.max()) + 1, int(item.max()) + 1]
    keys = user - user.min()
    keys *= spans[1]
    keys += item
    keys -= item.min()
    return keys


def has_duplicate_pairs(ratings: pd.DataFrame) -> bool:
    """Whether some (user, item) pair is rated twice: by sorting the pair keys, far cheaper than
    pandas' hashing on tens of millions of rows."""
    keys = pair_keys(id_codes(ratings["user"]), id_codes(ratings["item"]))
    keys.sort()
    return bool((keys[1:] == keys[:-1]).any())


def keep_latest_duplicates(ratings: pd.DataFrame, source: Path | str) -> pd.DataFrame:
    """Keep one rating per (user, item), the latest by timestamp, and warn with the count dropped.

    MovieLens has none; a hand-made file may, and two answers for one pair would both be trained on
    and tested against.
    """
    if not has_duplicate_pairs(ratings):
        return ratings
    keep = latest_of_each_pair(ratings)
    warnings.warn(
        f"{source}: {len(ratings) - keep.sum()} duplicate (user, item) ratings dropped; "
        "kept the latest of each by timestamp (the later row where the file has no timestamps)",
        stacklevel=3,
    )
    return ratings[keep].reset_index(drop=True)


def latest_of_each_pair(ratings: pd.DataFrame) -> np.ndarray:
    """Which rows are the latest of their (user, item) pair by timestamp (the later row on a tie)."""
    order = np.argsort(ratings["timestamp"].to_numpy(), kind="stable")
    latest = ~ratings.iloc[order].duplicated(["user", "item"], keep="last").to_numpy()
    keep = np.zeros(len(ratings), dtype=bool)
    keep[order[latest]] = True
    return keep


def ids(column: pd.Series, kind: str, source: str, where: Where) -> np.ndarray | pd.Categorical:
    """Ids as int64 when every one is an integer (or text spelling one exactly), else as text without
    spaces around it, held as codes into the distinct ids (a Categorical); a missing id is an error."""
    gapless = isinstance(column.dtype, np.dtype) and column.dtype.kind in "iu"  # nothing to check
    if not gapless:
        missing = column.isna().to_numpy()
        if missing.any():
            raise DataError(f"{source}: missing {kind} id on {where(int(np.flatnonzero(missing)[0]))}")
    if pd.api.types.is_integer_dtype(column.dtype):
        # uint64 past int64 (numpy's, "UInt64" or Arrow's) is kept as spelled: int64 would wrap it round.
        signed = pd.api.types.is_signed_integer_dtype(column.dtype)
        if signed or len(column) == 0 or column.max() < INT64_LIMIT:
            return column.to_numpy(dtype=np.int64)
        return column.astype(str).to_numpy(dtype=object)
    if pd.api.types.is_float_dtype(column.dtype):  # integers beside a gap read as floats
        values = column.to_numpy(dtype=np.float64)
        if whole_numbers(values).all():
            return values.astype(np.int64)
    if pd.api.types.is_bool_dtype(column.dtype):
        raise DataError(f"{source}: the {kind} ids are true/false values, not ids")
    # Spaces around an id are the file's layout ("1, 50, 3"), not part of it.
    codes, distinct = distinct_text(column)
    empty = np.flatnonzero(distinct == "")
    if empty.size:
        raise DataError(f"{source}: missing {kind} id on {where(int(np.argmax(codes == empty[0])))}")
    # Integers read as text (beside a gap, or re-read as text): every one, and none with a leading zero.
    if distinct[codes[0]].lstrip("-").isdigit() and distinct.str.fullmatch(INTEGER_TEXT).all():
        return distinct.astype(np.int64).to_numpy()[codes]
    # Categories in the ids' own order, so that sorting or grouping the table orders ids as text would.
    order = distinct.argsort()
    places = np.empty(len(order), dtype=codes.dtype)
    places[order] = np.arange(len(order), dtype=codes.dtype)
    return pd.Categorical.from_codes(places[codes], dtype=pd.CategoricalDtype(distinct[order]))


def non_negative_integers(column: pd.Series, what: str, source: str, where: Where) -> np.ndarray:
    """`column` as int64 where every value is a non-negative integer (MovieLens' ids and times; text
    spelling one counts), else an error naming the first that is not, or is missing, by `where`."""
    if isinstance(column.dtype, np.dtype) and column.dtype.kind == "i":  # no gaps: only the sign to check
        values = column.to_numpy(dtype=np.int64)
        negative = np.flatnonzero(values < 0)
        if negative.size:
            row = int(negative[0])
            raise DataError(f"{source}: {what} {values[row]} on {where(row)} is not a non-negative integer")
        return values
    text = not pd.api.types.is_numeric_dtype(column.dtype)
    if text:
        column = column.astype(str).str.strip().where(column.notna())  # "1, 50, 3": spaces are layout
    missing = np.flatnonzero(column.isna().to_numpy() | (column == "").to_numpy())
    if missing.size:
        raise DataError(f"{source}: missing {what} on {where(int(missing[0]))}")
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    # Whole, non-negative and exactly representable: inf or 1e30 must not wrap around in int64.
    bad = np.flatnonzero(~whole_numbers(values) | (values < 0))
    if bad.size:
        row = int(bad[0])
        shown = repr(str(column.iloc[row])[:40]) if text else values[row]  # as the file spells it
        raise DataError(f"{source}: {what} {shown} on {where(row)} is not a non-negative integer")
    return values.astype(np.int64)


FLOAT32_MAX = float(np.finfo(np.float32).max)


def ratings(column: pd.Series, source: str, where: Where, what: str = "rating") -> np.ndarray:
    """Ratings as float32; a missing, non-numeric or infinite one is an error naming its place (and
    the values as `what`: the same numbers may be events' weights).

    Ratings written with a decimal comma ("3,5", as spreadsheets in many locales export them) are
    read as decimals, with a warning.
    """
    numbers = pd.to_numeric(column, errors="coerce")
    values = numbers.to_numpy(dtype=np.float32, na_value=np.nan)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size and not pd.api.types.is_numeric_dtype(column):
        text = column.iloc[bad].astype(str)
        comma = text.str.fullmatch(DECIMAL_COMMA).to_numpy(dtype=bool)
        if comma.any():
            decimals = text[comma].str.replace(",", ".", regex=False)
            values[bad[comma]] = pd.to_numeric(decimals).to_numpy(np.float32)
            warnings.warn(
                f"{source}: {comma.sum():,} {what}(s) written with a decimal comma, read as decimals "
                f"(e.g. {text[comma].iloc[0]!r} as {decimals.iloc[0]})",
                stacklevel=3,
            )
            bad = bad[~comma]
    if bad.size:
        row = int(bad[0])
        raw = column.iloc[row]
        if pd.isna(raw) or raw == "":
            raise DataError(f"{source}: missing {what} on {where(row)}")
        # Beyond float32's range a number reads as infinite, whatever its digits were.
        fault = (
            "not a number"
            if np.isnan(values[row])
            else f"infinite, or beyond {FLOAT32_MAX:.1e} (float32's largest)"
        )
        raise DataError(f"{source}: {what} {str(raw)[:40]!r} on {where(row)} is {fault}")
    _check_resolved(numbers, source, what)
    return values


# float32 keeps about 7 significant digits: ratings that all lie within this share of their size of one
# another (1e9 + 1 ... 1e9 + 5) could round to the same few values.
RESOLVED_SPREAD = 2.0**-16


def _check_resolved(numbers: pd.Series, source: str, what: str) -> None:
    """Refuse ratings whose spread is too small beside their size for float32 (how they are held) to
    keep them apart: a common offset, which would merge or round them."""
    low, high = float(numbers.min()), float(numbers.max())  # the float64 values, NaN skipped
    size = max(abs(low), abs(high))
    if high > low and high - low < size * RESOLVED_SPREAD:
        raise DataError(
            f"{source}: every {what} lies between {low!r} and {high!r}, too close beside their size for "
            "float32 (how ratings are held) to keep them apart; subtract their common offset"
        )


def timestamps(column: pd.Series | None, n: int, source: str, where: Where) -> np.ndarray:
    """Timestamps as int64 seconds: whole numbers as they are, dates and times converted; without a
    timestamp column, the row order (so "latest" means later in the table)."""
    if column is None:
        return np.arange(n, dtype=np.int64)
    if pd.api.types.is_bool_dtype(column.dtype):
        raise DataError(f"{source}: the timestamps are true/false values, not times")
    if pd.api.types.is_timedelta64_dtype(column.dtype):
        raise DataError(f"{source}: the timestamps are durations, not times (add them to a start date)")
    if isinstance(column.dtype, np.dtype) and column.dtype.kind == "i":  # seconds, no gaps
        return column.to_numpy(dtype=np.int64)
    if isinstance(column.dtype, pd.PeriodDtype):  # a month or a day: its start (to_numeric gives its ordinal)
        column = column.dt.start_time
    if pd.api.types.is_datetime64_any_dtype(column.dtype):
        times = column
        missing = pd.isna(times).to_numpy()
        if missing.any():
            raise DataError(f"{source}: missing timestamp on {where(int(np.flatnonzero(missing)[0]))}")
    else:
        numbers = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        if np.isfinite(numbers).all():  # seconds (or any whole count) since an epoch
            outside = np.flatnonzero(np.abs(numbers) >= INT64_LIMIT)
            if outside.size:
                row = int(outside[0])
                raise DataError(
                    f"{source}: timestamp {str(column.iloc[row])[:40]!r} on {where(row)} is not a time "
                    "(too large for seconds since 1970)"
                )
            return np.floor(numbers).astype(np.int64)
        gaps = np.flatnonzero(column.isna().to_numpy() | (column.astype(str) == "").to_numpy())
        if gaps.size:
            raise DataError(f"{source}: missing timestamp on {where(int(gaps[0]))}")
        seconds = np.isfinite(numbers)
        if seconds.any():
            # Seconds among dates are refused, not read as dates ("1000" would be the year 1000), and
            # never handed to the date reader, which would take "120100" for an ambiguous date. The
            # first value that is no time at all is named, else the first of the other kind.
            text = column.astype(str).str.strip()
            datelike = np.zeros(len(column), dtype=bool)
            datelike[~seconds] = np.logical_or.reduce(
                [_read_dates(text[~seconds], dayfirst=order, date_format="mixed").notna() for order in ORDERS]
            )
            neither = np.flatnonzero(~seconds & ~datelike)
            row = int(neither[0]) if neither.size else int(np.flatnonzero(seconds != seconds[0])[0])
            raise _not_a_time(column, row, source, where)
        times = _dates(column, source, where)
        neither = np.flatnonzero(pd.isna(times).to_numpy())
        if neither.size:
            raise _not_a_time(column, int(neither[0]), source, where)
    return (pd.DatetimeIndex(times).as_unit("s").asi8).astype(np.int64)


def _refuse_times_of_day(text: pd.Series, source: str, where: Where) -> None:
    """A time of day with no date ("10:30", datetime.time, Arrow's time64) is an error: pandas reads it
    as that time today, so the order of the ratings, and a split by time, would change by the day."""
    alone = np.flatnonzero(text.str.fullmatch(TIME_OF_DAY).to_numpy(dtype=bool, na_value=False))
    if alone.size:
        row = int(alone[0])
        raise DataError(
            f"{source}: timestamp {text.iloc[row][:40]!r} on {where(row)} is a time of day with no date "
            "(expected seconds since 1970 or a date)"
        )


def _not_a_time(column: pd.Series, row: int, source: str, where: Where) -> DataError:
    return DataError(
        f"{source}: timestamp {str(column.iloc[row])[:40]!r} on {where(row)} is not a time "
        "(expected seconds since 1970 or a date, the same kind on every line)"
    )


def _dates(column: pd.Series, source: str, where: Where) -> pd.Series:
    """Dates and times as UTC (NaT where a value is no date), in one day order for the whole column.

    Value by value, "13.01.2020" can only be day first and "05.02.2020" reads month first, so the
    column's order is found first: ISO dates as they are, and any that opens with its year month first;
    for the others, the format guessed from the first of them, day first or month first, that reads
    them all; else (dates in more than one format, some with times) the order in which every date part
    (before a space or "T") reads. Where two orders read every date but differently, that is an error
    naming a date that tells them apart.
    """
    iso = _read_dates(column, date_format="ISO8601")
    if not iso.isna().any():
        return iso
    text = column.astype(str).str.strip()
    _refuse_times_of_day(text, source, where)  # never ISO: only a column that is not all ISO can hold one
    # An ISO date reads one way in either order (pandas' reader would swap its month and day when told
    # the day comes first): only the other dates can tell the orders apart.
    month_first, day_first = (
        _read_dates(text, dayfirst=order, date_format="mixed").where(iso.isna(), iso) for order in ORDERS
    )
    # pandas' day-first reader swaps a year-first date's month and day too ("2020/01/05" as 1 May).
    day_first = day_first.where(~text.str.match(YEAR_FIRST).to_numpy(dtype=bool), month_first)
    # The dates not in ISO form: a format is guessed from them, and must read them all.
    others = (month_first.notna() | day_first.notna()).to_numpy() & iso.isna().to_numpy()
    if not others.any():
        return iso
    whole = _one_format(text, others, source, where)
    if whole is not None:
        return whole[1].where(iso.isna(), iso)
    parts = _one_format(text.str.split(r"[ T]", n=1, regex=True).str[0], others, source, where)
    if parts is not None:
        date_format = parts[0]
        return day_first if date_format.find("%d") < date_format.find("%m") else month_first
    _refuse_if_they_differ(month_first, day_first, text, source, where)
    return month_first


def _one_format(
    values: pd.Series, dates: np.ndarray, source: str, where: Where
) -> tuple[str, pd.Series] | None:
    """A format guessed from the first date (day first, or month first) that reads every date in
    `values`, and its reading; None if neither does."""
    first = values[dates].iloc[0]
    with warnings.catch_warnings():  # pandas warns when the format it guessed goes against `dayfirst`
        warnings.simplefilter("ignore", UserWarning)
        formats = {guess_datetime_format(first, dayfirst=order) for order in ORDERS} - {None}
    formats = {form for form in formats if not re.match(r"%Y\W%d", form)}  # year, day, month: nobody's
    found = [
        (date_format, reading)
        for date_format in sorted(formats)
        if (reading := _read_dates(values, date_format=date_format)).notna().to_numpy()[dates].all()
    ]
    if len(found) == 2:
        _refuse_if_they_differ(found[0][1], found[1][1], values, source, where)
    return found[0] if found else None


def _read_dates(text: pd.Series, *, dayfirst: bool = False, date_format: str) -> pd.Series:
    with warnings.catch_warnings():  # pandas warns when it reads values one by one
        warnings.simplefilter("ignore", UserWarning)
        return pd.to_datetime(text, errors="coerce", utc=True, dayfirst=dayfirst, format=date_format)


def _refuse_if_they_differ(
    one: pd.Series, other: pd.Series, text: pd.Series, source: str, where: Where
) -> None:
    """An error naming the first value that two readings of `text` take for different dates."""
    differ = np.flatnonzero((one != other).to_numpy() & one.notna().to_numpy() & other.notna().to_numpy())
    if differ.size:
        row = int(differ[0])
        first, second = sorted([one.iloc[row], other.iloc[row]])
        raise DataError(
            f"{source}: date {text.iloc[row][:40]!r} on {where(row)} could be {first:%d %B %Y} or "
            f"{second:%d %B %Y}, and no date in the column tells which: write the dates year first "
            f"({first:%Y-%m-%d} or {second:%Y-%m-%d})"
        )


def check_unique_columns(frame: pd.DataFrame, source: str) -> None:
    """Each column label once: a repeated label selects a frame of columns, not one column."""
    twice = frame.columns[frame.columns.duplicated()]
    if len(twice):
        raise DataError(f"{source}: column {str(twice[0])!r} appears more than once")


def check_scale(scale: tuple[float, float] | None, source: str) -> None:
    """A rating scale given by the user must be two finite numbers, the lower first, within float32's
    range: ratings and the model's output range are held in float32, and an end beyond it (1e200) had
    training fail with an overflow's traceback."""
    if scale is None:
        return
    two_numbers = (
        isinstance(scale, tuple | list | np.ndarray)
        and len(scale) == 2
        and all(isinstance(end, numbers.Real) and not isinstance(end, bool) for end in scale)
    )
    if not (two_numbers and np.isfinite(scale).all() and scale[0] < scale[1]):
        shown = ",".join(f"{end:g}" for end in scale) if two_numbers else repr(scale)
        raise DataError(f"{source}: `rating_scale` {shown}: expected finite LO < HI")
    if max(abs(float(end)) for end in scale) > FLOAT32_MAX:
        raise DataError(
            f"{source}: `rating_scale` {scale[0]:g},{scale[1]:g}: beyond {FLOAT32_MAX:.1e}, float32's "
            "largest, in which ratings are held"
        )


def rating_scale(
    values: np.ndarray,
    given: tuple[float, float] | None,
    source: str,
    where: Where,
    scale_name: str | None = None,
) -> tuple[float, float]:
    """The given scale, with every rating checked to lie in it, or the lowest and highest rating.
    A rating outside it is named against `scale_name` ("the scale 1-5"), by default the setting."""
    if given is not None:
        low, high = given
        outside = np.flatnonzero((values < low) | (values > high))
        if outside.size:
            row = int(outside[0])
            scale_name = scale_name or f"`rating_scale` {low:g},{high:g}"
            raise DataError(f"{source}: rating {values[row]:g} on {where(row)} is outside {scale_name}")
        return float(low), float(high)
    low, high = float(values.min()), float(values.max())
    if low == high:
        raise DataError(  # an export of purchases or clicks often carries a constant 1 as its "rating"
            f"{source}: every rating is {low:g}; there is nothing to learn from one value (if each row is "
            "an event, such as a purchase, read them as interactions with `implicit`, for bpr and ials)"
        )
    warn_of_a_stray_end(values, (low, high), source, where)
    warn_of_unrated_zeros(values, source)
    return low, high


# Zeros are taken for "not rated" where the scale starts at 0 and at least this share of the ratings,
# more than hold any other rating, are 0.
UNRATED_SHARE = 0.3


def warn_of_unrated_zeros(values: np.ndarray, source: str) -> None:
    """Warn where 0, the lowest rating, is the commonest of three or more: Book-Crossing's 0 is an
    implicit rating and Goodreads' a book shelved without one, and trained as the worst rating they
    drag every prediction down."""
    if values.min() != 0:
        return
    zeros = int(np.count_nonzero(values == 0))
    if zeros < UNRATED_SHARE * len(values):
        return  # the usual case, after a pass or two: no sort of the ratings
    distinct, counts = np.unique(values, return_counts=True)
    if len(distinct) >= 3 and zeros > counts[1:].max():
        warnings.warn(
            f"{source}: {zeros:,} of {len(values):,} ratings ({zeros / len(values):.0%}) are 0, the lowest "
            "and the commonest: where 0 means 'not rated' (Book-Crossing's implicit ratings, Goodreads' "
            "unrated books), drop those lines, or keep only the user and item columns to read every line as "
            "an interaction",
            stacklevel=4,
        )


# A scale's end is taken for a typing slip when at most this share of the ratings hold it and it lies
# further from the next rating than STRAY_GAP times the span of all the others.
STRAY_SHARE, STRAY_GAP = 0.01, 2.0


def warn_of_a_stray_end(
    values: np.ndarray, scale: tuple[float, float], source: str, where: Where, setting: str = "rating_scale"
) -> None:
    """Warn where the scale read from the data rests on a few ratings far from the rest (a 1e6 among
    stars, at either end or both): the scale, and so the model's output range, would follow them."""
    low, high = scale
    rare = []
    for end in (high, low):
        at_end = values == end
        held = int(np.count_nonzero(at_end))
        if held <= STRAY_SHARE * len(values) and len(values) - held >= 2:
            rare.append((end, at_end))
    if not rare:
        return  # the usual case, after one pass per end: no copy of the ratings is made
    strays = []
    for end, at_end in rare:  # each rare end against the rest of the scale
        far = low if end == high else high
        others = ~at_end
        near = (
            values.max(where=others, initial=-np.inf)
            if end == high
            else values.min(where=others, initial=np.inf)
        )
        if abs(end - near) > STRAY_GAP * abs(near - far) > 0:
            strays.append((end, at_end, min(near, far), max(near, far)))
    if not strays and len(rare) == 2:  # two strays hide each other: both against what lies between
        inner = ~(rare[0][1] | rare[1][1])
        if np.count_nonzero(inner) >= 2:
            inner_low = values.min(where=inner, initial=np.inf)
            inner_high = values.max(where=inner, initial=-np.inf)
            span = inner_high - inner_low
            gaps = [end - inner_high if end == high else inner_low - end for end, _ in rare]
            if span > 0 and all(gap > STRAY_GAP * span for gap in gaps):
                strays = [(end, at_end, inner_low, inner_high) for end, at_end in rare]
    for end, at_end, rest_low, rest_high in strays:
        row = int(np.flatnonzero(at_end)[0])
        warnings.warn(
            f"{source}: rating {end:g} on {where(row)} lies far from all the others "
            f"({rest_low:g} to {rest_high:g}), and the scale is read from the data: check it, "
            f"or set `{setting}`",
            stacklevel=4,
        )


def rating_step(values: np.ndarray) -> float | None:
    """The step between the ratings that occur (1 for stars, 0.5 for half stars): the greatest common
    divisor of their differences, in thousandths; None when they are finer or too many (continuous)."""
    distinct = np.sort(pd.unique(values)).astype(np.float64)
    if len(distinct) > MAX_STEPPED_VALUES or len(distinct) < 2:
        return None
    thousandths = np.diff(distinct) * STEP_RESOLUTION
    if not np.all(thousandths < 2**53):  # past exact integers in float64 (and int64's cast)
        return None
    whole = np.round(thousandths)
    if not np.allclose(thousandths, whole, atol=1e-3):
        return None
    return float(np.gcd.reduce(whole.astype(np.int64))) / STEP_RESOLUTION


def row_of_frame(row: int) -> str:
    """A row position as a table's reader counts it."""
    return f"row {row + 1}"


def user_item_times(
    raw: Mapping[str, pd.Series | None],
    n: int,
    source: str,
    where: Where,
    *,
    integer_ids: bool = False,
    kind: str = "ratings",
) -> pd.DataFrame:
    """The user, item and timestamp columns of a table of `kind` (ratings, interactions), checked:
    `integer_ids` as for `ratings_table`; without timestamps, the row order."""
    if n == 0:
        raise DataError(f"{source}: no {kind} in file")
    if integer_ids:
        user = non_negative_integers(raw["user"], "user id", source, where)  # type: ignore[arg-type]
        item = non_negative_integers(raw["item"], "item id", source, where)  # type: ignore[arg-type]
        if raw.get("timestamp") is not None:  # seconds since 1970, not dates or fractions
            seconds = non_negative_integers(raw["timestamp"], "timestamp", source, where)  # type: ignore[arg-type]
            raw = {**raw, "timestamp": pd.Series(seconds, copy=False)}
    else:
        user = ids(raw["user"], "user", source, where)  # type: ignore[arg-type]
        item = ids(raw["item"], "item", source, where)  # type: ignore[arg-type]
    return pd.DataFrame(
        {"user": user, "item": item, "timestamp": timestamps(raw.get("timestamp"), n, source, where)},
        copy=False,  # the columns are fresh or read-only views: no second copy of a large table
    )


def ratings_table(
    raw: Mapping[str, pd.Series | None],
    n: int,
    rating_scale_given: tuple[float, float] | None,
    source: str,
    where: Where,
    *,
    integer_ids: bool = False,
    scale_name: str | None = None,
) -> tuple[pd.DataFrame, tuple[float, float]]:
    """The canonical ratings table (user, item, rating, timestamp) from raw columns, and its scale.
    `integer_ids`: every id and timestamp must be a non-negative integer (MovieLens'); `scale_name`
    as for `rating_scale`."""
    table = user_item_times(raw, n, source, where, integer_ids=integer_ids)
    rating = ratings(raw["rating"], source, where)  # type: ignore[arg-type]
    scale = rating_scale(rating, rating_scale_given, source, where, scale_name)
    table.insert(2, "rating", rating)
    return keep_latest_duplicates(table, source), scale


def item_table(
    raw: pd.DataFrame, id_type: np.dtype, source: str, where: Where = row_of_frame
) -> pd.DataFrame:
    """An item table (id, title, optional genres) with its ids in the ratings' id type; columns found
    by common names, else taken as id, title[, genres] in order. A bad row is named by `where`."""
    check_unique_columns(raw, source)
    labels = {str(label): label for label in raw.columns}  # a frame's labels need not be strings
    names = list(labels)
    found = find_columns(names, ITEM_FIELDS, None, source, aliases={**ALIASES, "item": ITEM_ID_ALIASES})
    if "item" not in found or "title" not in found:
        if len(names) < 2:
            raise DataError(
                f"{source}: an item table needs an id and a title column (columns: {shown(names)})"
            )
        # The title is the first column after the id that is not numbers (Netflix Prize's movie file
        # puts the year before it: id, year, title).
        at = next((k for k in range(1, len(names)) if not _mostly_numbers(raw[labels[names[k]]])), 1)
        found = {
            "item": names[0],
            "title": names[at],
            **({"genres": names[at + 1]} if len(names) > at + 1 else {}),
        }
    column = raw[labels[found["item"]]]
    if id_type.kind in "iu":
        item = _integer_item_ids(column, source, where)
    else:
        # As text, as the ratings' ids are, even where every one of the table's spells an integer.
        item = np.asarray(ids(column.astype(str), "item", source, where)).astype(str).astype(object)
    titles = titles_or_missing(raw[labels[found["title"]]])
    genres = (
        raw[labels[found["genres"]]].fillna("").astype(str).to_numpy(dtype=object)
        if "genres" in found
        else ""
    )
    table = pd.DataFrame({"item": item, "title": titles, "genres": genres})[ITEM_COLUMNS]
    return first_entry_of_each_item(table, source, where)


# A column is taken for numbers where at least this share of its values are (years, "NULL" where unknown).
NUMBERS_SHARE = 0.9


def _mostly_numbers(column: pd.Series) -> bool:
    """Whether a column holds numbers, but for a few values, and so no titles."""
    text = column.dropna().astype(str).str.strip()
    text = text[text != ""]
    return len(text) > 0 and float(pd.to_numeric(text, errors="coerce").notna().mean()) >= NUMBERS_SHARE


def titles_or_missing(column: pd.Series) -> np.ndarray:
    """Titles stripped, an empty one missing (None): shown as "[item <id>]", as an item without an
    entry is, not as a blank."""
    titles = column.fillna("").astype(str).str.strip().to_numpy(dtype=object)
    titles[titles == ""] = None
    return titles


def _integer_item_ids(column: pd.Series, source: str, where: Where) -> np.ndarray:
    """An item table's ids as the ratings' integer ids are: exactly where they are integers or spell
    one (a float rounds ids past 2**53 onto their neighbours), else as whole floats ("1.0", "0009")."""
    missing = np.flatnonzero(column.isna().to_numpy() | (column.astype(str) == "").to_numpy())
    if missing.size:
        raise DataError(f"{source}: missing item id on {where(int(missing[0]))}")
    if pd.api.types.is_signed_integer_dtype(column.dtype):
        return column.to_numpy(dtype=np.int64)
    text = column.astype(str).str.strip()
    spelled = text.str.fullmatch(r"-?[0-9]{1,19}").to_numpy(dtype=bool, copy=True)
    spelled[spelled] = [-(2**63) <= int(value) < 2**63 for value in text[spelled]]  # fits an int64
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    whole = whole_numbers(values)
    bad = np.flatnonzero(~(spelled | whole))
    if bad.size:
        row = int(bad[0])
        raise DataError(
            f"{source}: item id {str(column.iloc[row])[:40]!r} on {where(row)} is not an "
            "integer, as the ratings' item ids are"
        )
    item = np.where(whole, values, 0).astype(np.int64)
    item[spelled] = text[spelled].astype(np.int64).to_numpy()
    return item


def first_entry_of_each_item(table: pd.DataFrame, source: str, where: Where) -> pd.DataFrame:
    """An item table with each id's first entry alone, and a warning naming the first repeat: an item
    table by mistake (the ratings file itself), or an export's repeats."""
    repeated = table["item"].duplicated()
    if repeated.any():
        row, count = int(np.flatnonzero(repeated.to_numpy())[0]), int(repeated.sum())
        entries = "1 item entry repeats" if count == 1 else f"{count:,} item entries repeat"
        warnings.warn(
            f"{source}: {entries} an id named before, the first "
            f"{table['item'].iloc[row]} on {where(row)}; each id keeps its first title",
            stacklevel=5,
        )
        table = table[~repeated].reset_index(drop=True)
    return table


def data_name(path: Path) -> str:
    """A dataset name from a file name: its stem without compression or format suffixes."""
    name = path.name
    for suffix in (".gz", ".bz2", ".xz", ".zst", ".zstd", ".csv", ".tsv", ".txt", ".dat", ".parquet", ".pq"):
        name = name.removesuffix(suffix)
    cleaned = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name).strip("-.")
    return cleaned or "ratings"
