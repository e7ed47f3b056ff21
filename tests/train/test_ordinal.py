"""`bfm` with `ordinal`: the ordered probit's cutpoint posterior against finite differences, planted
cutpoints found, latent draws inside their steps, its link and inverse, a planted probit recovered,
resume, and ratings off a scale of steps refused."""

import math
from pathlib import Path

import numba
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import assert_same_state, cut_short, planted_side_features

from recsys.config import config_for
from recsys.data.dataset import RatingsDataset
from recsys.errors import RecsysError
from recsys.models.bayes import BayesianFM
from recsys.models.fold_in import fold_in
from recsys.models.squash import ordinal_expectation, ordinal_expectation_inverse
from recsys.train.ordinal import (
    _mode,
    _posterior,
    cutpoints_of,
    draw_cutpoint_parameters,
    draw_latent,
    first_cutpoint_parameters,
    rating_steps,
)
from recsys.workflows.experiment import train_and_evaluate

PLANTED = np.array([-2.0, -1.0, 0.3, 1.5])


def probit_steps(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Scores, and the step into which each score plus N(0, 1) noise falls between PLANTED."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(0, 1, n)
    return scores, np.searchsorted(PLANTED, scores + rng.normal(0, 1, n))


def test_the_cutpoint_posteriors_gradient_and_hessian_are_its_derivatives() -> None:
    scores, steps = probit_steps(2000)
    at = np.array([-1.7, -0.2, 0.4, 0.1])
    _, gradient, hessian = _posterior(at, scores, steps)
    h = 1e-5
    for j in range(len(at)):
        moved = at.copy()
        moved[j] += h
        up = _posterior(moved, scores, steps)
        moved[j] -= 2 * h
        down = _posterior(moved, scores, steps)
        assert (up[0] - down[0]) / (2 * h) == pytest.approx(gradient[j], rel=1e-5, abs=1e-4)
        np.testing.assert_allclose((up[1] - down[1]) / (2 * h), hessian[j], rtol=1e-4, atol=1e-3)
    assert np.all(np.linalg.eigvalsh(hessian) < 0)  # log-concave: one mode


def test_the_cutpoint_posterior_is_the_same_sum_on_one_thread_or_two() -> None:
    scores, steps = probit_steps(100_003)
    at = np.array([-1.7, -0.2, 0.4, 0.1])
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = _posterior(at, scores, steps)
        numba.set_num_threads(2)
        two = _posterior(at, scores, steps)
    finally:
        numba.set_num_threads(before)
    assert one[0] == two[0]
    assert np.array_equal(one[1], two[1]) and np.array_equal(one[2], two[2])


def test_planted_cutpoints_are_the_mode_and_the_draws_stay_about_them() -> None:
    scores, steps = probit_steps(50_000)
    parameters = first_cutpoint_parameters(scores, steps, 5)
    np.testing.assert_allclose(cutpoints_of(parameters), PLANTED, atol=0.04)
    rng = np.random.default_rng(1)
    draws, moved = [], 0
    for _ in range(200):
        drawn = draw_cutpoint_parameters(parameters, scores, steps, rng)
        moved += not np.array_equal(drawn, parameters)
        parameters = drawn
        draws.append(cutpoints_of(parameters))
    assert moved > 120  # a proposal about the mode is mostly taken
    np.testing.assert_allclose(np.mean(draws, axis=0), PLANTED, atol=0.05)
    spread = np.std(draws, axis=0)
    assert np.all(spread > 0.002) and np.all(spread < 0.05)  # 50,000 ratings pin them to about 0.01


def test_a_start_far_from_the_mode_still_gives_a_proposal() -> None:
    # Half stars, their ends nearly empty: cutpoints from one sweep's narrow scores, then scores far
    # wider (as a chain's early sweeps spread them). There the posterior in the parameters is not
    # log-concave: Newton's step went downhill, and the proposal's Cholesky failed.
    steps = np.repeat(np.arange(9), [1, 1, 4, 32, 135, 522, 221, 33, 11])
    rng = np.random.default_rng(1)
    scores = rng.normal(0, 0.2, len(steps))
    parameters = first_cutpoint_parameters(scores, steps, 9)
    wide = scores * 15 + 0.5 * np.sort(rng.normal(0, 3.0, len(steps)))
    assert np.linalg.eigvalsh(_posterior(parameters, wide, steps)[2]).max() > 0
    mode, precision, _ = _mode(parameters, wide, steps)
    assert np.abs(_posterior(mode, wide, steps)[1]).max() < 1e-3  # the mode itself
    assert np.linalg.eigvalsh(precision).min() > 0
    drawn = draw_cutpoint_parameters(parameters, wide, steps, np.random.default_rng(1))
    assert np.all(np.isfinite(drawn))


def test_latent_draws_fall_in_their_steps_with_the_truncated_normals_moments() -> None:
    cutpoints = np.array([0.0, 1.0])
    rng = np.random.default_rng(0)
    n = 40_000
    # Scores far past each end put every draw deep in a tail: the mirrored inverse keeps them inside.
    for score in (-40.0, -3.0, 0.0, 3.0, 40.0):
        scores = np.full(n, score)
        for step in range(3):
            drawn = draw_latent(scores, np.full(n, step), cutpoints, rng)
            low = -np.inf if step == 0 else cutpoints[step - 1]
            high = np.inf if step == 2 else cutpoints[step]
            assert np.all((drawn >= low) & (drawn <= high)), (score, step)
    # N(0, 1) above 0: mean phi(0) / (1 - Phi(0)) = sqrt(2 / pi).
    above = draw_latent(np.zeros(n), np.full(n, 1), np.array([0.0, np.inf]), rng)
    assert above.mean() == pytest.approx(math.sqrt(2 / math.pi), abs=0.02)
    assert above.var() == pytest.approx(1 - 2 / math.pi, abs=0.02)


def test_the_expected_rating_rises_from_the_lowest_to_the_highest_and_inverts() -> None:
    cutpoints = torch.tensor([-2.0, -1.0, 0.3, 1.5])
    scores = torch.linspace(-6, 6, 101, dtype=torch.float64)
    expected = ordinal_expectation(scores, cutpoints, 1.0, 1.0)
    assert torch.all(expected.diff() > 0)
    assert 1.0 < float(expected[0]) < 1.01 and 4.99 < float(expected[-1]) < 5.0
    inner = slice(10, 91)
    torch.testing.assert_close(
        ordinal_expectation_inverse(expected[inner], cutpoints, 1.0, 1.0), scores[inner]
    )
    ends = ordinal_expectation_inverse(torch.tensor([1.0, 5.0, 0.0, 9.0]), cutpoints, 1.0, 1.0)
    assert torch.isfinite(ends).all() and ends[0] == ends[2] and ends[1] == ends[3]


def planted_probit(seed: int = 0) -> RatingsDataset:
    """Stars 1-5 from an ordered probit: a user bias and an item bias (sd 1) plus N(0, 1), cut at
    -1.5, -0.5, 0.5 and 1.5."""
    rng = np.random.default_rng(seed)
    n_users, n_items = 300, 60
    rows = [(u, i) for u in range(n_users) for i in rng.choice(n_items, 20, replace=False)]
    users, items = np.array(rows).T
    latent = rng.normal(0, 1, n_users)[users] + rng.normal(0, 1, n_items)[items] + rng.normal(0, 1, len(rows))
    stars = 1 + np.searchsorted(np.array([-1.5, -0.5, 0.5, 1.5]), latent)
    frame = pd.DataFrame({"user": users, "item": items, "rating": stars.astype(float)})
    return RatingsDataset.from_frame(frame, rating_scale=(1.0, 5.0), name="probit")


def test_a_planted_probit_is_recovered_and_predicts_expected_stars() -> None:
    dataset = planted_probit()
    runs = {
        ordinal: train_and_evaluate(
            dataset, config_for("bfm", ordinal=ordinal, epochs=40, members=2, n_factors=2), progress=False
        )
        for ordinal in (False, True)
    }
    model = runs[True].model
    assert isinstance(model, BayesianFM)
    # The latent noise is N(0, 1) as planted, so the cutpoints' gaps are the planted ones.
    np.testing.assert_allclose(np.diff(model.cutpoints.numpy()), 1.0, atol=0.15)
    assert runs[True].test["rmse"] < runs[False].test["rmse"] + 0.01
    test = runs[True].data.test.x
    with torch.no_grad():
        predicted = model(test)
    assert float(predicted.min()) > 1.0 and float(predicted.max()) < 5.0
    # Full ranking and explanations go through the same expected rating.
    form = model.bilinear_form()
    assert form is not None
    users, items = test[:, 0], test[:, 1]
    torch.testing.assert_close(model.squash(form.scores(users)[torch.arange(len(users)), items]), predicted)
    explained = model.explain(users, items)
    assert explained is not None
    torch.testing.assert_close(explained.prediction, predicted)
    # A new user folded in from its ratings through the inverse of the expected rating.
    folded = fold_in(model, [(np.arange(10), np.full(10, 5.0)), (np.arange(10), np.full(10, 1.0))])
    fan, critic = (folded.predict(torch.full((5,), row), torch.arange(20, 25)) for row in (0, 1))
    assert torch.all(fan > critic + 1)


def test_an_ordinal_run_resumes_to_the_same_model(tmp_path: Path) -> None:
    dataset = planted_side_features(3)
    config = config_for("bfm", ordinal=True, features="side", epochs=8, members=2, n_factors=2)
    whole = train_and_evaluate(dataset, config, progress=False)
    checkpoint = cut_short(dataset, config, tmp_path, 5)
    resumed = train_and_evaluate(dataset, config, run_dir=tmp_path, progress=False, resume=checkpoint)
    assert [h.train_loss for h in whole.history] == [h.train_loss for h in resumed.history]
    assert_same_state(whole.model, resumed.model)
    assert len(resumed.model.cutpoints) == 4


def test_half_stars_are_steps_and_ratings_off_a_scale_of_steps_are_refused() -> None:
    steps, lowest, step = rating_steps(np.array([0.5, 1.0, 4.5, 5.0, 3.0]))
    assert (lowest, step) == (0.5, 0.5) and steps.tolist() == [0, 1, 8, 9, 5]
    with pytest.raises(RecsysError, match=r"`ordinal`.*rating 3.2 is not 1 plus a multiple of 0.5"):
        rating_steps(np.array([1.0, 2.0, 2.5, 3.2]))
    # Decimal steps, read as float32 as the data holds ratings: 0.1 is 0.10000000149.
    for lowest, step, n in ((0.0, 0.1, 11), (0.01, 0.01, 99), (0.3, 0.3, 30), (-1.0, 0.2, 11)):
        ratings = (lowest + step * np.arange(n)).astype(np.float32).astype(np.float64)
        steps, _, found = rating_steps(ratings)
        assert steps.tolist() == list(range(n)) and found == pytest.approx(step, rel=1e-6)
    with pytest.raises(RecsysError, match=r"rating 3 is not 1 plus a multiple of 0.3 .*3.7 to 4\)"):
        rating_steps(np.array([1.0, 3.0, 3.7, 4.0]))
    with pytest.raises(RecsysError, match=r"`ordinal` needs ratings of two values"):
        rating_steps(np.array([4.0, 4.0]))
    with pytest.raises(RecsysError, match=r"at most 100 steps: the ratings from 0 by 0.001 make 1001"):
        rating_steps(np.array([0.0, 0.001, 1.0]))


def test_ordinal_is_refused_where_no_ordered_probit_is_fitted() -> None:
    with pytest.raises(RecsysError, match=r"`ordinal` has no effect on dotbias"):
        config_for("dotbias", ordinal=True)
    with pytest.raises(RecsysError, match=r"`ordinal` applies to `engine` compiled only"):
        config_for("bfm", ordinal=True, engine="autograd")


def test_an_ordinal_model_folds_a_rating_at_an_end_step_in_as_half_a_step_inside_it() -> None:
    """A 5 of 1-5 says the latent value passed the last cutpoint, not that the expected rating is 5
    (an infinite score): fold-in reads it as 4.5, a 1 as 1.5; the steps between are inverted as they are."""
    model = BayesianFM(4, 6, 2)
    model.set_ordinal(1.0, 1.0, 5)
    model.cutpoints = torch.tensor([-1.5, -0.5, 0.5, 1.5])
    ratings = torch.tensor([1.0, 2.0, 3.5, 4.0, 5.0], dtype=torch.float64)
    read = torch.tensor([1.5, 2.0, 3.5, 4.0, 4.5], dtype=torch.float64)
    expected = ordinal_expectation_inverse(read, model.cutpoints, 1.0, 1.0)
    torch.testing.assert_close(model.unsquash(ratings), expected)
