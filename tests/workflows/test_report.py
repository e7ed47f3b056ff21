"""recsys.workflows.report: the report folder written from a comparison."""

import copy
import dataclasses
import errno
import json
import os
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from recsys.errors import RecsysError
from recsys.models.feature_coding import coding_bytes
from recsys.workflows import report as report_module
from recsys.workflows.compare import Comparison
from recsys.workflows.report import write_report


def test_report_writes_every_file(tiny_comparison: Comparison, tmp_path: Path) -> None:
    folds = pd.concat(
        [tiny_comparison.score_table().assign(fold=name) for name in ("a", "b")], ignore_index=True
    )
    ranking_folds = pd.concat(
        [tiny_comparison.ranking.assign(fold=name) for name in ("a", "b")], ignore_index=True
    )
    report = write_report(tiny_comparison, tmp_path, fold_scores=folds, fold_ranking=ranking_folds)
    figures = ["rmse.png", "learning_curves.png", "item_bias_extremes.png", "item_bias_scatter.png",
               "bias_distributions.png", "item_map.png", "ndcg_against_rmse.png", "fold_in.png"]  # fmt: skip
    for name in figures:
        assert (tmp_path / name).stat().st_size > 1000, name
        assert f"({name})" in report.read_text()
    text = report.read_text()
    assert "`dot` has no per-user or per-item bias" in text
    assert "The ranking models (`bpr`, `ials`) are left out here" in text
    # bfm trained again with each feature group: a row of four RMSEs, the ids' alone first.
    section = text.split("## What each kind of information adds")[1].split("##")[0]
    assert "| model | features | rmse | cold_0 | cold_1 | cold_3 | cold_5 |" in section
    assert [line.split(" | ")[1] for line in section.splitlines() if line.startswith("| bfm |")] == [
        "ids",
        "implicit",
        "side",
        "side,implicit",
        "side,implicit,time",
    ]
    assert "`time` (bfm), a bias per user and day of the ratings: its rmse reads each test" in section
    # tiny has no users' table: neither bfm nor svdpp starts a new user from side features.
    assert (
        "`svdpp` and `bfm` have no side features of users here" in text and "reads what users are" not in text
    )
    assert (
        "Explicit biases (`dotbias`, `svdpp`, `bpmf`, `bfm`)" in text
        and "Implied biases (`linear`, `embproj`)" in text
    )
    # The report speaks to its reader alone: no pointers to documents the reader does not have.
    assert "mission" not in text.lower() and "issue" not in text.lower()
    assert "| dotbias | planted |" in text
    # The row is said to be the generator's biases: the reader meets the word there first.
    assert "popularity and `planted`, the biases the synthetic ratings were generated from:" in text
    assert "## Top-N lists" in text and "## New users from a few ratings (fold-in)" in text
    assert "`dotbias` is " in text and " by NDCG@10 (" in text  # the paragraph on each model
    results = json.loads((tmp_path / "results.json").read_text())
    assert [row["model"] for row in results["scores"]] == tiny_comparison.score_table()["model"].tolist()
    assert (
        len(results["fold_summary"]) == len(tiny_comparison.score_table())
        and results["fold_summary"][0]["rmse_std"] == 0.0
    )
    assert [row["model"] for row in results["ranking"]] == tiny_comparison.ranking["model"].tolist()
    assert results["ranking_fold_summary"][0]["ndcg@10_std"] == 0.0
    assert set(results["fold_in"]) == set(tiny_comparison.fold_in)


def test_lists_with_nothing_relevant_to_find_are_said_to_be_unjudged() -> None:
    """No test rating reaches the relevance threshold: every list's NDCG is undefined."""
    from recsys.workflows.report import ranking_paragraph

    scores = pd.DataFrame({"model": ["dotbias"], "rmse": [0.9]})
    metrics = {"ndcg@10": [float("nan")] * 2, "coverage@10": [0.0, 0.0]}
    ranking = pd.DataFrame({"model": ["dotbias", "most-popular"], **metrics})
    assert (
        ranking_paragraph(scores, ranking)
        == "No test user has a relevant test rating, so no list could be judged."
    )


