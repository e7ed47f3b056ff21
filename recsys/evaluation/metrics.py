"""Accuracy of rating predictions."""

import math

import numpy as np
import torch
from torch import Tensor, nn

from recsys.config import UNKNOWN_POLICIES
from recsys.data.encoding import EncodedSplit, RatingTensors
from recsys.models.layers import require_tensor


def rmse(predictions: Tensor, targets: Tensor) -> float:
    """Root mean squared error."""
    return float(torch.sqrt(torch.mean(_errors(predictions, targets) ** 2)))


def mae(predictions: Tensor, targets: Tensor) -> float:
    """Mean absolute error."""
    return float(torch.mean(torch.abs(_errors(predictions, targets))))


def _errors(predictions: Tensor, targets: Tensor) -> Tensor:
    """predictions - targets, one per rating: a (n, 1) column (fastai's target shape) counts as (n,),
    and other shapes must match, since broadcasting (n,) against (n, 1) would compare every pair."""
    predictions, targets = _as_vector(predictions), _as_vector(targets)
    if predictions.shape != targets.shape:
        raise ValueError(
            f"{tuple(predictions.shape)} predictions against {tuple(targets.shape)} targets: "
            "one of each per rating"
        )
    return predictions - targets


def _as_vector(values: Tensor) -> Tensor:
    return values.reshape(-1) if values.ndim == 2 and values.shape[1] == 1 else values


# Pairs scored at once: on the CPU few enough that a chunk's looked-up rows stay in cache
# (docs/performance.md); on a GPU, many per launch.
CPU_CHUNK = 4_096
DEVICE_CHUNK = 65_536


def predict(model: nn.Module, x: Tensor, batch_size: int | None = None) -> Tensor:
    """Predictions for every row of `x`, in eval mode and without gradients, `batch_size` rows at a
    time (None: by `x`'s device); restores train mode."""
    require_tensor(x)
    if batch_size is None:
        batch_size = CPU_CHUNK if x.device.type == "cpu" else DEVICE_CHUNK
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            # At least one call, so that no rows give the model's own empty predictions.
            starts = range(0, max(len(x), 1), batch_size)
            return torch.cat([model(x[i : i + batch_size]) for i in starts])
    finally:
        model.train(was_training)


def evaluate(model: nn.Module, ratings: RatingTensors) -> dict[str, float]:
    """RMSE and MAE of `model` on encoded ratings (NaN for none)."""
    if len(ratings) == 0:
        return {"rmse": math.nan, "mae": math.nan}
    predictions = predict(model, ratings.x).cpu()
    targets = ratings.y.cpu()
    return {"rmse": rmse(predictions, targets), "mae": mae(predictions, targets)}


def fallback_rating(model: nn.Module, mean: float) -> float:
    """The training mean as the prediction for a pair the model has no rows for: inside the model's
    y_range where it has one, as its own predictions are."""
    y_range = getattr(model, "y_range", None)
    return mean if y_range is None else min(max(mean, float(y_range[0])), float(y_range[1]))


def evaluate_test(model: nn.Module, data: EncodedSplit, unknown: str) -> dict[str, float]:
    """Test RMSE and MAE under the unknown-id policy.

    "drop" scores only test ratings whose user and item occur in training; "mean" also scores the
    others, predicting the training mean for them (what a model without those rows can honestly do).
    """
    if unknown not in UNKNOWN_POLICIES:
        raise ValueError(f"unknown policy {unknown!r}")
    predictions = predict(model, data.test.x).cpu()
    targets = data.test.y.cpu()
    if unknown == "mean" and len(data.unknown_test_ratings):
        fallback = torch.full((len(data.unknown_test_ratings),), fallback_rating(model, data.train_mean))
        predictions = torch.cat([predictions, fallback])
        targets = torch.cat([targets, torch.from_numpy(np.asarray(data.unknown_test_ratings))])
    return {"rmse": rmse(predictions, targets), "mae": mae(predictions, targets)}
