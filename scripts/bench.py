"""Benchmarks in one run: recsys vs fastai, Surprise, cornac and LIBMF on ML-100K u1 and on each of
its folds u1..u5 (their mean and spread), throughput on synthetic ML-1M/10M/25M shapes (LIBMF and
cornac epochs beside recsys'), load times, top-N evaluation (cornac scoring recsys' u1 lists; the
time of full ranking on u1 per model and at the synthetic shapes), learning to rank (recsys' ials and
bpr beside implicit's ALS and BPR and cornac's BPR, with their defaults and tuned on u1.base alone:
their u1 lists scored by recsys' evaluate_ranking, and their epochs at the ML-20M shape), and a few
rows again under contention. Writes bench.md and bench.json: `python scripts/bench.py`; `--tasks
folds` (say) runs one task alone.

Every measurement runs in a fresh process (this script re-invoked with --worker) so that its peak
RSS and timing are its own. Needs the real ML-100K (--data-dir or $RECSYS_DATA) for the u1, folds
and load rows and the ranking and learning-to-rank tasks' u1 rows (the ranking task's scale rows run
at each of --shapes, the learning-to-rank task's at each of --ltr-shapes). The learning-to-rank
task's tuned peers take benchmark.PEER_TUNED; `--retune` searches their grids again (in the task's
own workers, before its lists; the results, as JSON, beside bench.md) and prints the constants. At the
ML-10M shape dotbias's autograd engine also runs under torchrun (two gloo processes on the CPU, one
per GPU with --device cuda) beside the same run in one plain process.
The contended rows run last, while two processes spin a CPU-bound loop each (--no-contended skips
them): recsys dotbias on u1, and one epoch of each contender at the ML-10M shape (else the first
shape asked for), recsys' on its compiled engine at 2 threads. `--baseline CHECKOUT` adds another
checkout's dotbias u1 run to the u1 rounds: the code before a change against the code after it, in
one run of the same machine.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path
from typing import Any

import benchmark
import pandas as pd
import side_information
import torch

from recsys.commands.common import CommandParser, run
from recsys.config import check_device
from recsys.errors import RecsysError
from recsys.files import write_json, write_text
from recsys.train.device import KERNELS_SWITCH
from recsys.train.distributed import distributed_session
from recsys.workflows.report import markdown_table
from recsys.workflows.run_folder import make_folder

REFERENCE = "recsys-dotbias"  # the u1 contender the others' time ratios divide by
# The autograd engine with its own defaults.
AUTOGRAD = "recsys-dotbias-autograd"
# REFERENCE's run from another checkout of recsys (--baseline), by that checkout's own bench worker.
BASELINE = "recsys-dotbias-baseline"
# recsys' most accurate model beside them: bpmf, Bayesian MF by Gibbs sampling.
BAYES = "recsys-bpmf"
# A model the autograd engine alone trains: its contended row shows that engine under load.
AUTOGRAD_ONLY = "recsys-embproj"
U1_CONTENDERS = (
    REFERENCE,
    AUTOGRAD,
    AUTOGRAD_ONLY,
    BAYES,
    "fastai",
    "surprise-svd",
    *benchmark.CORNAC_MF,
    *benchmark.LIBMF,
)
# The folds task: the u1 contenders and the SVD++ models, recsys' svdpp and Surprise's SVDpp with its
# defaults (20 factors, 20 epochs; one fit and prediction took about 17 s on u1 on 2 busy cores).
FOLD_CONTENDERS = (*U1_CONTENDERS, "recsys-svdpp", "surprise-svdpp")
FOLDS = ("u1", "u2", "u3", "u4", "u5")
# Peer epochs at every shape, each timed as one fit of 1 and of 5 iterations (the second spreads a
# fit's setup over its epochs), with the tuned settings: those whose u1 RMSE competes with recsys'.
PEER_EPOCHS = ("libmf-tuned", "cornac-mf-tuned")
PEER_ITERATIONS = (1, 5)
# recsys dotbias epochs at set thread counts, with its defaults: the compiled engine, the one that
# takes threads (LARGE_AUTOGRAD's sparse tables and batch size choose the autograd engine).
THREAD_COUNTS = (1, 2)
THREAD_EPOCHS = 5  # as the peers' longer fits: the setup (blocking the ratings) spread over them
# The autograd engine alone and under torchrun at this shape, with LARGE_AUTOGRAD's setting, dense
# on CUDA (nccl all-reduces no sparse gradients): two processes (gloo) on the CPU, one per GPU on CUDA.
TORCHRUN_SHAPE = "ml-10m"
CONTENDED_SHAPE = "ml-10m"
# Where the time to reach the autograd engine's accuracy is measured.
CONVERGENCE_SHAPE = "ml-10m"
BUSY_PROCESSES = 2
TASKS = (
    "u1",
    "folds",
    "throughput",
    "convergence",
    "generate",
    "load",
    "write-file",
    "file-load",
    "ranking",
    "learning-to-rank",
    "side-information",
    "device-engine",
)
# The task whose output another reads: run whenever that other one is.
NEEDS = {
    "throughput": "generate",
    "convergence": "generate",
    "device-engine": "generate",
    "file-load": "write-file",
}
# The tasks --tasks names (those others need come along).
SELECTABLE = tuple(task for task in TASKS if task not in NEEDS.values())
# The tasks that need the real ML-100K; the ranking and learning-to-rank tasks' u1 parts need it too
# (their scale parts not).
ML100K_TASKS = ("u1", "folds", "load", "side-information")
# --shapes' default: ML-20M's shape is the learning-to-rank task's (--ltr-shapes).
DEFAULT_SHAPES = ("ml-1m", "ml-10m", "ml-25m")
# Set in the learning-to-rank task's workers: implicit's native loops are its threads, and an OpenBLAS
# pool inside each of them slows them (implicit warns of it otherwise).
WORKER_ENVIRONMENT = {"learning-to-rank": {"OPENBLAS_NUM_THREADS": "1"}}
# Columns shown first, in this order, where a table has them; the rest follow.
FIRST_COLUMNS = (
    "task",
    "contender",
    "peer",
    "reader",
    "model",
    "dataset",
    "shape",
    "engine",
    "contended",
    "threads",
    "processes",
    "iterations",
    "settings",
    "rmse",
    "rmse_mean",
    "rmse_sd",
    "final_valid_rmse",
    "ndcg@10",
    "recall@10",
    "precision@10",
    "fit_seconds",
    "fit_cpu_seconds",
    "seconds",
    "epoch_seconds",
    "epoch_cpu_seconds",
    "ns_per_example",
    "trained_epoch_seconds",
    "cpu_seconds",
    "wall_seconds",
    "peak_rss_mb",
)
# Counts, and measures whose fractions are noise, shown rounded to whole numbers.
WHOLE_NUMBERS = (
    "threads",
    "processes",
    "iterations",
    "batch_size",
    "runs",
    "folds",
    "ratings",
    "peak_rss_mb",
    "ratings_per_second",
    "rows_per_second",
    "rows",
    "table_mb",
    "peak_added_mb",
    "samples_per_second",
    "users",
    "items",
    "judged_users",
    "training_ratings",
    "block_users",
    "users_per_second",
    "peak_added_mb_tenth",
    "peak_added_mb_4x_block",
    "resident_mb",
    "points",
    "held_out",
    "validation_users",
    "examples",
    "epochs",
    "factors",
    "ns_per_example",
    "ratings_mb",
    "positives_mb",
    "factors_mb",
    "dense_mb",
)


def device_engine_contenders(device: str) -> tuple[tuple[str, str, bool], ...]:
    """The device-engine task's (engine, device, Triton kernels) contenders: the compiled engine on the
    CPU, the reference, and the device engine on --device, on a GPU also with its Triton kernels."""
    kernels = (("device", device, True),) if device.startswith("cuda") else ()
    return (("compiled", "cpu", False), ("device", device, False), *kernels)


def device_engine_processes(device: str) -> int | None:
    """Processes for the device-engine task's row on every GPU under torchrun (the ranks sharing each
    step, recsys.train.distributed.StepShares): the GPUs, where there are two or more; else none."""
    gpus = torch.cuda.device_count() if device.startswith("cuda") else 0
    return gpus if gpus > 1 else None


def throughput_jobs(shape: str, tensors: str, device: str) -> list[dict[str, Any]]:
    """The throughput measurements at one shape: recsys' models, on the CPU dotbias on its default
    engine at set thread counts, at TORCHRUN_SHAPE dotbias alone and under torchrun, and the peers'
    epochs."""
    large = shape != "ml-1m"
    common = {"task": "throughput", "shape": shape, "tensors": tensors}
    recsys = {**common, "device": device, **(benchmark.LARGE_AUTOGRAD if large else {})}
    models = ("dot", "dotbias", "embproj", *(() if large else ("linear",)))
    found = [{**recsys, "model": model} for model in models]
    if device == "cpu":  # threads are the compiled engine's, which trains on the CPU
        found += [
            {**common, "device": device, "model": "dotbias", "threads": threads, "epochs": THREAD_EPOCHS}
            for threads in THREAD_COUNTS
        ]
    if shape == TORCHRUN_SHAPE:
        distributed = {**recsys, "model": "dotbias", "sparse": device == "cpu"}
        processes = torch.cuda.device_count() if device.startswith("cuda") else 2
        found += [distributed, {**distributed, "processes": processes}]
    peers = [(contender, iterations) for contender in PEER_EPOCHS for iterations in PEER_ITERATIONS]
    return found + [
        {**common, "contender": contender, "iterations": iterations} for contender, iterations in peers
    ]


def contended_jobs(specs: list[dict[str, Any]], shape: str | None) -> list[dict[str, Any]]:
    """Copies, marked contended, of the few measurements to re-run under load: every u1 round of
    recsys dotbias and of an autograd-only model, and one epoch at `shape` of recsys dotbias (at the
    most threads) and of each peer."""

    def chosen(spec: dict[str, Any]) -> bool:
        if spec["task"] == "u1":
            return spec["contender"] in (REFERENCE, AUTOGRAD_ONLY)
        if spec["task"] != "throughput" or spec["shape"] != shape:
            return False
        return spec.get("threads") == max(THREAD_COUNTS) or spec.get("iterations") == 1

    return [{**spec, "contended": True} for spec in specs if chosen(spec)]


def ranking_jobs(u1: bool, shapes: list[str]) -> list[dict[str, Any]]:
    """The ranking task's measurements: with `u1` (ML-100K at hand), cornac's agreement with recsys'
    lists and each RANKING_MODELS model's full ranking of u1; at each of `shapes`, the full ranking of
    a sample of the judged users of synthetic ratings of that shape."""
    found: list[dict[str, Any]] = []
    if u1:
        found.append({"task": "ranking", "part": "agreement"})
        found += [{"task": "ranking", "part": "speed", "model": model} for model in benchmark.RANKING_MODELS]
    sample = benchmark.RANKING_SAMPLE
    return found + [
        {"task": "ranking", "part": "scale", "shape": shape, "sample": sample} for shape in shapes
    ]


def ltr_jobs(u1: bool, shapes: Collection[str], scratch: Path, found: Path | None) -> list[dict[str, Any]]:
    """The learning-to-rank task's measurements: with `u1` (ML-100K at hand), each peer's search where
    `found` names a folder for its result (--retune), then every contender's lists (the "-tuned" peers
    with the settings their search found, else benchmark.PEER_TUNED); at each of `shapes`, its ratings
    generated and each LTR_SCALE_CONTENDERS contender's epochs timed on them."""
    task = "learning-to-rank"
    specs: list[dict[str, Any]] = []
    if u1:
        searched = (
            {} if found is None else {peer: found / f"{task}-{peer}.json" for peer in benchmark.PEER_GRIDS}
        )
        specs += [
            {"task": task, "part": "search", "peer": peer, "found": str(path)}
            for peer, path in searched.items()
        ]
        for contender in benchmark.ltr_contenders():
            path = searched.get(contender.removesuffix("-tuned")) if contender.endswith("-tuned") else None
            specs.append(
                {"task": task, "part": "lists", "contender": contender}
                | ({} if path is None else {"tuned_from": str(path)})
            )
    for shape in shapes:
        tensors = str(scratch / f"{shape}-{task}.pt")
        specs.append({"task": task, "part": "generate", "shape": shape, "path": tensors})
        specs += [
            {"task": task, "part": "scale", "shape": shape, "contender": contender, "tensors": tensors}
            for contender in benchmark.LTR_SCALE_CONTENDERS
        ]
    return specs


