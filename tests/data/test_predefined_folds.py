"""ml-100k's predefined folds travel with the loaded dataset (recsys.data.movielens.PredefinedFolds);
the split stage only selects them."""

from pathlib import Path

import numpy as np
import pytest

from recsys.data.movielens import load_movielens
from recsys.data.splits import make_split
from recsys.errors import DataError
from recsys.names import PREDEFINED_FOLDS

ROWS = [(1, 10, 4, 101), (2, 10, 5, 103), (1, 20, 2, 102), (2, 30, 1, 104)]


def _tsv(rows: list[tuple[int, int, int, int]]) -> str:
    return "".join("\t".join(map(str, row)) + "\n" for row in rows)


def _folder(tmp_path: Path, base: list[tuple], test: list[tuple]) -> Path:
    folder = tmp_path / "ml-100k"
    folder.mkdir()
    (folder / "u.data").write_text(_tsv(ROWS))
    (folder / "u.genre").write_text("".join(f"Kind{i}|{i}\n" for i in range(19)))
    flags = "|".join(["0"] * 19)
    (folder / "u.item").write_text("".join(f"{i}|Made-up {i}|||x|{flags}\n" for i in (10, 20, 30)))
    (folder / "u1.base").write_text(_tsv(base))
    (folder / "u1.test").write_text(_tsv(test))
    return folder


def test_folds_are_row_positions_into_the_ratings_in_file_order(tmp_path: Path) -> None:
    base, test = [ROWS[2], ROWS[0], ROWS[1]], [ROWS[3]]  # the fold files list rows in their own order
    dataset = load_movielens("ml-100k", _folder(tmp_path, base, test), allow_download=False)
    assert list(dataset.folds) == list(PREDEFINED_FOLDS)
    train_rows, test_rows = dataset.folds["u1"]
    assert train_rows.tolist() == [2, 0, 1] and test_rows.tolist() == [3]
    split = make_split(dataset, "u1")
    assert split.train.index.tolist() == [2, 0, 1]  # the original row index is kept
    assert np.array_equal(split.train.to_numpy(), np.array(base, dtype=float))


def test_a_fold_is_read_only_when_asked_for(tmp_path: Path) -> None:
    dataset = load_movielens("ml-100k", _folder(tmp_path, ROWS[:3], ROWS[3:]), allow_download=False)
    make_split(dataset, "u1")  # u2..ub have no files here, and nothing asked for them
    with pytest.raises(DataError, match=r"u2\.base: file not found"):
        make_split(dataset, "u2")


def test_a_fold_row_missing_from_the_ratings_is_named(tmp_path: Path) -> None:
    stranger = (2, 20, 3, 105)
    dataset = load_movielens("ml-100k", _folder(tmp_path, ROWS[:3], [stranger]), allow_download=False)
    with pytest.raises(
        DataError, match=r"u1\.test: the rating on line 1 \(user 2, item 20\) is not in u\.data"
    ):
        make_split(dataset, "u1")
    changed = (2, 30, 5, 104)  # the pair is there, with another rating
    (tmp_path / "b").mkdir()
    other = load_movielens("ml-100k", _folder(tmp_path / "b", ROWS[:3], [changed]), allow_download=False)
    with pytest.raises(DataError, match=r"not in u\.data"):
        make_split(other, "u1")


