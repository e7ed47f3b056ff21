"""recsys.evaluation.baselines: the global mean and the damped bias model, by hand."""

import pytest
import torch

from recsys.data.encoding import RatingTensors
from recsys.evaluation.baselines import fit_damped_bias, global_mean


def test_damped_bias_matches_a_hand_computation() -> None:
    # users 0,0,1 rate items 0,1,0 with 5,3,4; mean 4; damping 1.
    train = RatingTensors(torch.tensor([[0, 0], [0, 1], [1, 0]]), torch.tensor([5.0, 3.0, 4.0]))
    model = fit_damped_bias(train, n_users=2, n_items=2, damping=1.0)
    item0, item1 = (1.0 + 0.0) / (2 + 1), (-1.0) / (1 + 1)
    user0 = ((5 - 4 - item0) + (3 - 4 - item1)) / (2 + 1)
    user1 = (4 - 4 - item0) / (1 + 1)
    assert model.item_bias.tolist() == pytest.approx([item0, item1])
    assert model.user_bias.tolist() == pytest.approx([user0, user1])
    assert model(torch.tensor([[1, 1]])).item() == pytest.approx(4 + user1 + item1)
    assert global_mean(train, 2, 2)(torch.tensor([[0, 1], [1, 0]])).tolist() == pytest.approx([4.0, 4.0])
