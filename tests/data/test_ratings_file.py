"""recsys.data.ratings_file and ratings_table: a user's own ratings, from files of every common shape
and from DataFrames, checked as the MovieLens files are."""

import bz2
import gzip
import lzma
import math
import re
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys.data import ratings_file
from recsys.data.catalog import dataset_from_record, relocated
from recsys.data.dataset import RatingsDataset, describe_scale
from recsys.data.ratings_file import load_ratings
from recsys.data.ratings_table import data_name, rating_step
from recsys.errors import DataError

ROWS = [
    ("ann", "978-1", 8, 100),
    ("bob", "978-1", 6, 101),
    ("ann", "978-2", 10, 102),
    ("cy", "978-3", 2, 103),
]
HEADER = "user,item,rating,timestamp"


def text(rows: Sequence[tuple[object, ...]], sep: str = ",", header: str | None = HEADER) -> str:
    lines = ([header.replace(",", sep)] if header else []) + [sep.join(map(str, row)) for row in rows]
    return "\n".join(lines) + "\n"


def write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as stream:
        stream.write(data)
    return sink.getvalue().to_pybytes()


def expected_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "user": ["ann", "bob", "ann", "cy"],
            "item": ["978-1", "978-1", "978-2", "978-3"],
            "rating": np.array([8, 6, 10, 2], dtype=np.float32),
            "timestamp": [100, 101, 102, 103],
        }
    )


def same_table(loaded: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(loaded.columns) == ["user", "item", "rating", "timestamp"]
    for column in loaded.columns:
        assert loaded[column].tolist() == expected[column].tolist(), column
    assert loaded["rating"].dtype == np.float32 and loaded["timestamp"].dtype == np.int64


@pytest.mark.parametrize(
    ("name", "packed"),
    [
        ("plain.csv", lambda b: b),
        ("gz.csv.gz", gzip.compress),
        ("bz.csv.bz2", bz2.compress),
        ("xz.csv.xz", lzma.compress),
        ("zst.csv.zst", zstd),
        ("no-suffix", gzip.compress),  # told by its first bytes, not its name
    ],
)
def test_every_compression_reads_the_same_table(name: str, packed: object, tmp_path: Path) -> None:
    path = write(tmp_path / name, packed(text(ROWS).encode()))  # type: ignore[operator]
    dataset = load_ratings(path)
    same_table(dataset.ratings, expected_table())
    assert dataset.rating_scale == (2.0, 10.0)
    assert dataset.origin == {"ratings": str(path.resolve())}


@pytest.mark.parametrize("sep", ["\t", ",", ";", "|", " "])
@pytest.mark.parametrize("header", [True, False])
def test_separators_with_and_without_a_header(sep: str, header: bool, tmp_path: Path) -> None:
    content = text(ROWS, sep, "user,item,rating,timestamp" if header else None)
    same_table(load_ratings(write(tmp_path / "r.txt", content)).ratings, expected_table())


@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
def test_columns_aligned_by_runs_of_spaces_read_as_one_separator(line_end: str, tmp_path: Path) -> None:
    # A printed DataFrame (or `column -t`): fields padded to line up, numbers right-aligned.
    lines = [f"{'user':>5}  {'item':<7} {'rating':>7}   timestamp  "]
    lines += [f"{user:>5}  {item:<7} {rating:>7}   {time}  " for user, item, rating, time in ROWS]
    path = write(tmp_path / "r.txt", line_end.join(lines) + line_end)
    same_table(load_ratings(path).ratings, expected_table())
    bad = write(tmp_path / "bad.txt", line_end.join([*lines, "   dee  978-4        x   104"]) + line_end)
    with pytest.raises(DataError, match="rating 'x' on line 6 is not a number"):
        load_ratings(bad)
    # One line of another width in a short file: still aligned, and that line named.
    odd = write(tmp_path / "odd.txt", line_end.join([*lines[:3], lines[3] + " 7", *lines[4:]]) + line_end)
    with pytest.raises(DataError, match="line 4 has 5 fields; expected 4, separated by runs of spaces"):
        load_ratings(odd)


def test_parquet_reads_the_same_table_and_keeps_its_types(tmp_path: Path) -> None:
    frame = pd.DataFrame(ROWS, columns=["user_id", "book_id", "score", "time"])
    frame.to_parquet(tmp_path / "r.parquet")
    same_table(load_ratings(tmp_path / "r.parquet").ratings, expected_table())
    numeric = pd.DataFrame({"userId": [1, 2], "movieId": [5, 6], "rating": [1.5, 4.0]})
    numeric = numeric.astype({"userId": "int32"})
    numeric.to_parquet(tmp_path / "n.parquet")
    loaded = load_ratings(tmp_path / "n.parquet").ratings
    assert loaded["user"].dtype == np.int64 and loaded["timestamp"].tolist() == [0, 1]  # row order


@pytest.mark.parametrize(
    ("header", "columns"),
    [
        ("userId,movieId,rating,timestamp", None),
        ("user_id,book_id,score,ts", None),
        ('"User-ID";"ISBN";"Book-Rating";"Date"', None),
        ("a,b,c,d", {"user": "a", "item": "b", "rating": "c", "timestamp": "d"}),
        ("when,stars,isbn,reader", None),  # found by name in any order
    ],
)
def test_columns_found_by_their_usual_names_or_given(
    header: str, columns: dict[str, str] | None, tmp_path: Path
) -> None:
    sep = ";" if ";" in header else ","
    names = [name.strip('"') for name in header.split(sep)]
    positions = {"when": 3, "stars": 2, "isbn": 1, "reader": 0}
    order = [positions[n] for n in names] if names[0] == "when" else [0, 1, 2, 3]
    rows = [tuple(row[i] for i in order) for row in ROWS]
    path = write(tmp_path / "r.csv", text(rows, sep, header.replace(sep, ",")))
    same_table(load_ratings(path, columns=columns).ratings, expected_table())


def test_columns_by_position_in_a_file_without_a_header(tmp_path: Path) -> None:
    rows = [(t, "x", u, i, r) for u, i, r, t in ROWS]
    path = write(tmp_path / "r.csv", text(rows, header=None))
    with pytest.raises(DataError, match=r"5 columns and no header; .*`columns` user=1"):
        load_ratings(path)
    columns = {"user": "3", "item": "4", "rating": "5", "timestamp": "1"}
    same_table(load_ratings(path, columns=columns).ratings, expected_table())


def test_integer_ids_are_integers_and_others_text(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", "u,i,r\n1,17,3\n2,8,4\n")
    ratings = load_ratings(path, columns={"user": "u", "item": "i", "rating": "r"}).ratings
    assert ratings["user"].dtype == np.int64 and ratings["item"].tolist() == [17, 8]
    # Digits with a leading zero are an id's spelling (an ISBN), not a number: the column stays text.
    isbns = write(tmp_path / "isbn.csv", "user,isbn,rating\n1,0345391802,3\n2,0806521210,4\n")
    assert load_ratings(isbns).ratings["item"].tolist() == ["0345391802", "0806521210"]
    frame = pd.DataFrame({"user": ["007", "7"], "item": ["1", "2"], "rating": [1.0, 2.0]})
    spelled = RatingsDataset.from_frame(frame).ratings
    assert spelled["user"].tolist() == ["007", "7"] and spelled["item"].tolist() == [1, 2]
    uuids = write(tmp_path / "u.csv", "user,item,rating\n0f8e-41,a,3\n77aa-02,b,4\n")
    assert load_ratings(uuids).ratings["user"].tolist() == ["0f8e-41", "77aa-02"]


def test_an_id_column_that_turns_to_text_past_the_inferred_rows_is_read_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ratings_file, "INFER_ROWS", 5)
    rows = [(u, u % 7, 1 + u % 5) for u in range(50)] + [("guest", 3, 4)]
    ratings = load_ratings(write(tmp_path / "r.csv", text(rows, header="user,item,rating"))).ratings
    assert ratings["user"].iloc[-1] == "guest" and ratings["user"].iloc[0] == "0"
    assert ratings["item"].dtype == np.int64  # the other columns keep their integers


def test_ratings_with_a_decimal_comma_are_read_as_decimals_with_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", "user;item;rating\n1;2;3,5\n2;3;4\n3;1;-0,5\n")
    with pytest.warns(
        UserWarning, match=r"r\.csv: 2 rating\(s\) written with a decimal comma.*'3,5' as 3\.5"
    ):
        ratings = load_ratings(path).ratings
    assert ratings["rating"].tolist() == [3.5, 4.0, -0.5]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("user,item,rating\n1,2,3\n\n2,3,x\n", "rating 'x' on line 4 is not a number"),
        ("user,item,rating\n1,2,3\n2,3,inf\n", "rating 'inf' on line 3 is infinite, or beyond 3.4e"),
        ("user,item,rating\n1,2,3\n2,3,1e300\n", "on line 3 is infinite, or beyond 3.4e"),
        (
            "user;item;rating\n1;2;3,5\n2;3;x\n",
            "rating 'x' on line 3 is not a number",
        ),  # past a decimal comma
        ("user,item,rating\n1,2,3\n2,3,\n", "missing rating on line 3"),
        ("user,item,rating\n1,2,3\n\n\n,3,4\n", "missing user id on line 5"),
        ("user,item,rating\n1,2,3\n2,3,4,5\n", "line 3 has 4 fields; expected 3"),
        ("user,item,rating,time\n1,2,3,5\n2,3,4,later\n", "timestamp 'later' on line 3 is not a time"),
        ("user,item,rating,time\n1,2,3,5\n2,3,4,\n", "missing timestamp on line 3"),
        ("user,item,rating\n1,2,3\n2,3,3\n", "every rating is 3"),
        ("reader,thing,rating\n1,2,3\n", "cannot tell which column holds the item ids"),
        ("", "file is empty"),
        ("\n\n", "file is empty"),
        ("user,item,rating\n", "no ratings in file"),
        ("1::2::3::4\n", "'::' .* `dataset` ml-1m"),
        ("one\ntwo\n", "cannot tell the separator"),
    ],
)
def test_bad_files_are_one_line_naming_the_file_and_line(content: str, expected: str, tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", content)
    with pytest.raises(DataError, match=expected) as error:
        load_ratings(path)
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\x1f\x8b\x08\x00garbage", "cannot"),
        (b"user,item,rating\n\x00\x01\x02", "NUL bytes"),
        (b"PAR1 not really parquet", "cannot read it as Parquet"),
        (b"PK\x03\x04\x14\x00\x00\x00", "is a zip archive; unpack it first"),
        # A quote left open before a tab: named by its line, not by polars' message quoting the file.
        (b'user,item,rating\n1,2,3\n"\t1,2,3\n', "line 3 opens a quote"),
    ],
)
def test_broken_binary_files_are_one_line(content: bytes, expected: str, tmp_path: Path) -> None:
    path = write(tmp_path / "r.bin", content)
    with pytest.raises(DataError, match=expected) as error:
        load_ratings(path)
    assert "\n" not in str(error.value) and str(error.value).isprintable()


def test_latin1_text_is_read(tmp_path: Path) -> None:
    content = '"User-ID";"ISBN";"Book-Rating"\n"1";"034545104X";"5"\n"Jos\xe9";"0155061224";"8"\n'
    ratings = load_ratings(write(tmp_path / "bx.csv", content.encode("latin-1"))).ratings
    assert ratings["user"].tolist() == ["1", "José"]
    assert ratings["item"].tolist() == ["034545104X", "0155061224"]


def test_a_given_scale_checks_every_rating_and_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", text(ROWS))
    assert load_ratings(path, rating_scale=(1, 10)).rating_scale == (1.0, 10.0)
    with pytest.raises(DataError, match="rating 8 on line 2 is outside `rating_scale` 1,5"):
        load_ratings(path, rating_scale=(1, 5))


