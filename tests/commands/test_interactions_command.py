"""recsys-train and recsys-recommend on a file of interactions (no rating column): the ranking models
train on it, recommend from it and resume; a rating model and data they cannot learn from are refused
in one line."""

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from conftest import assert_same_state, cut_short, run_cli

from recsys.commands import common
from recsys.commands import compare as compare_command
from recsys.commands import recommend as recommend_command
from recsys.commands import train as train_command
from recsys.config import config_for
from recsys.data.ratings_file import load_ratings
from recsys.train import bpr
from recsys.workflows.experiment import train_and_evaluate

TEST_NDCG = re.compile(r"test NDCG@10 \d\.\d{4}  precision@10 \d\.\d{4}  recall@10 \d\.\d{4}")


@pytest.fixture(scope="module")
def plays(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A listening log: 80 listeners, 60 songs, each play a line (a song played again repeats its line)."""
    rng = np.random.default_rng(0)
    taste, songs = rng.normal(size=(80, 3)), rng.normal(size=(60, 3))
    lines = ["listener,song,played_at"]
    when = 1_600_000_000
    for listener in range(80):
        liked = np.argsort(-(songs @ taste[listener]) + rng.gumbel(size=60))[:12]
        for song in rng.choice(liked, size=20):  # repeats: a song played twice is a count of 2
            when += int(rng.integers(1, 600))
            lines.append(f"l{listener},s{song},{when}")
    path = tmp_path_factory.mktemp("plays") / "plays.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("model", ["ials", "bpr"])
def test_an_interactions_file_trains_recommends_and_resumes(model: str, plays: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["--ratings", str(plays), "--model", model, "--epochs", "3", "--no-progress", "--out", str(out)]
    trained = run_cli(train_command.cli, "train.py", args, tmp_path / "cache")
    assert trained.returncode == 0, trained.stderr
    assert "interactions:" in trained.stderr
    assert TEST_NDCG.search(trained.stdout) and "relevant: an interaction in test" in trained.stdout
    top = run_cli(
        recommend_command.cli, "recommend.py", [str(out), "--user", "l3", "--top", "5"], tmp_path / "c"
    )
    assert top.returncode == 0, top.stderr
    assert top.stdout.splitlines()[0].split()[-1] == "score"  # a ranking score, no predicted rating
    listed = [line for line in top.stdout.splitlines() if "s" in line]
    assert len(listed) >= 5
    similar = run_cli(recommend_command.cli, "recommend.py", [str(out), "--similar", "s7"], tmp_path / "c")
    assert similar.returncode == 0, similar.stderr
    # A new listener's plays: any count above 0, more than anyone's in the log too; none is refused.
    rate = [str(out), "--rate", "s1=50", "--rate", "s2=1"]
    new = run_cli(recommend_command.cli, "recommend.py", rate, tmp_path / "c")
    assert new.returncode == 0, new.stderr
    none = run_cli(recommend_command.cli, "recommend.py", [str(out), "--rate", "s1=0"], tmp_path / "c")
    assert none.returncode == 2 and "an interaction's count or weight is above 0" in none.stderr
    resumed = run_cli(train_command.cli, "train.py", ["--resume", str(out)], tmp_path / "cache")
    assert resumed.returncode == 0 and "is finished (3 epochs, test NDCG@10" in resumed.stdout


@pytest.mark.parametrize(("model", "grid"), [("ials", None), ("bpr", None), ("bpr", 3)])
def test_a_run_on_interactions_cut_short_resumes_to_the_same_model(
    model: str, grid: int | None, plays: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also BPR on a 3 x 3 grid of blocks, as data above about 150,000 positives trains."""
    if grid is not None:
        monkeypatch.setattr(bpr, "bpr_grid", lambda n_positives, n_items: grid)
    dataset = load_ratings(plays)
    assert dataset.implicit and dataset.ratings["rating"].max() > 1  # repeats counted
    config = config_for(model, dataset=dataset.name, epochs=4)
    whole = train_and_evaluate(dataset, config, run_dir=tmp_path / "whole", progress=False)
    checkpoint = cut_short(dataset, config, tmp_path / "cut", 2)
    resumed = train_and_evaluate(dataset, config, run_dir=tmp_path / "cut", progress=False, resume=checkpoint)
    assert resumed.test == whole.test
    assert_same_state(whole.model, resumed.model)


@pytest.mark.parametrize(
    ("lines", "model", "message"),
    [
        (["u1,i1"] * 30, "ials", "every one of its interactions is the same pair \\(user u1, item i1\\)"),
        ([f"u1,i{k}" for k in range(30)], "bpr", "all of its interactions are user u1's"),
        ([f"u{k},i1" for k in range(30)], "ials", "all of its interactions are with item i1"),
        ([f"u{k % 7},i{k % 5}" for k in range(35)], "dotbias",
         "holds interactions, not ratings: dotbias predicts ratings; train a ranking model on them: "
         "bpr or ials"),
    ],
)  # fmt: skip
def test_what_no_model_here_can_learn_from_is_one_line_and_exit_2(
    lines: list[str], model: str, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "events.csv"
    path.write_text("user,item\n" + "\n".join(lines) + "\n")
    ran = run_cli(
        train_command.cli,
        "train.py",
        ["--ratings", str(path), "--model", model, "--no-progress"],
        tmp_path / "c",
    )
    assert ran.returncode == 2
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in ran.stderr
    assert re.search(message, errors[0]), errors[0]
    assert " on events (" not in ran.stdout  # no header announcing a run that never starts


def test_a_vast_weight_that_breaks_ials_is_named_as_the_datas_not_a_step_size(tmp_path: Path) -> None:
    """ials takes no steps: where its loss overflows, the advice is to look at the data, not `lr`."""
    path = tmp_path / "events.csv"
    rows = [f"u{k % 9},i{k % 7},{1e30 if k == 3 else 1 + k % 4}" for k in range(63)]
    path.write_text("user,item,plays\n" + "\n".join(rows) + "\n")
    args = ["--ratings", str(path), "--model", "ials", "--epochs", "2", "--no-progress"]
    ran = run_cli(train_command.cli, "train.py", args, tmp_path / "c")
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    (error,) = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert "look for extreme values in the data" in error and "lr" not in error


def test_compare_on_interactions_trains_the_ranking_models_and_judges_every_interaction(
    plays: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    ran = run_cli(
        compare_command.cli,
        "compare.py",
        ["--ratings", str(plays), "--out", str(out), "--no-measurements", "--no-progress"],
        tmp_path / "c",
    )
    assert ran.returncode == 0, ran.stderr
    assert "training bpr, ials on plays" in ran.stdout + ran.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["relevance_threshold"] == 1.0  # every test interaction is relevant
    text = (out / "report.md").read_text()
    assert "Spearman" not in text and " nan" not in text  # no two rating models' orders to compare
    assert "Item biases correlated" not in text  # no model with biases: no tables of headers alone


def test_bprs_explanation_adds_up_to_its_score_and_shows_no_rating(plays: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["--ratings", str(plays), "--model", "bpr", "--epochs", "2", "--no-progress", "--out", str(out)]
    assert run_cli(train_command.cli, "train.py", args, tmp_path / "c").returncode == 0
    ran = run_cli(
        recommend_command.cli,
        "recommend.py",
        [str(out), "--explain", "--user", "l3", "--item", "s7"],
        tmp_path / "c",
    )
    assert ran.returncode == 0, ran.stderr
    header, values = ran.stdout.strip().splitlines()[-2:]
    assert header.split() == ["item_bias", "factors", "score"]
    item_bias, factors, score = map(float, values.split())
    assert item_bias + factors == pytest.approx(score, abs=2e-6)


def test_interactions_without_a_model_named_train_ials_with_its_own_flags(
    plays: Path, tmp_path: Path
) -> None:
    """The default model (dotbias) would refuse interactions: left out, `--model` is ials there, and
    a flag only ials reads (--alpha) passes the checks made before the file is read."""
    out = tmp_path / "run"
    args = ["--ratings", str(plays), "--alpha", "5", "--epochs", "2", "--no-progress", "--out", str(out)]
    ran = run_cli(train_command.cli, "train.py", args, tmp_path / "c")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("ials on plays")
    written = json.loads((out / "config.json").read_text())
    assert written["model"] == "ials" and written["alpha"] == 5


def test_where_a_gpu_would_take_ratings_interactions_stay_on_the_cpu_for_ials(
    plays: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device is chosen before the file is read, for the rating model a GPU would train; once the
    file turns out to hold interactions it is chosen again, for ials, which trains on the CPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    out = tmp_path / "run"
    args = ["--ratings", str(plays), "--epochs", "1", "--no-progress", "--out", str(out)]
    ran = run_cli(train_command.cli, "train.py", args, tmp_path / "c")
    assert ran.returncode == 0, ran.stderr
    assert json.loads((out / "config.json").read_text())["device"] == "cpu"


def test_a_flag_the_defaulted_model_cannot_take_says_which_model_it_was_given(
    plays: Path, tmp_path: Path
) -> None:
    args = ["--ratings", str(plays), "--lr", "0.1", "--no-progress", "--out", str(tmp_path / "run")]
    ran = run_cli(train_command.cli, "train.py", args, tmp_path / "c")
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    (error,) = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert "--lr has no effect on ials" in error
    assert "the model for interactions when --model is left out" in error
    assert not (tmp_path / "run").exists()  # nothing claimed for a run that never started


def test_a_flag_neither_default_model_takes_is_refused_before_the_file_is_read(tmp_path: Path) -> None:
    """--alpha suits ials and --y-range dotbias: no model takes both, so the ratings' error stands."""
    args = ["--ratings", str(tmp_path / "absent.csv"), "--alpha", "5", "--y-range", "1", "5"]
    ran = run_cli(train_command.cli, "train.py", args, tmp_path / "c")
    assert ran.returncode == 2
    (error,) = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert "--alpha has no effect on dotbias" in error


def test_the_unseen_id_policy_is_refused_for_a_ranking_model_and_left_to_the_rating_models_in_compare(
    plays: Path, tmp_path: Path
) -> None:
    """A ranking model's lists are judged, not its errors: --unknown mean would do nothing to it."""
    args = ["--ratings", str(plays), "--model", "ials", "--unknown", "mean", "--no-progress"]
    ran = run_cli(train_command.cli, "train.py", args, tmp_path / "c")
    assert ran.returncode == 2 and "--unknown has no effect on ials" in ran.stderr
    out = tmp_path / "report"
    compared = run_cli(
        compare_command.cli,
        "compare.py",
        ["--dataset", "tiny", "--models", "dot", "bpr", "--unknown", "mean", "--out", str(out),
         "--no-measurements", "--no-progress"],
        tmp_path / "c",
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    assert json.loads((out / "results.json").read_text())["unknown_policy"] == "mean"


@pytest.mark.parametrize(("implicit", "what"), [(True, "interactions"), (False, "ratings")])
def test_a_ranking_runs_summary_counts_the_test_pairs_left_out_for_unseen_ids(
    implicit: bool, what: str
) -> None:
    """A cut by time on a log kept user after user leaves the last users out of training: their test
    pairs cannot be judged, and the line says how many were left out, as a rating run's RMSE line
    does, rather than only naming the few users judged."""
    scores = {"ndcg@10": 0.5, "precision@10": 0.2, "recall@10": 0.5, "users": 1.0}
    config = SimpleNamespace(ranks=True, relevant=4.0)

    def result(unseen: int) -> Any:
        return SimpleNamespace(config=config, test=scores, metrics=lambda: {"n_test_unknown": unseen})

    line = common.test_summary(result(1234), implicit)
    assert line.endswith(f"in test; 1,234 test {what} with ids unseen in training left out)")
    assert common.test_summary(result(0), implicit).endswith(" in test)")
