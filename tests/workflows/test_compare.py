"""Baselines, bias read-outs, the comparison tables and the report folder."""

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest
import torch

from recsys.commands import compare as compare_command
from recsys.data.catalog import planted_truth
from recsys.data.dataset import RatingsDataset
from recsys.data.encoding import RatingTensors
from recsys.data.synthetic import make_synthetic
from recsys.evaluate.baselines import fit_damped_bias, global_mean
from recsys.evaluate.biases import learned_biases
from recsys.evaluate.factors import cosine_neighbours, item_vectors, principal_components
from recsys.models.core import DotProduct, DotProductBias, EmbeddingProjection, LinearDotProduct
from recsys.workflows.compare import (
    BASELINES,
    Comparison,
    bias_correlations,
    compare_models,
    extreme_items,
    item_table,
    models_with_biases,
    norm_bias_frame,
    user_table,
)
from recsys.workflows.report import write_report

ROOT = Path(__file__).resolve().parent.parent


def _compare_script() -> ModuleType:
    """The compare command's module, to call its parse_args and main in-process."""
    return compare_command


@pytest.fixture(scope="module")
def tiny_comparison(tiny: RatingsDataset) -> Comparison:
    return compare_models(tiny, "random", epochs=3, truth=planted_truth("tiny"))


def test_damped_bias_matches_a_hand_computation() -> None:
    # users 0,0,1 rate items 0,1,0 with 5,3,4; mean 4; damping 1.
    train = RatingTensors(torch.tensor([[0, 0], [0, 1], [1, 0]]), torch.tensor([5.0, 3.0, 4.0]))
    model = fit_damped_bias(train, n_users=2, n_items=2, damping=1.0)
    item0, item1 = (1.0 + 0.0) / (2 + 1), (-1.0) / (1 + 1)
    user0 = ((5 - 4 - item0) + (3 - 4 - item1)) / (2 + 1)
    user1 = (4 - 4 - item0) / (1 + 1)
    assert model.item_bias.tolist() == pytest.approx([item0, item1])
    assert model.user_bias.tolist() == pytest.approx([user0, user1])
    assert model(torch.tensor([[1, 1]])).item() == pytest.approx(4 + user1 + item1)
    assert global_mean(train, 2, 2)(torch.tensor([[0, 1], [1, 0]])).tolist() == pytest.approx([4.0, 4.0])


