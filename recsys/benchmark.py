"""Benchmarks measured in one run on one machine: recsys against fastai and Surprise on ML-100K u1,
training throughput on MovieLens-shaped synthetic data (generated in one process, trained on in
another, so the training's peak RSS is its own), and load times.

Each measurement runs in its own process (`scripts/bench.py` starts them), so peak RSS is that
measurement's own and no library's import or cache leaks into another's timing. `seconds` is
training plus test prediction after the data is in memory; `wall_seconds` (filled in by the
parent) is the whole process, Python start and imports included.
"""

import os
import resource
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from recsys.config import config_for
from recsys.data import RatingsDataset
from recsys.encoding import RatingTensors, encode_split
from recsys.experiment import train_and_evaluate
from recsys.metrics import rmse
from recsys.models import build_model
from recsys.movielens import load_movielens
from recsys.splits import fold_split, make_split
from recsys.synthetic import SyntheticConfig, make_synthetic
from recsys.trainer import fit

# (users, items, ratings) of the real datasets whose shape the throughput runs copy.
SHAPES: dict[str, tuple[int, int, int]] = {
    "ml-1m": (6_040, 3_706, 1_000_209),
    "ml-10m": (69_878, 10_677, 10_000_054),
    "ml-25m": (162_541, 59_047, 25_000_095),
}


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _u1(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """ML-100K u1.base and the u1.test ratings whose user and item occur in u1.base (recsys' policy)."""
    split = fold_split(load_movielens("ml-100k", folder), "u1")
    known = split.test["user"].isin(split.train["user"]) & split.test["item"].isin(split.train["item"])
    return split.train, split.test[known]


def bench_recsys(folder: Path, model: str = "dotbias", device: str = "cpu") -> dict[str, Any]:
    """recsys' default run of `model` on u1."""
    dataset = load_movielens("ml-100k", folder)
    start = time.perf_counter()
    config = config_for(model, dataset="ml-100k", split="u1", device=device)
    result = train_and_evaluate(dataset, config, progress=False)
    seconds = time.perf_counter() - start
    epochs = result.config.epochs
    return {
        "rmse": result.test["rmse"],
        "seconds": seconds,
        "samples_per_second": epochs * len(result.data.train) / seconds,
    }


def bench_fastai(folder: Path) -> dict[str, Any]:
    """fastbook's recipe: collab_learner(n_factors=50, y_range=(0, 5.5)), fit_one_cycle(5, 5e-3, wd=0.1)."""
    from fastai.collab import Categorify, TabularCollab, collab_learner
    from fastai.data.block import TransformBlock

    train, test = _u1(folder)
    frame = pd.concat([train, test], ignore_index=True)[["user", "item", "rating"]]
    start = time.perf_counter()
    # What CollabDataLoaders.from_df builds, with the u1 test ratings as the validation set.
    splits = (list(range(len(train))), list(range(len(train), len(frame))))
    tabular = TabularCollab(
        frame, [Categorify], ["user", "item"], y_names=["rating"], y_block=TransformBlock(), splits=splits
    )
    dls = tabular.dataloaders(bs=64)
    learner = collab_learner(dls, n_factors=50, y_range=(0, 5.5))
    with learner.no_bar(), learner.no_logging():
        learner.fit_one_cycle(5, 5e-3, wd=0.1)
        predictions, targets = learner.get_preds()
    seconds = time.perf_counter() - start
    return {
        "rmse": rmse(predictions.squeeze(-1), targets.squeeze(-1)),
        "seconds": seconds,
        "samples_per_second": 5 * len(train) / seconds,
    }


def bench_surprise(folder: Path) -> dict[str, Any]:
    """Surprise's SVD with its defaults (100 factors, 20 epochs of SGD)."""
    from surprise import SVD, Dataset, Reader

    train, test = _u1(folder)
    start = time.perf_counter()
    trainset = Dataset.load_from_df(train[["user", "item", "rating"]], Reader(rating_scale=(1, 5)))
    algorithm = SVD(random_state=0)
    algorithm.fit(trainset.build_full_trainset())
    predictions = [algorithm.predict(u, i).est for u, i in zip(test["user"], test["item"], strict=True)]
    seconds = time.perf_counter() - start
    return {
        "rmse": rmse(torch.tensor(predictions), torch.tensor(test["rating"].to_numpy())),
        "seconds": seconds,
        "samples_per_second": 20 * len(train) / seconds,
    }


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
    start = time.perf_counter()
    train = encoded_tensors(synthetic_shape(shape))
    with path.open("wb") as file:
        torch.save({"x": train.x, "y": train.y}, file)
        # On disk before this process ends, so writing it back does not slow the training runs.
        file.flush()
        os.fsync(file.fileno())
    return {"shape": shape, "ratings": len(train), "generate_seconds": time.perf_counter() - start}


def bench_throughput(shape: str, model: str, tensors: Path, **overrides: Any) -> dict[str, Any]:
    """One epoch of `model` (its defaults plus `overrides`) on the tensors `generate_shape` saved."""
    saved = torch.load(tensors, weights_only=True)
    train = RatingTensors(saved["x"], saved["y"])
    n_users, n_items = int(train.x[:, 0].max()) + 1, int(train.x[:, 1].max()) + 1
    config = config_for(model, epochs=1, y_range=(0.0, 5.5), **overrides)
    network = build_model(
        model, n_users, n_items, config.n_factors, config.y_range, torch.Generator().manual_seed(0)
    )
    valid = RatingTensors(train.x[:1000], train.y[:1000])
    start = time.perf_counter()
    history = fit(network, train, valid, config, torch.Generator().manual_seed(0), progress=False)
    seconds = time.perf_counter() - start
    return {
        "shape": shape,
        "model": model,
        "batch_size": config.batch_size,
        "sparse": config.sparse,
        "device": config.device,
        "epoch_seconds": seconds,
        "ratings_per_second": len(train) / seconds,
        "final_valid_rmse": history[-1].valid_rmse,
    }


def bench_load(name: str, folder: Path) -> dict[str, Any]:
    """Seconds to parse and encode a real dataset found locally."""
    start = time.perf_counter()
    dataset = load_movielens(name, folder)
    loaded = time.perf_counter() - start
    encode_split(make_split(dataset, "random"))
    return {"dataset": name, "ratings": len(dataset.ratings), "load_seconds": loaded,
            "load_and_encode_seconds": time.perf_counter() - start}  # fmt: skip


def median_runs(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per contender from repeated u1 runs: the median of each measure, the fastest and
    slowest `seconds`, and the number of runs."""
    frame = pd.DataFrame(rows)
    grouped = frame.groupby("contender", sort=False)
    medians = grouped.median(numeric_only=True)
    medians["seconds_min"] = grouped["seconds"].min()
    medians["seconds_max"] = grouped["seconds"].max()
    medians["runs"] = grouped.size()
    return medians.reset_index()


def ratio_table(rows: list[dict[str, Any]], reference: str) -> pd.DataFrame:
    """The u1 rows with time ratios against `reference` (how many times slower than it)."""
    frame = pd.DataFrame(rows)
    base = frame.set_index("contender").loc[reference]
    frame["seconds_ratio"] = frame["seconds"] / base["seconds"]
    frame["wall_ratio"] = frame["wall_seconds"] / base["wall_seconds"]
    return frame
