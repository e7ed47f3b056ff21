"""recsys-tune (scripts/tune.py) as a user runs it, and train.py --config reading what it wrote."""

import errno
import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pandas as pd
import pytest
from conftest import ROOT, Ran, run_cli

from recsys.commands import train as train_command
from recsys.commands import tune as tune_command
from recsys.data.catalog import load_dataset
from recsys.errors import RecsysError
from recsys.workflows.tune import tune


def test_tune_writes_its_trials_plot_best_setting_and_run(tmp_path: Path) -> None:
    out = tmp_path / "search"
    args = ["--dataset", "tiny", "--trials", "3", "--folds", "2", "--no-progress", "--out", str(out)]
    ran = run_cli(tune_command.cli, "tune.py", args, tmp_path / "cache")
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert sum("valid RMSE" in line for line in lines) == 4  # three trials, then the best
    assert sum("test RMSE" in line for line in lines) == 1 and "test RMSE" in lines[-2]  # once, at the end
    assert (
        f"`train.py --config {out / 'best.json'} --dataset tiny --split random` trains the best setting again"
        in lines[-1]
    )
    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) == 3 and trials["valid_rmse"].is_monotonic_increasing
    assert (out / "trials.png").stat().st_size > 0
    best = json.loads((out / "best.json").read_text())
    assert best["model"] == "dotbias" and best["epochs"] == trials.at[0, "epochs"]
    tuned_rmse = json.loads((out / "run" / "metrics.json").read_text())["test_rmse"]
    retrained = tmp_path / "retrained"
    train_args = [
        "--dataset",
        "tiny",
        "--config",
        str(out / "best.json"),
        "--no-progress",
        "--out",
        str(retrained),
    ]
    again = run_cli(train_command.cli, "train.py", train_args, tmp_path / "cache")
    assert again.returncode == 0, again.stderr
    assert json.loads((retrained / "metrics.json").read_text())["test_rmse"] == tuned_rmse
    overridden = tmp_path / "overridden"
    flag = ["--epochs", "1", "--out", str(overridden)]
    assert (
        run_cli(train_command.cli, "train.py", [*train_args[:-2], *flag], tmp_path / "cache").returncode == 0
    )
    config = json.loads((overridden / "config.json").read_text())
    assert config["epochs"] == 1 and config["lr"] == best["lr"]  # the flag wins; the rest is the file's


def test_the_command_that_trains_the_best_setting_again_names_the_same_data(tmp_path: Path) -> None:
    """Regression: the line tune.py ends with left out --ratings and its companions, so the command it
    gave trained ml-100k (or synthetic data) in place of the file tuned on."""
    tiny = pd.read_csv(ROOT / "recsys/data/samples/tiny/ratings.csv")
    ratings = tmp_path / "shop ratings.csv"
    tiny.rename(columns={"userId": "buyer", "movieId": "article"}).to_csv(ratings, sep=";", index=False)
    given = ["--ratings", str(ratings), "--columns", "user=buyer,item=article,rating=rating", "--sep", ";"]
    args = [*given, "--rating-scale", "0.5,5", "--trials", "1", "--folds", "2", "--out", str(tmp_path / "s")]
    ran = run_cli(tune_command.cli, "tune.py", args, tmp_path / "cache")
    assert ran.returncode == 0, ran.stderr
    again = shlex.split(ran.stdout.splitlines()[-1].split("`")[1])
    assert again[0] == "train.py"
    retrained = tmp_path / "retrained"
    trained = run_cli(
        train_command.cli, "train.py", [*again[1:], "--out", str(retrained)], tmp_path / "cache"
    )
    assert trained.returncode == 0, trained.stderr
    record = json.loads((retrained / "data.json").read_text())
    assert record["ratings"] == str(ratings.resolve()) and record["sep"] == ";"
    assert record["rating_scale"] == [0.5, 5] and record["columns"]["user"] == "buyer"


