"""Per-user and per-item biases read out of a trained model, explicit or implied.

Each model says which it has (`RatingModel.learned_biases`): `dotbias` learns them explicitly; the
Linear-projection models have one offset vector per side shared by every id, and expanding
(u + b_u) . (i + b_i) = u.i + b_u.i + u.b_i + b_u.b_i gives each item the implied bias b_u . i and
each user u . b_i (tied to the factors, not free); `dot` has none, and says so rather than inventing one.
"""

from torch import nn

from recsys.models import LearnedBiases, rating_model

__all__ = ["LearnedBiases", "learned_biases"]


def learned_biases(model: nn.Module) -> LearnedBiases | None:
    """The model's per-id biases as float64 copies, or None for a model that has none.

    `model` must be a RatingModel (a TypeError otherwise).
    """
    return rating_model(model).learned_biases()
