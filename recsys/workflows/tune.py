"""Hyperparameter search that never sees the test ratings.

The split's training part is all the search reads: each sampled setting is scored by k-fold
cross-validation inside it (scikit-learn's ParameterSampler and cross_validate over
RatingRegressor), the best one is retrained on the whole training part, and only that model is
scored on the test part, once.
"""

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from scipy.stats import loguniform, randint
from sklearn.model_selection import KFold, ParameterSampler, cross_validate

from recsys.config import (
    PER_RATING,
    RunConfig,
    config_for,
    model_for,
    reads_features,
    reads_time,
    unread_feature_sides,
)
from recsys.data.dataset import RatingsDataset, default_y_range
from recsys.data.encoding import IdMap, RatingTensors
from recsys.data.id_columns import id_values
from recsys.data.splits import make_split
from recsys.errors import RecsysError, plain_value
from recsys.evaluation.ranking import evaluate_ranking, ranking_task
from recsys.evaluation.scorers import model_scorer
from recsys.files import atomic_write
from recsys.models import model_entry
from recsys.train.trainer import TrainingDiverged, fit
from recsys.workflows.estimator import RatingRegressor
from recsys.workflows.experiment import RunResult, fitted_config, prepare, train_and_evaluate

# The y_range's stretch beyond the rating scale (default_y_range's margin; 0.1 is fastai's (0, 5.5))
# and the multiplier of the initial weights, searched for every trained model.
RANGE_AND_INIT = {"y_margin": [0.0, 0.05, 0.1, 0.15, 0.2, 0.3], "init_scale": loguniform(0.3, 10.0)}
# What is searched, per engine, unless the model's registry entry names its own (bpmf's sampler): the
# compiled engine has no batches, optimizer, weight decay or choice of schedule (its learning rate
# falls linearly over the epochs); only it trains ensembles (members).
SEARCH_SPACES: dict[str, dict[str, Any]] = {
    "compiled": {
        "lr": loguniform(0.02, 0.3),
        "epochs": randint(4, 31),
        "n_factors": [16, 32, 50, 64, 100, 128],
        "l2": loguniform(0.01, 0.3),
        "members": [1, 2, 3],
        **RANGE_AND_INIT,
    },
    "autograd": {
        "lr": loguniform(2e-3, 5e-2),
        "epochs": randint(3, 16),
        "n_factors": [16, 32, 50, 64, 100, 128],
        "l2": loguniform(0.01, 0.3),
        "batch_size": [256, 512, 1024, 2048, 4096],
        "wd": [0.0, 1e-4, 1e-3, 1e-2],
        "schedule": ["one-cycle", "constant"],
        **RANGE_AND_INIT,
    },
}
# Drawn on a log scale: plotted on one.
LOG_SCALED = ("lr", "l2", "init_scale")


@dataclass(frozen=True)
class TuneResult:
    """The settings tried (best first by the validation score), the best one, and the final run."""

    # one row per setting: its values, the score's mean over the folds (`score` names it) and valid_sd
    table: pd.DataFrame
    best: dict[str, Any]  # the chosen hyperparameters, as searched (y_margin, not y_range)
    run: RunResult  # the best setting retrained on the whole training part, scored on the test part

    @property
    def score(self) -> str:
        """The validation score's column: valid_rmse (lower is better), or a ranking model's
        valid_ndcg@10 (higher is better)."""
        return VALID_NDCG if self.run.config.ranks else VALID_RMSE


VALID_RMSE, VALID_NDCG = "valid_rmse", "valid_ndcg@10"


def search_space(model: str, engine: str) -> Mapping[str, Any]:
    """What tune searches for `model` on `engine`: its registry entry's space there, else the engine's
    (the device engine's is the compiled engine's: the same settings)."""
    engine = "compiled" if engine in PER_RATING else engine
    return dict(model_entry(model).search_spaces.get(engine) or SEARCH_SPACES[engine])


def searched_space(base: RunConfig) -> Mapping[str, Any]:
    """`search_space` for the model and engine of `base`, less the ensemble's size where its features
    leave it one model."""
    space = search_space(base.model, base.engine)
    if reads_features(base.model, base.engine) and base.features != "implicit" and not base.samples:
        return {name: values for name, values in space.items() if name != "members"}
    return space


def planned_trials(base: RunConfig, trials: int) -> int:
    """How many settings a search of `trials` tries: all of a grid smaller than that (its spaces are
    lists of values alone), else `trials`."""
    space = searched_space(base)
    if all(isinstance(values, Sequence) for values in space.values()):
        return min(trials, math.prod(len(values) for values in space.values()))
    return trials