def ml100k_job(task: str, contender: str, device: str, **options: Any) -> dict[str, Any]:
    """One ML-100K measurement of `contender`: recsys trains on `device`; fastai picks its own (a GPU
    where there is one), the others the CPU."""
    return {
        "task": task,
        "contender": contender,
        **options,
        **({"device": device} if contender.startswith("recsys") else {}),
    }


def jobs(
    folder: Path | None,
    shapes: list[str],
    scratch: Path,
    repeats: int,
    device: str = "cpu",
    contended: bool = True,
    file_shape: str | None = None,
    tasks: Collection[str] = SELECTABLE,
    lenskit_python: str | None = None,
    baseline: Path | None = None,
    ltr_shapes: Collection[str] = (),
    retune: Path | None = None,
) -> list[dict[str, Any]]:
    """Every measurement of `tasks` (and of those they need) to run, as the keyword arguments of one
    worker; the contended ones last. The u1 contenders take turns, `repeats` rounds, so that a slow
    spell of the machine does not fall on one of them (`baseline`'s recsys among them); on the folds,
    one round per fold, the contenders taking turns within each. The learning-to-rank task's scale
    rows run at `ltr_shapes` (--ltr-shapes: LTR_SHAPE); with `retune`, its peers are searched anew,
    their results written there."""
    found: list[dict[str, Any]] = []
    if folder is not None:
        # LensKit's contenders run where an interpreter that has it was named (--lenskit-python).
        peers: list[tuple[str, dict[str, Any]]] = [(name, {}) for name in U1_CONTENDERS]
        if lenskit_python:
            peers += [(name, {"python": lenskit_python}) for name in benchmark.LENSKIT]
        u1_peers = [*peers, *([(BASELINE, {"checkout": str(baseline)})] if baseline is not None else [])]
        found += [
            ml100k_job("u1", name, device, **options) for _ in range(repeats) for name, options in u1_peers
        ]
        fold_peers = [*peers, *((name, {}) for name in FOLD_CONTENDERS if name not in U1_CONTENDERS)]
        found += [
            ml100k_job("folds", name, device, fold=fold, **options)
            for fold in FOLDS
            for name, options in fold_peers
        ]
        found.append({"task": "load", "name": "ml-100k"})
    for shape in shapes:
        tensors = str(scratch / f"{shape}.pt")
        found.append({"task": "generate", "shape": shape, "path": tensors})
        found += throughput_jobs(shape, tensors, device)
        if shape == CONVERGENCE_SHAPE and device == "cpu":
            found += [
                {"task": "convergence", "shape": shape, "tensors": tensors, "engine": engine}
                for engine in ("autograd", "compiled")
            ]
        found += [
            {
                "task": "device-engine",
                "shape": shape,
                "tensors": tensors,
                "engine": engine,
                "device": where,
                "kernels": kernels,
            }
            for engine, where, kernels in device_engine_contenders(device)
        ]
        if (processes := device_engine_processes(device)) is not None:
            found.append(
                {"task": "device-engine", "shape": shape, "tensors": tensors, "engine": "device",
                 "device": device, "kernels": True, "processes": processes}
            )  # fmt: skip
    if folder is not None:
        found += [
            {"task": "device-engine", "part": "u1", "engine": engine, "device": where, "kernels": kernels}
            for _ in range(repeats)
            for engine, where, kernels in device_engine_contenders(device)
        ]
    found += ranking_jobs(folder is not None, shapes)
    found += ltr_jobs(folder is not None, ltr_shapes, scratch, retune)
    if folder is not None:
        found += side_information.side_jobs()
    if file_shape is not None:  # the readers take turns, as the u1 contenders do
        files = str(scratch / f"{file_shape}-files")
        found.append({"task": "write-file", "shape": file_shape, "folder": files})
        found += [
            {"task": "file-load", "reader": reader, "folder": files}
            for _ in range(repeats)
            for reader in benchmark.FILE_READERS
        ]
    wanted = {*tasks, *(NEEDS[task] for task in tasks if task in NEEDS)}
    found = [spec for spec in found if spec["task"] in wanted]
    if contended:
        loaded_shape = CONTENDED_SHAPE if CONTENDED_SHAPE in shapes else next(iter(shapes), None)
        found += contended_jobs(found, loaded_shape)
    return found