@pytest.mark.parametrize(
    ("values", "step", "shown"),
    [
        ([1, 2, 3, 4, 5], 1.0, "1-5 in steps of 1"),
        ([0.5, 1.5, 5.0, 3.0], 0.5, "0.5-5 in steps of 0.5"),
        ([1, 10, 4, 7], 3.0, "1-10 in steps of 3"),
        ([0, 100, 35, 60], 5.0, "0-100 in steps of 5"),
        ([0.13, 0.5, 0.91], 0.01, "0.13-0.91 in steps of 0.01"),
        ([0.1234, 0.5, 0.9137], None, "0.1234-0.9137 continuous"),
    ],
)
def test_the_scale_and_its_step_are_read_from_the_data(
    values: list[float], step: float | None, shown: str, tmp_path: Path
) -> None:
    rows = [(user, 1, value) for user, value in enumerate(values)]
    dataset = load_ratings(write(tmp_path / "r.csv", text(rows, header="user,item,rating")))
    assert dataset.rating_scale == (pytest.approx(min(values)), pytest.approx(max(values)))
    assert rating_step(np.asarray(values, dtype=np.float32)) == (pytest.approx(step) if step else None)
    assert describe_scale(dataset).startswith(shown)


def test_duplicates_keep_the_latest_with_a_count(tmp_path: Path) -> None:
    rows = [*ROWS, ("ann", "978-1", 2, 99), ("ann", "978-1", 4, 200)]
    with pytest.warns(UserWarning, match="2 duplicate .* kept the latest"):
        ratings = load_ratings(write(tmp_path / "r.csv", text(rows))).ratings
    assert len(ratings) == 4
    assert ratings.loc[(ratings["user"] == "ann") & (ratings["item"] == "978-1"), "rating"].tolist() == [4.0]


