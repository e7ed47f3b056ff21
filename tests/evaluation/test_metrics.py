"""recsys.evaluation.metrics: RMSE and MAE, test scoring with either policy for unseen ids, predict."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch import nn

from recsys.data.encoding import EncodedSplit, IdMap, RatingTensors
from recsys.evaluation.metrics import CPU_CHUNK, evaluate_test, mae, predict, rmse
from recsys.models import DotProductBias


def test_rmse_and_mae_by_hand() -> None:
    predictions = torch.tensor([1.0, 2.0, 3.0, 4.0])
    targets = torch.tensor([1.0, 4.0, 2.0, 4.0])
    assert rmse(predictions, targets) == pytest.approx(math.sqrt((0 + 4 + 1 + 0) / 4))
    assert mae(predictions, targets) == pytest.approx((0 + 2 + 1 + 0) / 4)
    assert rmse(targets, targets) == 0.0 and mae(targets, targets) == 0.0
    assert isinstance(rmse(predictions, targets), float)


def test_a_column_of_targets_scores_as_a_vector_and_other_shapes_are_refused() -> None:
    predictions = torch.tensor([1.0, 2.0, 3.0, 4.0])
    targets = torch.tensor([1.0, 4.0, 2.0, 4.0])
    column = targets.unsqueeze(1)  # broadcast against (4,), it would compare all 16 pairs
    assert rmse(predictions, column) == rmse(predictions, targets)
    assert mae(column.T.T, predictions) == mae(targets, predictions)
    for metric in (rmse, mae):
        with pytest.raises(ValueError, match=r"\(4,\) predictions against \(1,\) targets"):
            metric(predictions, torch.tensor([2.5]))


class Constant(nn.Module):
    """Predicts the same rating for every pair."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full((len(x),), self.value)


class Encode(nn.Module):
    """Predicts 10 * user + item, so every row's prediction is distinct and checkable."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert not torch.is_grad_enabled()
        return (x[:, 0] * 10 + x[:, 1]).float()


def hand_split() -> EncodedSplit:
    return EncodedSplit(
        users=IdMap(np.array([10, 20])),
        items=IdMap(np.array([1, 2, 3])),
        train=RatingTensors(torch.tensor([[0, 0], [1, 1]]), torch.tensor([3.0, 4.0])),
        test=RatingTensors(torch.tensor([[0, 1], [1, 2], [0, 2]]), torch.tensor([4.0, 2.0, 3.0])),
        unknown_test_ratings=np.array([5.0, 1.0], dtype=np.float32),
        train_mean=3.5,
    )


def test_evaluate_test_drop_scores_only_known_ids() -> None:
    result = evaluate_test(Constant(3.0), hand_split(), "drop")
    # errors 1, -1, 0
    assert result["rmse"] == pytest.approx(math.sqrt(2 / 3))
    assert result["mae"] == pytest.approx(2 / 3)


def test_evaluate_test_mean_predicts_the_train_mean_for_unknown_ids() -> None:
    result = evaluate_test(Constant(3.0), hand_split(), "mean")
    # known: 3 vs 4, 2, 3 -> errors 1, 1, 0; unknown: 3.5 vs 5, 1 -> errors 1.5, 2.5
    assert result["rmse"] == pytest.approx(math.sqrt((1 + 1 + 0 + 2.25 + 6.25) / 5))
    assert result["mae"] == pytest.approx((1 + 1 + 0 + 1.5 + 2.5) / 5)


def test_evaluate_test_mean_without_unknown_ids_equals_drop() -> None:
    data = dataclasses.replace(hand_split(), unknown_test_ratings=np.zeros(0, dtype=np.float32))
    assert evaluate_test(Constant(3.0), data, "mean") == evaluate_test(Constant(3.0), data, "drop")


def test_evaluate_test_rejects_unknown_policy() -> None:
    with pytest.raises(ValueError, match="policy"):
        evaluate_test(Constant(3.0), hand_split(), "zero")


def test_predict_covers_every_row_in_order_and_restores_train_mode() -> None:
    model = Encode()
    x = torch.tensor([[u, i] for u in range(3) for i in range(5)])
    model.train()
    out = predict(model, x, batch_size=4)
    assert torch.equal(out, (x[:, 0] * 10 + x[:, 1]).float())
    assert model.training
    model.eval()
    predict(model, x, batch_size=4)
    assert not model.training


@pytest.mark.parametrize("rows", [[[0, 1]], np.array([[0, 1]])])
def test_predict_names_rows_that_are_no_tensor(rows: object) -> None:
    with pytest.raises(TypeError, match=r"expected a torch tensor of .user, item. indices, got"):
        predict(DotProductBias(2, 2, 2), rows)  # type: ignore[arg-type]


def test_predict_on_no_rows_gives_the_models_empty_predictions() -> None:
    assert predict(Encode(), torch.zeros(0, 2, dtype=torch.long)).shape == (0,)
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        predict(Encode(), torch.zeros(3, 2, dtype=torch.long), batch_size=0)


def test_predict_by_default_covers_rows_past_the_cpu_chunk_in_order() -> None:
    users = torch.arange(CPU_CHUNK + 3) % 7
    x = torch.stack([users, torch.zeros_like(users)], dim=1)
    assert torch.equal(predict(Encode(), x), (users * 10).float())