def bench_ml100k(folder: Path, contender: str, **options: Any) -> dict[str, Any]:
    """Fit `contender` on an ML-100K fold and rate its test ratings; `options`: `fold` (default u1)
    and, for recsys, `device`."""
    if contender in benchmark.CORNAC_MF:
        return benchmark.bench_cornac(folder, contender, **options)
    if contender in benchmark.LIBMF:
        return benchmark.bench_libmf(folder, contender, **options)
    if contender in benchmark.LENSKIT:
        return benchmark.bench_lenskit(folder, contender, **options)
    if contender in benchmark.SURPRISE:
        return benchmark.bench_surprise(folder, contender, **options)
    measures: dict[str, Callable[..., dict[str, Any]]] = {
        REFERENCE: benchmark.bench_recsys,
        AUTOGRAD: partial(benchmark.bench_recsys, engine="autograd"),
        "recsys-svdpp": partial(benchmark.bench_recsys, model="svdpp"),
        AUTOGRAD_ONLY: partial(benchmark.bench_recsys, model="embproj"),
        BAYES: partial(benchmark.bench_recsys, model="bpmf"),
        "fastai": benchmark.bench_fastai,
    }
    return measures[contender](folder, **options)


def worker(spec: dict[str, Any], folder: Path | None) -> dict[str, Any] | None:
    """Run one measurement in this process; under torchrun, its result from rank 0 alone (None on the
    other ranks)."""
    task = spec.pop("task")
    if task in ("u1", "folds"):
        assert folder is not None
        contender = spec.pop("contender")
        marks = {"contender": contender, **({"fold": spec["fold"]} if "fold" in spec else {})}
        return {**marks, **bench_ml100k(folder, contender, **spec)}
    if task == "load":
        assert folder is not None
        return benchmark.bench_load(spec["name"], folder)
    if task == "generate":
        return benchmark.generate_shape(spec["shape"], Path(spec["path"]))
    if task == "write-file":
        return benchmark.write_ratings_files(spec["shape"], Path(spec["folder"]))
    if task == "file-load":
        return benchmark.bench_file_load(spec["reader"], Path(spec["folder"]))
    if task == "convergence":
        return benchmark.bench_convergence(spec["shape"], Path(spec["tensors"]), spec["engine"])
    if task == "device-engine":
        engine = spec["engine"] + (" with Triton kernels" if spec["kernels"] else "")
        os.environ[KERNELS_SWITCH] = "1" if spec["kernels"] else "0"  # this worker process's alone
        if spec.get("part") == "u1":
            assert folder is not None
            result = benchmark.bench_recsys(folder, engine=spec["engine"], device=spec["device"])
            return {"contender": f"dotbias, {engine} engine on {spec['device']}", **result}
        processes = spec.get("processes")
        with distributed_session(spec["device"]) as (rank, device):  # one process per GPU under torchrun
            found = benchmark.bench_convergence(spec["shape"], Path(spec["tensors"]), spec["engine"], device)
        return {**found, "engine": engine, "processes": processes} if rank == 0 else None
    if task == "ranking":
        return benchmark.bench_ranking(folder, **spec)
    if task == "learning-to-rank":
        return benchmark.bench_learning_to_rank(folder, **spec)
    if task == "side-information":
        assert folder is not None
        return {"contender": spec["contender"], **side_information.bench_side_information(folder, **spec)}
    shape, tensors = spec.pop("shape"), Path(spec.pop("tensors"))
    if "contender" in spec:
        return benchmark.bench_peer_throughput(shape, spec.pop("contender"), tensors, **spec)
    processes = spec.pop("processes", None)
    with distributed_session(spec.pop("device")) as (rank, device):
        result = benchmark.bench_throughput(shape, spec.pop("model"), tensors, device=device, **spec)
    return {**result, "processes": processes} if rank == 0 else None


