"""The Bayesian factorisation machine (`bfm`): its coordinate draws against their dense conditionals,
a planted feature effect recovered, a prediction from features alone, threads and resume."""

import math
from pathlib import Path

import numba
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import DAY, assert_same_state, cut_short, planted_days, planted_side_features

from recsys.config import config_for
from recsys.data.encoding import RatingTensors
from recsys.data.features import features_of, rows_for_new
from recsys.errors import RecsysError
from recsys.models.bayes import BayesianFM
from recsys.models.feature_coding import saved_codings
from recsys.models.fold_in import fold_in
from recsys.train.fm_gibbs import (
    START_SCALE,
    FMGibbsEpochs,
    _by_feature,
    _compose,
    _group_priors,
    _pair_scores,
    _row_sums,
    _sample_bin_biases,
    _sample_features,
    _update_residuals,
)
from recsys.workflows.experiment import train_and_evaluate


def test_a_coordinates_draws_are_their_conditional_means_one_feature_after_another() -> None:
    """With zero noise each feature's coordinate becomes the mean of its Gaussian conditional given
    every other feature's current value: the dense regression of the residuals on that feature's
    column of the design, one feature after another (Gauss-Seidel)."""
    rng = np.random.default_rng(0)
    pairs = np.array([[0, 0], [0, 2], [1, 1], [1, 2], [2, 0], [2, 1], [2, 2], [3, 1]])
    users = pd.DataFrame({"job": ["a", "b", "a|b", "b"]}, index=np.arange(4))
    rows, _ = features_of(("side", "implicit"), np.arange(4), np.arange(3), pairs, users, None)
    table = rng.normal(size=(rows.n_features, 3))
    other = rng.normal(size=(3, 3))  # the items' composed [factors, bias]
    targets = rng.normal(size=len(pairs))
    prior = (rng.normal(size=(3, 3)), rng.uniform(0.5, 2, size=(3, 3)))
    alpha, coordinate = 1.7, 1
    # The design: rating r's row of features (its user's), and the composed users.
    design = np.zeros((len(pairs), rows.n_features))
    for r, (user, _) in enumerate(pairs):
        span = slice(rows.starts[user], rows.starts[user + 1])
        design[r, rows.columns[span]] = rows.values[span]

    def residuals_of(values: np.ndarray) -> np.ndarray:
        composed = design @ values
        return (
            targets
            - composed[:, 2]
            - other[pairs[:, 1], 2]
            - np.sum(composed[:, :2] * other[pairs[:, 1], :2], 1)
        )

    expected = table.copy()
    h = other[pairs[:, 1], coordinate]
    for f in range(rows.n_features):
        g = rows.groups[f]
        column = design[:, f] * h
        partial = residuals_of(expected) + column * expected[f, coordinate]
        precision = prior[1][g, coordinate] + alpha * column @ column
        expected[f, coordinate] = (
            prior[1][g, coordinate] * prior[0][g, coordinate] + alpha * column @ partial
        ) / precision

    starts = np.bincount(pairs[:, 0], minlength=4).cumsum()
    starts = np.concatenate([[0], starts])
    others, rating_of = pairs[:, 1], np.arange(len(pairs))
    residuals = residuals_of(table)
    sums, squares = _row_sums(coordinate, other, (starts, others, rating_of), residuals)
    change = _sample_features(coordinate, table, _by_feature(rows), rows.groups, prior, alpha, sums, squares,
                              np.zeros(rows.n_features))  # fmt: skip
    np.testing.assert_allclose(table, expected, rtol=1e-9, atol=1e-12)
    _update_residuals(coordinate, change, other, (starts, others, rating_of), residuals)
    np.testing.assert_allclose(residuals, residuals_of(table), atol=1e-12)


@pytest.mark.parametrize("groups", [(), ("implicit",), ("side", "implicit")])
def test_a_chain_starts_with_summed_vectors_of_one_size(groups: tuple[str, ...]) -> None:
    """Each block's composed rows (a user's sum over its features) start at a root mean square of
    START_SCALE, so the ids alone start as large as every group together; two chains differ."""
    rng = np.random.default_rng(0)
    pairs = np.stack([rng.integers(0, 30, 300), rng.integers(0, 20, 300)], axis=1)
    users = pd.DataFrame({"job": rng.choice(["a", "b", "c"], 30), "age": rng.choice(["x", "y"], 30)})
    model = BayesianFM(30, 20, 4, (1.0, 5.0))
    model.set_features(*features_of(groups, np.arange(30), np.arange(20), pairs, users, None))
    ratings = torch.from_numpy(rng.integers(1, 6, 300).astype(np.float32))
    train = RatingTensors(torch.from_numpy(pairs), ratings)
    chain = FMGibbsEpochs(model, train, train, 8, 4, torch.Generator().manual_seed(0), chains=2)
    other = chain.next_chain(torch.Generator().manual_seed(1))
    for block, table, others in zip(chain.features, chain.tables, other.tables, strict=True):
        composed = _compose(block.starts, block.columns, block.values, table)
        assert math.sqrt(np.mean(composed[:, :4] ** 2)) == pytest.approx(START_SCALE)
        assert not composed[:, 4].any()  # the biases start at zero
        assert not np.allclose(table, others)


