"""The benchmark's bookkeeping (its timings are measured by scripts/bench.py, never asserted here)."""

import importlib.util
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import benchmark
import numpy as np
import pandas as pd
import pytest
import torch
from benchmark import (
    SHAPES,
    busy_processes,
    call_in_subprocess,
    contention_table,
    fold_table,
    measured,
    median_runs,
    ratio_table,
    synthetic_shape,
)
from conftest import ROOT, run_cli

from recsys.commands.common import run
from recsys.data.dataset import RatingsDataset
from recsys.data.encoding import RatingTensors
from recsys.data.synthetic import SyntheticConfig, make_synthetic
from recsys.evaluation.ranking import RankingTask, evaluate_ranking, ranking_task, top_lists
from recsys.evaluation.scorers import constant_scorer
from recsys.models.registry import COMPILED_DEFAULTS
from recsys.workflows.report import markdown_table


def test_ratio_table_divides_by_the_reference() -> None:
    rows = [
        {"contender": "recsys-dotbias", "seconds": 0.5, "wall_seconds": 4.0},
        {"contender": "fastai", "seconds": 20.0, "wall_seconds": 30.0},
    ]
    table = ratio_table(rows, "recsys-dotbias").set_index("contender")
    assert table.at["fastai", "seconds_ratio"] == pytest.approx(40.0)
    assert table.at["fastai", "wall_ratio"] == pytest.approx(7.5)
    assert table.at["recsys-dotbias", "seconds_ratio"] == 1.0


def test_ratio_table_divides_by_the_quiet_reference_run() -> None:
    rows = [
        {"contender": "recsys-dotbias", "contended": "yes", "seconds": 1.0, "wall_seconds": 8.0},
        {"contender": "recsys-dotbias", "contended": "no", "seconds": 0.5, "wall_seconds": 4.0},
        {"contender": "libmf", "contended": "no", "seconds": 0.25, "wall_seconds": 6.0},
    ]
    table = ratio_table(rows, "recsys-dotbias").set_index(["contender", "contended"])
    assert table.at[("libmf", "no"), "seconds_ratio"] == pytest.approx(0.5)
    assert table.at[("recsys-dotbias", "yes"), "seconds_ratio"] == pytest.approx(2.0)
    assert table.at[("libmf", "no"), "wall_ratio"] == pytest.approx(1.5)


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


def test_median_runs_keeps_contended_runs_apart_with_their_cpu_seconds() -> None:
    rows = [
        {"contender": "libmf", "contended": mark, "seconds": s, "cpu_seconds": c, "wall_seconds": 5.0}
        for mark, s, c in (("no", 0.2, 0.4), ("no", 0.4, 0.8), ("no", 0.3, 0.6), ("yes", 0.9, 0.5))
    ]
    table = median_runs(rows).set_index(["contender", "contended"])
    assert table.at[("libmf", "no"), "cpu_seconds"] == pytest.approx(0.6)
    assert table.at[("libmf", "no"), "runs"] == 3
    assert table.at[("libmf", "yes"), "seconds"] == pytest.approx(0.9)
    assert table.at[("libmf", "yes"), "runs"] == 1


def test_fold_table_gives_each_contender_its_mean_and_sample_spread_over_the_folds() -> None:
    rows = [
        {"contender": "libmf", "fold": f"u{k}", "contended": "no", "rmse": r, "seconds": s,
         "cpu_seconds": 2 * s}
        for k, (r, s) in enumerate(((0.90, 1.0), (0.92, 2.0), (0.94, 6.0)), start=1)
    ] + [
        {"contender": "fastai", "fold": "u1", "contended": "no", "rmse": 0.95, "seconds": 20.0,
         "cpu_seconds": 30.0}
    ]  # fmt: skip
    table = fold_table(rows).set_index("contender")
    assert table.index.tolist() == ["libmf", "fastai"]
    assert table.at["libmf", "rmse_mean"] == pytest.approx(0.92)
    assert table.at["libmf", "rmse_sd"] == pytest.approx(0.02)  # ddof=1; ddof=0 would give 0.0163
    assert (table.at["libmf", "seconds"], table.at["libmf", "cpu_seconds"]) == (3.0, 6.0)
    assert table["folds"].tolist() == [3, 1]
    # One fold has no spread to give.
    assert pd.isna(table.at["fastai", "rmse_sd"])
    assert "rmse" not in table and "fold" not in table


def test_contention_table_gives_contended_over_quiet_for_each_measurement() -> None:
    rows = [
        {"contender": "recsys-dotbias", "contended": "no", "seconds": s, "cpu_seconds": 2 * s}
        for s in (1.0, 3.0, 2.0)
    ] + [
        {"contender": "recsys-dotbias", "contended": "yes", "seconds": 5.0, "cpu_seconds": 3.0},
        {"contender": "fastai", "contended": "no", "seconds": 20.0, "cpu_seconds": 30.0},
    ]
    table = contention_table(rows, ["contender"])
    # fastai never ran contended: nothing to compare.
    assert table["contender"].tolist() == ["recsys-dotbias"]
    row = table.iloc[0]
    assert (row["seconds_quiet"], row["seconds_contended"]) == (2.0, 5.0)
    assert row["ratio"] == pytest.approx(2.5)
    assert (row["cpu_seconds_quiet"], row["cpu_seconds_contended"]) == (4.0, 3.0)


def test_contention_table_is_empty_without_contended_rows() -> None:
    rows = [{"contender": "libmf", "contended": "no", "seconds": 1.0, "cpu_seconds": 1.0}]
    assert contention_table(rows, ["contender"]).empty


def test_measured_counts_the_cpu_of_a_child_it_waited_for() -> None:
    spin = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.3: pass"
    with measured() as clocks:
        subprocess.run([sys.executable, "-c", spin], check=True)
    # This process only waited: the CPU time is the child's.
    assert clocks.cpu_seconds >= 0.3
    assert clocks.seconds >= 0.3


# The spawned child imports this harness, and with it torch: slow.
@pytest.mark.slow
def test_call_in_subprocess_reports_the_childs_error() -> None:
    with pytest.raises(RuntimeError, match="sqrt failed in its subprocess: ValueError: math domain error"):
        call_in_subprocess(math.sqrt, -1.0, timeout=60)


@pytest.mark.slow
def test_call_in_subprocess_kills_a_hung_call_at_its_timeout() -> None:
    start = time.perf_counter()
    with pytest.raises(TimeoutError, match="sleep still running after 1 s"):
        call_in_subprocess(time.sleep, 600, timeout=1)
    assert time.perf_counter() - start < 30
    assert multiprocessing.active_children() == []


def test_busy_processes_spin_in_the_block_and_are_killed_on_error() -> None:
    with pytest.raises(KeyError), busy_processes(2) as processes:
        assert len(processes) == 2
        assert all(process.poll() is None for process in processes)
        raise KeyError("a measurement failed")
    assert all(process.returncode is not None for process in processes)


