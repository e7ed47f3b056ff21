"""recsys.commands.recommend: `recsys-recommend` (scripts/recommend.py) as a user runs it, on a small
model trained once on the tiny sample.

The runs go through the command's `cli()` in this process (conftest.run_cli); one test also runs
scripts/recommend.py as a subprocess, as a user does (slow: a torch import).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Ran, cut_short, run_cli

from recsys.commands import recommend as recommend_command
from recsys.commands import train as train_command
from recsys.config import config_for
from recsys.data.catalog import TINY_FOLDER, load_dataset
from recsys.data.encoding import IdMap
from recsys.names import CHECKPOINT_FILE, RECOMMEND_FILE
from recsys.train.checkpoints import Checkpoint, load_checkpoint
from recsys.workflows.experiment import train_and_evaluate
from recsys.workflows.recommend_data import RecommendData
from recsys.workflows.run_folder import LOCK_FILE


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dotbias run folder, trained briefly on tiny."""
    folder = tmp_path_factory.mktemp("run")
    config = config_for("dotbias", dataset="tiny", epochs=3, batch_size=128)
    train_and_evaluate(load_dataset("tiny"), config, run_dir=folder, progress=False)
    return folder


@pytest.fixture(scope="module")
def checkpoint(run_dir: Path) -> Checkpoint:
    return load_checkpoint(run_dir / CHECKPOINT_FILE)


