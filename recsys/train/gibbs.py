"""Gibbs sampling for Bayesian matrix factorisation (`bpmf`): BPMF (Salakhutdinov and Mnih, 2008)
with each id's bias sampled beside its factors.

rating_ui ~ N(mean + b_u + b_i + p_u . q_i, 1 / alpha). Each user's [p_u, b_u] has a Gaussian prior
whose mean and precision have a Normal-Wishart prior (likewise the items'), and alpha a Gamma(1, 1)
prior. One sweep (an epoch) draws the users' hyperparameters, then every user given the items (a
(k + 1)-dimensional Gaussian each, in a numba kernel over threads), then the items' likewise, then
alpha. After the burn-in the sweeps' draws are kept (evenly spaced ones where there are many:
SampledModel.kept_slot), and the model predicts their average, the posterior mean. All randomness
comes from the trainer's torch generator, drawn before each kernel runs, so a seed gives the same
draws on any number of threads and a checkpoint resumes exactly.
"""

import copy
import math
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import torch
from torch import Tensor

from recsys.data.encoding import RatingTensors
from recsys.models.base import SampledModel
from recsys.models.layers import init_normal_
from recsys.train.grouping import grouped
from recsys.train.jit import compiled

# The Normal-Wishart prior on each side's hyperparameters: mean 0, precision scale (beta) 2, Wishart
# with the identity as scale matrix and as many degrees of freedom as dimensions (BPMF's choices).
PRIOR_BETA = 2.0
# alpha ~ Gamma(shape, rate): weak, about one pseudo-rating.
ALPHA_SHAPE, ALPHA_RATE = 1.0, 1.0
ALPHA_START = 2.0
# The root mean square of the user and item vectors (for bfm, the sums over each row's features) at
# a chain's start. A chain whose vectors start small keeps them small for many sweeps (the prior's
# precision is drawn from them), so that short chains never leave their start (validation inside
# u1.base, docs/findings.md).
START_SCALE = 0.2


@compiled(parallel=True, fastmath=True)
def _sample_side(
    draws: np.ndarray,
    other: np.ndarray,
    starts: np.ndarray,
    others: np.ndarray,
    targets: np.ndarray,
    alpha: float,
    prior_mean: np.ndarray,
    prior_precision: np.ndarray,
    noise: np.ndarray,
) -> None:
    """Draw each row of `draws` ([factors, bias]) from its Gaussian conditional, in place.

    Row r's ratings are others[starts[r]:starts[r + 1]] (the other side's indices) with `targets`
    (the rating less the global mean); the other side's row [q, b] enters as features [q, 1], its
    bias moved to the target. noise: (rows, k + 1) standard normal draws.
    """
    width = draws.shape[1]
    for row in numba.prange(draws.shape[0]):
        precision = prior_precision.copy()
        rhs = prior_precision @ prior_mean
        features = np.empty(width)
        for t in range(starts[row], starts[row + 1]):
            j = others[t]
            for c in range(width - 1):
                features[c] = other[j, c]
            features[width - 1] = 1.0
            target = targets[t] - other[j, width - 1]
            for a in range(width):
                rhs[a] += alpha * features[a] * target
                for b in range(width):
                    precision[a, b] += alpha * features[a] * features[b]
        lower = np.linalg.cholesky(precision)
        # mean = precision^-1 rhs; a draw adds L^-T z, whose covariance is precision^-1.
        draws[row] = np.linalg.solve(precision, rhs) + np.linalg.solve(lower.T, noise[row])


def _chi_square(df: int, generator: torch.Generator) -> float:
    """A chi-square draw with integer `df` degrees of freedom: a sum of squared standard normals."""
    return float(torch.randn(df, generator=generator, dtype=torch.float64).square().sum())


