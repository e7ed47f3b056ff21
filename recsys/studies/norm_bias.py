"""Does a bias right before a normalisation layer learn anything? Measured on fastai's EmbeddingNN shape.

BatchNorm (in training mode) normalises each feature over the batch, so a per-feature bias b cancels
exactly: (x + b) - mean_batch(x + b) = x - mean_batch(x), and b's gradient is zero. LayerNorm
normalises each example over its features, so it cancels only b's mean over the features:
(x + b) - mean_features(x + b) = (x - mean_features(x)) + (b - mean(b)); the rest of b still shapes
the output, so b's gradient is not zero, only its mean over the features is.

"Zero" holds in exact arithmetic. In float32 the cancellation leaves rounding-sized gradients, and
Adam divides each gradient by its own running RMS, so it turns that noise into full `lr`-sized steps:
the bias wanders as far as the weights (harmlessly, since the norm cancels it). In float64 the
rounding sits far below Adam's eps and the bias stays put. `bias_before_norm` reports all of it.
"""

import torch
from torch import Tensor, nn

from recsys.data.encoding import RatingTensors
from recsys.models import YRange
from recsys.models.layers import embedding_table, split_pairs
from recsys.models.squash import sigmoid_range

NORMS = ("layer", "batch", "none")


def _norm_layer(norm: str, width: int) -> nn.Module:
    """The layer `norm` names; "none" is the control in which nothing cancels the bias."""
    if norm == "layer":
        return nn.LayerNorm(width)
    if norm == "batch":
        return nn.BatchNorm1d(width)
    if norm == "none":
        return nn.Identity()
    raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")


class EmbeddingNN(nn.Module):
    """rating = sigmoid_range(output(relu(norm(hidden([user_factors[u], item_factors[i]])))), y_range).

    fastai's EmbeddingNN with one hidden layer; `hidden` keeps its bias, right before `norm`, so that
    bias's fate can be watched. Not in `recsys.models.MODELS`: with a norm, that bias gets no gradient.
    """

    def __init__(
        self,
        n_users: int,
        n_items: int,
        n_factors: int,
        hidden: int = 64,
        norm: str = "batch",
        y_range: YRange | None = (0.0, 5.5),
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.y_range = y_range
        self.user_factors = embedding_table(n_users, n_factors, generator)
        self.item_factors = embedding_table(n_items, n_factors, generator)
        self.hidden = nn.Linear(2 * n_factors, hidden)
        self.norm = _norm_layer(norm, hidden)
        self.output = nn.Linear(hidden, 1)
        with torch.no_grad():
            # N(0, 1/fan_in) keeps each layer's output at its input's scale; drawn from `generator`
            # rather than the global seed, so the seed alone reproduces the network.
            for layer in (self.hidden, self.output):
                layer.weight.normal_(0.0, layer.in_features**-0.5, generator=generator)
            # Clearly non-zero, so "the bias did not move" cannot mean "it stayed at zero".
            self.hidden.bias.normal_(0.0, 0.1, generator=generator)
            self.output.bias.zero_()

    def forward(self, x: Tensor) -> Tensor:
        users, items = split_pairs(x)
        features = torch.cat([self.user_factors(users), self.item_factors(items)], dim=-1)
        activations = torch.relu(self.norm(self.hidden(features)))
        return sigmoid_range(self.output(activations).squeeze(-1), self.y_range)


def bias_before_norm(
    train: RatingTensors,
    norm: str,
    *,
    n_factors: int = 50,
    hidden: int = 64,
    epochs: int = 2,
    batch_size: int = 512,
    lr: float = 5e-3,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> dict[str, float]:
    """Train an EmbeddingNN with AdamW and report what reached and moved `hidden.bias` versus `hidden.weight`.

    `train` holds encoded indices (n_users and n_items are its largest index + 1); y_range is
    (0, 1.1 x the top rating), as in the trainer. AdamW has weight_decay=0, so only gradients move
    parameters. Returns max_abs_bias_grad, max_abs_mean_bias_grad (|mean over features| of the bias
    gradient, the part LayerNorm cancels) and max_abs_weight_grad, each the largest over all steps;
    bias_change and weight_change (largest |after - before|); final_train_mse (eval mode).
    """
    if len(train) == 0:
        raise ValueError("no training ratings")
    generator = torch.Generator().manual_seed(seed)
    n_users, n_items = (int(train.x[:, column].max()) + 1 for column in (0, 1))
    y_range = (0.0, 1.1 * float(train.y.max()))
    model = EmbeddingNN(n_users, n_items, n_factors, hidden, norm, y_range, generator).to(dtype)
    ratings = train.y.to(dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    bias_before = model.hidden.bias.detach().clone()
    weight_before = model.hidden.weight.detach().clone()
    max_bias_grad = max_mean_bias_grad = max_weight_grad = 0.0
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(train), generator=generator)
        for start in range(0, len(train), batch_size):
            index = order[start : start + batch_size]
            loss = torch.mean((model(train.x[index]) - ratings[index]) ** 2)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            bias_grad, weight_grad = model.hidden.bias.grad, model.hidden.weight.grad
            assert bias_grad is not None and weight_grad is not None
            max_bias_grad = max(max_bias_grad, float(bias_grad.abs().max()))
            max_mean_bias_grad = max(max_mean_bias_grad, float(bias_grad.mean().abs()))
            max_weight_grad = max(max_weight_grad, float(weight_grad.abs().max()))
            optimizer.step()
    model.eval()
    with torch.no_grad():
        final_train_mse = float(torch.mean((model(train.x) - ratings) ** 2))
    return {
        "max_abs_bias_grad": max_bias_grad,
        "max_abs_mean_bias_grad": max_mean_bias_grad,
        "max_abs_weight_grad": max_weight_grad,
        "bias_change": float((model.hidden.bias.detach() - bias_before).abs().max()),
        "weight_change": float((model.hidden.weight.detach() - weight_before).abs().max()),
        "final_train_mse": final_train_mse,
    }
