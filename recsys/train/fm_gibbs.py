"""Gibbs sampling for the Bayesian factorisation machine (`bfm`), Rendle's MCMC for FMs over two blocks.

Each user is described by a sparse row of features (its id, its side features such as age or
occupation, the items it rated), each item likewise, and every feature f has a vector [v_f, w_f].
A user's vector is the sum of its features' vectors weighted by their values, P_u = sum x_uf v_f
(and its bias B_u = sum x_uf w_f), an item's Q_i likewise, and

    rating_ui ~ N(mean + B_u + B_i + P_u . Q_i, 1 / alpha).

Only pairs across the two blocks interact: a pair of one user's own features adds the same to every
rating of that user, which its bias already can. Each feature group (the ids, each side feature, the
rated items) has its own prior per coordinate, N(mu_gc, 1 / lambda_gc), with a Normal-Gamma
hyperprior, and alpha a Gamma(1, 1) prior, as in Rendle's Bayesian FM (libFM's MCMC, myFM). The
time group, where the model has it, adds a bias per user-day, w_ud for user u's ratings on day d,
drawn after the two blocks under a prior of its own.

A sweep samples one coordinate of every feature at a time, each from its Gaussian conditional, with
the relational trick (Rendle, "Scaling factorization machines to relational data", 2013): with the
other block fixed, a user feature's conditional needs only each user's sums over its ratings, so a
coordinate costs a pass over the ratings and one over the feature rows, however many features each
row has. All randomness is drawn from the trainer's torch generator before each kernel runs, so a
seed gives the same draws on any number of threads and a checkpoint resumes exactly.
"""

import copy
import math
from typing import Any

import numba
import numpy as np
import torch

from recsys.data.encoding import RatingTensors
from recsys.data.features import SIDES, FeatureRows, features_of
from recsys.errors import RecsysError
from recsys.models.bayes import BayesianFM
from recsys.models.feature_coding import keeps_codings
from recsys.train.gibbs import ALPHA_RATE, ALPHA_SHAPE, ALPHA_START, START_SCALE, KeptMean
from recsys.train.grouping import grouped, rows_of
from recsys.train.jit import NO_REORDERING, compiled
from recsys.train.ordinal import (
    cutpoints_of,
    draw_cutpoint_parameters,
    draw_latent,
    first_cutpoint_parameters,
    rating_steps,
)

# The hyperprior on each group's prior: mu ~ N(0, 1 / (PRIOR_GAMMA lambda)), lambda ~ Gamma(shape
# PRIOR_SHAPE / 2, rate PRIOR_RATE / 2) (libFM's and myFM's choices).
PRIOR_GAMMA, PRIOR_SHAPE, PRIOR_RATE = 1.0, 1.0, 1.0


def _by_feature(block: FeatureRows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A block's entries grouped by feature (CSC): where each feature's start, its rows, values."""
    return grouped(block.columns, rows_of(block.starts), block.values, block.n_features)  # type: ignore[no-any-return]


@compiled(parallel=True, fastmath=NO_REORDERING)
def _compose(starts: np.ndarray, columns: np.ndarray, values: np.ndarray, table: np.ndarray) -> np.ndarray:
    composed = np.zeros((len(starts) - 1, table.shape[1]))
    for row in numba.prange(len(starts) - 1):
        for t in range(starts[row], starts[row + 1]):
            value, column = values[t], columns[t]
            for c in range(table.shape[1]):
                composed[row, c] += value * table[column, c]
    return composed


@compiled(parallel=True, fastmath=NO_REORDERING)
def _row_sums(
    coordinate: int,
    other: np.ndarray,
    by_row: tuple[np.ndarray, ...],
    residuals: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """For each row: sum h e and sum h^2 over its ratings, h being the other side's `coordinate` (1
    for the bias, the last) and e the rating's residual. by_row: (where each row's ratings start,
    their other side's indices, their places among the residuals)."""
    starts, others, rating_of = by_row
    n = len(starts) - 1
    sums, squares = np.zeros(n), np.zeros(n)
    bias = coordinate == other.shape[1] - 1
    for row in numba.prange(n):
        total, square = 0.0, 0.0
        for t in range(starts[row], starts[row + 1]):
            h = 1.0 if bias else other[others[t], coordinate]
            total += h * residuals[rating_of[t]]
            square += h * h
        sums[row], squares[row] = total, square
    return sums, squares


