"""The lookup-versus-one-hot measurement: same outputs, the gradient sizes the algebra predicts, sane numbers.

No timing comparisons between variants: those are benchmark results, not properties to test.
"""

import math
import os

import pytest

from recsys.studies.lookup_cost import MEASURES, VARIANTS, lookup_cost_table, lookup_versus_linear

N_FACTORS, BATCH_SIZE = 8, 64


@pytest.fixture(scope="module")
def rows() -> dict[int, dict[str, float]]:
    """Measurements for 200 and 2,000 users, keyed by n_users."""
    table = lookup_cost_table((200, 2000), n_factors=N_FACTORS, batch_size=BATCH_SIZE, steps=2)
    return {int(row["n_users"]): row for row in table}


def test_one_row_per_size_with_every_measure(rows: dict[int, dict[str, float]]) -> None:
    assert sorted(rows) == [200, 2000]
    expected = {"n_users", "max_abs_diff"} | {f"{v}_{m}" for v in VARIANTS for m in MEASURES}
    for row in rows.values():
        assert set(row) == expected
        assert all(isinstance(value, float) for value in row.values())


@pytest.mark.parametrize("n_users", [200, 2000])
def test_one_hot_linear_computes_the_lookup(rows: dict[int, dict[str, float]], n_users: int) -> None:
    assert rows[n_users]["max_abs_diff"] <= 1e-6


@pytest.mark.parametrize("n_users", [200, 2000])
def test_gradient_entries(rows: dict[int, dict[str, float]], n_users: int) -> None:
    row = rows[n_users]
    for dense in ("embedding", "dense_one_hot", "sparse_one_hot"):
        assert row[f"{dense}_gradient_entries"] == n_users * N_FACTORS
    # One row of values per index in the batch, repeated users included, whatever the table size.
    assert row["sparse_embedding_gradient_entries"] == BATCH_SIZE * N_FACTORS


@pytest.mark.parametrize("n_users", [200, 2000])
def test_times_and_memory_are_sane(rows: dict[int, dict[str, float]], n_users: int) -> None:
    for variant in VARIANTS:
        seconds = rows[n_users][f"{variant}_seconds"]
        assert 0 < seconds < math.inf
        # Every step allocates at least the loss's temporaries: 4 x batch_size x n_factors float32s.
        assert rows[n_users][f"{variant}_peak_bytes"] >= 4 * BATCH_SIZE * N_FACTORS * 4


def test_dense_one_hot_memory_grows_with_the_table(rows: dict[int, dict[str, float]]) -> None:
    # The (batch, n_users) one-hot matrix alone is BATCH_SIZE * n_users floats.
    assert rows[2000]["dense_one_hot_peak_bytes"] > rows[200]["dense_one_hot_peak_bytes"]
    assert rows[2000]["dense_one_hot_peak_bytes"] >= BATCH_SIZE * 2000 * 4


def test_dense_gradient_memory_grows_with_the_table_but_sparse_does_not(
    rows: dict[int, dict[str, float]],
) -> None:
    assert rows[2000]["embedding_peak_bytes"] >= 2000 * N_FACTORS * 4
    assert rows[2000]["sparse_embedding_peak_bytes"] == rows[200]["sparse_embedding_peak_bytes"]


def test_skipping_the_dense_one_hot_reports_nan() -> None:
    row = lookup_versus_linear(300, n_factors=N_FACTORS, batch_size=BATCH_SIZE, steps=1, skip_dense_above=299)
    assert all(math.isnan(row[f"dense_one_hot_{measure}"]) for measure in MEASURES)
    # The comparison still holds through the sparse one-hot product.
    assert row["max_abs_diff"] <= 1e-6
    assert row["sparse_one_hot_gradient_entries"] == 300 * N_FACTORS


def test_progress_reports_each_size_as_it_starts() -> None:
    lines: list[str] = []
    lookup_cost_table((50, 1500), n_factors=N_FACTORS, batch_size=BATCH_SIZE, steps=1, progress=lines.append)
    assert lines == ["measuring lookup cost: 50 users (1/2)", "measuring lookup cost: 1,500 users (2/2)"]


def test_the_profiler_writes_nothing_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    # kineto writes "USDT:... profiler_start" (and at some log levels "STAGE:") lines to fd 2 from C++.
    lookup_versus_linear(50, n_factors=N_FACTORS, batch_size=BATCH_SIZE, steps=1)
    os.write(2, b"stderr is back\n")
    err = capfd.readouterr().err
    assert "USDT" not in err and "STAGE:" not in err
    assert err.endswith("stderr is back\n")


def test_invalid_sizes_are_errors() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        lookup_versus_linear(0)
    with pytest.raises(ValueError, match="at least 1"):
        lookup_versus_linear(10, steps=0)
