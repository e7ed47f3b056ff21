"""Closed-form baselines every model is read against: the global mean and damped biases.

The damped bias model is what LensKit's `Bias` and (up to its solver) Surprise's `BaselineOnly`
compute: item_bias[i] = sum_u(r_ui - mu) / (n_i + damping), then
user_bias[u] = sum_i(r_ui - mu - item_bias[i]) / (n_u + damping). Damping pulls ids with few
ratings toward zero, so a movie rated once at 5 stars does not top the list. Both are `nn.Module`s
with the models' signature, so the same evaluation code scores them.
"""

import torch
from torch import Tensor, nn

from recsys.data.encoding import RatingTensors

DAMPING = 5.0  # LensKit's bias damping in its examples; a few pseudo-ratings at the mean


class DampedBias(nn.Module):
    """rating = global_mean + user_bias[u] + item_bias[i], fitted in closed form (no training)."""

    global_mean: Tensor
    user_bias: Tensor
    item_bias: Tensor

    def __init__(
        self, global_mean: float, user_bias: Tensor, item_bias: Tensor, *, fitted: bool = True
    ) -> None:
        """`fitted` False: the biases are zeros standing in for none (the global mean alone)."""
        super().__init__()
        self.n_fitted = 1 + (len(user_bias) + len(item_bias) if fitted else 0)  # values fitted to the data
        self.register_buffer("global_mean", torch.tensor(global_mean))
        self.register_buffer("user_bias", user_bias)
        self.register_buffer("item_bias", item_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.global_mean + self.user_bias[x[:, 0]] + self.item_bias[x[:, 1]]


def fit_damped_bias(train: RatingTensors, n_users: int, n_items: int, damping: float = DAMPING) -> DampedBias:
    """Fit damped item biases, then damped user biases on what the items leave."""
    users, items, ratings = train.x[:, 0], train.x[:, 1], train.y.double()
    mean = float(ratings.mean())
    residual = ratings - mean
    item_bias = torch.bincount(items, residual, n_items) / (
        torch.bincount(items, minlength=n_items) + damping
    )
    residual = residual - item_bias[items]
    user_bias = torch.bincount(users, residual, n_users) / (
        torch.bincount(users, minlength=n_users) + damping
    )
    return DampedBias(mean, user_bias.float(), item_bias.float())


def global_mean(train: RatingTensors, n_users: int, n_items: int) -> DampedBias:
    """Predict the training mean for everyone (no damping question: all biases are zero)."""
    zeros = (torch.zeros(n_users), torch.zeros(n_items))
    return DampedBias(float(train.y.double().mean()), *zeros, fitted=False)
