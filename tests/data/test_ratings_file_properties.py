"""Property-based tests (hypothesis) of recsys.data.ratings_file: any well-formed ratings file reads
back as written (after the duplicate rule), whatever its separator, header, line ends, blank lines,
compression and id types; a single bad value is named by its line; any mangled file, random bytes or
odd DataFrame reads or fails as a one-line DataError naming its source, never as another exception."""

from __future__ import annotations

import bz2
import gzip
import lzma
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recsys.data.columns import SEPARATORS, normalised
from recsys.data.dataset import RatingsDataset
from recsys.data.ratings_file import HEADER_WORDS, load_ratings
from recsys.errors import DataError

# No example database: it would leave a .hypothesis/ folder in the repository.
SETTINGS = settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as stream:
        stream.write(data)
    return sink.getvalue().to_pybytes()


COMPRESSIONS = {
    "plain": lambda data: data,
    "gzip": gzip.compress,
    "bz2": bz2.compress,
    "xz": lzma.compress,
    "zstd": zstd,
}

# Ids that no separator, quote or blank splits: letters, digits and dashes, not all digits; and not
# a column name ("id", "sku"), which would make a headerless file's first line look like a header.
text_ids = st.from_regex(r"[a-z][a-z0-9-]{0,7}", fullmatch=True).filter(
    lambda id_: normalised(id_) not in HEADER_WORDS
)
integer_ids = st.integers(0, 10**12)
steps = st.sampled_from([1.0, 0.5, 0.25, 2.0])
Row = tuple[object, object, float, int]


@st.composite
def tables(draw: st.DrawFn, unique: bool = True) -> tuple[list[Row], bool]:
    """Rows with ratings on a step grid (two values at least), distinct (user, item) pairs unless
    `unique` is False (then few ids, so pairs repeat), and whether the file has timestamps."""
    step = draw(steps)
    rating = st.integers(0, 8).map(lambda n: 1.0 + n * step)
    if unique:
        users = draw(st.sampled_from([text_ids, integer_ids]))
        items = draw(st.sampled_from([text_ids, integer_ids]))
        rows = st.lists(
            st.tuples(users, items, rating, st.integers(0, 2_000_000_000)),
            min_size=2,
            max_size=40,
            unique_by=lambda row: (row[0], row[1]),
        )
    else:
        few = st.sampled_from(["ann", "bob", "cy"])
        rows = st.lists(st.tuples(few, st.integers(1, 3), rating, st.integers(0, 5)), min_size=2, max_size=30)
    return draw(rows.filter(lambda rows: len({row[2] for row in rows}) > 1)), draw(st.booleans())


def latest_of_each_pair(rows: list[Row], timed: bool) -> list[Row]:
    """The duplicate rule, written plainly: per (user, item) the row with the latest timestamp (the
    later line on a tie, or without timestamps), in the order of the file."""
    keep: dict[tuple[object, object], int] = {}
    for position, row in enumerate(rows):
        pair = (row[0], row[1])
        if pair not in keep or not timed or row[3] >= rows[keep[pair]][3]:
            keep[pair] = position
    return [rows[position] for position in sorted(keep.values())]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the whole module: each example overwrites its file there."""
    return tmp_path_factory.mktemp("own-data-properties")


def blank_line(data: st.DataObject, sep: str, width: int) -> str:
    """A line the reader skips: empty, or nothing but separators."""
    return sep * data.draw(st.integers(0, width - 1))


def with_blank_lines(lines: list[str], data: st.DataObject, sep: str, width: int) -> list[str]:
    """`lines` with a few blank lines before them and between them (never inside a header's place:
    the header, when there is one, stays the first line that is not blank)."""
    out = [""] * data.draw(st.integers(0, 2))  # before the table: only truly blank lines
    for index, line in enumerate(lines):
        out.append(line)
        if index + 1 < len(lines) and data.draw(st.integers(0, 9)) == 0:
            out.append(blank_line(data, sep, width))
    return out


def table_lines(rows: list[Row], timed: bool, sep: str) -> tuple[list[str], list[str]]:
    """The column names of a table's file, and its rows as lines (no header)."""
    fields = ["user", "item", "rating", *(["timestamp"] if timed else [])]
    return fields, [sep.join(str(value) for value in row[: len(fields)]) for row in rows]


