"""Benchmarks measured in one run on one machine: recsys against fastai, Surprise, cornac and LIBMF
on ML-100K u1 and on each of its five folds, training throughput on MovieLens-shaped synthetic data
(generated in one process, trained on in another, so the training's peak RSS is its own), load
times, top-N evaluation (cornac scoring recsys' u1 lists, and the time and memory of full ranking on
u1 and at the ML-25M shape), learning to rank (recsys' ials and bpr beside implicit's ALS and BPR and
cornac's BPR: their u1 lists on one task, the peers also tuned on u1.base alone, and their epochs at
the ML-20M shape), and a few of those again while other processes keep the cores busy.

Each measurement runs in its own process (`scripts/bench.py` starts them), so peak RSS is that
measurement's own and no library's import or cache leaks into another's timing. `seconds` is
training plus test prediction after the data is in memory, and `cpu_seconds` the CPU time (user and
system, every thread) spent in the same span, so multi-threaded work shows its whole cost;
`wall_seconds` (filled in by the parent) is the whole process, Python start and imports included.
LIBMF fits run in a child process with a time limit: its scheduler has been seen to deadlock.
"""

import ctypes
import dataclasses
import hashlib
import itertools
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import scipy.sparse as sp
import torch
from torch import Tensor

from recsys.config import RunConfig, available_cores, config_for, model_for
from recsys.data.dataset import RatingsDataset, rating_unit
from recsys.data.encoding import EncodedSplit, RatingTensors, encode_split
from recsys.data.movielens import load_movielens
from recsys.data.splits import fold_split, make_split
from recsys.data.synthetic import SyntheticConfig, make_synthetic
from recsys.evaluation.metrics import rmse
from recsys.evaluation.ranking import (
    BLOCK_ENTRIES,
    KS,
    RankingTask,
    evaluate_ranking,
    ranking_task,
    relevance_threshold,
    top_lists,
)
from recsys.evaluation.scorers import Scorer, constant_scorer, model_scorer
from recsys.files import atomic_write, write_json
from recsys.models.base import BilinearForm, RatingModel
from recsys.models.registry import COMPILED_DEFAULTS, build_model
from recsys.train.compiled import load_kernels
from recsys.train.interactions import positives as positive_pairs
from recsys.train.threads import torch_threads
from recsys.train.trainer import fit
from recsys.workflows.experiment import prepare, train_and_evaluate

# (users, items, ratings) of the real datasets whose shape the throughput runs copy.
SHAPES: dict[str, tuple[int, int, int]] = {
    "ml-1m": (6_040, 3_706, 1_000_209),
    "ml-10m": (69_878, 10_677, 10_000_054),
    # The learning-to-rank task's scale rows (LTR_SHAPE); bench.py's --shapes leaves it out by default.
    "ml-20m": (138_493, 26_744, 20_000_263),
    "ml-25m": (162_541, 59_047, 25_000_095),
}

# cornac.models.MF: its defaults (k 10, 20 epochs of SGD, learning_rate 0.01, lambda_reg 0.02, biases
# on; its docstring's 100 epochs and 0.001 disagree with its signature, which is what runs), and a
# tuned setting. Both are seeded, which per cornac's documentation makes it train on one thread.
CORNAC_MF: dict[str, dict[str, Any]] = {
    "cornac-mf": {},
    "cornac-mf-tuned": {"k": 100, "max_iter": 100, "learning_rate": 0.005, "lambda_reg": 0.1},
}
# LIBMF through pip's `libmf`: its defaults (k 8, 20 iterations, eta 0.1, and L1 0.04 on P and Q with
# no L2: the wrapper's own, where the C library's are L2 0.1 and no L1), and the best of a small sweep
# on u1 over k (50, 100), iterations (20-100), eta (0.02-0.1) and L2 (0.05-0.15), L1 off. LIBMF has
# no bias terms.
LIBMF: dict[str, dict[str, Any]] = {
    "libmf": {},
    "libmf-tuned": {
        "k": 100,
        "eta": 0.05,
        "lambda_p1": 0.0,
        "lambda_q1": 0.0,
        "lambda_p2": 0.1,
        "lambda_q2": 0.1,
    },
}

# Surprise's algorithms, by contender, each with its defaults: SVD (100 factors, 20 epochs of SGD) and
# SVD++ (20 factors, 20 epochs).
SURPRISE = {"surprise-svd": "SVD", "surprise-svdpp": "SVDpp"}

# LensKit 2025.8 (in its own environment, see scripts/lenskit_peer.py): its biased ALS and FunkSVD
# with their defaults (ALS: 50 features, 10 epochs, regularization 0.1, damping 5; FunkSVD: 50
# features, 100 epochs, learning rate 0.001, regularization 0.015), and the best of a sweep scored on
# a random fifth of u1.base held out (never a test file): ALS over features (20, 50, 100, 200),
# regularization (0.03-3) and epochs (10, 20), validation 0.9235 (defaults 0.9273); FunkSVD over
# features (20, 50, 100), learning rate (0.001, 0.005), regularization (0.015, 0.05) and epochs (100,
# 200, 400), validation 0.9221 (400 epochs diverged to 1.006).
LENSKIT_ALS_TUNED = {"embedding_size": 200, "regularization": 0.1, "epochs": 10}
LENSKIT_FUNKSVD_TUNED = {"embedding_size": 100, "epochs": 200}
LENSKIT: dict[str, tuple[str, dict[str, Any]]] = {
    "lenskit-als": ("als", {}),
    "lenskit-als-tuned": ("als", LENSKIT_ALS_TUNED),
    "lenskit-funksvd": ("funksvd", {}),
    "lenskit-funksvd-tuned": ("funksvd", LENSKIT_FUNKSVD_TUNED),
}
LENSKIT_PEER = Path(__file__).with_name("lenskit_peer.py")

# At the synthetic shapes every contender, recsys included, learns 50 factors (recsys' default when
# the scale figures were first taken), so an epoch is the same arithmetic everywhere.
SHAPE_FACTORS = 50
# The autograd engine at scale: `--sparse --bs 4096` (docs/training.md) with the lr and l2 of its
# defaults when the scale figures were first taken, fixed so that the figures stay comparable.
LARGE_AUTOGRAD = {"sparse": True, "batch_size": 4096, "lr": 2e-2, "l2": 0.1}
# Epochs the device engine trains beyond the compiled engine's default when timed to that engine's final
# validation RMSE: its batched steps' gradients are stale, so that at equal epochs it ends a little
# above (0.00002 at the ML-25M shape on an H200; 0.00015 at ML-1M on the CPU, where one epoch more
# took it below at its 11th). The time counts to the first epoch at or below that RMSE.
DEVICE_EXTRA_EPOCHS = 2

Result = TypeVar("Result")
Load = Callable[[], tuple[RatingTensors, RatingTensors]]


@dataclass
class Clocks:
    """Wall and CPU seconds of one measured span, filled in when it ends."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0


def cpu_seconds() -> float:
    """User plus system CPU time so far of every thread of this process and of the children it reaped."""
    usages = (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    return sum(usage.ru_utime + usage.ru_stime for usage in usages)


@contextmanager
def measured() -> Iterator[Clocks]:
    """Time the block on both clocks, so that work spread over threads or children shows its cost."""
    clocks = Clocks()
    wall, cpu = time.perf_counter(), cpu_seconds()
    yield clocks
    clocks.seconds = time.perf_counter() - wall
    clocks.cpu_seconds = cpu_seconds() - cpu


def peak_rss_mb() -> float:
    """Peak resident memory of this process or of the largest child it reaped (a LIBMF fit runs in
    one), whichever is larger; Linux reports kilobytes. The kernel's own peak restarts with
    reset_peak_rss, which keeps the peak it held before (_RESTARTED_PEAK_MB)."""
    usages = (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    return max([max(usage.ru_maxrss for usage in usages) / 1024, *_RESTARTED_PEAK_MB])


def _answer(sender: Connection, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Run in the child: send back `function(*args)`, or what went wrong."""
    try:
        reply = (True, function(*args))
    except Exception as error:
        reply = (False, f"{type(error).__name__}: {error}")
    sender.send(reply)


