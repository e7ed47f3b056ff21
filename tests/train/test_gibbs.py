"""The Gibbs sampler for `bpmf`: its conditionals, its Wishart draws, the posterior mean the model
holds, and what a fit recovers."""

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr

from recsys.config import config_for, model_for
from recsys.data.catalog import load_dataset, planted_truth
from recsys.data.dataset import RatingsDataset
from recsys.models import BayesianMF
from recsys.models.base import MAX_KEPT_DRAWS
from recsys.train.gibbs import _sample_side, _wishart
from recsys.workflows.experiment import train_and_evaluate


def test_a_row_is_drawn_around_its_gaussian_conditional_mean() -> None:
    """With zero noise the draw is the conditional mean: (prior precision + alpha X^T X)^-1
    (prior precision prior mean + alpha X^T y), X the other side's rows [q, 1], y less their bias."""
    rng = np.random.default_rng(0)
    k1, n_other = 4, 6
    other = rng.normal(size=(n_other, k1))
    starts = np.array([0, 3, 3, 7])  # row 1 has no ratings: its prior mean
    others = np.array([0, 2, 5, 1, 1, 3, 4])
    targets = rng.normal(size=7)
    prior_mean, alpha = rng.normal(size=k1), 1.7
    root = rng.normal(size=(k1, k1))
    prior_precision = root @ root.T + np.eye(k1)
    draws = np.zeros((3, k1))
    _sample_side(draws, other, starts, others, targets, alpha, prior_mean, prior_precision, np.zeros((3, k1)))
    for row in range(3):
        rated = others[starts[row] : starts[row + 1]]
        features = np.column_stack([other[rated, :-1], np.ones(len(rated))])
        y = targets[starts[row] : starts[row + 1]] - other[rated, -1]
        precision = prior_precision + alpha * features.T @ features
        expected = np.linalg.solve(precision, prior_precision @ prior_mean + alpha * features.T @ y)
        np.testing.assert_allclose(draws[row], expected, rtol=1e-8)


def test_a_rows_draws_spread_as_its_conditional_covariance() -> None:
    rng = np.random.default_rng(1)
    k1 = 3
    prior_precision = np.diag([1.0, 4.0, 9.0])
    noise = rng.standard_normal((20_000, k1))
    draws = np.zeros((20_000, k1))
    starts = np.zeros(20_001, np.int64)  # no ratings: the draws follow the prior
    _sample_side(draws, np.zeros((1, k1)), starts, np.zeros(0, np.int64), np.zeros(0), 1.0,
                 np.zeros(k1), prior_precision, noise)  # fmt: skip
    np.testing.assert_allclose(np.cov(draws.T), np.linalg.inv(prior_precision), atol=0.02)


def test_wishart_draws_average_to_df_times_the_scale() -> None:
    scale = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    mean = torch.stack([_wishart(scale, 7, generator) for _ in range(4000)]).mean(0)
    torch.testing.assert_close(mean, 7 * scale, rtol=0.05, atol=0.1)


def test_the_model_predicts_the_mean_of_its_draws() -> None:
    model = BayesianMF(4, 5, 2, y_range=None)
    generator = torch.Generator().manual_seed(0)
    draws = [
        (torch.randn(4, 3, generator=generator), torch.randn(5, 3, generator=generator)) for _ in range(3)
    ]
    x = torch.tensor([[u, i] for u in range(4) for i in range(5)])
    each = []
    for slot, (users, items) in enumerate(draws):
        model.set_draw(slot, 3, users, items, mean=3.5)
        rows_u, rows_i = users[x[:, 0]], items[x[:, 1]]
        each.append(3.5 + rows_u[:, 2] + rows_i[:, 2] + (rows_u[:, :2] * rows_i[:, :2]).sum(1))
    torch.testing.assert_close(model(x), torch.stack(each).mean(0))
    model.set_draw(0, 3, *draws[2], mean=3.5)  # slot 0 starts afresh
    torch.testing.assert_close(model(x), each[2])


