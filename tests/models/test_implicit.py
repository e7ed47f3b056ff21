"""SVD++ (`svdpp`): its implicit term against Koren's formula written out, N(u) from the training pairs
and through a checkpoint, its penalty, and EmbeddingBag against the multi-hot Linear it stands for."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from recsys.models import SVDPlusPlus, build_model
from recsys.models.layers import split_pairs
from recsys.studies.bag_cost import multi_hot

N_USERS, N_ITEMS, N_FACTORS = 6, 8, 3
Y_RANGE = (0.5, 5.5)
# User 0 rated items 1, 2, 5; user 1 item 3 (twice); user 2 everything; users 3..5 nothing.
PAIRS = torch.tensor([[0, 5], [0, 1], [2, 0], [1, 3], [0, 2], [1, 3]] + [[2, i] for i in range(1, N_ITEMS)])
RATED = {0: [1, 2, 5], 1: [3], 2: list(range(N_ITEMS))}


def make(seed: int = 0) -> SVDPlusPlus:
    model = build_model("svdpp", N_USERS, N_ITEMS, N_FACTORS, Y_RANGE, torch.Generator().manual_seed(seed))
    assert isinstance(model, SVDPlusPlus)
    model.set_training_pairs(PAIRS)
    with torch.no_grad():  # biases start at zero: give them values so every term carries signal
        model.user_bias.weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(seed + 1))
        model.item_bias.weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(seed + 2))
    return model


def koren(model: SVDPlusPlus, user: int, item: int) -> torch.Tensor:
    """One prediction by the formula, item by item."""
    rated = RATED.get(user, [])
    implicit = torch.zeros(N_FACTORS)
    for j in rated:
        implicit = implicit + model.implicit_factors.weight[j]
    if rated:
        implicit = implicit / len(rated) ** 0.5
    user_vector = model.user_factors.weight[user] + implicit
    score = (
        user_vector @ model.item_factors.weight[item]
        + model.user_bias.weight[user, 0]
        + model.item_bias.weight[item, 0]
    )
    low, high = Y_RANGE
    return torch.sigmoid(score) * (high - low) + low


def test_n_u_is_each_users_distinct_rated_items() -> None:
    model = make()
    for user in range(N_USERS):
        start, end = model.rated_starts[user], model.rated_starts[user + 1]
        assert model.rated_items[start:end].tolist() == RATED.get(user, [])


def test_predictions_follow_the_formula_item_by_item() -> None:
    model = make()
    x = torch.tensor([[0, 4], [1, 3], [2, 7], [0, 0], [4, 2], [2, 7], [0, 1]])
    expected = torch.stack([koren(model, int(u), int(i)) for u, i in x])
    torch.testing.assert_close(model(x), expected)


def test_gradient_reaches_only_the_implicit_rows_of_the_batch_users() -> None:
    model = make()
    torch.mean((model(torch.tensor([[0, 4], [1, 2]])) - 3.0) ** 2).backward()
    grad = model.implicit_factors.weight.grad
    assert grad is not None
    touched = grad.abs().sum(dim=1) > 0
    assert touched.tolist() == [j in {1, 2, 3, 5} for j in range(N_ITEMS)]


def test_without_training_pairs_it_predicts_as_dotbias_does() -> None:
    generator = torch.Generator().manual_seed(0)
    svdpp = build_model("svdpp", N_USERS, N_ITEMS, N_FACTORS, Y_RANGE, generator)
    dotbias = build_model("dotbias", N_USERS, N_ITEMS, N_FACTORS, Y_RANGE)
    dotbias.load_state_dict(svdpp.state_dict(), strict=False)
    x = torch.tensor([[u, i] for u in range(N_USERS) for i in range(N_ITEMS)])
    torch.testing.assert_close(svdpp(x), dotbias(x))


def test_the_penalty_weighs_each_ratings_bag_rows_by_one_over_its_size() -> None:
    model = make().double()
    x = torch.tensor([[0, 4], [0, 1], [2, 3], [5, 0]])
    expected = torch.zeros((), dtype=torch.float64)
    for user, item in x.tolist():
        for table, row in ((model.user_factors, user), (model.item_factors, item)):
            expected = expected + table.weight[row].pow(2).sum()
        expected = expected + model.user_bias.weight[user, 0] ** 2 + model.item_bias.weight[item, 0] ** 2
        rated = RATED.get(user, [])
        if rated:
            expected = expected + model.implicit_factors.weight[rated].pow(2).sum() / len(rated)
    expected = expected / len(x)
    penalty = model.penalty(x)
    torch.testing.assert_close(penalty, expected)
    (got,) = torch.autograd.grad(penalty, model.implicit_factors.weight)
    (want,) = torch.autograd.grad(expected, model.implicit_factors.weight)
    torch.testing.assert_close(got, want)


def test_the_training_pairs_travel_in_the_state_dict() -> None:
    trained = make(seed=4)
    fresh = build_model("svdpp", N_USERS, N_ITEMS, N_FACTORS, Y_RANGE)
    fresh.load_state_dict(trained.state_dict())
    x = torch.tensor([[u, i] for u in range(N_USERS) for i in range(N_ITEMS)])
    torch.testing.assert_close(fresh(x), trained(x))


def test_explanation_names_the_implicit_term() -> None:
    model = make()
    users, items = split_pairs(torch.tensor([[0, 4], [2, 1], [3, 3]]))
    explanation = model.explain(users, items)
    assert explanation is not None
    assert list(explanation.terms) == ["user_bias", "item_bias", "factors", "implicit"]
    assert explanation.terms["implicit"][2] == 0  # user 3 rated nothing
    assert torch.equal(explanation.prediction, model(torch.stack([users, items], 1)))


def test_user_vectors_include_the_implicit_part() -> None:
    model = make()
    vectors = model.id_vectors()
    assert vectors is not None
    implicit = model.implicit_factors.weight[RATED[0]].sum(0) / 3**0.5
    torch.testing.assert_close(vectors[0][0], model.user_factors.weight[0] + implicit)
    torch.testing.assert_close(vectors[0][4], model.user_factors.weight[4])


@pytest.mark.parametrize("bad", [[[0, N_ITEMS]], [[N_USERS, 0]], [[-1, 0]]])
def test_training_pairs_outside_the_tables_are_refused(bad: list[list[int]]) -> None:
    with pytest.raises(ValueError, match="indices must lie in"):
        make().set_training_pairs(torch.tensor(bad))


# --- EmbeddingBag is a multi-hot Linear ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_equals_a_multi_hot_linear(mode: str) -> None:
    """`mode="sum"`: the bag of rows is multi_hot(bags) @ W; `mode="mean"`: the row-normalised one.
    The same values and the same gradient for the shared weight."""
    generator = torch.Generator().manual_seed(0)
    bag = nn.EmbeddingBag(N_ITEMS, N_FACTORS, mode=mode)
    linear = nn.Linear(N_ITEMS, N_FACTORS, bias=False)
    with torch.no_grad():
        bag.weight.normal_(generator=generator)
        linear.weight.copy_(bag.weight.t())
    bags = [[1, 2, 5], [3], [0, 1, 2, 3, 4, 5, 6, 7], [6, 6]]
    items = torch.tensor([j for b in bags for j in b])
    offsets = torch.tensor([0, 3, 4, 12])
    hot = multi_hot(bags, N_ITEMS, normalise=mode == "mean")
    by_bag, by_linear = bag(items, offsets), linear(hot)
    torch.testing.assert_close(by_bag, by_linear)
    by_bag.square().sum().backward()
    by_linear.square().sum().backward()
    assert bag.weight.grad is not None and linear.weight.grad is not None
    torch.testing.assert_close(bag.weight.grad, linear.weight.grad.t())
    assert torch.equal(hot[3], F.one_hot(torch.tensor(6), N_ITEMS).float() * (2 if mode == "sum" else 1))