@SETTINGS
@given(
    table=tables(unique=True) | tables(unique=False),
    sep=st.sampled_from(list(SEPARATORS)),
    header=st.booleans(),
    compression=st.sampled_from(list(COMPRESSIONS)),
    line_end=st.sampled_from(["\n", "\r\n"]),
    data=st.data(),
)
def test_a_well_formed_file_reads_back_as_written(
    workdir: Path,
    table: tuple[list[Row], bool],
    sep: str,
    header: bool,
    compression: str,
    line_end: str,
    data: st.DataObject,
) -> None:
    rows, timed = table
    fields, lines = table_lines(rows, timed, sep)
    lines = ([sep.join(fields)] if header else []) + lines
    lines = with_blank_lines(lines, data, sep, len(fields))
    path = workdir / "ratings"
    path.write_bytes(COMPRESSIONS[compression]((line_end.join(lines) + line_end).encode()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset = load_ratings(path)
    expected = latest_of_each_pair(rows, timed)
    dropped = len(rows) - len(expected)
    duplicates = [str(warning.message) for warning in caught if "duplicate" in str(warning.message)]
    assert duplicates == (
        [
            f"{path}: {dropped} duplicate (user, item) ratings dropped; kept the latest of each by timestamp "
            "(the later row where the file has no timestamps)"
        ]
        if dropped
        else []
    )
    ratings = dataset.ratings
    for position, column in enumerate(["user", "item"]):
        written = [row[position] for row in expected]
        assert ratings[column].tolist() == written
        assert (ratings[column].dtype.kind == "i") == all(isinstance(value, int) for value in written)
    assert ratings["rating"].tolist() == [row[2] for row in expected]
    if timed:
        assert ratings["timestamp"].tolist() == [row[3] for row in expected]
    else:  # the line order stands for time: increasing, and the rows kept are the later ones
        assert ratings["timestamp"].is_monotonic_increasing
    values = [row[2] for row in rows]
    assert dataset.rating_scale == (min(values), max(values))
    assert ratings["rating"].dtype == np.float32 and ratings["timestamp"].dtype == np.int64


@SETTINGS
@given(
    table=tables(),
    sep=st.sampled_from(list(SEPARATORS)),
    header=st.booleans(),
    compression=st.sampled_from(["plain", "gzip", "xz"]),
    data=st.data(),
)
def test_a_single_bad_value_is_named_by_its_line(
    workdir: Path,
    table: tuple[list[Row], bool],
    sep: str,
    header: bool,
    compression: str,
    data: st.DataObject,
) -> None:
    rows, timed = table
    fields, lines = table_lines(rows, timed, sep)
    # Not the first line of a headerless file: text where later lines have numbers makes it a header.
    bad_row = data.draw(st.integers(0 if header else 1, len(rows) - 1))
    column = data.draw(st.sampled_from([name for name in fields if name != "item"]))
    values = lines[bad_row].split(sep)
    # Text no number or date reads as ("!" keeps "nan", "inf" or "now" from parsing), or nothing.
    junk = data.draw(st.from_regex(r"[a-z]{1,5}!", fullmatch=True) | st.just(""))
    if column == "user":
        junk = ""  # any text is a user id; only a missing one is an error
    values[fields.index(column)] = junk
    lines[bad_row] = sep.join(values)
    if header:
        lines.insert(0, sep.join(fields))
    lines = with_blank_lines(lines, data, sep, len(fields))
    # The bad line: the first line holding the changed row (the header and blank lines counted).
    data_lines = [number for number, line in enumerate(lines, 1) if line.strip(sep)]
    line_number = data_lines[bad_row + (1 if header else 0)]
    path = workdir / "bad"
    path.write_bytes(COMPRESSIONS[compression](("\n".join(lines) + "\n").encode()))
    with pytest.raises(DataError) as error:
        load_ratings(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert f"on line {line_number} " in message + " ", message


def mangled(lines: list[str], sep: str, data: st.DataObject) -> list[str]:
    """`lines` with one change: a field dropped or doubled, a value replaced by junk, a stray quote,
    a line of noise or a blank line."""
    row = data.draw(st.integers(0, len(lines) - 1))
    fields = lines[row].split(sep)
    change = data.draw(st.sampled_from(["drop", "double", "junk", "quote", "noise", "blank"]))
    column = data.draw(st.integers(0, len(fields) - 1))
    if change == "drop":
        del fields[column]
    elif change == "double":
        fields.insert(column, fields[column])
    elif change == "junk":
        fields[column] = data.draw(st.text(max_size=6))
    elif change == "quote":
        fields[column] = data.draw(st.sampled_from(['"', "'", '"x', 'x"', '""'])) + fields[column]
    elif change == "noise":
        return [*lines[:row], data.draw(st.text(max_size=20)), *lines[row:]]
    else:
        fields = [""]
    return [*lines[:row], sep.join(fields), *lines[row + 1 :]]


def assert_reads_or_fails_in_one_line(path: Path) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # duplicates a change made are warned about, not errors
            dataset = load_ratings(path)
    except DataError as error:
        message = str(error)
        assert message.startswith(f"{path}: ") and "\n" not in message and "\r" not in message, message
    else:
        ratings = dataset.ratings
        assert len(ratings) >= 1 and np.isfinite(ratings["rating"]).all()
        assert not ratings[["user", "item", "timestamp"]].isna().to_numpy().any()
        assert ratings["timestamp"].dtype == np.int64 and ratings["rating"].dtype == np.float32


@SETTINGS
@given(
    table=tables(),
    sep=st.sampled_from(list(SEPARATORS)),
    header=st.booleans(),
    compression=st.sampled_from(list(COMPRESSIONS)),
    data=st.data(),
)
def test_a_mangled_file_reads_or_fails_in_one_line(
    workdir: Path,
    table: tuple[list[Row], bool],
    sep: str,
    header: bool,
    compression: str,
    data: st.DataObject,
) -> None:
    rows, _ = table
    lines = ([sep.join(["user", "item", "rating", "timestamp"])] if header else []) + [
        sep.join(map(str, row)) for row in rows
    ]
    content = ("\n".join(mangled(lines, sep, data)) + "\n").encode("utf-8", errors="surrogatepass")
    path = workdir / "mangled"
    path.write_bytes(COMPRESSIONS[compression](content))
    assert_reads_or_fails_in_one_line(path)


@SETTINGS
@given(
    prefix=st.sampled_from(
        [b"", b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd", b"PAR1", b"\xef\xbb\xbf"]
    ),
    content=st.binary(max_size=200),
)
def test_random_bytes_read_or_fail_in_one_line(workdir: Path, prefix: bytes, content: bytes) -> None:
    path = workdir / "bytes"
    path.write_bytes(prefix + content)
    assert_reads_or_fails_in_one_line(path)


@SETTINGS
@given(
    compression=st.sampled_from(list(COMPRESSIONS)),
    content=st.lists(
        st.lists(
            st.sampled_from(["1", "2", "x", "", "-", "0.5", "nan", "inf", "007", '"', "2024-01-01"]),
            max_size=5,
        ),
        max_size=6,
    ),
    sep=st.sampled_from(list(SEPARATORS)),
)
def test_random_tables_of_tricky_values_read_or_fail_in_one_line(
    workdir: Path, compression: str, content: list[list[str]], sep: str
) -> None:
    text = "".join(sep.join(row) + "\n" for row in content)
    path = workdir / "tricky"
    path.write_bytes(COMPRESSIONS[compression](text.encode()))
    assert_reads_or_fails_in_one_line(path)


values = st.one_of(
    st.none(),
    st.integers(-5, 5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "a", "1", "007", "2024-01-01", "nan", "x!"]),
    st.booleans(),
)


@SETTINGS
@given(
    columns=st.lists(st.lists(values, min_size=3, max_size=3), min_size=3, max_size=4),
    with_scale=st.booleans(),
)
def test_a_frame_of_any_values_reads_or_fails_in_one_line(
    columns: list[list[object]], with_scale: bool
) -> None:
    names = ["user", "item", "rating", "timestamp"][: len(columns)]
    frame = pd.DataFrame(dict(zip(names, columns, strict=True)))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset = RatingsDataset.from_frame(frame, rating_scale=(-10, 10) if with_scale else None)
    except DataError as error:
        message = str(error)
        assert message.startswith("the ratings frame: ") and "\n" not in message, message
    else:
        ratings = dataset.ratings
        assert np.isfinite(ratings["rating"]).all() and not ratings.isna().to_numpy().any()
        assert ratings["timestamp"].dtype == np.int64 and ratings["rating"].dtype == np.float32