def tune(
    dataset: RatingsDataset,
    model: str = "dotbias",
    split: str = "random",
    *,
    engine: str | None = None,
    trials: int = 30,
    folds: int = 3,
    seed: int = 0,
    threads: int | None = None,
    on_trial: Callable[[int, dict[str, Any], float], None] | None = None,
    run_dir: str | Path | None = None,
    features: str | None = None,
    ordinal: bool = False,
) -> TuneResult:
    """Search `model`'s hyperparameters on the training part of `split` only, then retrain the best
    and score it on the test part once. `on_trial(n, setting, score)` reports each setting's mean
    validation score: RMSE, or a ranking model's NDCG@10. `features`: the feature groups every trial
    reads (a model that reads them; None: its default); `ordinal`: every trial an ordered probit
    (bfm)."""
    if trials < 1:
        raise RecsysError(f"`trials` must be at least 1, got {trials}")
    if folds < 2:
        raise RecsysError(f"`folds` must be at least 2 (cross-validation), got {folds}")
    given: dict[str, Any] = {} if features is None else {"features": features}
    given |= {"ordinal": True} if ordinal else {}
    base = config_for(model, engine=engine, dataset=dataset.name, split=split, seed=seed, **given)
    # Before the search, not after it: the data fits the model, and the split leaves a test part the
    # best setting can be scored on.
    prepare(dataset, base)
    train = make_split(dataset, split, test_frac=base.test_frac, test_n=base.test_n, seed=seed).train
    if len(train) < folds:
        raise RecsysError(
            f"`folds` {folds}: the training part of split {split} holds {len(train):,} ratings, too few "
            f"to cut into {folds} folds"
        )
    # With the time group the estimator reads each rating's time as X's third column.
    X = train[["user", "item", "timestamp"] if reads_time(base) else ["user", "item"]]
    y = train["rating"].to_numpy(dtype=np.float64)
    scale = (float(y.min()), float(y.max()))
    cv = KFold(folds, shuffle=True, random_state=seed)
    if base.ranks:
        validate = _ranking_validation(train, base, dataset.rating_scale, dataset.implicit, cv, threads)
        column, best_first = VALID_NDCG, False
    else:
        validate = _rating_validation(X, y, _estimator(base, threads, dataset), cv)
        column, best_first = VALID_RMSE, True
    rows = []
    space = searched_space(base)
    settings = ParameterSampler(space, n_iter=planned_trials(base, trials), random_state=seed)
    for number, setting in enumerate(settings, start=1):
        setting = {name: plain_value(value) for name, value in setting.items()}
        scores = validate(run_settings(setting, scale))
        rows.append({**setting, column: float(scores.mean()), "valid_sd": float(scores.std(ddof=1))})
        if on_trial is not None:
            on_trial(number, setting, float(scores.mean()))
    table = pd.DataFrame(rows).sort_values(column, ascending=best_first, kind="stable").reset_index(drop=True)
    if table[column].isna().all():  # every setting diverged: nothing to retrain
        raise RecsysError(
            f"every one of the {len(table)} settings tried diverged (no finite validation score); "
            "the model's search space does not fit this data: try more `trials`, or train with a lower `lr`"
        )
    best = {name: plain_value(table.at[0, name]) for name in space}
    config = dataclasses.replace(base, **run_settings(best, scale))
    run = train_and_evaluate(dataset, config, run_dir=run_dir, progress=False)
    return TuneResult(table, best, run)


def _estimator(base: RunConfig, threads: int | None, dataset: RatingsDataset) -> RatingRegressor:
    """The estimator a rating model is searched with (`base`'s model, engine, seed and feature
    groups), given the dataset's side features where the run reads them."""
    tables = {"user": dataset.user_features, "item": dataset.item_features}
    _, unread = unread_feature_sides(base, [side for side, table in tables.items() if table is not None])
    read = {f"{side}_features": None if side in unread else table for side, table in tables.items()}
    return RatingRegressor(
        base.model,
        engine=base.engine,
        seed=base.seed,
        threads=threads,
        features=base.features,
        ordinal=base.ordinal,
        **read,
    )


def _rating_validation(
    X: pd.DataFrame, y: np.ndarray, estimator: RatingRegressor, cv: KFold
) -> Callable[[dict[str, Any]], np.ndarray]:
    """A setting's validation RMSE on each fold, by scikit-learn's cross-validation of RatingRegressor."""

    def validate(fields: dict[str, Any]) -> np.ndarray:
        # A failed fit raised, not scored NaN with a warning: scikit-learn's "All the fits failed" had
        # ended the search in a traceback, where the failure is one line.
        try:
            scores = cross_validate(
                estimator.set_params(**fields),
                X,
                y,
                cv=cv,
                scoring="neg_root_mean_squared_error",
                error_score="raise",
            )
        except TrainingDiverged:  # this setting's score: none (last in the table)
            return np.full(cv.get_n_splits(), np.nan)
        except RecsysError as error:  # a bug's ValueError keeps its traceback
            raise RecsysError(f"cross-validation of {estimator.model}: {error}") from None
        return -np.asarray(scores["test_score"])

    return validate