@pytest.fixture(scope="module")
def plays() -> Comparison:
    """bpr on a few thousand plays (user and item columns, no rating: counts), one epoch."""
    from recsys.data.dataset import RatingsDataset
    from recsys.workflows.compare import compare_models

    rng = np.random.default_rng(0)
    events = pd.DataFrame({"user": rng.integers(1, 40, 4000), "item": rng.integers(1, 150, 4000)})
    dataset = RatingsDataset.from_frame(events, name="plays")
    assert dataset.implicit
    return compare_models(dataset, "random", models=["bpr"], epochs=1)


def test_interactions_are_counted_as_interactions_not_ratings(plays: Comparison, tmp_path: Path) -> None:
    first = write_report(plays, tmp_path).read_text().split("## ")[0]
    train, test = len(plays.data.train), len(plays.data.test)
    assert f"{train:,} training and {test:,} test interactions" in first
    assert "rating" not in first


def test_a_full_disk_as_a_report_is_drawn_is_one_line_and_keeps_the_earlier_report(
    plays: Comparison, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a figure that could not be written for want of room was a traceback."""
    write_report(plays, tmp_path)
    earlier = {path.name: path.read_bytes() for path in tmp_path.iterdir()}

    def savefig(figure: Figure, path: Path, **kwargs: object) -> None:
        path.write_bytes(b"\x89PNG")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", savefig)
    with pytest.raises(RecsysError) as caught:
        write_report(plays, tmp_path)
    assert str(caught.value) == f"cannot write the report in {tmp_path}: No space left on device"
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == earlier  # and no draft


def test_ctrl_c_as_a_report_moves_in_takes_effect_once_the_new_report_is_whole(
    plays: Comparison, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: one landing between two of the renames left the earlier report.md over the new
    report's results and figures."""
    write_report(plays, tmp_path)
    whole = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    (tmp_path / "report.md").write_text("the earlier report\n")
    replace, sent = os.replace, []

    def interrupted_as_the_first_moves_in(source: Path, target: Path) -> None:
        replace(source, target)
        if Path(target).parent == tmp_path and not sent:  # not a file's rename inside the draft
            sent.append(signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C

    monkeypatch.setattr(report_module.os, "replace", interrupted_as_the_first_moves_in)
    with pytest.raises(KeyboardInterrupt):
        write_report(plays, tmp_path)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == whole  # and no draft


@pytest.fixture(scope="module")
def stars() -> Comparison:
    """dotbias on a few thousand star ratings 1-5, one epoch."""
    from recsys.data.dataset import RatingsDataset
    from recsys.workflows.compare import compare_models

    rng = np.random.default_rng(0)
    columns = {"user": rng.integers(1, 40, 4000), "item": rng.integers(1, 150, 4000)}
    ratings = pd.DataFrame({**columns, "rating": rng.integers(1, 6, 4000)}).drop_duplicates(["user", "item"])
    return compare_models(
        RatingsDataset.from_frame(ratings, name="stars"), "random", models=["dotbias"], epochs=1
    )


def _top_n(comparison: Comparison, out: Path) -> str:
    return write_report(comparison, out).read_text().split("## Top-N lists")[1].split("\n\n")[1]


@pytest.mark.slow  # comparisons of three datasets (4 s)
def test_relevance_and_graded_gain_are_said_as_the_threshold_and_data_are(
    plays: Comparison, stars: Comparison, tmp_path: Path
) -> None:
    assert "a test rating of at least 4" in _top_n(stars, tmp_path / "4")
    assert "with 4 relevant a 4 gains 1 and a 5 gains 2" in _top_n(stars, tmp_path / "4")
    top = _top_n(dataclasses.replace(stars, threshold=5.0), tmp_path / "5")
    assert "with 5 relevant a 5 gains 1" in top and "a 4 gains" not in top
    # A threshold between the data's steps (3.875 on half stars): the example is the least rating above it.
    top = _top_n(dataclasses.replace(stars, threshold=3.5), tmp_path / "3.5")
    assert "with 3.5 relevant a 4 gains 1.5 and a 5 gains 2.5" in top and "a 3.5 gains" not in top
    top = _top_n(plays, tmp_path / "plays")
    assert "rating" not in top and "rated" not in top
    assert "relevant means every test interaction" in top and "1 + its count" in top


def test_interactions_get_no_rmse_of_their_counts(plays: Comparison, tmp_path: Path) -> None:
    text = write_report(plays, tmp_path).read_text()
    accuracy = text.split("## Accuracy and cost")[1].split("## ")[0]
    assert "| model | engine | seconds | parameters |" in accuracy and "| rmse |" not in accuracy
    assert "no ratings to predict" in accuracy
    for name in ("rmse.png", "learning_curves.png"):
        assert f"({name})" not in text and not (tmp_path / name).exists()
    assert "rmse" in pd.DataFrame(json.loads((tmp_path / "results.json").read_text())["scores"])


def test_no_ndcg_against_rmse_figure_without_a_model_that_has_an_rmse(
    plays: Comparison, stars: Comparison, tmp_path: Path
) -> None:
    text = write_report(plays, tmp_path / "plays").read_text()
    assert (
        "(ndcg_against_rmse.png)" not in text and not (tmp_path / "plays" / "ndcg_against_rmse.png").exists()
    )
    assert "No figure of NDCG@10 against RMSE" in text
    assert "(ndcg_against_rmse.png)" in write_report(stars, tmp_path / "stars").read_text()


def test_ranking_paragraph_on_interactions_speaks_of_no_ratings(plays: Comparison, tmp_path: Path) -> None:
    text = write_report(plays, tmp_path).read_text()
    paragraph = next(line for line in text.splitlines() if line.startswith("`bpr` is trained to rank"))
    assert "RMSE is a better fit" not in paragraph and "rate" not in paragraph
    assert "went on to interact with" in paragraph


def test_fold_in_on_interactions_speaks_of_interactions_and_draws_no_rmse(
    plays: Comparison, tmp_path: Path
) -> None:
    text = write_report(plays, tmp_path).read_text()
    section = text.split("## New users from a few interactions (fold-in)")[1].split("## ")[0]
    assert "rating" not in section and "at least 20 training interactions" in section
    assert "ndcg@10 of the folded-in users" in section and "rmse of the folded-in users" not in section
    assert (tmp_path / "fold_in.png").stat().st_size > 0


def test_a_list_level_with_the_chart_at_the_printed_places_is_not_called_above_it() -> None:
    from recsys.workflows.report import ranking_paragraph

    scores = pd.DataFrame({"model": ["bpr"], "rmse": [float("nan")]})
    ranking = pd.DataFrame(
        {"model": ["bpr", "most-popular"], "ndcg@10": [0.5721, 0.5718], "coverage@10": [0.1, 0.01]}
    )
    assert "0.572, level with the popularity chart's 0.572" in ranking_paragraph(scores, ranking)
    ranking["ndcg@10"] = [0.5731, 0.5718]
    assert "0.573, above the popularity chart's 0.572" in ranking_paragraph(scores, ranking)


def test_no_bias_figure_when_no_model_has_biases_to_show(plays: Comparison, tmp_path: Path) -> None:
    text = write_report(plays, tmp_path).read_text()
    assert "(bias_distributions.png)" not in text and not (tmp_path / "bias_distributions.png").exists()


def test_fold_in_says_which_models_start_new_users_from_their_side_features(
    tiny_comparison: Comparison, tmp_path: Path
) -> None:
    """Only a model trained on users' side features starts a new user from them: svdpp by default
    reads the items each user rated alone, and the feature-group table points up to the fold-in."""
    bfm = copy.deepcopy(tiny_comparison.models["bfm"])
    bfm.user_feature_coding = coding_bytes("[]")  # as a run on a users' table keeps its codings
    described = dataclasses.replace(tiny_comparison, models={**tiny_comparison.models, "bfm": bfm})
    text = write_report(described, tmp_path).read_text()
    fold_in = text.split("(fold-in)")[1].split("##")[0]
    assert "`bfm` reads what users are: each user starts from its side features" in fold_in
    assert "`svdpp` has no side features of users here: each user starts from the n items it rated" in fold_in
    assert "as the fold-in section above describes" in text
    assert text.index("(fold-in)") < text.index("## What each kind of information adds")