@compiled(fastmath=True)
def _sample_features(
    coordinate: int,
    table: np.ndarray,
    by_feature: tuple[np.ndarray, np.ndarray, np.ndarray],
    groups: np.ndarray,
    prior: tuple[np.ndarray, np.ndarray],
    alpha: float,
    sums: np.ndarray,
    squares: np.ndarray,
    noise: np.ndarray,
) -> np.ndarray:
    """Draw table[f, coordinate] for every feature f in turn from its conditional; each row's change
    of the coordinate is returned (the features of one row are drawn one after another, each seeing
    the others' new values through the row's sums)."""
    starts, rows, values = by_feature
    prior_mean, prior_precision = prior
    change = np.zeros(len(sums))
    for f in range(len(groups)):
        g = groups[f]
        old = table[f, coordinate]
        weight, target = 0.0, 0.0
        for t in range(starts[f], starts[f + 1]):
            row, x = rows[t], values[t]
            weight += x * x * squares[row]
            target += x * (sums[row] + x * old * squares[row])
        precision = prior_precision[g, coordinate] + alpha * weight
        mean = (prior_precision[g, coordinate] * prior_mean[g, coordinate] + alpha * target) / precision
        new = mean + noise[f] / math.sqrt(precision)
        step = new - old
        table[f, coordinate] = new
        for t in range(starts[f], starts[f + 1]):
            row, x = rows[t], values[t]
            sums[row] -= x * step * squares[row]
            change[row] += x * step
    return change


@compiled(parallel=True, fastmath=NO_REORDERING)
def _update_residuals(
    coordinate: int,
    change: np.ndarray,
    other: np.ndarray,
    by_row: tuple[np.ndarray, ...],
    residuals: np.ndarray,
) -> None:
    """Take each row's change of `coordinate` out of its ratings' residuals (by_row as _row_sums')."""
    starts, others, rating_of = by_row
    bias = coordinate == other.shape[1] - 1
    for row in numba.prange(len(starts) - 1):
        if change[row] == 0.0:
            continue
        for t in range(starts[row], starts[row + 1]):
            h = 1.0 if bias else other[others[t], coordinate]
            residuals[rating_of[t]] -= change[row] * h


@compiled(parallel=True, fastmath=NO_REORDERING)
def _sample_bin_biases(
    bin_bias: np.ndarray,
    by_bin: tuple[np.ndarray, np.ndarray],
    prior: tuple[float, float],
    alpha: float,
    residuals: np.ndarray,
    noise: np.ndarray,
) -> None:
    """Draw every time bin's bias from its Gaussian conditional and take its change out of the bin's
    ratings' residuals (by_bin: where each bin's ratings start, their places among the residuals).
    Bins share no rating, so they are drawn at once."""
    starts, ratings = by_bin
    prior_mean, prior_precision = prior
    for at in numba.prange(len(starts) - 1):
        old = bin_bias[at]
        target = 0.0
        for t in range(starts[at], starts[at + 1]):
            target += residuals[ratings[t]] + old
        precision = prior_precision + alpha * (starts[at + 1] - starts[at])
        new = (prior_precision * prior_mean + alpha * target) / precision + noise[at] / math.sqrt(precision)
        bin_bias[at] = new
        for t in range(starts[at], starts[at + 1]):
            residuals[ratings[t]] -= new - old