@pytest.mark.parametrize(
    ("script", "args", "expected"),
    [
        ("tune", ["--trials", "0"], "--trials must be at least 1"),
        ("tune", ["--folds", "1"], "--folds must be at least 2"),
        ("tune", ["--features", "side"], "has no effect on dotbias"),
        ("tune", ["--folds", "5000"], "too few to cut into 5000 folds"),  # found as the search starts
        ("train", ["--config", "missing.json"], "--config missing.json: cannot read it"),
        ("train", ["--config", "{bad"], "not JSON"),
        ("train", ["--config", '{"learning_rate": 1}'], "unknown setting(s) learning_rate"),
        ("train", ["--config", '{"lr": 0.1, "dataset": "x", "device": "cpu"}'], "continued with --resume"),
        ("train", ["--config", '{"n_factors": 5.0}'], "--n-factors must be a whole number, got 5.0"),
        (
            "train",
            ["--config", '{"batch_size": 256, "engine": "compiled"}'],
            "(with the settings of --config",
        ),
        ("train", ["--config", '{"epochs": 0}'], "--epochs must be at least 1, got 0 (with the settings of"),
        ("train", ["--config", "[1, 2]"], "expected a JSON object"),
        ("train", ["--config", '{"lr": -1}'], "--lr must be positive"),
        # The file's model and engine are named as the file's: the user typed neither flag.
        ("train", ["--config", '{"model": "nope"}'], "settings.json: unknown model 'nope'; choose one of"),
        (
            "train",
            ["--config", '{"engine": "abc"}'],
            "unknown --engine 'abc'; choose one of: compiled, "
            "autograd, device (with the settings of --config",
        ),
    ],
)
def test_bad_tuning_flags_and_config_files_are_one_line(
    script: str, args: list[str], expected: str, tmp_path: Path
) -> None:
    if args[0] == "--config" and args[1] != "missing.json":
        (tmp_path / "settings.json").write_text(args[1])
        args = ["--config", str(tmp_path / "settings.json")]
    cli = tune_command.cli if script == "tune" else train_command.cli
    ran = run_cli(
        cli, f"{script}.py", [*args, "--dataset", "tiny", "--out", str(tmp_path / "out")], tmp_path / "c"
    )
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.startswith("error: ") and ran.stderr.count("\n") == 1 and expected in ran.stderr
    assert not (tmp_path / "out").exists()


def test_a_bad_seed_is_refused_with_the_other_flags_before_the_data_is_read(tmp_path: Path) -> None:
    """It had been refused after the data was read and the search announced ("tuning dotbias on ...")."""
    args = ["--dataset", "tiny", "--seed", "-1", "--out", str(tmp_path / "out")]
    ran = run_cli(tune_command.cli, "tune.py", args, tmp_path / "c")
    assert ran.returncode == 2
    assert ran.stderr == "error: --seed must be a whole number from 0 to 2**32 - 1, got -1\n"
    assert ran.stdout == "" and not (tmp_path / "out").exists()


def test_an_out_under_a_file_is_one_line_before_the_search(tmp_path: Path) -> None:
    (tmp_path / "file").touch()
    out = tmp_path / "file" / "search"
    ran = run_cli(tune_command.cli, "tune.py", ["--dataset", "tiny", "--out", str(out)], tmp_path / "c")
    assert ran.returncode == 2
    assert ran.stderr == f"error: --out {out}: cannot create it: Not a directory\n"
    assert "tuning" not in ran.stdout