def test_explicit_biases_are_the_bias_tables() -> None:
    model = DotProductBias(3, 4, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.user_bias.weight.copy_(torch.tensor([[0.1], [0.2], [0.3]]))
        model.item_bias.weight.copy_(torch.tensor([[1.0], [2.0], [3.0], [4.0]]))
    biases = learned_biases(model)
    assert biases is not None and biases.kind == "explicit"
    assert biases.user.tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert biases.item.tolist() == pytest.approx([1.0, 2.0, 3.0, 4.0])
    model.user_bias.weight.data.zero_()  # a copy, not a view of the live weights
    assert biases.user.tolist() == pytest.approx([0.1, 0.2, 0.3])


def test_implied_biases_of_linear_match_the_expansion() -> None:
    """(u + b_u) . (i + b_i) = u.i + b_u.i + u.b_i + b_u.b_i: item bias b_u.i, user bias u.b_i."""
    model = LinearDotProduct(3, 4, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.user_linear.bias.copy_(torch.tensor([1.0, -2.0]))
        model.item_linear.bias.copy_(torch.tensor([0.5, 3.0]))
    biases = learned_biases(model)
    assert biases is not None and biases.kind == "implied"
    for item in range(4):
        i = model.item_linear.weight[:, item].detach()
        assert biases.item[item] == pytest.approx(float(1.0 * i[0] - 2.0 * i[1]))
    for user in range(3):
        u = model.user_linear.weight[:, user].detach()
        assert biases.user[user] == pytest.approx(float(0.5 * u[0] + 3.0 * u[1]))
    # The decomposition is exact: score = u.i + user bias + item bias + b_u.b_i.
    x = torch.tensor([[2, 3]])
    u, i = model.user_linear.weight[:, 2].detach(), model.item_linear.weight[:, 3].detach()
    expected = u @ i + biases.user[2] + biases.item[3] + (1.0 * 0.5 - 2.0 * 3.0)
    assert model.score(x[:, 0], x[:, 1]).item() == pytest.approx(float(expected), abs=1e-6)


def test_implied_biases_of_embproj_match_the_expansion() -> None:
    model = EmbeddingProjection(3, 4, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.user_projection.bias.copy_(torch.tensor([0.3, -1.0]))
        model.item_projection.bias.copy_(torch.tensor([2.0, 0.7]))
        model.user_projection.weight.copy_(torch.tensor([[1.0, 2.0], [0.0, 1.0]]))
    biases = learned_biases(model)
    assert biases is not None
    users, items = torch.arange(3), torch.arange(4)
    user_vectors = model.user_factors(users) @ model.user_projection.weight.t()
    item_vectors = model.item_factors(items) @ model.item_projection.weight.t()
    assert biases.item == pytest.approx((item_vectors @ torch.tensor([0.3, -1.0])).detach().double().numpy())
    assert biases.user == pytest.approx((user_vectors @ torch.tensor([2.0, 0.7])).detach().double().numpy())


def test_models_without_biases_say_so() -> None:
    assert learned_biases(DotProduct(3, 4, 2)) is None
    assert learned_biases(LinearDotProduct(3, 4, 2, bias=False)) is None


def test_comparison_scores_every_model_and_baseline(tiny_comparison: Comparison) -> None:
    table = tiny_comparison.score_table()
    assert table["model"].tolist() == [*BASELINES, "dot", "dotbias", "linear", "embproj"]
    assert (table["rmse"] > 0).all() and (table["mae"] <= table["rmse"]).all()
    by_model = table.set_index("model")
    assert by_model.at["damped-bias", "rmse"] < by_model.at["global-mean", "rmse"]
    assert (
        by_model.at["dot", "parameters"]
        == (len(tiny_comparison.data.users) + len(tiny_comparison.data.items)) * 50
    )
    assert models_with_biases(tiny_comparison) == ["dotbias", "linear", "embproj"]


def test_item_table_decodes_raw_ids_and_titles(tiny_comparison: Comparison) -> None:
    items = item_table(tiny_comparison)
    data = tiny_comparison.data
    model = tiny_comparison.models["dotbias"]
    raw = int(items["item"].iloc[7])
    inner = int(data.items.encode(np.array([raw]))[0])
    row = items.set_index("item").loc[raw]
    assert row["title"] == f"Synthetic item {raw}"
    assert row["dotbias"] == pytest.approx(float(model.item_bias.weight[inner, 0].detach()))
    train_ratings = data.train.y[data.train.x[:, 1] == inner]
    assert row["n_ratings"] == len(train_ratings)
    assert row["mean_rating"] == pytest.approx(float(train_ratings.mean()))
    truth = planted_truth("tiny")
    assert truth is not None and row["planted"] == pytest.approx(truth.item_bias[raw - 1])
    users = user_table(tiny_comparison)
    assert users["user"].tolist() == data.users.raw_ids.tolist()


def test_bias_correlations_and_extremes(tiny_comparison: Comparison) -> None:
    items = item_table(tiny_comparison)
    correlations = bias_correlations(items, ["dotbias"])
    assert correlations["against"].tolist() == ["damped-bias", "mean_rating", "n_ratings", "planted"]
    pearson = correlations.set_index("against").at["damped-bias", "pearson"]
    assert pearson == pytest.approx(np.corrcoef(items["dotbias"], items["damped-bias"])[0, 1])
    spearman = correlations.set_index("against").at["mean_rating", "spearman"]
    ranks = items[["dotbias", "mean_rating"]].rank()
    assert spearman == pytest.approx(np.corrcoef(ranks["dotbias"], ranks["mean_rating"])[0, 1])
    lowest, highest = extreme_items(items, "dotbias", n=3)
    assert lowest["dotbias"].tolist() == sorted(items["dotbias"])[:3]
    assert highest["dotbias"].tolist() == sorted(items["dotbias"], reverse=True)[:3]


def test_dotbias_recovers_the_planted_biases() -> None:
    """The evaluation issue's bar: Pearson r >= 0.9 for item and user biases on default synthetic data."""
    dataset, truth = make_synthetic()
    comparison = compare_models(dataset, "random", models=["dotbias"], truth=truth)
    for table in (item_table(comparison), user_table(comparison)):
        assert table["dotbias"].corr(table["planted"]) >= 0.9


def test_factor_helpers() -> None:
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [-1.0, 0.0], [0.0, 1.0]])
    neighbours, similarity = cosine_neighbours(vectors, 0, n=2)
    assert neighbours.tolist() == [1, 3]
    assert similarity[0] == pytest.approx(0.9 / np.hypot(0.9, 0.1))
    points = principal_components(np.array([[0.0, 0.0], [2.0, 2.0], [4.0, 4.0]]), 1)
    assert np.abs(points[:, 0]).tolist() == pytest.approx([2 * np.sqrt(2), 0.0, 2 * np.sqrt(2)])
    model = DotProductBias(3, 4, 2)
    assert np.array_equal(item_vectors(model), model.item_factors.weight.detach().double().numpy())


def test_report_writes_every_file(tiny_comparison: Comparison, tmp_path: Path) -> None:
    folds = pd.concat(
        [tiny_comparison.score_table().assign(fold=name) for name in ("a", "b")], ignore_index=True
    )
    report = write_report(tiny_comparison, tmp_path, fold_scores=folds)
    figures = ["rmse.png", "learning_curves.png", "item_bias_extremes.png", "item_bias_scatter.png",
               "bias_distributions.png", "item_map.png"]  # fmt: skip
    for name in figures:
        assert (tmp_path / name).stat().st_size > 1000, name
        assert f"({name})" in report.read_text()
    text = report.read_text()
    assert "`dot` has no per-user or per-item bias" in text
    assert "Explicit biases (`dotbias`)" in text and "Implied biases (`linear`, `embproj`)" in text
    # The report speaks to its reader alone: no pointers to documents the reader does not have.
    assert "mission" not in text.lower() and "issue" not in text.lower()
    assert "| dotbias | planted |" in text
    results = json.loads((tmp_path / "results.json").read_text())
    assert [row["model"] for row in results["scores"]] == tiny_comparison.score_table()["model"].tolist()
    assert len(results["fold_summary"]) == 6 and results["fold_summary"][0]["rmse_std"] == 0.0


def test_norm_bias_frame_reports_each_run_as_it_starts(tiny_comparison: Comparison) -> None:
    lines: list[str] = []
    frame = norm_bias_frame(tiny_comparison.data.train, epochs=0, progress=lines.append)
    runs = [(norm, dtype) for dtype in ("float32", "float64") for norm in ("layer", "batch", "none")]
    assert lines == [
        f"measuring bias before a norm: {norm}, {dtype} ({number}/6)"
        for number, (norm, dtype) in enumerate(runs, start=1)
    ]
    assert list(zip(frame["norm"], frame["dtype"], strict=True)) == runs


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
    assert progress[2] == "measuring bias before a norm: layer, float32 (1/6)"
    assert progress[7] == "measuring bias before a norm: none, float64 (6/6)"
    assert (out / "report.md").is_file() and (out / "results.json").is_file()
    text = (out / "report.md").read_text()
    assert (
        "## Embedding versus Linear, measured" in text
        and "## A bias right before a normalisation layer" in text
    )
    results = json.loads((out / "results.json").read_text())
    sizes = {row["n_users"] for row in results["Embedding versus Linear, measured"]}
    assert sizes == {100, 300}
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
    assert "measuring" not in capsys.readouterr().err
    assert "## Embedding versus Linear" not in (tmp_path / "report" / "report.md").read_text()


def test_compare_script_help_shows_only_real_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        _compare_script().parse_args(["--help"])
    assert raised.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal's width
    assert "None" not in text
    for default in ("[default: u1]", "[default: 0]", "[default: drop]", "[default: 1000 10000 100000]"):
        assert default in text
    assert "saving the minutes" in text


def test_compare_script_rejects_folds_on_tiny(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "scripts/compare.py", "--dataset", "tiny", "--split", "folds",
         "--out", str(tmp_path / "r")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("error:") and "Traceback" not in result.stderr
