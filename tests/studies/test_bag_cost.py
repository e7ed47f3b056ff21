"""The EmbeddingBag-versus-multi-hot measurement: the same outputs and gradients, sane numbers."""

import math

import pytest
import torch

from recsys.studies.bag_cost import MODES, VARIANTS, bag_versus_multi_hot, multi_hot


@pytest.mark.parametrize("mode", MODES)
def test_the_bag_is_the_multi_hot_linear(mode: str) -> None:
    row = bag_versus_multi_hot(300, mode=mode, n_factors=6, n_bags=16, bag_size=20, steps=1)
    assert row["max_abs_diff"] <= 1e-6 and row["max_abs_grad_diff"] <= 1e-6
    for variant in VARIANTS:
        assert 0 < row[f"{variant}_seconds"] < math.inf
        assert row[f"{variant}_peak_bytes"] > 0


def test_multi_hot_counts_repeats_and_normalises_by_bag_size() -> None:
    rows = multi_hot([[0, 2, 2], [], [1]], 3, normalise=True)
    torch.testing.assert_close(rows, torch.tensor([[1 / 3, 0, 2 / 3], [0, 0, 0], [0, 1, 0]]))
    assert multi_hot([[0, 2, 2]], 3)[0].tolist() == [1, 0, 2]


BAD = [("mode", "max"), ("bag_size", 0), ("bag_size", 301), ("steps", 0)]


@pytest.mark.parametrize(("keyword", "value"), BAD)
def test_bad_settings_are_refused(keyword: str, value: object) -> None:
    with pytest.raises(ValueError):
        bag_versus_multi_hot(300, **{keyword: value})  # type: ignore[arg-type]
