"""The prefetch hint compiles for the arrays LazyAdam passes it and changes nothing it touches."""

import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError

from recsys.train.prefetch import prefetch_row


@njit
def _prefetch_every_row(table: np.ndarray, rows: np.ndarray) -> None:
    for row in rows:
        prefetch_row(table, row)


@pytest.mark.parametrize("shape", [(7,), (7, 1), (7, 3), (7, 50)])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_prefetch_leaves_every_row_as_it_was(shape: tuple[int, ...], index_dtype: type) -> None:
    table = np.random.default_rng(0).random(shape, dtype=np.float32)
    before = table.copy()
    _prefetch_every_row(table, np.arange(shape[0], dtype=index_dtype)[::-1].copy())
    assert np.array_equal(table, before)


def test_prefetch_refuses_arrays_it_has_no_row_for() -> None:
    with pytest.raises(TypingError):
        _prefetch_every_row(np.zeros((2, 2, 2), np.float32), np.arange(2))