def _wishart(scale: Tensor, df: int, generator: torch.Generator) -> Tensor:
    """A Wishart(df, scale) draw by Bartlett's decomposition (L A A^T L^T, L = cholesky(scale))."""
    d = len(scale)
    bartlett = torch.randn(d, d, generator=generator, dtype=torch.float64).tril(-1)
    bartlett.diagonal().copy_(torch.tensor([math.sqrt(_chi_square(df - i, generator)) for i in range(d)]))
    factor = torch.linalg.cholesky(scale) @ bartlett
    return factor @ factor.T


def _hyperparameters(rows: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """A draw of one side's prior mean and precision from their Normal-Wishart posterior given `rows`."""
    n, d = rows.shape
    average = rows.mean(0)
    centred = rows - average
    scatter = centred.T @ centred
    beta = PRIOR_BETA + n
    mean = n * average / beta  # the prior mean is zero
    inverse_scale = (
        torch.eye(d, dtype=torch.float64) + scatter + (PRIOR_BETA * n / beta) * torch.outer(average, average)
    )
    scale = torch.linalg.inv(inverse_scale)
    precision = _wishart((scale + scale.T) / 2, d + n, generator)
    lower = torch.linalg.cholesky(beta * precision)
    offset = torch.linalg.solve_triangular(
        lower.T, torch.randn(d, 1, generator=generator, dtype=torch.float64), upper=True
    )
    return mean + offset[:, 0], precision


class KeptMean:
    """The mean of the kept draws' predictions of the validation ratings, from their running sum: the
    posterior mean's score each sweep without a pass through the model's ever wider tables."""

    def __init__(self, valid: RatingTensors, mean: float, squash: Callable[[Tensor], Tensor]) -> None:
        """`squash`: the model's map from the mean score to a rating (a clip into y_range; an ordered
        probit's expectation, read when evaluating, as its cutpoints' mean then stands)."""
        self.users, self.items = valid.x[:, 0].cpu().numpy(), valid.x[:, 1].cpu().numpy()
        self.values = valid.y.cpu().double().numpy()
        self.mean, self.squash = mean, squash
        self.sum, self.count = np.zeros(len(self.values)), 0

    def add(self, slot: int, scores: np.ndarray) -> None:
        """A draw's scores (less the mean) of the validation pairs, kept as slot `slot` (0 starts afresh)."""
        if slot == 0:
            self.sum[:] = 0
        self.sum += scores
        self.count = slot + 1

    def evaluate(self) -> dict[str, float]:
        """RMSE and MAE of the kept draws' mean, squashed as the model squashes it."""
        if len(self.values) == 0:
            return {"rmse": math.nan, "mae": math.nan}
        predictions = self.squash(torch.from_numpy(self.mean + self.sum / self.count)).double().numpy()
        errors = predictions - self.values
        return {"rmse": float(np.sqrt(np.mean(errors**2))), "mae": float(np.mean(np.abs(errors)))}

    def state_dict(self) -> dict[str, object]:
        return {"valid_sum": torch.from_numpy(self.sum.copy()), "valid_count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sum, self.count = state["valid_sum"].numpy().copy(), int(state["valid_count"])


class GibbsEpochs:
    """Sweeps of the Gibbs sampler; the model holds the mean of the draws kept so far (during the
    burn-in, the latest draw alone)."""

    def __init__(
        self,
        model: SampledModel,
        train: RatingTensors,
        valid: RatingTensors,
        sweeps: int,
        n_factors: int,
        chains: int = 1,
    ) -> None:
        """`chains`: how many chains (`next_chain`) the run pools."""
        self.model, self.sweeps = model, sweeps
        self.chain, self.chains = 0, chains
        users, items = train.x[:, 0].cpu(), train.x[:, 1].cpu()
        values = train.y.cpu().double()
        self.mean = float(values.mean())
        self.valid = KeptMean(valid, self.mean, model.squash)
        # The chain starts from the model's own initialisation (its seed): factors, then a zero bias.
        start = model.id_vectors()
        assert start is not None
        self._start([table[:, :n_factors] for table in start])
        targets = values - self.mean
        user_ids, item_ids, target_values = users.numpy(), items.numpy(), targets.numpy()
        self.by_user = grouped(user_ids, item_ids, target_values, len(self.draws[0]))
        self.by_item = grouped(item_ids, user_ids, target_values, len(self.draws[1]))
        self.users, self.items, self.targets = users, items, targets

    def _start(self, factors: list[Tensor]) -> None:
        """The chain's first draw: `factors` (users', items') scaled to a root mean square of
        START_SCALE, then a zero bias."""
        wide = [table.double() for table in factors]
        scaled = [table * (START_SCALE / float(table.square().mean().sqrt())) for table in wide]
        self.draws = [torch.nn.functional.pad(table, (0, 1)) for table in scaled]
        self.alpha = ALPHA_START

    def next_chain(self, generator: torch.Generator) -> "GibbsEpochs":
        """The run's next chain, from its own start, drawn from `generator` as the model's tables are
        initialised: the data's rows and the validation sums shared with this one (the chains' kept
        draws are pooled, SampledModel.kept_slot)."""
        chain = copy.copy(self)
        chain.chain = self.chain + 1
        shapes = [(draw.shape[0], draw.shape[1] - 1) for draw in self.draws]
        chain._start([init_normal_(torch.empty(shape), generator) for shape in shapes])
        return chain

    def state_dict(self) -> dict[str, object]:
        """The chain's current draw and noise precision (the kept draws' mean is the model's)."""
        return {
            "draws": [draw.clone() for draw in self.draws],
            "alpha": self.alpha,
            **self.valid.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.draws = [draw.clone() for draw in state["draws"]]
        self.alpha = float(state["alpha"])
        self.valid.load_state_dict(state)

    def _scores(self, users: Tensor, items: Tensor) -> Tensor:
        """The current draw's scores (less the global mean) for the pairs (users[j], items[j])."""
        user_draws, item_draws = self.draws
        k = user_draws.shape[1] - 1
        user_rows, item_rows = user_draws[users], item_draws[items]
        return user_rows[:, k] + item_rows[:, k] + (user_rows[:, :k] * item_rows[:, :k]).sum(1)

    def evaluate(self) -> dict[str, float]:
        """RMSE and MAE on the validation ratings of the mean of the draws kept so far (what
        `metrics.evaluate` of the model gives, in float64)."""
        return self.valid.evaluate()

    def run_epoch(self, epoch: int, generator: torch.Generator) -> float:
        """Sweep `epoch` (from 1); the mean squared error of its draw on the training ratings."""
        for side, (starts, others, targets) in enumerate((self.by_user, self.by_item)):
            draws, other = self.draws[side], self.draws[1 - side]
            prior_mean, prior_precision = _hyperparameters(draws, generator)
            noise = torch.randn(draws.shape, generator=generator, dtype=torch.float64)
            _sample_side(
                draws.numpy(), other.numpy(), starts, others, targets, self.alpha,
                prior_mean.numpy(), prior_precision.numpy(), noise.numpy(),
            )  # fmt: skip
        squared = float((self._scores(self.users, self.items) - self.targets).square().sum())
        # alpha | rest ~ Gamma(shape + N/2, rate + SSE/2): chi-square(2 shape + N) / (2 rate + SSE).
        df = round(2 * ALPHA_SHAPE) + len(self.targets)
        self.alpha = _chi_square(df, generator) / (2 * ALPHA_RATE + squared)
        kept = self.model.kept_slot(epoch, self.sweeps, self.chain, self.chains)
        if kept is not None:
            user_draws, item_draws = self.draws
            self.model.set_draw(*kept, user_draws, item_draws, self.mean)
            valid = torch.from_numpy(self.valid.users), torch.from_numpy(self.valid.items)
            self.valid.add(kept[0], self._scores(*valid).numpy())
        return squared / len(self.targets)
