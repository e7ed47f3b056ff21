"""What the two engines of per-rating AdaGrad (compiled, device) share: LIBMF's row-wise AdaGrad, one
accumulated squared gradient per row and table, so a row's step shrinks as it is trained, under a
learning rate that falls linearly over the epochs; and an ensemble's members' seeds."""

from recsys.config import SEED_LIMIT

# The accumulators start at 1 (as LIBMF's do), so a row's first step is `lr` times its gradient.
ACCUMULATOR_START = 1.0


def epoch_learning_rate(lr: float, epoch: int, epochs: int) -> float:
    """The learning rate of epoch `epoch` (from 1) of `epochs`: `lr` falling linearly towards 0."""
    return lr * (1 - (epoch - 1) / epochs)


def member_seed(seed: int, place: int) -> int:
    """The shuffle seed of an ensemble's member `place` (from 0): the run's own seed for the first, so
    a one-model run is unchanged, and seeds no other run's first member uses for the others."""
    return seed if place == 0 else (seed + place * SEED_LIMIT) % 2**63
