"""Property-based tests (hypothesis) of recsys.data.movielens: ratings files round-trip, and malformed
ratings and item files fail as DataError."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from recsys.data.dataset import RATING_COLUMNS
from recsys.data.movielens import RATINGS_FILE, read_items, read_ratings
from recsys.data.ratings_table import ITEM_COLUMNS
from recsys.errors import DataError

# No example database: it would leave a .hypothesis/ folder in the repository.
SETTINGS = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

CSV_HEADER = "userId,movieId,rating,timestamp"
# The rating scales the MovieLens variants use, per layout.
SCALES = {"100k": [(1.0, 5.0)], "dat": [(1.0, 5.0), (0.5, 5.0)], "csv": [(0.5, 5.0)]}
LAYOUT_SCALES = [(layout, scale) for layout, scales in SCALES.items() for scale in scales]
DTYPES = {"user": np.int64, "item": np.int64, "rating": np.float32, "timestamp": np.int64}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the whole module: each example overwrites its file there."""
    return tmp_path_factory.mktemp("properties")


# --- 1. well-formed files round-trip -------------------------------------------------------------

ids = st.integers(1, 10_000)
timestamps = st.integers(0, 2_000_000_000)
whole_stars = st.integers(1, 5).map(float)
half_stars = st.integers(1, 10).map(lambda n: n / 2)


def rows_of(
    ratings: st.SearchStrategy[float], unique: bool = True
) -> st.SearchStrategy[list[tuple[int, int, float, int]]]:
    """Rows with distinct (user, item) pairs unless `unique` is False (read_ratings keeps one per pair)."""
    rows = st.tuples(ids, ids, ratings, timestamps)
    if unique:
        return st.lists(rows, min_size=1, max_size=50, unique_by=lambda r: (r[0], r[1]))
    # Few ids, so pairs repeat often.
    rows = st.tuples(st.integers(1, 3), st.integers(1, 3), ratings, st.integers(0, 5))
    return st.lists(rows, min_size=1, max_size=30)


def write_rows(rows: list[tuple[int, int, float, int]], layout: str) -> str:
    if layout == "100k":
        lines = [f"{u}\t{i}\t{r:g}\t{t}" for u, i, r, t in rows]
    elif layout == "dat":
        lines = [f"{u}::{i}::{r:g}::{t}" for u, i, r, t in rows]
    else:  # csv writes ratings as MovieLens does, with one decimal ("4.0", "3.5")
        lines = [CSV_HEADER, *(f"{u},{i},{r:.1f},{t}" for u, i, r, t in rows)]
    return "\n".join(lines) + "\n"


def check_round_trip(workdir: Path, rows: list, layout: str, scale: tuple[float, float]) -> None:
    path = workdir / RATINGS_FILE[layout]
    path.write_text(write_rows(rows, layout), encoding="utf-8")
    got = read_ratings(path, layout, scale)
    assert_rows(got, rows)


def assert_rows(got: pd.DataFrame, rows: list) -> None:
    assert list(got.columns) == RATING_COLUMNS
    assert {c: got[c].dtype for c in RATING_COLUMNS} == {c: np.dtype(t) for c, t in DTYPES.items()}
    assert len(got) == len(rows)
    np.testing.assert_array_equal(got["user"].to_numpy(), np.array([r[0] for r in rows], dtype=np.int64))
    np.testing.assert_array_equal(got["item"].to_numpy(), np.array([r[1] for r in rows], dtype=np.int64))
    np.testing.assert_array_equal(got["rating"].to_numpy(), np.array([r[2] for r in rows], dtype=np.float32))
    np.testing.assert_array_equal(got["timestamp"].to_numpy(), np.array([r[3] for r in rows], dtype=np.int64))


@SETTINGS
@given(rows=rows_of(whole_stars))
def test_round_trip_100k(workdir: Path, rows: list) -> None:
    check_round_trip(workdir, rows, "100k", (1.0, 5.0))


@SETTINGS
@given(rows=rows_of(whole_stars))
def test_round_trip_dat(workdir: Path, rows: list) -> None:
    check_round_trip(workdir, rows, "dat", (1.0, 5.0))


@SETTINGS
@given(rows=rows_of(half_stars))
def test_round_trip_csv(workdir: Path, rows: list) -> None:
    check_round_trip(workdir, rows, "csv", (0.5, 5.0))


def latest_per_pair(rows: list) -> list:
    """The rows read_ratings keeps: per (user, item) the latest by timestamp, the later line on a
    tie, in file order."""
    best: dict[tuple[int, int], tuple[int, int]] = {}
    for position, (u, i, _, t) in enumerate(rows):
        best[(u, i)] = max(best.get((u, i), (t, position)), (t, position))
    kept = {position for _, position in best.values()}
    return [row for position, row in enumerate(rows) if position in kept]


