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
