"""Every model on the same split: accuracy, top-N lists and cost beside the baselines, and what the
biases learned.

`compare_models` trains each model with its tuned defaults on one split, scores its ratings and its
top-N lists (beside a popularity chart, the damped item bias and chance) and folds new users in;
`item_table`/`user_table`
line up the learned biases with the damped baseline, simple statistics of the data and (on
synthetic data) the planted truth; `bias_correlations` turns "the biases make sense" into numbers.
"""

import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from recsys.config import READS_TIME, RunConfig, config_for, reads_features
from recsys.data.dataset import RatingsDataset
from recsys.data.encoding import EncodedSplit, RatingTensors
from recsys.data.synthetic import PlantedTruth, SyntheticConfig, make_synthetic, synthetic_interactions
from recsys.errors import RecsysError
from recsys.evaluation.baselines import DampedBias, fit_damped_bias, global_mean
from recsys.evaluation.biases import learned_biases
from recsys.evaluation.fold_in_curve import fold_in_curve
from recsys.evaluation.metrics import evaluate_test
from recsys.evaluation.ranking import KS, evaluate_ranking, ranking_task, relevance_threshold
from recsys.evaluation.scorers import Scorer, constant_scorer, model_scorer, random_scorer
from recsys.models import model_names
from recsys.models.base import member_forms, members_use_features, rating_model
from recsys.models.bayes import beyond_seconds
from recsys.models.registry import model_entry
from recsys.names import feature_groups
from recsys.studies.bag_cost import MODES as BAG_MODES
from recsys.studies.bag_cost import VARIANTS as BAG_VARIANTS
from recsys.studies.bag_cost import bag_versus_multi_hot
from recsys.studies.lookup_cost import lookup_cost_table
from recsys.studies.norm_bias import NORMS, bias_before_norm
from recsys.workflows.experiment import (
    RunResult,
    check_relevant,
    has_side_features,
    new_user_starts,
    prepare,
    train_and_evaluate,
)

BASELINES = ("global-mean", "damped-bias")
BASELINE_COLUMN = "damped-bias"
# Lists every model's are read against: the training counts' chart, the damped bias baseline's
# (its user bias is the same for every item, so it ranks by damped item bias) and chance.
RANKING_BASELINES = ("most-popular", BASELINE_COLUMN, "random")
Relevant = float | Literal["all", "scale"]
LOOKUP_VARIANTS = ("embedding", "sparse_embedding", "sparse_one_hot", "dense_one_hot")


@dataclass(frozen=True)
class ModelScore:
    """One row of the accuracy table."""

    name: str
    rmse: float
    mae: float
    seconds: float  # training time; 0 for the closed-form baselines
    n_parameters: int  # trained parameters (the baselines' fitted biases count too)
    valid_rmse: list[float] = field(default_factory=list)  # per epoch
    engine: str = "closed form"  # what fitted it: a trained model's engine, or the baselines' formula


@dataclass(frozen=True)
class Comparison:
    """Trained models and their scores on one split of one dataset."""

    dataset: RatingsDataset
    split: str
    seed: int
    unknown: str
    data: EncodedSplit
    scores: list[ModelScore]
    models: dict[str, nn.Module]
    ranking: pd.DataFrame  # one row per model and ranking baseline: "model", then metric@k columns
    threshold: float | None  # a test rating at or above it is relevant; None: every test item is
    fold_in: dict[str, pd.DataFrame]  # per model that has user vectors: its fold-in curve
    truth: PlantedTruth | None = None
    # Per model that uses features: its test RMSE with the ids alone and each feature group added.
    feature_groups: pd.DataFrame | None = None
    # The settings every model took over its defaults (`epochs` for a quick look, `engine`).
    overrides: dict[str, Any] = field(default_factory=dict)

    def score_table(self) -> pd.DataFrame:
        return pd.DataFrame(
            [(s.name, s.engine, s.rmse, s.mae, s.seconds, s.n_parameters) for s in self.scores],
            columns=["model", "engine", "rmse", "mae", "seconds", "parameters"],
        )