@SETTINGS
@pytest.mark.parametrize("layout", ["100k", "dat", "csv"])
@given(rows=rows_of(half_stars, unique=False))
def test_duplicate_pairs_keep_latest(workdir: Path, layout: str, rows: list) -> None:
    if layout != "csv":  # whole stars only outside csv
        rows = [(u, i, float(max(1, round(r))), t) for u, i, r, t in rows]
    path = workdir / RATINGS_FILE[layout]
    path.write_text(write_rows(rows, layout), encoding="utf-8")
    expected = latest_per_pair(rows)
    if len(expected) < len(rows):
        with pytest.warns(UserWarning, match="duplicate"):
            got = read_ratings(path, layout, SCALES[layout][0])
    else:
        got = read_ratings(path, layout, SCALES[layout][0])
    assert_rows(got, expected)
    assert got.index.equals(pd.RangeIndex(len(expected)))


# --- 2. malformed files: a valid table or DataError, nothing else --------------------------------

# Field values that parsers tend to trip over, mixed with arbitrary short text.
TOKENS = [
    "1", "5", "0", "-1", "3", "3.5", "0.5", "4.0", "nan", "NaN", "inf", "-inf", "Infinity", "",
    " ", "1e400", "1e30", "-0", "99999999999999999999", "9223372036854775808", "abc", "True",
    "False", "None", "NULL", "1,5", '"', '"1"', "#", "\x00", "0x10", "1_000", "\u0661", "\uff11",
    "\ufeff1", "é", "userId", "movieId",
]  # fmt: skip
SEPARATORS = ["\t", "::", ",", ":", " ", ";", "|", "\t\t", ":::", ""]
LINE_ENDS = ["\n", "\r\n", "\r"]

fields = st.one_of(st.sampled_from(TOKENS), st.text(max_size=6))
structured_text = st.builds(
    lambda rows, sep, end: end.join(sep.join(row) for row in rows),
    st.lists(st.lists(fields, min_size=0, max_size=8), min_size=0, max_size=6),
    st.sampled_from(SEPARATORS),
    st.sampled_from(LINE_ENDS),
)
free_text = st.lists(st.text(max_size=40), max_size=6).map("\n".join)
encoded_text = st.builds(
    lambda text, encoding: text.encode(encoding, errors="replace"),
    st.one_of(structured_text, free_text),
    st.sampled_from(["utf-8", "latin-1", "utf-16"]),
)
file_bytes = st.one_of(encoded_text, st.binary(max_size=300))


def assert_printable_line(message: str) -> None:
    """A message shows no raw file content: one line, every character printable."""
    assert message.isprintable(), message


def check_valid_or_data_error(workdir: Path, layout: str, scale: tuple[float, float], body: bytes) -> None:
    path = workdir / RATINGS_FILE[layout]
    path.write_bytes(body)
    try:
        got = read_ratings(path, layout, scale)
    except DataError as error:
        assert_printable_line(str(error))
        return
    # Anything other than DataError propagates and fails the test. A table that comes back is valid:
    assert list(got.columns) == RATING_COLUMNS
    assert {c: got[c].dtype for c in RATING_COLUMNS} == {c: np.dtype(t) for c, t in DTYPES.items()}
    assert len(got) > 0
    rating = got["rating"].to_numpy()
    assert not np.isnan(rating).any()
    assert ((rating >= scale[0]) & (rating <= scale[1])).all()


@SETTINGS
@pytest.mark.parametrize(("layout", "scale"), LAYOUT_SCALES)
@given(body=file_bytes, with_header=st.booleans())
@example(body=b"\n1", with_header=False)  # found by hypothesis: a blank first line hid a 1-field csv
@example(body=b'"', with_header=True)  # found by hypothesis: polars panicked on a lone unclosed quote
def test_malformed_is_data_error(
    workdir: Path, layout: str, scale: tuple[float, float], body: bytes, with_header: bool
) -> None:
    # A csv file without its exact header fails at the header; prepending it reaches the rows.
    if layout == "csv" and with_header:
        body = CSV_HEADER.encode() + b"\n" + body
    check_valid_or_data_error(workdir, layout, scale, body)


@pytest.mark.parametrize(("layout", "scale"), LAYOUT_SCALES)
@pytest.mark.parametrize(
    "body",
    [b"", b"\n", b"\n\n\n", b"nan\tnan\tnan\tnan\n", b"1::1::nan::1\n", b"1,1,inf,1\n", b"\xff\xfe\x00"],
)
def test_malformed_examples(workdir: Path, layout: str, scale: tuple[float, float], body: bytes) -> None:
    check_valid_or_data_error(workdir, layout, scale, body)
    if layout == "csv":
        check_valid_or_data_error(workdir, layout, scale, CSV_HEADER.encode() + b"\n" + body)


