"""recsys.evaluation.biases: a model's explicit bias tables, or the biases its factors imply."""

import pytest
import torch

from recsys.evaluation.biases import learned_biases
from recsys.models import DotProduct, DotProductBias, EmbeddingProjection, LinearDotProduct


def test_explicit_biases_are_the_bias_tables() -> None:
    model = DotProductBias(3, 4, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.user_bias.weight.copy_(torch.tensor([[0.1], [0.2], [0.3]]))
        model.item_bias.weight.copy_(torch.tensor([[1.0], [2.0], [3.0], [4.0]]))
    biases = learned_biases(model)
    assert biases is not None and biases.kind == "explicit"
    assert biases.user.tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert biases.item.tolist() == pytest.approx([1.0, 2.0, 3.0, 4.0])
    model.user_bias.weight.data.zero_()  # a copy, not a view of the live weights
    assert biases.user.tolist() == pytest.approx([0.1, 0.2, 0.3])


def test_implied_biases_of_linear_match_the_expansion() -> None:
    """(u + b_u) . (i + b_i) = u.i + b_u.i + u.b_i + b_u.b_i: item bias b_u.i, user bias u.b_i."""
    model = LinearDotProduct(3, 4, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.user_linear.bias.copy_(torch.tensor([1.0, -2.0]))
        model.item_linear.bias.copy_(torch.tensor([0.5, 3.0]))
    biases = learned_biases(model)
    assert biases is not None and biases.kind == "implied"
    for item in range(4):
        i = model.item_linear.weight[:, item].detach()
        assert biases.item[item] == pytest.approx(float(1.0 * i[0] - 2.0 * i[1]))
    for user in range(3):
        u = model.user_linear.weight[:, user].detach()
        assert biases.user[user] == pytest.approx(float(0.5 * u[0] + 3.0 * u[1]))
    # The decomposition is exact: score = u.i + user bias + item bias + b_u.b_i.
    x = torch.tensor([[2, 3]])
    u, i = model.user_linear.weight[:, 2].detach(), model.item_linear.weight[:, 3].detach()
    expected = u @ i + biases.user[2] + biases.item[3] + (1.0 * 0.5 - 2.0 * 3.0)
    assert model.score(x[:, 0], x[:, 1]).item() == pytest.approx(float(expected), abs=1e-6)


def test_implied_biases_of_embproj_match_the_expansion() -> None:
    model = EmbeddingProjection(3, 4, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.user_projection.bias.copy_(torch.tensor([0.3, -1.0]))
        model.item_projection.bias.copy_(torch.tensor([2.0, 0.7]))
        model.user_projection.weight.copy_(torch.tensor([[1.0, 2.0], [0.0, 1.0]]))
    biases = learned_biases(model)
    assert biases is not None
    users, items = torch.arange(3), torch.arange(4)
    user_vectors = model.user_factors(users) @ model.user_projection.weight.t()
    item_vectors = model.item_factors(items) @ model.item_projection.weight.t()
    assert biases.item == pytest.approx((item_vectors @ torch.tensor([0.3, -1.0])).detach().double().numpy())
    assert biases.user == pytest.approx((user_vectors @ torch.tensor([2.0, 0.7])).detach().double().numpy())


def test_models_without_biases_say_so() -> None:
    assert learned_biases(DotProduct(3, 4, 2)) is None
    assert learned_biases(LinearDotProduct(3, 4, 2, bias=False)) is None