def _fitted_size(model: nn.Module) -> int:
    """Trainable parameters, or for the closed-form baselines the fitted values."""
    return model.n_fitted if isinstance(model, DampedBias) else sum(p.numel() for p in model.parameters())


def _starts(
    model: nn.Module, config: RunConfig, dataset: RatingsDataset, n_items: int
) -> Callable[[np.ndarray, list[np.ndarray]], list[tuple[Tensor, Tensor]] | None] | None:
    """Where fold-in starts `model`'s new users: by their features, for a model that uses them."""
    found = rating_model(model)
    if not members_use_features(found):
        return None
    return lambda users, rated: new_user_starts(found, config, dataset.user_features, users, rated, n_items)


def compare_models(
    dataset: RatingsDataset,
    split: str,
    *,
    models: Sequence[str] | None = None,
    seed: int = 0,
    unknown: str = "drop",
    truth: PlantedTruth | None = None,
    progress: bool = False,
    relevant: Relevant = "scale",
    on_trained: Callable[[RunResult, int, int], None] | None = None,
    **overrides: Any,
) -> Comparison:
    """Train each of `models` (None: every registered model) with its defaults (plus `overrides`) on
    the same split and score its ratings and its top-N lists. A test rating at or above `relevant`
    is relevant to its user ("scale": 3/4 of the way up the dataset's rating scale; "all": every
    test item). `on_trained` gets each model's run as it ends, with its number and the count: a
    comparison takes minutes, and without a terminal nothing else says how far it is."""
    if isinstance(models, str):  # one name would be read letter by letter
        raise TypeError(f"models must be a list of model names, got the string {models!r}; use [{models!r}]")
    if models is not None and len(set(models)) < len(models):
        twice = next(name for j, name in enumerate(models) if name in models[:j])
        raise ValueError(f"models names {twice!r} twice: each model trains once on the split")
    threshold = _threshold(relevant, dataset)  # before any training: a bad one is refused at once
    _check_truth(truth, dataset)
    scores: list[ModelScore] = []
    trained: dict[str, nn.Module] = {}
    results: dict[str, RunResult] = {}
    data: EncodedSplit | None = None
    configs = [
        # A ranking model's lists are judged, not its errors: the unseen-id policy is the rating models'.
        config_for(
            name,
            dataset=dataset.name,
            split=split,
            seed=seed,
            unknown=None if model_entry(name).ranks else unknown,
            **overrides,
        )
        for name in (model_names() if models is None else models)
    ]
    for config in configs:  # every model's refusal (the data, the split, its lists) before any trains
        prepare(dataset, config)
    _load_kernels(configs, dataset.implicit)
    for number, config in enumerate(configs, 1):
        name = config.model
        result = train_and_evaluate(dataset, config, progress=progress)
        if on_trained is not None:
            on_trained(result, number, len(configs))
        data = result.data.pairs()  # every model and baseline is scored on it: bfm's times are its own
        trained[name], results[name] = result.model, result
        # A ranking model's scores are no ratings: no RMSE, MAE or learning curve in RMSE.
        ranks = result.config.ranks
        scores.append(
            ModelScore(
                name,
                math.nan if ranks else result.test["rmse"],
                math.nan if ranks else result.test["mae"],
                result.seconds,
                _fitted_size(result.model),
                [] if ranks else [h.valid_rmse for h in result.history],
                result.config.engine,
            )
        )
    if data is None:
        raise ValueError("compare_models needs at least one model")
    baseline_rows = []
    for name, fit in zip(BASELINES, (global_mean, fit_damped_bias), strict=True):
        model = fit(data.train, len(data.users), len(data.items))
        trained[name] = model
        test = evaluate_test(model, data, unknown)
        baseline_rows.append(ModelScore(name, test["rmse"], test["mae"], 0.0, _fitted_size(model)))
    # Every run's config was fitted to the one dataset: one rating unit, in which lists are graded.
    rating_unit = next(iter(results.values())).config.unit
    ranking = rank_models(trained, data, threshold, seed, rating_unit)
    curves = {
        name: fold_in_curve(
            model,
            data,
            threshold,
            starts=_starts(model, results[name].config, dataset, len(data.items)),
            rating_unit=results[name].config.rating_unit,
            alpha=results[name].config.alpha,
            l2=results[name].config.l2,
        )
        for name, model in trained.items()
        if name not in BASELINES and member_forms(model) is not None
    }
    by_group = [
        row
        for name, result in results.items()
        if reads_features(result.config.model, result.config.engine)
        for row in _feature_group_rows(dataset, name, result, threshold, progress)
    ]
    return Comparison(
        dataset,
        split,
        seed,
        unknown,
        data,
        baseline_rows + scores,
        trained,
        ranking,
        threshold,
        curves,
        truth,
        pd.DataFrame(by_group) if by_group else None,
        {name: value for name, value in overrides.items() if value is not None},
    )