def test_burn_in_discards_a_fifth_and_keeps_at_least_one_draw() -> None:
    burn_in = BayesianMF.burn_in
    assert burn_in(200) == 40 and burn_in(1) == 0 and burn_in(4) == 0


@pytest.mark.parametrize("sweeps", [1, 10, 125, 126, 512, 5000])
def test_at_most_max_kept_draws_are_kept_evenly_spaced_ending_on_the_last(sweeps: int) -> None:
    slots = [BayesianMF.kept_slot(epoch, sweeps) for epoch in range(1, sweeps + 1)]
    burn_in = BayesianMF.burn_in(sweeps)
    assert all(slot == (0, BayesianMF.kept_draws(sweeps)) for slot in slots[:burn_in])
    kept = [epoch for epoch, slot in enumerate(slots, 1) if epoch > burn_in and slot is not None]
    assert len(kept) == BayesianMF.kept_draws(sweeps) <= MAX_KEPT_DRAWS and kept[-1] == sweeps
    assert [slots[epoch - 1] for epoch in kept] == [(k, len(kept)) for k in range(len(kept))]
    assert len(set(np.diff(kept))) <= 1  # evenly spaced
    if sweeps - burn_in <= MAX_KEPT_DRAWS:
        assert len(kept) == sweeps - burn_in  # every draw after the burn-in


@pytest.mark.parametrize("chains", [2, 3, 4])
@pytest.mark.parametrize("sweeps", [1, 10, 128, 512, 5000])
def test_chains_keep_the_same_sweeps_in_neighbouring_slots_in_order(sweeps: int, chains: int) -> None:
    """Every chain keeps the draws of the same sweeps; those of one sweep take neighbouring slots, so
    the slots fill in order as the model's running means need; only the first chain's burn-in draws
    stand in slot 0; all chains together keep at most MAX_KEPT_DRAWS."""
    total = BayesianMF.kept_draws(sweeps, chains)
    assert total % chains == 0 and total <= max(MAX_KEPT_DRAWS, chains)
    filled = []
    burn_in = BayesianMF.burn_in(sweeps)
    for epoch in range(1, sweeps + 1):
        slots = [BayesianMF.kept_slot(epoch, sweeps, chain, chains) for chain in range(chains)]
        if epoch <= burn_in:
            assert slots == [(0, total)] + [None] * (chains - 1)
        elif slots[0] is not None:
            assert slots == [(slots[0][0] + chain, total) for chain in range(chains)]
            filled += [slot for slot, _ in slots]
        else:
            assert slots == [None] * chains
    assert filled == list(range(total))
    assert BayesianMF.kept_slot(sweeps, sweeps, chains - 1, chains) == (total - 1, total)  # ends on the last


def test_a_runs_chains_start_apart_share_the_data_and_pool_their_draws(tiny: RatingsDataset) -> None:
    """members 3: three chains from different starts, over one copy of the data, whose kept draws the
    model holds side by side and whose pooled validation figure is the model's own."""
    from recsys.train.trainer import _SampledEpochs
    from recsys.workflows.experiment import prepare

    config = config_for("bpmf", dataset="tiny", epochs=12, n_factors=2, members=3)
    data, config = prepare(tiny, config)
    model = model_for(config, len(data.users), len(data.items), torch.Generator().manual_seed(0))
    epochs = _SampledEpochs(model, data.train, data.test, config, threads=1)
    first, *others = epochs.chains
    for chain in others:
        assert chain.by_user is first.by_user and chain.valid is first.valid
        assert not torch.equal(chain.draws[0], first.draws[0])
    epochs.close()
    result = train_and_evaluate(tiny, config, progress=False)
    assert result.model.user_factors.weight.shape[1] == 2 * BayesianMF.kept_draws(12, 3) == 2 * 3 * 10
    assert result.history[-1].valid_rmse == pytest.approx(result.test["rmse"], rel=1e-5)
    one = train_and_evaluate(
        tiny, config_for("bpmf", dataset="tiny", epochs=12, n_factors=2, members=1), progress=False
    )
    assert one.test["rmse"] != result.test["rmse"]


