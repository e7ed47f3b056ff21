"""Offline tests for recsys.data.movielens and recsys.data.cache on small made-up files in every layout.

Nothing here copies the real MovieLens data: each test writes its own few lines in the format of
the variant under test (tests/movielens_files.py). Only the last tests read the real ml-100k, and
they skip when it is absent.
"""

from __future__ import annotations

import bz2
import dataclasses
import errno
import gzip
import hashlib
import lzma
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, Served, zip_bytes
from movielens_files import (
    CSV_HEADER,
    GENRES_100K,
    HALF_RATINGS,
    SEPARATOR,
    WHOLE_RATINGS,
    check_dtypes,
    expected_ratings,
    folder_as_zip,
    listing,
    ratings_text,
    rows_for,
    write_dataset,
)

import recsys.data.cache as cache
from recsys.data.cache import MANIFEST
from recsys.data.dataset import RatingsDataset
from recsys.data.movielens import (
    RATINGS_FILE,
    VARIANTS,
    load_movielens,
    read_folder,
    read_items,
    read_ratings,
)
from recsys.errors import DataError, DownloadError

# ---------------------------------------------------------------------------------------------
# Parsers of each layout
# ---------------------------------------------------------------------------------------------


def check_read(ds: RatingsDataset, rows: list[tuple], titles: list[str], genres: list[str]) -> None:
    """`ds` holds exactly `rows` as ratings, and items 10, 20, 30 with these titles and genres."""
    check_dtypes(ds.ratings)
    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(rows))
    assert ds.items["item"].dtype == np.int64
    assert ds.items["item"].tolist() == [10, 20, 30]
    assert ds.items["title"].tolist() == titles
    assert ds.items["genres"].tolist() == genres


def test_read_100k_layout(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "ml-100k", "100k", WHOLE_RATINGS)

    ds = read_folder("ml-100k", folder, "100k", (1, 5))

    # u.item is latin-1: the accented title survives, decoded.
    check_read(
        ds,
        WHOLE_RATINGS,
        titles=["Café Lumière (1993)", "Quiet Harbour (1996)", "Plain Title, A (1997)"],
        genres=["Kind01|Kind05", "", "Kind18"],
    )
    assert ds.name == "ml-100k" and ds.rating_scale == (1, 5) and ds.folder == folder


def test_read_dat_layout(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "ml-10M100K", "dat", HALF_RATINGS)

    ds = read_folder("ml-10m", folder, "dat", (0.5, 5))

    # A ':' inside a title does not split it; movies.dat is latin-1.
    check_read(
        ds,
        HALF_RATINGS,
        titles=["Space Patrol: The Return (1995)", "Crème Brûlée (1998)", "Nothing Listed (2001)"],
        genres=["Comedy|Drama", "Romance", "(no genres listed)"],
    )
    assert ds.ratings["rating"].tolist() == [4.5, 0.5, 3.0]


def test_read_csv_layout(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "ml-latest-small", "csv", HALF_RATINGS)
    assert '"Lighthouse, The (1995)"' in (folder / "movies.csv").read_text()  # quoted, as GroupLens does

    ds = read_folder("ml-latest-small", folder, "csv", (0.5, 5))

    check_read(
        ds,
        HALF_RATINGS,
        titles=["Lighthouse, The (1995)", "Plain (1999)", "Brackets: and, commas (2003)"],
        genres=["Comedy|Drama", "Thriller", "(no genres listed)"],
    )


def check_read_csv(ds: RatingsDataset) -> None:
    """`ds` holds HALF_RATINGS and the CSV layout's items, as GroupLens' own files read."""
    check_read(
        ds,
        HALF_RATINGS,
        titles=["Lighthouse, The (1995)", "Plain (1999)", "Brackets: and, commas (2003)"],
        genres=["Comedy|Drama", "Thriller", "(no genres listed)"],
    )


def test_large_ids_and_timestamps_keep_int64(tmp_path: Path) -> None:
    rows = [(3_000_000_000, 2_500_000_000, 3.5, 4_000_000_000)]
    folder = write_dataset(tmp_path / "big", "csv", rows)

    with pytest.warns(UserWarning, match="no entry for 1 rated item id, e.g. 2500000000"):
        ratings = read_folder("x", folder, "csv", (0.5, 5)).ratings

    check_dtypes(ratings)
    assert ratings.iloc[0].tolist() == [3_000_000_000, 2_500_000_000, 3.5, 4_000_000_000]


# ---------------------------------------------------------------------------------------------
# load_movielens for every variant, from its folder or its parent
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("point_at", ["folder", "parent"])
def test_load_every_variant_from_data_dir(
    tmp_path: Path, no_data_root: None, name: str, point_at: str
) -> None:
    variant = VARIANTS[name]
    rows = rows_for(variant.layout, variant.rating_scale)
    folder = write_dataset(tmp_path / "data" / variant.folder, variant.layout, rows)

    data_dir = folder if point_at == "folder" else folder.parent
    ds = load_movielens(name, data_dir=data_dir, allow_download=False)

    assert ds.name == name
    assert ds.folder == folder
    assert ds.rating_scale == variant.rating_scale
    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(rows))
    assert ds.items["item"].tolist() == [10, 20, 30]


def test_variant_table_matches_the_docs() -> None:
    assert {n: (v.folder, v.layout, v.rating_scale) for n, v in VARIANTS.items()} == {
        "ml-100k": ("ml-100k", "100k", (1, 5)),
        "ml-1m": ("ml-1m", "dat", (1, 5)),
        "ml-10m": ("ml-10M100K", "dat", (0.5, 5)),
        "ml-20m": ("ml-20m", "csv", (0.5, 5)),
        "ml-25m": ("ml-25m", "csv", (0.5, 5)),
        "ml-32m": ("ml-32m", "csv", (0.5, 5)),
        "ml-latest-small": ("ml-latest-small", "csv", (0.5, 5)),
    }
    for variant in VARIANTS.values():
        assert variant.sha256 or variant.md5, f"{variant.name} has no pinned digest"


def test_unknown_variant_lists_the_variants() -> None:
    with pytest.raises(DataError, match="ml-100k") as err:
        load_movielens("ml-7k")
    assert "ml-7k" in str(err.value) and "ml-latest-small" in str(err.value)


def test_half_star_rating_outside_whole_star_scale_is_rejected(tmp_path: Path, no_data_root: None) -> None:
    # ml-1m is 1-5: a 0.5 that would be fine in ml-10m must be refused.
    folder = write_dataset(tmp_path / "ml-1m", "dat", HALF_RATINGS)
    with pytest.raises(DataError, match="outside the scale 1-5") as err:
        load_movielens("ml-1m", data_dir=folder)
    assert str(folder / "ratings.dat") in str(err.value)


# ---------------------------------------------------------------------------------------------
# Bad input: one-line DataErrors naming the file
# ---------------------------------------------------------------------------------------------

LAYOUT_SCALE = {"100k": (1.0, 5.0), "dat": (0.5, 5.0), "csv": (0.5, 5.0)}
GOOD = (1, 10, 4, 1_000_000_001)


def write_bad_ratings(folder: Path, layout: str, case: str) -> Path:
    """Write a good dataset, then spoil its ratings file according to `case`; return that file."""
    write_dataset(folder, layout, [GOOD])
    path = folder / RATINGS_FILE[layout]
    sep = SEPARATOR[layout]
    header = CSV_HEADER + "\n" if layout == "csv" else ""
    good = sep.join(map(str, GOOD))
    bad_line = {
        "non-numeric rating": sep.join(["2", "10", "four", "1000000002"]),
        "rating above scale": sep.join(["2", "10", "6", "1000000002"]),
        "rating below scale": sep.join(["2", "10", "0", "1000000002"]),
        "non-integer user": sep.join(["1.5", "10", "4", "1000000002"]),
        "non-integer item": sep.join(["2", "10.5", "4", "1000000002"]),
        "missing field": sep.join(["2", "10", "4"]),
        "extra field": sep.join(["2", "10", "4", "1000000002", "7"]),
    }
    if case == "missing file":
        path.unlink()
    elif case == "empty file":
        path.write_text("")
    elif case == "header only":
        path.write_text(header)
    else:
        path.write_text(f"{header}{good}\n{bad_line[case]}\n{good}\n")
    return path


