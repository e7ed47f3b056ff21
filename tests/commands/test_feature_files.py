"""train.py with --user-features and --item-features: bfm trains on them, the run records them (a
resume reads the run's data again from that record), and a bad file is one line naming file and line."""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import cut_short, run_cli

from recsys.commands import common
from recsys.commands import recommend as recommend_command
from recsys.commands import train as train_command
from recsys.commands import tune as tune_command
from recsys.config import config_for
from recsys.data.catalog import load_dataset, with_feature_files
from recsys.data.features import column_codings, read_feature_file
from recsys.models.feature_coding import saved_codings
from recsys.names import DATA_FILE
from recsys.train.checkpoints import load_checkpoint
from recsys.workflows.experiment import train_and_evaluate


def _users_file(path: Path, bad_line: bool = False) -> Path:
    users = np.unique(load_dataset("tiny").ratings["user"])
    lines = ["user,age,job"] + [f"{user},{20 + user % 40},{'ab'[user % 2]}" for user in users]
    if bad_line:
        lines[3] = lines[3].rsplit(",", 1)[0] + ","
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_bfm_trains_on_a_users_file_and_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    users = _users_file(tmp_path / "users.csv")
    out = tmp_path / "run"
    args = [
        "--dataset",
        "tiny",
        "--model",
        "bfm",
        "--epochs",
        "6",
        "--no-progress",
        "--user-features",
        str(users),
    ]
    ran = run_cli(train_command.cli, "train.py", [*args, "--out", str(out)], tmp_path / "cache")
    assert ran.returncode == 0, ran.stderr
    assert json.loads((out / DATA_FILE).read_text())["user_features"] == str(users.resolve())
    resumed = run_cli(train_command.cli, "train.py", ["--resume", str(out)], tmp_path / "cache")
    assert resumed.returncode == 0, resumed.stderr
    # Moved away: only a new user's cold start, which a row of the file places, needs it again.
    users.rename(tmp_path / "moved.csv")
    item = str(load_dataset("tiny").ratings["item"].iloc[0])
    for query in (["--similar", item], ["--rate", f"{item}=5"]):
        answer = run_cli(recommend_command.cli, "recommend.py", [str(out), *query], tmp_path / "cache")
        assert answer.returncode == 0, answer.stderr
    new_user = [str(out), "--user", "999999", "--cold-start"]
    monkeypatch.setattr(common, "_FLAG_OF", {})  # recommend.py's flags alone, as in a process of its own
    cold = run_cli(recommend_command.cli, "recommend.py", new_user, tmp_path / "cache")
    assert cold.returncode == 2 and str(users) in cold.stderr and "Traceback" not in cold.stderr
    # recommend.py has no --user-features: train.py's, not the data.json key, which no command reads.
    assert "resume the run with train.py's --user-features at its new place" in cold.stderr, cold.stderr
    moved = ["--resume", str(out), "--user-features", str(tmp_path / "moved.csv")]
    assert run_cli(train_command.cli, "train.py", moved, tmp_path / "cache").returncode == 0
    cold = run_cli(recommend_command.cli, "recommend.py", new_user, tmp_path / "cache")
    assert cold.returncode == 0 and "a cold start" in cold.stderr, cold.stderr