def test_without_timestamps_a_later_line_is_later(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", "user,item,rating\n1,1,2\n1,1,5\n2,1,3\n")
    with pytest.warns(UserWarning, match="1 duplicate"):
        ratings = load_ratings(path).ratings
    assert ratings["rating"].tolist() == [5.0, 3.0] and ratings["timestamp"].tolist() == [1, 2]


def test_dates_become_seconds(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", "user,item,rating,date\n1,1,2,1970-01-02\n1,2,5,1970-01-01 00:01:00\n")
    assert load_ratings(path).ratings["timestamp"].tolist() == [86_400, 60]


DAY = 86_400
JAN_13, FEB_5, MAR_1, MAY_2 = 12 * DAY, 35 * DAY, 59 * DAY, 121 * DAY  # of 1970, in seconds


@pytest.mark.parametrize(
    ("dates", "expected"),
    [
        # one date with a day past 12 tells the order for the whole column, wherever it stands
        (["13.01.1970", "05.02.1970"], [JAN_13, FEB_5]),
        (["05.02.1970", "13.01.1970"], [FEB_5, JAN_13]),
        (["05/02/1970", "01/13/1970"], [MAY_2, JAN_13]),
        # dates with and without times: the order from their date parts
        (["13.01.1970", "05.02.1970 00:01", "01.03.1970"], [JAN_13, FEB_5 + 60, MAR_1]),
        (["1970-01-13", "1970-02-05T00:00:00Z", "1970-03-01 00:00"], [JAN_13, FEB_5, MAR_1]),
        (["Jan 13 1970", "Feb 5 1970 00:01"], [JAN_13, FEB_5 + 60]),
        # ISO dates read as ISO in either order; the others' order comes from the others alone
        (["1970-01-13", "13.01.1970", "05.02.1970", "1970-03-01"], [JAN_13, JAN_13, FEB_5, MAR_1]),
        # a date that opens with its year goes on month, then day, with or without a time of day
        (["1970.02.05", "1970.03.01"], [FEB_5, MAR_1]),
        (["1970.02.05 10:30 PM", "1970.03.01 01:00 am"], [FEB_5 + 81_000, MAR_1 + 3_600]),
        (["1970/02/05 10:30 PM", "1970/03/01 1:00 AM"], [FEB_5 + 81_000, MAR_1 + 3_600]),
        (["1970.02.05 10:30 PM", "1970/03/01 1:00 AM"], [FEB_5 + 81_000, MAR_1 + 3_600]),
    ],
)
def test_dates_are_read_in_one_day_order(dates: list[str], expected: list[int], tmp_path: Path) -> None:
    lines = "".join(f"{row},{row},{row + 1},{date}\n" for row, date in enumerate(dates))
    path = write(tmp_path / "r.csv", "user;item;rating;date\n" + lines.replace(",", ";"))
    assert load_ratings(path).ratings.sort_values("user")["timestamp"].tolist() == expected


@pytest.mark.parametrize("dates", [["05.02.1970", "06.02.1970"], ["05/02/1970 10:00", "06/02/1970"]])
def test_dates_no_value_tells_the_order_of_are_refused(dates: list[str], tmp_path: Path) -> None:
    lines = "".join(f"{row},{row},{row + 1},{date}\n" for row, date in enumerate(dates))
    path = write(tmp_path / "r.csv", "user,item,rating,date\n" + lines)
    with pytest.raises(DataError, match=r"date '05.02.1970.*' on line 2 could be 05 February 1970 or 02 May"):
        load_ratings(path)


@pytest.mark.parametrize("time", ["10:30", "9:05:02 pm"])
def test_a_time_of_day_without_a_date_is_refused(time: str, tmp_path: Path) -> None:
    """pandas reads "10:30" as that time today: the order of the ratings would change by the day."""
    path = write(tmp_path / "r.csv", f"user,item,rating,time\n1,1,2,{time}\n1,2,5,11:00\n")
    with pytest.raises(DataError, match=f"timestamp '{time}' on line 2 is a time of day with no date"):
        load_ratings(path)


def test_spaces_after_the_separator_are_not_part_of_the_ids(tmp_path: Path) -> None:
    ratings = write(tmp_path / "r.csv", "user, item, rating\n1, 50, 3\n2, 50, 4\nann, b7 , 2\n")
    items = write(tmp_path / "i.csv", "item, title\n50, Fifty\nb7, Seven\n")
    dataset = load_ratings(ratings, items=items)
    assert dataset.ratings["item"].tolist() == ["50", "50", "b7"]
    assert dataset.ratings["user"].tolist() == ["1", "2", "ann"]
    titles = dict(zip(dataset.items["item"], dataset.items["title"], strict=True))
    assert titles == {"50": "Fifty", "b7": "Seven"}
    numbers = load_ratings(write(tmp_path / "n.csv", "user, item, rating\n1, 50, 3\n2, 51, 4\n"))
    assert numbers.ratings["item"].tolist() == [50, 51] and numbers.ratings["item"].dtype == np.int64


def test_utf16_text_reads_as_text(tmp_path: Path) -> None:
    # Excel's "Unicode text" export: UTF-16 with a byte-order mark, tab-separated (had been refused
    # as "not a text file" for its NUL bytes).
    path = tmp_path / "r.txt"
    path.write_bytes("user\titem\trating\nann\t2\t3\nbob\t3\t4\nann\t3\tx\n".encode("utf-16"))
    with pytest.raises(DataError, match="rating 'x' on line 4 is not a number"):
        load_ratings(path)
    path.write_bytes("user\titem\trating\nann\t2\t3\nbob\t3\t4\n".encode("utf-16"))
    assert load_ratings(path).ratings["user"].tolist() == ["ann", "bob"]


def test_latin1_past_the_sniffed_start_is_named_by_its_line(tmp_path: Path) -> None:
    rows = "".join(f"{n},{n % 50},{n % 5 + 1}\n" for n in range(ratings_file.SNIFF_BYTES // 8))
    path = tmp_path / "r.csv"
    path.write_bytes(f"user,item,rating\n{rows}".encode() + "José,5,4".encode("latin-1"))
    with pytest.raises(DataError, match=rf"line {rows.count(chr(10)) + 2} is not UTF-8 text.*save the whole"):
        load_ratings(path)


def test_a_separator_that_splits_nothing_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="`sep` ';' does not split its first line"):
        load_ratings(write(tmp_path / "r.csv", text(ROWS)), sep=";")


def test_old_mac_line_ends_are_named(tmp_path: Path) -> None:
    old_mac = write(tmp_path / "r.csv", "user,item,rating\r1,2,3\r2,3,4\r")
    with pytest.raises(DataError, match="lines end in a lone carriage return"):
        load_ratings(old_mac)


def test_quoted_line_breaks_do_not_hide_the_separator(tmp_path: Path) -> None:
    # Sniffed line by line, a two-column table whose second title holds a line break had lines of
    # one field and two: "cannot tell the separator".
    ratings = write(tmp_path / "r.csv", "user,item,rating\n1,1,4\n1,2,3\n")
    items = write(tmp_path / "i.csv", 'item,title\n1,"Film one"\n2,"Film\n\ntwo"\n')
    titles = load_ratings(ratings, items=items).items["title"].tolist()
    assert titles == ["Film one", "Film\n\ntwo"]


def test_an_item_file_repeating_an_id_is_named_by_its_line(tmp_path: Path) -> None:
    ratings = write(tmp_path / "r.csv", "user,item,rating\n1,1,3\n2,2,4\n")
    items = write(tmp_path / "i.csv", "id,title\n1,One\n2,Two\n1,One again\n")
    with pytest.warns(
        UserWarning, match=r"i.csv: 1 item entry repeats an id named before, the first 1 on line 4"
    ):
        assert load_ratings(ratings, items=items).titles(np.array([1])).tolist() == ["One"]


def test_items_give_titles_typed_like_the_ratings_ids(tmp_path: Path) -> None:
    ratings = write(tmp_path / "r.csv", text(ROWS))
    items = write(tmp_path / "i.csv", 'isbn,title,genres\n978-1,"Dune, Part 1",SF\n978-2,Emma,\n')
    with pytest.warns(UserWarning, match="no entry for 1 rated item id, e.g. 978-3"):
        dataset = load_ratings(ratings, items=items)
    titles = dataset.titles(np.array(["978-1", "978-3"], dtype=object))
    assert titles.tolist() == ["Dune, Part 1", "[item 978-3]"]
    assert dataset.origin["items"] == str(items.resolve())
    numbered = write(tmp_path / "n.csv", "1,2,3\n2,3,4\n")
    headerless = write(tmp_path / "t.tsv", "2\tTwo\n3\tThree\n")
    assert load_ratings(numbered, items=headerless).titles(np.array([3])).tolist() == ["Three"]
    wrong = write(tmp_path / "w.csv", "id,title\nabc,Not a number\n")
    with pytest.raises(DataError, match="item id 'abc' on line 2 is not an integer"):
        load_ratings(numbered, items=wrong)


def test_a_run_record_reads_the_file_again_the_same_way(tmp_path: Path) -> None:
    path = write(tmp_path / "r.txt", text([(t, u, i, r) for u, i, r, t in ROWS], ";", None))
    items = write(tmp_path / "i.csv", "isbn,title\n978-1,Dune\n")
    columns = {"user": "2", "item": "3", "rating": "4", "timestamp": "1"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = load_ratings(path, columns=columns, sep=";", rating_scale=(0, 10), items=items)
        again = dataset_from_record({"dataset": first.name, **first.origin}, first.name)
    assert first.origin["sep"] == ";" and first.origin["rating_scale"] == [0, 10]
    same_table(again.ratings, first.ratings)
    assert again.rating_scale == (0.0, 10.0) and again.items.equals(first.items)


def test_a_frame_gets_the_files_checks_with_row_numbers() -> None:
    frame = pd.DataFrame({"userId": ["a", "b"], "isbn": ["x", "y"], "score": [1.0, 10.0], "when": [5, 6]})
    dataset = RatingsDataset.from_frame(frame, name="shop")
    assert dataset.name == "shop" and dataset.ratings["timestamp"].tolist() == [5, 6]
    assert dataset.rating_scale == (1.0, 10.0) and dataset.origin == {}
    with pytest.raises(DataError, match="missing rating on row 2"):
        RatingsDataset.from_frame(frame.assign(score=[1.0, None]))
    with pytest.raises(DataError, match=r"no rating column .* pass user=, item=, rating="):
        RatingsDataset.from_frame(frame[["userId", "isbn"]], implicit=False)
    labelled = pd.DataFrame({0: [1, 2], 1: [3, 4], 2: [2.0, 4.0]})
    by_label = RatingsDataset.from_frame(labelled, user="0", item="1", rating="2")
    assert by_label.ratings["item"].tolist() == [3, 4]
    items = pd.DataFrame({"isbn": ["x"], "name": ["Ex"]})
    with pytest.warns(UserWarning, match="no entry for 1"):
        titled = RatingsDataset.from_frame(frame, items=items)
    assert titled.titles(np.array(["x"], dtype=object)).tolist() == ["Ex"]


def test_a_run_from_a_frame_cannot_be_read_again() -> None:
    with pytest.raises(DataError, match="given in Python"):
        dataset_from_record({"dataset": "shop"}, "shop")


def test_a_data_record_of_another_run_or_without_its_ratings_file_is_named_as_such() -> None:
    """A data.json copied in from another run, or one whose 'ratings' entry was removed, had been
    taken for data given in Python, with the advice to train the run again from a ratings file."""
    with pytest.raises(DataError) as caught:
        dataset_from_record({"dataset": "tiny", "folder": "/somewhere/tiny"}, "ratings")
    assert str(caught.value) == (
        "the run's data.json names the data 'tiny', where its checkpoint was trained on 'ratings': the "
        "data.json is another run's; restore the run's own"
    )
    with pytest.raises(DataError) as caught:
        dataset_from_record({"dataset": "ratings", "items": "/somewhere/books.csv", "sep": ","}, "ratings")
    assert str(caught.value) == (
        "the run's data.json is damaged: it says how a ratings file was read (dataset, items, sep) but has "
        "no 'ratings' entry naming it; restore it"
    )


# --- formats, layouts and options beyond the common ones --------------------------------------------


def zstd_file(path: Path, data: bytes) -> None:
    """`data` zstd-compressed into `path` by pyarrow's own writer."""
    with pa.CompressedOutputStream(str(path), "zstd") as stream:
        stream.write(data)


@pytest.mark.parametrize("compression", ["plain", "gzip", "bz2", "xz", "zstd"])
def test_latin1_text_reads_the_same_under_every_compression(compression: str, tmp_path: Path) -> None:
    content = '"User-ID";"ISBN";"Book-Rating"\n"Jos\xe9";"034545104X";"5"\n"Ana";"0155061224";"8"\n'
    data = content.encode("latin-1")
    path = tmp_path / "bx"
    if compression == "zstd":
        zstd_file(path, data)  # polars reads zstd and gzip itself: Latin-1 is decoded here first
    else:
        packers = {"plain": lambda b: b, "gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}
        path.write_bytes(packers[compression](data))
    ratings = load_ratings(path).ratings
    assert ratings["user"].tolist() == ["José", "Ana"] and ratings["item"].tolist() == [
        "034545104X",
        "0155061224",
    ]


@pytest.mark.parametrize("timed", [False, True])
def test_three_or_four_columns_without_a_header_are_taken_by_position(timed: bool, tmp_path: Path) -> None:
    rows = [(u, i, r, t) if timed else (u, i, r) for u, i, r, t in ROWS]
    ratings = load_ratings(write(tmp_path / "r.csv", text(rows, header=None))).ratings
    assert ratings["user"].tolist() == ["ann", "bob", "ann", "cy"] and ratings["rating"].tolist() == [
        8,
        6,
        10,
        2,
    ]
    assert ratings["timestamp"].tolist() == ([100, 101, 102, 103] if timed else [0, 1, 2, 3])


@pytest.mark.parametrize("first", ["1,2,3", "7,2,5", "5,9,1", "3,3,3"])
def test_positions_given_for_a_headerless_file_do_not_make_its_first_line_a_header(
    first: str, tmp_path: Path
) -> None:
    # Regression: a first line holding "1", "2" or "3" (ids and ratings do) was taken for a header
    # naming the positions given, and silently dropped or refused.
    path = write(tmp_path / "r.csv", f"{first}\n4,5,4\n6,7,2\n")
    ratings = load_ratings(path, columns={"user": "1", "item": "2", "rating": "3"}).ratings
    assert len(ratings) == 3 and ratings["user"].tolist()[0] == int(first.split(",")[0])


@pytest.mark.parametrize("missing", ["NA", "NULL", "nan", '"N/A"', ""])
def test_a_missing_rating_on_the_first_line_is_named_not_taken_for_a_header(
    missing: str, tmp_path: Path
) -> None:
    # Regression: a headerless file whose first rating was NULL or NA had that line read as a header,
    # so the row was lost and the columns were called "1", "10", "NA", ...
    path = write(tmp_path / "r.csv", f"1,10,{missing},100\n1,11,4,101\n2,10,3,102\n")
    named = r"r\.csv: (rating .* on line 1 is not a number|missing rating on line 1)"
    with pytest.raises(DataError, match=named):
        load_ratings(path)


def test_a_header_can_be_forced_either_way(tmp_path: Path) -> None:
    numbered = write(
        tmp_path / "n.csv", "1,2,3\n5,6,4\n7,8,2\n"
    )  # a header of numbers, told apart by header=
    columns = {"user": "1", "item": "2", "rating": "3"}
    assert load_ratings(numbered, columns=columns, header=True).ratings["user"].tolist() == [5, 7]
    assert load_ratings(numbered, columns=columns, header=False).ratings["user"].tolist() == [1, 5, 7]
    named = write(tmp_path / "h.csv", "user,item,rating\n1,2,3\n2,3,4\n")
    with pytest.raises(DataError, match="rating 'rating' on line 1 is not a number"):
        load_ratings(named, header=False)


@pytest.mark.parametrize(
    ("content", "sep"),
    [
        ("user:item:rating\n1:2:3\n2:3:4\n", ":"),  # not among those sniffed
        ("user;item;rating\nSmith, J;1;4\nDoe, A;2;3\n", ";"),  # commas inside fields
        ("user,item,rating\n1,2,3\n2,3,4\n", ","),
    ],
)
def test_a_separator_given_is_used(content: str, sep: str, tmp_path: Path) -> None:
    path = write(tmp_path / "r.txt", content)
    dataset = load_ratings(path, sep=sep)
    assert len(dataset.ratings) == 2 and dataset.origin["sep"] == sep
    if sep == ":":
        with pytest.raises(DataError, match=r"cannot tell the separator .* `sep`"):
            load_ratings(path)


def test_a_separator_of_more_than_one_character_or_a_bad_scale_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", text(ROWS))
    with pytest.raises(DataError, match="`sep` '::': the separator must be one character"):
        load_ratings(path, sep="::")
    for scale in [(5, 1), (1, math.inf), (math.nan, 5)]:
        with pytest.raises(DataError, match="expected finite LO < HI"):
            load_ratings(path, rating_scale=scale)
        with pytest.raises(DataError, match=r"the ratings frame: `rating_scale` .* expected finite LO < HI"):
            RatingsDataset.from_frame(load_ratings(path).ratings, rating_scale=scale)


def test_one_column_named_for_two_fields_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", "u,i,r,t\n1,2,3,4\n2,3,4,5\n")
    with pytest.raises(DataError, match="column 'u' is named for both the user and the item"):
        load_ratings(path, columns={"user": "u", "item": "u", "rating": "r"})
    with pytest.raises(DataError, match="column 'r' is named for both the rating and the timestamp"):
        RatingsDataset.from_frame(pd.read_csv(path), user="u", item="i", rating="r", timestamp="r")


def test_durations_are_no_timestamps() -> None:
    days = pd.to_timedelta([1, 2], "D")
    frame = pd.DataFrame({"user": [1, 2], "item": [1, 2], "rating": [1, 5], "ts": days})
    with pytest.raises(DataError, match="the timestamps are durations, not times"):
        RatingsDataset.from_frame(frame)


def test_a_bad_timestamp_among_seconds_is_the_one_named(tmp_path: Path) -> None:
    """Regression (found by the property test): with a word among the seconds, the date reader took
    '120100' for an ambiguous date and named it instead of the word."""
    path = write(tmp_path / "r.csv", "user,item,rating,timestamp\n0,0,1,120100\n1,1,2,5\n2,2,3,oops\n")
    with pytest.raises(DataError, match="timestamp 'oops' on line 4 is not a time"):
        load_ratings(path)
    dated = write(
        tmp_path / "d.csv", "user,item,rating,timestamp\n0,0,1,2024-01-02\n1,1,2,5\n2,2,3,2024-01-03\n"
    )
    with pytest.raises(DataError, match="timestamp '5' on line 3 is not a time"):  # seconds among dates
        load_ratings(dated)


def test_a_link_to_no_file_is_named_for_the_ratings_and_the_items(tmp_path: Path) -> None:
    """Regression: a loop of links crashed in Path.resolve (RuntimeError) before the file was read."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "gone").symlink_to(tmp_path / "missing.csv")
    ratings = write(tmp_path / "r.csv", "user,item,rating\n1,1,4\n2,1,3\n")
    for link in ("a", "gone"):
        expected = f"{tmp_path / link}: a link that leads to no file"
        with pytest.raises(DataError, match=re.escape(expected)):
            load_ratings(tmp_path / link)
        with pytest.raises(DataError, match=re.escape(expected)):
            load_ratings(ratings, items=tmp_path / link)


def test_from_frame_takes_a_data_frame_only() -> None:
    with pytest.raises(TypeError, match=r"a pandas or polars DataFrame of ratings, got pandas\.Series$"):
        RatingsDataset.from_frame(pd.Series([1, 2]))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"a pandas or polars DataFrame of ratings, got polars\.LazyFrame$"):
        RatingsDataset.from_frame(pl.LazyFrame({"user": [1]}))  # type: ignore[arg-type]


def test_quoted_fields_may_hold_the_separator(tmp_path: Path) -> None:
    # Regression: the separator was sniffed by a plain split, so a two-column file whose quoted
    # fields hold commas could not be read ("cannot tell the separator").
    path = write(tmp_path / "r.csv", 'user,item,rating\n"Smith, J",1,4\n"Doe, A",2,3\n"Roe, B",2,5\n')
    assert load_ratings(path).ratings["user"].tolist() == ["Smith, J", "Doe, A", "Roe, B"]
    items = write(tmp_path / "i.csv", 'item,title\n1,"Dune, Part 1"\n2,"The ""Best"" Book"\n')
    titles = load_ratings(path, items=items).titles(np.array([1, 2]))
    assert titles.tolist() == ["Dune, Part 1", 'The "Best" Book']


def test_a_byte_order_mark_is_not_part_of_the_first_name(tmp_path: Path) -> None:
    # Regression: Excel's "CSV UTF-8" starts with a BOM, which hid the "user" column.
    path = write(tmp_path / "r.csv", "\ufeffuser,item,rating\n1,2,3\n2,3,4\n")
    assert load_ratings(path).ratings["user"].tolist() == [1, 2]
    headerless = write(tmp_path / "h.csv", "\ufeff1,2,3\n2,3,4\n")
    assert load_ratings(headerless).ratings["user"].tolist() == [1, 2]


def test_columns_by_name_with_a_misspelt_field_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", "a,b,c,d\n1,2,3,4\n2,3,4,5\n")
    columns = {"user": "a", "item": "b", "rating": "c", "time": "d"}
    with pytest.raises(DataError, match="no field 'time' to name a column for"):
        load_ratings(path, columns=columns)
    with pytest.raises(DataError, match=r"no column 'e' for the timestamps \(columns: 'a', 'b', 'c', 'd'\)"):
        load_ratings(path, columns={"user": "a", "item": "b", "rating": "c", "timestamp": "e"})


def test_a_column_named_in_another_case_is_found_where_only_one_matches(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", "User ID,Item,Score,score\n1,2,3,4\n2,3,4,5\n")
    dataset = load_ratings(path, columns={"user": "user id", "item": "ITEM", "rating": "Score"})
    assert dataset.ratings["rating"].tolist() == [3.0, 4.0]
    with pytest.raises(DataError, match="no column 'SCORE' for the ratings"):  # Score or score?
        load_ratings(path, columns={"user": "user id", "item": "item", "rating": "SCORE"})


@pytest.mark.parametrize(
    ("header", "rows"),
    [
        ("userId,movieId,rating,timestamp", [(1, 31, 2.5, 1260759144), (1, 1029, 3.0, 1260759179)]),
        ("user_id,book_id,rating", [(314, 1, 5), (439, 1, 3)]),
        ("reviewerID,asin,overall,unixReviewTime", [("A2S", "B00", 5.0, 1393545600), ("A3S", "B01", 4.0, 1)]),
        ("customer_id,product_id,stars", [("c1", "p1", 4), ("c2", "p1", 2)]),
    ],
)
def test_the_usual_exports_are_read_by_their_names(
    header: str, rows: list[tuple[object, ...]], tmp_path: Path
) -> None:
    ratings = load_ratings(write(tmp_path / "r.csv", text(rows, header=header))).ratings
    assert ratings["user"].tolist() == [row[0] for row in rows]
    assert ratings["item"].tolist() == [row[1] for row in rows]
    assert ratings["rating"].tolist() == [float(row[2]) for row in rows]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("header", "item"),
    [
        ("review_id,user_id,business_id,stars,useful,date", "business_id"),  # Yelp's reviews
        ("review_id,user_id,parent_asin,rating,helpful_vote,date", "parent_asin"),  # Amazon's of 2023
        ("review_id,user_id,app_id,rating,funny,date", "app_id"),  # Steam's
    ],
)
def test_the_item_columns_of_yelp_amazon_and_steam_reviews_are_found(
    header: str, item: str, tmp_path: Path
) -> None:
    """Regression: Yelp's business_id and the like were no item name, so the file was refused."""
    rows = [("r1", "u1", "b1", 4.0, 0, "2018-01-01"), ("r2", "u2", "b1", 2.0, 3, "2018-01-02")]
    ratings = load_ratings(write(tmp_path / "reviews.csv", text(rows, header=header))).ratings
    assert ratings["user"].tolist() == ["u1", "u2"] and ratings["item"].tolist() == ["b1", "b1"]
    assert ratings["rating"].tolist() == [4.0, 2.0], item


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        (["1", "22", "-3"], np.int64),
        (["0345391802", "0806521210"], object),  # ISBNs keep their leading zeros
        (["034545104X", "0155061224"], object),
        (["6f1c2b9e-8a1d-4c3e-9f00-2b6d7e0a1c55", "0b7a5e1c-2d3f-4a5b-8c9d-0e1f2a3b4c5d"], object),
        (["12345678901234567890", "12345678901234567891"], object),  # past int64: text, not a crash
        (["1234567890123456789", "2"], np.int64),
    ],
)
def test_id_types_follow_their_spelling(values: list[str], dtype: type, tmp_path: Path) -> None:
    rows = [(value, "i", n + 1) for n, value in enumerate(values)]
    ratings = load_ratings(write(tmp_path / "r.csv", text(rows, header="user,item,rating"))).ratings
    assert ratings["user"].to_numpy().dtype == dtype
    assert [str(value) for value in ratings["user"]] == values


# --- bad input: one line naming the file and the line -----------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # blank lines, and lines of nothing but separators, are skipped and counted
        ("user,item,rating\n\n1,2,3\n\n\n2,3,x\n", "rating 'x' on line 6"),
        ("user,item,rating\n1,2,3\n,,\n2,3,x\n", "rating 'x' on line 4"),
        ("user\titem\trating\n1\t2\t3\n\t\t\n2\t3\tx\n", "rating 'x' on line 4"),
        # a line of blanks is a row (its first field is "  "): named where it is
        ("user,item,rating\n1,2,3\n   \n2,3,x\n", "missing user id on line 3"),
        ("user item rating\n1 2 3\n   \n2 3 x\n", "line 3 has 4 fields; expected 3, separated by space"),
        # blank lines before the table, with a header or without
        ("\n\nuser,item,rating\n1,2,3\n2,3,x\n", "rating 'x' on line 5"),
        ("\n  \n1,2,3\n2,3,x\n", "rating 'x' on line 4"),
        ("user,item,rating\r\n1,2,3\r\n\r\n2,3,x\r\n", "rating 'x' on line 4"),
        ("\ufeffuser,item,rating\n1,2,3\n2,3,x\n", "rating 'x' on line 3"),
        ("1,2,3\n2,3,x\n", "rating 'x' on line 2"),
        ("user,item,rating\n1,2,3\n2,3,-inf\n", "rating '-inf' on line 3 is infinite, or beyond 3.4e"),
        ("user,item,rating\n1,2,3\n2,3\n", "missing rating on line 3"),
        ("user,item,rating\n1,,3\n", "missing item id on line 2"),
        ('user,item,rating\n"",2,3\n', "missing user id on line 2"),
        # a quoted separator is one field: the line with too many is named, not the one before
        ('user,item,rating\n"a,b",2,3\n2,3,4,5\n', "line 3 has 4 fields; expected 3"),
        # an export's preamble of "#" comments (and blank lines) is skipped, and counted
        ("# exported 2024-05-01\n#\n\nuser,item,rating\n1,2,3\n2,3,x\n", "rating 'x' on line 6"),
        ("# exported 2024-05-01\n", "no table in it, only # comment lines"),
        # a preamble, or a header, longer than the first sample: the sample grows until it holds a line
        ("# x\n" * 30_000 + "user,item,rating\n1,2,3\n2,3,x\n", "rating 'x' on line 30003"),
        (
            "user,item,rating,"
            + ",".join(f"c{k}" for k in range(20_000))
            + "\n1,2,3"
            + ",0" * 20_000
            + "\n2,3,x"
            + ",0" * 20_000
            + "\n",
            "rating 'x' on line 3",
        ),
        # a quoted field over three lines (one blank, one with a doubled quote) is one record
        ('user,item,rating\n1,"A ""long""\n\nreview",4\n\n2,b,3\n3,c,x\n', "rating 'x' on line 7"),
        (
            "user,item,rating,time\n1,2,3,4\n2,3,4,99999999999999999999\n",
            "timestamp '99999999999999999999' on line 3",
        ),
        ("user,item,rating,date\n1,2,3,2024-05-01\n2,3,4,1000\n", "timestamp '1000' on line 3 is not a time"),
        ("user,item,rating,date\n1,2,3,1000\n2,3,4,2024-05-01\n", "timestamp '2024-05-01' on line 3"),
        ("user,item,rating,date\n1,2,3,2024-05-01\n\n2,3,4,soon\n", "timestamp 'soon' on line 4"),
        ("user,item,rating,date\n1,2,3,soon\n2,3,4,100\n", "timestamp 'soon' on line 2"),
        ("user,item,rating,date\n1,2,3,true\n2,3,4,false\n", "timestamps are true/false values"),
        ("user,item,rating\ntrue,2,3\nfalse,3,4\n", "user ids are true/false values"),
        ('user,item,rating\n1,"2,3\n2,3,4\n', "line 2 opens a quote"),
        ("1,2,3,4,5\n", "5 columns and no header; say which is which by position"),
    ],
)
def test_more_bad_files_are_named_by_their_line(content: str, expected: str, tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", content)
    with pytest.raises(DataError, match=expected) as error:
        load_ratings(path)
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


@pytest.mark.parametrize("packed", [gzip.compress, bz2.compress, lzma.compress, zstd])
def test_errors_in_compressed_files_name_the_line_of_the_text(packed: object, tmp_path: Path) -> None:
    content = b"user,item,rating\n1,2,3\n\n2,3,4\n3,4,x\n"
    path = write(tmp_path / "r.csv.z", packed(content))  # type: ignore[operator]
    with pytest.raises(DataError, match="rating 'x' on line 5 is not a number"):
        load_ratings(path)


@pytest.mark.parametrize(
    ("packed", "expected"),
    [
        (lambda b: gzip.compress(b)[:40], "cannot decompress it as gzip"),
        (lambda b: b"BZh9" + b"\x00junk" * 4, "cannot decompress it as bz2"),
        (lambda b: lzma.compress(b)[:30], "cannot decompress it as xz"),
        (lambda b: zstd(b)[:12] + b"\xff" * 8, "cannot decompress it as zstd"),
        (lambda b: gzip.compress(b"\x00\x01" * 50), "NUL bytes"),
        (lambda b: gzip.compress(b""), "file is empty"),
    ],
)
def test_broken_compressed_files_are_one_line(packed: object, expected: str, tmp_path: Path) -> None:
    data = b"user,item,rating\n" + b"1,2,3\n" * 400
    path = write(tmp_path / "r.bin", packed(data))  # type: ignore[operator]
    with pytest.raises(DataError, match=expected) as error:
        load_ratings(path)
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


def test_a_missing_file_or_a_folder_is_one_line(tmp_path: Path) -> None:
    for path, expected in ((tmp_path / "absent.csv", "file not found"), (tmp_path, "is a folder")):
        with pytest.raises(DataError, match=expected):
            load_ratings(path)


@pytest.mark.parametrize(
    ("content", "scale", "expected"),
    [
        (
            "user,item,rating\n1,2,3\n\n2,3,11\n",
            (1, 10),
            "rating 11 on line 4 is outside `rating_scale` 1,10",
        ),
        ("user,item,rating\n1,2,0.5\n2,3,3\n", (1, 5), "rating 0.5 on line 2 is outside `rating_scale` 1,5"),
        ("1,2,-10.5\n2,3,3\n", (-10, 10), "rating -10.5 on line 1 is outside `rating_scale` -10,10"),
    ],
)
def test_a_rating_outside_a_given_scale_names_its_line(
    content: str, scale: tuple[float, float], expected: str, tmp_path: Path
) -> None:
    with pytest.raises(DataError, match=expected):
        load_ratings(write(tmp_path / "r.csv", content), rating_scale=scale)


def test_a_given_scale_holds_ratings_on_its_bounds_and_may_exceed_the_data(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", "user,item,rating\n1,2,0.1\n2,3,0.7\n")  # not exact in float32
    assert load_ratings(path, rating_scale=(0.1, 0.7)).rating_scale == (0.1, 0.7)
    one_value = write(tmp_path / "one.csv", "user,item,rating\n1,2,4\n2,3,4\n")
    assert load_ratings(one_value, rating_scale=(1, 5)).rating_scale == (1.0, 5.0)  # the scale is known


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([1, 2, 3, 4, 5, 3], "1-5 in steps of 1 (6 ratings)"),
        ([0.5, 1.0, 4.5, 5.0], "0.5-5 in steps of 0.5 (4 ratings)"),
        ([1, 10, 2, 9, 5], "1-10 in steps of 1 (5 ratings)"),
        ([0, 100, 50, 75, 25], "0-100 in steps of 25 (5 ratings)"),
        ([-10, 9.8, 0.31, 3.7713], "-10 to 9.8 continuous (4 ratings)"),
    ],
)
def test_describe_scale_for_the_usual_scales(values: list[float], shown: str, tmp_path: Path) -> None:
    rows = [(user, user % 2, value) for user, value in enumerate(values)]
    assert describe_scale(load_ratings(write(tmp_path / "r.csv", text(rows, header=None)))) == shown


def test_rating_step_is_none_for_a_single_value_or_too_many() -> None:
    assert rating_step(np.array([3.0, 3.0], dtype=np.float32)) is None
    assert rating_step(np.arange(2000, dtype=np.float32)) is None  # beyond MAX_STEPPED_VALUES: continuous
    # Regression: differences past int64 were cast to its lowest value, with numpy's warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rating_step(np.array([1.0, 2.0, 1e30], dtype=np.float32)) is None


@pytest.mark.parametrize(("stray", "line"), [(1e6, 5), (-400.0, 5), (1e30, 5)])
def test_a_rating_far_from_all_the_others_is_named_when_it_sets_the_scale(
    stray: float, line: int, tmp_path: Path
) -> None:
    rows = [f"{user},{item},{1 + (user + item) % 5}" for user in range(1, 21) for item in range(1, 11)]
    rows.insert(3, f"99,1,{stray:g}")  # the file's line 5, after the header
    path = write(tmp_path / "r.csv", "user,item,rating\n" + "\n".join(rows) + "\n")
    with pytest.warns(
        UserWarning,
        match=rf"rating {re.escape(f'{stray:g}')} on line {line} lies far from all the others \(1 to 5\)",
    ):
        load_ratings(path)
    with warnings.catch_warnings():  # the same data without it, or with the scale given: no warning
        warnings.simplefilter("error")
        load_ratings(
            write(tmp_path / "plain.csv", "user,item,rating\n" + "\n".join(rows[:3] + rows[4:]) + "\n")
        )
        load_ratings(path, rating_scale=(min(stray, 1), max(stray, 5)))
    assert rating_step(np.array([1, 3, 7], dtype=np.float32)) == 2.0


def test_strays_at_both_ends_are_each_named(tmp_path: Path) -> None:
    """Each stray once measured the gap against the other one, and neither was named."""
    rows = [f"{user},{item},{1 + (user + item) % 5}" for user in range(1, 21) for item in range(1, 11)]
    rows[3:3] = ["98,1,-1e+06", "99,1,1e+06"]  # the file's lines 5 and 6
    path = write(tmp_path / "r.csv", "user,item,rating\n" + "\n".join(rows) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_ratings(path)
    far = [str(warning.message).split(": ", 1)[1] for warning in caught if "lies far" in str(warning.message)]
    named = sorted(message.split(" lies far from all the others (1 to 5)")[0] for message in far)
    assert named == ["rating -1e+06 on line 5", "rating 1e+06 on line 6"]


STARS = [1.0 + i % 5 for i in range(1000)]


@pytest.mark.parametrize(
    ("ratings", "named"),
    [
        ([5.0] * 300 + [1.0, 1e6], ["1e+06 on row 302 lies far from all the others (1 to 5)"]),
        # A rare legitimate end beside a stray is part of the range the stray is measured against.
        (
            [2.0 + i % 4 for i in range(1000)] + [1.0] * 5 + [1e6],
            ["1e+06 on row 1006 lies far from all the others (1 to 5)"],
        ),
        ([7.0 + i % 2 for i in range(1000)] + [1.0, 10.0], []),  # rare ends, neither far from the other
        ([5.0] * 300 + [4.0, 6.0], []),
        (STARS, []),
    ],
)
def test_stray_warnings_name_only_strays(ratings: list[float], named: list[str]) -> None:
    frame = pd.DataFrame({"user": range(len(ratings)), "item": 1, "rating": ratings})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RatingsDataset.from_frame(frame)
    far = [str(warning.message) for warning in caught if "lies far" in str(warning.message)]
    assert [message.split("rating ", 1)[1].split(", and")[0] for message in far] == named


@pytest.mark.parametrize(
    ("ratings", "warned"),
    [
        ([0.0] * 6 + [1.0, 3.0, 5.0, 5.0], True),  # Goodreads: 0 is a book shelved without a rating
        ([0.0] * 3 + [float(1 + i % 10) for i in range(7)], True),  # Book-Crossing's 0-10
        ([0.0] * 2 + [float(1 + i % 5) for i in range(8)], False),  # 0 a rating like the others
        ([0.0] * 6 + [1.0] * 4, False),  # likes and dislikes
        ([float(i % 6) for i in range(10)], False),
    ],
)
def test_zero_as_the_commonest_lowest_rating_is_warned_of_as_perhaps_unrated(
    ratings: list[float], warned: bool
) -> None:
    """Regression: Book-Crossing's and Goodreads' 0 ("not rated") trained silently as the worst rating."""
    frame = pd.DataFrame({"user": range(len(ratings)), "item": 1, "rating": ratings})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RatingsDataset.from_frame(frame)
    zeros = [str(warning.message) for warning in caught if "are 0, the lowest" in str(warning.message)]
    assert bool(zeros) == warned
    assert all("'not rated'" in message and "drop those lines" in message for message in zeros)


# --- polars' type inference: a column that changes past the rows it looked at --------------------------


@pytest.fixture
def few_inferred_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ratings_file, "INFER_ROWS", 5)


def numbered_rows(n: int = 40) -> str:
    return "".join(f"{u},{u % 7},{1 + u % 5},{1000 + u}\n" for u in range(n))


@pytest.mark.usefixtures("few_inferred_rows")
@pytest.mark.parametrize(
    ("late_line", "expected"),
    [
        ("3,3,x,5", "rating 'x' on line 43 is not a number"),  # past a blank line
        ("3,3,2,2024-05-01", "timestamp '2024-05-01' on line 43 is not a time"),
        (",3,2,5", "missing user id on line 43"),
        ("1,3,2,5,6", "line 43 has 5 fields; expected 4"),
    ],
)
def test_a_bad_value_past_the_inferred_rows_names_its_line(
    late_line: str, expected: str, tmp_path: Path
) -> None:
    path = write(tmp_path / "r.csv", "user,item,rating,ts\n" + numbered_rows() + "\n" + late_line + "\n")
    with pytest.raises(DataError, match=expected):
        load_ratings(path)


@pytest.mark.usefixtures("few_inferred_rows")
@pytest.mark.parametrize("late_id", ["guest", "12345678901234567890", "0345391802", "3.5"])
def test_a_text_id_past_the_inferred_rows_turns_its_column_to_text(late_id: str, tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", "user,item,rating,ts\n" + numbered_rows() + f"{late_id},3,2,5\n")
    ratings = load_ratings(path).ratings
    assert ratings["user"].tolist()[-1] == late_id and ratings["user"].tolist()[:2] == ["0", "1"]
    assert ratings["item"].dtype == np.int64 and ratings["timestamp"].tolist()[-1] == 5


# --- Parquet ------------------------------------------------------------------------------------------


def test_parquet_columns_are_given_by_name_and_checked_with_row_numbers(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": ["x", "y", "z"], "b": [1, 2, 3], "c": [1.0, 2.0, None]})
    frame.to_parquet(tmp_path / "r.parquet")
    columns = {"user": "a", "item": "b", "rating": "c"}
    with pytest.raises(DataError, match="missing rating on row 3"):
        load_ratings(tmp_path / "r.parquet", columns=columns)
    frame.iloc[:2].to_parquet(tmp_path / "ok.parquet")
    dataset = load_ratings(tmp_path / "ok.parquet", columns=columns, rating_scale=(0, 5))
    assert dataset.ratings["user"].tolist() == ["x", "y"] and dataset.origin["columns"] == columns
    with pytest.raises(DataError, match="rating 2 on row 2 is outside `rating_scale` 0,1"):
        load_ratings(tmp_path / "ok.parquet", columns=columns, rating_scale=(0, 1))


def test_parquet_times_are_seconds_and_a_missing_one_is_named(tmp_path: Path) -> None:
    times = pd.to_datetime(["1970-01-02 00:00:00", "1970-01-01 00:01:00"])
    frame = pd.DataFrame({"user": [1, 2], "item": [1, 1], "rating": [1.0, 2.0], "timestamp": times})
    frame.to_parquet(tmp_path / "t.parquet")
    assert load_ratings(tmp_path / "t.parquet").ratings["timestamp"].tolist() == [86_400, 60]
    # Regression: a missing datetime became -9223372036854775808 seconds instead of an error.
    frame.assign(timestamp=[times[0], pd.NaT]).to_parquet(tmp_path / "gap.parquet")
    with pytest.raises(DataError, match="missing timestamp on row 2"):
        load_ratings(tmp_path / "gap.parquet")


def test_parquet_ids_past_int64_keep_their_spelling(tmp_path: Path) -> None:
    # Regression: uint64 ids of 2**63 and more wrapped round to negative int64 ids.
    big = np.array([2**63 + 5, 7], dtype=np.uint64)
    pd.DataFrame({"user": big, "item": [1, 2], "rating": [1.0, 2.0]}).to_parquet(tmp_path / "u.parquet")
    assert load_ratings(tmp_path / "u.parquet").ratings["user"].tolist() == ["9223372036854775813", "7"]


def test_parquet_columns_of_lists_are_refused_in_one_line(tmp_path: Path) -> None:
    # Regression: a struct column crashed in numpy (ValueError), a list column became text ids.
    table = pa.table({"user": [{"id": 1}, {"id": 2}], "item": [1, 2], "rating": [[1.0], [2.0]]})
    pq.write_table(table, tmp_path / "n.parquet")
    with pytest.raises(DataError, match=r"the user column 'user' holds Struct.* values, not single values"):
        load_ratings(tmp_path / "n.parquet")


def test_a_parquet_item_table_is_read(tmp_path: Path) -> None:
    ratings = write(tmp_path / "r.csv", "user,item,rating\n1,10,3\n2,20,4\n")
    pd.DataFrame({"movieId": [10, 20], "title": ["Ten", "Twenty"], "genres": ["A", "B"]}).to_parquet(
        tmp_path / "items.parquet"
    )
    dataset = load_ratings(ratings, items=tmp_path / "items.parquet")
    assert dataset.titles(np.array([20, 10])).tolist() == ["Twenty", "Ten"]
    assert dataset.items["genres"].tolist() == ["A", "B"] and dataset.items["item"].dtype == np.int64


@pytest.mark.parametrize("sep", [None, ","])
def test_netflix_prizes_per_movie_layout_is_refused_with_how_to_convert_it(
    sep: str | None, tmp_path: Path
) -> None:
    """Regression: its "1:" lines were met with "cannot tell the separator; name it with `sep`", which
    no separator helps."""
    path = write(tmp_path / "combined_data_1.txt", "1:\n1488844,3,2005-09-06\n822109,5,2005-05-13\n2:\n")
    with pytest.raises(DataError, match=r"combined_data_1.txt: is in Netflix Prize's layout .*'1:'.*awk"):
        load_ratings(path, sep=sep)


@pytest.mark.parametrize("name", ["yelp_academic_dataset_review.json", "reviews.json.gz"])
def test_json_is_refused_with_how_to_convert_it_to_parquet(name: str, tmp_path: Path) -> None:
    """Regression: Yelp's and Amazon's reviews (a JSON object per line) were met with 'N columns and no
    header; say which is which by position', whose positions read '"user_id": "u1"' as an id."""
    line = '{"review_id": "r1", "user_id": "u1", "business_id": "b1", "stars": 4.0, "date": "2018-04-10"}\n'
    content = (line + line.replace("u1", "u2").replace("4.0", "2.0")).encode()
    path = write(tmp_path / name, gzip.compress(content) if name.endswith(".gz") else content)
    parquet = tmp_path / f"{name.split('.')[0]}.parquet"
    with pytest.raises(
        DataError, match=rf"is JSON, .*'{re.escape(name)}'\).sink_parquet\('{parquet.name}'\)"
    ):
        load_ratings(path)
    pl.scan_ndjson(path).sink_parquet(parquet)  # as the message says
    assert load_ratings(parquet).ratings["user"].tolist() == ["u1", "u2"]


# --- item files -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        "item,title,genres\n1,One,a\n2,Two,b\n",
        "1|One|a\n2|Two|b\n",
        "id\ttitle\n1\tOne\n2\tTwo\n",
        "movie;name\n1;One\n2;Two\n",
        "1,One\n\n2,Two\n",
    ],
)
def test_item_files_with_or_without_a_header(content: str, tmp_path: Path) -> None:
    ratings = write(tmp_path / "r.csv", "1,1,3\n2,2,4\n")
    dataset = load_ratings(ratings, items=write(tmp_path / "items.txt", content))
    assert dataset.titles(np.array([1, 2])).tolist() == ["One", "Two"]


@pytest.mark.parametrize("year", ["2003", "NULL"])
def test_a_headerless_item_file_with_a_year_before_the_title_shows_the_titles(
    year: str, tmp_path: Path
) -> None:
    """Regression: Netflix Prize's movie_titles.csv (id, year, title) showed each movie's year as its
    title: the title is the first column after the id that is not numbers."""
    ratings = write(tmp_path / "r.csv", "1,1,3\n2,2,4\n")
    items = write(tmp_path / "movie_titles.csv", f"1,2003,Dinosaur Planet\n2,{year},Isle of Man TT\n")
    for line in range(3, 12):
        items.write_text(items.read_text() + f"{line},{1990 + line},Film {line}\n")
    dataset = load_ratings(ratings, items=items)
    assert dataset.titles(np.array([1, 2])).tolist() == ["Dinosaur Planet", "Isle of Man TT"]


def test_an_empty_title_shows_as_the_items_id(tmp_path: Path) -> None:
    """An item table's empty or blank title names no item: it shows as one without an entry does, not
    as a blank in recommend.py's lists and the report's tables."""
    ratings = write(tmp_path / "r.csv", "user,item,rating\n1,1,3\n2,2,4\n1,3,5\n")
    items = write(tmp_path / "i.csv", 'item,title\n1,One\n2,\n3,"  "\n')
    dataset = load_ratings(ratings, items=items)
    assert dataset.titles(np.array([1, 2, 3])).tolist() == ["One", "[item 2]", "[item 3]"]


def test_item_ids_are_typed_like_the_ratings_ids(tmp_path: Path) -> None:
    text_ids = write(tmp_path / "t.csv", "user,isbn,rating\n1,0345,3\n2,12,4\n")
    items = write(tmp_path / "i.csv", "isbn,title\n0345,Zero-led\n12,Twelve\n")
    dataset = load_ratings(text_ids, items=items)
    assert dataset.items["item"].tolist() == ["0345", "12"]  # text, as the ratings' ids are
    assert dataset.titles(np.array(["0345", "12"], dtype=object)).tolist() == ["Zero-led", "Twelve"]
    numbered = write(tmp_path / "n.csv", "user,item,rating\n1,1,3\n2,2,4\n")
    float_ids = write(tmp_path / "f.csv", "id,title\n1.0,One\n2,Two\n")
    assert load_ratings(numbered, items=float_ids).items["item"].tolist() == [1, 2]


def test_item_ids_past_2_to_the_53_keep_their_titles(tmp_path: Path) -> None:
    """An item table's integer ids are read exactly, as the ratings' are: through a float, ids past
    2**53 were refused as not integers (a frame's too), and would have taken a neighbour's title."""
    big = 2**53 + 1
    ratings = write(tmp_path / "r.csv", f"user,item,rating\n1,{big},3\n2,{big + 2},4\n")
    items = write(tmp_path / "i.csv", f"item,title\n{big + 2},Second\n00{big},First\n")
    dataset = load_ratings(ratings, items=items)
    assert dataset.titles(np.array([big, big + 2])).tolist() == ["First", "Second"]
    frame = pd.DataFrame({"user": [1, 2], "item": [big, big + 2], "rating": [3.0, 4.0]})
    named = pd.DataFrame({"item": [big + 2, big], "title": ["B", "A"]})
    titled = RatingsDataset.from_frame(frame, items=named)
    assert titled.titles(np.array([big, big + 2])).tolist() == ["A", "B"]


def test_nineteen_digit_item_ids_keep_their_titles(tmp_path: Path) -> None:
    """Snowflake-style ids (19 digits, within int64), which the ratings read exactly, were refused in
    an item table as 'not an integer'; one past int64 still is."""
    big = 1234567890123456789
    ratings = write(tmp_path / "r.csv", f"user,item,rating\n1,{big},3\n2,{big + 7},4\n")
    items = write(tmp_path / "i.csv", f"item,title\n{big + 7},Second\n{big},First\n")
    assert load_ratings(ratings, items=items).titles(np.array([big, big + 7])).tolist() == ["First", "Second"]
    beyond = write(tmp_path / "beyond.csv", f"item,title\n{2**63},Past\n{big},First\n")
    with pytest.raises(DataError, match=f"item id '{2**63}' on line 2 is not an integer"):
        load_ratings(ratings, items=beyond)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "id,title\nabc,Not a number\n",
            "item id 'abc' on line 2 is not an integer, as the ratings' item ids are",
        ),
        ("id,title\n1.5,Half\n", "item id '1.5' on line 2 is not an integer"),
        ("id,title\n1,One\n,Nothing\n", "missing item id on line 3"),
        # A title's quoted line break and a blank line are lines of the file too.
        ('id,title\n1,"One,\nand more"\n\nx,Two\n', "item id 'x' on line 5 is not an integer"),
        ("id\n1\n", "cannot tell the separator"),
        ("", "file is empty"),
        ("id,title\n1,\x00\n", "NUL bytes"),
    ],
)
def test_bad_item_files_are_one_line_naming_the_item_file(
    content: str, expected: str, tmp_path: Path
) -> None:
    ratings = write(tmp_path / "r.csv", "user,item,rating\n1,1,3\n2,2,4\n")
    items = write(tmp_path / "items.csv", content)
    with pytest.raises(DataError, match=expected) as error:
        load_ratings(ratings, items=items)
    assert str(error.value).startswith(f"{items}: ") and "\n" not in str(error.value)


