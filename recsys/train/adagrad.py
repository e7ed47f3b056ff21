"""Row-wise AdaGrad as the compiled and device engines both run it (LIBMF's): one accumulated squared
gradient per row and table, so a row's step shrinks as it is trained, under a learning rate that falls
linearly over the epochs."""

# The accumulators start at 1 (as LIBMF's do), so a row's first step is `lr` times its gradient.
ACCUMULATOR_START = 1.0


def epoch_learning_rate(lr: float, epoch: int, epochs: int) -> float:
    """The learning rate of epoch `epoch` (from 1) of `epochs`: `lr` falling linearly towards 0."""
    return lr * (1 - (epoch - 1) / epochs)
