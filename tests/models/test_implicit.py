"""SVD++ (`svdpp`): its implicit term against Koren's formula written out, N(u) from the training pairs
and through a checkpoint, its penalty, and EmbeddingBag against the multi-hot Linear it stands for."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import planted_side_features
from torch import nn
from torch.nn import functional as F

from recsys.config import config_for
from recsys.data.features import features_of, rows_for_new
from recsys.errors import RecsysError
from recsys.models import SVDPlusPlus, build_model
from recsys.models.feature_coding import saved_codings
from recsys.models.layers import split_pairs
from recsys.studies.bag_cost import multi_hot
from recsys.workflows.experiment import train_and_evaluate

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


def test_n_u_is_each_users_distinct_rated_items_weighted_one_over_its_root_size() -> None:
    model = make()
    for user in range(N_USERS):
        start, end = model.bag_starts[user], model.bag_starts[user + 1]
        assert model.bag_columns[start:end].tolist() == RATED.get(user, [])
        torch.testing.assert_close(
            model.bag_weights[start:end], torch.full((end - start,), (end - start) ** -0.5)
        )


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
    with pytest.raises(IndexError, match=r"index -?\d+ \(row 0\) is outside the model's"):
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


def _with_side_features() -> SVDPlusPlus:
    """`make()`'s model with its bags from feature rows: a group per user (a, b or none) and the
    items rated."""
    model = make()
    table = pd.DataFrame({"group": ["a", "b", "a", "b"]}, index=pd.Index([0, 1, 2, 4], name="user"))
    users, items = features_of(
        ("side", "implicit"), np.arange(N_USERS), np.arange(N_ITEMS), PAIRS.numpy(), table, None
    )
    model.set_features(users, items)
    return model


def test_side_features_join_a_users_bag_before_the_items_it_rated() -> None:
    item_rows = make().implicit_factors.weight.detach().clone()
    model = _with_side_features()
    table = model.implicit_factors.weight
    assert len(table) == 2 + N_ITEMS and table[:2].abs().sum() == 0  # a, b from zero; items as before
    torch.testing.assert_close(table[2:], item_rows)
    with torch.no_grad():
        table.normal_(generator=torch.Generator().manual_seed(3))
    model.set_training_pairs(PAIRS)  # the trainer's call leaves bags from features alone
    groups = {0: 0, 1: 1, 2: 0, 4: 1}
    for user, item in [(0, 4), (1, 3), (2, 7), (3, 0), (4, 2), (5, 1)]:
        bag = torch.zeros(N_FACTORS)
        if user in groups:
            bag = bag + table[groups[user]]
        rated = RATED.get(user, [])
        if rated:
            bag = bag + table[[2 + j for j in rated]].sum(0) / len(rated) ** 0.5
        score = (model.user_factors.weight[user] + bag) @ model.item_factors.weight[item]
        score = score + model.user_bias.weight[user, 0] + model.item_bias.weight[item, 0]
        low, high = Y_RANGE
        expected = torch.sigmoid(score) * (high - low) + low
        torch.testing.assert_close(model(torch.tensor([[user, item]]))[0], expected)


def test_a_new_users_start_is_its_bag_of_features_and_the_bags_travel_in_the_state_dict() -> None:
    model = _with_side_features()
    with torch.no_grad():
        model.implicit_factors.weight.normal_(generator=torch.Generator().manual_seed(5))
    table = model.implicit_factors.weight
    new = pd.DataFrame({"group": ["b"]}, index=["new"])
    codings = saved_codings(model, "user")
    rows = rows_for_new(("side", "implicit"), codings, new, np.array(["new"]), [np.array([1, 5])], N_ITEMS)
    vectors, biases = model.feature_vectors(rows)
    torch.testing.assert_close(vectors[0], table[1] + (table[2 + 1] + table[2 + 5]) / 2**0.5)
    assert biases.tolist() == [0.0]
    fresh = build_model("svdpp", N_USERS, N_ITEMS, N_FACTORS, Y_RANGE)
    fresh.load_state_dict(model.state_dict())
    x = torch.tensor([[u, i] for u in range(N_USERS) for i in range(N_ITEMS)])
    torch.testing.assert_close(fresh(x), model(x))
    with pytest.raises(RecsysError, match="features where training had"):
        model.feature_vectors(rows_for_new(("side",), codings, new, np.array(["new"])))


def test_bags_from_features_loaded_with_a_state_dict_stay_when_the_training_pairs_are_set() -> None:
    """As fit sets them on a checkpoint's model: they had become N(u) bags, whose item columns read
    the side features' rows of the loaded table."""
    model = _with_side_features()
    with torch.no_grad():
        model.implicit_factors.weight.normal_(generator=torch.Generator().manual_seed(5))
    fresh = build_model("svdpp", N_USERS, N_ITEMS, N_FACTORS, Y_RANGE)
    fresh.load_state_dict(model.state_dict())
    fresh.set_training_pairs(PAIRS)
    x = torch.tensor([[u, i] for u in range(N_USERS) for i in range(N_ITEMS)])
    torch.testing.assert_close(fresh(x), model(x))


@pytest.mark.parametrize("engine", ["compiled", "autograd"])
def test_a_planted_side_feature_effect_is_learned_on_either_engine(engine: str) -> None:
    """Six ratings a user are too few for its own vector; its group says its taste."""
    dataset = planted_side_features()
    rmse = {
        features: train_and_evaluate(
            dataset, config_for("svdpp", engine=engine, features=features, split="random"), progress=False
        ).test["rmse"]
        for features in ("", "side")
    }
    assert rmse["side"] < rmse[""] - 0.04, rmse
