"""recsys.workflows.report: the report folder written from a comparison."""

import json
from pathlib import Path

import pandas as pd

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
    ]
    assert "`bfm` reads what users are" in text
    assert (
        "Explicit biases (`dotbias`, `svdpp`, `bpmf`, `bfm`)" in text
        and "Implied biases (`linear`, `embproj`)" in text
    )
    # The report speaks to its reader alone: no pointers to documents the reader does not have.
    assert "mission" not in text.lower() and "issue" not in text.lower()
    assert "| dotbias | planted |" in text
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
