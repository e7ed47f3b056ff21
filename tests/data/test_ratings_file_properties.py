"""Property-based tests (hypothesis) of recsys.data.ratings_file: any well-formed ratings file reads
back as written, whatever its separator, header, compression and id types; any mangled one reads or
fails as a one-line DataError naming the file, never as another exception."""

from __future__ import annotations

import bz2
import gzip
import lzma
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recsys.data.ratings_file import SEPARATORS, load_ratings
from recsys.errors import DataError

# No example database: it would leave a .hypothesis/ folder in the repository.
SETTINGS = settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
COMPRESSIONS = {"plain": lambda data: data, "gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}

# Ids that no separator, quote or blank splits: letters, digits and dashes, not all digits.
text_ids = st.from_regex(r"[a-z][a-z0-9-]{0,7}", fullmatch=True)
integer_ids = st.integers(0, 10**12)
steps = st.sampled_from([1.0, 0.5, 0.25, 2.0])


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[tuple[object, object, float, int]], bool]:
    """Distinct (user, item) rows with ratings on a step grid (two values at least), and whether the
    file has timestamps."""
    users = draw(st.sampled_from([text_ids, integer_ids]))
    items = draw(st.sampled_from([text_ids, integer_ids]))
    step = draw(steps)
    rating = st.integers(0, 8).map(lambda n: 1.0 + n * step)
    rows = draw(
        st.lists(
            st.tuples(users, items, rating, st.integers(0, 2_000_000_000)),
            min_size=2,
            max_size=40,
            unique_by=lambda row: (row[0], row[1]),
        ).filter(lambda rows: len({row[2] for row in rows}) > 1)
    )
    return rows, draw(st.booleans())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the whole module: each example overwrites its file there."""
    return tmp_path_factory.mktemp("own-data-properties")


@SETTINGS
@given(
    table=tables(),
    sep=st.sampled_from(list(SEPARATORS)),
    header=st.booleans(),
    compression=st.sampled_from(list(COMPRESSIONS)),
)
def test_a_well_formed_file_reads_back_as_written(
    workdir: Path,
    table: tuple[list[tuple[object, object, float, int]], bool],
    sep: str,
    header: bool,
    compression: str,
) -> None:
    rows, timed = table
    fields = ["user", "item", "rating", *(["timestamp"] if timed else [])]
    lines = [sep.join(fields)] if header else []
    lines += [sep.join(str(value) for value in row[: len(fields)]) for row in rows]
    path = workdir / "ratings"
    path.write_bytes(COMPRESSIONS[compression](("\n".join(lines) + "\n").encode()))
    dataset = load_ratings(path)
    ratings = dataset.ratings
    for position, column in enumerate(["user", "item"]):
        written = [row[position] for row in rows]
        assert ratings[column].tolist() == written
        assert (ratings[column].dtype.kind == "i") == all(isinstance(value, int) for value in written)
    assert ratings["rating"].tolist() == [row[2] for row in rows]
    expected_times = [row[3] for row in rows] if timed else list(range(len(rows)))
    assert ratings["timestamp"].tolist() == expected_times
    values = [row[2] for row in rows]
    assert dataset.rating_scale == (min(values), max(values))


def mangled(lines: list[str], data: st.DataObject) -> list[str]:
    """`lines` with one change: a field dropped or doubled, a value replaced by junk, or noise added."""
    row = data.draw(st.integers(0, len(lines) - 1))
    fields = lines[row].split(",")
    change = data.draw(st.sampled_from(["drop", "double", "junk", "noise", "blank"]))
    column = data.draw(st.integers(0, len(fields) - 1))
    if change == "drop":
        del fields[column]
    elif change == "double":
        fields.insert(column, fields[column])
    elif change == "junk":
        fields[column] = data.draw(st.text(max_size=6))
    elif change == "noise":
        return [*lines[:row], data.draw(st.text(max_size=20)), *lines[row:]]
    else:
        fields = [""]
    return [*lines[:row], ",".join(fields), *lines[row + 1 :]]


@SETTINGS
@given(table=tables(), data=st.data())
def test_a_mangled_file_reads_or_fails_in_one_line(
    workdir: Path, table: tuple[list[tuple[object, object, float, int]], bool], data: st.DataObject
) -> None:
    rows, _ = table
    lines = ["user,item,rating,timestamp"] + [",".join(map(str, row)) for row in rows]
    path = workdir / "mangled.csv"
    path.write_text("\n".join(mangled(lines, data)) + "\n", encoding="utf-8", errors="surrogatepass")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # duplicates a change made are warned about, not errors
            dataset = load_ratings(path)
    except DataError as error:
        message = str(error)
        assert message.startswith(str(path)) and "\n" not in message
    else:
        assert len(dataset.ratings) >= 1 and np.isfinite(dataset.ratings["rating"]).all()


@SETTINGS
@given(content=st.binary(max_size=200))
def test_random_bytes_read_or_fail_in_one_line(workdir: Path, content: bytes) -> None:
    path = workdir / "bytes"
    path.write_bytes(content)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_ratings(path)
    except DataError as error:
        assert str(error).startswith(str(path)) and "\n" not in str(error)