def test_rated_items_missing_from_the_item_file_are_counted(tmp_path: Path) -> None:
    ratings = write(tmp_path / "r.csv", "user,item,rating\n1,1,3\n2,2,4\n1,3,5\n")
    items = write(tmp_path / "i.csv", "id,title\n1,One\n")
    with pytest.warns(UserWarning, match=r"no entry for 2 rated item ids, e\.g\. 2"):
        dataset = load_ratings(ratings, items=items)
    assert dataset.titles(np.array([1, 3])).tolist() == ["One", "[item 3]"]
    header_only = write(tmp_path / "h.csv", "id,title\n")
    with pytest.warns(UserWarning, match="no entry for 3 rated item ids"):
        assert len(load_ratings(ratings, items=header_only).items) == 0


# --- run records and the origin --------------------------------------------------------------------------


def test_the_origin_records_every_option_given_and_nothing_else(tmp_path: Path) -> None:
    path = write(tmp_path / "My Ratings.csv.gz", gzip.compress(text(ROWS).encode()))
    plain = load_ratings(path)
    assert plain.origin == {"ratings": str(path.resolve())} and plain.name == "My-Ratings"
    items = write(tmp_path / "i.csv", "isbn,title\n978-1,Dune\n978-2,Emma\n978-3,Ulysses\n")
    columns = {"user": "user", "item": "item", "rating": "rating"}
    full = load_ratings(
        path, columns=columns, sep=",", header=True, rating_scale=(1, 10), items=items, name="x"
    )
    assert full.name == "x" and full.origin == {
        "ratings": str(path.resolve()),
        "columns": columns,
        "sep": ",",
        "header": True,
        "rating_scale": [1, 10],
        "items": str(items.resolve()),
    }
    again = dataset_from_record({"dataset": "x", **full.origin}, "x")
    assert again.rating_scale == (1.0, 10.0) and again.ratings.equals(full.ratings)
    assert again.origin == full.origin and again.items.equals(full.items)


