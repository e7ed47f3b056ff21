"""The squash that maps a model's score into its rating range, fastai's sigmoid_range, and its inverse."""

import torch
from torch import Tensor

YRange = tuple[float, float]


def sigmoid_range(x: Tensor, y_range: YRange | None) -> Tensor:
    """Squash into `y_range` as fastai does: sigmoid(x) * (hi - lo) + lo; identity for None."""
    if y_range is None:
        return x
    low, high = y_range
    return torch.sigmoid(x) * (high - low) + low


def sigmoid_range_inverse(y: Tensor, y_range: YRange | None) -> Tensor:
    """The x that `sigmoid_range` maps to y, with y first brought a millionth of the range inside
    its ends (where the inverse is infinite); identity for None."""
    if y_range is None:
        return y
    low, high = y_range
    share = ((y - low) / (high - low)).clamp(1e-6, 1 - 1e-6)
    return torch.logit(share)


def ordinal_expectation(score: Tensor, cutpoints: Tensor, lowest: float, step: float) -> Tensor:
    """The expected rating of an ordered probit: the rating is `lowest` plus `step` times the number of
    cutpoints that score + N(0, 1) noise passes, so its mean is lowest + step * sum_k Phi(score - c_k)."""
    passed = torch.special.ndtr(score.unsqueeze(-1) - cutpoints.to(score))
    return lowest + step * passed.sum(-1)


def ordinal_expectation_inverse(rating: Tensor, cutpoints: Tensor, lowest: float, step: float) -> Tensor:
    """The score `ordinal_expectation` maps to `rating` (found by bisection: the map rises), with the
    rating first brought a millionth of the range inside its ends, as `sigmoid_range_inverse` does."""
    span = step * len(cutpoints)
    share = ((rating.double() - lowest) / span).clamp(1e-6, 1 - 1e-6)
    wanted = lowest + span * share
    cuts = cutpoints.double().to(rating.device)
    low = torch.full_like(wanted, float(cuts.min()) - 8)  # Phi(-8) is below the millionth
    high = torch.full_like(wanted, float(cuts.max()) + 8)
    for _ in range(60):
        middle = (low + high) / 2
        above = ordinal_expectation(middle, cuts, lowest, step) > wanted
        high, low = torch.where(above, middle, high), torch.where(above, low, middle)
    return ((low + high) / 2).to(rating.dtype if rating.is_floating_point() else torch.float32)
