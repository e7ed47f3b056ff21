"""recsys-train, recsys-recommend and recsys-compare on a user's own ratings file (--ratings)."""

import gzip
import json
from pathlib import Path

import pytest
from conftest import run_cli

from recsys.commands import compare as compare_command
from recsys.commands import recommend as recommend_command
from recsys.commands import train as train_command
from recsys.data.catalog import load_dataset
from recsys.data.dataset import RatingsDataset


@pytest.fixture(scope="module")
def books(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny ratings as a book shop's gzipped file: string ids, a header, a 1-10 scale; and titles."""
    tiny: RatingsDataset = load_dataset("tiny")
    folder = tmp_path_factory.mktemp("books")
    lines = ["reader,isbn,stars,when"]
    for user, item, rating, when in tiny.ratings.itertuples(index=False):
        lines.append(f"r{user:03d},978-{item:06d},{int(rating) * 2 - user % 2},{when}")  # 1 to 10
    ratings = folder / "ratings.csv.gz"
    ratings.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    titles = ["isbn,title"] + [f"978-{item:06d},Book {item}" for item in tiny.items["item"]]
    items = folder / "books.csv"
    items.write_text("\n".join(titles) + "\n")
    return ratings, items


def test_train_and_recommend_on_a_csv_with_string_ids_and_a_ten_point_scale(
    books: tuple[Path, Path], tmp_path: Path
) -> None:
    ratings, items = books
    out = tmp_path / "run"
    columns = "user=reader,item=isbn,rating=stars,timestamp=when"
    args = [
        "--ratings",
        str(ratings),
        "--items",
        str(items),
        "--columns",
        columns,
        "--epochs",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]
    trained = run_cli(train_command.cli, "train.py", args, tmp_path / "cache")
    assert trained.returncode == 0, trained.stderr
    assert "ratings: 1-10 in steps of 1" in trained.stderr and "test RMSE" in trained.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["y_range"] == [0.0, 11.0]  # follows the scale read from the data
    record = json.loads((out / "data.json").read_text())
    assert record["ratings"] == str(ratings.resolve())
    similar = run_cli(
        recommend_command.cli,
        "recommend.py",
        [str(out), "--similar", "Book 7", "--top", "3"],
        tmp_path / "cache",
    )
    assert similar.returncode == 0, similar.stderr
    assert "Book" in similar.stdout and "978-" in similar.stdout
    top = run_cli(
        recommend_command.cli, "recommend.py", [str(out), "--user", "r001", "--top", "2"], tmp_path / "cache"
    )
    assert top.returncode == 0, top.stderr
    resumed = run_cli(train_command.cli, "train.py", ["--resume", str(out)], tmp_path / "cache")
    assert resumed.returncode == 0 and "is finished" in resumed.stdout


def test_train_on_a_headerless_tsv(tmp_path: Path) -> None:
    tiny = load_dataset("tiny")
    path = tmp_path / "plain.tsv"
    path.write_text("".join(f"{u}\t{i}\t{r:g}\t{t}\n" for u, i, r, t in tiny.ratings.itertuples(index=False)))
    ran = run_cli(
        train_command.cli,
        "train.py",
        ["--ratings", str(path), "--epochs", "1", "--no-progress", "--out", str(tmp_path / "run")],
        tmp_path / "cache",
    )
    assert ran.returncode == 0, ran.stderr
    assert "on plain (4,000 ratings)" in ran.stdout


def test_compare_on_a_ratings_file(books: tuple[Path, Path], tmp_path: Path) -> None:
    ratings, _ = books
    args = [
        "--ratings",
        str(ratings),
        "--columns",
        "user=reader,item=isbn,rating=stars",
        "--epochs",
        "1",
        "--models",
        "dotbias",
        "--no-measurements",
        "--out",
        str(tmp_path / "report"),
    ]
    ran = run_cli(compare_command.cli, "compare.py", args, tmp_path / "cache")
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "report" / "report.md").is_file()
    assert "split random" in ran.stdout  # the default where the data has no ml-100k folds


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--ratings", "missing.csv"], "missing.csv"),
        (["--ratings", "r.csv", "--dataset", "tiny"], "drop --dataset"),
        (["--items", "i.csv"], "add --ratings PATH"),
    ],
)
def test_bad_own_data_flags_are_one_line(args: list[str], expected: str, tmp_path: Path) -> None:
    ran = run_cli(train_command.cli, "train.py", [*args, "--out", str(tmp_path / "run")], tmp_path / "cache")
    assert ran.returncode == 2 and ran.stderr.startswith("error: ") and ran.stderr.count("\n") == 1, (
        ran.stderr
    )
    assert expected in ran.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("content", "flags", "expected"),
    [
        ("one\ntwo\n", [], "name it with --sep"),
        ("user,item,rating\n1,2,3\n", ["--sep", ";"], "--sep ';' does not split its first line"),
        ("user,item,rating\n1,2,3\n2,3,8\n", ["--rating-scale", "1,5"], "is outside --rating-scale 1,5"),
        ("1,2,3,4,5\n2,3,4,5,6\n", [], "e.g. --columns user=1,item=2,rating=3"),
    ],
)
def test_the_data_errors_of_the_library_name_the_flags(
    content: str, flags: list[str], expected: str, tmp_path: Path
) -> None:
    """load_ratings names its parameters (`sep`); the command shows them as its flags (--sep)."""
    path = tmp_path / "r.csv"
    path.write_text(content)
    args = ["--ratings", str(path), *flags, "--no-progress", "--out", str(tmp_path / "run")]
    ran = run_cli(train_command.cli, "train.py", args, tmp_path / "cache")
    assert ran.returncode == 2 and ran.stderr.startswith("error: ") and ran.stderr.count("\n") == 1, (
        ran.stderr
    )
    assert expected in ran.stderr and "`" not in ran.stderr


def test_a_bayesian_autograd_fit_on_a_scale_of_hundreds_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    tiny = load_dataset("tiny")
    path = tmp_path / "hundreds.csv"
    rows = "".join(f"{u},{i},{(r - 1) * 25:g}\n" for u, i, r, _ in tiny.ratings.itertuples(index=False))
    path.write_text("user,item,rating\n" + rows)
    args = ["--ratings", str(path), "--rating-scale", "0,100", "--model", "bpmf", "--engine", "autograd"]
    ran = run_cli(train_command.cli, "train.py", [*args, "--out", str(tmp_path / "run")], tmp_path / "cache")
    error = ran.stderr.splitlines()[-1]  # after the line that reports the scale read
    assert ran.returncode == 2 and error.startswith("error: --engine autograd: bpmf on it"), ran.stderr
    assert "Traceback" not in ran.stderr and "use --engine compiled" in error
    assert not (tmp_path / "run").exists()