def test_a_feature_file_changed_after_training_is_refused_on_resume_and_new_users_coded_as_trained(
    tmp_path: Path,
) -> None:
    """Recoded columns with the same count of features would be read as the trained ones: a resume is
    refused. A new user's row is coded as training coded the file, whatever the file holds now: a
    user added to it since is placed by its features, and a changed one still folds in."""
    users, out, cache = _users_file(tmp_path / "users.csv"), tmp_path / "run", tmp_path / "cache"
    dataset = with_feature_files(load_dataset("tiny"), users, None)
    cut_short(dataset, config_for("bfm", dataset="tiny", epochs=4), out, 2)  # what --resume would continue
    item = dataset.ratings["item"].iloc[0]
    rated = run_cli(recommend_command.cli, "recommend.py", [str(out), "--rate", f"{item}=5"], cache)
    assert rated.returncode == 0, rated.stderr
    original = users.read_text()
    header, first, second, *rest = original.splitlines()
    swapped = [
        first.split(",")[0] + "," + second.split(",", 1)[1],
        second.split(",")[0] + "," + first.split(",", 1)[1],
    ]
    users.write_text("\n".join([header, *swapped, *rest]) + "\n", encoding="utf-8")  # coded alike
    ran = run_cli(train_command.cli, "train.py", ["--resume", str(out)], cache)
    assert ran.returncode == 2 and "the users' side features differ from the run's" in ran.stderr, ran.stderr
    users.write_text(original.replace(",b\n", ",c\n"), encoding="utf-8")  # the same count: a, c
    ran = run_cli(train_command.cli, "train.py", ["--resume", str(out)], cache)
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    (line,) = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert "user side features are coded otherwise" in line and "user feature file changed" in line
    again = run_cli(recommend_command.cli, "recommend.py", [str(out), "--rate", f"{item}=5"], cache)
    assert again.returncode == 0 and again.stdout == rated.stdout, again.stderr
    # A user added since (its age moves the file's mean, which training's coding keeps as it was).
    users.write_text(original + "999,59,b\n", encoding="utf-8")
    placed = run_cli(
        recommend_command.cli, "recommend.py", [str(out), "--user", "999", "--cold-start"], cache
    )
    assert placed.returncode == 0 and "placed by its side features" in placed.stdout + placed.stderr, (
        placed.stderr
    )
    (tmp_path / "trained.csv").write_text(original, encoding="utf-8")
    trained = column_codings(read_feature_file(tmp_path / "trained.csv", "user"))
    assert saved_codings(load_checkpoint(out).model, "user") == trained


def test_a_feature_file_with_a_missing_value_is_one_line_and_exit_2(tmp_path: Path) -> None:
    users = _users_file(tmp_path / "users.csv", bad_line=True)
    args = ["--dataset", "tiny", "--model", "bfm", "--no-progress", "--user-features", str(users)]
    ran = run_cli(train_command.cli, "train.py", [*args, "--out", str(tmp_path / "run")], tmp_path / "cache")
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    assert ran.stderr.strip().splitlines() == [f"error: {users}: job is missing on line 4"]


def _ids_file(path: Path, ids: np.ndarray) -> Path:
    path.write_text("user,job\n" + "".join(f"{user},a\n" for user in ids), encoding="utf-8")
    return path


def test_a_feature_file_that_names_none_or_few_of_the_users_is_said(tmp_path: Path) -> None:
    users = np.unique(load_dataset("tiny").ratings["user"])
    stranger = _ids_file(tmp_path / "strangers.csv", users + 100_000)
    args = ["--dataset", "tiny", "--model", "bfm", "--epochs", "2", "--no-progress"]
    ran = run_cli(train_command.cli, "train.py", [*args, "--user-features", str(stranger), "--out",
                                                   str(tmp_path / "a")], tmp_path / "cache")  # fmt: skip
    assert ran.returncode == 2 and "none of its 120 user ids is among the ratings' users" in ran.stderr
    few = _ids_file(tmp_path / "few.csv", users[:5])
    flags = [*args, "--user-features", str(few), "--out", str(tmp_path / "b")]
    ran = run_cli(train_command.cli, "train.py", flags, tmp_path / "cache")
    assert ran.returncode == 0 and "115 of the ratings' 120 users have no row" in ran.stderr
    dot = [
        "--dataset",
        "tiny",
        "--model",
        "dot",
        "--epochs",
        "1",
        "--no-progress",
        "--user-features",
        str(few),
    ]
    ran = run_cli(train_command.cli, "train.py", [*dot, "--out", str(tmp_path / "c")], tmp_path / "cache")
    assert ran.returncode == 0 and "dot reads no side features: --user-features is unused" in ran.stderr


@pytest.mark.parametrize(
    ("model_flags", "expected"),
    [
        (["--model", "bfm", "--features", "implicit"], "--features 'implicit' names no side features"),
        (
            ["--model", "svdpp"],
            "--features 'implicit' names no side features: --user-features and --item-features are",
        ),
        (
            ["--model", "svdpp", "--features", "side"],
            "svdpp reads the users' side features only: --item-features is",
        ),
    ],
)
def test_feature_files_a_run_does_not_read_are_said_to_be_unused(
    model_flags: list[str], expected: str, tmp_path: Path
) -> None:
    users = _users_file(tmp_path / "users.csv")
    items = np.unique(load_dataset("tiny").ratings["item"])
    (tmp_path / "items.csv").write_text("item,kind\n" + "".join(f"{item},{item % 3}\n" for item in items))
    files = ["--user-features", str(users), "--item-features", str(tmp_path / "items.csv")]
    args = [
        "--dataset",
        "tiny",
        *model_flags,
        "--epochs",
        "2",
        "--no-progress",
        *files,
        "--out",
        str(tmp_path / "r"),
    ]
    ran = run_cli(train_command.cli, "train.py", args, tmp_path / "cache")
    assert ran.returncode == 0 and expected in ran.stderr, ran.stderr