def test_a_planted_feature_effect_is_recovered_and_predicts_for_a_new_user() -> None:
    dataset = planted_side_features()
    runs = {
        features: train_and_evaluate(
            dataset,
            config_for("bfm", features=features, epochs=120, n_factors=4, split="random"),
            progress=False,
            threads=1,
        )
        for features in ("", "side")
    }
    # The side features carry the taste the ids alone cannot learn from six ratings each.
    assert runs["side"].test["rmse"] < runs[""].test["rmse"] - 0.04
    model = runs["side"].model
    # A user known only by its group: group a's predictions favour kind x by about the planted 2 stars.
    assert dataset.user_features is not None and dataset.item_features is not None
    new = pd.DataFrame({"group": ["a", "b"]}, index=["new a", "new b"])
    items = runs["side"].data.items.raw_ids
    kinds = dataset.item_features.loc[items, "kind"].to_numpy()
    rows = rows_for_new(("side",), saved_codings(model, "user"), new, new.index.to_numpy())
    scores = model.feature_scores(rows, torch.arange(len(items)))
    assert scores.shape == (2, len(items))
    for user, liked in ((0, "x"), (1, "y")):
        gap = float(scores[user, kinds == liked].mean() - scores[user, kinds != liked].mean())
        assert 1.2 < gap < 2.6, (liked, gap)
    # Fold-in starts a new user where its features place it: with no ratings, exactly there; with
    # ratings, the ridge moves it from there toward them.
    placed = model.feature_vectors(rows)
    # Rows of other groups than training's (a changed file, or implicit feedback it never had): refused.
    other = rows_for_new(
        ("side", "implicit"), saved_codings(model, "user"), new, new.index.to_numpy(), n_others=60
    )
    with pytest.raises(RecsysError, match="rows have 62 features where training had 2"):
        model.feature_vectors(other)
    nothing = [(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.float64))] * 2
    folded = fold_in(model, nothing, starts=[placed])
    torch.testing.assert_close(folded.scores(torch.tensor([0, 1])).float(), scores, rtol=1e-4, atol=1e-4)
    liked_items = torch.from_numpy(np.flatnonzero(kinds == "x")[:3])
    moved = fold_in(model, [(liked_items, torch.full((3,), 1.0, dtype=torch.float64))] * 2, starts=[placed])
    assert float(moved.predict(torch.tensor([0]), liked_items[:1])) < float(scores[0, liked_items[0]])


def test_a_model_loaded_without_its_features_is_not_trained_again_on_its_ids_alone() -> None:
    # Regression: a state dict keeps how the features were coded but not their rows, so bfm loaded from
    # a checkpoint and fitted again silently trained on its ids alone.
    dataset = planted_side_features(4)
    config = config_for("bfm", features="side", epochs=3, n_factors=3, split="random")
    run = train_and_evaluate(dataset, config, progress=False, threads=1)
    loaded = BayesianFM(len(run.data.users), len(run.data.items), 3, run.model.y_range)
    loaded.load_state_dict(run.model.state_dict())
    with pytest.raises(RecsysError, match=r"trained with user and item side features.*`set_features`"):
        FMGibbsEpochs(loaded, run.data.train, run.data.test, 3, 3, torch.Generator().manual_seed(0))
    loaded.set_features(*run.model.features)  # given back, it trains
    FMGibbsEpochs(loaded, run.data.train, run.data.test, 3, 3, torch.Generator().manual_seed(0))


