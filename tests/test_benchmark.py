"""The benchmark's bookkeeping (its timings are measured by scripts/bench.py, never asserted here)."""

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

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


def _bench_script() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "scripts" / "bench.py"
    spec = importlib.util.spec_from_file_location("bench_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_trains_recsys_on_the_device_asked_for(tmp_path: Path) -> None:
    specs = _bench_script().jobs(tmp_path, ["ml-1m"], tmp_path, repeats=2, device="cuda")
    u1 = [spec for spec in specs if spec["task"] == "u1"]
    assert [spec["contender"] for spec in u1] == ["recsys-dotbias", "fastai", "surprise-svd"] * 2
    # fastai picks its own device and Surprise has none to pick.
    assert [spec.get("device") for spec in u1] == ["cuda", None, None] * 2
    throughput = [spec for spec in specs if spec["task"] == "throughput"]
    assert len(throughput) == 4 and all(spec["device"] == "cuda" for spec in throughput)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_bench_without_cuda_refuses_device_cuda_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "scripts/bench.py", "--device", "cuda", "--out", str(tmp_path / "bench")],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --device cuda: no CUDA device is available here; use --device cpu"
    ]
    assert not (tmp_path / "bench").exists()