def test_a_run_record_of_a_headerless_file_read_with_header_false_reads_it_again(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", "a,b,3\n1,2,3\n2,3,4\n")  # a first line of data that looks like a header
    columns = {"user": "1", "item": "2", "rating": "3"}
    with pytest.raises(DataError, match="no column '1' for the users"):  # taken for a header by default
        load_ratings(path, columns=columns)
    first = load_ratings(path, columns=columns, header=False, sep=",")
    assert first.ratings["user"].tolist() == ["a", "1", "2"] and first.origin["header"] is False
    again = dataset_from_record(dict(first.origin), first.name)
    assert again.ratings.equals(first.ratings)


def test_a_run_record_whose_file_is_gone_says_where_the_place_is_recorded(tmp_path: Path) -> None:
    ratings = write(tmp_path / "r.csv", "user,item,rating\n1,1,4\n2,1,3\n")
    for record in (
        {"dataset": "r", "ratings": str(tmp_path / "gone.csv")},
        {"dataset": "r", "ratings": str(ratings), "items": str(tmp_path / "gone.csv")},
    ):
        with pytest.raises(
            DataError, match=r"gone\.csv \(recorded in its data\.json\), which is no longer there"
        ):
            dataset_from_record(record, "r")


def test_a_new_place_that_is_no_file_is_named_as_given_not_as_recorded(tmp_path: Path) -> None:
    """`--resume RUN --ratings TYPO`: the place given was said to be the one recorded in data.json, and
    to be 'no longer there', a file the user had never named."""
    ratings = write(tmp_path / "r.csv", "user,item,rating\n1,1,4\n2,1,3\n")
    record = {"dataset": "r", "ratings": str(ratings)}
    with pytest.raises(DataError, match=r"^`ratings` \S*typo\.csv: no such file$"):
        relocated(record, {"ratings": tmp_path / "typo.csv"})
    assert relocated(record, {"ratings": ratings, "items": None}) == record


def test_a_run_without_its_data_record_says_so(tmp_path: Path) -> None:
    with pytest.raises(
        DataError, match=r"the run's data\.json, which says where its data 'r' came from, is missing"
    ):
        dataset_from_record({}, "r")


@pytest.mark.parametrize(
    ("file_name", "expected"),
    [
        ("ratings.csv.gz", "ratings"),
        ("BX-Book-Ratings.csv", "BX-Book-Ratings"),
        ("my ratings (2024).tsv.zst", "my-ratings--2024"),
        ("data.parquet", "data"),
        (".csv", "ratings"),
    ],
)
def test_the_dataset_is_named_after_its_file(file_name: str, expected: str) -> None:
    assert data_name(Path(file_name)) == expected


# --- DataFrames -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"rating": [1.0, np.inf, 3.0]}, "rating 'inf' on row 2 is infinite, or beyond 3.4e"),
        ({"rating": ["1", "2", "many"]}, "rating 'many' on row 3 is not a number"),
        ({"user": pd.array([1, None, 3], dtype="Int64")}, "missing user id on row 2"),
        ({"item": ["a", None, "c"]}, "missing item id on row 2"),
        ({"item": ["a", "", "c"]}, "missing item id on row 2"),
        ({"rating": [2.0, 2.0, 2.0]}, "every rating is 2"),
        ({"when": [1, 2, None]}, "missing timestamp on row 3"),
        ({"when": pd.to_datetime(["2024-01-01", None, "2024-01-02"])}, "missing timestamp on row 2"),
        ({"when": [1.0, 1e20, 2.0]}, "timestamp '1e\\+20' on row 2 is not a time"),
        ({"when": ["2024-01-01", "1000", "2024-01-02"]}, "timestamp '1000' on row 2 is not a time"),
        ({"user": [True, False, True]}, "user ids are true/false values"),
    ],
)
def test_a_bad_frame_is_named_by_row(change: dict[str, object], expected: str) -> None:
    frame = pd.DataFrame({"user": [1, 2, 3], "item": ["a", "b", "c"], "rating": [1.0, 2.0, 3.0]})
    with pytest.raises(DataError, match=expected) as error:
        RatingsDataset.from_frame(frame.assign(**change))
    assert str(error.value).startswith("the ratings frame: ") and "\n" not in str(error.value)