def test_a_user_known_by_nothing_is_predicted_as_the_average_user() -> None:
    """An unseen user's own id is expected at the ids' mean (the prior's), not at zero: with the ids
    alone, a user with no features gets the mean of the training users' vectors and biases."""
    dataset = planted_side_features(3)
    run = train_and_evaluate(dataset, config_for("bfm", features="", epochs=6, members=2, n_factors=3),
                             progress=False, threads=1)  # fmt: skip
    model = run.model
    vectors, bias = model.feature_vectors(rows_for_new((), None, None, np.array(["new"])))
    form = model.bilinear_form()
    assert form is not None
    torch.testing.assert_close(vectors[0], form.user_vectors.mean(dim=0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bias[0], form.user_bias.mean(), rtol=1e-5, atol=1e-6)
    assert float(vectors.abs().max()) > 0


@pytest.mark.parametrize("ordinal", [False, True])
def test_the_draws_are_the_same_on_one_thread_or_two(ordinal: bool) -> None:
    dataset = planted_side_features(1)
    config = config_for("bfm", epochs=12, n_factors=3, split="random", ordinal=ordinal)
    before = numba.get_num_threads()
    try:
        one = train_and_evaluate(dataset, config, progress=False, threads=1)
        two = train_and_evaluate(dataset, config, progress=False, threads=2)
    finally:
        numba.set_num_threads(before)
    for name, tensor in one.model.state_dict().items():
        assert torch.equal(tensor, two.model.state_dict()[name]), name
    assert math.isfinite(one.test["rmse"])


def test_an_interrupted_run_resumes_to_the_same_model(tmp_path: Path) -> None:
    dataset = planted_side_features(2)
    config = config_for("bfm", epochs=10, n_factors=3, split="random")
    whole = train_and_evaluate(dataset, config, progress=False)
    checkpoint = cut_short(dataset, config, tmp_path, 4)
    resumed = train_and_evaluate(dataset, config, run_dir=tmp_path, progress=False, resume=checkpoint)
    assert [h.train_loss for h in whole.history] == [h.train_loss for h in resumed.history]
    assert_same_state(whole.model, resumed.model)


def test_a_groups_prior_is_drawn_from_its_normal_gamma_posterior() -> None:
    """lambda | v ~ Gamma(1/2 + n/2, 1/2 + (sum (v - mean)^2 + n mean^2 / (n + 1)) / 2) and mu | lambda, v
    ~ N(sum v / (n + 1), 1 / ((n + 1) lambda)), the conjugate posterior of the hyperprior mu ~ N(0,
    1 / lambda), lambda ~ Gamma(1/2, 1/2): the draws' moments against the closed forms."""
    v = np.array([0.3, -0.1, 0.8, 0.4, 0.2])
    n, mean = len(v), v.mean()
    shape, rate = 0.5 + n / 2, 0.5 + (np.sum((v - mean) ** 2) + n * mean**2 / (n + 1)) / 2
    random = np.random.default_rng(0)
    draws = [_group_priors(v[:, None], np.zeros(n, np.int64), 1, random) for _ in range(20_000)]
    mus, lambdas = (np.array([draw[part][0, 0] for draw in draws]) for part in (0, 1))
    assert lambdas.mean() == pytest.approx(shape / rate, rel=0.02)
    assert mus.mean() == pytest.approx(v.sum() / (n + 1), abs=0.01)
    # Var(mu) = E[1 / ((n + 1) lambda)] = rate / ((n + 1) (shape - 1)) for a Gamma(shape, rate) lambda.
    assert mus.var() == pytest.approx(rate / ((n + 1) * (shape - 1)), rel=0.05)


def test_a_time_bins_bias_is_drawn_from_its_conditional_and_scores_the_bins_ratings() -> None:
    """With zero noise each time bin's bias becomes the mean of its Gaussian conditional given the
    residuals of its ratings, which then lose its change; a pair's score adds its bin's bias."""
    rng = np.random.default_rng(1)
    pairs = np.array([[0, 0], [0, 2], [1, 1], [1, 2], [2, 0], [2, 1], [2, 2]])
    bin_of = np.array([0, 1, 1, 2, 0, 2, 1])
    users, items = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))  # composed [factors, bias]
    bin_bias, residuals = rng.normal(size=4), rng.normal(size=len(pairs))  # a fourth bin has none
    prior, alpha = (0.3, 1.5), 2.0
    expected_bias, expected_residuals = bin_bias.copy(), residuals.copy()
    for at in range(4):
        mine = bin_of == at
        partial = expected_residuals[mine] + bin_bias[at]
        expected_bias[at] = (prior[1] * prior[0] + alpha * partial.sum()) / (prior[1] + alpha * mine.sum())
        expected_residuals[mine] -= expected_bias[at] - bin_bias[at]
    by_bin = (np.array([0, 2, 5, 7, 7]), np.argsort(bin_of, kind="stable"))
    _sample_bin_biases(bin_bias, by_bin, prior, alpha, residuals, np.zeros(4))
    np.testing.assert_allclose(bin_bias, expected_bias, rtol=1e-12)
    np.testing.assert_allclose(residuals, expected_residuals, rtol=1e-12)
    assert bin_bias[3] == pytest.approx(prior[0])  # a bin without ratings: its prior's mean

    scores = _pair_scores(users, items, (bin_bias, bin_of), pairs[:, 0], pairs[:, 1])
    u, i = users[pairs[:, 0]], items[pairs[:, 1]]
    dense = u[:, 3] + i[:, 3] + bin_bias[bin_of] + (u[:, :3] * i[:, :3]).sum(1)
    np.testing.assert_allclose(scores, dense, rtol=1e-12)
    no_bins = (np.zeros(0), np.zeros(0, np.int64))
    np.testing.assert_allclose(_pair_scores(users, items, no_bins, pairs[:, 0], pairs[:, 1]),
                               dense - bin_bias[bin_of], rtol=1e-12)  # fmt: skip