BAD_CASES: dict[str, str | None] = {
    "missing file": "not found",
    "empty file": "empty|no ratings",
    "non-numeric rating": "non-numeric value in rating row 2",
    "rating above scale": r"rating 6(\.0)? in row 2 is outside the scale",
    "rating below scale": r"rating 0(\.0)? in row 2 is outside the scale",
    "non-integer user": "user id 1.5 on row 2 is not a non-negative integer",
    "non-integer item": "item id 10.5 on row 2 is not a non-negative integer",
    "missing field": "row 2",
    "extra field": None,  # any message, as long as it is a DataError naming the file
}
# ratings.csv, u.data and ratings.dat are read as a user's own file is: a bad value is named by its
# line (in ratings.csv the header is line 1), as the file spells it.
LINE_BAD_CASES = {
    "100k": {
        **BAD_CASES,
        "non-numeric rating": "rating 'four' on line 2 is not a number",
        "rating above scale": "rating 6 on line 2 is outside the scale 1-5",
        "rating below scale": "rating 0 on line 2 is outside the scale 1-5",
        "non-integer user": "user id '1.5' on line 2 is not a non-negative integer",
        "non-integer item": "item id '10.5' on line 2 is not a non-negative integer",
        "missing field": "missing timestamp on line 2",
        "extra field": "line 2 has 5 fields; expected 4, separated by tab",
    },
    "dat": {
        **BAD_CASES,
        "non-numeric rating": "rating 'four' on line 2 is not a number",
        "rating above scale": "rating 6 on line 2 is outside the scale 0.5-5",
        "rating below scale": "rating 0 on line 2 is outside the scale 0.5-5",
        "non-integer user": "user id '1.5' on line 2 is not a non-negative integer",
        "non-integer item": "item id '10.5' on line 2 is not a non-negative integer",
        "missing field": "missing timestamp on line 2",
        "extra field": "line 2 has 5 fields; expected 4, separated by '::'",
    },
    "csv": {
        **BAD_CASES,
        "non-numeric rating": "rating 'four' on line 3 is not a number",
        "rating above scale": "rating 6 on line 3 is outside the scale 0.5-5",
        "rating below scale": "rating 0 on line 3 is outside the scale 0.5-5",
        "non-integer user": "user id '1.5' on line 3 is not a non-negative integer",
        "non-integer item": "item id '10.5' on line 3 is not a non-negative integer",
        "missing field": "missing timestamp on line 3",
        "extra field": "line 3 has 5 fields; expected 4, separated by comma",
    },
}


@pytest.mark.parametrize("layout", ["100k", "dat", "csv"])
@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_ratings_file_is_a_data_error_naming_it(tmp_path: Path, layout: str, case: str) -> None:
    folder = tmp_path / "ds"
    path = write_bad_ratings(folder, layout, case)

    with pytest.raises(DataError, match=LINE_BAD_CASES.get(layout, BAD_CASES)[case]) as err:
        read_folder("x", folder, layout, LAYOUT_SCALE[layout])

    message = str(err.value)
    assert str(path) in message
    assert "\n" not in message


def test_csv_header_only_has_no_ratings(tmp_path: Path) -> None:
    path = write_bad_ratings(tmp_path / "ds", "csv", "header only")
    with pytest.raises(DataError, match="no ratings") as err:
        read_folder("x", tmp_path / "ds", "csv", (0.5, 5))
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("user,item,rating,timestamp", r"no column 'userId' for the users \(columns: 'user', 'item'"),
        ("userId,movieId,rating", "no column 'timestamp' for the timestamps"),
        ("1,10,4,1000000001", "no column 'userId'"),  # no header at all
    ],
)
def test_csv_without_a_named_column(tmp_path: Path, header: str, message: str) -> None:
    folder = write_dataset(tmp_path / "ds", "csv", [GOOD])
    path = folder / "ratings.csv"
    path.write_text(f"{header}\n1,10,4,1000000001\n")

    with pytest.raises(DataError, match=message) as err:
        read_folder("x", folder, "csv", (0.5, 5))
    assert str(err.value).startswith(f"{path}: ")


# ratings.csv as a spreadsheet or another tool may save it: each reads as GroupLens' own does.
CSV_SPELLINGS = {
    "byte-order mark": "\ufeffuserId,movieId,rating,timestamp\n{rows}",
    "quoted fields": '"userId","movieId","rating","timestamp"\n{quoted}',
    "reordered columns": "timestamp,rating,movieId,userId\n{reordered}",
    "header in another case": "userid,movieid,Rating,Timestamp\n{rows}",
    "CRLF line ends and a blank line": "userId,movieId,rating,timestamp\r\n\r\n{crlf}",
    "UTF-16 (Excel's Unicode text)": "userId,movieId,rating,timestamp\n{rows}",
}


@pytest.mark.parametrize("spelling", list(CSV_SPELLINGS))
def test_csv_ratings_read_as_a_user_expects(tmp_path: Path, spelling: str) -> None:
    folder = write_dataset(tmp_path / "ds", "csv", HALF_RATINGS)
    text = CSV_SPELLINGS[spelling].format(
        rows="".join(",".join(map(str, row)) + "\n" for row in HALF_RATINGS),
        quoted="".join(",".join(f'"{v}"' for v in row) + "\n" for row in HALF_RATINGS),
        reordered="".join(",".join(map(str, row[::-1])) + "\n" for row in HALF_RATINGS),
        crlf="".join(",".join(map(str, row)) + "\r\n" for row in HALF_RATINGS),
    )
    encoding = "utf-16" if spelling.startswith("UTF-16") else "utf-8"  # utf-16 writes a byte-order mark
    (folder / "ratings.csv").write_text(text, encoding=encoding, newline="")

    ds = read_folder("ml-latest-small", folder, "csv", (0.5, 5))

    check_read_csv(ds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("\ufeffuserId,movieId,rating,timestamp\n1,10,4.5,1\n2,10,five,2\n", "rating 'five' on line 3"),
        (
            '"userId","movieId","rating","timestamp"\n"1","10","4.5","1"\n"x","10","4","2"\n',
            "user id 'x' on line 3",
        ),
        (
            "rating,userId,movieId,timestamp\n4.5,1,10,1\n\n9,2,10,2\n",
            "rating 9 on line 4 is outside the scale",
        ),
        (
            "userId,movieId,rating,timestamp\n1,10,4.5,1\n2,-10,4,2\n",
            "item id -10 on line 3 is not a non-negative",
        ),
    ],
    ids=["bom", "quoted", "reordered with a blank line", "negative id"],
)
def test_csv_bad_value_is_named_by_its_line(tmp_path: Path, text: str, message: str) -> None:
    folder = write_dataset(tmp_path / "ds", "csv", HALF_RATINGS)
    path = folder / "ratings.csv"
    path.write_text(text, encoding="utf-8")

    with pytest.raises(DataError, match=message) as err:
        read_folder("x", folder, "csv", (0.5, 5))
    assert str(err.value).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1::10::4::1\n2::10::five::2\n", "rating 'five' on line 2 is not a number"),
        ("1::10::4::1\r\n\r\n2::x::4::2\r\n", "item id 'x' on line 3 is not a non-negative"),
        ("1::10::4::1\n2:10::4::2\n", "user id '2:10' on line 2 is not a non-negative"),
        ("1::10::4::1\n2::10::4::2::\n", "line 2 has 5 fields; expected 4, separated by '::'"),
        ("1::10::4::1\n" * 3 + "2::10::9::2\n", "rating 9 on line 4 is outside the scale 0.5-5"),
        ("1::10::4::1\n2::10\x1f::4::2\n", r"line 2 holds the control character '\\x1f'"),
        ("1::10::4::1\n" * 20_000 + "2::10\x1f::4::2\n", r"line 20001 holds the control character"),
    ],
    ids=["not a number", "CRLF and a blank line", "one colon", "trailing ::", "out of scale", "stand-in",
         "stand-in past the sniffed bytes"],
)  # fmt: skip
def test_dat_bad_value_is_named_by_its_line(tmp_path: Path, text: str, message: str) -> None:
    # ratings.dat's "::" are read as one-character separators by a user's own file's reader.
    folder = write_dataset(tmp_path / "ds", "dat", HALF_RATINGS)
    path = folder / "ratings.dat"
    path.write_bytes(text.encode())

    with pytest.raises(DataError, match=message) as err:
        read_folder("x", folder, "dat", (0.5, 5))
    assert str(err.value).startswith(f"{path}: ") and str(err.value).isprintable()