def _bench_script() -> ModuleType:
    path = ROOT / "scripts" / "bench.py"
    spec = importlib.util.spec_from_file_location("bench_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_u1_contenders_take_turns_and_recsys_trains_on_the_device_asked_for(tmp_path: Path) -> None:
    specs = _bench_script().jobs(tmp_path, ["ml-1m"], tmp_path, repeats=2, device="cuda", contended=False)
    u1 = [spec for spec in specs if spec["task"] == "u1"]
    contenders = [
        "recsys-dotbias",
        "recsys-dotbias-autograd",
        "recsys-embproj",
        "recsys-bpmf",
        "fastai",
        "surprise-svd",
        "cornac-mf",
        "cornac-mf-tuned",
        "libmf",
        "libmf-tuned",
    ]
    assert [spec["contender"] for spec in u1] == contenders * 2
    # fastai picks its own device and the others have none to pick.
    assert [spec.get("device") for spec in u1] == (["cuda"] * 4 + [None] * 6) * 2
    recsys = [spec for spec in specs if spec["task"] == "throughput" and "model" in spec]
    assert len(recsys) == 4 and all(spec["device"] == "cuda" for spec in recsys)
    # Threads are the compiled engine's, which trains on the CPU only.
    assert not any("threads" in spec for spec in recsys)
    assert not any(spec.get("contended") for spec in specs)


def test_bench_times_the_peers_epochs_and_recsys_threads_at_ml10m(tmp_path: Path) -> None:
    specs = _bench_script().jobs(None, ["ml-10m"], tmp_path, repeats=1, contended=False)
    peers = [
        (s["contender"], s["iterations"]) for s in specs if s["task"] == "throughput" and "contender" in s
    ]
    assert peers == [("libmf-tuned", 1), ("libmf-tuned", 5), ("cornac-mf-tuned", 1), ("cornac-mf-tuned", 5)]
    threaded = [spec for spec in specs if "threads" in spec]
    assert [(spec["model"], spec["threads"]) for spec in threaded] == [("dotbias", 1), ("dotbias", 2)]
    # Threads act on the compiled engine only, which LARGE_AUTOGRAD's sparse tables and batch size turn off.
    assert not any("sparse" in spec or "batch_size" in spec for spec in threaded)
    assert sum(spec.get("sparse", False) for spec in specs) == 5  # 3 models, alone and under torchrun


@pytest.mark.parametrize(("device", "processes", "sparse"), [("cpu", 2, True), ("cuda", 3, False)])
def test_bench_runs_dotbias_alone_and_under_torchrun_at_ml10m(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str, processes: int, sparse: bool
) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    script = _bench_script()
    specs = script.jobs(None, ["ml-1m", "ml-10m"], tmp_path, repeats=1, device=device, contended=False)
    launched = [spec for spec in specs if "processes" in spec and spec["task"] == "throughput"]
    assert [(spec["shape"], spec["model"], spec["processes"]) for spec in launched] == [
        ("ml-10m", "dotbias", processes)
    ]
    # On 3 GPUs the device engine's task also runs every GPU under torchrun, at each shape.
    shared = [spec for spec in specs if "processes" in spec and spec["task"] == "device-engine"]
    assert [(spec["shape"], spec["processes"]) for spec in shared] == (
        [("ml-1m", 3), ("ml-10m", 3)] if device == "cuda" else []
    )
    alone = {key: value for key, value in launched[0].items() if key != "processes"}
    assert alone in specs  # the same run in one plain process, to compare with
    # nccl all-reduces no sparse gradients: dense on CUDA, the documented sparse setting on the CPU.
    assert alone["sparse"] is sparse and alone["batch_size"] == 4096 and alone["device"] == device
    command = script.worker_command(launched[0])
    assert command[1:5] == ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    assert script.worker_command(alone)[1:3] == [script.__file__, "--worker"]


@pytest.mark.slow
def test_bench_under_torchrun_reports_rank_zeros_epoch_once(tmp_path: Path) -> None:
    path = tmp_path / "small.pt"
    x = torch.stack([torch.arange(400) % 40, torch.arange(400) % 25], dim=1)
    torch.save({"x": x, "y": (x[:, 0] % 5 + 1).float()}, path)
    spec = {"task": "throughput", "shape": "small", "tensors": str(path), "device": "cpu", "model": "dotbias"}
    settings = {"sparse": True, "batch_size": 64, "processes": 2}
    result = _bench_script().run_worker({**spec, **settings}, None)
    assert "error" not in result, result
    assert result["processes"] == 2 and result["engine"] == "autograd" and result["sparse"] is True
    assert result["ratings"] == 400 and result["final_valid_rmse"] > 0


def test_bench_marks_the_few_contended_jobs_and_runs_them_last(tmp_path: Path) -> None:
    specs = _bench_script().jobs(tmp_path, ["ml-1m", "ml-10m"], tmp_path, repeats=2)
    marked = [spec for spec in specs if spec.get("contended")]
    assert specs[-len(marked) :] == marked
    # dotbias on its compiled engine, and embproj, which the autograd engine alone trains.
    assert [spec["contender"] for spec in marked if spec["task"] == "u1"] == [
        "recsys-dotbias",
        "recsys-embproj",
    ] * 2
    epochs = [spec for spec in marked if spec["task"] == "throughput"]
    assert all(spec["shape"] == "ml-10m" for spec in epochs)
    assert [(spec.get("model"), spec.get("contender"), spec.get("iterations")) for spec in epochs] == [
        ("dotbias", None, None),
        (None, "libmf-tuned", 1),
        (None, "cornac-mf-tuned", 1),
    ]
    assert epochs[0]["threads"] == 2 and "sparse" not in epochs[0]


def test_bench_contends_at_the_first_shape_without_ml10m(tmp_path: Path) -> None:
    specs = _bench_script().jobs(None, ["ml-1m"], tmp_path, repeats=1)
    assert {spec["shape"] for spec in specs if spec.get("contended")} == {"ml-1m"}


def test_bench_folds_run_each_contender_once_on_each_fold_in_turns(tmp_path: Path) -> None:
    script = _bench_script()
    specs = script.jobs(tmp_path, ["ml-1m"], tmp_path, repeats=3, device="cuda", tasks=["folds"])
    assert {spec["task"] for spec in specs} == {"folds"}
    contenders = [*script.U1_CONTENDERS, "recsys-svdpp", "surprise-svdpp"]
    assert [(spec["fold"], spec["contender"]) for spec in specs] == [
        (fold, name) for fold in ("u1", "u2", "u3", "u4", "u5") for name in contenders
    ]
    recsys = [spec for spec in specs if spec["contender"].startswith("recsys")]
    assert len(recsys) == 25 and all(spec["device"] == "cuda" for spec in recsys)
    assert not any("device" in spec for spec in specs if not spec["contender"].startswith("recsys"))


def test_bench_tasks_bring_the_tasks_they_need_and_their_contended_rows_only(tmp_path: Path) -> None:
    script = _bench_script()
    specs = script.jobs(tmp_path, ["ml-10m"], tmp_path, repeats=1, file_shape="ml-1m", tasks=["convergence"])
    assert [spec["task"] for spec in specs] == ["generate", "convergence", "convergence"]
    specs = script.jobs(tmp_path, ["ml-10m"], tmp_path, repeats=1, file_shape="ml-1m", tasks=["file-load"])
    assert [spec["task"] for spec in specs] == ["write-file", *["file-load"] * len(benchmark.FILE_READERS)]
    specs = script.jobs(tmp_path, ["ml-10m"], tmp_path, repeats=2, tasks=["u1"])
    assert [spec["contender"] for spec in specs if spec.get("contended")] == [
        "recsys-dotbias",
        "recsys-embproj",
    ] * 2
    assert {spec["task"] for spec in specs} == {"u1"}
    # Without the data, the tasks that need it have nothing to run.
    assert script.jobs(None, ["ml-10m"], tmp_path, repeats=1, tasks=["folds", "load"]) == []


def test_bench_ml100k_passes_the_fold_to_every_contender(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    def recorder(name: str) -> Any:
        def measure(folder: Path, *args: Any, **kwargs: Any) -> dict[str, Any]:
            calls.append((name, {"args": args, **kwargs}))
            return {"rmse": 0.9}

        return measure

    for name in ("bench_recsys", "bench_fastai", "bench_surprise", "bench_cornac", "bench_libmf"):
        monkeypatch.setattr(benchmark, name, recorder(name))
    script = _bench_script()
    for contender in script.FOLD_CONTENDERS:
        assert script.bench_ml100k(tmp_path, contender, fold="u3") == {"rmse": 0.9}
    assert all(kwargs["fold"] == "u3" for _, kwargs in calls)
    recsys = [kwargs for name, kwargs in calls if name == "bench_recsys"]
    assert [(kwargs.get("model"), kwargs.get("engine")) for kwargs in recsys] == [
        (None, None),
        (None, "autograd"),
        ("embproj", None),
        ("bpmf", None),
        ("svdpp", None),
    ]
    peers = [(name, kwargs["args"]) for name, kwargs in calls if name != "bench_recsys"]
    assert peers == [
        ("bench_fastai", ()),
        ("bench_surprise", ("surprise-svd",)),
        ("bench_cornac", ("cornac-mf",)),
        ("bench_cornac", ("cornac-mf-tuned",)),
        ("bench_libmf", ("libmf",)),
        ("bench_libmf", ("libmf-tuned",)),
        ("bench_surprise", ("surprise-svdpp",)),
    ]


def test_bench_tables_list_failures_apart_and_keep_the_rest() -> None:
    threaded: dict[str, Any] = {"task": "throughput", "shape": "ml-10m", "model": "dotbias", "threads": 2}
    specs = [{"task": "u1", "contender": "recsys-dotbias"}, {"task": "u1", "contender": "libmf"}, threaded]
    results = [
        {"contender": "recsys-dotbias", "contended": "no", "rmse": 0.92, "seconds": 0.2,
         "cpu_seconds": 0.3, "wall_seconds": 4.0},
        {"contender": "libmf", "contended": "no", "rmse": 0.91, "seconds": 0.1, "cpu_seconds": 0.2,
         "threads": 2, "iterations": 20, "wall_seconds": 9.0},
        {**threaded, "tensors": "x.pt", "contended": "no", "wall_seconds": 5.0,
         "error": "TypeError: fit() got an unexpected keyword 'threads'"},
    ]  # fmt: skip
    tables = _bench_script().tables(specs, results)
    assert set(tables) == {"u1", "errors"}
    assert tables["u1"].set_index("contender").at["libmf", "seconds_ratio"] == pytest.approx(0.5)
    errors = tables["errors"]
    assert errors[["task", "threads"]].values.tolist() == [["throughput", 2]]
    assert "tensors" not in errors


def test_bench_tables_give_the_folds_their_own_table() -> None:
    specs = [{"task": "folds", "contender": "libmf", "fold": fold} for fold in ("u1", "u2")]
    results = [
        {"contender": "libmf", "fold": fold, "contended": "no", "rmse": r, "seconds": 0.1,
         "cpu_seconds": 0.2, "wall_seconds": 3.0}
        for fold, r in (("u1", 0.91), ("u2", 0.93))
    ]  # fmt: skip
    found = _bench_script().tables(specs, results)
    assert set(found) == {"folds"}
    assert found["folds"]["rmse_mean"].tolist() == [pytest.approx(0.92)]


def test_readable_puts_key_columns_first_and_prints_counts_whole() -> None:
    table = pd.DataFrame({"seconds": [1.5, 2.5], "threads": [2.0, float("nan")], "contender": ["a", "b"]})
    shown = _bench_script().readable(table)
    assert shown.columns.tolist() == ["contender", "threads", "seconds"]
    assert shown["threads"].iloc[0] == 2 and isinstance(shown["threads"].iloc[0], int)
    assert pd.isna(shown["threads"].iloc[1])
    # A count no row has (threads on a GPU) prints blank, as a missing one does, not "None".
    alone = pd.DataFrame({"contender": ["a", "b"], "threads": [None, None], "processes": [1, float("nan")]})
    assert markdown_table(_bench_script().readable(alone)).splitlines()[2:] == ["| a |  | 1 |", "| b |  |  |"]


def test_bench_throughput_passes_threads_to_fit_only_when_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "small.pt"
    torch.save({"x": torch.tensor([[0, 0], [1, 1], [1, 0]]), "y": torch.tensor([1.0, 5.0, 3.0])}, path)
    calls: list[dict[str, Any]] = []

    def fake_fit(*args: Any, **kwargs: Any) -> list[SimpleNamespace]:
        calls.append(kwargs)
        return [SimpleNamespace(valid_rmse=0.5, seconds=0.1)]

    monkeypatch.setattr(benchmark, "fit", fake_fit)
    assert benchmark.bench_throughput("small", "dotbias", path)["threads"] is None
    assert benchmark.bench_throughput("small", "dotbias", path, threads=1)["threads"] == 1
    assert ["threads" in kwargs for kwargs in calls] == [False, True]
    assert calls[1]["threads"] == 1


@pytest.fixture
def user_effect(tmp_path: Path) -> Path:
    """Saved tensors as `generate_shape` writes them: 30 users x 20 items, every rating 1 for an even
    user and 5 for an odd one, so that predictions for misread pairs are far off."""
    users, items = torch.meshgrid(torch.arange(30), torch.arange(20), indexing="ij")
    x = torch.stack([users.flatten(), items.flatten()], dim=1)
    path = tmp_path / "user-effect.pt"
    torch.save({"x": x, "y": torch.where(x[:, 0] % 2 == 0, 1.0, 5.0)}, path)
    return path


@pytest.mark.slow  # a spawned child that imports torch
def test_libmf_fits_in_a_child_and_predicts_the_pairs_asked_for(user_effect: Path) -> None:
    pytest.importorskip("libmf")
    # One thread: on data this small (most of its 26x26 blocks empty) LIBMF's two-thread scheduler
    # deadlocks within a few fits; the bench's real data has not.
    result = call_in_subprocess(
        benchmark.libmf_fit_predict,
        partial(benchmark.load_shape, user_effect),
        {"nr_threads": 1},
        timeout=120,
    )
    assert result["rmse"] < 0.5
    assert (result["threads"], result["iterations"], result["ratings"]) == (1, 20, 600)


def test_cornac_epochs_predict_the_pairs_asked_for(user_effect: Path) -> None:
    pytest.importorskip("cornac")
    row = benchmark.bench_peer_throughput("small", "cornac-mf", user_effect, iterations=50)
    assert row["final_valid_rmse"] < 0.5
    assert (row["threads"], row["iterations"]) == (1, 50)


@pytest.mark.slow
@pytest.mark.parametrize("contender", ["cornac-mf-tuned", "libmf-tuned"])
def test_tuned_peers_beat_their_defaults_on_u1(ml100k_folder: Path, contender: str) -> None:
    pytest.importorskip(contender.split("-")[0])
    measure = benchmark.bench_libmf if contender.startswith("libmf") else benchmark.bench_cornac
    default, tuned = (measure(ml100k_folder, name) for name in (contender.removesuffix("-tuned"), contender))
    assert tuned["rmse"] < 0.93 < default["rmse"]
    assert tuned["cpu_seconds"] > 0


@pytest.mark.slow
def test_each_fold_gives_the_peers_and_recsys_the_same_test_ratings(ml100k_folder: Path) -> None:
    test_sizes = []
    for fold in ("u1", "u3"):
        train, test = benchmark._fold(ml100k_folder, fold)
        tensors = benchmark.fold_tensors(ml100k_folder, fold)
        assert (len(train), len(test)) == (len(tensors[0]), len(tensors[1]))
        assert test["rating"].sum() == pytest.approx(float(tensors[1].y.sum()))
        test_sizes.append(len(test))
    assert benchmark._fold(ml100k_folder)[1].equals(benchmark._fold(ml100k_folder, "u1")[1])
    assert test_sizes[0] != test_sizes[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
@pytest.mark.parametrize(
    "in_process", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["in-process", "subprocess"]
)
def test_bench_without_cuda_refuses_device_cuda_in_one_line(tmp_path: Path, in_process: bool) -> None:
    args = ["--device", "cuda", "--out", str(tmp_path / "bench")]
    if in_process:  # as scripts/bench.py runs its main
        script = _bench_script()
        result: Any = run_cli(lambda: run(script.main), "bench.py", args, tmp_path / "cache")
    else:
        result = subprocess.run(
            [sys.executable, "scripts/bench.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --device cuda: no CUDA device is available here; use --device cpu"
    ]
    assert not (tmp_path / "bench").exists()


def test_bench_tasks_that_all_need_ml100k_refuse_to_run_without_it(tmp_path: Path) -> None:
    args = ["--tasks", "folds", "load", "--out", str(tmp_path / "bench")]
    result = run_cli(lambda: run(_bench_script().main), "bench.py", args, tmp_path / "cache")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --tasks folds load: ML-100K not found (--data-dir or $RECSYS_DATA)"
    ]
    assert not (tmp_path / "bench").exists()


def test_bench_device_engine_task_sets_the_gpu_beside_the_compiled_engine_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _bench_script()
    monkeypatch.setattr(script.torch.cuda, "device_count", lambda: 1)
    specs = script.jobs(
        tmp_path, ["ml-10m", "ml-25m"], tmp_path, repeats=2, device="cuda", tasks=["device-engine"]
    )
    shaped = [spec for spec in specs if spec["task"] == "device-engine" and "shape" in spec]
    contenders = (("compiled", "cpu", False), ("device", "cuda", False), ("device", "cuda", True))
    assert [(spec["shape"], spec["engine"], spec["device"], spec["kernels"]) for spec in shaped] == [
        (shape, *contender) for shape in ("ml-10m", "ml-25m") for contender in contenders
    ]
    u1 = [(spec["engine"], spec["device"], spec["kernels"]) for spec in specs if spec.get("part") == "u1"]
    assert u1 == list(contenders) * 2
    assert {spec["task"] for spec in specs} == {"generate", "device-engine"}
    # On the CPU (a dry run of the script) no Triton kernels: they run on a GPU only.
    on_cpu = script.jobs(tmp_path, [], tmp_path, repeats=1, device="cpu", tasks=["device-engine"])
    assert [spec["kernels"] for spec in on_cpu] == [False, False]
    assert not any("processes" in spec for spec in specs)  # one GPU: no torchrun row


def test_bench_device_engine_task_runs_every_gpu_under_torchrun_where_there_are_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _bench_script()
    monkeypatch.setattr(script.torch.cuda, "device_count", lambda: 4)
    specs = script.jobs(tmp_path, ["ml-25m"], tmp_path, repeats=1, device="cuda", tasks=["device-engine"])
    shared = [spec for spec in specs if "processes" in spec]
    assert [(spec["shape"], spec["engine"], spec["kernels"], spec["processes"]) for spec in shared] == [
        ("ml-25m", "device", True, 4)
    ]
    assert script.worker_command(shared[0])[1:5] == [
        "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"
    ]  # fmt: skip
    assert script.device_engine_processes("cpu") is None


def test_time_to_reach_finds_when_each_engine_matched_the_reference() -> None:
    rows = [
        {"shape": "s", "engine": "autograd", "seconds": 10.0, "cpu_seconds": 12.0,
         "valid_rmse": [0.9, 0.8, 0.7], "elapsed": [4.0, 7.0, 10.0]},
        {"shape": "s", "engine": "compiled", "seconds": 3.0, "cpu_seconds": 5.0,
         "valid_rmse": [0.75, 0.69, 0.65], "elapsed": [1.0, 2.0, 3.0]},
        {"shape": "s", "engine": "never", "seconds": 3.0, "cpu_seconds": 5.0,
         "valid_rmse": [0.8, 0.71], "elapsed": [1.0, 2.0]},
    ]  # fmt: skip
    table = benchmark.time_to_reach(rows, "autograd").set_index("engine")
    assert table.at["autograd", "seconds_to_autograd_final"] == 10.0
    assert table.at["compiled", "seconds_to_autograd_final"] == 2.0
    assert table.at["compiled", "ratio"] == pytest.approx(0.2)
    assert pd.isna(table.at["never", "seconds_to_autograd_final"])
    assert table.at["compiled", "final_valid_rmse"] == 0.65


def test_bench_measures_time_to_accuracy_at_the_ml_10m_shape_only(tmp_path: Path) -> None:
    script = _bench_script()
    specs = script.jobs(None, ["ml-1m", "ml-10m"], tmp_path, repeats=1, contended=False)
    convergence = [spec for spec in specs if spec["task"] == "convergence"]
    assert [(spec["shape"], spec["engine"]) for spec in convergence] == [
        ("ml-10m", "autograd"),
        ("ml-10m", "compiled"),
    ]
    threads = [spec for spec in specs if spec.get("threads")]
    assert {spec["threads"] for spec in threads} == {1, 2}
    assert all(spec["epochs"] == script.THREAD_EPOCHS for spec in threads)


def test_bench_file_readers_take_turns_after_the_file_is_written(tmp_path: Path) -> None:
    specs = _bench_script().jobs(None, [], tmp_path, repeats=2, contended=False, file_shape="ml-1m")
    assert specs[0] == {"task": "write-file", "shape": "ml-1m", "folder": str(tmp_path / "ml-1m-files")}
    readers = [spec["reader"] for spec in specs[1:]]
    assert readers == list(benchmark.FILE_READERS) * 2
    assert all(spec["folder"] == specs[0]["folder"] for spec in specs[1:])


@pytest.mark.parametrize("reader", ["recsys-csv", "recsys-parquet", "pandas-pyarrow-csv", "polars-parquet"])
def test_file_load_reads_every_row_of_the_written_files(
    reader: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(SHAPES, "small", (50, 80, 1_000))
    written = benchmark.write_ratings_files("small", tmp_path)
    assert written["ratings"] == 1_000
    result = benchmark.bench_file_load(reader, tmp_path)
    assert result["rows"] == 1_000 and result["reader"] == reader
    assert result["table_mb"] > 0 and math.isfinite(result["peak_over_table"])


def test_lenskit_contenders_run_only_where_an_interpreter_with_it_is_named(tmp_path: Path) -> None:
    script = _bench_script()
    without = script.jobs(tmp_path, [], tmp_path, repeats=1, tasks=["u1", "folds"])
    assert not any(spec["contender"].startswith("lenskit") for spec in without)
    specs = script.jobs(tmp_path, [], tmp_path, repeats=1, tasks=["u1", "folds"], lenskit_python="/lk/python")
    lenskit = [spec for spec in specs if spec["contender"] in benchmark.LENSKIT]
    assert len(lenskit) == len(benchmark.LENSKIT) * (1 + 5)  # u1 once, and each fold
    assert all(spec["python"] == "/lk/python" and "device" not in spec for spec in lenskit)


def test_bench_lenskit_runs_the_peer_script_on_the_folds_ratings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fold's training and test ratings go to lenskit_peer.py as CSV files, its JSON line comes
    back; a failing peer is an error naming it."""
    train = pd.DataFrame({"user": [1, 2], "item": [10, 20], "rating": [4.0, 3.0], "timestamp": [0, 0]})
    monkeypatch.setattr(benchmark, "_fold", lambda folder, fold: (train, train.iloc[:1]))
    seen: dict[str, Any] = {}

    def run(command: list[str], **kwargs: Any) -> Any:
        seen["command"] = command
        seen["train"] = pd.read_csv(command[-2])
        return subprocess.CompletedProcess(command, 0, stdout='{"rmse": 0.91, "seconds": 1.0}\n', stderr="")

    monkeypatch.setattr(benchmark.subprocess, "run", run)
    assert benchmark.bench_lenskit(tmp_path, "lenskit-als-tuned", "/lk/python", fold="u2") == {
        "rmse": 0.91,
        "seconds": 1.0,
    }
    python, peer, algorithm, settings = seen["command"][:4]
    assert (python, Path(peer).name, algorithm) == ("/lk/python", "lenskit_peer.py", "als")
    assert json.loads(settings) == benchmark.LENSKIT["lenskit-als-tuned"][1]
    assert seen["train"].columns.tolist() == ["user", "item", "rating"] and len(seen["train"]) == 2
    monkeypatch.setattr(
        benchmark.subprocess,
        "run",
        lambda command, **kwargs: subprocess.CompletedProcess(
            command, 1, stdout="", stderr="ImportError: lenskit"
        ),
    )
    with pytest.raises(RuntimeError, match=r"lenskit_peer\.py als failed .*ImportError: lenskit"):
        benchmark.bench_lenskit(tmp_path, "lenskit-als", "/lk/python")


@pytest.mark.slow
def test_lenskit_peer_scores_u1_where_lenskit_is_installed(ml100k_folder: Path) -> None:
    python = os.environ.get("RECSYS_LENSKIT_PYTHON")
    if not python:
        pytest.skip("no interpreter with LensKit: set RECSYS_LENSKIT_PYTHON (docs/benchmarks.md)")
    result = benchmark.bench_lenskit(ml100k_folder, "lenskit-als", python)
    assert 0.85 < result["rmse"] < 1.0 and result["seconds"] > 0


def test_bench_baseline_takes_its_turn_in_every_u1_round_only(tmp_path: Path) -> None:
    script = _bench_script()
    before = tmp_path / "before"
    specs = script.jobs(tmp_path, [], tmp_path, repeats=2, tasks=["u1", "folds"], baseline=before)
    baseline = [spec for spec in specs if spec.get("contender") == script.BASELINE]
    assert [spec["task"] for spec in baseline] == ["u1", "u1"]
    assert all(spec["checkout"] == str(before) for spec in baseline)
    rounds = [spec["contender"] for spec in specs if spec["task"] == "u1" and not spec.get("contended")]
    assert rounds == [*script.U1_CONTENDERS, script.BASELINE] * 2


def test_bench_baseline_runs_the_checkouts_own_worker_on_its_own_recsys(tmp_path: Path) -> None:
    checkout = tmp_path / "before"
    (checkout / "scripts").mkdir(parents=True)
    # A stand-in for an older bench.py: says what it was asked, from where, and with which path.
    (checkout / "scripts" / "bench.py").write_text(
        "import json, os, sys\n"
        "spec = json.loads(sys.argv[sys.argv.index('--worker') + 1])\n"
        "print(json.dumps({**spec, 'seconds': 0.2, 'cwd': os.getcwd(), 'path': os.environ['PYTHONPATH'],"
        " 'data': sys.argv[-1]}))\n"
    )
    script = _bench_script()
    spec = {"task": "u1", "contender": script.BASELINE, "device": "cpu", "checkout": str(checkout)}
    result = script.run_worker(spec, tmp_path / "ml-100k")
    assert result["contender"] == script.BASELINE and result["task"] == "u1" and result["seconds"] == 0.2
    assert result["device"] == "cpu"  # trains where the other recsys rows do
    assert result["cwd"] == str(checkout) and result["path"] == str(checkout)
    assert result["data"] == str(tmp_path / "ml-100k") and result["contended"] == "no"


def test_bench_baseline_that_is_no_checkout_is_one_line(tmp_path: Path) -> None:
    args = ["--tasks", "throughput", "--baseline", str(tmp_path), "--out", str(tmp_path / "bench")]
    result = run_cli(lambda: run(_bench_script().main), "bench.py", args, tmp_path / "cache")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --baseline {tmp_path}: not a recsys checkout (no scripts/bench.py in it)"
    ]
    assert not (tmp_path / "bench").exists()


@pytest.mark.parametrize("under", [False, True], ids=["a-file", "under-a-file"])
def test_bench_out_that_cannot_be_a_folder_is_one_line_before_any_measurement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, under: bool
) -> None:
    """Regression: an --out under a file ended the run in a traceback after every measurement had run,
    their results lost."""
    (tmp_path / "file").touch()
    out = tmp_path / "file" / "bench" if under else tmp_path / "file"
    script = _bench_script()
    monkeypatch.setattr(script, "run_all", lambda specs, folder: pytest.fail("measured"))
    args = ["--tasks", "throughput", "--shapes", "ml-1m", "--file-shape", "none", "--out", str(out)]
    result = run_cli(lambda: run(script.main), "bench.py", args, tmp_path / "cache")
    assert result.returncode == 2
    expected = f"--out {out}: cannot create it: Not a directory" if under else f"--out {out} is not a folder"
    assert result.stderr.strip().splitlines() == [f"error: {expected}"]


@pytest.mark.parametrize(
    "args",
    [["--tasks", "throughput", "--shapes"], ["--tasks", "file-load", "--file-shape", "none"]],
    ids=["no-shape", "no-file-shape"],
)
def test_bench_that_would_measure_nothing_is_refused_and_keeps_the_last_report(
    tmp_path: Path, args: list[str]
) -> None:
    """Regression: it ran nothing and wrote an empty bench.md over the last run's."""
    out = tmp_path / "bench"
    out.mkdir()
    (out / "bench.md").write_text("the last run's figures")
    result = run_cli(
        lambda: run(_bench_script().main), "bench.py", [*args, "--out", str(out)], tmp_path / "c"
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --tasks {args[1]}: nothing to measure; their rows run at --shapes, --ltr-shapes or "
        "--file-shape, or on ML-100K, and none of these is given"
    ]
    assert (out / "bench.md").read_text() == "the last run's figures"


def test_bench_passes_a_relative_data_dir_to_every_worker_as_an_absolute_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a --baseline's worker runs in its checkout, where the relative ML-100K folder bench.py
    passed it named another folder (or none)."""
    (tmp_path / "data" / "ml-100k").mkdir(parents=True)
    (tmp_path / "data" / "ml-100k" / "u.data").touch()
    script = _bench_script()
    given: list[Path | None] = []

    def run_all(specs: list[dict[str, Any]], folder: Path | None) -> list[dict[str, Any]]:
        given.append(folder)
        return [{"error": "not run"} for _ in specs]

    monkeypatch.setattr(script, "run_all", run_all)
    monkeypatch.chdir(tmp_path)
    args = ["--data-dir", "data", "--tasks", "u1", "--repeats", "1", "--no-contended", "--out", "bench"]
    assert script.main([*args, "--file-shape", "none"]) == 0
    assert given == [tmp_path / "data" / "ml-100k"]


def test_bench_data_dir_takes_the_ml100k_folder_itself_and_refuses_one_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As train.py's --data-dir: ml-100k/ itself names it too. It had been "not found", and a full run
    went on without its ML-100K rows after a warning, as it does where $RECSYS_DATA holds none."""
    (tmp_path / "ml-100k").mkdir()
    (tmp_path / "ml-100k" / "u.data").touch()
    script = _bench_script()
    assert (
        script.ml100k_folder(tmp_path) == script.ml100k_folder(tmp_path / "ml-100k") == tmp_path / "ml-100k"
    )
    monkeypatch.setattr(script, "run_all", lambda specs, folder: pytest.fail("ran without ML-100K"))
    args = ["--data-dir", str(tmp_path / "elsewhere"), "--no-contended", "--out", str(tmp_path / "bench")]
    result = run_cli(lambda: run(script.main), "bench.py", args, tmp_path / "cache")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --data-dir {tmp_path / 'elsewhere'}: no ML-100K there (no u.data in it or in its ml-100k/)"
    ]
    assert not (tmp_path / "bench").exists()


# --- the ranking task: cornac's agreement, sampled tasks, the synthetic shape ----------------------
#
# 4 users, 6 items, relevant at 4 stars:
#   user  trained on   relevant test items (rating)
#   0     1            0 (5), 3 (4)          4 (2) is not relevant
#   1     0, 2         3 (5), 5 (4)
#   2     0            5 (5)
#   3     0, 1         2 (4.5), 4 (4)
SMALL_TRAIN = RatingTensors(
    torch.tensor([[0, 1], [1, 0], [1, 2], [2, 0], [3, 0], [3, 1]]),
    torch.tensor([3.0, 4.0, 2.0, 5.0, 4.0, 2.0]),
)
SMALL_TEST = RatingTensors(
    torch.tensor([[0, 0], [0, 3], [0, 4], [1, 3], [1, 5], [2, 5], [3, 4], [3, 2]]),
    torch.tensor([5.0, 4.0, 2.0, 5.0, 4.0, 5.0, 4.0, 4.5]),
)
SMALL_SCORES = torch.tensor([6.0, 5.0, 4.0, 3.0, 2.0, 1.0])  # every user ranks 0 > 1 > ... > 5


def _small_task() -> RankingTask:
    return ranking_task(SMALL_TRAIN, SMALL_TEST, 4, 6, 4.0, rating_unit=1.0)


def test_sample_task_judges_the_chosen_users_with_their_own_relevant_items() -> None:
    task = _small_task()
    sampled = benchmark.sample_task(task, torch.tensor([3, 1]))  # positions, in any order
    assert sampled.users.tolist() == [1, 3]
    for position, original in enumerate((1, 3)):
        items, gains = sampled.relevant_of(position)
        assert items.tolist() == task.relevant_of(original)[0].tolist()
        assert gains.tolist() == task.relevant_of(original)[1].tolist()
    assert sampled.rated_items is task.rated_items and sampled.popularity is task.popularity
    scorer = constant_scorer(SMALL_SCORES)
    assert evaluate_ranking(scorer, benchmark.sample_task(task, torch.arange(4))) == evaluate_ranking(
        scorer, task
    )
    # Per-user metrics over two halves average to the whole's.
    halves = [
        evaluate_ranking(scorer, benchmark.sample_task(task, torch.tensor(p))) for p in ([0, 1], [2, 3])
    ]
    whole = evaluate_ranking(scorer, task)
    for key in ("precision@5", "recall@10", "ndcg@5", "map@10", "mrr@5", "ndcg_graded@5"):
        assert (halves[0][key] + halves[1][key]) / 2 == pytest.approx(whole[key])


def test_synthetic_ranking_split_draws_distinct_pairs_of_half_stars() -> None:
    train, test = benchmark.synthetic_ranking_split(30, 40, 300, 50, seed=1)
    assert (len(train), len(test)) == (300, 50)
    pairs = torch.cat([train.x, test.x])
    assert len(torch.unique(pairs[:, 0] * 40 + pairs[:, 1])) == 350  # no pair twice, across both
    assert pairs[:, 0].max() < 30 and pairs[:, 1].max() < 40 and pairs.min() >= 0
    ratings = torch.cat([train.y, test.y])
    assert (
        ratings.min() >= 0.5 and ratings.max() <= 5.0 and torch.equal(ratings * 2, torch.round(ratings * 2))
    )
    again = benchmark.synthetic_ranking_split(30, 40, 300, 50, seed=1)
    assert torch.equal(again[0].x, train.x) and torch.equal(again[1].y, test.y)
    with pytest.raises(ValueError, match="distinct pairs"):
        benchmark.synthetic_ranking_split(3, 4, 10, 3)


def test_cornac_scores_follow_cornacs_definitions_on_lists_worked_by_hand() -> None:
    pytest.importorskip("cornac")
    # User A: 3 candidates (-1 after them), relevant 0 (second) and 7 (not listed); user B: 1 first.
    lists = np.array([[2, 0, 5, -1], [1, 4, 3, 0]])
    found = benchmark.cornac_scores(lists, [np.array([0, 7]), np.array([1])], (1, 3))
    second = 1 / math.log2(3)
    expected = {
        "precision@1": 0.5, "recall@1": 0.5, "ndcg@1": 0.5, "hit_rate@1": 0.5, "mrr@1": 0.5,
        "precision@3": 1 / 3, "recall@3": 0.75, "ndcg@3": (second / (1 + second) + 1) / 2,
        "hit_rate@3": 1.0, "mrr@3": 0.75,
    }  # fmt: skip
    assert found == pytest.approx(expected)


def test_cornac_scores_match_recsys_on_its_own_lists() -> None:
    pytest.importorskip("cornac")
    task, scorer = _small_task(), constant_scorer(SMALL_SCORES)
    relevant = benchmark.relevant_lists(task)
    ours = evaluate_ranking(scorer, task, (1, 2, 4))
    theirs = benchmark.cornac_scores(top_lists(scorer, task, 4), relevant, (1, 2, 4))
    assert theirs == pytest.approx({key: ours[key] for key in theirs}, abs=1e-12)
    full = benchmark.cornac_full_scores(top_lists(scorer, task, 6), relevant)
    ours = evaluate_ranking(scorer, task, (6,))
    assert full == pytest.approx({"mrr": ours["mrr@6"], "map": ours["map@6"]}, abs=1e-12)


def test_cornac_map_from_the_scores_ranks_ties_at_their_worst_place() -> None:
    pytest.importorskip("cornac")
    # Items 0 and 2 tie at the top; recsys' list put the relevant item 0 first.
    scores = np.array([[1.0, 0.0, 1.0, 0.0, 0.0, 0.5]])
    found = benchmark.cornac_full_scores(np.array([[0, 2, 5, -1]]), [np.array([0])], scores)
    assert found == pytest.approx({"mrr": 1.0, "map": 1.0, "map_own_ties": 0.5})


def test_agreement_rows_pair_each_cornac_figure_with_recsys_and_say_how_they_compare() -> None:
    ours = {"precision@5": 0.2, "mrr@5": 0.3, "mrr@9": 0.4, "map@9": 0.1}
    theirs = {
        "precision@5": 0.2,
        "mrr@5": 0.3 + 1e-9,
        "mrr@all": 0.4,
        "map@all": 0.1,
        "map_own_ties@all": 0.05,
    }
    rows = benchmark.agreement_rows("popular", ours, theirs, "9")
    assert [(row["metric"], row["k"], row["compared"]) for row in rows] == [
        ("precision", "5", "exact"),
        ("mrr", "5", "cut at k"),
        ("mrr", "all", "exact"),
        ("map", "all", "exact"),
        ("map_own_ties", "all", "ties differ"),
    ]
    assert [row["recsys"] for row in rows] == [0.2, 0.3, 0.4, 0.1, 0.1]
    assert rows[1]["difference"] == pytest.approx(1e-9) and rows[4]["difference"] == pytest.approx(0.05)
    assert all(row["scorer"] == "popular" for row in rows)


def test_independent_top_masks_what_each_user_rated_and_same_lists_allows_any_order_of_ties() -> None:
    scores = np.array([[3.0, 1.0, 3.0, 2.0], [1.0, 2.0, 2.0, 0.0], [0.0, 5.0, 0.0, 0.0]])
    rated = [np.array([0]), np.array([], dtype=np.int64), np.array([0, 2, 3])]
    found = benchmark.independent_top(scores, rated, 2)
    assert found.tolist() == [[2, 3], [1, 2], [1, -1]]
    assert benchmark.same_lists(scores, np.array([[2, 3], [2, 1], [1, -1]]), found)  # 1 and 2 tie
    assert not benchmark.same_lists(scores, np.array([[2, 3], [1, 0], [1, -1]]), found)
    assert not benchmark.same_lists(scores, np.array([[2, 3], [1, 2], [1, 0]]), found)


def test_relevant_by_sets_finds_what_ranking_task_finds() -> None:
    task = _small_task()
    data = SimpleNamespace(train=SMALL_TRAIN, test=SMALL_TEST)
    found = benchmark.relevant_by_sets(data, 4.0)  # type: ignore[arg-type]
    assert list(found) == task.users.tolist() == [0, 1, 2, 3]
    assert [items.tolist() for items in found.values()] == [
        r.tolist() for r in benchmark.relevant_lists(task)
    ]


def test_bench_ranking_runs_the_u1_parts_only_with_ml100k_and_scales_at_each_shape(tmp_path: Path) -> None:
    script = _bench_script()
    specs = script.jobs(tmp_path, ["ml-1m", "ml-25m"], tmp_path, repeats=2, tasks=["ranking"])
    assert [(spec["part"], spec.get("model"), spec.get("shape")) for spec in specs] == [
        ("agreement", None, None),
        *[("speed", model, None) for model in ("dot", "dotbias", "svdpp", "bpmf", "linear", "embproj")],
        ("scale", None, "ml-1m"),
        ("scale", None, "ml-25m"),
    ]
    assert all(spec["task"] == "ranking" and not spec.get("contended") for spec in specs)
    assert all(spec["sample"] == 10_000 for spec in specs if spec["part"] == "scale")
    specs = script.jobs(None, ["ml-25m"], tmp_path, repeats=1, tasks=["ranking"])
    assert [spec["part"] for spec in specs] == ["scale"]


def test_bench_tables_give_the_ranking_task_its_tables() -> None:
    specs = [{"task": "ranking", "part": part} for part in ("agreement", "speed", "speed", "scale")]
    row = {"scorer": "dotbias", "metric": "ndcg", "k": "5", "recsys": 0.2, "cornac": 0.2, "difference": 0.0}
    results = [
        {"part": "agreement", "users": 456, "max_difference": 0.0, "agree": True, "rows": [row, row]},
        {"part": "speed", "model": "dot", "seconds": 0.2, "cpu_seconds": 0.3},
        {"part": "speed", "model": "bpmf", "seconds": 0.4, "cpu_seconds": 0.5},
        {"part": "scale", "shape": "ml-25m", "users": 10_000, "seconds": 20.0, "peak_added_mb": 180.0},
    ]
    found = _bench_script().tables(specs, results)
    assert list(found) == ["ranking-agreement", "ranking-checks", "ranking-speed", "ranking-scale"]
    assert len(found["ranking-agreement"]) == 2
    assert "rows" not in found["ranking-checks"] and "part" not in found["ranking-checks"]
    assert found["ranking-checks"]["agree"].tolist() == [True]
    assert found["ranking-speed"]["model"].tolist() == ["dot", "bpmf"]


def test_bench_ranking_scale_ranks_a_sample_of_the_judged_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SHAPES, "small", (40, 50, 1_200))
    spec = {"task": "ranking", "part": "scale", "shape": "small", "sample": 20}
    result = _bench_script().worker(spec, None)
    assert result is not None
    assert (result["shape"], result["items"], result["training_ratings"]) == ("small", 50, 1_200)
    assert result["judged_users"] > 20 and result["users"] == 20 and result["runs"] == 3
    assert result["block_users"] == benchmark.BLOCK_ENTRIES // 50
    for key in ("peak_added_mb", "peak_added_mb_tenth", "peak_added_mb_4x_block"):
        assert result[key] is None or result[key] >= 0


def test_peak_added_while_counts_what_the_call_holds_at_once() -> None:
    value, added = benchmark.peak_added_while(lambda: int(torch.ones(64 * 2**20, dtype=torch.uint8).sum()))
    assert value == 64 * 2**20
    assert added is None or added >= 32  # MB; None where the peak cannot be restarted


@pytest.mark.slow
def test_cornac_agrees_with_recsys_on_u1_lists(ml100k_folder: Path) -> None:
    pytest.importorskip("cornac")
    result = benchmark.bench_ranking_agreement(ml100k_folder)
    assert result["agree"] and result["max_difference"] <= benchmark.AGREEMENT_TOLERANCE
    assert (
        result["relevant_sets_match"] and result["lists_match_dotbias"] and result["lists_match_most-popular"]
    )
    assert result["users"] == 456 and len(result["rows"]) == 2 * (5 * 3 + 3)


def test_peak_rss_keeps_the_peak_from_before_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(benchmark, "_RESTARTED_PEAK_MB", [])
    assert benchmark.peak_rss_mb() > 0  # nothing restarted yet: the kernel's peak alone
    monkeypatch.setattr(benchmark, "_RESTARTED_PEAK_MB", [1e9])
    assert benchmark.peak_rss_mb() == 1e9  # a peak held before a restart still counts


# --- the learning-to-rank task: every contender's lists on one task, the peers' search, scale rows --

LTR_LISTS = [
    "recsys-ials",
    "recsys-bpr",
    "recsys-dotbias",
    "most-popular",
    "implicit-als",
    "implicit-als-tuned",
    "implicit-bpr",
    "implicit-bpr-tuned",
    "cornac-bpr",
    "cornac-bpr-tuned",
]


@pytest.fixture(scope="module")
def ltr_ratings() -> RatingsDataset:
    """Synthetic ratings small enough that every contender fits in well under a second."""
    return make_synthetic(SyntheticConfig(n_users=60, n_items=50, n_ratings=1_200, seed=3))[0]


def test_bench_learning_to_rank_searches_first_and_scales_without_ml100k(tmp_path: Path) -> None:
    script = _bench_script()
    specs = script.jobs(tmp_path, [], tmp_path, repeats=2, tasks=["learning-to-rank"], ltr_shapes=["ml-20m"])
    assert all(spec["task"] == "learning-to-rank" and not spec.get("contended") for spec in specs)
    assert [spec.get("contender") for spec in specs if spec["part"] == "lists"] == LTR_LISTS
    assert not any("tuned_from" in spec for spec in specs)
    tensors = str(tmp_path / "ml-20m-learning-to-rank.pt")
    assert [(spec["part"], spec.get("contender")) for spec in specs[len(LTR_LISTS) :]] == [
        ("generate", None),
        *(
            ("scale", name)
            for name in ("recsys-ials", "implicit-als", "recsys-bpr", "implicit-bpr", "recsys-dotbias")
        ),
    ]
    assert specs[len(LTR_LISTS)]["path"] == tensors and all(s["tensors"] == tensors for s in specs[-5:])
    # --retune: each peer's search runs before the lists, and its tuned row reads what it found.
    found = tmp_path / "out"
    specs = script.jobs(
        tmp_path, [], tmp_path, repeats=1, tasks=["learning-to-rank"], ltr_shapes=[], retune=found
    )
    searches = {spec["peer"]: spec["found"] for spec in specs[:3]}
    assert [spec["part"] for spec in specs] == ["search"] * 3 + ["lists"] * len(LTR_LISTS)
    assert searches == {peer: str(found / f"learning-to-rank-{peer}.json") for peer in benchmark.PEER_GRIDS}
    tuned = {spec["contender"]: spec["tuned_from"] for spec in specs if "tuned_from" in spec}
    assert tuned == {f"{peer}-tuned": path for peer, path in searches.items()}
    without = script.jobs(None, [], tmp_path, 1, tasks=["learning-to-rank"], ltr_shapes=["ml-20m"])
    assert [spec["part"] for spec in without] == [
        "generate",
        *["scale"] * 5,
    ]


def test_bench_learning_to_rank_workers_keep_openblas_to_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _bench_script()
    seen: list[dict[str, str]] = []

    def run(command: list[str], **kwargs: Any) -> Any:
        seen.append(kwargs["env"])
        return subprocess.CompletedProcess(command, 0, stdout='{"part": "lists"}\n', stderr="")

    monkeypatch.setattr(script.subprocess, "run", run)
    script.run_worker({"task": "learning-to-rank", "part": "lists", "contender": "implicit-als"}, None)
    script.run_worker({"task": "load", "name": "ml-100k"}, None)
    assert seen[0]["OPENBLAS_NUM_THREADS"] == "1"
    assert seen[1].get("OPENBLAS_NUM_THREADS") == os.environ.get("OPENBLAS_NUM_THREADS")


@pytest.mark.filterwarnings("ignore:OpenBLAS is configured")  # implicit on this process's BLAS threads
def test_learning_to_rank_scores_every_contender_on_the_same_task(
    ltr_ratings: RatingsDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("implicit")
    pytest.importorskip("cornac")
    monkeypatch.setattr(benchmark, "RECSYS_RANKING_SETTINGS", {"ials": {"n_factors": 8, "alpha": 5.0}})
    contenders = benchmark.ltr_contenders()
    assert contenders == [*LTR_LISTS[:3], "recsys-ials-settings", *LTR_LISTS[3:]]
    rows = [benchmark.bench_ltr_lists(ltr_ratings, "random", name, threads=1) for name in contenders]
    assert [row["contender"] for row in rows] == contenders and not any("note" in row for row in rows)
    # One task for all: the same judged users and relevant items, whatever fitted the lists.
    assert len({row["task_digest"] for row in rows}) == 1 and len({row["users"] for row in rows}) == 1
    assert rows[0]["users"] > 10
    assert all(0 <= row[metric] <= 1 for row in rows for metric in benchmark.LTR_METRICS)
    assert rows[0]["numba_layer"] is not None  # recsys' ials ran numba's parallel kernels
    assert all(row["numba_layer"] is None for row in rows if not row["contender"].startswith("recsys-"))
    settings = {row["contender"]: row["settings"] for row in rows}
    ials = dict(COMPILED_DEFAULTS["ials"])  # the registry's defaults, then the row's own settings
    assert settings["recsys-ials"] == benchmark.settings_text(ials)
    assert settings["recsys-ials-settings"] == benchmark.settings_text({**ials, "n_factors": 8, "alpha": 5.0})
    assert settings["implicit-als"] == "factors=100 regularization=0.01 alpha=1 iterations=15"
    assert settings["cornac-bpr-tuned"] == benchmark.settings_text(benchmark.PEER_TUNED["cornac-bpr"])
    assert settings["most-popular"] == ""
    # A tuned peer takes the settings its search found, where one ran.
    found = benchmark.bench_ltr_lists(
        ltr_ratings, "random", "implicit-bpr-tuned", 1, tuned={"factors": 4, "iterations": 3}
    )
    assert found["settings"].startswith("factors=4 ") and found["settings"].endswith(" iterations=3")
    script = _bench_script()
    specs = [{"task": "learning-to-rank", "part": "lists"} for _ in rows]
    measured = [{**row, "contended": "no", "wall_seconds": 2.0, "peak_rss_mb": 300.0} for row in rows]
    table = script.readable(script.tables(specs, measured)["learning-to-rank"])
    assert table.columns.tolist() == [
        "contender", "settings", "ndcg@10", "recall@10", "precision@10", "fit_seconds", "fit_cpu_seconds",
        "wall_seconds", "peak_rss_mb", "users", "task_digest", "numba_layer",
    ]  # fmt: skip


def test_learning_to_rank_notes_a_failing_cornac_bpr_and_raises_for_the_others(
    ltr_ratings: RatingsDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(peer: str, *args: Any, **kwargs: Any) -> None:
        raise ValueError(f"{peer} broke")

    monkeypatch.setattr(benchmark, "fit_peer", broken)
    monkeypatch.setattr(benchmark, "peer_model", lambda *args: None)  # the peers need not be installed
    row = benchmark.bench_ltr_lists(ltr_ratings, "random", "cornac-bpr", threads=1)
    assert row == {
        "part": "lists",
        "contender": "cornac-bpr",
        "note": "skipped: cornac's BPR failed (ValueError: cornac-bpr broke)",
    }
    with pytest.raises(ValueError, match="implicit-als broke"):
        benchmark.bench_ltr_lists(ltr_ratings, "random", "implicit-als", threads=1)


def test_hold_out_positives_holds_out_a_fifth_of_each_users_positives() -> None:
    # User 0: 10 positives and 3 ratings below 4; user 1: 4 positives (a fifth rounds down to none).
    x = torch.tensor([[0, item] for item in range(13)] + [[1, item] for item in range(4)])
    y = torch.tensor([5.0, 4.0] * 5 + [3.0, 1.0, 2.0] + [4.0] * 4)
    kept, held = benchmark.hold_out_positives(RatingTensors(x, y), 4.0)
    assert held.x[:, 0].tolist() == [0, 0] and bool((held.y >= 4.0).all())
    assert len(kept) == 15 and (kept.x[:, 1] >= 10).sum() == 3  # the ratings below 4 all kept
    pairs = {tuple(pair) for pair in torch.cat([kept.x, held.x]).tolist()}
    assert pairs == {tuple(pair) for pair in x.tolist()}
    again = benchmark.hold_out_positives(RatingTensors(x, y), 4.0)[1]
    assert torch.equal(again.x, held.x)
    others = {
        tuple(benchmark.hold_out_positives(RatingTensors(x, y), 4.0, seed=s)[1].x[:, 1].tolist())
        for s in range(8)
    }
    assert len(others) > 1  # the draw is the seed's


@pytest.mark.filterwarnings("ignore:OpenBLAS is configured")  # implicit on this process's BLAS threads
def test_search_peer_takes_the_best_validation_ndcg_of_its_grid(
    ltr_ratings: RatingsDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("implicit")
    grid = {"factors": [2, 8], "regularization": [0.1], "alpha": [1.0, 10.0], "iterations": [3]}
    monkeypatch.setitem(benchmark.PEER_GRIDS, "implicit-als", grid)
    scores: list[float] = []
    evaluate = benchmark.evaluate_ranking

    def recorded(*args: Any, **kwargs: Any) -> dict[str, float]:
        result = evaluate(*args, **kwargs)
        scores.append(result["ndcg@10"])
        return result

    monkeypatch.setattr(benchmark, "evaluate_ranking", recorded)
    result = benchmark.search_peer(ltr_ratings, "random", "implicit-als", threads=1)
    assert result["points"] == 4 and len(scores) == 5  # the grid, then the defaults
    assert (
        result["validation_ndcg@10"] == max(scores[:4]) and result["defaults_validation_ndcg@10"] == scores[4]
    )
    assert result["settings"] == benchmark.grid_points(grid)[scores.index(max(scores[:4]))]
    data, _ = benchmark.ltr_split(ltr_ratings, "random")
    assert result["held_out"] == len(benchmark.hold_out_positives(data.train, 4.0)[1]) > 0
    table = _bench_script().ltr_tables([result])["learning-to-rank-search"]
    assert table["settings"].tolist() == [benchmark.settings_text(result["settings"])]


@pytest.mark.filterwarnings("ignore:OpenBLAS is configured")  # implicit on this process's BLAS threads
def test_learning_to_rank_times_each_contenders_epochs_at_a_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("implicit")
    monkeypatch.setitem(SHAPES, "small", (60, 50, 1_200))
    path = tmp_path / "small.pt"
    generated = benchmark.bench_learning_to_rank(None, "generate", shape="small", path=str(path))
    rows = [
        benchmark.bench_ltr_scale("small", contender, path, epochs=2, threads=1)
        for contender in benchmark.LTR_SCALE_CONTENDERS
    ]
    ratings = torch.load(path)["y"]
    positives = int((ratings >= 4.0).sum())
    assert [(row["example"], row["examples"]) for row in rows] == [("positive", positives)] * 4 + [
        ("rating", len(ratings))
    ]
    for row in rows:
        assert row["epochs"] == 2 and 0 < row["epoch_seconds"] <= row["fit_seconds"]
        assert row["ns_per_example"] == pytest.approx(1e9 * row["epoch_seconds"] / row["examples"])
        assert row["dense_mb"] == pytest.approx(60 * 50 * 4 / 2**20) and row["threads"] == 1
    specs = [{"task": "learning-to-rank", "part": part} for part in ("generate", *["scale"] * len(rows))]
    found = _bench_script().tables(specs, [generated, *rows])
    assert found["generate"].to_dict(orient="records") == [
        {key: value for key, value in generated.items() if key != "part"}
    ]
    assert found["learning-to-rank-scale"]["contender"].tolist() == list(benchmark.LTR_SCALE_CONTENDERS)


def test_bench_retune_without_the_learning_to_rank_task_is_one_line(tmp_path: Path) -> None:
    args = ["--tasks", "throughput", "--retune", "--out", str(tmp_path / "bench")]
    result = run_cli(lambda: run(_bench_script().main), "bench.py", args, tmp_path / "cache")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --retune searches the learning-to-rank task's peers: add learning-to-rank to --tasks"
    ]
    assert not (tmp_path / "bench").exists()


def test_myfms_user_day_column_is_bfms_bins() -> None:
    """The side-information task hands myFM bfm's time bins: a one-hot column per user and UTC day
    of the training part, and a row of zeros for a rating on a user-day training lacks."""
    import side_information

    day = 24 * 3600
    midnight = 1_000_000_000 - 1_000_000_000 % day
    train = np.array(
        [[0, 5, midnight + 10], [0, 6, midnight + day - 1], [1, 5, midnight + 3], [0, 7, midnight + day]]
    )
    test = np.array([[0, 9, midnight + 500], [1, 9, midnight + day + 1], [2, 9, midnight]])
    columns = side_information._user_days(test, train).toarray()
    assert side_information._user_days(train, train).toarray().tolist() == [
        [1, 0, 0],  # user 0's first day
        [1, 0, 0],
        [0, 0, 1],  # user 1's
        [0, 1, 0],  # user 0's second day
    ]
    assert columns.tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 0]]  # a day, or a user, training lacks
    assert side_information._user_days(test[:, :2], train[:, :2]).shape == (3, 0)  # no times: no column


def test_the_side_information_folds_table_holds_the_contenders_run_beyond_u1() -> None:
    """bfm's ordered probit runs on every fold and gets a folds row; myFM's, on u1 alone, gets none."""
    import side_information

    jobs = side_information.side_jobs()
    folds_of = {
        name: {job["fold"] for job in jobs if job["contender"] == name}
        for name in ("recsys-bfm-ordinal", "myfm-ordinal", "myfm")
    }
    assert folds_of["recsys-bfm-ordinal"] == folds_of["myfm"] == set(side_information.FOLDS)
    assert folds_of["myfm-ordinal"] == {"u1"}
    every = side_information.FEATURE_SETS[-1]
    rows = [
        {
            "contender": job["contender"],
            "features": job["features"],
            "fold": job["fold"],
            "rmse": 0.9,
            "seconds": 1.0,
        }
        for job in jobs
    ]
    tables = side_information.fold_tables(rows)
    assert len(tables["side-information"]) == sum(job["fold"] == "u1" for job in jobs)
    folds = tables["side-information-folds"]
    assert sorted(folds["contender"]) == ["myfm", "recsys-bfm", "recsys-bfm-ordinal"]
    assert set(folds["folds"]) == {5} and every == "side,implicit,time"
    only_u1 = side_information.fold_tables([row for row in rows if row["fold"] == "u1"])
    assert "side-information-folds" not in only_u1


def test_the_device_engine_is_timed_to_the_compiled_engines_rmse_over_a_few_more_epochs(
    tmp_path: Path,
) -> None:
    """Its batched steps end a little above the compiled engine at equal epochs, so the convergence
    rows let it train DEVICE_EXTRA_EPOCHS more, each epoch's RMSE and time recorded."""
    generator = torch.Generator().manual_seed(0)
    x = torch.stack(
        [
            torch.randint(0, 60, (3000,), generator=generator),
            torch.randint(0, 40, (3000,), generator=generator),
        ],
        1,
    )
    path = tmp_path / "shape.pt"
    torch.save({"x": x, "y": torch.randint(1, 6, (3000,), generator=generator).float()}, path)
    rows = {engine: benchmark.bench_convergence("small", path, engine) for engine in ("compiled", "device")}
    epochs = {engine: len(row["valid_rmse"]) for engine, row in rows.items()}
    assert epochs["device"] == epochs["compiled"] + benchmark.DEVICE_EXTRA_EPOCHS
    assert all(len(row["elapsed"]) == len(row["valid_rmse"]) for row in rows.values())
