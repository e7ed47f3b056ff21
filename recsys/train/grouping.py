"""Pairs grouped by one side (CSR) by a counting sort: one pass to count, one to place each pair,
where a comparison sort of millions of keys costs several times more (docs/performance.md)."""

import numpy as np

from recsys.train.jit import compiled


@compiled()
def grouped(
    rows: np.ndarray, others: np.ndarray, values: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs grouped by `rows` (each in 0..n-1), as CSR: where each row's pairs start (n + 1
    offsets), the other side's indices, the values. Stable: a row's pairs keep their order."""
    starts = np.zeros(n + 1, np.int64)
    for row in rows:
        starts[row + 1] += 1
    for row in range(n):
        starts[row + 1] += starts[row]
    cursor = starts[:-1].copy()
    grouped_others, grouped_values = np.empty_like(others), np.empty_like(values)
    for place in range(len(rows)):
        row = rows[place]
        grouped_others[cursor[row]], grouped_values[cursor[row]] = others[place], values[place]
        cursor[row] += 1
    return starts, grouped_others, grouped_values


def rows_of(starts: np.ndarray, dtype: type = np.int64) -> np.ndarray:
    """Each grouped pair's row, from where each row's pairs start (CSR `starts`)."""
    return np.repeat(np.arange(len(starts) - 1, dtype=dtype), np.diff(starts))
