"""The benchmark's bookkeeping (its timings are measured by scripts/bench.py, never asserted here)."""

import pytest

from recsys.benchmark import SHAPES, median_runs, ratio_table, synthetic_shape


def test_ratio_table_divides_by_the_reference() -> None:
    rows = [
        {"contender": "recsys-dotbias", "seconds": 0.5, "wall_seconds": 4.0},
        {"contender": "fastai", "seconds": 20.0, "wall_seconds": 30.0},
    ]
    table = ratio_table(rows, "recsys-dotbias").set_index("contender")
    assert table.at["fastai", "seconds_ratio"] == pytest.approx(40.0)
    assert table.at["fastai", "wall_ratio"] == pytest.approx(7.5)
    assert table.at["recsys-dotbias", "seconds_ratio"] == 1.0


def test_synthetic_shape_has_the_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SHAPES, "small", (50, 80, 1_000))
    ratings = synthetic_shape("small").ratings
    assert len(ratings) == 1_000
    assert ratings["user"].max() <= 50 and ratings["item"].max() <= 80


def test_median_runs_gives_each_contender_its_median_and_range() -> None:
    rows = [
        {"contender": "recsys-dotbias", "seconds": s, "wall_seconds": 4.0, "rmse": 0.9}
        for s in (0.5, 0.3, 0.4)
    ] + [
        {"contender": "fastai", "seconds": s, "wall_seconds": 30.0, "rmse": r}
        for s, r in ((20.0, 0.93), (22.0, 0.95))
    ]
    table = median_runs(rows).set_index("contender")
    assert table.index.tolist() == ["recsys-dotbias", "fastai"]
    assert table.at["recsys-dotbias", "seconds"] == 0.4
    assert (table.at["recsys-dotbias", "seconds_min"], table.at["recsys-dotbias", "seconds_max"]) == (
        0.3,
        0.5,
    )
    assert table.at["fastai", "rmse"] == pytest.approx(0.94)
    assert table["runs"].tolist() == [3, 2]
