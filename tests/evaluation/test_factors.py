"""recsys.evaluation.factors: nearest neighbours by cosine, principal components, a model's item vectors."""

import numpy as np
import pytest

from recsys.evaluation.factors import cosine_neighbours, item_vectors, principal_components
from recsys.models import DotProductBias


def test_factor_helpers() -> None:
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [-1.0, 0.0], [0.0, 1.0]])
    neighbours, similarity = cosine_neighbours(vectors, 0, n=2)
    assert neighbours.tolist() == [1, 3]
    assert similarity[0] == pytest.approx(0.9 / np.hypot(0.9, 0.1))
    everyone, _ = cosine_neighbours(vectors, 3, n=10)  # more asked for than there are: never itself
    assert sorted(everyone.tolist()) == [0, 1, 2]
    points = principal_components(np.array([[0.0, 0.0], [2.0, 2.0], [4.0, 4.0]]), 1)
    assert np.abs(points[:, 0]).tolist() == pytest.approx([2 * np.sqrt(2), 0.0, 2 * np.sqrt(2)])
    model = DotProductBias(3, 4, 2)
    assert np.array_equal(item_vectors(model), model.item_factors.weight.detach().double().numpy())


@pytest.mark.parametrize(("index", "n", "expected"), [(-1, 2, "index -1 is not a row of the 4"),
                                                      (4, 2, "index 4 is not a row of the 4"),
                                                      (0, -1, "n must be 0 or more, got -1")])  # fmt: skip
def test_a_row_past_the_vectors_or_a_negative_count_is_refused(index: int, n: int, expected: str) -> None:
    # numpy would read -1 as the last row and [:-1] as all but one neighbour, without a word.
    with pytest.raises(ValueError, match=expected):
        cosine_neighbours(np.eye(4), index, n)