def _ranking_validation(
    train: pd.DataFrame,
    base: RunConfig,
    rating_scale: tuple[float, float],
    implicit: bool,
    cv: KFold,
    threads: int | None,
) -> Callable[[dict[str, Any]], np.ndarray]:
    """A ranking model's validation NDCG@10 on each fold: trained on the others' pairs, its lists
    judged on the fold's (relevant: reaching the relevance threshold, as the test part's are). The ids
    are those of the whole training part, so every fold's tables are alike."""
    user, item = id_values(train["user"]), id_values(train["item"])
    users, items = IdMap.fit(user), IdMap.fit(item)
    x = torch.from_numpy(np.stack([users.encode(user), items.encode(item)], axis=1))
    y = torch.tensor(train["rating"].to_numpy(dtype=np.float32))
    cuts = list(cv.split(np.arange(len(train))))

    def validate(fields: dict[str, Any]) -> np.ndarray:
        config = fitted_config(
            dataclasses.replace(base, **fields), rating_scale, len(train), implicit=implicit
        )
        scores = []
        for number, (kept, held) in enumerate(cuts, 1):
            fold_train = RatingTensors(x[kept], y[kept])
            fold_valid = RatingTensors(x[held], y[held])
            task = ranking_task(
                fold_train, fold_valid, len(users), len(items), config.relevant,
                rating_unit=config.unit,
            )  # fmt: skip
            # A fold that judges no one scores NaN for every setting: it had been taken for each one's
            # divergence, the search refused as "every setting diverged".
            if len(task.users) == 0:
                raise RecsysError(
                    f"cross-validation fold {number} of {len(cuts)} holds out no pair relevant to its user "
                    f"(rated at least `relevant` {config.relevant:g}, on an item the user did not rate in "
                    "the other folds), so no list can be judged on it; fewer `folds` leave more to each"
                )
            generator = torch.Generator().manual_seed(config.seed)
            model = model_for(config, len(users), len(items), generator)
            # No validation pairs each epoch: the fold is judged once, after the last.
            nothing = RatingTensors(x[:0], y[:0])
            try:
                fit(model, fold_train, nothing, config, generator, threads=threads, progress=False)
            except TrainingDiverged:  # this setting's score: none (last in the table), as for ratings
                return np.full(len(cuts), np.nan)
            except RecsysError as error:  # the data as a whole trains: this fold's part of it cannot
                raise RecsysError(
                    f"cross-validation fold {number} of {len(cuts)}, trained on the other folds' pairs: "
                    f"{error}; fewer `folds` leave more to each"
                ) from None
            scores.append(evaluate_ranking(model_scorer(model, len(items)), task, ks=(10,))["ndcg@10"])
        return np.asarray(scores)

    return validate


# A searched name that is not a RunConfig field, with the field it sets.
SEARCHED_FIELDS = {"y_margin": "y_range"}


def run_settings(setting: dict[str, Any], scale: tuple[float, float]) -> dict[str, Any]:
    """A searched setting as RunConfig fields: a y_margin becomes the y_range it gives on `scale`,
    the training part's lowest and highest rating."""
    fields = {name: value for name, value in setting.items() if name not in SEARCHED_FIELDS}
    if "y_margin" in setting:
        fields["y_range"] = default_y_range(scale, setting["y_margin"])
    return fields


def best_settings(result: TuneResult) -> dict[str, Any]:
    """What `train.py --config` reads: the model, its engine and the fields the search chose, as the
    final run used them (the y_range a searched margin gave)."""
    config: RunConfig = result.run.config
    chosen = [SEARCHED_FIELDS.get(name, name) for name in result.best]
    if reads_features(config.model, config.engine):  # the groups every trial read
        chosen.append("features")
    if config.ordinal:
        chosen.append("ordinal")
    return {"model": config.model, "engine": config.engine, **{f: getattr(config, f) for f in chosen}}


def plot_trials(table: pd.DataFrame, path: Path, names: Mapping[str, Any], score: str = VALID_RMSE) -> None:
    """The validation score (`score`, a column of `table`) against each searched hyperparameter, one
    panel each, saved to `path`. A Figure without pyplot, as the report's: the caller's matplotlib
    backend (a notebook's inline one) is left as it is."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    columns = list(names)
    width = min(3, math.ceil(math.sqrt(len(columns))))
    rows = math.ceil(len(columns) / width)
    figure = Figure(figsize=(4 * width, 3 * rows))
    axes = figure.subplots(rows, width, squeeze=False)
    for axis, name in zip(axes.flat, columns, strict=False):
        axis.scatter(table[name], table[score], s=14)
        axis.scatter(table[name].iloc[:1], table[score].iloc[:1], s=40, color="red", label="best")
        if name in LOG_SCALED:
            axis.set_xscale("log")
            # Labelled at 1, 2 and 5 times the powers of ten, as plain numbers: matplotlib's own
            # labels for a range within a decade or two overlap.
            axis.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xlabel(name)
        axis.set_ylabel("validation NDCG@10" if score == VALID_NDCG else "validation RMSE")
    for axis in list(axes.flat)[len(columns) :]:
        axis.set_visible(False)
    axes.flat[0].legend()
    figure.tight_layout()
    atomic_write(path, lambda file: figure.savefig(file, format="png", dpi=100))