def run_script(*args: str, cache: Path, subprocess_: bool = False) -> Ran | subprocess.CompletedProcess[str]:
    """scripts/recommend.py from the repository root, without $RECSYS_DATA: in this process, or as a
    subprocess."""
    if not subprocess_:
        return run_cli(recommend_command.cli, "recommend.py", list(args), cache)
    env = {k: v for k, v in os.environ.items() if k != "RECSYS_DATA"}
    env["RECSYS_CACHE"] = str(cache)
    return subprocess.run(
        [sys.executable, "scripts/recommend.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "subprocess_", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["in-process", "subprocess"]
)
def test_script_prints_recommendations(
    run_dir: Path, checkpoint: Checkpoint, tmp_path: Path, subprocess_: bool
) -> None:
    user = str(checkpoint.users.raw_ids[0])
    result = run_script(str(run_dir), "--user", user, "--top", "3", cache=tmp_path, subprocess_=subprocess_)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.strip().splitlines()
    assert header.split() == ["item", "title", "predicted"]
    assert len(rows) == 3


def test_script_unknown_user_is_one_error_line(run_dir: Path, tmp_path: Path) -> None:
    result = run_script(str(run_dir), "--user", "999999", cache=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: user 999999")
    assert "use --cold-start to recommend to a new user" in result.stderr  # the library's `cold_start`
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_a_list_length_below_one_is_an_error_naming_the_flag(
    run_dir: Path, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    user = str(checkpoint.users.raw_ids[0])
    result = run_script(str(run_dir), "--user", user, "--top", "0", cache=tmp_path)
    assert result.returncode == 2
    # The library names its parameter `top`; the command shows its flag.
    assert result.stderr == "error: --top must be a whole number of at least 1, got 0\n"


def test_script_cold_start_serves_an_unknown_user(run_dir: Path, tmp_path: Path) -> None:
    result = run_script(str(run_dir), "--user", "999999", "--cold-start", "--top", "2", cache=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:3] == ["item", "title", "item_bias"]
    assert len(result.stdout.strip().splitlines()) == 3


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--user", "1", "--similar", "x"],
        ["--user", "1", "--explain"],
        ["--similar", "x", "--cold-start"],
        ["--user", "1", "--item", "2", "--explain", "--cold-start"],
        ["--user", "1", "--item", "2", "--explain", "--top", "5"],
    ],
)
def test_script_needs_exactly_one_query(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # The flag checks need no model.
    with pytest.raises(SystemExit) as raised:
        recommend_command.parse_args(["runs/any", *args])
    assert raised.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1 and "--help lists the flags" in error


def test_a_run_answers_from_its_folder_without_reading_its_ratings_again(tmp_path: Path) -> None:
    """What each user rated and the titles come from the run folder (reading and splitting 25M
    ratings again took 25-33 s a call): every query answers alike with the run's data gone."""
    data = tmp_path / "my-tiny"
    data.mkdir()
    (data / "ratings.csv").write_bytes((TINY_FOLDER / "ratings.csv").read_bytes())
    movies = (TINY_FOLDER / "movies.csv").read_text().replace("1,Synthetic item 1,", "1,Renamed One,", 1)
    (data / "movies.csv").write_text(movies)
    (tmp_path / "new.csv").write_text("title,rating\nRenamed One,5\nSynthetic item 2,1\n")
    out = tmp_path / "run"
    train = run_cli(train_command.cli, "train.py", ["--dataset", "tiny", "--data-dir", str(data), "--epochs",
                    "1", "--no-progress", "--out", str(out)], tmp_path / "cache")  # fmt: skip
    assert train.returncode == 0 and "Traceback" not in train.stderr, train.stderr
    queries = [
        ["--user", "3"],
        ["--user", "999999", "--cold-start"],
        ["--similar", "Renamed One"],  # the run's own copy's title: the default tiny folder has none
        ["--rate", "Renamed One=5", "--rate", "Synthetic item 3=2"],
        ["--ratings-of", str(tmp_path / "new.csv")],
        ["--explain", "--user", "3", "--item", "1"],
    ]
    answers = [run_script(str(out), *query, cache=tmp_path / "cache") for query in queries]
    assert all(answer.returncode == 0 and "Traceback" not in answer.stderr for answer in answers), answers
    assert len(answers[2].stdout.strip().splitlines()) == 11  # a header and the 10 nearest items
    shutil.rmtree(data)
    again = [run_script(str(out), *query, cache=tmp_path / "cache") for query in queries]
    assert [answer.returncode for answer in again] == [0] * len(queries)
    assert [answer.stdout for answer in again] == [answer.stdout for answer in answers]


def test_a_run_folder_without_its_recommend_data_says_to_train_again(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / RECOMMEND_FILE).unlink()
    result = run_script(str(copy), "--user", "3", cache=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: {copy} has no {RECOMMEND_FILE}, which train.py writes")
    (copy / RECOMMEND_FILE).write_bytes(b"not a zip")
    result = run_script(str(copy), "--user", "3", cache=tmp_path)
    assert result.returncode == 2 and f"{RECOMMEND_FILE} is damaged" in result.stderr


def test_a_user_who_rated_everything_gets_a_line_not_an_empty_table(tmp_path: Path) -> None:
    ratings = tmp_path / "r.csv"
    rows = [f"{user},{item},{1 + (user * item) % 5}" for user in range(1, 21) for item in range(1, 9)]
    ratings.write_text("user,item,rating\n" + "\n".join(rows) + "\n")  # everyone rated all 8 items
    out = tmp_path / "run"
    args = ["--ratings", str(ratings), "--epochs", "1", "--no-progress", "--out", str(out)]
    train = run_cli(train_command.cli, "train.py", args, tmp_path / "cache")
    assert train.returncode == 0, train.stderr
    shown = run_script(str(out), "--user", "3", cache=tmp_path / "cache")
    assert shown.returncode == 0 and shown.stdout == ""
    assert "no items to list: user 3 has rated every item this model knows" in shown.stderr


def test_script_recommends_to_a_new_user_from_a_few_ratings(run_dir: Path, tmp_path: Path) -> None:
    rated = ["--rate", "Synthetic item 1=5", "--rate", "synthetic item 2=1", "--rate", "3=4"]
    result = run_script(str(run_dir), *rated, "--top", "4", cache=tmp_path)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.strip().splitlines()
    assert header.split() == ["item", "title", "predicted"]
    assert len(rows) == 4
    listed = {row.split()[0] for row in rows}
    assert not listed & {"1", "2", "3"}  # what the user rated is not offered back


def test_script_reads_a_new_users_ratings_from_a_file(run_dir: Path, tmp_path: Path) -> None:
    rated = tmp_path / "mine.csv"
    rated.write_text('item,rating\n"Synthetic item 1",5\n\n2,1\n')
    from_file = run_script(str(run_dir), "--ratings-of", str(rated), "--top", "3", cache=tmp_path)
    from_flags = run_script(
        str(run_dir), "--rate", "Synthetic item 1=5", "--rate", "2=1", "--top", "3", cache=tmp_path
    )
    assert from_file.returncode == 0, from_file.stderr
    assert from_file.stdout == from_flags.stdout
    for sep in ("\t", ";", "|"):  # a spreadsheet's export: tabs, or semicolons where commas are decimal
        rated.write_text(f'item{sep}rating\n"Synthetic item 1"{sep}5\n\n2{sep}1\n')
        separated = run_script(str(run_dir), "--ratings-of", str(rated), "--top", "3", cache=tmp_path)
        assert separated.returncode == 0 and separated.stdout == from_flags.stdout, (sep, separated.stderr)
    rated.write_text('title;rating\n"Synthetic item 1";4,5\n')  # beside semicolons, a decimal comma
    halves = run_script(str(run_dir), "--ratings-of", str(rated), "--top", "3", cache=tmp_path)
    as_typed = run_script(str(run_dir), "--rate", "Synthetic item 1=4.5", "--top", "3", cache=tmp_path)
    assert halves.returncode == 0 and halves.stdout == as_typed.stdout, halves.stderr


@pytest.mark.parametrize(
    ("rated", "message"),
    [
        (["Qwxyzzz plover=4"], "no item titled 'Qwxyzzz plover'"),
        (["Synthetic item 1=9"], "is off the scale 1-5"),
        (["Synthetic item 1=0"], "is off the scale 1-5"),
        (["Synthetic item 1=5", "1=3"], "name the same item"),
        (["Synthetic item 1"], "expected TITLE=RATING"),
        (["Synthetic item 1=five"], "expected TITLE=RATING"),
        (["=4"], "expected TITLE=RATING"),
    ],
    ids=[
        "unknown-title",
        "above-scale",
        "below-scale",
        "repeated-item",
        "no-rating",
        "not-a-number",
        "no-title",
    ],
)
def test_bad_rate_input_is_one_error_line(
    run_dir: Path, tmp_path: Path, rated: list[str], message: str
) -> None:
    flags = [part for pair in rated for part in ("--rate", pair)]
    result = run_script(str(run_dir), *flags, cache=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_unknown_title_suggests_close_matches(run_dir: Path, tmp_path: Path) -> None:
    result = run_script(str(run_dir), "--rate", "Synthetic itme 1=4", cache=tmp_path)
    assert result.returncode == 2
    assert "did you mean: Synthetic item 1" in result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("thing,rating\nSynthetic item 1,5\n", "expected a header naming item and rating"),
        ("movie,score\nSynthetic item 1,5\nQwxyzzz plover,4\n", "line 3: no item titled 'Qwxyzzz plover'"),
        ("title,rating\nSynthetic item 1,5\n1,3\n", "line 3: '1' and 'Synthetic item 1' name the same item"),
        ("item,rating\nSynthetic item 1,9\n", "line 2: rating 9 for 'Synthetic item 1' is off the scale 1-5"),
        ("item,rating\nSynthetic item 1,5\n2,x\n", "line 3: expected an item and a number"),
        ("item,rating\nSynthetic item 1,5,7\n", "line 2: expected 2 fields, got 3"),
        ("item,rating\n", "no ratings in it"),
    ],
    ids=[
        "no-item-column",
        "unknown-item",
        "repeated-item",
        "off-scale",
        "bad-rating",
        "extra-field",
        "empty",
    ],
)
def test_a_bad_ratings_file_names_the_file_and_line(
    run_dir: Path, tmp_path: Path, text: str, message: str
) -> None:
    rated = tmp_path / "mine.csv"
    rated.write_text(text)
    result = run_script(str(run_dir), "--ratings-of", str(rated), cache=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {rated}") and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_ensemble_takes_a_new_user_too(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    config = config_for("dotbias", dataset="tiny", epochs=1, members=2)
    train_and_evaluate(load_dataset("tiny"), config, run_dir=folder, progress=False)
    result = run_script(str(folder), "--rate", "Synthetic item 1=5", "--top", "2", cache=tmp_path)
    assert result.returncode == 0, result.stderr  # folded into each member
    assert len(result.stdout.strip().splitlines()) == 3


def test_a_tune_search_folder_points_to_the_run_it_trained(run_dir: Path, tmp_path: Path) -> None:
    search = tmp_path / "search"
    shutil.copytree(run_dir, search / "run")
    result = run_script(str(search), "--user", "1", cache=tmp_path)
    assert result.returncode == 2
    assert result.stderr == f"error: {search} is a tune.py search; the run it trained is {search / 'run'}\n"


def test_a_comparison_report_is_named_as_one_with_no_model_in_it(tmp_path: Path) -> None:
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.md").write_text("# Comparison\n")
    (report / "results.json").write_text(json.dumps({"dataset": "tiny", "split": "u1", "scores": []}))
    result = run_script(str(report), "--user", "1", cache=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {report} is a compare.py report, which keeps no trained model")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("setting", "written"), [("model", "svdpp"), ("seed", 1)], ids=["another-model", "another-seed"]
)
def test_a_checkpoint_from_another_run_is_named_as_such(
    setting: str, written: object, run_dir: Path, tmp_path: Path
) -> None:
    """A run folder whose config.json says another model, or another seed, than its checkpoint holds
    (a checkpoint copied in from another run) is refused, not used with this run's data (another
    seed's, on the same data, had been used without a word)."""
    folder = tmp_path / "mixed"
    shutil.copytree(run_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    trained = config[setting]
    (folder / "config.json").write_text(json.dumps({**config, setting: written}))
    result = run_script(str(folder), "--user", "1", cache=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: {folder}: its config.json says {setting} {written!r} against {trained!r} in its "
        "checkpoint.pt: the checkpoint is another run's"
    )


def test_another_runs_recommend_file_is_refused(
    run_dir: Path, checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """A recommend.npz copied in from a run on other data had been read as this run's: its rows of
    rated items given to this model's users, whose lists then left out other items than they rated."""
    folder = tmp_path / "mixed"
    shutil.copytree(run_dir, folder)
    others = IdMap(checkpoint.users.raw_ids[1:])  # a run that did not know the first user
    RecommendData.of(load_dataset("tiny"), others, checkpoint.items).save(folder / RECOMMEND_FILE)
    result = run_script(str(folder), "--user", "1", cache=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: {folder / RECOMMEND_FILE} is another run's: it was written for other users and items than "
        "its checkpoint's model knows; train the run again\n"
    )


def test_a_run_folder_without_a_checkpoint_yet_says_why(run_dir: Path, tmp_path: Path) -> None:
    """A run killed before its first checkpoint, or one still in its first epochs, had been answered
    with 'checkpoint not found' alone."""
    folder = tmp_path / "early"
    shutil.copytree(run_dir, folder)
    (folder / CHECKPOINT_FILE).unlink()
    (folder / "metrics.json").unlink()
    (folder / LOCK_FILE).touch()  # left by the run, killed
    killed = run_script(str(folder), "--user", "1", cache=tmp_path)
    assert killed.returncode == 2 and killed.stderr == (
        f"error: {folder} has no checkpoint.pt to recommend from: its run stopped before writing its first "
        "checkpoint.pt (killed?), so there is nothing to resume; delete the folder to start that run again\n"
    )
    with open(folder / LOCK_FILE) as held:  # the run, alive
        fcntl.flock(held, fcntl.LOCK_EX)
        running = run_script(str(folder), "--user", "1", cache=tmp_path)
    assert running.returncode == 2 and running.stderr == (
        f"error: {folder} has no checkpoint.pt to recommend from: its run, still going, has not written "
        "its first checkpoint.pt yet\n"
    )


def test_a_run_folder_that_is_a_file_or_missing_is_named_as_such(run_dir: Path, tmp_path: Path) -> None:
    """A checkpoint given for its run folder had been looked for at 'checkpoint.pt/checkpoint.pt'."""
    checkpoint = run_dir / CHECKPOINT_FILE
    for path, what in (
        (checkpoint, "a file: give the run folder that holds it"),
        (tmp_path / "no", "no such folder"),
    ):
        result = run_script(str(path), "--user", "1", cache=tmp_path)
        assert result.returncode == 2 and result.stderr == f"error: {path} is not a run folder ({what})\n"


def test_a_run_on_interactions_reads_a_new_users_items_alone_each_line_an_event(tmp_path: Path) -> None:
    """On interactions a file may have no rating column: each line is one event of its item, and an
    item's lines are its count, as --rate's TITLE=COUNT gives it; a run on ratings still asks for one."""
    events = tmp_path / "plays.csv"
    rows = [f"{user},{item}" for user in range(1, 41) for item in range(1, 13) if (user + item) % 3]
    events.write_text("user,item\n" + "\n".join(rows) + "\n")
    out = tmp_path / "run"
    # A light penalty: the default (30) leaves scores on 12 items that print alike at six places.
    args = ["--ratings", str(events), "--model", "ials", "--epochs", "2", "--l2", "0.3", "--no-progress"]
    args += ["--out", str(out)]
    train = run_cli(train_command.cli, "train.py", args, tmp_path / "cache")
    assert train.returncode == 0, train.stderr
    mine = tmp_path / "mine.csv"
    mine.write_text("item\n2\n5\n2\n")
    cache = tmp_path / "cache"
    from_file = run_script(str(out), "--ratings-of", str(mine), "--top", "3", cache=cache)
    from_flags = run_script(str(out), "--rate", "2=2", "--rate", "5=1", "--top", "3", cache=cache)
    assert from_file.returncode == 0, from_file.stderr
    assert from_file.stdout == from_flags.stdout
    once = run_script(str(out), "--rate", "2=1", "--rate", "5=1", "--top", "3", cache=cache)
    assert once.stdout != from_flags.stdout  # the repeated line counted


def test_a_run_on_ratings_asks_a_new_users_file_for_its_rating_column(run_dir: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.csv"
    mine.write_text("item\n2\n5\n")
    result = run_script(str(run_dir), "--ratings-of", str(mine), cache=tmp_path)
    assert result.returncode == 2 and "expected a header naming item and rating columns" in result.stderr


def test_a_run_stopped_before_its_last_epoch_is_said_to_be_half_trained(tmp_path: Path) -> None:
    """The command that finishes it can be pasted into a shell: a folder with a space in its path had
    been named as typed, which the shell split in two."""
    out = tmp_path / "my runs" / "run 1"
    cut_short(load_dataset("tiny"), config_for("bpmf", dataset="tiny", epochs=20), out, 3)
    result = run_script(str(out), "--user", "1", "--top", "2", cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "its run stopped after epoch 3 of 20" in result.stderr
    assert f"`train.py --resume {shlex.quote(str(out))}` finishes it" in result.stderr


def test_a_ranking_run_stopped_while_its_lists_are_scored_is_not_half_trained(tmp_path: Path) -> None:
    """Its last epoch is saved before the final lists are scored: the model is trained in full, and
    only its metrics are missing."""
    out = tmp_path / "run"
    cut_short(load_dataset("tiny"), config_for("bpr", dataset="tiny", epochs=2), out, 2)
    result = run_script(str(out), "--user", "1", "--top", "2", cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "stopped after epoch" not in result.stderr and "half trained" not in result.stderr
