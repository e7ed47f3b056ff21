"""recsys.commands.compare: `recsys-compare` (scripts/compare.py) on tiny.

In this process (its `main`, `parse_args` and `cli`), and once as a subprocess, as a user runs it
(slow: a torch import)."""

import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, Ran, run_cli

from recsys.commands import compare as compare_command
from recsys.workflows import report as report_module
from recsys.workflows.report import REPORT_FILES


def _compare_script() -> ModuleType:
    """The compare command's module, to call its parse_args and main in-process."""
    return compare_command


@pytest.mark.slow  # trains, then measures lookup cost and bias-before-norm: about 5 s
def test_compare_script_on_tiny(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # In-process, so capfd sees the progress lines and also what native code writes to fd 2 (the
    # profiler's USDT lines); the folds test below runs the script as a user does.
    out = tmp_path / "report"
    code = _compare_script().main(
        ["--dataset", "tiny", "--split", "random", "--epochs", "1", "--models", "dot", "dotbias",
         "--cost-sizes", "100", "300", "--no-progress", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    captured = capfd.readouterr()
    assert "damped-bias" in captured.out and "dotbias" in captured.out
    assert captured.out.splitlines()[-1] == f"report: {out / 'report.md'}"
    assert "USDT" not in captured.err and "STAGE:" not in captured.err
    progress = [line for line in captured.err.splitlines() if line.startswith("measuring")]
    assert progress[:2] == [
        "measuring lookup cost: 100 users (1/2)",
        "measuring lookup cost: 300 users (2/2)",
    ]
    assert progress[2] == "measuring EmbeddingBag against multi-hot Linear"
    assert progress[3] == "measuring bias before a norm: layer, float32 (1/6)"
    assert progress[8] == "measuring bias before a norm: none, float64 (6/6)"
    assert (out / "report.md").is_file() and (out / "results.json").is_file()
    text = (out / "report.md").read_text()
    assert (
        "## Embedding versus Linear, measured" in text
        and "## A bias right before a normalisation layer" in text
    )
    # A quick look's override is said, not passed off as the defaults.
    assert "uses its defaults for the engine shown, except `epochs` 1 for every one" in text
    assert "graded: 1 + its rating - 4, so with 4 relevant a 4 gains 1 and a 5 gains 2" in text
    results = json.loads((out / "results.json").read_text())
    assert results["overrides"] == {"epochs": 1}
    sizes = {row["n_users"] for row in results["Embedding versus Linear, measured"]}
    assert sizes == {100, 300}
    bags = results["EmbeddingBag versus multi-hot Linear, measured"]
    expected = {(n, mode) for n in (100, 300) for mode in ("sum", "mean")}
    assert {(row["n_items"], row["mode"]) for row in bags} == expected
    assert max(row["max_abs_diff"] for row in bags) < 1e-6
    norms = results["A bias right before a normalisation layer"]
    batch = next(row for row in norms if row["norm"] == "batch" and row["dtype"] == "float64")
    assert batch["max_abs_bias_grad"] < 1e-9 < batch["max_abs_weight_grad"]


def test_compare_script_without_measurements_says_nothing_of_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _compare_script().main(
        ["--dataset", "tiny", "--split", "random", "--epochs", "1", "--models", "dot", "--no-measurements",
         "--no-progress", "--out", str(tmp_path / "report")]
    )  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err
    assert "measuring" not in err
    assert "## Embedding versus Linear" not in (tmp_path / "report" / "report.md").read_text()
    # Without a terminal, a line as each model ends is all that says how far the comparison is.
    assert re.search(r"^dot trained in \d+\.\d s \(1/1\)$", err, re.MULTILINE), err


def test_a_ranking_models_rmse_is_printed_as_none_and_said_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """bpr beside dotbias on ratings: its RMSE and MAE cells are empty, not NaN, and a line says why
    (as report.md does)."""
    code = _compare_script().main(
        ["--dataset", "tiny", "--split", "random", "--epochs", "1", "--models", "dotbias", "bpr",
         "--no-measurements", "--no-progress", "--out", str(tmp_path / "report")]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "NaN" not in printed and "nan" not in printed
    assert "bpr: rank items and predict no rating, so no RMSE or MAE" in printed


def test_compare_script_help_shows_only_real_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        _compare_script().parse_args(["--help"])
    assert raised.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal's width
    assert "None" not in text
    for default in (
        "[default: u1 for ml-100k",
        "[default: 0]",
        "[default: drop]",
        "[default: 1000 10000 100000]",
    ):
        assert default in text
    assert "saving the minutes" in text


@pytest.mark.parametrize(
    "in_process", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["in-process", "subprocess"]
)
def test_compare_script_rejects_folds_on_tiny(tmp_path: Path, in_process: bool) -> None:
    args = ["--dataset", "tiny", "--split", "folds", "--out", str(tmp_path / "r")]
    if in_process:
        result = run_cli(compare_command.cli, "compare.py", args, tmp_path / "cache")
    else:
        command = [sys.executable, "scripts/compare.py", *args]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.startswith("error: --split folds runs ml-100k's predefined folds u1..u5")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("engine", ["auto", "autograd"])
def test_compare_script_trains_every_model_on_the_engine_asked_for(
    engine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    code = _compare_script().main(
        ["--dataset", "tiny", "--split", "random", "--epochs", "1", "--models", "dot", "linear",
         "--engine", engine, "--no-measurements", "--no-progress", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    capsys.readouterr()
    scores = {row["model"]: row["engine"] for row in json.loads((out / "results.json").read_text())["scores"]}
    expected_dot = "compiled" if engine == "auto" else "autograd"
    assert scores == {"global-mean": "closed form", "damped-bias": "closed form", "dot": expected_dot,
                      "linear": "autograd"}  # fmt: skip


def test_compare_script_refuses_an_engine_a_model_lacks_before_training(tmp_path: Path) -> None:
    args = [
        "--dataset",
        "tiny",
        "--engine",
        "compiled",
        "--models",
        "dot",
        "linear",
        "--out",
        str(tmp_path / "r"),
    ]
    result = run_cli(compare_command.cli, "compare.py", args, tmp_path / "cache")
    assert result.returncode == 2
    assert (
        result.stderr.startswith("error:") and "linear" in result.stderr and "Traceback" not in result.stderr
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("size", ["0", "-5"])
def test_compare_script_refuses_cost_sizes_below_one_before_training(size: str, tmp_path: Path) -> None:
    out = tmp_path / "r"
    args = ["--dataset", "tiny", "--models", "dot", "--cost-sizes", "100", size, "--out", str(out)]
    result = run_cli(compare_command.cli, "compare.py", args, tmp_path / "cache")
    assert result.returncode == 2
    assert result.stderr == f"error: --cost-sizes must be at least 1 user each, got {size}\n"
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--relevant", "9"], "--relevant 9 is above the ratings' scale 1-5: no rating could be relevant"),
        (["--models", "dot", "dotbias", "dot"], "--models names dot twice: name each model once"),
    ],
)
def test_a_relevance_no_rating_reaches_or_a_model_named_twice_is_refused_before_training(
    flags: list[str], message: str, tmp_path: Path
) -> None:
    out = tmp_path / "r"
    args = ["--dataset", "tiny", "--no-measurements", *flags, "--out", str(out)]
    if "--models" not in flags:
        args += ["--models", "dot"]
    result = run_cli(compare_command.cli, "compare.py", args, tmp_path / "cache")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith(f"error: {message}")
    assert "Traceback" not in result.stderr and not out.exists()


@pytest.mark.parametrize("where", ["under a file", "a link to nowhere", "a folder of other files"])
def test_an_out_that_cannot_take_a_report_is_refused_before_training(where: str, tmp_path: Path) -> None:
    (tmp_path / "file").touch()
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    (tmp_path / "others").mkdir()
    (tmp_path / "others" / "notes.txt").write_text("mine")
    out = {"under a file": "file/report", "a link to nowhere": "link", "a folder of other files": "others"}
    args = ["--dataset", "tiny", "--models", "dot", "--no-measurements", "--out", str(tmp_path / out[where])]
    result = run_cli(compare_command.cli, "compare.py", args, tmp_path / "cache")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: --out {tmp_path / out[where]}")
    assert "training" not in result.stdout
    assert (tmp_path / "others" / "notes.txt").read_text() == "mine"


def test_an_earlier_report_is_replaced_whole_and_the_users_files_stay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    common = ["--dataset", "tiny", "--split", "random", "--epochs", "1", "--no-measurements", "--no-progress"]
    assert _compare_script().main([*common, "--models", "dotbias", "--out", str(out)]) == 0
    assert (out / "item_map.png").is_file()  # drawn for a model with biases
    (out / "notes.txt").write_text("mine")
    assert _compare_script().main([*common, "--models", "dot", "--out", str(out)]) == 0
    assert f"the report in {out} will be replaced" in capsys.readouterr().err
    assert not (out / "item_map.png").exists()  # the earlier report's figure, which dot has none for
    scores = json.loads((out / "results.json").read_text())["scores"]
    assert "dot" in {row["model"] for row in scores} and "dotbias" not in {row["model"] for row in scores}
    assert (out / "notes.txt").read_text() == "mine"
    written = {path.name for path in out.iterdir()} - {"notes.txt"}
    assert written <= set(REPORT_FILES)


def test_a_comparison_stopped_while_it_draws_leaves_the_earlier_report_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "report"
    common = ["--dataset", "tiny", "--split", "random", "--epochs", "1", "--no-measurements", "--no-progress"]
    assert _compare_script().main([*common, "--models", "dot", "--out", str(out)]) == 0
    earlier = {path.name: path.read_bytes() for path in out.iterdir()}

    def stopped(*args: object, **kwargs: object) -> str:
        raise KeyboardInterrupt  # Ctrl-C, or SIGTERM, while the figures are drawn

    monkeypatch.setattr(report_module, "plot_learning_curves", stopped)
    with pytest.raises(KeyboardInterrupt):
        _compare_script().main([*common, "--models", "dotbias", "--out", str(out)])
    assert {path.name: path.read_bytes() for path in out.iterdir()} == earlier  # no draft left either
    monkeypatch.undo()
    assert _compare_script().main([*common, "--models", "dotbias", "--out", str(out)]) == 0
    assert "dotbias" in (out / "report.md").read_text()


@pytest.mark.slow  # a whole comparison on tiny
def test_a_second_comparison_into_the_folder_of_one_drawing_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a second compare.py given the same --out removed the first one's draft as one left
    by a killed run, and the first then failed with a traceback as it drew into it."""
    out = tmp_path / "report"
    args = ["--dataset", "tiny", "--split", "random", "--epochs", "1", "--models", "dot",
            "--no-measurements", "--no-progress", "--out", str(out)]  # fmt: skip
    draw = report_module.plot_learning_curves
    drawn: list[Path] = []
    second: list[Ran] = []

    def drawn_while_a_second_starts(comparison: Any, path: Path) -> str:
        drawn.append(path)
        if len(drawn) == 1:  # the first comparison draws: a second one starts into its folder
            second.append(run_cli(compare_command.cli, "compare.py", args, tmp_path / "cache"))
        return draw(comparison, path)

    monkeypatch.setattr(report_module, "plot_learning_curves", drawn_while_a_second_starts)
    assert _compare_script().main(args) == 0
    assert second[0].returncode == 2
    assert second[0].stderr == f"error: --out {out} is in use by another recsys run\n"
    assert {path.name for path in out.iterdir()} <= set(REPORT_FILES)


def test_a_folder_holding_a_report_md_of_its_own_is_not_taken_for_a_report(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my own notes\n")
    args = ["--dataset", "tiny", "--models", "dot", "--no-measurements", "--out", str(out)]
    result = run_cli(compare_command.cli, "compare.py", args, tmp_path / "cache")
    assert result.returncode == 2 and "holds no earlier report" in result.stderr
    assert (out / "report.md").read_text() == "my own notes\n"


def test_a_folder_holding_a_report_md_and_results_json_of_its_own_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    own = {"report.md": "my own notes\n", "results.json": '{"accuracy": 0.93}\n', "rmse.png": "mine"}
    for name, text in own.items():
        (out / name).write_text(text)
    args = ["--dataset", "tiny", "--models", "dot", "--no-measurements", "--out", str(out)]
    result = run_cli(compare_command.cli, "compare.py", args, tmp_path / "cache")
    assert result.returncode == 2 and "holds no earlier report" in result.stderr, result.stderr
    assert {path.name: path.read_text() for path in out.iterdir()} == own


def test_a_comparison_that_fails_leaves_no_folder_it_made(tmp_path: Path) -> None:
    out = tmp_path / "r"
    args = ["--dataset", "tiny", "--split", "u1", "--models", "dot", "--no-measurements", "--out", str(out)]
    result = run_cli(compare_command.cli, "compare.py", args, tmp_path / "cache")
    assert result.returncode == 2 and "--split u1" in result.stderr, result.stderr
    assert not out.exists()


def test_a_report_of_other_data_of_the_same_name_is_not_replaced(tmp_path: Path) -> None:
    # Two shops' exports, both called ratings.csv: the second report must not replace the first.
    first, second = tmp_path / "shop-a" / "ratings.csv", tmp_path / "shop-b" / "ratings.csv"
    for path in (first, second):
        path.parent.mkdir()
        shutil.copy(ROOT / "data" / "books" / "ratings.csv", path)
    out = tmp_path / "report"
    common = ["--models", "dot", "--epochs", "1", "--no-measurements", "--no-progress", "--out", str(out)]
    done = run_cli(compare_command.cli, "compare.py", ["--ratings", str(first), *common], tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    again = run_cli(compare_command.cli, "compare.py", ["--ratings", str(first), *common], tmp_path / "cache")
    assert again.returncode == 0 and "will be replaced" in again.stderr  # the same data: replaced
    other = run_cli(
        compare_command.cli, "compare.py", ["--ratings", str(second), *common], tmp_path / "cache"
    )
    assert other.returncode == 2, other.stderr
    error = other.stderr.strip().splitlines()[-1]  # after the line telling the file's scale
    assert error.startswith(f"error: --out {out} holds the report of other data ({first.resolve()})")
    assert json.loads((out / "results.json").read_bytes())["ratings_file"] == str(first.resolve())


def test_a_small_own_file_reports_without_empty_tables_or_stray_warnings(tmp_path: Path) -> None:
    """30 users of 10 ratings: no test user has the 20 training ratings fold-in starts from, and few
    test ratings reach the relevance threshold."""
    lines = ["user,item,rating"] + [
        f"{u},{i},{1 + (u + i) % 3}" for u in range(30) for i in range(u % 5, u % 5 + 10)
    ]
    lines[1] = "0,0,5"  # one rating of 5: the threshold the lists are judged by
    ratings = tmp_path / "small.csv"
    ratings.write_text("\n".join(lines) + "\n")
    out = tmp_path / "report"
    args = [
        "--ratings",
        str(ratings),
        "--models",
        "dotbias",
        "--epochs",
        "2",
        "--no-measurements",
        "--out",
        str(out),
    ]
    ran = run_cli(compare_command.cli, "compare.py", [*args, "--no-progress"], tmp_path / "c")
    assert ran.returncode == 0, ran.stderr
    assert "legend" not in ran.stderr, ran.stderr  # matplotlib's, of a figure with nothing drawn
    report = (out / "report.md").read_text()
    assert "No test user has at least 20 training ratings to fold in from" in report
    assert "For the 0 test users" not in report


def test_on_interactions_the_printed_table_has_no_rmse_of_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file of plays (no rating column): the lists judge the models; an RMSE of counts says nothing."""
    rng = np.random.default_rng(0)
    rows = "\n".join(f"u{rng.integers(60)},i{rng.integers(40)}" for _ in range(2000))
    plays = tmp_path / "plays.csv"
    plays.write_text("user,item\n" + rows + "\n")
    out = tmp_path / "report"
    code = _compare_script().main(
        ["--ratings", str(plays), "--models", "bpr", "--epochs", "1", "--no-measurements", "--no-progress",
         "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if line.split()[:1] == ["model"])
    assert "rmse" not in header and "mae" not in header and "seconds" in header


def test_a_comparison_of_every_model_on_large_data_is_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every model's final lists on 25M ratings ran for hours without a word; naming models is the way
    out, so --models says nothing. (--split folds on tiny stops each run before training.)"""
    monkeypatch.setattr(compare_command, "LARGE_COMPARISON", 10)
    args = ["--dataset", "tiny", "--split", "folds", "--out", str(tmp_path / "r")]
    warned = r"ratings: every model \(dot, .*name the ones to compare with --models"
    with pytest.warns(UserWarning, match=warned), pytest.raises(compare_command.RecsysError, match="folds"):
        compare_command.main(args)
    with warnings.catch_warnings(), pytest.raises(compare_command.RecsysError, match="folds"):
        warnings.simplefilter("error")
        compare_command.main([*args, "--models", "dot"])
