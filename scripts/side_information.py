"""scripts/bench.py's side-information task: recsys' Bayesian factorisation machine (`bfm`) against
myFM's on ML-100K, feature group by feature group, both given the same feature rows.

Each contender sees the ids, then the implicit feedback of the training part (the items each user
rated, the users who rated each item, weighted 1 / sqrt(count)), the side features (MovieLens'
demographics, genres and years), both, or both and the user and day of each rating: the rows
recsys.data.features builds, handed to myFM as its relational blocks (the user-day as a one-hot
column of its own, bfm's bins), a hyperprior per group for both. myFM with Rendle's rank and sweeps for
ML-100K, recsys at its defaults (the same rank and sweeps, as chains), scored on the test ratings
whose ids training has seen.
"""

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch

from recsys.config import config_for
from recsys.data.features import FeatureRows
from recsys.data.movielens import load_movielens
from recsys.models.bayes import BayesianFM
from recsys.workflows.experiment import data_features, prepare, train_and_evaluate

# The feature groups each contender is scored with: "" the ids alone; time the user-day of each rating.
FEATURE_SETS = ("", "implicit", "side", "side,implicit", "side,implicit,time")
CONTENDERS = ("recsys-bfm", "myfm")
# The ordered probits over the five stars, myFM's and bfm's (`ordinal`), with every group on u1.
ORDINALS = ("myfm-ordinal", "recsys-bfm-ordinal")
RANK, SWEEPS, SEED = 10, 512, 0
FOLDS = ("u1", "u2", "u3", "u4", "u5")


def side_jobs() -> list[dict[str, Any]]:
    """Every contender at every feature set on u1, the ordered probits with every group, then recsys
    (normal and ordinal) and myFM with every group on each fold, the contenders taking turns."""
    task = "side-information"
    jobs = [
        {"task": task, "contender": contender, "features": features, "fold": "u1"}
        for features in FEATURE_SETS
        for contender in CONTENDERS
    ]
    jobs += [
        {"task": task, "contender": contender, "features": FEATURE_SETS[-1], "fold": "u1"}
        for contender in ORDINALS
    ]
    return jobs + [
        {"task": task, "contender": contender, "features": FEATURE_SETS[-1], "fold": fold}
        for fold in FOLDS[1:]
        for contender in (*CONTENDERS, ORDINALS[1])
    ]


def _block(rows: FeatureRows) -> sp.csr_matrix:
    return sp.csr_matrix((rows.values, rows.columns, rows.starts), shape=(rows.n_rows, rows.n_features))


def _user_days(x: np.ndarray, train_x: np.ndarray) -> sp.csr_matrix:
    """Each rating's user-day one-hot, in bfm's bins (`BayesianFM.time_bins_of`: a user and a UTC day on
    which the training part has a rating of that user; a row of zeros for any other): x's third
    column is its time where the run reads time; no column without."""
    if x.shape[1] < 3:
        return sp.csr_matrix((len(x), 0))
    binned = BayesianFM(int(max(train_x[:, 0].max(), x[:, 0].max())) + 1, 1, 1)
    binned.set_times(torch.from_numpy(train_x[:, 0]), torch.from_numpy(train_x[:, 2]))
    bins = binned.time_bins_of(torch.from_numpy(x[:, 0]), torch.from_numpy(x[:, 2])).numpy()
    seen = np.flatnonzero(bins < binned.n_time_bins)
    return sp.csr_matrix((np.ones(len(seen)), (seen, bins[seen])), shape=(len(x), binned.n_time_bins))


def _group_sizes(rows: FeatureRows) -> list[int]:
    return np.bincount(rows.groups, minlength=len(rows.group_names)).tolist()


def bench_side_information(folder: Path, contender: str, features: str, fold: str) -> dict[str, Any]:
    """One contender's test RMSE and seconds (data prepared, fitted, scored) with `features` on `fold`."""
    from benchmark import measured  # the harness's clocks, beside this file

    dataset = load_movielens("ml-100k", folder, allow_download=False, progress=False)
    config = config_for("bfm", features=features, split=fold, seed=SEED, ordinal=contender == ORDINALS[1])
    if (config.n_factors, config.epochs * config.members) != (RANK, SWEEPS):
        raise SystemExit(f"bfm's defaults are no longer rank {RANK} and {SWEEPS} sweeps: set myFM's alike")
    marks = {"features": features or "ids", "fold": fold}
    if contender.startswith("recsys-bfm"):
        with measured() as clocks:
            result = train_and_evaluate(dataset, config, progress=False)
        return {
            **marks,
            "rmse": result.test["rmse"],
            "seconds": clocks.seconds,
            "cpu_seconds": clocks.cpu_seconds,
        }
    import myfm

    with measured() as clocks:
        data, config = prepare(dataset, config)
        users, items = data_features(config, dataset, data)
        blocks = [_block(users), _block(items)]

        def relations(x: np.ndarray) -> list[Any]:
            return [myfm.RelationBlock(x[:, side], blocks[side]) for side in (0, 1)]

        train_x, test_x = data.train.x.numpy(), data.test.x.numpy()
        y = data.train.y.numpy().astype(np.float64)
        train_days, test_days = _user_days(train_x, train_x), _user_days(test_x, train_x)
        # X's columns (the user-days, where read) come before the relational blocks'.
        days = [train_days.shape[1]] if train_days.shape[1] else []
        fit = {"n_iter": SWEEPS, "group_shapes": days + _group_sizes(users) + _group_sizes(items)}
        if contender == ORDINALS[0]:
            model = myfm.MyFMOrderedProbit(rank=RANK, random_seed=SEED)
            model.fit(train_days, np.round(y).astype(np.int32) - 1, X_rel=relations(train_x), **fit)
            chances = model.predict_proba(test_days, relations(test_x))
            predictions = chances @ np.arange(1, chances.shape[1] + 1)
        else:
            model = myfm.MyFMRegressor(rank=RANK, random_seed=SEED)
            model.fit(train_days, y, X_rel=relations(train_x), **fit)
            # Clipped to the stars, as bfm's predictions are (the probit's expectation lies inside them).
            predictions = np.clip(model.predict(test_days, relations(test_x)), *dataset.rating_scale)
    rmse = float(np.sqrt(np.mean((predictions - data.test.y.numpy()) ** 2)))
    return {**marks, "rmse": rmse, "seconds": clocks.seconds, "cpu_seconds": clocks.cpu_seconds}


def fold_tables(rows: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """The task's tables: every u1 row, and (once more than u1 ran) the folds' mean and spread of each
    contender that ran on more than u1 with every group."""
    from benchmark import fold_table

    found = {"side-information": pd.DataFrame([row for row in rows if row["fold"] == "u1"])}
    every = [row for row in rows if row["features"] == FEATURE_SETS[-1]]
    beyond_u1 = {row["contender"] for row in every if row["fold"] != "u1"}
    every = [row for row in every if row["contender"] in beyond_u1]
    if beyond_u1:
        found["side-information-folds"] = fold_table(every)
    return found