# The feature groups a model that uses them is scored with in turn: the ids alone, then each group
# (time for a model with a term for it); and the ratings its new users are folded in from (0: its
# features alone).
FEATURE_SETS = ("", "implicit", "side", "side,implicit")
COLD_START = (0, 1, 3, 5)


def _feature_group_rows(
    dataset: RatingsDataset, name: str, trained: RunResult, threshold: float | None, progress: bool
) -> list[dict[str, Any]]:
    """`trained`'s model trained again with each of FEATURE_SETS the data gives, and time where it
    reads it (its own run standing for the set it used): test RMSE, and the RMSE of test users folded
    in from their first COLD_START ratings, each starting from its features (what each kind of
    information adds, and to a new user)."""
    rows = []
    has_side = has_side_features(dataset, trained.config.model)
    # Without side features, a set naming them would be the ids' run again under another name.
    sets = [features for features in FEATURE_SETS if has_side or "side" not in feature_groups(features)]
    if trained.config.model in READS_TIME and _times_read_as_seconds(trained, dataset):
        sets.append(",".join([*feature_groups(sets[-1]), "time"]))  # every other group the data gives
    for features in sets:
        same = sorted(feature_groups(features)) == sorted(feature_groups(trained.config.features))
        run = (
            trained
            if same
            else train_and_evaluate(
                dataset, dataclasses.replace(trained.config, features=features), progress=progress
            )
        )
        starts = _starts(run.model, run.config, dataset, len(run.data.items))
        curve = fold_in_curve(
            run.model,
            run.data,
            threshold,
            ratings_known=COLD_START,
            starts=starts,
            rating_unit=run.config.rating_unit,
        )
        cold = {f"cold_{n}": rmse for n, rmse in zip(COLD_START, curve["rmse"], strict=False)}
        rows.append({"model": name, "features": features or "ids", "rmse": run.test["rmse"], **cold})
    return rows


def _times_read_as_seconds(trained: RunResult, dataset: RatingsDataset) -> bool:
    """Whether the time group can read the training ratings' times; if not (milliseconds, which it
    refuses), a warning that the comparison leaves it out rather than ending on its error."""
    times = trained.data.train_times
    farthest = None if times is None else beyond_seconds(times)
    if farthest is not None:
        warnings.warn(
            f"{dataset.name}: the ratings' times reach {farthest:,}, too far from 1970 for seconds "
            f"(milliseconds?): {trained.config.model}'s time group is left out of the comparison",
            stacklevel=3,
        )
    return farthest is None


# A few synthetic ratings each compiled model trains on before any clock starts.
WARM_UP_DATA = SyntheticConfig(n_users=40, n_items=30, n_ratings=400)