def test_movies_csv_read_as_a_user_expects(tmp_path: Path) -> None:
    # A byte-order mark, quoted header and columns in another order, as a spreadsheet may save it.
    folder = write_dataset(tmp_path / "ds", "csv", HALF_RATINGS)
    (folder / "movies.csv").write_text(
        '\ufeff"genres","title","movieId"\n"Comedy|Drama","Lighthouse, The (1995)",10\n'
        'Thriller,Plain (1999),20\n"(no genres listed)","Brackets: and, commas (2003)","30"\n',
        encoding="utf-8",
    )

    ds = read_folder("x", folder, "csv", (0.5, 5))

    check_read_csv(ds)


@pytest.mark.parametrize(
    ("layout", "items_file"),
    [("100k", "u.item"), ("100k", "u.genre"), ("dat", "movies.dat"), ("csv", "movies.csv")],
)
def test_missing_items_file(tmp_path: Path, layout: str, items_file: str) -> None:
    folder = write_dataset(tmp_path / "ds", layout, [GOOD])
    (folder / items_file).unlink()

    with pytest.raises(DataError, match="not found") as err:
        read_folder("x", folder, layout, LAYOUT_SCALE[layout])
    assert str(folder / items_file) in str(err.value)


def test_malformed_movies_dat_line(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "ds", "dat", [GOOD])
    with (folder / "movies.dat").open("a", encoding="latin-1") as f:
        f.write("40::Title without genres (2000)\n")

    with pytest.raises(DataError, match="MovieID::Title::Genres on every line; line 4 has 2 fields") as err:
        read_folder("x", folder, "dat", (0.5, 5))
    assert str(folder / "movies.dat") in str(err.value)


FLAGS = "|".join(["0"] * 19)
GENRE_LINES = [f"{name}|{i}" for i, name in enumerate(GENRES_100K)]

# case: (layout, file, its lines, what the message must say)
BAD_ITEM_FILES: dict[str, tuple[str, str, list[str], str]] = {
    "u.item with 10 genre flags": (
        "100k", "u.item", [f"10|A (1995)|01-Jan-1995||http://x|{'|'.join(['0'] * 10)}"],
        r"expected item\|title\|release date\|video release date\|url\|19 genre flags "
        r"\(one per line of .*u\.genre\) on every line, found 15 fields",
    ),
    "u.item short line": ("100k", "u.item", [f"10|A|d||u|{FLAGS}", "20|B"], "line 2 has 2 fields; expected"),
    "u.item flag not 0 or 1": (
        "100k", "u.item", [f"10|A|d||u|{FLAGS[:-1]}2"], "genre flag '2' on line 1 is not 0 or 1"
    ),
    "u.item non-integer id": (
        "100k", "u.item", [f"10|A|d||u|{FLAGS}", f"x1|B|d||u|{FLAGS}"],
        "item id 'x1' on line 2 is not a non-negative integer",
    ),
    "u.item negative id": ("100k", "u.item", [f"-10|A|d||u|{FLAGS}"], "item id '-10' on line 1"),
    "u.genre without indexes": ("100k", "u.genre", GENRES_100K, r"expected name\|index on every line"),
    "u.genre with an extra field": ("100k", "u.genre", [f"{g}|x" for g in GENRE_LINES], "found 3 fields"),
    "u.genre out of order": (
        "100k", "u.genre", [GENRE_LINES[1], GENRE_LINES[0], *GENRE_LINES[2:]],
        "genre index '1' on line 1 should be 0",
    ),
    "u.item bad id after blank lines": (  # pandas skips blank lines: the message counts them
        "100k", "u.item", [f"10|A|d||u|{FLAGS}", "", "  ", f"x1|B|d||u|{FLAGS}"],
        "item id 'x1' on line 4 is not a non-negative integer",
    ),
    "u.item bad flag after a blank line": (
        "100k", "u.item", ["", f"10|A|d||u|{FLAGS[:-1]}7"], "genre flag '7' on line 2 is not 0 or 1"
    ),
    "u.genre out of order after a blank line": (
        "100k", "u.genre", ["", GENRE_LINES[0], GENRE_LINES[2], GENRE_LINES[1], *GENRE_LINES[3:]],
        "genre index '2' on line 3 should be 1",
    ),
    "u.genre one genre short": ("100k", "u.genre", GENRE_LINES[:-1], "18 genre flags.*found 24 fields"),
    "movies.dat non-integer id": (
        "dat", "movies.dat", ["10::A::Drama", "1O::B::Drama"], "item id '1O' on line 2 is not",
    ),
    "movies.dat empty": ("dat", "movies.dat", [], "file is empty"),
    "movies.csv without genres": (
        "csv", "movies.csv", ["movieId,title", "10,A"],
        r"no column 'genres' for the genres \(columns: 'movieId', 'title'\)",
    ),
    "movies.csv non-integer id": (
        "csv", "movies.csv", ["movieId,title,genres", "10,A,Drama", "ten,B,Drama"],
        "item id 'ten' on line 3 is not a non-negative integer",
    ),
    "movies.csv negative id": (
        "csv", "movies.csv", ["movieId,title,genres", "-10,A,Drama"], "item id '-10' on line 2 is not a"
    ),
    "movies.csv extra field": (
        "csv", "movies.csv", ["movieId,title,genres", "10,A,Drama,x"], "line 2 has 4 fields; expected 3"
    ),
    "movies.csv repeated column": (  # found by hypothesis: polars was asked for one column twice
        "csv", "movies.csv", ["movieId,movieId,title,genres", "1,A,Comedy"],
        "column 'movieId' appears more than once",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_ITEM_FILES))
def test_bad_items_file_is_a_data_error_naming_it(tmp_path: Path, case: str) -> None:
    layout, name, lines, message = BAD_ITEM_FILES[case]
    folder = write_dataset(tmp_path / "ds", layout, [GOOD])
    path = folder / name
    path.write_bytes("".join(line + "\n" for line in lines).encode("latin-1"))

    with pytest.raises(DataError, match=message) as err:
        read_folder("x", folder, layout, LAYOUT_SCALE[layout])

    assert str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_titles_survive_as_text(tmp_path: Path) -> None:
    # Titles pandas would read as numbers or as missing values stay the text they are.
    folder = write_dataset(tmp_path / "ds", "csv", [GOOD])
    (folder / "movies.csv").write_text("movieId,title,genres\n10,1984,Drama\n20,NA,\n30,,None\n")

    items = read_folder("x", folder, "csv", (0.5, 5)).items

    assert items["title"].tolist()[:2] == ["1984", "NA"]
    assert pd.isna(items["title"].iloc[2])  # no title: shown as "[item 30]"
    assert items["genres"].tolist() == ["Drama", "", "None"]


