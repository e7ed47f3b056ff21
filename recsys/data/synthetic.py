"""Synthetic datasets with planted structure, so learning can be checked against the truth.

Ratings (`make_synthetic`), MovieLens-like: rating = clip(round(global_mean + user_bias[u] +
item_bias[i] + user_factors[u] . item_factors[i] + noise), 1, 5), with long-tailed (Zipf-like) item
popularity and user activity. Interactions (`synthetic_interactions`): each user picks items with
probability proportional to exp(score[u, i]), score = user_factors[u] . item_factors[i] + item_bias[i].
"""

import dataclasses
import math
import numbers
from dataclasses import dataclass

import numpy as np
import pandas as pd

from recsys.data.dataset import RatingsDataset, ratings_frame
from recsys.errors import RecsysError


@dataclass(frozen=True)
class SyntheticConfig:
    """Shape and strength of the planted structure; defaults mimic MovieLens 100K."""

    n_users: int = 943
    n_items: int = 1682
    n_ratings: int = 100_000
    n_factors: int = 4  # planted latent dimensions
    global_mean: float = 3.5
    user_bias_std: float = 0.5
    item_bias_std: float = 0.6
    factor_std: float = 0.5  # per coordinate; the dot product's std is factor_std**2 * sqrt(n_factors)
    noise_std: float = 0.5
    popularity_exponent: float = 0.8  # Zipf exponent of item popularity (0 = uniform)
    activity_exponent: float = 0.5  # Zipf exponent of user activity
    seed: int = 0

    def __post_init__(self) -> None:
        """Reject settings no data can come from, naming the setting: numpy would say only `scale < 0`,
        and a NaN or infinite one would make every rating NaN, or 1 and 5 alone, without a word."""
        for name, least in (("n_users", 1), ("n_items", 1), ("n_ratings", 1), ("n_factors", 0), ("seed", 0)):
            value = getattr(self, name)
            if not _is_whole(value) or value < least:
                raise RecsysError(f"`{name}` must be a whole number of at least {least}, got {value!r}")
        for name in ("user_bias_std", "item_bias_std", "factor_std", "noise_std"):
            if not _is_real(value := getattr(self, name)) or not 0 <= value < math.inf:
                raise RecsysError(f"`{name}` must be zero or positive and finite, got {value!r}")
        for name in ("global_mean", "popularity_exponent", "activity_exponent"):
            if not _is_real(value := getattr(self, name)) or not math.isfinite(value):
                raise RecsysError(f"`{name}` must be a finite number, got {value!r}")
        if self.n_ratings > self.n_users * self.n_items // 2:
            raise RecsysError(
                f"`n_ratings` {self.n_ratings} is more than half of the {self.n_users} x {self.n_items} "
                "user-item pairs; ask for fewer, or more users or items"
            )