def test_a_long_chain_keeps_a_block_per_kept_draw_and_its_validation_is_the_models(
    tiny: RatingsDataset,
) -> None:
    config = config_for("bpmf", dataset="tiny", epochs=300, n_factors=2, members=1)
    result = train_and_evaluate(tiny, config, progress=False)
    assert result.model.user_factors.weight.shape[1] == 2 * BayesianMF.kept_draws(300) < 2 * (300 - 60)
    assert result.history[-1].valid_rmse == pytest.approx(result.test["rmse"], rel=1e-5)


@pytest.fixture(scope="module")
def synthetic() -> RatingsDataset:
    return load_dataset("synthetic")


@pytest.mark.slow  # a Gibbs fit and a dotbias fit of the synthetic data (8 s)
def test_a_fit_recovers_the_planted_biases_and_beats_dotbias(synthetic: RatingsDataset) -> None:
    truth = planted_truth(synthetic)
    assert truth is not None
    result = train_and_evaluate(synthetic, config_for("bpmf", dataset="synthetic", epochs=60), progress=False)
    dotbias = train_and_evaluate(synthetic, config_for("dotbias", dataset="synthetic"), progress=False)
    assert result.test["rmse"] < dotbias.test["rmse"], (result.test, dotbias.test)
    for side, ids, planted in (
        ("user", result.data.users, truth.user_bias),
        ("item", result.data.items, truth.item_bias),
    ):
        learned = getattr(result.model, f"{side}_bias").weight.detach().squeeze(-1).numpy()
        assert pearsonr(learned, planted[ids.raw_ids - 1]).statistic >= 0.9, side
    # The validation figure each sweep is the model's own, from the sampler's running sums.
    assert result.history[-1].valid_rmse == pytest.approx(result.test["rmse"], rel=1e-5)


def test_the_draws_do_not_depend_on_the_threads(tiny: RatingsDataset) -> None:
    config = config_for("bpmf", dataset="tiny", epochs=6)
    runs = [train_and_evaluate(tiny, config, progress=False, threads=threads) for threads in (1, 2)]
    for name, tensor in runs[0].model.state_dict().items():
        assert torch.equal(tensor, runs[1].model.state_dict()[name]), name


def test_the_chains_do_not_depend_on_torchs_threads(synthetic: RatingsDataset) -> None:
    """Regression: a sweep's sum of squared errors, its chi-square and each side's scatter matrix are
    torch reductions, which torch cuts by its own threads (the caller's, or RatingRegressor's
    `threads`) once they pass 32,768 entries, so `fit` drew other last bits of the chains on two torch
    threads than on one; it now holds torch at one thread, as a run does."""
    from recsys.train.trainer import fit
    from recsys.workflows.experiment import prepare

    data, config = prepare(
        synthetic, config_for("bpmf", dataset="synthetic", epochs=2, n_factors=2, members=1)
    )
    states, saved = [], []
    before = torch.get_num_threads()
    try:
        for torch_threads in (1, 2):
            torch.set_num_threads(torch_threads)
            model = model_for(config, len(data.users), len(data.items), torch.Generator().manual_seed(0))
            fit(
                model, data.train, data.test, config, torch.Generator().manual_seed(0), threads=1,
                progress=False, on_checkpoint=lambda stats, training: saved.append(training),
            )  # fmt: skip
            states.append(saved[-1]["chains"][0])
    finally:
        torch.set_num_threads(before)
    assert states[0]["alpha"] == states[1]["alpha"]
    for one, two in zip(states[0]["draws"], states[1]["draws"], strict=True):
        assert torch.equal(one, two)


def test_a_run_gives_back_numbas_thread_count(tiny: RatingsDataset) -> None:
    """The sampler runs on the run's threads; the caller's own numba code keeps the caller's."""
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here: nothing a run could change")
    before = numba.get_num_threads()
    numba.set_num_threads(2)
    try:
        train_and_evaluate(tiny, config_for("bpmf", dataset="tiny", epochs=2), progress=False, threads=1)
        assert numba.get_num_threads() == 2
    finally:
        numba.set_num_threads(before)