# ---------------------------------------------------------------------------------------------
# read_ratings: duplicate pairs, ids and timestamps, extra fields
# ---------------------------------------------------------------------------------------------


def test_duplicate_pairs_keep_the_latest_rating_and_warn(tmp_path: Path) -> None:
    path = tmp_path / "ratings.csv"
    path.write_text(
        "userId,movieId,rating,timestamp\n1,2,3.0,20\n1,2,4.0,10\n2,2,5.0,5\n1,2,1.0,15\n2,3,2.0,7\n"
    )
    with pytest.warns(UserWarning, match="2 duplicate"):
        ratings = read_ratings(path, "csv", (0.5, 5.0))
    # (1, 2) was rated at 20, 10 and 15: the rating at 20 stays; row order is otherwise kept.
    assert ratings[["user", "item", "rating"]].values.tolist() == [[1, 2, 3.0], [2, 2, 5.0], [2, 3, 2.0]]


def test_no_duplicates_no_warning(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    path = tmp_path / "u.data"
    path.write_text("1\t2\t3\t10\n1\t3\t4\t11\n")
    assert len(read_ratings(path, "100k", (1, 5))) == 2
    assert not recwarn.list


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("inf\t2\t3\t4", "user id 'inf' on line 1"),
        ("-5\t2\t3\t4", "user id -5 on line 1"),
        ("9223372036854775808\t2\t3\t4", "user id '9223372036854775808' on line 1"),
        ("1\t2\t3\t1.9", "timestamp '1.9' on line 1"),
        ("1\t2\t3\t1e30", "timestamp '1e30' on line 1"),
    ],
)
def test_ids_and_timestamps_must_be_non_negative_integers(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "u.data"
    path.write_text(line + "\n")
    with pytest.raises(DataError, match=message):
        read_ratings(path, "100k", (1, 5))


def test_csv_row_with_an_extra_field_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ratings.csv"
    path.write_text("userId,movieId,rating,timestamp\n9,2,3,4,5\n")
    with pytest.raises(DataError, match=r"ratings\.csv"):
        read_ratings(path, "csv", (0.5, 5))


# ---------------------------------------------------------------------------------------------
# Compressed or binary files: named for what they are, never echoed
# ---------------------------------------------------------------------------------------------

PACKED: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "gzip": (gzip.compress, "gzip-compressed"),
    "bzip2": (bz2.compress, "bzip2-compressed"),
    "xz": (lzma.compress, "xz-compressed"),
    "zstd": (lambda data: b"\x28\xb5\x2f\xfd" + data, "zstd-compressed"),  # only the magic is checked
    "zip": (lambda data: zip_bytes({"ratings": data}), "a zip archive"),
}
# The files of the layouts read here; the CSV layout's, u.data and ratings.dat are read as a user's own
# files are.
DATA_FILES = [("100k", "u.item"), ("100k", "u.genre"), ("dat", "movies.dat")]
OWN_READER_FILES = [("csv", "ratings.csv"), ("csv", "movies.csv"), ("100k", "u.data"), ("dat", "ratings.dat")]


@pytest.mark.parametrize(("layout", "name"), DATA_FILES)
@pytest.mark.parametrize("packer", list(PACKED))
def test_compressed_file_says_so(tmp_path: Path, layout: str, name: str, packer: str) -> None:
    folder = write_dataset(tmp_path / "ds", layout, [GOOD])
    path = folder / name
    pack, what = PACKED[packer]
    path.write_bytes(pack(path.read_bytes()))

    with pytest.raises(DataError) as err:
        read_folder("x", folder, layout, LAYOUT_SCALE[layout])

    assert str(err.value) == f"{path}: is {what}; expected a plain-text file (unpack it first)"


@pytest.mark.parametrize(("layout", "name"), OWN_READER_FILES)
@pytest.mark.parametrize("packer", ["gzip", "bzip2", "xz"])
def test_compressed_own_reader_file_is_read(tmp_path: Path, layout: str, name: str, packer: str) -> None:
    rows = HALF_RATINGS if layout == "csv" else WHOLE_RATINGS
    folder = write_dataset(tmp_path / "ds", layout, rows)
    path = folder / name
    path.write_bytes(PACKED[packer][0](path.read_bytes()))

    ds = read_folder("x", folder, layout, LAYOUT_SCALE[layout])

    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(rows))
    if layout == "csv":
        assert ds.items["title"].tolist() == [
            "Lighthouse, The (1995)",
            "Plain (1999)",
            "Brackets: and, commas (2003)",
        ]


@pytest.mark.parametrize(("layout", "name"), OWN_READER_FILES)
@pytest.mark.parametrize(
    ("packer", "message"),
    [("zip", "is a zip archive; unpack it first"), ("zstd", "cannot decompress it as zstd")],
)
def test_unreadable_packed_own_reader_file_says_so(
    tmp_path: Path, layout: str, name: str, packer: str, message: str
) -> None:
    folder = write_dataset(tmp_path / "ds", layout, [GOOD])
    path = folder / name
    path.write_bytes(PACKED[packer][0](path.read_bytes()))

    with pytest.raises(DataError, match=message) as err:
        read_folder("x", folder, layout, LAYOUT_SCALE[layout])
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)


@pytest.mark.parametrize(("layout", "name"), DATA_FILES + OWN_READER_FILES)
@pytest.mark.parametrize(
    "body",
    [b"1\t10\t4\x00\x00\x00\n", b"\xff\xfe1\x00,\x001\x00\n\x00", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"],
    ids=["nul", "utf-16", "png"],
)
def test_binary_file_is_not_a_text_file(tmp_path: Path, layout: str, name: str, body: bytes) -> None:
    if (layout, name) in OWN_READER_FILES and body.startswith(b"\xff\xfe"):
        pytest.skip(
            "UTF-16 with a byte-order mark is text to a user's own file's reader (Excel's Unicode text)"
        )
    folder = write_dataset(tmp_path / "ds", layout, [GOOD])
    path = folder / name
    path.write_bytes(body)

    with pytest.raises(DataError) as err:
        read_folder("x", folder, layout, LAYOUT_SCALE[layout])

    assert str(err.value) == f"{path}: is not a text file (it holds NUL bytes)"


@pytest.mark.parametrize("layout", ["csv", "100k", "dat"])
@pytest.mark.parametrize(
    ("at", "message"),
    [
        # Not UTF-8 from the start: read as Latin-1, as a user's own file is, and the bad id named.
        ("start", "item id '1\u00e9\u00ff0' on line {line} is not a non-negative integer"),
        ("past the first 64 KiB", "line {line} is not UTF-8 text, though the file's first 64 KB are"),
    ],
)
def test_undecodable_own_reader_ratings_file_names_the_line(
    tmp_path: Path, layout: str, at: str, message: str
) -> None:
    folder = write_dataset(tmp_path / "ds", layout, [GOOD])
    path = folder / RATINGS_FILE[layout]
    good = ratings_text(layout, [GOOD]).encode()
    padding = ratings_text(layout, [GOOD] * 5_000).encode().removeprefix(good) if at != "start" else b""
    sep = SEPARATOR[layout].encode()
    path.write_bytes(good + padding + sep.join([b"2", b"1\xe9\xff0", b"4", b"1000000002"]) + b"\n")
    header = 1 if layout == "csv" else 0
    line = header + 2 + (5_000 - 1 if at != "start" else 0)

    with pytest.raises(DataError, match=message.format(line=line)) as err:
        read_folder("x", folder, layout, LAYOUT_SCALE[layout])
    assert str(err.value).startswith(f"{path}: ") and str(err.value).isprintable()


def test_wrong_csv_header_is_echoed_short_and_printable(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "ds", "csv", [GOOD])
    path = folder / "ratings.csv"
    path.write_text("\x1b[2J\x07user" + "x" * 500 + "\n1,10,4,1000000001\n")

    with pytest.raises(DataError, match="does not split its first line") as err:
        read_folder("x", folder, "csv", (0.5, 5))

    message = str(err.value)
    assert message.isprintable() and "\x1b" not in message
    assert len(message) < len(str(path)) + 150
    assert r"'\x1b[2J\x07userxxx" in message


# ---------------------------------------------------------------------------------------------
# Rated items the item file does not name
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["100k", "dat", "csv"])
def test_rated_items_without_an_entry_warn_and_show_their_id(tmp_path: Path, layout: str) -> None:
    rows = [*WHOLE_RATINGS, (3, 40, 2, 1_000_000_003), (3, 50, 2, 1_000_000_004), (4, 40, 1, 1_000_000_005)]
    folder = write_dataset(tmp_path / "ds", layout, rows)
    items_file = {"100k": "u.item", "dat": "movies.dat", "csv": "movies.csv"}[layout]

    with pytest.warns(UserWarning) as record:
        ds = read_folder("x", folder, layout, (1, 5))

    assert [str(w.message) for w in record] == [
        f"{folder / items_file}: no entry for 2 rated item ids, e.g. 40 (titles shown as their raw id)"
    ]
    titles = ds.titles(np.array([40, 10, 50, 40])).tolist()
    assert titles == ["[item 40]", ds.items["title"].iloc[0], "[item 50]", "[item 40]"]


