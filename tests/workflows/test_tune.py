"""recsys.workflows.tune: the search reads the training part only, and its best setting is retrained
and scored once."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recsys.config import config_for
from recsys.data.dataset import RatingsDataset
from recsys.data.splits import make_split
from recsys.errors import RecsysError
from recsys.workflows.tune import (
    SEARCH_SPACES,
    TuneResult,
    best_settings,
    planned_trials,
    plot_trials,
    run_settings,
    search_space,
    tune,
)

SEARCH = {"trials": 3, "folds": 2, "threads": 1}


@pytest.fixture(scope="module")
def tuned(tiny: RatingsDataset) -> TuneResult:
    return tune(tiny, "dotbias", "random", **SEARCH)


def test_the_table_ranks_every_setting_and_the_best_is_retrained(
    tuned: TuneResult, tiny: RatingsDataset
) -> None:
    table, best, run = tuned.table, tuned.best, tuned.run
    assert len(table) == 3 and table["valid_rmse"].is_monotonic_increasing
    assert set(best) == set(SEARCH_SPACES["compiled"])
    assert all(table.at[0, name] == value for name, value in best.items())
    fields = {name: value for name, value in best.items() if name != "y_margin"}
    assert all(getattr(run.config, name) == value for name, value in fields.items())
    # The margin searched is retrained as the y_range it gives on the training part's scale (1-5).
    top = 5 * (1 + best["y_margin"])
    assert run.config.y_range == (0.0, top)
    assert run.config.split == "random" and np.isfinite(run.test["rmse"])
    config_file = {"model": "dotbias", "engine": "compiled", **fields, "y_range": (0.0, top)}
    assert best_settings(tuned) == config_file


def test_a_searched_setting_becomes_run_config_fields() -> None:
    setting = {"lr": 0.05, "y_margin": 0.2, "init_scale": 2.0}
    assert run_settings(setting, (1.0, 5.0)) == {"lr": 0.05, "init_scale": 2.0, "y_range": (0.0, 6.0)}
    assert run_settings({"y_margin": 0.0}, (-10.0, 10.0)) == {"y_range": (-10.0, 10.0)}
    assert run_settings({"lr": 0.05}, (1.0, 5.0)) == {"lr": 0.05}  # no margin searched: y_range left


def test_poisoned_test_ratings_change_nothing_the_search_chose(
    tuned: TuneResult, tiny: RatingsDataset
) -> None:
    """The search never reads the test part: replace every test rating with noise and it chooses the
    same setting with the same validation scores; only the final, once-read test score moves."""
    again = tune(poison_test(tiny), "dotbias", "random", **SEARCH)
    assert again.best == tuned.best
    assert again.table.equals(tuned.table)
    assert again.run.test["rmse"] != tuned.run.test["rmse"]


def poison_test(dataset: RatingsDataset) -> RatingsDataset:
    """`dataset` with every rating of its random split's test part replaced by noise."""
    test_rows = make_split(dataset, "random", test_frac=0.2, test_n=10, seed=0).test.index
    ratings = dataset.ratings.copy()
    noise = np.random.default_rng(1).uniform(1, 5, len(test_rows)).round()
    ratings.loc[test_rows, "rating"] = noise.astype(np.float32)
    return dataclasses.replace(dataset, ratings=ratings)


def test_more_folds_than_training_ratings_is_a_one_line_error(tiny: RatingsDataset) -> None:
    with pytest.raises(RecsysError, match=r"^`folds` 100000: the training part of split random holds 3,200 "):
        tune(tiny, "dotbias", "random", trials=1, folds=100_000)


@pytest.mark.parametrize(
    ("search", "message"),
    [
        ({"trials": 0, "folds": 2}, r"^`trials` must be at least 1, got 0$"),
        ({"trials": -1, "folds": 2}, r"^`trials` must be at least 1, got -1$"),
        ({"trials": 1, "folds": 1}, r"^`folds` must be at least 2 \(cross-validation\), got 1$"),
    ],
)
def test_no_trials_or_a_single_fold_is_a_one_line_error(
    tiny: RatingsDataset, search: dict[str, int], message: str
) -> None:
    with pytest.raises(RecsysError, match=message):
        tune(tiny, "dotbias", "random", **search)


def test_a_model_searches_its_engines_space_unless_its_registry_entry_names_its_own() -> None:
    from recsys.workflows.tune import search_space

    assert search_space("dotbias", "compiled") == SEARCH_SPACES["compiled"]
    assert search_space("svdpp", "device") == search_space("svdpp", "compiled")  # the same settings
    assert search_space("bpmf", "autograd") == SEARCH_SPACES["autograd"]
    sampler = search_space("bpmf", "compiled")  # its Gibbs sampler has no learning rate or penalty
    assert set(sampler) == {"epochs", "members", "n_factors"}  # its chains, too


@pytest.mark.parametrize(
    ("model", "blown", "score", "test", "highest"),
    [("bpr", 1e9, "valid_ndcg@10", "ndcg@10", 1.0), ("dotbias", 1e30, "valid_rmse", "rmse", 5.0)],
)
def test_a_diverging_setting_is_passed_over_and_every_one_diverging_is_refused_in_one_line(
    tiny: RatingsDataset,
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    blown: float,
    score: str,
    test: str,
    highest: float,
) -> None:
    """A ranking model by validation NDCG@10, a rating model by RMSE. scikit-learn's cross_validate
    had scored a rating model's failed fit NaN, and raised "All the fits failed" (a traceback in
    tune.py) where every fold's did."""
    space = {"lr": [blown, 0.05], "epochs": [3], "n_factors": [8]}  # the first setting's steps blow up
    monkeypatch.setattr("recsys.workflows.tune.search_space", lambda model, engine: space)
    result = tune(tiny, model, "random", trials=2, folds=2)
    assert result.score == score
    table = result.table
    assert table["lr"].tolist() == [0.05, blown]  # the best first; the diverged setting has no score
    assert 0 < table.at[0, score] <= highest and np.isnan(table.at[1, score])
    assert result.best == {"lr": 0.05, "epochs": 3, "n_factors": 8}
    assert result.run.config.lr == 0.05 and 0 <= result.run.test[test] <= highest
    # Every setting diverging leaves nothing to retrain: refused after the search, not inside a retraining.
    space["lr"] = [blown]
    with pytest.raises(RecsysError, match="every one of the 1 settings tried diverged"):
        tune(tiny, model, "random", trials=1, folds=2)