def test_a_frame_keeps_its_ids_types_and_reads_its_times() -> None:
    frame = pd.DataFrame(
        {
            "customer": pd.Categorical(["b", "a", "b"]),
            "sku": np.array([2**63 + 1, 5, 6], dtype=np.uint64),
            "stars": [1, 5, 3],
            "created_at": pd.to_datetime(["1970-01-02", "1970-01-01", "1970-01-03"]).tz_localize("UTC"),
        },
        index=[10, 20, 30],  # a filtered frame: row numbers are positions, not labels
    )
    dataset = RatingsDataset.from_frame(frame, rating_scale=(1, 5))
    ratings = dataset.ratings
    assert ratings["user"].tolist() == ["b", "a", "b"]
    assert ratings["item"].tolist() == ["9223372036854775809", "5", "6"]
    assert ratings["timestamp"].tolist() == [86_400, 0, 172_800]
    with pytest.raises(DataError, match="rating 5 on row 2 is outside `rating_scale` 1,4"):
        RatingsDataset.from_frame(frame, rating_scale=(1, 4))


def test_a_frame_indexed_by_its_times_reads_them() -> None:
    """Regression: a frame with its times as its index (`set_index("date")`, a frame of events) had
    them passed over, silently, and its row order taken for time; `timestamp="date"` was refused."""
    frame = pd.DataFrame(
        {
            "user": [1, 1, 2, 2],
            "item": [1, 2, 1, 2],
            "rating": [1.0, 2.0, 3.0, 4.0],
            "date": pd.to_datetime(["1970-01-03", "1970-01-01", "1970-01-02", "1970-01-04"]),
        }
    )
    days = [2 * 86_400, 0, 86_400, 3 * 86_400]
    for indexed, named in [(frame.set_index("date"), None), (frame.set_index(["user", "date"]), "date")]:
        assert RatingsDataset.from_frame(indexed, timestamp=named).ratings["timestamp"].tolist() == days
        assert RatingsDataset.from_frame(indexed, timestamp=named).ratings["user"].tolist() == [1, 1, 2, 2]
    # A column of the name comes first: the index is no second column of it.
    renamed = frame.set_index("date").rename_axis("user")
    assert RatingsDataset.from_frame(renamed).ratings["timestamp"].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("dtype", ["UInt64", "uint64[pyarrow]"])