def call_in_subprocess(function: Callable[..., Result], *args: Any, timeout: float) -> Result:
    """`function(*args)` in a fresh (spawned) process, killed once `timeout` seconds have passed since
    its start, so that a hang in native code is a TimeoutError here instead of a hung caller. As with
    any spawn, the calling script needs its `if __name__ == "__main__"` guard (the child imports it)."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_answer, args=(sender, function, args), daemon=True)
    name = getattr(function, "__name__", repr(function))
    process.start()
    sender.close()  # the child holds the other copy: its exit ends the pipe
    try:
        if not receiver.poll(timeout):
            raise TimeoutError(f"{name} still running after {timeout:g} s in its subprocess: killed")
        try:
            succeeded, value = receiver.recv()
        except EOFError:
            process.join()
            raise RuntimeError(f"{name} ended (exit code {process.exitcode}) without an answer") from None
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        receiver.close()
    if not succeeded:
        raise RuntimeError(f"{name} failed in its subprocess: {value}")
    return value


@contextmanager
def busy_processes(count: int) -> Iterator[list["subprocess.Popen[bytes]"]]:
    """`count` processes each spinning a CPU-bound Python loop while the block runs (contention from
    other work on the machine); killed when the block ends, however it ends."""
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            processes.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        yield processes
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()


def _fold(folder: Path, fold: str = "u1") -> tuple[pd.DataFrame, pd.DataFrame]:
    """ML-100K's `fold`.base and the `fold`.test ratings whose user and item occur in its base
    (recsys' policy)."""
    split = fold_split(load_movielens("ml-100k", folder), fold)
    known = split.test["user"].isin(split.train["user"]) & split.test["item"].isin(split.train["item"])
    return split.train, split.test[known]


def fold_tensors(folder: Path, fold: str = "u1") -> tuple[RatingTensors, RatingTensors]:
    """`fold` encoded as recsys trains on it: the same test ratings as `_fold`, ids as compact indices."""
    encoded = encode_split(fold_split(load_movielens("ml-100k", folder), fold))
    return encoded.train, encoded.test


def load_shape(tensors: Path) -> tuple[RatingTensors, RatingTensors]:
    """The ratings `generate_shape` saved, and their first 1000 as the set evaluated after training."""
    saved = torch.load(tensors, weights_only=True)
    train = RatingTensors(saved["x"], saved["y"])
    return train, RatingTensors(train.x[:1000], train.y[:1000])


def _warm_up(config: RunConfig) -> None:
    """An engine's one-off start-up, before the clock, as the other contenders' imports are: numba
    loading the compiled kernels; for the device engine CUDA's context, the kernels torch loads on
    their first launch, Triton's compiles (for rows of this width, and steps of both kinds of length
    it compiles apart: a multiple of 16 or not) and a first graph capture, by two epochs of tiny
    fits; or torch.optim's first import (and CUDA's context)."""
    if config.engine == "compiled":
        load_kernels()
    elif config.engine == "device":
        one_model = dataclasses.replace(config, members=1)
        for ratings in (32, 17):
            _warm_up_fit(one_model, epochs=2, ratings=ratings, n_factors=config.n_factors)
    else:
        _warm_up_torch_optim(config.device)


def _warm_up_torch_optim(device: str = "cpu") -> None:
    """One AdamW step on a dummy parameter on `device`: torch.optim imports torch._dynamo (about a
    second) on first use, and CUDA starts its context on its first tensor; the clock must count
    neither, as it counts no contender's imports."""
    parameter = torch.nn.Parameter(torch.zeros(1, device=device))
    parameter.grad = torch.zeros(1, device=device)
    torch.optim.AdamW([parameter], fused=True).step()
    float(parameter.detach().sum())  # waits for the step: CUDA runs it asynchronously


def bench_recsys(
    folder: Path, model: str = "dotbias", device: str = "cpu", engine: str | None = None, fold: str = "u1"
) -> dict[str, Any]:
    """recsys' default run of `model` on `fold` (on `engine`; None: the one it chooses)."""
    dataset = load_movielens("ml-100k", folder)
    config = config_for(model, engine=engine, dataset="ml-100k", split=fold, device=device)
    _warm_up(config)
    with measured() as clocks:
        result = train_and_evaluate(dataset, config, progress=False)
    epochs = result.config.epochs * result.config.members  # an ensemble's members each train every rating
    return {
        "rmse": result.test["rmse"],
        **asdict(clocks),
        "samples_per_second": epochs * len(result.data.train) / clocks.seconds,
    }


def bench_fastai(folder: Path, fold: str = "u1") -> dict[str, Any]:
    """fastbook's recipe: collab_learner(n_factors=50, y_range=(0, 5.5)), fit_one_cycle(5, 5e-3, wd=0.1)."""
    from fastai.collab import Categorify, TabularCollab, collab_learner
    from fastai.data.block import TransformBlock

    train, test = _fold(folder, fold)
    frame = pd.concat([train, test], ignore_index=True)[["user", "item", "rating"]]
    with measured() as clocks:
        # What CollabDataLoaders.from_df builds, with the fold's test ratings as the validation set.
        splits = (list(range(len(train))), list(range(len(train), len(frame))))
        tabular = TabularCollab(
            frame, [Categorify], ["user", "item"], y_names=["rating"], y_block=TransformBlock(), splits=splits
        )
        dls = tabular.dataloaders(bs=64)
        learner = collab_learner(dls, n_factors=50, y_range=(0, 5.5))
        with learner.no_bar(), learner.no_logging():
            learner.fit_one_cycle(5, 5e-3, wd=0.1)
            predictions, targets = learner.get_preds()
    return {
        "rmse": rmse(predictions.squeeze(-1), targets.squeeze(-1)),
        **asdict(clocks),
        "samples_per_second": 5 * len(train) / clocks.seconds,
    }


def bench_surprise(folder: Path, contender: str = "surprise-svd", fold: str = "u1") -> dict[str, Any]:
    """Surprise's `contender` algorithm (see SURPRISE) with its defaults on `fold`."""
    import surprise

    train, test = _fold(folder, fold)
    with measured() as clocks:
        data = surprise.Dataset.load_from_df(
            train[["user", "item", "rating"]], surprise.Reader(rating_scale=(1, 5))
        )
        algorithm = getattr(surprise, SURPRISE[contender])(random_state=0)
        algorithm.fit(data.build_full_trainset())
        predictions = [algorithm.predict(u, i).est for u, i in zip(test["user"], test["item"], strict=True)]
    return {
        "rmse": rmse(torch.tensor(predictions), torch.tensor(test["rating"].to_numpy())),
        **asdict(clocks),
        "samples_per_second": algorithm.n_epochs * len(train) / clocks.seconds,
    }


def _peer_row(result: dict[str, Any]) -> dict[str, Any]:
    """A peer's ML-100K row from its timed fit: training samples per second in place of the rating
    count."""
    ratings = result.pop("ratings")
    return {**result, "samples_per_second": result["iterations"] * ratings / result["seconds"]}


def cornac_fit_rate(
    build: Callable[[], Any], pairs: list[tuple[Any, Any]], targets: torch.Tensor, settings: dict[str, Any]
) -> dict[str, Any]:
    """Build a cornac Dataset, fit cornac's MF (`settings` over its defaults) and rate `pairs` of raw
    ids with `rate` (clipped to the training ratings' range, as cornac's own RMSE does), all timed."""
    import cornac

    model = cornac.models.MF(**settings, seed=0)
    with measured() as clocks:
        data = build()
        model.fit(data)
        predictions = [model.rate(data.uid_map[user], data.iid_map[item]).item() for user, item in pairs]
    return {
        "rmse": rmse(torch.tensor(predictions), targets),
        **asdict(clocks),
        "threads": model.num_threads,
        "iterations": model.max_iter,
        "ratings": data.num_ratings,
    }


def cornac_dataset(train: RatingTensors, shape: tuple[int, int] | None = None) -> Any:
    """A cornac Dataset of already-encoded ratings (its ids are their own indices) of `shape` users
    and items (None: up to the largest ids): `from_uir`, a Python loop over every rating, takes
    minutes at the large shapes."""
    from cornac.data import Dataset

    n_users, n_items = shape or (int(train.x[:, 0].max()) + 1, int(train.x[:, 1].max()) + 1)
    columns = (np.ascontiguousarray(train.x[:, 0].numpy()), np.ascontiguousarray(train.x[:, 1].numpy()))
    return Dataset(
        num_users=n_users,
        num_items=n_items,
        uid_map={index: index for index in range(n_users)},
        iid_map={index: index for index in range(n_items)},
        uir_tuple=(*columns, train.y.numpy()),
        seed=0,
    )


def bench_cornac(folder: Path, contender: str, fold: str = "u1") -> dict[str, Any]:
    """cornac's MF with the `contender` settings on `fold`, through its own `Dataset.from_uir`."""
    from cornac.data import Dataset

    train, test = _fold(folder, fold)
    rows = list(train[["user", "item", "rating"]].itertuples(index=False, name=None))
    result = cornac_fit_rate(
        partial(Dataset.from_uir, rows, seed=0),
        list(zip(test["user"], test["item"], strict=True)),
        torch.tensor(test["rating"].to_numpy()),
        CORNAC_MF[contender],
    )
    return _peer_row(result)


def libmf_fit_predict(load: Load, settings: dict[str, Any]) -> dict[str, Any]:
    """Fit LIBMF (`settings` over pip libmf's defaults, on every available core) on `load()`'s training
    ratings and predict its test pairs; run it through `call_in_subprocess`, as LIBMF can hang."""
    from libmf import mf

    train, test = load()
    # Ids travel as float32, exact below 2**24 (ML-25M has 163K users).
    assert int(train.x.max()) < 2**24
    options = {name: default for name, _, default in mf.get_default_options()}
    options |= {"nr_threads": available_cores(), "quiet": True, **settings}
    ratings = np.empty((len(train), 3), dtype=np.float32)  # fit reads row-major [user, item, rating]
    ratings[:, :2], ratings[:, 2] = train.x.numpy(), train.y.numpy()
    pairs = np.asfortranarray(test.x.numpy(), dtype=np.float32)  # predict reads column-major
    model = mf.MF(**options)
    with measured() as clocks:
        model.fit(ratings)
        predictions = model.predict(pairs)
    return {
        "rmse": rmse(torch.from_numpy(predictions), test.y),
        **asdict(clocks),
        "threads": options["nr_threads"],
        "iterations": options["nr_iters"],
        "ratings": len(train),
    }


def bench_libmf(folder: Path, contender: str, fold: str = "u1", timeout: float = 120.0) -> dict[str, Any]:
    """LIBMF with the `contender` settings on `fold` (ids encoded before the clocks start, as it needs)."""
    result = call_in_subprocess(
        libmf_fit_predict, partial(fold_tensors, folder, fold), LIBMF[contender], timeout=timeout
    )
    return _peer_row(result)


def bench_lenskit(
    folder: Path, contender: str, python: str, fold: str = "u1", timeout: float = 600.0
) -> dict[str, Any]:
    """LensKit's `contender` on `fold`, fitted by scripts/lenskit_peer.py under `python` (an interpreter
    with LensKit), on the same ratings as the other peers; its own clocks time the fit and prediction."""
    train, test = _fold(folder, fold)
    algorithm, settings = LENSKIT[contender]
    with tempfile.TemporaryDirectory() as scratch:
        paths = [Path(scratch) / f"{part}.csv" for part in ("train", "test")]
        for frame, path in zip((train, test), paths, strict=True):
            frame[["user", "item", "rating"]].to_csv(path, index=False)
        command = [python, str(LENSKIT_PEER), algorithm, json.dumps(settings), *map(str, paths)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"lenskit_peer.py {algorithm} failed (exit {done.returncode}): {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def synthetic_shape(shape: str) -> RatingsDataset:
    """MovieLens-like synthetic ratings with the user, item and rating counts of `shape`."""
    n_users, n_items, n_ratings = SHAPES[shape]
    return make_synthetic(SyntheticConfig(n_users=n_users, n_items=n_items, n_ratings=n_ratings))[0]


def encoded_tensors(dataset: RatingsDataset) -> RatingTensors:
    """All ratings as compact training tensors (ids encoded once, pandas dropped)."""
    return encode_split(make_split(dataset, "random", test_frac=0.001)).train


def generate_shape(shape: str, path: Path) -> dict[str, Any]:
    """Generate and encode synthetic data shaped like `shape` and save its tensors to `path`.

    A separate process from the training run, so the training run's peak RSS is its own.
    """
    with measured() as clocks:
        train = encoded_tensors(synthetic_shape(shape))
        with path.open("wb") as file:
            torch.save({"x": train.x, "y": train.y}, file)
            # On disk before this process ends, so writing it back does not slow the training runs.
            file.flush()
            os.fsync(file.fileno())
    return {"shape": shape, "ratings": len(train), "generate_seconds": clocks.seconds}


def write_ratings_files(shape: str, folder: Path) -> dict[str, Any]:
    """Synthetic ratings shaped like `shape` written as ratings.csv (MovieLens' header: userId,
    movieId, rating, timestamp) and ratings.parquet in `folder`, for the file-load measurements."""
    ratings = synthetic_shape(shape).ratings.rename(columns={"user": "userId", "item": "movieId"})
    table = pa.Table.from_pandas(ratings, preserve_index=False)
    paths = {"csv": folder / "ratings.csv", "parquet": folder / "ratings.parquet"}
    atomic_write(paths["csv"], lambda file: pa_csv.write_csv(table, file))
    atomic_write(paths["parquet"], lambda file: pq.write_table(table, file))
    return {"ratings": len(ratings), **{kind: str(path) for kind, path in paths.items()}}


# Readers of the ratings file written by write_ratings_files: recsys' own (which checks every value and
# drops duplicate pairs) and the libraries it was chosen among, each with its defaults.
FILE_READERS = (
    "recsys-csv",
    "pandas-pyarrow-csv",
    "pandas-c-csv",
    "pyarrow-csv",
    "polars-csv",
    "duckdb-csv",
    "recsys-parquet",
    "pandas-parquet",
    "polars-parquet",
)


def _file_reader(reader: str) -> Callable[[Path], Any]:
    """The function that reads the file for `reader`; its library imported here, before the baseline."""
    if reader.startswith("recsys"):
        from recsys.data.ratings_file import load_ratings

        return lambda path: load_ratings(path).ratings
    if reader == "pandas-pyarrow-csv":
        return partial(pd.read_csv, engine="pyarrow")
    if reader == "pandas-c-csv":
        return pd.read_csv
    if reader == "pyarrow-csv":  # to pandas, as recsys and pandas end
        return lambda path: pa_csv.read_csv(path).to_pandas(split_blocks=True, self_destruct=True)
    if reader == "pandas-parquet":
        return pd.read_parquet
    if reader.startswith("polars"):  # a polars table, not pandas
        import polars

        return polars.read_csv if reader.endswith("csv") else polars.read_parquet
    if reader == "duckdb-csv":  # to pandas
        import duckdb

        return lambda path: duckdb.read_csv(str(path)).df()
    raise ValueError(f"unknown reader {reader!r}")


def _resident_mb() -> float:
    """This process's resident memory now (Linux)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def bench_file_load(reader: str, folder: Path) -> dict[str, Any]:
    """Read the ratings file of `folder` with `reader`: rows per second and the memory it took beyond
    what the process held before (peak RSS less that baseline), against the table it ended with."""
    read = _file_reader(reader)
    path = folder / ("ratings.parquet" if reader.endswith("parquet") else "ratings.csv")
    baseline = _resident_mb()
    with measured() as clocks:
        table = read(path)
    size = table.memory_usage(deep=True).sum() if hasattr(table, "memory_usage") else table.estimated_size()
    table_mb = size / 2**20
    added = peak_rss_mb() - baseline
    return {
        "reader": reader,
        "rows": len(table),
        "seconds": clocks.seconds,
        "cpu_seconds": clocks.cpu_seconds,
        "rows_per_second": len(table) / clocks.seconds,
        "table_mb": table_mb,
        "peak_added_mb": added,
        "peak_over_table": added / table_mb,
    }


def _per_epoch(result: dict[str, Any]) -> dict[str, Any]:
    """A throughput row from a timed fit of `iterations` epochs over `ratings` ratings."""
    return {
        **result,
        "epoch_seconds": result["seconds"] / result["iterations"],
        "ratings_per_second": result["iterations"] * result["ratings"] / result["seconds"],
    }


def bench_throughput(
    shape: str, model: str, tensors: Path, threads: int | None = None, **overrides: Any
) -> dict[str, Any]:
    """One epoch of one `model` (its defaults plus `overrides`, one member where its default is an
    ensemble: an epoch of one model, as the peers' are) on the tensors `generate_shape` saved;
    `threads` goes to `fit` only when given (None: fit's own default, every available core)."""
    train, valid = load_shape(tensors)
    n_users, n_items = int(train.x[:, 0].max()) + 1, int(train.x[:, 1].max()) + 1
    one_model = {"epochs": 1, "n_factors": SHAPE_FACTORS, "members": 1}
    config = config_for(model, y_range=(0.0, 5.5), **{**one_model, **overrides})
    network = model_for(config, n_users, n_items, torch.Generator().manual_seed(0))
    thread_option: dict[str, Any] = {} if threads is None else {"threads": threads}
    _warm_up(config)
    with measured() as clocks:
        history = fit(
            network, train, valid, config, torch.Generator().manual_seed(0), progress=False, **thread_option
        )
    return {
        "shape": shape,
        "contender": f"recsys-{model}",
        "engine": config.engine,
        "batch_size": config.batch_size,
        "sparse": config.sparse,
        "device": config.device,
        "threads": threads,
        **_per_epoch({**asdict(clocks), "iterations": config.epochs, "ratings": len(train)}),
        # The epochs alone, without fit's setup (building the optimizers, or the compiled engine's
        # sorting of the ratings into blocks), each with its validation.
        "trained_epoch_seconds": sum(stats.seconds for stats in history) / len(history),
        "final_valid_rmse": history[-1].valid_rmse,
    }


def bench_convergence(shape: str, tensors: Path, engine: str, device: str = "cpu") -> dict[str, Any]:
    """One dotbias model with `engine`'s defaults at SHAPE_FACTORS (autograd: LARGE_AUTOGRAD for 5
    epochs, the trainer before the compiled engine; device: DEVICE_EXTRA_EPOCHS more) on 99% of the
    shape's ratings, trained on `device`: the validation RMSE on the held-out 1% after each epoch, the
    seconds since `fit` started (moving the ratings to the device and setup included) at each, and on
    a GPU its peak memory."""
    saved = torch.load(tensors, weights_only=True)
    order = torch.randperm(len(saved["y"]), generator=torch.Generator().manual_seed(0))
    held_out = len(order) // 100
    valid = RatingTensors(saved["x"][order[:held_out]], saved["y"][order[:held_out]])
    train = RatingTensors(saved["x"][order[held_out:]], saved["y"][order[held_out:]])
    del saved, order
    n_users, n_items = int(train.x[:, 0].max()) + 1, int(train.x[:, 1].max()) + 1
    large = {**LARGE_AUTOGRAD, "epochs": 5} if engine == "autograd" else {}
    config = config_for(
        "dotbias",
        engine=engine,
        y_range=(0.0, 5.5),
        n_factors=SHAPE_FACTORS,
        members=1,
        device=device,
        **large,
    )
    if engine == "device":
        config = replace(config, epochs=config.epochs + DEVICE_EXTRA_EPOCHS)
    network = model_for(config, n_users, n_items, torch.Generator().manual_seed(0))
    elapsed: list[float] = []
    _warm_up(config)
    with measured() as clocks:
        start = time.perf_counter()
        history = fit(
            network,
            train,
            valid,
            config,
            torch.Generator().manual_seed(0),
            progress=False,
            on_epoch=lambda _: elapsed.append(time.perf_counter() - start),
        )
    on_gpu = device.startswith("cuda")
    return {
        "shape": shape,
        "engine": engine,
        "device": torch.cuda.get_device_name(device) if on_gpu else "cpu",
        **asdict(clocks),
        "valid_rmse": [stats.valid_rmse for stats in history],
        "elapsed": elapsed,
        # An epoch once the first (which loads kernels and moves the ratings) is past.
        "epoch_seconds": float(np.median(np.diff(elapsed))) if len(elapsed) > 1 else elapsed[0],
        **({"peak_device_mb": torch.cuda.max_memory_allocated(device) / 2**20} if on_gpu else {}),
    }


def time_to_reach(rows: list[dict[str, Any]], reference: str) -> pd.DataFrame:
    """Per engine: its final validation RMSE and seconds, and the seconds it took to reach the
    `reference` engine's final validation RMSE (blank if it never did)."""
    target = next(row for row in rows if row["engine"] == reference)["valid_rmse"][-1]
    table = []
    for row in rows:
        reached = [t for t, rmse in zip(row["elapsed"], row["valid_rmse"], strict=True) if rmse <= target]
        table.append(
            {
                "shape": row["shape"],
                "engine": row["engine"],
                "device": row.get("device", "cpu"),
                **({"processes": row["processes"]} if row.get("processes") else {}),
                "epochs": len(row["valid_rmse"]),
                "final_valid_rmse": row["valid_rmse"][-1],
                "seconds": row["seconds"],
                "cpu_seconds": row["cpu_seconds"],
                "epoch_seconds": row.get("epoch_seconds"),
                f"seconds_to_{reference}_final": reached[0] if reached else None,
                **({"peak_device_mb": row["peak_device_mb"]} if "peak_device_mb" in row else {}),
            }
        )
    frame = pd.DataFrame(table)
    reference_seconds = frame.loc[frame["engine"] == reference, "seconds"].iloc[0]
    frame["ratio"] = frame[f"seconds_to_{reference}_final"] / reference_seconds
    return frame


def bench_peer_throughput(
    shape: str, contender: str, tensors: Path, iterations: int, timeout: float = 600.0
) -> dict[str, Any]:
    """`iterations` epochs of LIBMF or cornac (the `contender` settings) on the tensors `generate_shape`
    saved, then predicting the first 1000 (as recsys' epoch evaluates them); LIBMF in a child process."""
    if contender in LIBMF:
        settings = {**LIBMF[contender], "k": SHAPE_FACTORS, "nr_iters": iterations}
        result = call_in_subprocess(
            libmf_fit_predict, partial(load_shape, tensors), settings, timeout=timeout
        )
    else:
        train, valid = load_shape(tensors)
        settings = {**CORNAC_MF[contender], "k": SHAPE_FACTORS, "max_iter": iterations}
        result = cornac_fit_rate(partial(cornac_dataset, train), valid.x.tolist(), valid.y, settings)
    result["final_valid_rmse"] = result.pop("rmse")
    return {"shape": shape, "contender": contender, "factors": SHAPE_FACTORS, **_per_epoch(result)}


def bench_load(name: str, folder: Path) -> dict[str, Any]:
    """Seconds to parse and encode a real dataset found locally."""
    with measured() as total:
        with measured() as loading:
            dataset = load_movielens(name, folder)
        encode_split(make_split(dataset, "random"))
    return {
        "dataset": name,
        "ratings": len(dataset.ratings),
        "load_seconds": loading.seconds,
        "load_and_encode_seconds": total.seconds,
    }


def _groups(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    """`keys` and, where the rows have it, the `contended` mark: quiet and loaded runs stay apart."""
    return [*keys, *(["contended"] if "contended" in frame else [])]


def median_runs(rows: list[dict[str, Any]], key: str = "contender") -> pd.DataFrame:
    """One row per `key` (quiet and contended apart) from repeated runs: the median of each measure,
    the fastest and slowest `seconds`, and the number of runs."""
    frame = pd.DataFrame(rows)
    grouped = frame.groupby(_groups(frame, [key]), sort=False)
    medians = grouped.median(numeric_only=True)
    medians["seconds_min"] = grouped["seconds"].min()
    medians["seconds_max"] = grouped["seconds"].max()
    medians["runs"] = grouped.size()
    return medians.reset_index()


def fold_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per contender from its runs on the folds: `rmse_mean` and `rmse_sd` (the sample standard
    deviation, ddof=1: the folds are a sample of the splits one could draw), the mean of every other
    measure, and the number of folds that gave a result."""
    frame = pd.DataFrame(rows)
    grouped = frame.groupby("contender", sort=False)
    table = grouped.mean(numeric_only=True).rename(columns={"rmse": "rmse_mean"})
    table["rmse_sd"] = grouped["rmse"].std(ddof=1)
    table["folds"] = grouped.size()
    return table.reset_index()


def ratio_table(rows: list[dict[str, Any]], reference: str) -> pd.DataFrame:
    """The u1 rows with time ratios against `reference` run quiet (how many times slower than it)."""
    frame = pd.DataFrame(rows)
    chosen = frame["contender"] == reference
    if "contended" in frame:
        chosen &= frame["contended"] == "no"
    base = frame[chosen].iloc[0]
    frame["seconds_ratio"] = frame["seconds"] / base["seconds"]
    frame["wall_ratio"] = frame["wall_seconds"] / base["wall_seconds"]
    return frame


def contention_table(rows: list[dict[str, Any]], keys: list[str]) -> pd.DataFrame:
    """For each measurement (rows alike in `keys`) run both quiet and contended: the median seconds and
    CPU seconds of each, and `ratio`, contended seconds over quiet."""
    frame = pd.DataFrame(rows)
    if "contended" not in frame or not (frame["contended"] == "yes").any():
        return pd.DataFrame()
    medians = frame.groupby([*keys, "contended"], sort=False, dropna=False)[
        ["seconds", "cpu_seconds"]
    ].median()
    table = medians.unstack("contended").dropna()
    table.columns = [
        f"{measure}_{'contended' if mark == 'yes' else 'quiet'}" for measure, mark in table.columns
    ]
    table["ratio"] = table["seconds_contended"] / table["seconds_quiet"]
    order = ["seconds_quiet", "seconds_contended", "ratio", "cpu_seconds_quiet", "cpu_seconds_contended"]
    return table[order].reset_index()


# --- Top-N lists: a peer scoring recsys' u1 lists, and the time and memory of full ranking ---------

# The models whose full ranking of u1 is timed, each with its defaults (one training each).
RANKING_MODELS = ("dot", "dotbias", "svdpp", "bpmf", "linear", "embproj")
RANKING_ROUNDS = 3  # evaluate_ranking runs per measurement; the fastest is reported
RANKING_LIST = max(KS)  # the length of the lists cornac scores
# cornac.metrics classes whose per-user definition is recsys' at every k: precision tp/k (k also for a
# user with fewer candidates), recall tp/|relevant|, NDCG with binary gain (2^1 - 1) and the ideal
# over min(k, |relevant|) hits, hit ratio. cornac's MRR is over the whole ranking (see cornac_scores).
CORNAC_AT_K = {"precision": "Precision", "recall": "Recall", "ndcg": "NDCG", "hit_rate": "HitRatio"}
AGREEMENT_TOLERANCE = 1e-6
# The scale measurement at a shape (ML-25M's, say): its users, items and training ratings, a test set
# a ninth as large (a 90/10 split's), and a sample of the judged users ranked against every item.
RANKING_SHAPE = "ml-25m"
RANKING_SAMPLE = 10_000
RANKING_SCALE = (0.5, 5.0)  # ML-25M's half stars
# The synthetic ratings' make-up: each user's share of them log-normal (sigma ACTIVITY_SIGMA: the
# busiest users rate tens of times what the median one does), item popularity Zipf-like (the most
# popular item about 0.5% of the ratings, so that none is rated by nearly every user), half stars
# around RATING_MEAN.
ACTIVITY_SIGMA = 1.1
POPULARITY_EXPONENT = 0.6
RATING_MEAN, RATING_SD = 3.5, 1.0


def u1_ranking(folder: Path, model: str) -> tuple[torch.nn.Module, EncodedSplit, RankingTask]:
    """`model` trained with its defaults on ML-100K u1, its encoded split, and the ranking task of
    that split: relevant a test rating of at least 4 (relevance_threshold of 1-5 stars)."""
    dataset = load_movielens("ml-100k", folder)
    result = train_and_evaluate(dataset, config_for(model, dataset="ml-100k", split="u1"), progress=False)
    data = result.data
    threshold, unit = relevance_threshold(dataset.rating_scale), result.config.unit
    task = ranking_task(data.train, data.test, len(data.users), len(data.items), threshold, rating_unit=unit)
    return result.model, data, task


def relevant_lists(task: RankingTask) -> list[np.ndarray]:
    """Each judged user's relevant items, in `task.users` order."""
    return [task.relevant_of(position)[0].numpy() for position in range(len(task.users))]


def cornac_scores(lists: np.ndarray, relevant: list[np.ndarray], ks: tuple[int, ...]) -> dict[str, float]:
    """The mean over users of cornac's per-user metrics of `lists` (recsys' top lists, best first, -1
    past a user's last candidate) against each user's `relevant` items: CORNAC_AT_K at each k, and
    "mrr@k", cornac's MRR of the list cut at k, a list without a hit counting 0 (cornac's MRR raises
    on it: it reads the whole ranking, where every judged user has a hit)."""
    from cornac import metrics

    values: dict[str, list[float]] = {}
    for k in ks:
        at_k = {name: getattr(metrics, cls)(k=k) for name, cls in CORNAC_AT_K.items()}
        for row, positives in zip(lists, relevant, strict=True):
            ranked = row[row >= 0]
            for name, metric in at_k.items():
                values.setdefault(f"{name}@{k}", []).append(metric.compute(gt_pos=positives, pd_rank=ranked))
            values.setdefault(f"mrr@{k}", []).append(_cornac_mrr(ranked[:k], positives))
    return {name: float(np.mean(found)) for name, found in values.items()}


def _cornac_mrr(ranked: np.ndarray, positives: np.ndarray) -> float:
    """cornac's MRR of `ranked`; 0 where no item of it is relevant (cornac raises there)."""
    from cornac.metrics import MRR

    try:
        return float(MRR().compute(gt_pos=positives, pd_rank=ranked))
    except ValueError:
        return 0.0


def cornac_full_scores(
    rankings: np.ndarray, relevant: list[np.ndarray], scores: np.ndarray | None = None
) -> dict[str, float]:
    """cornac's MRR and MAP over each user's whole ranking of candidates (`rankings`: recsys' lists of
    every candidate, -1 padded): MAP from scores that fall strictly down each list, so ties stand as
    recsys ordered them; with `scores` ((users, n_items), the scorer's), "map_own_ties" too, cornac's MAP
    from those scores, which ranks tied items at the worst of their places (rankdata "max")."""
    from cornac.metrics import MAP, MRR

    found: dict[str, list[float]] = {
        "mrr": [],
        "map": [],
        **({"map_own_ties": []} if scores is not None else {}),
    }
    for user, (row, positives) in enumerate(zip(rankings, relevant, strict=True)):
        ranked = row[row >= 0]
        found["mrr"].append(float(MRR().compute(gt_pos=positives, pd_rank=ranked)))
        falling = -np.arange(len(ranked), dtype=np.float64)
        found["map"].append(float(MAP().compute(item_indices=ranked, pd_scores=falling, gt_pos=positives)))
        if scores is not None:
            own = scores[user, ranked].astype(np.float64)
            found["map_own_ties"].append(
                float(MAP().compute(item_indices=ranked, pd_scores=own, gt_pos=positives))
            )
    return {name: float(np.mean(values)) for name, values in found.items()}


def agreement_rows(
    scorer: str, ours: dict[str, float], theirs: dict[str, float], full: str
) -> list[dict[str, Any]]:
    """One row per metric cornac computed (`theirs`, keyed "name@k"): recsys' value (`ours`, the
    same key; "name@all" is read as "name@`full`", the whole ranking), cornac's and their absolute
    difference; `compared` says whether the definitions match ("exact"), match once cornac's input
    is cut at k ("cut at k"), or differ ("ties differ": cornac's MAP ranks ties at their worst)."""
    rows = []
    for key, value in theirs.items():
        name, k = key.split("@")
        compared = (
            "ties differ"
            if name == "map_own_ties"
            else "cut at k"
            if name == "mrr" and k != "all"
            else "exact"
        )
        recsys = ours[f"{name.removesuffix('_own_ties')}@{full if k == 'all' else k}"]
        rows.append(
            {
                "scorer": scorer,
                "metric": name,
                "k": k,
                "recsys": recsys,
                "cornac": value,
                "difference": abs(recsys - value),
                "compared": compared,
            }
        )
    return rows


def independent_top(scores: np.ndarray, rated: list[np.ndarray], k: int) -> np.ndarray:
    """Each user's top-`k` items by `scores` ((users, n_items)) among those not in `rated` (a list per
    user), by a plain sort: the check on recsys' masking and top-k."""
    lists = np.full((len(scores), k), -1, dtype=np.int64)
    for user, (row, seen) in enumerate(zip(scores, rated, strict=True)):
        masked = row.astype(np.float64)
        masked[seen] = -np.inf
        order = np.argsort(-masked, kind="stable")[:k]
        order = order[masked[order] > -np.inf]
        lists[user, : len(order)] = order
    return lists


def same_lists(scores: np.ndarray, ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Whether two sets of top lists are the same up to the order of tied items: the same length
    each, and the same scores place by place."""
    if ours.shape != theirs.shape or not np.array_equal(ours >= 0, theirs >= 0):
        return False
    rows = np.arange(len(scores))[:, None]
    valid = ours >= 0
    return bool(np.array_equal(scores[rows, ours.clip(0)][valid], scores[rows, theirs.clip(0)][valid]))


def relevant_by_sets(data: EncodedSplit, threshold: float) -> dict[int, np.ndarray]:
    """The relevant items of each user with any, by Python sets: test ratings at or above `threshold`
    of items the user did not rate in training (the check on ranking_task)."""
    trained = set(map(tuple, data.train.x.tolist()))
    found: dict[int, set[int]] = {}
    for (user, item), rating in zip(data.test.x.tolist(), data.test.y.tolist(), strict=True):
        if rating >= threshold and (user, item) not in trained:
            found.setdefault(user, set()).add(item)
    return {user: np.array(sorted(items)) for user, items in sorted(found.items())}


def bench_ranking_agreement(folder: Path) -> dict[str, Any]:
    """cornac scoring recsys' u1 top-RANKING_LIST lists of dotbias (its defaults) and of the popularity
    chart against the same relevant sets, beside recsys' evaluate_ranking at KS and over the whole
    ranking; with independent checks of the relevant sets and of the lists, and `tie_shift`: how far
    evaluate_ranking's values at KS move when the whole ranking's length is asked for beside them
    (torch.topk orders tied scores differently for a different k, and a tie at the cut changes
    which items are in the list)."""
    model, data, task = u1_ranking(folder, "dotbias")
    n_items = len(data.items)
    relevant = relevant_lists(task)
    assert task.threshold is not None
    by_sets = relevant_by_sets(data, task.threshold)
    relevant_match = list(by_sets) == task.users.tolist() and all(
        np.array_equal(mine, theirs) for mine, theirs in zip(by_sets.values(), relevant, strict=True)
    )
    rated = [
        task.rated_items[task.rated_starts[user] : task.rated_starts[user + 1]].numpy() for user in task.users
    ]
    popularity = torch.bincount(data.train.x[:, 1], minlength=n_items).double()
    scorers: dict[str, Scorer] = {
        "dotbias": model_scorer(model, n_items),
        "most-popular": constant_scorer(popularity),
    }
    rows: list[dict[str, Any]] = []
    lists_match, tie_shift = {}, {}
    for name, scorer in scorers.items():
        with torch.no_grad():
            scores = scorer(task.users).float().numpy()
        lists = top_lists(scorer, task, RANKING_LIST)
        lists_match[name] = same_lists(scores, lists, independent_top(scores, rated, RANKING_LIST))
        # Each of recsys' figures from lists as long as those cornac gets: top_lists' at KS, the whole
        # ranking's alone (see tie_shift).
        ours = evaluate_ranking(scorer, task, KS) | evaluate_ranking(scorer, task, (n_items,))
        together = evaluate_ranking(scorer, task, (*KS, n_items))
        tie_shift[name] = max(abs(together[key] - ours[key]) for key in ours if key != "users")
        theirs = cornac_scores(lists, relevant, KS)
        full = cornac_full_scores(top_lists(scorer, task, n_items), relevant, scores)
        theirs |= {f"{metric}@all": value for metric, value in full.items()}
        rows += agreement_rows(name, ours, theirs, str(n_items))
    compared = [row["difference"] for row in rows if row["compared"] != "ties differ"]
    return {
        "part": "agreement",
        "users": len(task.users),
        "items": n_items,
        "relevant_sets_match": relevant_match,
        **{f"lists_match_{name}": match for name, match in lists_match.items()},
        **{f"tie_shift_{name}": shift for name, shift in tie_shift.items()},
        "max_difference": max(compared),
        "tolerance": AGREEMENT_TOLERANCE,
        "agree": max(compared) <= AGREEMENT_TOLERANCE,
        "rows": rows,
    }


def bench_ranking_speed(folder: Path, model: str, rounds: int = RANKING_ROUNDS) -> dict[str, Any]:
    """evaluate_ranking at KS of `model` (trained once, its defaults) over every judged u1 user against
    every item, timed `rounds` times: the fastest run's wall and CPU seconds."""
    trained, data, task = u1_ranking(folder, model)
    n_items = len(data.items)
    scorer = model_scorer(trained, n_items)
    runs = []
    for _ in range(rounds):
        with measured() as clocks:
            result = evaluate_ranking(scorer, task, KS)
        runs.append(clocks)
    best = min(runs, key=lambda clocks: clocks.seconds)
    return {
        "part": "speed",
        "model": model,
        "scorer": "bilinear form" if _has_forms(trained) else "forward",
        "users": len(task.users),
        "items": n_items,
        "threads": torch.get_num_threads(),
        "seconds": best.seconds,
        "cpu_seconds": best.cpu_seconds,
        "seconds_max": max(clocks.seconds for clocks in runs),
        "runs": rounds,
        "ndcg@10": result["ndcg@10"],
        "recall@20": result["recall@20"],
    }


def _has_forms(model: torch.nn.Module) -> bool:
    """Whether model_scorer scores `model` by matrix products (every member a bilinear form)."""
    return isinstance(model, RatingModel) and all(
        member.bilinear_form() is not None for member in model.member_models()
    )


def synthetic_ranking_split(
    n_users: int, n_items: int, n_train: int, n_test: int, seed: int = 0
) -> tuple[RatingTensors, RatingTensors]:
    """`n_train` training and `n_test` test ratings, no (user, item) pair twice across both: each
    user's activity log-normal, items drawn by Zipf-like popularity, half-star ratings in
    RANKING_SCALE; pairs drawn until enough distinct ones are found, then split at random."""
    needed = n_train + n_test
    if needed > n_users * n_items:
        raise ValueError(f"{needed} distinct pairs asked for, of {n_users} x {n_items}")
    generator = torch.Generator().manual_seed(seed)
    popularity = torch.arange(1, n_items + 1, dtype=torch.float64) ** -POPULARITY_EXPONENT
    activity = torch.exp(torch.randn(n_users, generator=generator, dtype=torch.float64) * ACTIVITY_SIGMA)
    users_by, items_by = (
        _cumulative_shares(weights[torch.randperm(len(weights), generator=generator)])
        for weights in (activity, popularity)
    )
    keys = torch.zeros(0, dtype=torch.long)
    while len(keys) < needed:
        draws = int((needed - len(keys)) * 1.15) + 1
        users = _draw(users_by, draws, generator)
        keys = torch.unique(torch.cat([keys, users * n_items + _draw(items_by, draws, generator)]))
        del users
    keys = keys[torch.randperm(len(keys), generator=generator)[:needed]]
    x = torch.stack([keys // n_items, keys % n_items], dim=1)
    del keys
    stars = torch.round((torch.randn(needed, generator=generator) * RATING_SD + RATING_MEAN) * 2) / 2
    y = stars.clamp(*RANKING_SCALE)
    return RatingTensors(x[:n_train], y[:n_train]), RatingTensors(x[n_train:], y[n_train:])


def _cumulative_shares(weights: Tensor) -> Tensor:
    """The running sum of `weights` as shares of their total: what _draw searches."""
    cumulative = torch.cumsum(weights, 0)
    return cumulative / cumulative[-1]


def _draw(cumulative: Tensor, count: int, generator: torch.Generator) -> Tensor:
    """`count` indices drawn with replacement, each with the share of the weights `cumulative` sums."""
    picks = torch.rand(count, generator=generator, dtype=torch.float64)
    return torch.searchsorted(cumulative, picks).clamp(max=len(cumulative) - 1)


def sample_task(task: RankingTask, positions: Tensor) -> RankingTask:
    """`task` judging only the users at `positions` of `task.users` (kept in ascending order), their
    relevant items sliced alike; what each user rated and the popularity stay as they are."""
    positions = torch.sort(positions).values
    starts = task.relevant_starts
    sizes = starts[positions + 1] - starts[positions]
    kept = torch.zeros(len(positions) + 1, dtype=torch.long)
    kept[1:] = torch.cumsum(sizes, 0)
    index = torch.repeat_interleave(starts[positions] - kept[:-1], sizes) + torch.arange(int(kept[-1]))
    return dataclasses.replace(
        task,
        users=task.users[positions],
        relevant_starts=kept,
        relevant_items=task.relevant_items[index],
        relevant_gains=task.relevant_gains[index],
    )


# This process's peak RSS each time reset_peak_rss restarted it.
_RESTARTED_PEAK_MB: list[float] = []


def _status_mb(field: str) -> float | None:
    """A memory figure of this process from /proc/self/status (VmRSS now, VmHWM its peak), in MB."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return None


def reset_peak_rss() -> bool:
    """Give freed heap memory back (glibc's malloc_trim) and restart this process's peak RSS (VmHWM,
    and with it getrusage's ru_maxrss) from its resident memory now (Linux's clear_refs 5), keeping
    the peak before in _RESTARTED_PEAK_MB for peak_rss_mb; False where either cannot be done."""
    before = _status_mb("VmHWM")
    try:
        ctypes.CDLL(None).malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
    except (OSError, AttributeError):
        return False
    if before is not None:
        _RESTARTED_PEAK_MB.append(before)
    return True


def peak_added_while(call: Callable[[], Result]) -> tuple[Result, float | None]:
    """`call()`'s result and the most memory it added to this process at once: its peak RSS less the
    RSS before it (None where the peak cannot be restarted)."""
    restarted = reset_peak_rss()
    before = _status_mb("VmRSS")
    result = call()
    peak = _status_mb("VmHWM")
    return result, (peak - before if restarted and peak is not None and before is not None else None)


def _timed(call: Callable[[], Any]) -> Clocks:
    """The wall and CPU seconds `call()` took."""
    with measured() as clocks:
        call()
    return clocks


def bench_ranking_scale(
    shape: str = RANKING_SHAPE, sample: int = RANKING_SAMPLE, rounds: int = RANKING_ROUNDS, seed: int = 0
) -> dict[str, Any]:
    """Full ranking at `shape`: synthetic training and test ratings, the ranking task built from them,
    `sample` judged users drawn at random and ranked against every item by a dotbias model of
    SHAPE_FACTORS factors with its random initial weights; evaluate_ranking at KS timed `rounds`
    times (the fastest), and the memory it added: with the default block, for a tenth of the sample
    too, and with blocks four times as large."""
    n_users, n_items, n_train = SHAPES[shape]
    with measured() as making:
        train, test = synthetic_ranking_split(n_users, n_items, n_train, n_train // 9, seed)
    with measured() as building:
        task = ranking_task(
            train, test, n_users, n_items, relevance_threshold(RANKING_SCALE),
            rating_unit=rating_unit(RANKING_SCALE),
        )  # fmt: skip
    del train, test
    judged = len(task.users)
    generator = torch.Generator().manual_seed(seed)
    sampled = sample_task(task, torch.randperm(judged, generator=generator)[:sample])
    model = build_model("dotbias", n_users, n_items, SHAPE_FACTORS, (0.0, 5.5), generator)
    scorer = model_scorer(model, n_items)
    runs, added = [], []
    for _ in range(rounds):
        clocks, grew = peak_added_while(partial(_timed, partial(evaluate_ranking, scorer, sampled, KS)))
        runs.append(clocks)
        added.append(grew)
    best = min(runs, key=lambda clocks: clocks.seconds)
    tenth = sample_task(sampled, torch.arange(max(1, len(sampled.users) // 10)))
    _, tenth_added = peak_added_while(partial(evaluate_ranking, scorer, tenth, KS))
    larger, larger_added = peak_added_while(
        partial(_timed, partial(evaluate_ranking, scorer, sampled, KS, 4 * BLOCK_ENTRIES))
    )
    known = [grew for grew in added if grew is not None]
    return {
        "part": "scale",
        "shape": shape,
        "users": len(sampled.users),
        "items": n_items,
        "training_ratings": int(task.rated_starts[-1]),
        "judged_users": judged,
        "threads": torch.get_num_threads(),
        "block_users": max(1, BLOCK_ENTRIES // n_items),
        "seconds": best.seconds,
        "cpu_seconds": best.cpu_seconds,
        "seconds_max": max(clocks.seconds for clocks in runs),
        "runs": rounds,
        "users_per_second": len(sampled.users) / best.seconds,
        "peak_added_mb": max(known) if known else None,
        "peak_added_mb_tenth": tenth_added,
        "peak_added_mb_4x_block": larger_added,
        "seconds_4x_block": larger.seconds,
        "generate_seconds": making.seconds,
        "task_seconds": building.seconds,
        "resident_mb": _status_mb("VmRSS"),
    }


def bench_ranking(folder: Path | None, part: str, **options: Any) -> dict[str, Any]:
    """One measurement of the ranking task: "agreement" and "speed" (`model`) on ML-100K u1 in
    `folder`, "scale" at a synthetic shape."""
    if part == "scale":
        return bench_ranking_scale(**options)
    assert folder is not None, f"the ranking task's {part} part needs ML-100K"
    if part == "agreement":
        return bench_ranking_agreement(folder)
    return bench_ranking_speed(folder, **options)


# --- Learning to rank: recsys' ranking models beside implicit's and cornac's, on u1 and at scale ------

# Threads of every contender's fit: recsys' `threads` (numba's), implicit's `num_threads`, cornac's
# `num_threads`, and torch's meanwhile; the workers run with OPENBLAS_NUM_THREADS=1, as implicit asks.
LTR_THREADS = 2
LTR_SEED = 0  # the peers' initialisation and sampling, and the validation draw of the search
# recsys' contenders on u1, each with its registry defaults: the ranking models, and dotbias (a rating
# model, ranking by its predicted ratings) for reference.
RECSYS_RANKERS = ("ials", "bpr", "dotbias")
# Settings over the registry's defaults for one more row per model, "recsys-<model>-settings" (say
# {"ials": {"n_factors": 128, "alpha": 5.0}}); empty: the defaults alone.
RECSYS_RANKING_SETTINGS: dict[str, dict[str, Any]] = {}
POPULAR = "most-popular"  # every user's list the training ratings' popularity chart
# The peers, each searched over its grid on u1.base (search_peer); the keys are the peers' own
# argument names. Their library defaults: implicit's ALS 100 factors, regularization 0.01, alpha 1, 15
# iterations; implicit's BPR 100 factors, learning rate 0.01, regularization 0.01, 100 iterations;
# cornac's BPR k 10, 100 epochs, learning rate 0.001, lambda_reg 0.01.
PEER_GRIDS: dict[str, dict[str, list[Any]]] = {
    "implicit-als": {
        "factors": [16, 32, 48, 64, 100, 128],
        "regularization": [0.01, 0.1, 1.0, 10.0, 30.0, 100.0],
        "alpha": [1.0, 5.0, 20.0],
        "iterations": [15, 30],
    },
    "implicit-bpr": {
        "factors": [32, 64, 128],
        "learning_rate": [0.01, 0.05, 0.1],
        "regularization": [0.001, 0.01],
        "iterations": [50, 100, 200],
    },
    "cornac-bpr": {
        "k": [32, 64, 128],
        "learning_rate": [0.01, 0.05, 0.1],
        "lambda_reg": [0.001, 0.01, 0.03],
        "max_iter": [50, 100, 200],
    },
}
# The "-tuned" peers' settings: the best validation NDCG@10 of search_peer (a random LTR_VALID_SHARE of
# each user's u1.base positives held out, seed LTR_SEED; u1.test never read) over the whole PEER_GRIDS,
# by `bench.py --tasks learning-to-rank --retune` on 2026-11-26: implicit's ALS 0.2924 of 216 points
# (defaults 0.1472), implicit's BPR 0.2286 of 54 (defaults 0.1858), cornac's BPR 0.2589 of 81
# (defaults 0.1415). A rerun with --retune prints the constants to put here.
PEER_TUNED: dict[str, dict[str, Any]] = {
    "implicit-als": {"factors": 100, "regularization": 30.0, "alpha": 5.0, "iterations": 15},
    "implicit-bpr": {"factors": 32, "learning_rate": 0.01, "regularization": 0.001, "iterations": 50},
    "cornac-bpr": {"k": 128, "learning_rate": 0.05, "lambda_reg": 0.01, "max_iter": 200},
}
LTR_VALID_SHARE = 0.2  # of each user's positives, rounded down: a user with fewer than 5 holds none out
LTR_METRICS = ("ndcg@10", "recall@10", "precision@10")
# The scale rows: 64 factors, positives the synthetic ratings of at least 4 stars (out of 1-5), epochs
# timed per fit (the first, which carries the fit's setup, left out of the median).
LTR_SHAPE = "ml-20m"
LTR_SCALE_FACTORS = 64
LTR_SCALE_RELEVANT = 4.0
LTR_SCALE_EPOCHS = 3
LTR_SCALE_CONTENDERS = ("recsys-ials", "implicit-als", "recsys-bpr", "implicit-bpr", "recsys-dotbias")
# fit's validation ratings where none are wanted: a ranking fit's per-epoch NDCG watch then judges no
# one, as the peers watch nothing.
NO_VALIDATION = RatingTensors(torch.zeros((0, 2), dtype=torch.long), torch.zeros(0))


def ltr_contenders() -> list[str]:
    """The u1 rows: recsys' models (with their defaults, then RECSYS_RANKING_SETTINGS), the popularity
    chart, and each peer with its library defaults and tuned."""
    return [
        *(f"recsys-{model}" for model in RECSYS_RANKERS),
        *(f"recsys-{model}-settings" for model in RECSYS_RANKING_SETTINGS),
        POPULAR,
        *(name for peer in PEER_GRIDS for name in (peer, f"{peer}-tuned")),
    ]


def settings_text(settings: dict[str, Any]) -> str:
    """`settings` as the tables show them: "name=value" pairs."""
    return " ".join(
        f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"
        for name, value in settings.items()
    )


def ltr_split(
    dataset: RatingsDataset, split: str, model: str = "ials", **overrides: Any
) -> tuple[EncodedSplit, RunConfig]:
    """`split` of `dataset` encoded as train_and_evaluate encodes it for `model` (recsys.workflows.experiment
    .prepare: the same for every model), and the config fitted to it (`relevant` set from its scale)."""
    return prepare(dataset, config_for(model, dataset=dataset.name, split=split, **overrides))


def task_digest(task: RankingTask) -> str:
    """A short fingerprint of who is judged and what is relevant to them: equal for two rows scored on
    the same task."""
    digest = hashlib.blake2b(digest_size=4)
    for part in (task.users, task.relevant_starts, task.relevant_items, task.rated_starts, task.rated_items):
        digest.update(np.ascontiguousarray(part.numpy()).data)
    return digest.hexdigest()


def positive_matrix(train: RatingTensors, relevant: float, n_users: int, n_items: int) -> sp.csr_matrix:
    """The positives recsys' ranking fits train on (recsys.train.interactions.positives: the pairs
    reaching `relevant`) as the peers take them: a user x item CSR matrix, every value 1."""
    by_user = positive_pairs(train, relevant, n_users, n_items).by_user
    values = np.ones(len(by_user.others), dtype=np.float32)
    return sp.csr_matrix((values, by_user.others, by_user.starts), shape=(n_users, n_items))


def peer_model(peer: str, settings: dict[str, Any], threads: int = LTR_THREADS) -> Any:
    """An unfitted `peer` (a PEER_GRIDS name) with `settings` over its library defaults: seeded, on the
    CPU, on `threads`."""
    if peer == "cornac-bpr":
        import cornac

        model = cornac.models.BPR(**settings, seed=LTR_SEED)
        # Seeded, cornac's BPR would train on one thread; it reads num_threads when it fits.
        model.num_threads = threads
        return model
    from implicit.als import AlternatingLeastSquares
    from implicit.bpr import BayesianPersonalizedRanking

    build = {"implicit-als": AlternatingLeastSquares, "implicit-bpr": BayesianPersonalizedRanking}[peer]
    return build(**settings, num_threads=threads, random_state=LTR_SEED, use_gpu=False)


def fit_peer(
    peer: str, model: Any, matrix: sp.csr_matrix, on_epoch: Callable[..., None] | None = None
) -> None:
    """Fit `peer`'s `model` on the positives `matrix`; implicit calls `on_epoch` after each iteration
    (cornac has no such hook)."""
    if peer == "cornac-bpr":
        users = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
        pairs = torch.from_numpy(np.stack([users, matrix.indices.astype(np.int64)], axis=1))
        model.fit(cornac_dataset(RatingTensors(pairs, torch.from_numpy(matrix.data)), matrix.shape))
    else:
        model.fit(matrix, show_progress=False, callback=on_epoch)


def peer_form(peer: str, model: Any) -> BilinearForm:
    """A fitted peer's score of every pair, user factors . item factors, as recsys' scorers read it:
    cornac's BPR adds its item bias (as its `score` does); implicit's BPR holds its item bias as its
    item factors' last column, against a user column of ones, so the product has it already."""
    if peer == "cornac-bpr":
        tables = (model.u_factors, model.i_factors, model.i_biases)
    else:
        tables = (model.user_factors, model.item_factors, np.zeros(len(model.item_factors), np.float32))
    user_factors, item_factors, item_bias = (torch.from_numpy(np.asarray(table)) for table in tables)
    return BilinearForm(user_factors, item_factors, None, item_bias)


def peer_settings(peer: str, model: Any) -> dict[str, Any]:
    """The settings `model` runs with (its library defaults where none was given), by PEER_GRIDS' names."""
    return {name: getattr(model, name) for name in PEER_GRIDS[peer]}


def numba_threading_layer() -> str | None:
    """The threading layer numba's parallel kernels ran on in this process (None: none ran). On 2 busy
    cores each parallel region of ials' epoch was seen to stall for about half a second on the omp
    layer, and not on workqueue (NUMBA_THREADING_LAYER chooses)."""
    import numba

    try:
        return str(numba.threading_layer())
    except ValueError:
        return None


def _warm_up_fit(config: RunConfig, epochs: int = 1, ratings: int = 4, n_factors: int = 2) -> None:
    """`epochs` of `config`'s model (of `n_factors`) on `ratings` ratings of 2 users and 3 items,
    before the clock: numba loads (or compiles) the kernels of its fit on first use, as the peers'
    compiled code is loaded at import."""
    tiny = dataclasses.replace(config, epochs=epochs, n_factors=n_factors)
    places = torch.arange(ratings)
    x, y = torch.stack([places % 2, places % 3], dim=1), 4.0 + (places % 2 == 0).float()
    generator = torch.Generator().manual_seed(0)
    model = model_for(tiny, 2, 3, generator)
    fit(model, RatingTensors(x, y), NO_VALIDATION, tiny, generator, threads=1, progress=False)


def fit_contender(
    contender: str,
    dataset: RatingsDataset,
    split: str,
    threads: int = LTR_THREADS,
    tuned: dict[str, Any] | None = None,
) -> tuple[Scorer, dict[str, Any], Clocks]:
    """Fit `contender` (an ltr_contenders name) on `split`'s training part: its scorer, its settings and
    the fit's clocks. recsys fits as train_and_evaluate does, less its per-epoch NDCG watch of the test
    users (the peers watch nothing); the peers on the same positives (positive_matrix); a "-tuned"
    peer with `tuned` (None: PEER_TUNED)."""
    if contender.startswith("recsys-"):
        model = contender.removeprefix("recsys-").removesuffix("-settings")
        overrides = RECSYS_RANKING_SETTINGS[model] if contender.endswith("-settings") else {}
        data, config = ltr_split(dataset, split, model, **overrides)
        generator = torch.Generator().manual_seed(config.seed)
        network = model_for(config, len(data.users), len(data.items), generator)
        _warm_up_fit(config)
        with measured() as clocks:
            fit(network, data.train, NO_VALIDATION, config, generator, threads=threads, progress=False)
        return model_scorer(network, len(data.items)), {**COMPILED_DEFAULTS[model], **overrides}, clocks
    data, config = ltr_split(dataset, split)
    assert config.relevant is not None, "prepare sets the relevance threshold"
    n_users, n_items = len(data.users), len(data.items)
    if contender == POPULAR:
        with measured() as clocks:
            popularity = torch.bincount(data.train.x[:, 1], minlength=n_items).double()
        return constant_scorer(popularity), {}, clocks
    peer = contender.removesuffix("-tuned")
    settings = (PEER_TUNED[peer] if tuned is None else tuned) if contender.endswith("-tuned") else {}
    matrix = positive_matrix(data.train, config.relevant, n_users, n_items)
    fitted = peer_model(peer, settings, threads)
    with measured() as clocks:
        fit_peer(peer, fitted, matrix)
    return peer_form(peer, fitted).scores, peer_settings(peer, fitted), clocks


def bench_ltr_lists(
    dataset: RatingsDataset,
    split: str,
    contender: str,
    threads: int = LTR_THREADS,
    tuned: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`contender`'s top-N lists on `split` scored by evaluate_ranking on the task every contender gets
    (`task_digest`: its fingerprint), with its fit's clocks; cornac's BPR failing is a row saying so."""
    data, config = ltr_split(dataset, split)
    unit = config.unit
    task = ranking_task(
        data.train, data.test, len(data.users), len(data.items), config.relevant, rating_unit=unit
    )
    row: dict[str, Any] = {"part": "lists", "contender": contender}
    try:
        scorer, settings, clocks = fit_contender(contender, dataset, split, threads, tuned)
    except Exception as error:
        if not contender.startswith("cornac"):
            raise
        return {**row, "note": f"skipped: cornac's BPR failed ({type(error).__name__}: {error})"}
    metrics = evaluate_ranking(scorer, task, KS)
    return {
        **row,
        "settings": settings_text(settings),
        **{name: metrics[name] for name in LTR_METRICS},
        "fit_seconds": clocks.seconds,
        "fit_cpu_seconds": clocks.cpu_seconds,
        "users": int(metrics["users"]),
        "task_digest": task_digest(task),
        "numba_layer": numba_threading_layer() if contender.startswith("recsys-") else None,
    }


def hold_out_positives(
    train: RatingTensors, relevant: float, share: float = LTR_VALID_SHARE, seed: int = LTR_SEED
) -> tuple[RatingTensors, RatingTensors]:
    """`train` less a random `share` of each user's positives (rounded down), and those held out: a
    validation set inside the training part, so that a search never reads the test part."""
    found = torch.nonzero(train.y >= relevant).squeeze(-1).numpy()
    users = train.x[found, 0].numpy()
    order = np.lexsort((np.random.default_rng(seed).random(len(found)), users))  # by user, shuffled
    ranked = users[order]
    place = np.arange(len(ranked)) - np.searchsorted(ranked, ranked)  # within the user's positives
    counts = np.bincount(users)[ranked]
    held = np.zeros(len(train), dtype=bool)
    held[found[order[place < np.floor(share * counts)]]] = True
    mask = torch.from_numpy(held)
    return RatingTensors(train.x[~mask], train.y[~mask]), RatingTensors(train.x[mask], train.y[mask])


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of `grid`'s values, in the grid's order."""
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def search_peer(dataset: RatingsDataset, split: str, peer: str, threads: int = LTR_THREADS) -> dict[str, Any]:
    """`peer`'s best PEER_GRIDS settings by NDCG@10 on a validation set held out of `split`'s training
    part (hold_out_positives; the first best where several tie), beside its library defaults'."""
    data, config = ltr_split(dataset, split)
    assert config.relevant is not None, "prepare sets the relevance threshold"
    n_users, n_items = len(data.users), len(data.items)
    kept, held = hold_out_positives(data.train, config.relevant)
    matrix = positive_matrix(kept, config.relevant, n_users, n_items)
    task = ranking_task(kept, held, n_users, n_items, config.relevant, rating_unit=config.unit)

    def validation_ndcg(settings: dict[str, Any]) -> float:
        model = peer_model(peer, settings, threads)
        fit_peer(peer, model, matrix)
        return evaluate_ranking(peer_form(peer, model).scores, task, (10,))["ndcg@10"]

    with measured() as clocks:
        tried = [(validation_ndcg(settings), settings) for settings in grid_points(PEER_GRIDS[peer])]
    best, settings = max(tried, key=lambda pair: pair[0])
    return {
        "part": "search",
        "peer": peer,
        "settings": settings,
        "validation_ndcg@10": best,
        "defaults_validation_ndcg@10": validation_ndcg({}),
        "points": len(tried),
        "validation_users": len(task.users),
        "held_out": len(held),
        "seconds": clocks.seconds,
        "cpu_seconds": clocks.cpu_seconds,
    }


class EpochClock:
    """Wall and CPU time at the end of each epoch of a fit, from `start`; the fit's per-epoch hook
    calls `tick` (recsys' on_epoch, implicit's callback)."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []

    def start(self) -> None:
        self.marks = [(time.perf_counter(), cpu_seconds())]

    def tick(self, *_: Any) -> None:
        self.marks.append((time.perf_counter(), cpu_seconds()))

    def row(self) -> dict[str, Any]:
        """Epochs' median wall and CPU seconds, the first left out where there are more (it carries the
        fit's setup); the first's, and the whole fit's."""
        walls, cpus = (np.diff([mark[clock] for mark in self.marks]) for clock in (0, 1))
        later = slice(1 if len(walls) > 1 else 0, None)
        return {
            "epochs": len(walls),
            "epoch_seconds": float(np.median(walls[later])),
            "epoch_cpu_seconds": float(np.median(cpus[later])),
            "first_epoch_seconds": float(walls[0]),
            "fit_seconds": self.marks[-1][0] - self.marks[0][0],
        }


def bench_ltr_scale(
    shape: str, contender: str, tensors: Path, epochs: int = LTR_SCALE_EPOCHS, threads: int = LTR_THREADS
) -> dict[str, Any]:
    """`epochs` epochs of `contender` (LTR_SCALE_CONTENDERS) at LTR_SCALE_FACTORS on the ratings
    `generate_shape` saved: the ranking fits on those reaching LTR_SCALE_RELEVANT, dotbias (one model,
    the compiled engine) on all; per epoch its seconds and nanoseconds per example (positive or rating),
    and the tables' sizes (no fit builds a user x item matrix: `dense_mb`, what one would take)."""
    train, _ = load_shape(tensors)
    n_users, n_items = int(train.x[:, 0].max()) + 1, int(train.x[:, 1].max()) + 1
    n_positives = int((train.y >= LTR_SCALE_RELEVANT).sum())
    clock = EpochClock()
    if contender.startswith("recsys-"):
        model = contender.removeprefix("recsys-")
        rating: dict[str, Any] = {"members": 1, "y_range": (0.0, 5.5)} if model == "dotbias" else {}
        if model != "dotbias":  # the shape is the positives alone, as the peers take them: `ials` would
            # read the rated pairs below the threshold too, twice the pairs at this shape
            reaching = train.y >= LTR_SCALE_RELEVANT
            train = RatingTensors(train.x[reaching], train.y[reaching])
        config = config_for(
            model, n_factors=LTR_SCALE_FACTORS, epochs=epochs, relevant=LTR_SCALE_RELEVANT, **rating
        )
        generator = torch.Generator().manual_seed(config.seed)
        network = model_for(config, n_users, n_items, generator)
        _warm_up_fit(config)
        clock.start()
        fit(
            network,
            train,
            NO_VALIDATION,
            config,
            generator,
            threads=threads,
            progress=False,
            on_epoch=clock.tick,
        )
        ranks = model != "dotbias"
    else:
        matrix = positive_matrix(train, LTR_SCALE_RELEVANT, n_users, n_items)
        fitted = peer_model(contender, {"factors": LTR_SCALE_FACTORS, "iterations": epochs}, threads)
        clock.start()
        fit_peer(contender, fitted, matrix, on_epoch=clock.tick)
        ranks = True
    timed = clock.row()
    examples = n_positives if ranks else len(train)
    return {
        "part": "scale",
        "shape": shape,
        "contender": contender,
        "factors": LTR_SCALE_FACTORS,
        "threads": threads,
        "users": n_users,
        "items": n_items,
        "example": "positive" if ranks else "rating",
        "examples": examples,
        **timed,
        "ns_per_example": 1e9 * timed["epoch_seconds"] / examples,
        "numba_layer": numba_threading_layer() if contender.startswith("recsys-") else None,
        "ratings_mb": (train.x.nbytes + train.y.nbytes) / 2**20,
        # One side's CSR of the positives (int64 starts, int32 items, float32 values); each fit keeps
        # two, by user and by item.
        "positives_mb": ((n_users + 1) * 8 + n_positives * 8) / 2**20,
        "factors_mb": (n_users + n_items) * LTR_SCALE_FACTORS * 4 / 2**20,
        "dense_mb": n_users * n_items * 4 / 2**20,
    }


def bench_learning_to_rank(folder: Path | None, part: str, **options: Any) -> dict[str, Any]:
    """One measurement of the learning-to-rank task, with torch on LTR_THREADS: on ML-100K u1 in
    `folder`, "lists" (`contender`; a "-tuned" peer with the settings a search wrote to `tuned_from`
    where given) and "search" (`peer`, its result also written to `found`); "generate" and "scale"
    (`contender`) at a synthetic `shape`."""
    with torch_threads(LTR_THREADS):
        if part == "generate":
            return {"part": part, **generate_shape(options["shape"], Path(options["path"]))}
        if part == "scale":
            return bench_ltr_scale(options["shape"], options["contender"], Path(options["tensors"]))
        assert folder is not None, f"the learning-to-rank task's {part} part needs ML-100K"
        dataset = load_movielens("ml-100k", folder)
        if part == "search":
            result = search_peer(dataset, "u1", options["peer"])
            write_json(Path(options["found"]), result)
            return result
        tuned_from = options.get("tuned_from")
        tuned = None if tuned_from is None else json.loads(Path(tuned_from).read_text())["settings"]
        return bench_ltr_lists(dataset, "u1", options["contender"], tuned=tuned)