def test_a_callers_mistake_in_a_fold_is_one_line_and_a_bugs_value_error_keeps_its_traceback(
    tiny: RatingsDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    from recsys.workflows.estimator import InputError, RatingRegressor

    for raised, expected in ((InputError("no scale"), RecsysError), (ValueError("a bug"), ValueError)):

        def fails(self: RatingRegressor, X: object, y: object, raised: Exception = raised) -> None:
            raise raised

        monkeypatch.setattr(RatingRegressor, "fit", fails)
        with pytest.raises(expected) as error:
            tune(tiny, "dotbias", "random", trials=1, folds=2)
        assert isinstance(error.value, RecsysError) == (expected is RecsysError), error.value


def test_poisoned_test_pairs_change_nothing_a_ranking_search_chose(tiny: RatingsDataset) -> None:
    searches = [tune(data, "ials", "random", trials=3, folds=2) for data in (tiny, poison_test(tiny))]
    assert searches[0].table.equals(searches[1].table)
    assert searches[0].run.test != searches[1].run.test  # only the once-read test score moves


def test_a_rating_model_is_refused_interactions_before_any_search() -> None:
    from recsys.data.synthetic import synthetic_interactions

    dataset, _ = synthetic_interactions(n_users=40, n_items=30, per_user=5)
    with pytest.raises(RecsysError, match="holds interactions, not ratings: dotbias predicts ratings"):
        tune(dataset, "dotbias", "random", trials=1, folds=2)


def test_a_split_that_leaves_nothing_to_score_is_refused_before_any_search() -> None:
    """One item: every random split's test rating has an item unseen in training, so the best setting
    could never be scored; the search is refused before its first trial, not after its last."""
    ratings = pd.DataFrame({"user": np.arange(8), "item": 0, "rating": np.arange(8) % 5 + 1.0})
    dataset = RatingsDataset.from_frame(ratings, user="user", item="item", rating="rating")
    tried: list[int] = []
    with pytest.raises(RecsysError, match="leaves no test rating whose user and item are both in training"):
        tune(dataset, "dotbias", "random", trials=2, folds=2, on_trial=lambda n, *_: tried.append(n))
    assert tried == []


def test_a_search_reads_the_feature_groups_it_is_given_and_its_best_setting_keeps_them() -> None:
    from conftest import planted_side_features

    result = tune(planted_side_features(), "svdpp", "random", features="side", **SEARCH)
    assert result.run.config.features == "side"
    assert best_settings(result)["features"] == "side"  # train.py --config best.json reads them too
    assert "features" not in best_settings(tune(planted_side_features(), "dotbias", "random", **SEARCH))


def test_a_grid_smaller_than_the_trials_asked_is_searched_whole_and_said_so() -> None:
    """ials' space is a grid: asking for more settings than it holds tries each once, no more, and
    without scikit-learn's warning; a space with a distribution in it takes the trials asked."""
    grid = config_for("ials")
    size = math.prod(len(values) for values in search_space("ials", grid.engine).values())
    assert planned_trials(grid, 10**9) == size and planned_trials(grid, 3) == 3
    assert planned_trials(config_for("dotbias"), 10**9) == 10**9


def test_plotting_the_trials_leaves_the_callers_matplotlib_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """plot_trials switched the process to matplotlib's Agg backend: in a notebook, its inline plots
    stopped showing after a search was plotted."""
    import matplotlib

    switched: list[str] = []
    monkeypatch.setattr(matplotlib, "use", lambda backend, **_: switched.append(backend))
    table = pd.DataFrame({"lr": [0.01, 0.05, 0.1], "valid_rmse": [0.95, 0.93, 0.97]})
    plot_trials(table, tmp_path / "trials.png", {"lr": 0.05})
    assert switched == []
    assert (tmp_path / "trials.png").read_bytes().startswith(b"\x89PNG")


def test_a_fold_that_judges_no_user_is_named_as_that_fold_not_as_every_setting_diverging() -> None:
    """Seven relevant ratings among 160: one fold of three holds out none of them, so its NDCG@10 is
    NaN whatever the setting; that was taken for each setting's divergence ("every one of the settings
    tried diverged ... train with a lower `lr`", for ials, which has none)."""
    rng = np.random.default_rng(0)
    stars = [1, 2, 3, 3, 2, 2, 1, 2, 3, 3, 2, 2, 1, 2, 3, 3, 2, 5]
    rows = [(user, item, float(rng.choice(stars))) for user in range(40) for item in rng.choice(30, 4, False)]
    ratings = pd.DataFrame(rows, columns=["user", "item", "rating"])
    dataset = RatingsDataset.from_frame(
        ratings, user="user", item="item", rating="rating", rating_scale=(1, 5)
    )
    with pytest.raises(
        RecsysError, match=r"^cross-validation fold 3 of 3 holds out no pair relevant to its user "
    ):
        tune(dataset, "ials", "random", trials=2, folds=3, threads=1)