@compiled(parallel=True, fastmath=NO_REORDERING)
def _pair_scores(
    user_rows: np.ndarray,
    item_rows: np.ndarray,
    bins: tuple[np.ndarray, np.ndarray],
    users: np.ndarray,
    items: np.ndarray,
) -> np.ndarray:
    """B_u + B_i + P_u . Q_i for each pair, from rows [factors, bias], and with the time group its
    bin's bias (bins: the bins' biases and each pair's bin, or both empty). Gathering the rows
    whole in numpy copied them all, a fifth of a sweep."""
    k = user_rows.shape[1] - 1
    bin_bias, bin_of = bins
    scores = np.empty(len(users))
    for j in numba.prange(len(users)):
        user, item = users[j], items[j]
        score = user_rows[user, k] + item_rows[item, k]
        for c in range(k):
            score += user_rows[user, c] * item_rows[item, c]
        if len(bin_of):
            score += bin_bias[bin_of[j]]
        scores[j] = score
    return scores


def _group_sums(groups: np.ndarray, n_groups: int, rows: np.ndarray) -> np.ndarray:
    """Each group's sum of `rows`, column by column."""
    return np.stack([np.bincount(groups, column, n_groups) for column in rows.T], axis=1)


def _group_priors(
    table: np.ndarray, groups: np.ndarray, n_groups: int, random: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """A draw of each group's prior mean and precision per coordinate from their Normal-Gamma
    posterior given its n features' rows v, jointly (no chain between them): lambda | v ~ Gamma((shape
    + n) / 2, (rate + gamma m^2 + sum (v - m)^2) / 2) with m = sum v / (n + gamma) (that sum is the
    rate's sum of squares about the rows' mean plus gamma n mean^2 / (n + gamma)), then mu | lambda, v ~
    N(m, 1 / ((n + gamma) lambda))."""
    counts = np.bincount(groups, minlength=n_groups).astype(np.float64)[:, None]
    totals = _group_sums(groups, n_groups, table)
    mean = totals / (counts + PRIOR_GAMMA)
    squares = _group_sums(groups, n_groups, (table - mean[groups]) ** 2)
    spread = PRIOR_RATE + PRIOR_GAMMA * mean**2 + squares
    shapes = np.broadcast_to((PRIOR_SHAPE + counts) / 2, totals.shape)
    precision = 2 * random.standard_gamma(shapes) / spread  # twice a Gamma(df / 2): a chi-square(df)
    noise = random.standard_normal(totals.shape)
    return mean + noise / np.sqrt((counts + PRIOR_GAMMA) * precision), precision


def _time_bins(model: BayesianFM, ratings: RatingTensors) -> np.ndarray:
    """Each rating's bin in the model's time group: its time is x's third column."""
    if ratings.x.shape[1] != 3:
        raise ValueError("the time group reads each rating's time: x must be (n, 3) [user, item, time]")
    x = ratings.x.cpu()
    return model.time_bins_of(x[:, 0], x[:, 2]).numpy()


class FMGibbsEpochs:
    """Sweeps of the Bayesian FM's sampler; the model holds the mean of the draws kept so far (during
    the burn-in, the latest draw alone)."""

    def __init__(
        self,
        model: BayesianFM,
        train: RatingTensors,
        valid: RatingTensors,
        sweeps: int,
        n_factors: int,
        generator: torch.Generator,
        chains: int = 1,
        ordinal: bool = False,
    ) -> None:
        """`generator` draws the chain's start; `chains`: how many chains (`next_chain`) the run pools;
        `ordinal`: the ratings as steps of an ordered probit (recsys.train.ordinal), whose latent values
        the sweeps then fit in place of the ratings."""
        if model.features is None and (known := [side for side in SIDES if keeps_codings(model, side)]):
            # Loaded from a state dict, which keeps how the features were coded but not their rows.
            raise RecsysError(
                f"cannot train bfm again on its ids alone: it was trained with {' and '.join(known)} side "
                "features, which its saved state does not hold; give them with `set_features` first"
            )
        self.model, self.sweeps, self.n_factors = model, sweeps, n_factors
        self.chain, self.chains, self.ordinal = 0, chains, ordinal
        users, items = train.x[:, 0].cpu(), train.x[:, 1].cpu()
        values = train.y.cpu().double()
        self.mean = float(values.mean())
        if ordinal:  # the cutpoints place the scores: no global mean
            self.steps, lowest, step = rating_steps(values.numpy())
            if not len(model.rating_steps):  # a resumed model keeps its kept draws' cutpoints
                model.set_ordinal(lowest, step, int(self.steps.max()) + 1)
            self.mean = 0.0
        self.targets = (values - self.mean).numpy()
        self.valid = KeptMean(valid, self.mean, model.squash)
        user_ids, item_ids = (np.arange(len(table)) for table in model.id_vectors() or ())
        no_pairs = np.zeros((0, 2), np.int64)
        features = model.features or features_of((), user_ids, item_ids, no_pairs, None, None)  # ids alone
        self.features = features
        self.by_feature = [_by_feature(block) for block in features]
        order = np.arange(len(values))
        self.pairs = (users.numpy(), items.numpy())
        self.by_row = [
            grouped(self.pairs[0], self.pairs[1], order, features[0].n_rows),
            grouped(self.pairs[1], self.pairs[0], order, features[1].n_rows),
        ]
        # The time group: each training and validation rating's bin, and the training ratings by bin.
        self.bin_of = self.valid_bins = np.zeros(0, np.int64)
        if model.n_time_bins:
            self.bin_of, self.valid_bins = (_time_bins(model, part) for part in (train, valid))
            starts, ratings, _ = grouped(self.bin_of, order, order, model.n_time_bins)
            self.by_bin = (starts, ratings)
        self._start(generator)

    def _start(self, generator: torch.Generator) -> None:
        """The chain's first draw, from `generator`: random factors for every feature (a zero start would
        make every group's prior a point), scaled so that each block's composed rows have a root mean
        square of START_SCALE; zero biases."""
        self.tables = []
        for block in self.features:
            table = np.zeros((block.n_features, self.n_factors + 1))
            drawn = torch.randn(block.n_features, self.n_factors, generator=generator, dtype=torch.float64)
            table[:, : self.n_factors] = drawn.numpy()
            composed = _compose(block.starts, block.columns, block.values, table)[:, : self.n_factors]
            size = math.sqrt(np.mean(composed**2))
            if size > 0:  # a block whose rows have no features keeps its zero start
                table *= START_SCALE / size
            self.tables.append(table)
        self.time_bias = np.zeros(self.model.n_time_bins)  # zero, as the blocks' biases start
        self.alpha = 1.0 if self.ordinal else ALPHA_START  # the probit's latent noise is N(0, 1)
        self.cutpoint_parameters = np.zeros(0)  # drawn at the first sweep, from its scores

    def next_chain(self, generator: torch.Generator) -> "FMGibbsEpochs":
        """The run's next chain, from its own start drawn from `generator`: the data's rows and the
        validation sums shared with this one (the chains' kept draws are pooled, recsys.train.gibbs)."""
        chain = copy.copy(self)
        chain.chain = self.chain + 1
        chain._start(generator)
        return chain

    def state_dict(self) -> dict[str, object]:
        """The chain's current draw and noise precision (the kept draws' mean is the model's)."""
        return {
            "tables": [torch.from_numpy(table.copy()) for table in self.tables],
            "time_bias": torch.from_numpy(self.time_bias.copy()),
            "alpha": self.alpha,
            "cutpoint_parameters": torch.from_numpy(self.cutpoint_parameters.copy()),
            **self.valid.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tables = [table.numpy().copy() for table in state["tables"]]
        self.time_bias = state["time_bias"].numpy().copy()
        self.alpha = float(state["alpha"])
        self.cutpoint_parameters = state["cutpoint_parameters"].numpy().copy()
        self.valid.load_state_dict(state)

    def _scores(
        self, composed: list[np.ndarray], users: np.ndarray, items: np.ndarray, bin_of: np.ndarray
    ) -> np.ndarray:
        """The draw's scores (less the global mean) for the pairs (users[j], items[j]) in time bins
        bin_of[j]; bin n_time_bins is one never seen (a validation rating on a user-day the training
        part lacks), at the bins' mean as the model predicts it."""
        bias = np.append(self.time_bias, self.time_bias.mean()) if len(self.time_bias) else self.time_bias
        return _pair_scores(composed[0], composed[1], (bias, bin_of), users, items)

    def evaluate(self) -> dict[str, float]:
        """RMSE and MAE on the validation ratings of the mean of the draws kept so far."""
        return self.valid.evaluate()

    def _sample_time_biases(self, residuals: np.ndarray, random: np.random.Generator) -> None:
        """Draw the time bins' biases under their group's prior (one group)."""
        bias = self.time_bias
        prior_mean, prior_precision = _group_priors(bias[:, None], np.zeros(len(bias), np.int64), 1, random)
        noise = random.standard_normal(len(bias))
        prior = (float(prior_mean[0, 0]), float(prior_precision[0, 0]))
        _sample_bin_biases(bias, self.by_bin, prior, self.alpha, residuals, noise)

    def _draw_latent_ratings(self, scores: np.ndarray, random: np.random.Generator) -> None:
        """The ordered probit's draws: its cutpoints given the scores, then the latent values (the
        sweep's targets) given both."""
        if not len(self.cutpoint_parameters):
            n_steps = len(self.model.cutpoints) + 1
            self.cutpoint_parameters = first_cutpoint_parameters(scores, self.steps, n_steps)
        self.cutpoint_parameters = draw_cutpoint_parameters(
            self.cutpoint_parameters, scores, self.steps, random
        )
        self.targets = draw_latent(scores, self.steps, cutpoints_of(self.cutpoint_parameters), random)

    def run_epoch(self, epoch: int, generator: torch.Generator) -> float:
        """Sweep `epoch` (from 1); the mean squared error of its draw on the training ratings (on their
        latent values where `ordinal`)."""
        composed = [
            _compose(block.starts, block.columns, block.values, table)
            for block, table in zip(self.features, self.tables, strict=True)
        ]
        # The sweep's draws from numpy's generator, seeded from the run's (torch's draws, a call per
        # chi-square, took a fifth of a sweep): the same seed gives the same chain.
        random = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
        scores = self._scores(composed, *self.pairs, self.bin_of)
        if self.ordinal:
            self._draw_latent_ratings(scores, random)
        residuals = self.targets - scores
        for side in (0, 1):
            block, table, other = self.features[side], self.tables[side], composed[1 - side]
            by_row = self.by_row[side]
            prior = _group_priors(table, block.groups, len(block.group_names), random)
            noise = random.standard_normal(table.shape[::-1])
            for c in range(table.shape[1]):
                sums, squares = _row_sums(c, other, by_row, residuals)
                change = _sample_features(
                    c, table, self.by_feature[side], block.groups, prior, self.alpha, sums, squares, noise[c]
                )
                composed[side][:, c] += change
                _update_residuals(c, change, other, by_row, residuals)
        if len(self.time_bias):
            self._sample_time_biases(residuals, random)
        squared = float(np.sum(residuals**2))
        if not self.ordinal:
            # alpha | rest ~ Gamma(shape + N/2, rate + SSE/2): chi-square(2 shape + N) / (2 rate + SSE).
            df = round(2 * ALPHA_SHAPE) + len(self.targets)
            self.alpha = 2 * random.standard_gamma(df / 2) / (2 * ALPHA_RATE + squared)
        kept = self.model.kept_slot(epoch, self.sweeps, self.chain, self.chains)
        if kept is not None:
            self.model.set_draw(
                *kept, torch.from_numpy(composed[0]), torch.from_numpy(composed[1]), self.mean
            )
            # What a user or item never seen is known by: an id of its own, expected to be the ids'
            # mean (its group's prior mean, estimated), and its non-id features.
            unseen = [
                torch.from_numpy(np.vstack([table[block.groups == 0].mean(axis=0), table[block.groups != 0]]))
                for block, table in zip(self.features, self.tables, strict=True)
            ]
            self.model.set_feature_draw(*kept, *unseen)
            if len(self.time_bias):
                self.model.set_time_draw(*kept, torch.from_numpy(self.time_bias))
            if self.ordinal:
                self.model.set_cutpoint_draw(*kept, torch.from_numpy(cutpoints_of(self.cutpoint_parameters)))
            scores = self._scores(composed, self.valid.users, self.valid.items, self.valid_bins)
            self.valid.add(kept[0], scores)
        return squared / len(self.targets)