def test_a_frames_nullable_unsigned_ids_past_int64_keep_their_spelling(dtype: str) -> None:
    # Regression: pandas' and Arrow's uint64 ids of 2**63 and more wrapped round to negative int64 ids,
    # as numpy's did not.
    big = pd.array([2**63 + 1, 5], dtype=dtype)
    frame = pd.DataFrame({"user": big, "item": [1, 2], "rating": [1.0, 2.0]})
    assert RatingsDataset.from_frame(frame).ratings["user"].tolist() == ["9223372036854775809", "5"]
    small = frame.assign(user=pd.array([3, 5], dtype=dtype))
    assert RatingsDataset.from_frame(small).ratings["user"].tolist() == [3, 5]


def test_a_frame_with_duplicates_keeps_the_latest() -> None:
    frame = pd.DataFrame({"user": [1, 1, 2], "item": [1, 1, 1], "rating": [5.0, 1.0, 3.0], "ts": [9, 3, 1]})
    with pytest.warns(UserWarning, match="the ratings frame: 1 duplicate"):
        ratings = RatingsDataset.from_frame(frame).ratings
    assert ratings["rating"].tolist() == [5.0, 3.0]  # the later time, not the later row


def test_an_items_frame_may_have_any_labels() -> None:
    ratings = pd.DataFrame({"user": [1, 2], "item": [7, 8], "rating": [1.0, 2.0]})
    # Regression: integer column labels raised KeyError('0') instead of reading id, title by position.
    items = pd.DataFrame({0: [7, 8], 1: ["Seven", "Eight"]})
    assert RatingsDataset.from_frame(ratings, items=items).titles(np.array([8, 7])).tolist() == [
        "Eight",
        "Seven",
    ]
    with pytest.raises(DataError, match="the items frame: missing item id on row 2"):
        RatingsDataset.from_frame(ratings, items=pd.DataFrame({"id": [7, None], "title": ["Seven", "?"]}))
    with pytest.raises(DataError, match="the items frame: an item table needs an id and a title column"):
        RatingsDataset.from_frame(ratings, items=pd.DataFrame({"id": [7]}))
    # Regression: an infinite id passed `x == round(x)` and became int64's lowest value.
    for huge in (np.inf, 1e30):
        with pytest.raises(DataError, match=r"item id .* on row 2 is not an integer"):
            RatingsDataset.from_frame(ratings, items=pd.DataFrame({"id": [7.0, huge], "title": ["a", "b"]}))


def test_an_item_table_repeating_an_id_keeps_its_first_title_and_says_so() -> None:
    ratings = pd.DataFrame({"user": [1, 2], "item": [7, 8], "rating": [1.0, 2.0]})
    items = pd.DataFrame({"item": [7, 8, 7], "title": ["Seven", "Eight", "Other seven"]})
    with pytest.warns(
        UserWarning, match="the items frame: 1 item entry repeats an id named before, the first 7 on row 3"
    ):
        dataset = RatingsDataset.from_frame(ratings, items=items)
    assert dataset.items["item"].tolist() == [7, 8] and dataset.titles(np.array([7])).tolist() == ["Seven"]


def test_a_frame_naming_a_column_twice_is_refused() -> None:
    """One label would select two columns: pandas' own error named neither the frame nor the label."""
    ratings = pd.DataFrame({"user": [1, 2], "item": [7, 8], "rating": [1.0, 2.0]})
    with pytest.raises(DataError, match="the ratings frame: column 'rating' appears more than once"):
        RatingsDataset.from_frame(pd.concat([ratings, ratings[["rating"]]], axis=1))
    items = pd.DataFrame([[7, "Seven", "7"], [8, "Eight", "8"]], columns=["item", "title", "title"])
    with pytest.raises(DataError, match="the items frame: column 'title' appears more than once"):
        RatingsDataset.from_frame(ratings, items=items)


def test_a_given_scale_may_be_a_numpy_array() -> None:
    ratings = pd.DataFrame({"user": [1, 2], "item": [7, 8], "rating": [1.0, 2.0]})
    dataset = RatingsDataset.from_frame(ratings, rating_scale=np.array([1.0, 5.0]))  # type: ignore[arg-type]
    assert dataset.rating_scale == (1.0, 5.0)


@pytest.mark.parametrize("scale", [(1,), ("1", "5"), (True, 5), 5, (5, 1), (1, np.nan)])
def test_a_given_scale_that_is_not_two_numbers_low_first_is_refused(scale: object) -> None:
    ratings = pd.DataFrame({"user": [1, 2], "item": [7, 8], "rating": [1.0, 2.0]})
    with pytest.raises(DataError, match=r"the ratings frame: `rating_scale` .*: expected finite LO < HI"):
        RatingsDataset.from_frame(ratings, rating_scale=scale)  # type: ignore[arg-type]


def test_sniff_reports_the_layout(tmp_path: Path) -> None:
    layout = ratings_file.sniff(
        write(tmp_path / "r.csv", "\n\nuser;isbn;rating\n1;0345;3\n"), None, None, None
    )
    assert (layout.sep, layout.header, layout.names, layout.skip) == (
        ";",
        True,
        ["user", "isbn", "rating"],
        2,
    )
    assert (
        layout.zero_led == frozenset({"isbn"}) and layout.compression is None and layout.encoding == "utf-8"
    )
    headerless = ratings_file.sniff(write(tmp_path / "h.gz", gzip.compress(b"1\t2\t3\n")), None, None, None)
    assert (headerless.sep, headerless.header, headerless.names) == ("\t", False, ["1", "2", "3"])
    assert headerless.compression == "gzip"


def test_an_items_file_that_is_a_folder_is_named_as_the_items_file(tmp_path: Path) -> None:
    ratings = write(tmp_path / "ratings.csv", text(ROWS))
    folder = tmp_path / "titles"
    folder.mkdir()
    with pytest.raises(DataError, match="is a folder") as error:
        load_ratings(ratings, items=folder)
    message = str(error.value)
    assert message.startswith(f"{folder}: ") and "ratings" not in message.removeprefix(str(folder))


@pytest.mark.parametrize("lines_before", [1, 60])  # the quote within the sniffed lines, and past them
def test_a_quote_never_closed_is_named_by_its_line(tmp_path: Path, lines_before: int) -> None:
    rows = [(user, item, 1 + (user + item) % 5, 100 + item) for user in range(4) for item in range(20)]
    before, after = rows[:lines_before], rows[lines_before:]
    content = text(before) + '1,"2,3,4\n' + text(after, header=None)
    with pytest.raises(DataError, match=rf"line {lines_before + 2} opens a quote .* never closed"):
        load_ratings(write(tmp_path / "ratings.csv", content))


@pytest.mark.parametrize("third", ["1609682369", "1609682369000", "2021-01-03 13:59:29", "2021-01-03"])
@pytest.mark.parametrize("implicit", [None, True])
def test_times_in_the_third_column_of_a_headerless_file_are_not_read_as_ratings(
    third: str, implicit: bool | None, tmp_path: Path
) -> None:
    # Regression: a headerless export of events (user, item, seconds since 1970) had its times read as
    # ratings of a scale 1.6e9-1.61e9 (or as event weights), its repeats dropped rather than counted.
    path = write(tmp_path / "plays.csv", f"u1,i1,{third}\nu2,i1,{third}\nu1,i2,{third}\n")
    with pytest.raises(
        DataError, match=r"plays.csv: .*third column.*times.*`columns` user=1,item=2,timestamp=3"
    ):
        load_ratings(path, implicit=implicit)
    named = load_ratings(path, columns={"user": "1", "item": "2", "timestamp": "3"})
    assert named.implicit and len(named.ratings) == 3


def test_times_in_the_third_of_four_headerless_columns_point_to_the_ratings_in_the_fourth(
    tmp_path: Path,
) -> None:
    """Regression: the error for user, item, time, rating without a header suggested
    `user=1,item=2,rating=3`, which reads the times as the ratings; it names the fourth column now."""
    path = write(tmp_path / "ratings.csv", "u1,i1,1609682369,5\nu2,i1,1609682370,3\nu1,i2,1609682371,4\n")
    with pytest.raises(DataError, match=r"holds times .*`columns` user=1,item=2,timestamp=3,rating=4$"):
        load_ratings(path)
    named = load_ratings(path, columns={"user": "1", "item": "2", "timestamp": "3", "rating": "4"})
    assert named.ratings["rating"].tolist() == [5, 3, 4]


@pytest.mark.parametrize("implicit", [None, True])
def test_text_in_the_third_of_four_headerless_columns_points_to_the_numbers_in_the_fourth(
    implicit: bool | None, tmp_path: Path
) -> None:
    """Regression: Last.fm's user, artist id, artist name, plays was refused as 'rating "Guns N' Roses"
    on line 1 is not a number', which does not say where the numbers are or how to name them."""
    lines = ["u1\ta-1\tGuns N' Roses\t2101", "u2\ta-2\tSigur Rós\t17", "u1\ta-2\tSigur Rós\t3"]
    path = write(tmp_path / "plays.tsv", "\n".join(lines) + "\n")
    with pytest.raises(
        DataError,
        match=r"plays.tsv: .*third column .* holds text \(\"Guns N' Roses\"\) and column 4 numbers; "
        r".*`columns` user=1,item=2,rating=4 \(or weight=4",
    ):
        load_ratings(path, implicit=implicit)
    named = load_ratings(path, columns={"user": "1", "item": "2", "weight": "4"})
    assert named.implicit and len(named.ratings) == 3


def test_jesters_two_tabs_between_fields_read_as_user_item_rating(tmp_path: Path) -> None:
    """Regression: jester_ratings.dat ("1\t\t5\t\t0.219") was refused as 5 columns without a header,
    with advice (user=1,item=2,rating=3) that read its empty columns."""
    path = write(tmp_path / "jester_ratings.dat", "1\t\t5\t\t0.219\n1\t\t7\t\t-9.281\n2\t\t5\t\t-9.688\n")
    ratings = load_ratings(path).ratings
    assert ratings["user"].tolist() == [1, 1, 2] and ratings["item"].tolist() == [5, 7, 5]
    assert ratings["rating"].tolist() == pytest.approx([0.219, -9.281, -9.688])