def worker_command(spec: dict[str, Any]) -> list[str]:
    """The command that runs `spec` in a fresh process: under torchrun where it names `processes`; a
    baseline's u1 run (`checkout`) by that checkout's bench script, as its REFERENCE."""
    if "checkout" in spec:
        script = Path(spec["checkout"]) / "scripts" / "bench.py"
        asked = {"task": "u1", "contender": REFERENCE, "device": spec["device"]}
        return [sys.executable, str(script), "--worker", json.dumps(asked)]
    processes = spec.get("processes")
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    return [sys.executable, *(launcher if processes else []), __file__, "--worker", json.dumps(spec)]


def run_worker(spec: dict[str, Any], folder: Path | None) -> dict[str, Any]:
    """Start a fresh process for `spec`; add its wall time, peak RSS and contended mark, or the error
    it reported. A baseline's run imports recsys from its checkout, and is named as the spec names it."""
    contended = "yes" if spec.pop("contended", False) else "no"
    command = worker_command(spec)
    if folder is not None:
        command += ["--ml100k", str(folder)]
    # gloo on the loopback interface: torchrun's processes are all on this machine.
    environment = {"GLOO_SOCKET_IFNAME": "lo", **os.environ, **WORKER_ENVIRONMENT.get(spec["task"], {})}
    checkout = spec.get("checkout")
    if checkout is not None:
        environment["PYTHONPATH"] = checkout
    with benchmark.measured() as clocks:
        result = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=checkout)
    marks = {"contended": contended, "wall_seconds": clocks.seconds}
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or ["no output"]
        return {**spec, **marks, "error": lines[-1]}
    named = {"contender": spec["contender"]} if checkout is not None else {}
    return {**json.loads(result.stdout.strip().splitlines()[-1]), **named, **marks}