@pytest.mark.parametrize(("features", "unused"), [(["--features", "side"], False), ([], True)])
def test_tune_says_a_users_file_is_unused_only_where_its_trials_read_no_side_features(
    features: list[str], unused: bool, tmp_path: Path
) -> None:
    users = _users_file(tmp_path / "users.csv")
    args = ["--dataset", "tiny", "--model", "svdpp", *features, "--user-features", str(users)]
    args += ["--trials", "1", "--folds", "2", "--out", str(tmp_path / "tune")]
    ran = run_cli(tune_command.cli, "tune.py", args, tmp_path / "cache")
    assert ran.returncode == 0, ran.stderr
    assert ("--user-features is unused" in ran.stderr) == unused, ran.stderr


def test_a_cold_start_of_a_new_user_with_a_row_in_the_users_file_is_placed_by_its_features(
    tmp_path: Path,
) -> None:
    """recommend.py reads the run's feature files again for a cold start too: a new user the users'
    file describes is ranked by the rating its features predict, not by item bias."""
    users = _users_file(tmp_path / "users.csv")
    users.write_text(users.read_text() + "999999,31,a\n", encoding="utf-8")  # no ratings: a new user
    out, cache = tmp_path / "run", tmp_path / "cache"
    args = ["--dataset", "tiny", "--model", "bfm", "--members", "2", "--epochs", "4", "--no-progress"]
    ran = run_cli(
        train_command.cli, "train.py", [*args, "--user-features", str(users), "--out", str(out)], cache
    )
    assert ran.returncode == 0, ran.stderr
    described = run_cli(
        recommend_command.cli, "recommend.py", [str(out), "--user", "999999", "--cold-start"], cache
    )
    assert described.returncode == 0, described.stderr
    assert "a cold start, placed by its side features" in described.stderr
    assert described.stdout.split()[:3] == ["item", "title", "predicted"], described.stdout
    unknown = run_cli(
        recommend_command.cli, "recommend.py", [str(out), "--user", "888888", "--cold-start"], cache
    )
    assert unknown.returncode == 0 and "placed by" not in unknown.stderr, unknown.stderr
    assert unknown.stdout.split()[:3] == ["item", "title", "item_bias"], unknown.stdout


def test_a_cold_start_reads_the_users_file_alone_not_the_ratings(tmp_path: Path) -> None:
    """A cold start read the whole ratings file again (seconds at ML-25M's size) for the users' table:
    it now reads that table alone, so it answers with the ratings file moved away."""
    users = _users_file(tmp_path / "users.csv")
    users.write_text(users.read_text() + "999999,31,a\n", encoding="utf-8")
    ratings = tmp_path / "ratings.csv"
    load_dataset("tiny").ratings.to_csv(ratings, index=False)
    out, cache = tmp_path / "run", tmp_path / "cache"
    args = ["--ratings", str(ratings), "--model", "bfm", "--members", "1", "--epochs", "2", "--no-progress"]
    args += ["--user-features", str(users), "--out", str(out)]
    assert run_cli(train_command.cli, "train.py", args, cache).returncode == 0
    ratings.unlink()
    new_user = [str(out), "--user", "999999", "--cold-start"]
    cold = run_cli(recommend_command.cli, "recommend.py", new_user, cache)
    assert cold.returncode == 0 and "a cold start, placed by its side features" in cold.stderr, cold.stderr


def test_svdpp_told_to_read_side_features_of_data_with_item_features_alone_says_it_has_none(
    tmp_path: Path,
) -> None:
    """svdpp reads the users' table only: data with the items' alone (ml-latest-small's genres and tags)
    gives it no side features, which is said rather than trained as `--features ""` silently."""
    items = np.unique(load_dataset("tiny").ratings["item"])
    (tmp_path / "items.csv").write_text("item,kind\n" + "".join(f"{item},{item % 3}\n" for item in items))
    dataset = with_feature_files(load_dataset("tiny"), None, tmp_path / "items.csv")
    with pytest.warns(UserWarning, match="svdpp: `features` names side, but tiny has no user side features"):
        train_and_evaluate(
            dataset, config_for("svdpp", dataset="tiny", epochs=1, features="side"), progress=False
        )