def test_large_ratings_in_a_headerless_file_are_still_ratings(tmp_path: Path) -> None:
    # Not every big number is a time: one row below 1e8 keeps the column as ratings.
    path = write(tmp_path / "r.csv", "u1,i1,150000000\nu2,i1,5\nu1,i2,1000\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the scale rests on one far rating: warned of, not refused
        assert load_ratings(path).ratings["rating"].tolist() == [150000000, 5, 1000]


def test_one_rating_value_throughout_points_to_interactions(tmp_path: Path) -> None:
    # A purchase export with a constant 1 as its rating: refused as ratings, read with `implicit`.
    path = write(tmp_path / "bought.csv", "user,item,rating\nu1,i1,1\nu2,i1,1\nu2,i2,1\nu1,i1,1\n")
    with pytest.raises(DataError, match=r"every rating is 1; .*as interactions with `implicit`"):
        load_ratings(path)
    assert load_ratings(path, implicit=True).ratings["rating"].tolist() == [1, 1, 2]


def test_an_unread_column_of_numbers_beside_interactions_is_warned_of(tmp_path: Path) -> None:
    """`value` is no common name for a weight: each row counted as one event, silently, had the
    column held each event's weight. Ids, times and named weights are no cause for a warning."""
    events = "u1,i1,3,17,1609682369\nu2,i1,1,18,1609682370\nu1,i2,2,19,1609682371\n"
    path = write(tmp_path / "plays.csv", "user,item,value,session_id,ts\n" + events)
    with pytest.warns(
        UserWarning, match=r"plays.csv: .*column 'value' holds numbers .*`columns` weight=value"
    ):
        counted = load_ratings(path)
    assert counted.ratings["rating"].tolist() == [1, 1, 1]
    frame = pd.read_csv(path)
    frame.to_parquet(tmp_path / "plays.parquet")
    with pytest.warns(UserWarning, match=r"plays.parquet: .*column 'value' holds numbers"):
        load_ratings(tmp_path / "plays.parquet")
    quiet = {
        "weighed.csv": "user,item,plays,session_id\nu1,i1,3,17\nu2,i1,1,18\n",
        "rated.csv": "user,item,rating,price\nu1,i1,3,17\nu2,i1,1,18\nu2,i2,5,2\n",
        "ids.csv": "user,item,session_id,when\nu1,i1,17,1609682369\nu2,i1,18,1609682370\n",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, text in quiet.items():
            load_ratings(write(tmp_path / name, text))
    assert load_ratings(path, columns={"weight": "value"}).ratings["rating"].tolist() == [3, 1, 2]


@pytest.mark.parametrize(
    ("items", "kept"),
    [
        (["3.1", "3.10", "3.2", "3.20"], ["3.1", "3.10", "3.2", "3.20"]),  # one decimal place apart
        (["5", "5.0", "6", "7"], ["5", "5.0", "6", "7"]),
        (["1e3", "1000", "12", "13"], ["1e3", "1000", "12", "13"]),
        (["37", "8", "inf", "9"], ["37", "8", "inf", "9"]),
    ],
)
def test_ids_that_read_as_decimals_keep_their_spelling(
    items: list[str], kept: list[str], tmp_path: Path
) -> None:
    """polars takes such a column for floats: "3.10" would become 3.1, one id with "3.1"."""
    rows = [(f"u{k}", item, 1 + k % 5) for k, item in enumerate(items)]
    dataset = load_ratings(write(tmp_path / "r.csv", text(rows, header="user,item,rating")))
    assert dataset.ratings["item"].tolist() == kept


def test_a_utf8_file_with_one_latin1_line_is_read_as_latin1_with_a_warning(tmp_path: Path) -> None:
    lines = [f"josé{k},crème{k % 3},{1 + k % 5}".encode() for k in range(6)]
    lines[3] = b"jos\xe9 3,cr\xe8me0,4"
    path = write(tmp_path / "r.csv", b"user,item,rating\n" + b"\n".join(lines) + b"\n")
    with pytest.warns(UserWarning, match="read as Latin-1, since line 5 is not UTF-8, but other lines hold"):
        load_ratings(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a file all Latin-1 is read without a word
        load_ratings(
            write(tmp_path / "l.csv", "user,item,rating\njos\xe9,cr\xe8me,4\na,b,3\n".encode("latin-1"))
        )


def test_a_repeated_column_name_in_a_ratings_header_is_refused(tmp_path: Path) -> None:
    """polars would read the first of the two: the user cannot tell which was taken."""
    path = write(tmp_path / "r.csv", "user,item,rating,rating\n1,2,0,5\n2,3,1,4\n")
    with pytest.raises(DataError, match="column 'rating' appears more than once"):
        load_ratings(path)
    with pytest.raises(DataError, match="column 'rating' appears more than once"):
        load_ratings(path, columns={"user": "user", "item": "item", "rating": "rating"})
    unread = write(tmp_path / "u.csv", "user,item,rating,note,note\n1,2,5,a,b\n2,3,4,c,d\n")
    assert len(load_ratings(unread).ratings) == 2  # a column not read may repeat


def test_an_item_table_of_integer_ids_gives_titles_to_text_ids_that_spell_them(tmp_path: Path) -> None:
    """The ratings' ids are text (one is not an integer), so the table's "10" must stay text too."""
    ratings = write(tmp_path / "r.csv", "user,item,rating\n1,10,4\n1,x1,2\n2,10,5\n2,20,3\n")
    items = write(tmp_path / "i.csv", "item,title\n10,Ten\n20,Twenty\n")
    with pytest.warns(UserWarning, match="no entry for 1 rated item id, e.g. x1"):
        dataset = load_ratings(ratings, items=items)
    assert dataset.titles(np.array(["10", "x1", "20"], dtype=object)).tolist() == [
        "Ten",
        "[item x1]",
        "Twenty",
    ]


def test_from_frame_refuses_items_that_are_not_a_frame() -> None:
    frame = pd.DataFrame({"user": [1, 2], "item": [10, 20], "rating": [4.0, 5.0]})
    with pytest.raises(TypeError, match=r"from_frame's `items` is a pandas or polars DataFrame .* got dict$"):
        RatingsDataset.from_frame(frame, items={"item": [10], "title": ["Ten"]})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"a pandas or polars DataFrame of ratings, got numpy\.ndarray$"):
        RatingsDataset.from_frame(frame.to_numpy())  # type: ignore[arg-type]


def test_from_frame_reads_a_polars_frame_as_the_same_pandas_frame() -> None:
    """Ids past 2**53 stay exact, and a frame's items come as titles: polars' own conversion to pandas
    turned an integer column with a gap into floats."""
    big = 2**63 + 5
    ratings = {"user": [1, big, big + 2], "item": [10, 20, 10], "rating": [4.0, 5.0, 3.0]}
    items = {"item": [10, 20], "title": ["Ten", "Twenty"]}
    read = RatingsDataset.from_frame(
        pl.DataFrame(ratings, schema_overrides={"user": pl.UInt64}), items=pl.DataFrame(items)
    )
    expected = RatingsDataset.from_frame(
        pd.DataFrame(ratings).astype({"user": "uint64"}), items=pd.DataFrame(items)
    )
    assert read.ratings["user"].tolist() == ["1", str(big), str(big + 2)]
    pd.testing.assert_frame_equal(read.ratings, expected.ratings)
    assert read.titles(np.array([20, 10])).tolist() == ["Twenty", "Ten"]
    with pytest.raises(DataError, match="missing item id on row 2"):
        RatingsDataset.from_frame(pl.DataFrame({"user": [1, 2], "item": [10, None], "rating": [4.0, 5.0]}))


def test_period_timestamps_are_their_start_in_seconds() -> None:
    frame = pd.DataFrame({"user": [1, 2, 3], "item": [10, 20, 10], "rating": [4.0, 5.0, 3.0]})
    months = pd.period_range("2024-01", periods=3, freq="M")
    dataset = RatingsDataset.from_frame(frame.assign(timestamp=months))
    assert dataset.ratings["timestamp"].tolist() == [1704067200, 1706745600, 1709251200]  # 1 Jan, Feb, Mar


def test_an_item_table_without_a_separator_found_says_how_to_save_it(tmp_path: Path) -> None:
    """--sep names the ratings file's separator alone: the item table's error must not advise it."""
    ratings = write(tmp_path / "r.csv", "user,item,rating\n1,1,4\n2,2,5\n")
    items = write(tmp_path / "i.txt", "item title\n1 The film number 1\n2 The film number two here\n")
    with pytest.raises(DataError, match="cannot tell the separator of this table") as error:
        load_ratings(ratings, items=items)
    assert "`sep`" not in str(error.value)


def test_the_rating_column_named_for_another_field_is_not_read_as_interactions(tmp_path: Path) -> None:
    """Taken for the timestamps, `rating` leaves no rating column: a table the user meant as ratings
    would silently become interactions (every pair of strength 1)."""
    frame = pd.DataFrame({"user": [1, 2, 3], "item": [10, 20, 10], "rating": [1.0, 5.0, 3.0]})
    with pytest.raises(DataError, match="column 'rating' is named for the timestamps, so no column holds"):
        RatingsDataset.from_frame(frame, timestamp="rating")
    assert RatingsDataset.from_frame(frame, timestamp="rating", implicit=True).implicit  # as asked
    path = write(tmp_path / "r.csv", "u,i,rating\n1,2,100\n2,3,200\n")
    with pytest.raises(DataError, match="named for the timestamps"):
        load_ratings(path, columns={"user": "u", "item": "i", "timestamp": "rating"})
    events = load_ratings(path, columns={"user": "u", "item": "i", "weight": "rating"})  # weights: meant so
    assert events.implicit and events.ratings["rating"].tolist() == [100.0, 200.0]


def test_a_minus_zero_id_is_not_the_id_zero(tmp_path: Path) -> None:
    """As a number "-0" is 0: like a leading zero, it keeps its column as text."""
    path = write(tmp_path / "r.csv", "user,item,rating\na,0,4\nb,-0,5\nc,7,3\n")
    assert load_ratings(path).ratings["item"].tolist() == ["0", "-0", "7"]


def test_a_quote_inside_an_unquoted_field_is_named_by_its_line(tmp_path: Path) -> None:
    """polars fails on such a file without a line; the error names the first and says how to quote."""
    rows = [f'c{k},12" vinyl {k},{1 + k % 5}' for k in range(60)]
    path = write(tmp_path / "r.csv", "user,item,rating\n" + "\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"line 2 has a quote \(\"\) inside a field that does not start"):
        load_ratings(path)


def test_a_quote_that_closes_a_field_before_its_end_is_named_by_its_line(tmp_path: Path) -> None:
    """Regression: Last.fm's artist names ("Weird Al" Yankovic, in a tab-separated file) failed with
    polars' 'could not parse ... as dtype str', naming no line and no fix."""
    ratings = write(tmp_path / "r.tsv", "user\tartist_id\tplays\nu1\ta1\t3\nu2\ta2\t5\n")
    items = write(tmp_path / "artists.tsv", 'artist_id\tname\na1\tBeyoncé\na2\t"Weird Al" Yankovic\n')
    with pytest.raises(
        DataError,
        match=r"artists.tsv: line 3 has a quote \(\"\) closing a quoted field before its end; .*Weird",
    ):
        load_ratings(ratings, items=items)
    fine = write(tmp_path / "fine.tsv", 'artist_id\tname\na1\t"Dune\tPart ""1"""\na2\tBeyoncé\n')
    assert load_ratings(ratings, items=fine).titles(np.array(["a1"])).tolist() == ['Dune\tPart "1"']


@pytest.mark.parametrize("asin", ["B000GKXY4S", "0345391802"])
def test_amazons_headerless_ratings_put_the_item_first_and_are_read_so(asin: str, tmp_path: Path) -> None:
    """Regression: Amazon's ratings files (item, user, rating, timestamp, no header) were read by
    position as user, item, ...: products trained as users, reviewers as items, without a word."""
    lines = [f"{asin},A2SUAM1J3GNN3B,5.0,1370044800", "B00004Y2UT,A3SGXH7AUHU8GW,3.0,1370131200"]
    path = write(tmp_path / "ratings_Books.csv", "\n".join(lines) + "\n")
    with pytest.warns(
        UserWarning, match=r"Amazon's product ids .* `columns` user=1,item=2,rating=3,timestamp=4"
    ):
        ratings = load_ratings(path).ratings
    assert list(ratings["user"].astype(str)) == ["A2SUAM1J3GNN3B", "A3SGXH7AUHU8GW"]
    assert list(ratings["item"].astype(str)) == [asin, "B00004Y2UT"]
    named = load_ratings(path, columns={"user": "1", "item": "2", "rating": "3", "timestamp": "4"})
    assert list(named.ratings["user"].astype(str)) == [asin, "B00004Y2UT"]