def run_all(specs: list[dict[str, Any]], folder: Path | None) -> list[dict[str, Any]]:
    """Each spec's result, in order; the contended ones (which `jobs` puts last) while the busy
    processes run, which are stopped however the run ends."""
    quiet = [spec for spec in specs if not spec.get("contended")]
    assert specs == quiet + [spec for spec in specs if spec.get("contended")], "contended specs come last"

    def logged(spec: dict[str, Any]) -> dict[str, Any]:
        print(f"running {spec}", flush=True)
        result = run_worker(dict(spec), folder)
        print(f"  {result}", flush=True)
        return result

    results = [logged(spec) for spec in quiet]
    if len(quiet) < len(specs):
        with benchmark.busy_processes(BUSY_PROCESSES):
            results += [logged(spec) for spec in specs[len(quiet) :]]
    return results


def readable(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with its key columns first, the `contended` mark only where some row ran contended, and
    counts as whole numbers (a row without one, where a missing value made the column float, blank)."""
    if "contended" in table and not (table["contended"] == "yes").any():
        table = table.drop(columns="contended")
    first = [column for column in FIRST_COLUMNS if column in table]
    table = table[first + [column for column in table if column not in first]].copy()
    for column in WHOLE_NUMBERS:
        if column in table:
            whole = [value if pd.isna(value) else round(value) for value in table[column]]
            table[column] = pd.Series(whole, index=table.index, dtype=object)
    return table


TITLES = {
    "u1": "ML-100K u1: recsys vs fastai, Surprise, cornac and LIBMF (medians over the rounds)",
    "folds": "ML-100K folds u1..u5, one run of each contender on each: the mean of each measure over "
    "the folds, `rmse_sd` the RMSEs' sample standard deviation (ddof=1)",
    "u1-contention": "ML-100K u1 under contention (two busy processes): contended/quiet",
    "throughput": "Training throughput: one fit of `iterations` epochs, `epoch_seconds` its seconds per "
    "epoch (threads blank: fit's default, all cores; peak RSS: the training process or its LIBMF child)",
    "throughput-contention": "Throughput under contention (two busy processes): contended/quiet",
    "convergence": "Time to accuracy: dotbias on 99% of the shape, validation RMSE on the other 1%; "
    "seconds until each engine reached the autograd engine's final validation RMSE",
    "device-engine-u1": "The device engine (--device) against the compiled engine on the CPU cores: dotbias "
    "on ML-100K u1 with each engine's defaults (medians over the rounds)",
    "device-engine": "The device engine (--device) against the compiled engine on the CPU cores: one "
    "dotbias at the shape, as the time-to-accuracy rows; `epoch_seconds` the median epoch after the "
    "first, `seconds_to_compiled_final` from the start of `fit` (the ratings' move to the device "
    "included) until the compiled engine's final validation RMSE was reached",
    "generate": "Generating the synthetic shapes",
    "load": "Loading and encoding real data",
    "file-load": "Reading a ratings file shaped like ML-25M (medians over the rounds): CSV and Parquet; "
    "`peak_added_mb`: peak RSS less the process's RSS before reading, `peak_over_table` that over "
    "`table_mb`, the table read (recsys: checked, duplicates dropped; polars: its own table)",
    "ranking-agreement": "Top-N lists on ML-100K u1 scored by cornac 3.0.1's metrics and by recsys' "
    "evaluate_ranking (relevant: test rating >= 4; cornac fed recsys' top-20 lists, or its whole "
    "ranking at k `all`); `compared`: exact, cut at k (cornac's MRR on the list cut at k, no hit 0), "
    "ties differ (cornac's MAP from the scorer's own scores, ties at their worst place: not compared)",
    "ranking-checks": "Top-N protocol checks on u1: judged users, relevant sets recomputed by Python sets, "
    "top-20 lists by a plain sort (same scores place by place), the largest difference where the "
    "definitions match",
    "ranking-speed": "Full ranking on ML-100K u1: evaluate_ranking at k 5, 10, 20 over every judged user "
    "against every item, each model's defaults, fastest of `runs`",
    "ranking-scale": "Full ranking at the synthetic shapes: a sample of the judged users of synthetic "
    "ratings against every item, dotbias of 50 random factors, fastest of `runs`; `peak_added_mb`: peak "
    "RSS less RSS before evaluate_ranking (`_tenth`: a tenth of the users, `_4x_block`: blocks four "
    "times as large)",
    "learning-to-rank-search": "Learning to rank, the peers' search on ML-100K u1.base alone: a random fifth "
    "of each user's positives (rating >= 4; a user with fewer than 5 holds none out) held out as validation, "
    "never u1.test; `settings` the best NDCG@10 there of the grid's `points` (scripts/benchmark.py "
    "PEER_GRIDS), beside the library defaults'",
    "learning-to-rank": "Learning to rank on ML-100K u1: every contender's top-N lists scored by recsys' "
    "evaluate_ranking on one task (`task_digest` its fingerprint: relevant a u1.test rating >= 4 of an "
    "item unrated in u1.base, every unrated item a candidate). The ranking models train on the u1.base "
    "pairs rated >= 4; the peers (implicit 0.7.3, cornac 3.0.1) on those as a binary user x item matrix, "
    "value 1 (so implicit's ALS confidence, alpha x value, is alpha; recsys' ials weighs 1 + alpha x (1 + "
    "rating - 4), and reads the pairs rated below 4 as 1s at confidence 1), and rank by user factors . "
    "item factors (cornac's BPR + its item bias; implicit's BPR "
    "holds its bias among its factors). recsys with its registry defaults (`-settings`: "
    "RECSYS_RANKING_SETTINGS), by `fit` without train_and_evaluate's per-epoch NDCG watch, as the peers "
    "watch nothing; dotbias (a rating model, on all of u1.base) and the popularity chart of u1.base for "
    "reference; the peers with their library defaults, and `-tuned` with the search's settings. Every "
    "fit on 2 threads (cornac's BPR seeded, then given 2): the BPR peers' lock-free threads make their "
    "fits vary from run to run. `fit_seconds`: the fit alone, data in memory; `numba_layer`: the threading "
    "layer of recsys' parallel kernels",
    "learning-to-rank-scale": "Learning to rank at scale: synthetic ratings of the shape, positives those "
    ">= 4 of 5; 64 factors, 2 threads (implicit's num_threads, recsys' numba threads); `epoch_seconds`, "
    "`epoch_cpu_seconds`: the median epoch but the first (which carries the fit's setup: "
    "`first_epoch_seconds`), by the fit's own per-epoch hook (recsys' on_epoch with no validation, so the "
    "ranking fits' NDCG watch judges no one; implicit's callback), an ALS epoch both sides and recsys' "
    "loss; `ns_per_example`: per positive (per rating for dotbias, one model on the compiled engine). "
    "Memory: `ratings_mb` the ratings as loaded (the largest table), `positives_mb` one side's CSR of "
    "the positives (each fit holds two, by user and by item), `dense_mb` the user x item matrix none "
    "builds; `numba_layer` as above",
    "side-information": "Side information on ML-100K u1: recsys' bfm beside myFM 0.4.0's Bayesian FM, "
    "both with rank 10 and 512 Gibbs sweeps (recsys' as its default eight chains of 64) and the same "
    "feature rows (recsys.data.features: implicit, "
    "the items each user rated in u1.base and the users who rated each item, weights 1/sqrt(count); side, "
    "MovieLens' age group, gender, occupation, zip region, genres and year; time, the user and day of each "
    "rating), a hyperprior per feature group; `myfm-ordinal` myFM's ordered probit over the five stars, "
    "`recsys-bfm-ordinal` bfm's (`ordinal`); myFM's regression clipped to the stars, as bfm's is. RMSE on "
    "the test ratings whose ids u1.base has; `seconds`, `cpu_seconds`: preparing the data, the fit and the "
    "scoring, one process",
    "side-information-folds": "Side information over ML-100K's folds u1..u5, every feature group: the "
    "mean of each measure over the folds, `rmse_sd` the RMSEs' sample standard deviation (ddof=1)",
    "errors": "Failed measurements",
}


def ltr_tables(rows: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """The learning-to-rank task's tables from its results but its generated shapes: the peers' search,
    each one's settings as text, the u1 lists and the scale rows."""
    parts: dict[str, list[dict[str, Any]]] = {"search": [], "lists": [], "scale": []}
    for row in rows:
        parts[row["part"]].append({key: value for key, value in row.items() if key != "part"})
    for row in parts["search"]:
        row["settings"] = benchmark.settings_text(row["settings"])
    names = {
        "search": "learning-to-rank-search",
        "lists": "learning-to-rank",
        "scale": "learning-to-rank-scale",
    }
    return {names[part]: pd.DataFrame(found) for part, found in parts.items() if found}


def ranking_tables(rows: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """The ranking task's tables from its results: cornac's agreement (a row per metric, k and scorer)
    and its checks, the u1 speed per model, and the scale run."""
    parts: dict[str, list[dict[str, Any]]] = {"agreement": [], "speed": [], "scale": []}
    for row in rows:
        parts[row["part"]].append({key: value for key, value in row.items() if key != "part"})
    found = {}
    if parts["agreement"]:
        agreement = parts["agreement"][0]
        found["ranking-agreement"] = pd.DataFrame(agreement["rows"])
        found["ranking-checks"] = pd.DataFrame([{k: v for k, v in agreement.items() if k != "rows"}])
    if parts["speed"]:
        found["ranking-speed"] = pd.DataFrame(parts["speed"])
    if parts["scale"]:
        found["ranking-scale"] = pd.DataFrame(parts["scale"])
    return found


def tables(specs: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """bench.md's tables: u1 medians with time ratios, the folds' means and spread, throughput, the
    contended/quiet ratios of both, generation and load times, and every measurement that failed."""
    rows: dict[str, list[dict[str, Any]]] = {task: [] for task in TASKS}
    failed = []
    for spec, result in zip(specs, results, strict=True):
        if "error" in result:
            failed.append(
                {"task": spec["task"], **{k: v for k, v in result.items() if k not in ("tensors", "path")}}
            )
        else:
            rows[spec["task"]].append(result)
    ranked = rows["learning-to-rank"]  # its generated shapes join the generate table
    rows["generate"] += [
        {k: v for k, v in row.items() if k != "part"} for row in ranked if row["part"] == "generate"
    ]
    found = {task: pd.DataFrame(rows[task]) for task in ("throughput", "generate", "load")}
    if rows["file-load"]:
        found["file-load"] = benchmark.median_runs(rows["file-load"], "reader")
    if rows["u1"]:
        medians = benchmark.median_runs(rows["u1"]).to_dict(orient="records")
        quiet_reference = any(row["contender"] == REFERENCE and row["contended"] == "no" for row in medians)
        found["u1"] = benchmark.ratio_table(medians, REFERENCE) if quiet_reference else pd.DataFrame(medians)
    if rows["folds"]:
        found["folds"] = benchmark.fold_table(rows["folds"])
    found["u1-contention"] = benchmark.contention_table(rows["u1"], ["contender"])
    found["throughput-contention"] = benchmark.contention_table(
        rows["throughput"], ["contender", "shape", "iterations", "threads"]
    )
    if len(rows["convergence"]) == 2:
        found["convergence"] = benchmark.time_to_reach(rows["convergence"], "autograd")
    device_u1 = [row for row in rows["device-engine"] if "contender" in row]
    if device_u1:
        found["device-engine-u1"] = benchmark.median_runs(device_u1)
    shaped = pd.DataFrame([row for row in rows["device-engine"] if "contender" not in row])
    if not shaped.empty:
        found["device-engine"] = pd.concat(
            benchmark.time_to_reach(group.to_dict(orient="records"), "compiled")
            for _, group in shaped.groupby("shape", sort=False)
        )
    found |= ranking_tables(rows["ranking"])
    found |= ltr_tables([row for row in ranked if row["part"] != "generate"])
    side = rows["side-information"]
    if side:
        found |= side_information.fold_tables(side)
    found["errors"] = pd.DataFrame(failed)
    return {name: found[name] for name in TITLES if name in found and not found[name].empty}


def ml100k_folder(root: Path | None) -> Path | None:
    """The ML-100K folder `root` names, as train.py's --data-dir takes it: the folder holding ml-100k/,
    or ml-100k/ itself; absolute, since a --baseline's worker runs in its checkout, where a relative
    path had named another folder. None where it holds neither."""
    found = [] if root is None else [path for path in (root / "ml-100k", root) if (path / "u.data").is_file()]
    return found[0].resolve() if found else None


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="folder holding ml-100k/, or ml-100k/ itself (else $RECSYS_DATA)",
    )
    parser.add_argument(
        "--shapes",
        nargs="*",
        choices=list(benchmark.SHAPES),
        default=list(DEFAULT_SHAPES),
        help="synthetic shapes for the throughput runs and the ranking task's scale runs "
        f"[default: {' '.join(DEFAULT_SHAPES)}]",
    )
    parser.add_argument(
        "--ltr-shapes",
        nargs="*",
        choices=list(benchmark.SHAPES),
        default=[benchmark.LTR_SHAPE],
        help="synthetic shapes for the learning-to-rank task's scale runs [default: %(default)s]",
    )
    parser.add_argument(
        "--retune",
        action="store_true",
        help="learning-to-rank: search the peers' grids on u1.base again (minutes) for the tuned rows, "
        "instead of benchmark.PEER_TUNED, and print the settings found",
    )
    parser.add_argument("--out", type=Path, default=Path("reports/bench"), help="folder for bench.md/json")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="rounds of the u1 comparison; the table gives each one's median",
    )
    parser.add_argument(
        "--device", default="cpu", help="where recsys trains: cpu or cuda (fastai picks its own device)"
    )
    parser.add_argument(
        "--contended",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="re-run a few rows while two busy processes load the CPU",
    )
    parser.add_argument(
        "--file-shape",
        choices=[*benchmark.SHAPES, "none"],
        default="ml-25m",
        help="write a ratings file of this shape and time reading it with recsys, pandas, pyarrow, "
        "polars and duckdb (none: skip)",
    )
    parser.add_argument(
        "--tasks",
        nargs="+",
        choices=SELECTABLE,
        default=None,
        help="the tasks to run [default: all; device-engine only with --device cuda, as it measures a GPU]",
    )
    parser.add_argument(
        "--lenskit-python",
        default=os.environ.get("RECSYS_LENSKIT_PYTHON") or None,
        help="a Python interpreter that has LensKit (it needs pandas 2: its own environment, see "
        "docs/benchmarks.md); its ALS and FunkSVD then join the ML-100K rows "
        "[default: $RECSYS_LENSKIT_PYTHON, else none]",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout of recsys (say `git worktree add ../before COMMIT`): its dotbias u1 run, "
        "by its own scripts/bench.py and this interpreter, takes turns with the u1 contenders",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ml100k", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tasks is None:
        args.tasks = [task for task in SELECTABLE if task != "device-engine" or args.device != "cpu"]
    if args.repeats < 1:
        raise RecsysError(f"--repeats must be at least 1, got {args.repeats}")
    check_device(args.device)
    if args.worker is not None:
        result = worker(json.loads(args.worker), args.ml100k)
        if result is not None:
            print(json.dumps({**result, "peak_rss_mb": benchmark.peak_rss_mb()}))
        return 0

    root = args.data_dir or (Path(os.environ["RECSYS_DATA"]) if os.environ.get("RECSYS_DATA") else None)
    folder = ml100k_folder(root)
    if folder is None and args.data_dir is not None:  # named for this run: not skipped with a warning
        raise RecsysError(
            f"--data-dir {args.data_dir}: no ML-100K there (no u.data in it or in its ml-100k/)"
        )
    if folder is None and set(args.tasks) <= set(ML100K_TASKS):
        raise RecsysError(f"--tasks {' '.join(args.tasks)}: ML-100K not found (--data-dir or $RECSYS_DATA)")
    if folder is None and set(args.tasks) & {*ML100K_TASKS, "ranking", "learning-to-rank"}:
        print(
            "ML-100K not found (--data-dir or $RECSYS_DATA): skipping the u1, folds and load rows and "
            "the ranking and learning-to-rank tasks' u1 rows",
            file=sys.stderr,
        )
    if args.baseline is not None and not (args.baseline / "scripts" / "bench.py").is_file():
        raise RecsysError(f"--baseline {args.baseline}: not a recsys checkout (no scripts/bench.py in it)")
    baseline = None if args.baseline is None else args.baseline.resolve()
    if args.retune and "learning-to-rank" not in args.tasks:
        raise RecsysError(
            "--retune searches the learning-to-rank task's peers: add learning-to-rank to --tasks"
        )
    if args.retune and folder is None:
        raise RecsysError(
            "--retune: the peers are searched on ML-100K u1.base, not found (--data-dir or $RECSYS_DATA)"
        )
    with tempfile.TemporaryDirectory() as scratch:
        file_shape = None if args.file_shape == "none" else args.file_shape
        specs = jobs(
            folder,
            args.shapes,
            Path(scratch),
            args.repeats,
            args.device,
            args.contended,
            file_shape,
            args.tasks,
            args.lenskit_python,
            baseline,
            args.ltr_shapes,
            args.out.resolve() if args.retune else None,
        )
        if not specs:  # an empty bench.md had replaced the last run's
            raise RecsysError(
                f"--tasks {' '.join(args.tasks)}: nothing to measure; their rows run at --shapes, "
                "--ltr-shapes or --file-shape, or on ML-100K, and none of these is given"
            )
        # Made before the measurements, not after them: an --out that cannot be a folder (a file, or a
        # path under one) is refused now, where it had ended a run of minutes in a traceback, its results
        # lost.
        make_folder(args.out, "--out")
        results = run_all(specs, folder)
    found = tables(specs, results)
    lines = [
        "# Benchmarks",
        "",
        f"Run on {time.strftime('%Y-%m-%d')} on {benchmark.available_cores()} cores, one process per row; "
        "see scripts/benchmark.py. `seconds`: training and prediction with the data in memory; "
        "`cpu_seconds`: CPU time (all threads) in the same span; `wall_seconds`: the whole process.",
        "",
    ]
    for name, table in found.items():
        lines += [f"## {TITLES[name]}", "", markdown_table(readable(table)), ""]
    write_text(args.out / "bench.md", "\n".join(lines))
    # Missing values (a column a row does not have) as null: JSON has no NaN.
    records = {
        name: t.astype(object).where(t.notna(), None).to_dict(orient="records") for name, t in found.items()
    }
    write_json(args.out / "bench.json", records)
    print("\n".join(lines))
    searched = {
        row["peer"]: row["settings"] for row in results if row.get("part") == "search" and "error" not in row
    }
    if searched:
        print("# The search's settings, to fix as scripts/benchmark.py's PEER_TUNED:")
        print(f"PEER_TUNED = {searched!r}")
    return 0


if __name__ == "__main__":
    run(main)