def test_a_planted_user_day_effect_is_recovered_and_a_pair_without_a_time_is_at_the_bins_mean() -> None:
    dataset, offsets = planted_days()
    runs = {
        features: train_and_evaluate(
            dataset, config_for("bfm", features=features, epochs=40, members=2, n_factors=2), progress=False
        )
        for features in ("", "time")
    }
    assert runs["time"].test["rmse"] < runs[""].test["rmse"] - 0.1
    model = runs["time"].model
    assert model.n_time_bins == 600  # three days of each of 200 users
    # A user's pairs moved from one of its days to another follow the planted offsets' difference.
    data = runs["time"].data
    test = data.test.x
    first = int(model.time_origin)
    assert first == 1_000_000_000 - 1_000_000_000 % DAY  # the planted first day's start (UTC)
    user_of_row = torch.from_numpy(data.users.raw_ids[test[:, 0].numpy()].astype(np.int64))
    days = (test[:, 2] - first) // DAY
    moved = (days + 1) % 30  # a day the user may not have rated: then a user-day never seen
    at, elsewhere = model(test), model(torch.stack([test[:, 0], test[:, 1], first + moved * DAY], 1))
    seen = model.time_bins_of(test[:, 0], first + moved * DAY) < model.n_time_bins
    planted = offsets[user_of_row, days] - offsets[user_of_row, moved]
    learned = (at - elsewhere)[seen].detach().numpy()
    assert seen.sum() > 20
    assert np.corrcoef(learned, planted[seen.numpy()])[0, 1] > 0.8
    # Without a time, or at a user-day never seen, the bins' mean.
    untimed = model(test[:, :2])
    torch.testing.assert_close(elsewhere[~seen], untimed[~seen])
    outside = torch.stack([test[:, 0], test[:, 1], torch.full_like(test[:, 0], first - DAY)], 1)
    torch.testing.assert_close(model(outside), untimed)
    # Full ranking and explanations score a pair as forward does without a time.
    form = model.bilinear_form()
    assert form is not None
    users, items = test[:, 0], test[:, 1]
    torch.testing.assert_close(model.squash(form.scores(users)[torch.arange(len(users)), items]), untimed)
    explained = model.explain(users, items)
    assert explained is not None and "day" in explained.terms
    torch.testing.assert_close(sum(explained.terms.values()), explained.score)
    torch.testing.assert_close(explained.prediction, untimed)


def test_a_run_with_the_time_group_resumes_to_the_same_model(tmp_path: Path) -> None:
    dataset, _ = planted_days(1)
    config = config_for("bfm", features="time", epochs=8, members=2, n_factors=2)
    whole = train_and_evaluate(dataset, config, progress=False)
    checkpoint = cut_short(dataset, config, tmp_path, 5)
    resumed = train_and_evaluate(dataset, config, run_dir=tmp_path, progress=False, resume=checkpoint)
    assert [h.train_loss for h in whole.history] == [h.train_loss for h in resumed.history]
    assert_same_state(whole.model, resumed.model)
    assert resumed.model.n_time_bins == 600


def test_times_spanning_centuries_of_days_are_refused_as_not_seconds() -> None:
    model = BayesianFM(3, 3, 2)
    with pytest.raises(RecsysError, match=r"times reach 1,010,000,000,000.*are they milliseconds"):
        model.set_times(torch.tensor([0, 1]), torch.tensor([1_000_000_000_000, 1_010_000_000_000]))
    assert model.n_time_bins == 0  # nothing set


def test_milliseconds_spanning_a_month_are_refused_as_not_seconds() -> None:
    """A month of milliseconds since 1970 spans thirty thousand days, as seconds could, but every time
    lies thousands of years from 1970."""
    model = BayesianFM(3, 3, 2)
    month = 30 * 24 * 3600 * 1000
    with pytest.raises(RecsysError, match=r"times reach 1,602,592,000,000.*are they milliseconds"):
        model.set_times(torch.tensor([0, 1]), torch.tensor([1_600_000_000_000, 1_600_000_000_000 + month]))
    model.set_times(
        torch.tensor([0, 0]), torch.tensor([-1_000_000_000, 1_600_000_000])
    )  # before and after 1970
    assert model.n_time_bins == 2
    assert int(model.time_days) == 30_094  # the first (UTC) day to the last, both counted