# --- 3. malformed item files: a valid item table or DataError, nothing else ----------------------

FLAGS_100K = ["0"] * 18 + ["1"]
# Well-formed fields of each item file, one list per line; every strategy below spoils a copy.
GOOD_ITEM_LINES: dict[str, list[list[str]]] = {
    "u.genre": [[f"Kind{i}", str(i)] for i in range(19)],
    "u.item": [
        ["1", "Made Up (1995)", "01-Jan-1995", "", "http://example.invalid/1", *FLAGS_100K],
        ["2", "Also Made Up (1996)", "", "", "", *FLAGS_100K[::-1]],
    ],
    "movies.dat": [["1", "Made Up: Part 2 (1995)", "Comedy|Drama"], ["2", "Another (1996)", "Drama"]],
    "movies.csv": [["movieId", "title", "genres"], ["1", '"Made Up, The (1995)"', "Comedy"], ["2", "B", ""]],
}
ITEM_SEPARATOR = {"u.genre": "|", "u.item": "|", "movies.dat": "::", "movies.csv": ","}
ITEM_LAYOUT = {"u.genre": "100k", "u.item": "100k", "movies.dat": "dat", "movies.csv": "csv"}


def item_text(name: str, lines: list[list[str]]) -> str:
    return "".join(ITEM_SEPARATOR[name].join(fields) + "\n" for fields in lines)


CHANGES = ["drop field", "add field", "replace field", "drop line", "repeat line"]


@st.composite
def spoiled_lines(draw: st.DrawFn, name: str) -> list[list[str]]:
    """The good lines of `name` with fields dropped, added or replaced and lines dropped or repeated."""
    lines = [list(fields) for fields in GOOD_ITEM_LINES[name]]
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        row = draw(st.integers(0, len(lines) - 1))
        column = draw(st.integers(0, len(lines[row])))
        change = draw(st.sampled_from(CHANGES))
        if change == "drop field" and column < len(lines[row]):
            del lines[row][column]
        elif change == "add field":
            lines[row].insert(column, draw(fields))
        elif change == "replace field" and column < len(lines[row]):
            lines[row][column] = draw(fields)
        elif change == "drop line":
            del lines[row]
        elif change == "repeat line":
            lines.insert(row, list(lines[row]))
    return lines


def item_file_bytes(name: str) -> st.SearchStrategy[bytes]:
    """Spoiled, truncated or arbitrary contents for the item file `name`."""
    spoiled = spoiled_lines(name).map(lambda lines: item_text(name, lines).encode("utf-8"))
    good = item_text(name, GOOD_ITEM_LINES[name]).encode("utf-8")
    truncated = st.integers(0, len(good)).map(lambda end: good[:end])
    return st.one_of(spoiled, truncated, file_bytes)


def check_items_or_data_error(folder: Path, name: str, body: bytes) -> None:
    """Write `body` as `name` beside good companion files; reading must give items or DataError."""
    for other in {"u.genre": ["u.item"], "u.item": ["u.genre"]}.get(name, []):
        (folder / other).write_text(item_text(other, GOOD_ITEM_LINES[other]))
    (folder / name).write_bytes(body)
    try:
        items = read_items(folder, ITEM_LAYOUT[name])
    except DataError as error:
        assert_printable_line(str(error))
        return
    assert list(items.columns) == ITEM_COLUMNS
    assert items["item"].dtype == np.int64 and (items["item"] >= 0).all()
    assert all(isinstance(text, str) for text in items["genres"])
    assert all(pd.isna(text) or (isinstance(text, str) and text) for text in items["title"])  # NA: untitled


@SETTINGS
@pytest.mark.parametrize("name", list(GOOD_ITEM_LINES))
@given(data=st.data())
def test_malformed_item_file_is_data_error(workdir: Path, name: str, data: st.DataObject) -> None:
    check_items_or_data_error(workdir, name, data.draw(item_file_bytes(name)))


@pytest.mark.parametrize("name", list(GOOD_ITEM_LINES))
def test_good_item_files_read(workdir: Path, name: str) -> None:
    """The unspoiled lines the strategies start from are themselves readable."""
    for other in GOOD_ITEM_LINES:
        (workdir / other).write_text(item_text(other, GOOD_ITEM_LINES[other]))
    items = read_items(workdir, ITEM_LAYOUT[name])
    assert items["item"].tolist() == [1, 2]