def _load_kernels(configs: Sequence[RunConfig], implicit: bool) -> None:
    """Each compiled model's kernels loaded (from numba's disk cache, else compiled) before any clock:
    in a fresh install ials' first fit took 16 s against 0.05 s once compiled, and the report's
    seconds are training time. Two epochs of a few ratings (or interactions, as the data are) take
    each fit's paths."""
    small = (synthetic_interactions(40, 30, per_user=10) if implicit else make_synthetic(WARM_UP_DATA))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what these few ratings say of a model is not the user's data
        for config in configs:
            if config.engine == "compiled":
                warm_up = dataclasses.replace(config, split="random", epochs=2, relevant=None)
                train_and_evaluate(small, warm_up, progress=False)


def _threshold(relevant: Relevant, dataset: RatingsDataset) -> float | None:
    """The relevance threshold `relevant` names ("scale" on interactions: every one, as the ranking
    models train on them)."""
    if relevant == "scale":
        return dataset.rating_scale[0] if dataset.implicit else relevance_threshold(dataset.rating_scale)
    if relevant == "all":
        return None
    check_relevant(float(relevant), dataset.rating_scale)
    return float(relevant)


def _check_truth(truth: PlantedTruth | None, dataset: RatingsDataset) -> None:
    """The planted arrays are indexed by raw id - 1: ids outside 1..n (0-based ones, text, more ids than
    the truth has biases) would pair a bias with another id, or fail once every model had trained."""
    if truth is None:
        return
    for side in ("user", "item"):
        ids, n = dataset.ratings[side], len(getattr(truth, f"{side}_bias"))
        integers = pd.api.types.is_integer_dtype(ids.dtype)
        if not integers or ids.min() < 1 or ids.max() > n:
            found = f"run {ids.min()}..{ids.max()}" if integers else "are not whole numbers"
            raise RecsysError(
                f"`truth` has {n} planted {side} biases, for raw {side} ids 1..{n} (indexed by id - 1), "
                f"but the data's {side} ids {found}: it is not the truth of this data"
            )


def rank_models(
    models: dict[str, nn.Module], data: EncodedSplit, threshold: float | None, seed: int, rating_unit: float
) -> pd.DataFrame:
    """Every trained model's top-N lists and the ranking baselines', judged on the same task (graded
    in `rating_unit`)."""
    n_items = len(data.items)
    task = ranking_task(data.train, data.test, len(data.users), n_items, threshold, rating_unit=rating_unit)
    popularity = torch.bincount(data.train.x[:, 1], minlength=n_items).double()
    scorers: dict[str, Scorer] = {
        name: model_scorer(model, n_items) for name, model in models.items() if name not in BASELINES
    }
    scorers["most-popular"] = constant_scorer(popularity)
    scorers[BASELINE_COLUMN] = model_scorer(models[BASELINE_COLUMN], n_items)
    scorers["random"] = random_scorer(n_items, seed)
    rows = [{"model": name, **evaluate_ranking(scorer, task, KS)} for name, scorer in scorers.items()]
    return pd.DataFrame(rows)


def models_with_biases(comparison: Comparison) -> list[str]:
    """Trained models (not baselines) that have explicit or implied biases."""
    return [
        name
        for name, model in comparison.models.items()
        if name not in BASELINES and learned_biases(model) is not None
    ]


def _side_table(comparison: Comparison, side: str) -> pd.DataFrame:
    """Per-id statistics and biases for `side` ("user" or "item"), one row per inner index."""
    data = comparison.data
    id_map = data.users if side == "user" else data.items
    column = 0 if side == "user" else 1
    index = data.train.x[:, column].numpy()
    ratings = data.train.y.numpy().astype(np.float64)
    counts = np.bincount(index, minlength=len(id_map))
    table = pd.DataFrame(
        {
            side: id_map.raw_ids,
            "n_ratings": counts,
            "mean_rating": np.bincount(index, ratings, len(id_map)) / np.maximum(counts, 1),
        }
    )
    for name, model in comparison.models.items():
        if name == BASELINE_COLUMN:
            table[name] = getattr(model, f"{side}_bias").numpy().astype(np.float64)
        elif name not in BASELINES and (biases := learned_biases(model)) is not None:
            table[name] = getattr(biases, side)
    if comparison.truth is not None:
        # Synthetic raw ids run 1..n and the planted arrays are indexed by raw id - 1.
        planted = getattr(comparison.truth, f"{side}_bias")
        table["planted"] = planted[id_map.raw_ids - 1]
    return table


