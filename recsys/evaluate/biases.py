"""Per-user and per-item biases read out of a trained model, explicit or implied.

`dotbias` learns them explicitly. The Linear-projection models have one offset vector per side
shared by every id; expanding (u + b_u) . (i + b_i) = u.i + b_u.i + u.b_i + b_u.b_i, each item gets
the implied bias b_u . i and each user u . b_i (tied to the factors, not free). `dot` has none,
and this module says so rather than inventing one.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from recsys.evaluate.factors import id_vectors
from recsys.models.core import DotProductBias, EmbeddingProjection, LinearDotProduct


@dataclass(frozen=True)
class LearnedBiases:
    """Biases by inner index; `kind` is "explicit" or "implied"."""

    user: np.ndarray
    item: np.ndarray
    kind: str


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """A detached float64 copy on the CPU (the module itself is not moved)."""
    return tensor.detach().cpu().double().numpy().copy()


def learned_biases(model: nn.Module) -> LearnedBiases | None:
    """The model's per-id biases, or None for a model that has none (`dot`, or bias-free Linear)."""
    if isinstance(model, DotProductBias):
        return LearnedBiases(
            _numpy(model.user_bias.weight[:, 0]), _numpy(model.item_bias.weight[:, 0]), "explicit"
        )
    if isinstance(model, LinearDotProduct):
        if model.user_linear.bias is None or model.item_linear.bias is None:
            return None
        user_offset, item_offset = model.user_linear.bias, model.item_linear.bias
    elif isinstance(model, EmbeddingProjection):
        user_offset, item_offset = model.user_projection.bias, model.item_projection.bias
    else:
        return None
    vectors = id_vectors(model)
    assert vectors is not None  # both model kinds have factors
    user_vectors, item_vectors = vectors
    return LearnedBiases(_numpy(user_vectors @ item_offset), _numpy(item_vectors @ user_offset), "implied")
