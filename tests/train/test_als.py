"""Implicit ALS (`ials`): each side's solve against a dense weighted least-squares solution, and the
Gram matrix it shares between rows."""

import numba
import numpy as np
import pytest

from recsys.models.ranking import als_penalty
from recsys.train.als import _positive_terms, gram, row_strengths, solve_side
from recsys.train.interactions import ByRow


def _small_case(seed: int = 0) -> tuple[np.ndarray, ByRow, np.ndarray, float]:
    """Four rows against seven others, k = 3: row 2 has no positives."""
    rng = np.random.default_rng(seed)
    other = rng.normal(size=(7, 3)).astype(np.float32)
    by_row = ByRow(
        np.array([0, 3, 5, 5, 9], np.int64),
        np.array([0, 2, 6, 1, 4, 0, 1, 3, 5], np.int32),
        rng.uniform(1, 3, size=9).astype(np.float32),
    )
    regularisation = rng.uniform(0.1, 2.0, size=4)
    return other, by_row, regularisation, 1.7


def _dense_solution(other: np.ndarray, by_row: ByRow, regularisation: np.ndarray, alpha: float) -> np.ndarray:
    """Each row by a dense weighted least squares over every other-side column: the cells of the whole
    row written out, with numpy's lstsq on the weighted, penalised system."""
    n_rows, (n_other, k) = len(by_row.starts) - 1, other.shape
    rows = np.zeros((n_rows, k))
    for r in range(n_rows):
        target, weight = np.zeros(n_other), np.ones(n_other)
        span = slice(by_row.starts[r], by_row.starts[r + 1])
        target[by_row.others[span]] = 1.0
        weight[by_row.others[span]] = 1.0 + alpha * by_row.strengths[span]
        root = np.sqrt(weight)[:, None]
        design = np.vstack([root * other, np.sqrt(regularisation[r]) * np.eye(k)])
        response = np.concatenate([np.sqrt(weight) * target, np.zeros(k)])
        rows[r] = np.linalg.lstsq(design, response, rcond=None)[0]
    return rows


@pytest.mark.parametrize("steps", [0, 3])  # exact; conjugate gradient, which solves k = 3 in 3 steps
def test_a_side_is_solved_as_a_dense_weighted_least_squares(steps: int) -> None:
    other, by_row, regularisation, alpha = _small_case()
    rows = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    solve_side(rows, other, gram(other), tuple(by_row), alpha, regularisation, steps)
    np.testing.assert_allclose(
        rows, _dense_solution(other, by_row, regularisation, alpha), rtol=1e-4, atol=1e-5
    )


def test_conjugate_gradient_moves_toward_the_solution_a_step_at_a_time() -> None:
    """One step from a start improves on it; the error falls with more steps."""
    other, by_row, regularisation, alpha = _small_case(2)
    exact = _dense_solution(other, by_row, regularisation, alpha)
    start = np.random.default_rng(3).normal(size=(4, 3)).astype(np.float32)
    errors = []
    for steps in (1, 2, 3):
        rows = start.copy()
        solve_side(rows, other, gram(other), tuple(by_row), alpha, regularisation, steps)
        errors.append(np.abs(rows - exact).max())
    assert np.abs(start - exact).max() > errors[0] > errors[2]
    assert errors[2] < 1e-4


def test_the_gram_matrix_is_the_tables_own_product() -> None:
    table = np.random.default_rng(4).normal(size=(50, 6)).astype(np.float32)
    np.testing.assert_allclose(gram(table), table.T.astype(np.float64) @ table, rtol=1e-10)


def test_a_rows_weight_counts_every_cell_and_its_positives_confidence() -> None:
    _, by_row, _, alpha = _small_case()
    penalty = als_penalty(0.4, alpha, row_strengths(by_row), 7)
    for r in range(4):
        extra = by_row.strengths[by_row.starts[r] : by_row.starts[r + 1]].sum()
        assert penalty[r] == pytest.approx(0.4 * (7 + alpha * extra) / 7)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two numba threads")
def test_a_side_is_solved_alike_on_any_threads_and_in_any_call() -> None:
    """Each row's conjugate-gradient steps are the same sums in the same order whichever thread
    takes the row and wherever its scratch vectors were allocated: four arrays of their own let
    LLVM's alias check choose the vectorised or the scalar loop by their distance, and about a fifth
    of the rows then differed in the last digits from call to call."""
    rng = np.random.default_rng(0)
    n, m, k = 8000, 6000, 16
    counts = rng.integers(0, 130, n)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    others = np.concatenate([np.sort(rng.choice(m, c, replace=False)) for c in counts]).astype(np.int32)
    by_row = (starts, others, np.ones(len(others), np.float32))
    other = (0.1 * rng.standard_normal((m, k))).astype(np.float32)
    other_gram, regularisation = gram(other), np.full(n, 0.5)
    start = (0.1 * rng.standard_normal((n, k))).astype(np.float32)
    solved = []
    before = numba.get_num_threads()
    try:
        for call in range(8):
            numba.set_num_threads(1 + call % 2)
            rows = start.copy()
            solve_side(rows, other, other_gram, by_row, 1.0, regularisation, 3)
            solved.append(rows)
    finally:
        numba.set_num_threads(before)
    for call, rows in enumerate(solved[1:], 1):
        differing = int(np.sum(np.any(rows != solved[0], axis=1)))
        assert differing == 0, f"call {call} (on {1 + call % 2} threads) differs in {differing} rows"


def test_the_loss_of_the_positives_is_the_same_sum_on_any_threads() -> None:
    """A reduction over numba's threads sums in an order that depends on their number: the printed
    training loss differed between --threads 1 and 2 in its last digits."""
    rng = np.random.default_rng(1)
    n, m, k = 3000, 500, 32
    counts = rng.integers(1, 40, n)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    by_user = (
        starts,
        rng.integers(0, m, starts[-1]).astype(np.int32),
        rng.random(starts[-1]).astype(np.float32),
    )
    users = (0.1 * rng.standard_normal((n, k))).astype(np.float32)
    items = (0.1 * rng.standard_normal((m, k))).astype(np.float32)
    before = numba.get_num_threads()
    try:
        sums = []
        for threads in (1, 2, 1, 2):
            numba.set_num_threads(threads)
            sums.append(_positive_terms(users, items, by_user, 3.0))
    finally:
        numba.set_num_threads(before)
    assert len(set(sums)) == 1, sums
