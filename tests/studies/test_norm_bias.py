"""A bias right before BatchNorm is cancelled, before LayerNorm only its mean is; without a norm it learns."""

import pytest
import torch

from recsys.data.encoding import RatingTensors
from recsys.studies.norm_bias import EmbeddingNN, bias_before_norm

N_USERS, N_ITEMS, N_FACTORS, HIDDEN = 50, 60, 8, 16
Y_RANGE = (0.0, 5.5)


@pytest.fixture(scope="module")
def ratings() -> RatingTensors:
    """2,000 random ratings 1-5 over 50 users and 60 items."""
    g = torch.Generator().manual_seed(0)
    users = torch.randint(0, N_USERS, (2000,), generator=g)
    items = torch.randint(0, N_ITEMS, (2000,), generator=g)
    return RatingTensors(
        torch.stack([users, items], dim=1), torch.randint(1, 6, (2000,), generator=g).float()
    )


def make(norm: str, seed: int = 0) -> EmbeddingNN:
    return EmbeddingNN(
        N_USERS, N_ITEMS, N_FACTORS, HIDDEN, norm, Y_RANGE, torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize("norm", ["layer", "batch", "none"])
def test_output_shape_and_y_range(ratings: RatingTensors, norm: str) -> None:
    model = make(norm)
    with torch.no_grad():
        out = model(ratings.x[:64])
    assert out.shape == (64,)
    assert out.dtype == torch.float32
    assert ((out > Y_RANGE[0]) & (out < Y_RANGE[1])).all()


def test_same_seed_same_network() -> None:
    assert torch.equal(make("batch", seed=1).hidden.bias, make("batch", seed=1).hidden.bias)
    assert not torch.equal(make("batch", seed=1).hidden.bias, make("batch", seed=2).hidden.bias)


def test_unknown_norm_is_an_error() -> None:
    with pytest.raises(ValueError, match="layer, batch, none"):
        make("group")


@pytest.mark.parametrize(
    ("norm", "shift", "cancelled"),
    [
        ("batch", "vector", True),  # each feature's batch mean absorbs its own shift
        ("layer", "constant", True),  # each example's feature mean absorbs a shift shared by all features
        ("layer", "vector", False),  # ... but not one that differs between features
        ("none", "constant", False),
    ],
)
def test_which_bias_shifts_the_norm_cancels(
    ratings: RatingTensors, norm: str, shift: str, cancelled: bool
) -> None:
    # float64, so "unchanged" can be checked far below the size of any real change.
    model = make(norm).double().train()
    x = ratings.x[:256]
    g = torch.Generator().manual_seed(5)
    if shift == "vector":
        delta = torch.randn(HIDDEN, generator=g, dtype=torch.float64)
    else:
        delta = torch.full((HIDDEN,), 0.7, dtype=torch.float64)
    with torch.no_grad():
        before = model(x)
        model.hidden.bias.add_(delta)
        after = model(x)
    assert torch.allclose(before, after, rtol=0, atol=1e-9) == cancelled


def test_bias_before_batch_norm_gets_no_gradient_and_stays_put(ratings: RatingTensors) -> None:
    # float64: in float32 the cancellation leaves rounding-sized gradients that Adam blows up
    # (next test); here they sit far below Adam's eps, so a zero gradient shows as a still bias.
    result = bias_before_norm(ratings, "batch", n_factors=N_FACTORS, hidden=HIDDEN, dtype=torch.float64)
    assert result["max_abs_bias_grad"] < 1e-9
    assert result["bias_change"] < 1e-6
    assert result["max_abs_weight_grad"] > 1e-4
    assert result["weight_change"] > 1e-4


def test_adam_turns_float32_rounding_into_bias_steps(ratings: RatingTensors) -> None:
    result = bias_before_norm(ratings, "batch", n_factors=N_FACTORS, hidden=HIDDEN)
    # The gradient is rounding noise, hundreds of times smaller than the weights' ...
    assert result["max_abs_bias_grad"] < 1e-2 * result["max_abs_weight_grad"]
    # ... yet Adam, dividing each gradient by its own running size, moves the bias about as far.
    assert result["bias_change"] > 0.1 * result["weight_change"]


def test_bias_before_layer_norm_loses_only_its_mean(ratings: RatingTensors) -> None:
    result = bias_before_norm(ratings, "layer", n_factors=N_FACTORS, hidden=HIDDEN)
    assert result["max_abs_mean_bias_grad"] < 1e-6
    assert result["max_abs_bias_grad"] > 1e-2
    assert result["bias_change"] > 1e-4
    assert result["weight_change"] > 1e-4


def test_without_a_norm_the_bias_learns(ratings: RatingTensors) -> None:
    result = bias_before_norm(ratings, "none", n_factors=N_FACTORS, hidden=HIDDEN, dtype=torch.float64)
    assert result["max_abs_bias_grad"] > 1e-3
    assert result["max_abs_mean_bias_grad"] > 1e-4
    assert result["bias_change"] > 1e-4


def test_training_lowers_the_error(ratings: RatingTensors) -> None:
    untrained = bias_before_norm(ratings, "batch", n_factors=N_FACTORS, hidden=HIDDEN, epochs=0)
    trained = bias_before_norm(ratings, "batch", n_factors=N_FACTORS, hidden=HIDDEN, epochs=5)
    assert trained["final_train_mse"] < untrained["final_train_mse"]
    assert untrained["bias_change"] == untrained["weight_change"] == 0.0
