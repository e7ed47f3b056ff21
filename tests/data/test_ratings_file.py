"""recsys.data.ratings_file and ratings_table: a user's own ratings, from files of every common shape
and from DataFrames, checked as the MovieLens files are."""

import bz2
import gzip
import lzma
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from recsys.data import ratings_file
from recsys.data.catalog import dataset_from_record
from recsys.data.dataset import RatingsDataset
from recsys.data.ratings_file import load_ratings
from recsys.data.ratings_table import describe_scale, rating_step
from recsys.errors import DataError

ROWS = [
    ("ann", "978-1", 8, 100),
    ("bob", "978-1", 6, 101),
    ("ann", "978-2", 10, 102),
    ("cy", "978-3", 2, 103),
]
HEADER = "user,item,rating,timestamp"


def text(rows: list[tuple[object, ...]], sep: str = ",", header: str | None = HEADER) -> str:
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
    with pytest.raises(DataError, match=r"5 columns and no header; .*--columns user=1"):
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


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("user,item,rating\n1,2,3\n\n2,3,x\n", "rating 'x' on line 4 is not a number"),
        ("user,item,rating\n1,2,3\n2,3,inf\n", "rating 'inf' on line 3 is not finite"),
        ("user,item,rating\n1,2,3\n2,3,\n", "missing rating on line 3"),
        ("user,item,rating\n1,2,3\n\n\n,3,4\n", "missing user id on line 5"),
        ("user,item,rating\n1,2,3\n2,3,4,5\n", "line 3 has 4 fields; expected 3"),
        ("user,item,rating,time\n1,2,3,5\n2,3,4,later\n", "timestamp 'later' on line 3 is not a time"),
        ("user,item,rating,time\n1,2,3,5\n2,3,4,\n", "missing timestamp on line 3"),
        ("user,item,rating\n1,2,3\n2,3,3\n", "every rating is 3"),
        ("user,item\n1,2\n", "no rating column .* explicit ratings"),
        ("1,2\n3,4\n", "no rating column .* explicit ratings"),
        ("reader,thing,rating\n1,2,3\n", "cannot tell which column holds the item ids"),
        ("", "file is empty"),
        ("\n\n", "file is empty"),
        ("user,item,rating\n", "no ratings in file"),
        ("1::2::3::4\n", "'::' .* --dataset ml-1m"),
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
    ],
)
def test_broken_binary_files_are_one_line(content: bytes, expected: str, tmp_path: Path) -> None:
    path = write(tmp_path / "r.bin", content)
    with pytest.raises(DataError, match=expected) as error:
        load_ratings(path)
    assert "\n" not in str(error.value)


def test_latin1_text_is_read(tmp_path: Path) -> None:
    content = '"User-ID";"ISBN";"Book-Rating"\n"1";"034545104X";"5"\n"Jos\xe9";"0155061224";"8"\n'
    ratings = load_ratings(write(tmp_path / "bx.csv", content.encode("latin-1"))).ratings
    assert ratings["user"].tolist() == ["1", "José"]
    assert ratings["item"].tolist() == ["034545104X", "0155061224"]


def test_a_given_scale_checks_every_rating_and_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", text(ROWS))
    assert load_ratings(path, rating_scale=(1, 10)).rating_scale == (1.0, 10.0)
    with pytest.raises(DataError, match="rating 8 on line 2 is outside --rating-scale 1,5"):
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
    with pytest.raises(DataError, match="item id 'abc' on row 1 is not an integer"):
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
        RatingsDataset.from_frame(frame[["userId", "isbn"]])
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
