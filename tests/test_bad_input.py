"""Duplicate ratings and unwritable output: stated policies, one-line errors."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recsys.data.movielens import read_ratings
from recsys.errors import DataError, RecsysError
from recsys.files import write_json

ROOT = Path(__file__).resolve().parent.parent


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


def test_unwritable_folder_is_a_recsys_error() -> None:
    with pytest.raises(RecsysError, match=r"cannot write /proc/recsys-test/metrics\.json"):
        write_json(Path("/proc/recsys-test/metrics.json"), {"a": 1})


def test_train_into_an_unwritable_folder_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RECSYS_DATA"} | {"RECSYS_CACHE": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "scripts/train.py", "--dataset", "tiny", "--epochs", "1", "--no-progress",
         "--out", "/proc/recsys-run"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert (
        result.stderr.startswith("error: --out /proc/recsys-run: cannot create it")
        and "Traceback" not in result.stderr
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("inf\t2\t3\t4", "user id inf in row 1"),
        ("-5\t2\t3\t4", "user id -5.0 in row 1"),
        ("9223372036854775808\t2\t3\t4", "user id 9.2"),
        ("1\t2\t3\t1.9", "timestamp 1.9 in row 1"),
        ("1\t2\t3\t1e30", "timestamp 1e\\+30 in row 1"),
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