def test_a_bad_value_in_u_data_is_named_by_its_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path, ROWS[:3], ROWS[3:])
    (folder / "u.data").write_text(_tsv(ROWS[:2]) + "2\tten\t5\t103\n" + _tsv(ROWS[2:]))
    with pytest.raises(DataError, match=r"u\.data: item id 'ten' on line 3 is not a non-negative integer"):
        load_movielens("ml-100k", folder, allow_download=False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_tsv(ROWS[:2]) + "1\t20\t7\t102\n", r"u1\.base: rating 7 on line 3 is outside the scale 1-5"),
        (
            _tsv(ROWS[:1]) + "\n-2\t10\t5\t103\n",
            r"u1\.base: user id -2 on line 3 is not a non-negative integer",
        ),
        (
            _tsv(ROWS[:1]) + "2\t10\t5\t103\t9\n",
            r"u1\.base: line 2 has 5 fields; expected 4, separated by tab",
        ),
        ("1\t10\t4\t101\t9\n", r"u1\.base: line 1 has 5 fields; expected 4, separated by tab"),
        (
            _tsv(ROWS[:1]) + "\n2\t20\t3\t105\n",
            r"u1\.base: the rating on line 3 \(user 2, item 20\) is not in",
        ),
    ],
    ids=[
        "rating off the scale",
        "negative id after a blank line",
        "extra field",
        "extra field first",
        "stranger",
    ],
)
def test_a_bad_value_in_a_fold_file_is_named_by_its_line(tmp_path: Path, text: str, message: str) -> None:
    dataset = load_movielens("ml-100k", _folder(tmp_path, ROWS[:3], ROWS[3:]), allow_download=False)
    (dataset.folder / "u1.base").write_text(text)
    with pytest.raises(DataError, match=message) as err:
        make_split(dataset, "u1")
    assert "\n" not in str(err.value)


def test_a_stranger_after_a_dropped_duplicate_is_named_by_its_pair(tmp_path: Path) -> None:
    dataset = load_movielens("ml-100k", _folder(tmp_path, ROWS[:3], ROWS[3:]), allow_download=False)
    (dataset.folder / "u1.base").write_text(_tsv([ROWS[0], ROWS[0], (2, 20, 3, 105)]))
    with pytest.warns(UserWarning, match="1 duplicate"), pytest.raises(DataError) as err:
        make_split(dataset, "u1")
    assert "u1.base: the rating of user 2, item 20 is not in u.data" in str(err.value)


def test_a_fold_file_cut_short_is_named(tmp_path: Path) -> None:
    """u1.base and u1.test share out every rating of u.data: a base missing one is a damaged copy."""
    dataset = load_movielens("ml-100k", _folder(tmp_path, ROWS[:2], ROWS[3:]), allow_download=False)
    with pytest.raises(DataError, match=r"u1\.base and u1\.test hold 2 \+ 1 ratings, where u\.data has 4"):
        make_split(dataset, "u1")


def test_a_ratings_file_short_of_what_u_info_states_is_named(tmp_path: Path) -> None:
    folder = _folder(tmp_path, ROWS[:3], ROWS[3:])
    (folder / "u.info").write_text("2 users\n3 items\n5 ratings\n")
    with pytest.raises(DataError, match=r"u\.data: 4 ratings where u\.info states 5"):
        load_movielens("ml-100k", folder, allow_download=False)
    (folder / "u.info").write_text("2 users\n3 items\n4 ratings\n")
    assert len(load_movielens("ml-100k", folder, allow_download=False).ratings) == 4


def test_asking_which_folds_there_are_reads_no_fold_file(tmp_path: Path) -> None:
    folder = _folder(tmp_path, ROWS[:3], ROWS[3:])
    (folder / "u1.base").unlink()  # a --split random run needs no fold file, and reads none
    dataset = load_movielens("ml-100k", folder, allow_download=False)
    assert "u1" in dataset.folds and "u9" not in dataset.folds
    assert dataset.default_split == "u1"
    make_split(dataset, "random")
    with pytest.raises(DataError, match=r"u1\.base: file not found"):
        make_split(dataset, "u1")


def test_a_rating_in_both_parts_of_a_fold_is_named(tmp_path: Path) -> None:
    """The counts add up, but a test rating also in base (so one of u.data in neither) would leak the
    test into training."""
    dataset = load_movielens("ml-100k", _folder(tmp_path, ROWS[:3], [ROWS[0]]), allow_download=False)
    with pytest.raises(DataError, match=r"u1\.base and u1\.test list a rating in both"):
        make_split(dataset, "u1")