@pytest.mark.parametrize(
    ("left", "said"), [("best.json", "holds a search"), ("notes.txt", "holds other files")]
)
def test_a_default_folder_already_used_is_called_a_search_only_where_it_holds_one(
    left: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the default folder is under the working folder's reports/
    default = Path("reports") / "tune-dotbias-tiny-random"
    default.mkdir(parents=True)
    (default / left).write_text("{}")
    with pytest.raises(RecsysError, match=f"^{default} already {said}"):
        tune_command.main(["--dataset", "tiny", "--model", "dotbias", "--no-progress"])
    assert (default / left).read_text() == "{}"


def test_a_search_killed_before_it_wrote_a_file_can_run_again_into_its_folder(tmp_path: Path) -> None:
    """A search killed by SIGKILL or the OOM killer during its trials leaves its folder holding only the
    lock file, hidden from `ls`: the search run again takes it as empty (it had been refused as 'not an
    empty folder')."""
    from recsys.workflows.run_folder import LOCK_FILE

    out = tmp_path / "search"
    out.mkdir()
    (out / LOCK_FILE).touch()
    args = ["--dataset", "tiny", "--trials", "1", "--folds", "2", "--no-progress", "--out", str(out)]
    ran = run_cli(tune_command.cli, "tune.py", args, tmp_path / "c")
    assert ran.returncode == 0, ran.stderr
    assert (out / "best.json").is_file() and not (out / LOCK_FILE).exists()


def test_a_fold_too_small_for_a_ranking_model_is_named_as_the_fold(tmp_path: Path) -> None:
    """Six users' ratings train `bpr` whole; a fold of the search holding one user's positives alone
    is named as that fold, with the way out (fewer folds), not blamed on the data."""
    ratings = tmp_path / "few.csv"
    rows = "1,10,5 1,11,3 1,12,4 2,10,4 2,13,2 2,14,5 3,11,1 3,12,5 3,13,3 4,10,2 4,14,4 4,15,3"
    rows += " 5,11,5 5,15,2 5,12,3 6,10,3 6,13,4 6,15,5"
    ratings.write_text("user,item,rating\n" + "\n".join(rows.split()))
    args = ["--ratings", str(ratings), "--model", "bpr", "--trials", "2", "--out", str(tmp_path / "out")]
    ran = run_cli(tune_command.cli, "tune.py", args, tmp_path / "c")
    assert ran.returncode == 2, ran.stderr
    last = ran.stderr.splitlines()[-1]
    assert last.startswith("error: cross-validation fold ") and last.endswith(
        "fewer --folds leave more to each"
    )
    assert not (tmp_path / "out").exists()


def test_a_search_stopped_by_ctrl_c_reports_the_best_setting_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C mid-search leaves no folder, but the best setting found is named, not lost; nor does
    Ctrl-C while the best is retrained, after its run wrote a checkpoint (a ranking model's last
    epoch is saved before its lists are scored)."""

    def stopped(*args: object, on_trial: Callable[..., None], run_dir: Path, **kwargs: object) -> None:
        on_trial(1, {"lr": 0.1, "epochs": 5}, 0.95)
        on_trial(2, {"lr": 0.02, "epochs": 9}, 0.91)
        on_trial(3, {"lr": 0.3, "epochs": 4}, float("nan"))
        run_dir.mkdir(parents=True)
        (run_dir / "checkpoint.pt").write_bytes(b"saved")
        raise KeyboardInterrupt

    monkeypatch.setattr("recsys.workflows.tune.tune", stopped)
    out = tmp_path / "search"
    with pytest.raises(KeyboardInterrupt):
        tune_command.main(["--dataset", "tiny", "--trials", "10", "--no-progress", "--out", str(out)])
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(
        "stopped after 3 of 10 settings, nothing written; the best so far: lr=0.02 epochs=9"
    )
    assert "valid RMSE 0.9100" in last
    assert not out.exists()


@pytest.mark.parametrize("failure", ["ctrl-c", "disk full"])
def test_a_search_stopped_or_failing_as_it_writes_its_files_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """Regression: Ctrl-C or a full disk while trials.png was drawn left run/ and trials.csv without
    best.json, a folder a new search refused as holding one; the full disk was a traceback."""
    from matplotlib.figure import Figure

    def savefig(figure: Figure, file: Path | IO[bytes], **kwargs: object) -> None:
        if isinstance(file, Path):  # drawn straight into place
            file.write_bytes(b"\x89PNG")
        else:
            file.write(b"\x89PNG")
        if failure == "ctrl-c":
            raise KeyboardInterrupt
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", savefig)
    out = tmp_path / "search"
    args = ["--dataset", "tiny", "--trials", "1", "--folds", "2", "--no-progress", "--out", str(out)]
    ran = run_cli(tune_command.cli, "tune.py", args, tmp_path / "cache")
    if failure == "ctrl-c":
        assert ran.returncode == 130
        assert ran.stderr.startswith("stopped after 1 of 1 settings, nothing written; the best so far: ")
    else:
        assert ran.returncode == 2
        assert ran.stderr == f"error: cannot write {out / 'trials.png'}: No space left on device\n"
    assert not out.exists()


def test_a_second_search_into_the_folder_of_one_running_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a search's folder stays empty until it retrains its best setting, so a second search
    given it ran too, until the two collided at run/, or its Ctrl-C removed the first one's run/."""
    out = tmp_path / "search"
    args = ["--dataset", "tiny", "--trials", "2", "--no-progress", "--out", str(out)]
    searches: list[Path] = []
    second: list[Ran] = []

    def search(*args_: object, run_dir: Path, **kwargs: object) -> None:
        searches.append(run_dir)
        if len(searches) == 1:  # while the first searches, a second is started into its folder
            second.append(run_cli(tune_command.cli, "tune.py", args, tmp_path / "cache"))
        raise KeyboardInterrupt

    monkeypatch.setattr("recsys.workflows.tune.tune", search)
    with pytest.raises(KeyboardInterrupt):
        tune_command.main(args)
    assert len(searches) == 1  # the second never searched
    assert second[0].returncode == 2
    assert second[0].stderr == f"error: --out {out} is in use by another recsys run\n"
    assert not out.exists()


@pytest.mark.slow  # two searches of bfm's default sweeps
def test_a_search_of_bfm_with_time_reads_the_times_in_its_trials(tmp_path: Path) -> None:
    """The trials' folds carry each rating's time, so they search the model the best setting's run
    trains: with the time group."""
    out = tmp_path / "search"
    args = ["--dataset", "tiny", "--model", "bfm", "--features", "implicit,time", "--trials", "1"]
    ran = run_cli(tune_command.cli, "tune.py", [*args, "--folds", "2", "--out", str(out)], tmp_path / "c")
    assert ran.returncode == 0, ran.stderr
    assert "without time" not in ran.stdout
    assert json.loads((out / "best.json").read_text())["features"] == "implicit,time"
    assert json.loads((out / "run" / "config.json").read_text())["features"] == "implicit,time"
    trials = pd.read_csv(out / "trials.csv")
    untimed = tune(load_dataset("tiny"), "bfm", folds=2, trials=1, features="implicit")
    assert trials["valid_rmse"][0] != untimed.table["valid_rmse"][0]  # the times were read


@pytest.mark.slow  # a search of bfm's default sweeps as a probit
def test_a_search_of_bfm_as_an_ordered_probit_keeps_it_to_the_best_run(tmp_path: Path) -> None:
    out = tmp_path / "search"
    args = ["--dataset", "tiny", "--model", "bfm", "--ordinal", "--trials", "1", "--folds", "2"]
    ran = run_cli(tune_command.cli, "tune.py", [*args, "--out", str(out)], tmp_path / "c")
    assert ran.returncode == 0, ran.stderr
    assert json.loads((out / "best.json").read_text())["ordinal"] is True
    assert json.loads((out / "run" / "config.json").read_text())["ordinal"] is True
    refused = run_cli(tune_command.cli, "tune.py", ["--dataset", "tiny", "--ordinal"], tmp_path / "d")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: --ordinal has no effect on dotbias's compiled engine, per-rating AdaGrad; leave it out"
    ]


def test_interactions_without_a_model_named_tune_ials(tmp_path: Path) -> None:
    """As train.py does: the default rating model would refuse interactions, so ials is tuned."""
    events = tmp_path / "events.csv"
    events.write_text("user,item\n" + "\n".join(f"u{k % 23},i{(k * 7) % 19}" for k in range(400)) + "\n")
    out = tmp_path / "search"
    args = ["--ratings", str(events), "--trials", "1", "--folds", "2", "--no-progress", "--out", str(out)]
    ran = run_cli(tune_command.cli, "tune.py", args, tmp_path / "cache")
    assert ran.returncode == 0, ran.stderr
    assert "tuning ials on the training part of events" in ran.stdout
    assert json.loads((out / "best.json").read_text())["model"] == "ials"