def test_every_rated_item_named_no_warning(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    read_folder("x", write_dataset(tmp_path / "ds", "csv", HALF_RATINGS), "csv", (0.5, 5))
    assert not recwarn.list


# ---------------------------------------------------------------------------------------------
# Where a copy is found: data_dir, $RECSYS_DATA, the cache
# ---------------------------------------------------------------------------------------------


def tagged_copy(root: Path, user: int) -> Path:
    """An ml-100k folder under `root` whose single rating is by `user`, to tell copies apart."""
    return write_dataset(root / "ml-100k", "100k", [(user, 10, 3, 1_000_000_000)])


@pytest.fixture
def three_copies(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    copies = {
        "explicit": tagged_copy(tmp_path / "explicit", 101),
        "data_root": tagged_copy(tmp_path / "data_root", 202),
        "cache": tagged_copy(isolated_cache, 303),
    }
    monkeypatch.setenv("RECSYS_DATA", str(tmp_path / "data_root"))
    return copies


def only_user(name: str = "ml-100k", **kwargs: object) -> int:
    ds = load_movielens(name, allow_download=False, **kwargs)  # type: ignore[arg-type]
    assert len(ds.ratings) == 1
    return int(ds.ratings["user"].iloc[0])


def test_data_root_comes_before_the_cache(three_copies: dict[str, Path]) -> None:
    assert only_user() == 202
    assert load_movielens("ml-100k", allow_download=False).folder == three_copies["data_root"]


def test_cache_is_used_without_data_root(
    three_copies: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RECSYS_DATA")
    assert only_user() == 303


def test_data_root_without_the_variant_falls_back_to_the_cache(
    three_copies: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty_root"
    empty.mkdir()
    monkeypatch.setenv("RECSYS_DATA", str(empty))
    assert only_user() == 303


def test_a_damaged_copy_in_the_data_root_is_named_not_passed_over(three_copies: dict[str, Path]) -> None:
    # Passed over, the cache's copy (or a download, or synthetic data) would be read instead.
    (three_copies["data_root"] / "u.data").unlink()
    with pytest.raises(
        DataError, match=r"data_root/ml-100k \(in \$RECSYS_DATA\) is a folder without its u.data"
    ):
        load_movielens("ml-100k", allow_download=False)


@pytest.mark.parametrize("point_at", ["folder", "parent", "text"])
def test_explicit_data_dir_wins(three_copies: dict[str, Path], point_at: str) -> None:
    folder = three_copies["explicit"]
    given = {"folder": folder, "parent": folder.parent, "text": str(folder)}[point_at]  # text: a notebook's
    assert only_user(data_dir=given) == 101


def test_empty_data_dir_mentions_the_setting(tmp_path: Path, three_copies: dict[str, Path]) -> None:
    # A usable copy elsewhere must not hide a wrong --data-dir.
    empty = tmp_path / "nothing_here"
    empty.mkdir()
    with pytest.raises(DataError, match="`data_dir`") as err:
        load_movielens("ml-100k", data_dir=empty)
    assert str(empty) in str(err.value) and "u.data" in str(err.value)


@pytest.mark.parametrize("content", [b"PK\x03\x04 cut short", b"<html>not found</html>"])
def test_a_data_dir_that_is_a_damaged_zip_is_named_as_one(tmp_path: Path, content: bytes) -> None:
    archive = tmp_path / "ml-100k.zip"
    archive.write_bytes(content)
    with pytest.raises(DataError, match=r"`data_dir` .*ml-100k\.zip: a file, but no readable zip"):
        load_movielens("ml-100k", data_dir=archive)


def test_data_dir_of_another_variant_is_not_usable(tmp_path: Path, no_data_root: None) -> None:
    folder = write_dataset(tmp_path / "ml-1m", "dat", WHOLE_RATINGS)
    with pytest.raises(DataError, match="`data_dir`"):
        load_movielens("ml-100k", data_dir=folder)


def test_nothing_local_and_no_download(no_data_root: None, isolated_cache: Path) -> None:
    with pytest.raises(DataError, match="not available locally") as err:
        load_movielens("ml-100k", allow_download=False)
    assert "`data_dir`" in str(err.value) and "RECSYS_DATA" in str(err.value)
    assert listing(isolated_cache) == []


def test_unset_cache_env_uses_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECSYS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "xdg" / "recsys"


def test_a_tilde_in_the_cache_or_data_root_variable_is_the_home_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: set where no shell expands it (quoted, a .env file, a service), `~` was a folder of
    that name in the working folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RECSYS_CACHE", "~/cache")
    monkeypatch.setenv("RECSYS_DATA", "~/data")
    (tmp_path / "data").mkdir()
    assert cache.cache_root() == tmp_path / "cache"
    assert cache._data_roots() == [tmp_path / "data"]


# ---------------------------------------------------------------------------------------------
# A local zip as data_dir
# ---------------------------------------------------------------------------------------------


def archive_of(folder: Path, rows: list[tuple], prefix: str = "ml-100k") -> Path:
    """A zip of an ml-100k dataset holding `rows`, written as `folder`/ml-100k.zip."""
    source = write_dataset(folder / "src" / "ml-100k", "100k", rows)
    archive = folder / "ml-100k.zip"
    archive.write_bytes(folder_as_zip(source, prefix))
    return archive


def unpacked_at(cache: Path, archive: Path) -> Path:
    """Where a user's `archive` is unpacked: a cache folder named by its content."""
    return cache / "archives" / hashlib.sha256(archive.read_bytes()).hexdigest()[:16] / "ml-100k"


def test_local_zip_is_unpacked_into_the_cache(
    tmp_path: Path, isolated_cache: Path, no_data_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = archive_of(tmp_path, WHOLE_RATINGS)
    data = archive.read_bytes()
    with zipfile.ZipFile(archive) as zf:
        assert sorted(zf.namelist()) == ["ml-100k/u.data", "ml-100k/u.genre", "ml-100k/u.item"]
    folder = unpacked_at(isolated_cache, archive)

    with pytest.warns(UserWarning) as record:
        ds = load_movielens("ml-100k", data_dir=archive, allow_download=False)

    assert [str(w.message) for w in record] == [f"ml-100k: read {folder} (unpacked from {archive})"]
    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(WHOLE_RATINGS))
    assert ds.items["title"].iloc[0] == "Café Lumière (1993)"
    assert ds.folder == folder
    assert listing(isolated_cache) == ["archives"]
    assert listing(folder.parent) == ["ml-100k"]  # no staging folder left behind
    assert listing(folder) == [MANIFEST, "u.data", "u.genre", "u.item"]
    assert archive.read_bytes() == data  # the user's zip is left as it was

    # The same zip again reads the copy unpacked before.
    monkeypatch.setattr(cache, "extract_zip", None)
    with pytest.warns(UserWarning, match="unpacked from"):
        again = load_movielens("ml-100k", data_dir=archive, allow_download=False)
    assert again.folder == folder
    pd.testing.assert_frame_equal(again.ratings, ds.ratings)

    # Without --data-dir the copy is not taken for the dataset: another zip may have been meant.
    with pytest.raises(DataError, match="not available locally"):
        load_movielens("ml-100k", allow_download=False)


@pytest.mark.parametrize("damage", ["cut", "gone"])
def test_a_copy_damaged_after_it_was_unpacked_is_named_not_read(
    tmp_path: Path, isolated_cache: Path, no_data_root: None, damage: str
) -> None:
    archive = archive_of(tmp_path, WHOLE_RATINGS)
    with pytest.warns(UserWarning, match="unpacked from"):
        folder = load_movielens("ml-100k", data_dir=archive, allow_download=False).folder
    assert folder is not None
    ratings = folder / "u.item"
    if damage == "cut":  # a disk error, an interrupted copy: the file still parses, shorter
        ratings.write_bytes(ratings.read_bytes()[: len(ratings.read_bytes()) // 2])
    else:
        ratings.unlink()
    state = "is missing" if damage == "gone" else "has .* bytes, not the .* unpacked"
    with pytest.raises(DataError, match=rf"u\.item {state}: the copy in .* is damaged; delete that folder"):
        load_movielens("ml-100k", data_dir=archive, allow_download=False)


def test_a_file_where_the_copy_would_go_is_refused_and_kept(
    tmp_path: Path, isolated_cache: Path, no_data_root: None
) -> None:
    archive = archive_of(tmp_path, WHOLE_RATINGS)
    where = unpacked_at(isolated_cache, archive)
    where.parent.mkdir(parents=True)
    where.write_text("mine\n")
    with pytest.raises(DataError, match=r"ml-100k is not a folder holding u\.data"):
        load_movielens("ml-100k", data_dir=archive, allow_download=False)
    assert where.read_text() == "mine\n" and listing(where.parent) == ["ml-100k"]


def test_folders_that_killed_processes_left_in_the_cache_are_cleared(
    tmp_path: Path, isolated_cache: Path, no_data_root: None
) -> None:
    archive = archive_of(tmp_path, WHOLE_RATINGS)
    root = unpacked_at(isolated_cache, archive).parent
    old, recent = root / ".ml-100k.x1.unpacking", root / ".ml-100k.x2.unpacking"
    for folder in (old, recent):
        (folder / "archive").mkdir(parents=True)
    long_ago = time.time() - cache.STALE_SECONDS - 60
    os.utime(old, (long_ago, long_ago))
    with pytest.warns(UserWarning, match="unpacked from"):
        load_movielens("ml-100k", data_dir=archive, allow_download=False)
    assert not old.exists() and recent.exists()  # a day-old one is dead; a recent one may be running


def test_a_different_zip_of_the_same_dataset_is_read(
    tmp_path: Path, isolated_cache: Path, no_data_root: None
) -> None:
    first = archive_of(tmp_path / "first", [(101, 10, 3, 1_000_000_000)])
    second = archive_of(tmp_path / "second", [(202, 10, 3, 1_000_000_000)])

    with pytest.warns(UserWarning, match="unpacked from"):
        assert only_user(data_dir=first) == 101
        assert only_user(data_dir=second) == 202
        assert only_user(data_dir=first) == 101

    assert sorted(listing(isolated_cache / "archives")) == sorted(
        unpacked_at(isolated_cache, a).parent.name for a in (first, second)
    )


def test_local_zip_without_the_variant_folder(
    tmp_path: Path, isolated_cache: Path, no_data_root: None
) -> None:
    archive = archive_of(tmp_path, WHOLE_RATINGS, prefix="something-else")

    with pytest.raises(DataError, match=r"no ml-100k/u\.data inside") as err:
        load_movielens("ml-100k", data_dir=archive)
    assert str(archive) in str(err.value)
    assert listing(isolated_cache / "archives") == []  # not even an empty folder for it


def test_local_zip_over_a_stale_cache_folder(
    tmp_path: Path, isolated_cache: Path, no_data_root: None
) -> None:
    archive = archive_of(tmp_path, WHOLE_RATINGS)
    # An earlier, interrupted or hand-made copy: the folder is there but u.data is not.
    stale = unpacked_at(isolated_cache, archive)
    stale.mkdir(parents=True)
    (stale / "notes.txt").write_text("left over\n")

    # Copies are renamed into place whole, so this folder is not one recsys made: it is kept, and named.
    with pytest.raises(
        DataError,
        match=r"ml-100k is a folder without its u\.data, not a whole copy, and recsys replaces nothing",
    ):
        load_movielens("ml-100k", data_dir=archive, allow_download=False)
    assert listing(stale) == ["notes.txt"]
    assert listing(stale.parent) == ["ml-100k"]  # and the unpacked copy's staging folder is gone


def test_a_full_disk_as_the_copy_is_unpacked_is_one_error_and_leaves_nothing(
    tmp_path: Path, isolated_cache: Path, no_data_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the unpacked files filling the disk, the manifest written beside them was an
    OSError traceback."""
    archive = archive_of(tmp_path, WHOLE_RATINGS)
    write_text = Path.write_text

    def full_at_the_manifest(path: Path, *args: object, **kwargs: object) -> int:
        if path.name == MANIFEST:
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_text(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", full_at_the_manifest)
    root = unpacked_at(isolated_cache, archive).parent
    with pytest.raises(DataError) as caught:
        load_movielens("ml-100k", data_dir=archive, allow_download=False)
    assert str(caught.value) == f"cannot write the dataset cache {root}: No space left on device"
    assert not root.exists()  # nor its staging folder


def test_unpack_that_loses_the_race_reads_the_winners_copy(
    tmp_path: Path, isolated_cache: Path, no_data_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = archive_of(tmp_path, WHOLE_RATINGS)
    final = unpacked_at(isolated_cache, archive)
    extract_zip = cache.extract_zip

    def extract_while_another_process_finishes(source: Path, target: Path) -> Path:
        unpacked = extract_zip(source, target)
        shutil.copytree(unpacked / "ml-100k", final)
        (final / "winner").touch()
        return unpacked

    monkeypatch.setattr(cache, "extract_zip", extract_while_another_process_finishes)
    with pytest.warns(UserWarning, match="unpacked from"):
        ds = load_movielens("ml-100k", data_dir=archive, allow_download=False)

    assert ds.folder == final and (final / "winner").exists()
    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(WHOLE_RATINGS))
    assert listing(final.parent) == ["ml-100k"]  # this process's own copy is gone


def test_a_copy_moved_in_while_this_process_looks_is_used(
    tmp_path: Path, isolated_cache: Path, no_data_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: looking for the ratings file before the folder, a copy another process moved in
    between the two looks was refused as not recsys' own."""
    archive = archive_of(tmp_path, WHOLE_RATINGS)
    final = unpacked_at(isolated_cache, archive)
    real_lexists = os.path.lexists

    def another_process_finishes_first(path: str | os.PathLike[str]) -> bool:
        if Path(path) == final and not real_lexists(final):
            monkeypatch.setattr(cache.os.path, "lexists", real_lexists)
            cache._unpack(archive, VARIANTS["ml-100k"], final.parent)  # the other process's copy
        return real_lexists(path)

    monkeypatch.setattr(cache.os.path, "lexists", another_process_finishes_first)
    with pytest.warns(UserWarning, match="unpacked from"):
        ds = load_movielens("ml-100k", data_dir=archive, allow_download=False)
    assert ds.folder == final
    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(WHOLE_RATINGS))


# Waits for a go file, so that both processes unpack at the same moment, then prints what it read.
CHILD = """
import sys, time
from pathlib import Path
from recsys.data.movielens import load_movielens
ready, go, archive = map(Path, sys.argv[1:])
ready.touch()
while not go.exists():
    time.sleep(0.001)
ds = load_movielens("ml-100k", data_dir=archive, allow_download=False)
print(ds.folder, ds.ratings.to_numpy().tolist(), ds.items.to_numpy().tolist())
"""


def run_together(archive: Path, cache: Path, work: Path, n: int = 2) -> list[tuple[int, str, str]]:
    """Start `n` processes that load `archive` into `cache` at one moment; their codes and output."""
    env = {**os.environ, "RECSYS_CACHE": str(cache), "PYTHONWARNINGS": "ignore"}
    ready = [work / f"ready{i}" for i in range(n)]
    go = work / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(r), str(go), str(archive)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for r in ready
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in ready) and time.monotonic() < deadline:
            if any(child.poll() is not None for child in children):
                break  # one died while starting: its output says why
            time.sleep(0.005)
        go.touch()
        outputs = [child.communicate(timeout=120) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return [(child.returncode, out, err) for child, (out, err) in zip(children, outputs, strict=True)]


@pytest.mark.slow
def test_two_processes_unpack_one_zip_at_once(tmp_path: Path, no_data_root: None) -> None:
    archive = archive_of(tmp_path, [(u, 10 * (1 + u % 3), 1 + u % 5, 1_000_000_000 + u) for u in range(3000)])
    for round in range(6):
        work = tmp_path / f"round{round}"
        work.mkdir()
        results = run_together(archive, work / "cache", work)

        for code, _, err in results:
            assert code == 0, err
        assert results[0][1] == results[1][1]
        assert results[0][1].startswith(str(unpacked_at(work / "cache", archive)) + " ")
        assert listing(unpacked_at(work / "cache", archive).parent) == ["ml-100k"]


# ---------------------------------------------------------------------------------------------
# Download end to end from a local server
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def latest_small_zip(tmp_path: Path, served: Served) -> bytes:
    source = write_dataset(tmp_path / "build" / "ml-latest-small", "csv", HALF_RATINGS)
    data = folder_as_zip(source, "ml-latest-small")
    (served.root / "ml-latest-small.zip").write_bytes(data)
    return data


def pin(monkeypatch: pytest.MonkeyPatch, data: bytes, sha256: str | None = None) -> None:
    variant = dataclasses.replace(
        VARIANTS["ml-latest-small"], size=len(data), sha256=sha256 or hashlib.sha256(data).hexdigest()
    )
    monkeypatch.setitem(VARIANTS, "ml-latest-small", variant)


@pytest.mark.parametrize("damage", ["ratings gone", "manifest garbled"])
def test_a_downloaded_copy_damaged_since_is_named_before_any_download(
    served: Served,
    latest_small_zip: bytes,
    isolated_cache: Path,
    no_data_root: None,
    monkeypatch: pytest.MonkeyPatch,
    damage: str,
) -> None:
    """Regression: a copy that lost its ratings file was fetched again on every run, then refused."""
    pin(monkeypatch, latest_small_zip)
    load_movielens("ml-latest-small", base_url=served.base, allow_http=True, progress=False)
    copy = isolated_cache / "ml-latest-small"
    if damage == "ratings gone":
        (copy / "ratings.csv").unlink()
        expected = r"ratings\.csv is missing: the copy in .* is damaged; delete that folder"
    else:
        (copy / MANIFEST).write_text('{"ratings.csv": null}')
        expected = rf"its {re.escape(MANIFEST)} is damaged; delete the folder"
    for _ in range(2):
        with pytest.raises(DataError, match=expected):
            load_movielens("ml-latest-small", base_url=served.base, allow_http=True, progress=False)
    assert served.requests == ["/ml-latest-small.zip"]  # the first download only


def test_download_verifies_unpacks_and_caches(
    served: Served,
    latest_small_zip: bytes,
    isolated_cache: Path,
    no_data_root: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pin(monkeypatch, latest_small_zip)

    ds = load_movielens("ml-latest-small", base_url=served.base, allow_http=True, progress=False)

    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(HALF_RATINGS))
    assert ds.items["title"].tolist()[0] == "Lighthouse, The (1995)"
    assert ds.folder == isolated_cache / "ml-latest-small"
    assert served.requests == ["/ml-latest-small.zip"]
    # Only the unpacked folder stays: no zip, no .part file, no staging folder.
    assert listing(isolated_cache) == ["ml-latest-small"]
    assert listing(isolated_cache / "ml-latest-small") == [MANIFEST, "movies.csv", "ratings.csv"]

    again = load_movielens("ml-latest-small", base_url=served.base, allow_http=True, progress=False)

    assert served.requests == ["/ml-latest-small.zip"]  # served from the cache, no new request
    pd.testing.assert_frame_equal(again.ratings, ds.ratings)


def test_download_with_wrong_sha256_caches_nothing(
    served: Served,
    latest_small_zip: bytes,
    isolated_cache: Path,
    no_data_root: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pin(monkeypatch, latest_small_zip, sha256="0" * 64)

    with pytest.raises(DownloadError, match="sha256"):
        load_movielens("ml-latest-small", base_url=served.base, allow_http=True, progress=False)

    assert served.requests == ["/ml-latest-small.zip"]
    assert listing(isolated_cache) == []


def test_download_of_a_zip_without_the_folder_leaves_nothing(
    served: Served, tmp_path: Path, isolated_cache: Path, no_data_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_dataset(tmp_path / "build" / "other", "csv", HALF_RATINGS)
    data = folder_as_zip(source, "other")
    (served.root / "ml-latest-small.zip").write_bytes(data)
    pin(monkeypatch, data)  # verifies fine, but holds no ml-latest-small/ folder

    with pytest.raises(DataError, match=r"no ml-latest-small/ratings\.csv inside"):
        load_movielens("ml-latest-small", base_url=served.base, allow_http=True, progress=False)

    assert listing(isolated_cache) == []


def test_download_over_http_needs_opt_in(
    served: Served,
    latest_small_zip: bytes,
    isolated_cache: Path,
    no_data_root: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pin(monkeypatch, latest_small_zip)

    with pytest.raises(DownloadError, match="allow_http"):
        load_movielens("ml-latest-small", base_url=served.base, progress=False)

    assert served.requests == []
    assert listing(isolated_cache) == []


def test_no_download_when_not_allowed(
    served: Served,
    latest_small_zip: bytes,
    isolated_cache: Path,
    no_data_root: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pin(monkeypatch, latest_small_zip)

    with pytest.raises(DataError, match="not available locally"):
        load_movielens("ml-latest-small", base_url=served.base, allow_http=True, allow_download=False)

    assert served.requests == []


OFFLINE_HINT = "; to train without a download, pass `data_dir` or set $RECSYS_DATA to a local copy"


def closed_port_url() -> str:
    """An http url on 127.0.0.1 where nothing listens, so connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("failure", ["404", "cannot reach", "wrong sha256"])
def test_download_failure_names_the_offline_way_out(
    served: Served,
    latest_small_zip: bytes,
    isolated_cache: Path,
    no_data_root: None,
    monkeypatch: pytest.MonkeyPatch,
    failure: str,
) -> None:
    pin(monkeypatch, latest_small_zip, sha256="0" * 64 if failure == "wrong sha256" else None)
    base = {"404": f"{served.base}/missing", "cannot reach": closed_port_url()}.get(failure, served.base)

    with pytest.raises(DownloadError) as err:
        load_movielens("ml-latest-small", base_url=base, allow_http=True, progress=False)

    message = str(err.value)
    assert failure.removeprefix("wrong ") in message
    assert message.endswith(OFFLINE_HINT) and "\n" not in message
    assert listing(isolated_cache) == []


def test_not_available_locally_names_the_offline_way_out(no_data_root: None) -> None:
    with pytest.raises(DataError) as err:
        load_movielens("ml-100k", allow_download=False)
    assert str(err.value) == "ml-100k is not available locally" + OFFLINE_HINT


def test_an_unwritable_cache_is_one_line_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache should be\n")
    monkeypatch.setenv("RECSYS_CACHE", str(blocker / "recsys"))
    monkeypatch.delenv("RECSYS_DATA", raising=False)
    with pytest.raises(DataError, match=r"cannot write the dataset cache .*RECSYS_CACHE") as error:
        load_movielens("ml-100k", base_url="http://127.0.0.1:9", allow_http=True, progress=False)
    assert "\n" not in str(error.value)


def test_a_data_root_that_is_not_a_folder_is_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECSYS_DATA", "../no-such-data")
    warned = pytest.warns(UserWarning, match=r"RECSYS_DATA=\.\./no-such-data is not a folder .*absolute")
    with warned, pytest.raises(DataError, match="not available locally"):
        load_movielens("ml-100k", allow_download=False)


# ---------------------------------------------------------------------------------------------
# The real ml-100k (skips when absent)
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_ml100k(ml100k_folder: Path) -> None:
    ds = load_movielens("ml-100k", data_dir=ml100k_folder, allow_download=False)

    ratings = ds.ratings
    check_dtypes(ratings)
    assert len(ratings) == 100_000
    assert ratings["user"].nunique() == 943
    assert ratings["item"].nunique() == 1682
    assert ratings["rating"].between(1, 5).all()
    assert set(ratings["rating"].unique()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert ratings.iloc[0].tolist() == [196, 242, 3.0, 881250949]
    assert len(ds.items) == 1682
    assert ds.items["item"].is_unique
    assert set(ds.items["item"]) == set(ratings["item"])
    assert ds.items["title"].notna().all() and (ds.items["title"].str.len() > 0).all()
    assert ds.folder == ml100k_folder


def test_an_items_tags_are_its_side_features_lowercased_once_and_shared(tmp_path: Path) -> None:
    """tags.csv: each item's tags, lowercased and each once; a tag given to one item alone (its id
    again) is left out, and a "|" inside a tag cannot split it."""
    from recsys.data.features import item_features_of
    from recsys.data.movielens import read_tags

    (tmp_path / "tags.csv").write_text(
        "userId,movieId,tag,timestamp\n1,10,Funny,1\n2,10,funny ,2\n1,20,funny,3\n3,20,dark|noir,4\n"
        '4,30,"dark|noir",5\n5,30,only here,6\n'
    )
    tags = read_tags(tmp_path, "csv")
    assert tags is not None
    assert tags.to_dict() == {10: "funny", 20: "dark noir|funny", 30: "dark noir"}
    items = pd.DataFrame({"item": [10, 20, 30, 40], "title": ["A (1990)"] * 4, "genres": ["Drama"] * 4})
    features = item_features_of(items, tags)
    assert (
        features is not None
        and features.loc[40, "tags"] == ""
        and features.loc[20, "tags"] == "dark noir|funny"
    )
    assert read_tags(tmp_path / "none", "csv") is None and read_tags(tmp_path, "100k") is None
    (tmp_path / "tags.csv").write_text("userId,movieId,tag,timestamp\n1,10,a,1\n2,10,b,2,extra\n")
    with pytest.raises(DataError, match=r"tags.csv: cannot read it as CSV \(.*saw 5\)$") as raised:
        read_tags(tmp_path, "csv")
    assert "\n" not in str(raised.value)  # one line, as the command prints it


def test_ml_10m_tags_dat_is_read_and_a_bad_line_named(tmp_path: Path) -> None:
    from recsys.data.movielens import read_tags

    (tmp_path / "tags.dat").write_text("1::5::Space::1\n\n2::6::space::2\n3::6::war::3\n")
    tags = read_tags(tmp_path, "dat")
    assert tags is not None and tags.to_dict() == {5: "space", 6: "space"}
    (tmp_path / "tags.dat").write_text("1::5::Space::1\n2::x5::space::2\n")
    with pytest.raises(DataError, match=r"tags.dat: item id 'x5' on line 2 is not a MovieLens id"):
        read_tags(tmp_path, "dat")
    (tmp_path / "tags.dat").write_text("1::5::Space::1\n2-6-space\n")
    with pytest.raises(DataError, match=r"tags.dat: line 2 is not UserID::MovieID::Tag::Timestamp"):
        read_tags(tmp_path, "dat")


def _with_item_line(tmp_path: Path, layout: str, line: str) -> Path:
    """A copy of the dataset of `layout` whose item file (u.item or movies.dat) ends in `line`."""
    folder = write_dataset(tmp_path / "copy", layout, WHOLE_RATINGS)
    with (folder / ("u.item" if layout == "100k" else "movies.dat")).open("a", encoding="latin-1") as file:
        file.write(line + "\n")
    return folder


@pytest.mark.parametrize(
    ("layout", "repeat"),
    [
        ("100k", "20|Another Title (2001)|01-Jan-2001||http://x|" + "|".join("0" * 19)),
        ("dat", "20::Another (2001)::Horror"),
    ],
)
def test_an_item_listed_twice_keeps_its_first_entry_with_a_warning(
    layout: str, repeat: str, tmp_path: Path
) -> None:
    # As a CSV item file's repeats are: two rows of one id would give it two titles and two genre sets.
    folder = _with_item_line(tmp_path, layout, repeat)
    name = "u.item" if layout == "100k" else "movies.dat"
    with pytest.warns(
        UserWarning, match=rf"{name}: 1 item entry repeats an id named before, the first 20 on line 4"
    ):
        items = read_items(folder, layout)
    assert items["item"].tolist() == [10, 20, 30] and "Another" not in items["title"].iloc[1]


@pytest.mark.parametrize(
    ("layout", "line"),
    [
        ("100k", "40| |01-Jan-2001||http://x|" + "|".join("0" * 19)),
        ("dat", "40::::Horror"),
    ],
)
def test_an_untitled_movielens_item_reads_as_missing_as_an_item_table_s_does(
    layout: str, line: str, tmp_path: Path
) -> None:
    # Missing, so that lists show it as "[item 40]", not as a blank; movies.dat's genres are after its
    # last "::", whatever the title holds.
    items = read_items(_with_item_line(tmp_path, layout, line), layout).set_index("item")
    assert pd.isna(items.at[40, "title"]) and items["title"].drop(40).notna().all()
    if layout == "dat":
        assert items.at[40, "genres"] == "Horror"


def test_a_movies_dat_title_holding_the_separator_keeps_its_genres(tmp_path: Path) -> None:
    folder = _with_item_line(tmp_path, "dat", "40::::Made Up: Part 2 (1995)::Comedy|Drama")
    items = read_items(folder, "dat").set_index("item")
    assert items.at[40, "genres"] == "Comedy|Drama"
    assert items.at[40, "title"] == "::Made Up: Part 2 (1995)"