def item_table(comparison: Comparison) -> pd.DataFrame:
    """One row per item: raw id, title, rating count and mean, and every model's bias."""
    table = _side_table(comparison, "item")
    table.insert(1, "title", comparison.dataset.titles(table["item"].to_numpy()))
    return table


def user_table(comparison: Comparison) -> pd.DataFrame:
    """One row per user: raw id, rating count and mean, and every model's bias."""
    return _side_table(comparison, "user")


def _spearman(a: pd.Series, b: pd.Series) -> float:
    """Spearman's rho: Pearson correlation of average ranks."""
    return float(a.rank().corr(b.rank()))


def bias_correlations(table: pd.DataFrame, models: Sequence[str]) -> pd.DataFrame:
    """Pearson and Spearman correlation of each model's biases with the baseline, the mean rating,
    the popularity (rating count) and, when present, the planted truth."""
    references = [BASELINE_COLUMN, "mean_rating", "n_ratings"] + (["planted"] if "planted" in table else [])
    rows = [
        (
            model,
            reference,
            float(table[model].corr(table[reference])),
            _spearman(table[model], table[reference]),
        )
        for model in models
        for reference in references
    ]
    return pd.DataFrame(rows, columns=["model", "against", "pearson", "spearman"])


def extreme_items(table: pd.DataFrame, model: str, n: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The `n` items with the lowest and the highest bias under `model` (fastbook's reading)."""
    columns = ["item", "title", model, "n_ratings", "mean_rating"]
    ordered = table.sort_values(model, kind="stable")[columns]
    return ordered.head(n).reset_index(drop=True), ordered.tail(n)[::-1].reset_index(drop=True)


def lookup_cost_frame(
    sizes: Sequence[int], steps: int = 10, *, progress: Callable[[str], None] | None = None
) -> pd.DataFrame:
    """Embedding lookup versus one-hot Linear per table size, one row per (size, variant).

    `progress`, when given, is called with one line as each size's measurement starts.
    """
    rows = []
    for row in lookup_cost_table(tuple(sizes), steps=steps, progress=progress):
        for variant in LOOKUP_VARIANTS:
            rows.append(
                {
                    "n_users": int(row["n_users"]),
                    "variant": variant,
                    "ms_per_step": 1000 * row[f"{variant}_seconds"],
                    "peak_MB": row[f"{variant}_peak_bytes"] / 1e6,
                    "gradient_entries": int(row[f"{variant}_gradient_entries"]),
                    "max_abs_diff": row["max_abs_diff"],
                }
            )
    return pd.DataFrame(rows)


BAG_SIZE = 100  # items per bag: about an ML-100K user's number of ratings


def bag_cost_frame(sizes: Sequence[int], steps: int = 10) -> pd.DataFrame:
    """EmbeddingBag versus multi-hot Linear per number of items, one row per (size, mode, variant)."""
    rows = []
    for n_items in sizes:
        for mode in BAG_MODES:
            row = bag_versus_multi_hot(n_items, mode=mode, bag_size=min(BAG_SIZE, n_items), steps=steps)
            for variant in BAG_VARIANTS:
                rows.append(
                    {
                        "n_items": n_items,
                        "mode": mode,
                        "variant": variant,
                        "ms_per_step": 1000 * row[f"{variant}_seconds"],
                        "peak_MB": row[f"{variant}_peak_bytes"] / 1e6,
                        "max_abs_diff": row["max_abs_diff"],
                        "max_abs_grad_diff": row["max_abs_grad_diff"],
                    }
                )
    return pd.DataFrame(rows)


def norm_bias_frame(
    train: RatingTensors, epochs: int = 2, *, progress: Callable[[str], None] | None = None
) -> pd.DataFrame:
    """What reaches and moves a bias right before a BatchNorm, a LayerNorm or no norm (the control).

    `progress`, when given, is called with one line as each (norm, dtype) training starts.
    """
    runs = [(norm, dtype) for dtype in (torch.float32, torch.float64) for norm in NORMS]
    rows = []
    for number, (norm, dtype) in enumerate(runs, start=1):
        dtype_name = str(dtype).removeprefix("torch.")
        if progress is not None:
            progress(f"measuring bias before a norm: {norm}, {dtype_name} ({number}/{len(runs)})")
        measured = bias_before_norm(train, norm, epochs=epochs, dtype=dtype)
        rows.append({"norm": norm, "dtype": dtype_name, **measured})
    return pd.DataFrame(rows)


LOOKUP_NOTE = (
    "One training step (batch 1024, 50 factors: forward, backward, SGD update) of an embedding lookup "
    "(dense or sparse gradient) and of `nn.Linear(n_users, 50, bias=False)` on one-hot rows (sparse or "
    "dense one-hot matrix), all starting from the same table. `max_abs_diff`: largest difference between "
    "the lookup and the one-hot product. `peak_MB`: peak memory the step allocates (profiler). "
    "`gradient_entries`: gradient values written per step. Times are from this run on this machine."
)
BAG_NOTE = (
    "One training step (256 bags of 100 distinct items, 50 factors: forward, backward, SGD update) of "
    "`nn.EmbeddingBag` (svdpp's implicit term) and of `nn.Linear(n_items, 50, bias=False)` on the bags' "
    "multi-hot rows: mode `sum` is the plain multi-hot, `mean` each row divided by its bag's size. "
    "`max_abs_diff` and `max_abs_grad_diff`: largest difference between the two in outputs and in the "
    "table's gradient. `peak_MB`: peak memory the step allocates (profiler), the multi-hot matrix "
    "itself (256 x n_items floats) made beforehand and not counted. Times are from this run on this machine."
)
NORM_BIAS_NOTE = (
    "fastai's EmbeddingNN shape with one hidden `nn.Linear` (bias kept) followed by BatchNorm, LayerNorm "
    "or nothing, trained 2 epochs with AdamW on this split. BatchNorm cancels the bias exactly: its gradient "
    "is rounding noise (float32) or ~1e-13 (float64). LayerNorm cancels only the bias's mean over the "
    "features (`max_abs_mean_bias_grad`), so the rest still learns. In float32 Adam rescales the rounding "
    "noise into real steps, so even the cancelled bias drifts; in float64 it stays put."
)


def measurement_sections(
    comparison: Comparison, cost_sizes: Sequence[int], *, progress: Callable[[str], None] | None = None
) -> dict[str, tuple[str, pd.DataFrame]]:
    """The report's measured sections: what a lookup saves over a one-hot Linear, a bias before a norm.

    `progress`, when given, is called with one line as each measurement starts.
    """
    lookup = lookup_cost_frame(cost_sizes, progress=progress)
    if progress is not None:
        progress("measuring EmbeddingBag against multi-hot Linear")
    bags = bag_cost_frame(cost_sizes)
    norm = norm_bias_frame(comparison.data.train, progress=progress)
    return {
        "Embedding versus Linear, measured": (LOOKUP_NOTE, lookup),
        "EmbeddingBag versus multi-hot Linear, measured": (BAG_NOTE, bags),
        "A bias right before a normalisation layer": (NORM_BIAS_NOTE, norm),
    }
