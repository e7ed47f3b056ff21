"""What the two engines of per-rating AdaGrad (compiled, device) share: LIBMF's row-wise AdaGrad, one
accumulated squared gradient per row and table, so a row's step shrinks as it is trained, under a
learning rate that falls linearly over the epochs; and an ensemble's members' seeds (a sampler's
chains' too), and torch generators that read all of such a seed."""

import torch

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


# Odd, so that multiples of it below SEED_LIMIT differ in their low 32 bits.
_FOLD = 0x9E3779B9


def seeded_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator for a seed of up to 63 bits (a member's, `member_seed`). torch's CPU generator
    reads only a seed's low 32 bits, where every member of a run has the run's own seed, so the high
    bits are folded into them first; a seed below SEED_LIMIT is used as it is."""
    low, high = seed % SEED_LIMIT, seed // SEED_LIMIT
    return torch.Generator(device).manual_seed(low ^ (high * _FOLD % SEED_LIMIT))