def _is_whole(value: object) -> bool:
    """An integer (numpy's too), and not a bool, which Python counts as one."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    """A real number (numpy's too), and not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# The tiny sample (recsys/data/samples/tiny) is made from this (scripts/make_tiny.py), so its planted
# truth can be regenerated.
TINY_CONFIG = SyntheticConfig(n_users=120, n_items=200, n_ratings=4_000, seed=20261123)


@dataclass(frozen=True)
class PlantedTruth:
    """The generator's parameters, indexed by raw id - 1 (raw ids run 1..n)."""

    global_mean: float
    user_bias: np.ndarray
    item_bias: np.ndarray
    user_factors: np.ndarray
    item_factors: np.ndarray


def _zipf_weights(n: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """Sampling weights proportional to rank**-exponent, ranks shuffled over ids."""
    weights = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return rng.permutation(weights) / weights.sum()


def make_synthetic(
    config: SyntheticConfig = SyntheticConfig(),
) -> tuple[RatingsDataset, PlantedTruth]:
    """Generate ratings and return them with the planted truth; the same config gives the same data."""
    rng = np.random.default_rng(config.seed)
    truth = PlantedTruth(
        global_mean=config.global_mean,
        user_bias=rng.normal(0, config.user_bias_std, config.n_users),
        item_bias=rng.normal(0, config.item_bias_std, config.n_items),
        user_factors=rng.normal(0, config.factor_std, (config.n_users, config.n_factors)),
        item_factors=rng.normal(0, config.factor_std, (config.n_items, config.n_factors)),
    )
    user_weights = _zipf_weights(config.n_users, config.activity_exponent, rng)
    item_weights = _zipf_weights(config.n_items, config.popularity_exponent, rng)
    pairs = _distinct_pairs(config, user_weights, item_weights, rng)
    users, items = pairs // config.n_items, pairs % config.n_items
    score = (
        truth.global_mean
        + truth.user_bias[users]
        + truth.item_bias[items]
        + (truth.user_factors[users] * truth.item_factors[items]).sum(axis=1)
        + rng.normal(0, config.noise_std, config.n_ratings)
    )
    ratings = np.clip(np.round(score), 1, 5)
    # Each rating's time drawn on its own: in the pairs' order, times would rise with the draw that
    # first met a pair, which meets popular users' and items' pairs first (a split by time would then
    # test the rarer ones).
    timestamps = 900_000_000 + rng.integers(0, 365 * 86_400, config.n_ratings)
    frame = ratings_frame(users + 1, items + 1, ratings, timestamps)
    # Settings other than the built-in data's are recorded where a run folder keeps its data's origin,
    # so that a resumed run generates this data again rather than the built-in.
    origin = {} if config == SyntheticConfig() else {"generator": dataclasses.asdict(config)}
    dataset = RatingsDataset("synthetic", frame, _titles(config.n_items), (1.0, 5.0), origin=origin)
    return dataset, truth


# Rounds of 2 * n_ratings draws before the pairs are given up on: the defaults, and the tiny sample,
# need one; steep exponents (3 on 50 x 50) tens; steeper ones put nearly every draw on a few pairs, and
# drawing on would never end.
DRAW_ROUNDS = 100


def _distinct_pairs(
    config: SyntheticConfig, user_weights: np.ndarray, item_weights: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """`n_ratings` distinct pairs as user * n_items + item: more drawn than needed, the first occurrence
    of each kept, until there are enough."""
    pairs = np.empty(0, dtype=np.int64)
    for _ in range(DRAW_ROUNDS):
        users = rng.choice(config.n_users, 2 * config.n_ratings, p=user_weights)
        items = rng.choice(config.n_items, 2 * config.n_ratings, p=item_weights)
        keys = np.concatenate([pairs, users * config.n_items + items])
        _, first = np.unique(keys, return_index=True)
        pairs = keys[np.sort(first)]
        if pairs.size >= config.n_ratings:
            return pairs[: config.n_ratings]
    raise RecsysError(
        f"`n_ratings` {config.n_ratings}: {DRAW_ROUNDS * 2 * config.n_ratings:,} draws fell on only "
        f"{pairs.size:,} distinct user-item pairs, as `activity_exponent` {config.activity_exponent} and "
        f"`popularity_exponent` {config.popularity_exponent} put nearly every draw on a few users and "
        "items; lower them, or ask for fewer ratings"
    )


def _titles(n_items: int) -> pd.DataFrame:
    """The item table of synthetic data: "Synthetic item 1" ... for raw ids 1..n_items."""
    return pd.DataFrame(
        {
            "item": np.arange(1, n_items + 1, dtype=np.int64),
            "title": [f"Synthetic item {i}" for i in range(1, n_items + 1)],
            "genres": "(no genres listed)",
        }
    )


@dataclass(frozen=True)
class PlantedRanking:
    """The preferences behind synthetic interactions, indexed by raw id - 1 (raw ids run 1..n)."""

    user_factors: np.ndarray
    item_factors: np.ndarray
    item_bias: np.ndarray  # popularity: every user leans towards the same items

    def scores(self) -> np.ndarray:
        """(n_users, n_items) true scores: a user picks item i with probability proportional to
        exp(score), so sorting a user's row sorts the items by how likely they are picked."""
        return self.user_factors @ self.item_factors.T + self.item_bias


# The spread of the planted scores: the dot product's and the popularity's standard deviations. Wide
# enough that exp(score) tells liked from disliked items apart, narrow enough that a user's picks are
# not always the same few items.
TASTE_STD, POPULARITY_STD = 1.5, 1.0


def synthetic_interactions(
    n_users: int = 300, n_items: int = 200, n_factors: int = 4, per_user: int = 20, seed: int = 0
) -> tuple[RatingsDataset, PlantedRanking]:
    """Interactions with a planted ranking, and that ranking; the same arguments give the same data.

    Each user picks `per_user` distinct items, drawn without replacement with probability proportional
    to exp(score) (the Gumbel top-k trick: the largest score + Gumbel noise), each once (strength 1),
    the events in random order at increasing timestamps.
    """
    if min(n_users, n_items, n_factors, per_user) < 1 or per_user > n_items:
        raise ValueError("n_users, n_items, n_factors and per_user must be positive; per_user <= n_items")
    rng = np.random.default_rng(seed)
    factor_std = np.sqrt(TASTE_STD / np.sqrt(n_factors))  # a dot product of n_factors terms
    truth = PlantedRanking(
        user_factors=rng.normal(0, factor_std, (n_users, n_factors)),
        item_factors=rng.normal(0, factor_std, (n_items, n_factors)),
        item_bias=rng.normal(0, POPULARITY_STD, n_items),
    )
    noisy = truth.scores() + rng.gumbel(size=(n_users, n_items))
    picked = np.argpartition(-noisy, per_user - 1, axis=1)[:, :per_user]
    users = np.repeat(np.arange(n_users), per_user)
    order = rng.permutation(users.size)
    users, items = users[order], picked.ravel()[order]
    timestamps = 900_000_000 + np.sort(rng.integers(0, 365 * 86_400, users.size))
    frame = ratings_frame(users + 1, items + 1, np.ones(users.size), timestamps)
    dataset = RatingsDataset("synthetic-interactions", frame, _titles(n_items), (1.0, 1.0), implicit=True)
    return dataset, truth
