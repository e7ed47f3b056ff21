"""Item factors read out of a trained model: similar items and a 2-D map of the factor space."""

import numpy as np
import torch
from torch import nn

from recsys.models import rating_model


def id_vectors(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Each user's and item's factor vector as the model computes it, before any offset shared by all
    ids (the Linear and projection biases); None for a model without factors. Detached tensors.

    `model` must be a RatingModel (a TypeError otherwise).
    """
    return rating_model(model).id_vectors()


def item_vectors(model: nn.Module) -> np.ndarray | None:
    """Each item's factor vector (n_items, n_factors) as a float64 copy, or None if it has none."""
    vectors = id_vectors(model)
    return None if vectors is None else vectors[1].cpu().double().numpy().copy()


def cosine_neighbours(vectors: np.ndarray, index: int, n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """The `n` rows most cosine-similar to row `index` (itself excluded) and their similarities."""
    if not 0 <= index < len(vectors):
        raise ValueError(f"index {index} is not a row of the {len(vectors)} vectors")
    if n < 0:
        raise ValueError(f"n must be 0 or more, got {n}")
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarity = unit @ unit[index]
    similarity[index] = -np.inf
    order = np.argsort(-similarity, kind="stable")[: min(n, len(vectors) - 1)]  # never itself
    return order, similarity[order]


def principal_components(vectors: np.ndarray, n_components: int = 2) -> np.ndarray:
    """Project centred rows onto their first principal components (fastbook's map of movies)."""
    centred = vectors - vectors.mean(axis=0)
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    return centred @ components[:n_components].T
