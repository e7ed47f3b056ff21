"""The whole chain for one run: split -> encode -> build -> fit -> evaluate -> run folder.

Scripts and notebooks call `train_and_evaluate`; it holds no CLI concerns.
"""

import dataclasses
import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from recsys.config import (
    PER_RATING,
    RunConfig,
    default_features,
    feature_sides_read,
    model_for,
    reads_features,
    reads_time,
    unread,
)
from recsys.data.dataset import RatingsDataset, default_y_range, rating_unit, span_text
from recsys.data.encoding import EncodedSplit, RatingTensors, encode_split
from recsys.data.features import FeatureRows, features_of, rows_for_new, table_rows
from recsys.data.splits import Split, make_split
from recsys.errors import DataError, RecsysError, listed, short_reason
from recsys.evaluation.metrics import evaluate, evaluate_test
from recsys.evaluation.ranking import RankingTask, evaluate_ranking, ranking_task, relevance_threshold
from recsys.evaluation.scorers import model_scorer
from recsys.files import read_file, write_json
from recsys.models.base import RatingModel, members_use_features
from recsys.models.bayes import BayesianFM
from recsys.models.feature_coding import keeps_codings, saved_codings
from recsys.models.fold_in import FoldedUsers, fold_in
from recsys.models.layers import float32_default
from recsys.models.registry import model_entry
from recsys.names import (
    CHECKPOINT_FILE,
    CHECKPOINT_SECONDS,
    CONFIG_FILE,
    DATA_FILE,
    METRICS_FILE,
    RECOMMEND_FILE,
    feature_groups,
)
from recsys.status import status_line
from recsys.train.allocator import keep_freed_memory
from recsys.train.checkpoints import Checkpoint, save_checkpoint
from recsys.train.distributed import distributed_rank
from recsys.train.memory import check_fits
from recsys.train.threads import torch_threads
from recsys.train.trainer import EpochStats, fit, ratings_fingerprint
from recsys.workflows.recommend_data import RecommendData
from recsys.workflows.run_folder import run_folder_of_a_call

# An autograd run takes at least this many optimizer steps: on a small file the tuned batch sizes
# would leave a handful of steps, too few to move the model past predicting the mean.
MIN_STEPS = 100
# torch's intra-op threads while a compiled-engine run (whose own threads are numba's) or a
# device-engine run on the CPU prepares its data and scores (one, as on each torchrun rank, so that
# the two score alike).
SCORING_TORCH_THREADS = 1
# Training ratings scored after a run to check it beats their mean (a stride through them).
MEAN_CHECK_SAMPLE = 20_000
# A `y_range` this many times wider than the training ratings is named when a model fits worse than
# their mean: its sigmoid is nearly flat over them, so steps of any size barely move the predictions.
WIDE_RANGE = 10.0
# The settings a fit worse than the mean points to, each with what goes wrong with it where it says.
LOOK_AT = {
    "lr": " (too large overshoots, too small learns nothing)",
    "epochs": "",
    "l2": "",
    "init_scale": "",
}


@dataclass(frozen=True)
class RunResult:
    """A trained model, the data it was trained on, and how it did."""

    config: RunConfig  # with y_range resolved
    model: nn.Module
    data: EncodedSplit
    history: list[EpochStats]
    # rmse and mae under config.unknown; for a ranking model, its lists' metrics (evaluate_ranking's)
    test: dict[str, float]
    seconds: float

    def metrics(self) -> dict[str, Any]:
        """Plain-data summary for metrics.json: a ranking model's test RMSE and MAE are None (its
        scores are no ratings) and its lists' metrics are under test_ranking."""
        ranking = {"test_ranking": self.test} if self.config.ranks else {}
        return {
            "test_rmse": self.test.get("rmse"),
            "test_mae": self.test.get("mae"),
            **ranking,
            "n_train": len(self.data.train),
            "n_test": len(self.data.test),  # with ids seen in training
            "n_test_unknown": len(self.data.unknown_test_ratings),
            # What test_rmse and test_mae cover: the unseen ids' ratings too, where they get the mean.
            "n_test_scored": len(self.data.test)
            + (len(self.data.unknown_test_ratings) if self.config.unknown == "mean" else 0),
            "unknown_policy": self.config.unknown,
            "n_users": len(self.data.users),
            "n_items": len(self.data.items),
            "train_seconds": self.seconds,
            "history": [dataclasses.asdict(stats) for stats in self.history],
        }


def prepare(
    dataset: RatingsDataset, config: RunConfig, resume: Checkpoint | None = None
) -> tuple[EncodedSplit, RunConfig]:
    """Split and encode `dataset`; resolve the y_range and rating unit from its rating scale when
    unset, cap an autograd run's batch size so that it takes at least MIN_STEPS steps, and name the
    data in the config as it is named (config_for's default is ml-100k), so a run records what it read.

    A split that leaves nothing to train on, or no test rating the model can be scored on, is an
    error naming the flag that changes it. With `resume` (its checkpoint's `config`), the data must be
    what that run was trained on, checked as soon as it is split: other data is named as such, not by
    a setting of the run's that does not fit it.
    """
    if resume is None:  # (data the run was trained on fitted its model)
        check_model_fits_data(dataset, config)
    split = make_split(
        dataset, config.split, test_frac=config.test_frac, test_n=config.test_n, seed=config.seed
    )
    if len(split.train) == 0 and resume is None:
        raise RecsysError(
            f"split {config.split} of {dataset.name} leaves no training ratings{_split_hint(config)}"
        )
    data = encode_split(split, with_times=reads_time(config))
    if resume is not None:
        _check_resumable(resume, data, dataset)
    if len(data.test) == 0:
        raise RecsysError(
            f"split {config.split} of {dataset.name} leaves no test rating whose user and item are both "
            f"in training ({_test_counts(split, data)}){_split_hint(config)}"
        )
    config = dataclasses.replace(config, dataset=dataset.name)
    config = fitted_config(config, dataset.rating_scale, len(data.train), implicit=dataset.implicit)
    top = float(dataset.ratings["rating"].max())
    if config.ranks and config.relevant is not None and top < config.relevant:  # whatever the split
        raise RecsysError(
            f"no rating of {dataset.name} reaches {config.relevant:g}, the relevance threshold of the top-N "
            f"lists (its highest is {top:g}): a ranking model learns from the ratings at or above it and is "
            "judged on them; lower `relevant`"
        )
    if config.ranks and len(_judged(data, config)) == 0:  # every list metric would be NaN
        raise RecsysError(
            f"split {config.split} of {dataset.name} leaves no test user with a relevant item (a test "
            f"rating of at least `relevant` {config.relevant:g} on an item the user did not rate in "
            f"training), so no list can be judged; lower `relevant` or choose another split"
        )
    return data, config


def _judged(data: EncodedSplit, config: RunConfig) -> Tensor:
    """The test users a ranking model's lists are judged for."""
    return _task(data, config).users


def check_model_fits_data(dataset: RatingsDataset, config: RunConfig) -> None:
    """Refuse interactions to a rating model, and to a ranking model data it cannot learn from."""
    if dataset.implicit and not config.ranks:
        raise RecsysError(
            f"{dataset.name} holds interactions, not ratings: {config.model} predicts ratings; train a "
            "ranking model on them: bpr or ials"
        )
    if config.ranks:
        _check_rankable(dataset)


def _check_rankable(dataset: RatingsDataset) -> None:
    """Refuse data a ranking model cannot learn from, before it is split: one pair (every event the
    same), one user (nobody else to learn from) or one item (nothing to rank)."""
    ratings = dataset.ratings
    if len(ratings) == 0:
        return
    what = "interactions" if dataset.implicit else "ratings"
    # Compared with the first, not counted (unique): a command checks this before its run's header.
    user, item = ratings["user"].iloc[0], ratings["item"].iloc[0]
    one_user, one_item = bool((ratings["user"] == user).all()), bool((ratings["item"] == item).all())
    if one_user and one_item:
        raise RecsysError(
            f"{dataset.name}: every one of its {what} is the same pair (user {user}, item {item}); a ranking "
            "model needs many users' interactions with many items"
        )
    if one_user:
        raise RecsysError(
            f"{dataset.name}: all of its {what} are user {user}'s; a ranking model learns what to "
            f"recommend to a user from other users (give {what} of two or more users)"
        )
    if one_item:
        raise RecsysError(
            f"{dataset.name}: all of its {what} are with item {item}; there is nothing to rank it "
            f"against (give {what} with two or more items)"
        )


def check_relevant(relevant: float, rating_scale: tuple[float, float]) -> None:
    """Refuse a relevance threshold above the top of the scale, which no rating reaches, or not a
    finite number (NaN compares false with every rating: every metric had been NaN)."""
    if not math.isfinite(relevant):
        raise RecsysError(f"`relevant` must be a finite rating, got {relevant!r}")
    if relevant > rating_scale[1]:
        raise RecsysError(
            f"`relevant` {relevant:g} is above the ratings' scale {span_text(*rating_scale)}: "
            "no rating could be relevant, and no list judged"
        )


def fitted_config(
    config: RunConfig, rating_scale: tuple[float, float], n_train: int, *, implicit: bool = False
) -> RunConfig:
    """`config` fitted to its data: the y_range (not for a ranking model, whose scores are no ratings)
    and rating unit of `rating_scale` where unset, the relevance threshold (every interaction of
    `implicit` data), and an autograd run's batch size capped so that `n_train` ratings give at least
    MIN_STEPS steps."""
    if config.relevant is None:
        relevant = rating_scale[0] if implicit else relevance_threshold(rating_scale)
        config = dataclasses.replace(config, relevant=relevant)
    else:
        check_relevant(config.relevant, rating_scale)
    if config.y_range is None and not config.ranks:
        config = dataclasses.replace(config, y_range=default_y_range(rating_scale))
    if config.rating_unit is None:  # interactions' counts and weights are on no star scale: 1
        config = dataclasses.replace(config, rating_unit=1.0 if implicit else rating_unit(rating_scale))
    _warn_of_a_range_that_cannot_fit(config, rating_scale)
    _check_linear_scores_fit(config, rating_scale)
    largest_batch = max(1, n_train * config.epochs // MIN_STEPS)
    if config.engine == "autograd" and config.batch_size > largest_batch:
        config = dataclasses.replace(config, batch_size=largest_batch)
    return config


def data_features(
    config: RunConfig, dataset: RatingsDataset, data: EncodedSplit
) -> tuple[FeatureRows, FeatureRows]:
    """The feature rows of `data`'s users and items that `config.features` names: the implicit
    feedback from its training ratings only."""
    return features_of(
        feature_groups(config.features), data.users.raw_ids, data.items.raw_ids, data.train.pairs().x.numpy(),
        dataset.user_features, dataset.item_features,
    )  # fmt: skip


def has_side_features(dataset: RatingsDataset, model: str) -> bool:
    """Whether `dataset` has a side-feature table `model` reads (svdpp: the users' alone)."""
    return any(getattr(dataset, f"{side}_features") is not None for side in feature_sides_read(model))


def warn_if_no_side_features(config: RunConfig, given: bool, missing: str) -> None:
    """`features`, set apart from the model's default, names side features, and none were `given`
    (`missing` says so): the run trains without them. The default names every group data can give,
    and reads side features silently where the data has them."""
    if (
        not given
        and reads_features(config.model, config.engine)
        and "side" in feature_groups(config.features)
        and config.features != default_features(config.model, config.engine)
    ):
        warnings.warn(
            f"{config.model}: `features` names side, but {missing}; training without them", stacklevel=3
        )


def new_user_starts(
    model: RatingModel,
    config: RunConfig,
    table: pd.DataFrame | None,
    users: np.ndarray | None,
    rated: Sequence[np.ndarray],
    n_items: int,
) -> list[tuple[Tensor, Tensor]] | None:
    """Where a model that `uses_features` places new users before fold-in corrects them from their
    ratings, for each member (fold_in's `starts`): raw ids `users` with their rows of the user feature
    `table` (where it has a row for them), or (`users` None) as many users as `rated` with none, and
    the items each rated (`rated`, inner indices); None for any other model."""
    if not members_use_features(model):
        return None
    groups = feature_groups(config.features)
    new = table if users is not None else None
    ids = users if users is not None else np.arange(len(rated))
    members = model.member_models()
    codings = saved_codings(members[0], "user")  # training's: the table may have grown new users since
    rows = rows_for_new(groups, codings, new, ids, rated, n_items)
    return [member.feature_vectors(rows) for member in members]


def described_users(
    model: RatingModel, config: RunConfig, table: pd.DataFrame | None, users: np.ndarray
) -> np.ndarray:
    """Which of raw `users`, new to the model, it can place by their row of the user feature `table`:
    a model that reads side features (bfm; svdpp with `side`)."""
    # A model trained without a user table (no codings) has nothing a row of one could say.
    if (
        table is None
        or not model.uses_features
        or "side" not in feature_groups(config.features)
        or not keeps_codings(model, "user")
    ):
        return np.zeros(len(users), dtype=bool)
    return table_rows(table, users) >= 0  # as training found their rows


def placed_users(
    model: RatingModel,
    config: RunConfig,
    table: pd.DataFrame | None,
    users: np.ndarray,
    rated: Sequence[np.ndarray],
    n_items: int,
) -> FoldedUsers:
    """New raw `users` with no ratings, each where its row of `table` and the items it rated
    (`rated`, inner indices) place it: a cold start from what they are."""
    starts = new_user_starts(model, config, table, users, rated, n_items)
    nothing = (torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.float64))
    return fold_in(
        model, [nothing] * len(users), relevant=config.relevant, starts=starts, rating_unit=config.rating_unit
    )


def _test_counts(split: Split, data: EncodedSplit) -> str:
    """How many test ratings the split made, and how many of them name an id unseen in training."""
    return f"{len(split.test):,} test ratings, {len(data.unknown_test_ratings):,} of them with unseen ids"


def _split_hint(config: RunConfig) -> str:
    """The flag that gives a split more (or fewer) test ratings."""
    if config.split == "user-last" and config.test_n > 1:
        return (
            f"; lower `test_n` (now {config.test_n}): users with at most that many ratings stay "
            "wholly in training"
        )
    if config.split == "user-last":
        return (
            "; it holds out each user's last rating but keeps users with one rating wholly in training, "
            "and drops a held-out item no training rating names: use more data or `split` random"
        )
    if config.split == "user":
        return (
            f"; it holds out `test_frac` (now {config.test_frac}) of each user's ratings, rounded, and "
            "always keeps one in training, so a user with one rating (or too few for that share to round to "
            "one) gives none: raise `test_frac`, use more data or `split` random"
        )
    if config.split in ("random", "time"):
        return f"; change `test_frac` (now {config.test_frac}) or use more data"
    return ""


def train_and_evaluate(
    dataset: RatingsDataset,
    config: RunConfig,
    *,
    run_dir: str | Path | None = None,
    progress: bool = True,
    on_epoch: Callable[[EpochStats], None] | None = None,
    resume: Checkpoint | None = None,
    threads: int | None = None,
    checkpoint_every: float = CHECKPOINT_SECONDS,
) -> RunResult:
    """Train `config.model` on `dataset` and score it on the test split.

    Per-epoch validation is on the test ratings with known ids (monitoring only: nothing is selected
    by it, the number of epochs is fixed). With `run_dir`, a checkpoint (with the state to resume
    from) is written after an epoch once `checkpoint_every` seconds have passed since the last one
    (0: after every epoch), and config, metrics and final checkpoint at the end; the folder must be
    new or empty, or hold the checkpoint `resume` continues, and is locked while the run lasts (as
    train.py's --out: another run's files are never written over). With `resume`,
    training continues from that checkpoint's last completed epoch and ends as the uninterrupted
    run would have. `threads`: CPU threads of the compiled engine (None: all this
    process may use); the result does not depend on it. Meanwhile torch's own threads are
    SCORING_TORCH_THREADS on the compiled engine and the CPU's device engine (restored after; the
    device engine trains on `threads` torch threads, one by default), and the process keeps the memory
    it frees (`keep_freed_memory`).
    """
    keep_freed_memory()  # fit sets it too; here it is in place before the data is prepared
    run_dir = Path(run_dir) if run_dir is not None else None
    with run_folder_of_a_call(run_dir, resume=resume is not None), float32_default():
        if resume is not None:
            config = resume.config
        # Beside the compiled engine torch only builds the tables and scores the test ratings: on one
        # thread it never waits for a second one that another process holds.
        one_thread = config.engine == "compiled" or (config.engine == "device" and config.device == "cpu")
        with torch_threads(SCORING_TORCH_THREADS if one_thread else None):
            kind = "user-item pairs" if dataset.implicit else "ratings"
            lead = progress and distributed_rank()[0] == 0
            with status_line(f"splitting and encoding {len(dataset.ratings):,} {kind}", lead) as say:
                data, config = prepare(dataset, config, resume)
                check_fits(config, len(data.users), len(data.items))
                say(f"building {config.model} for {len(data.users):,} users and {len(data.items):,} items")
                generator = torch.Generator().manual_seed(config.seed)
                model = model_for(config, len(data.users), len(data.items), generator)
                if model.uses_features:
                    model.set_features(*data_features(config, dataset, data))
                    if reads_time(config):
                        model.set_times(data.train.x[:, 0], data.train.x[:, 2])
                        _warn_if_one_day_each(cast(BayesianFM, model), dataset, len(data.users))
                    # svdpp reads the users' table alone: the items' (ml-latest-small's genres) give it
                    # nothing.
                    sides = feature_sides_read(config.model)
                    warn_if_no_side_features(
                        config,
                        has_side_features(dataset, config.model),
                        f"{dataset.name} has no {' or '.join(sides)} side features (give it a table of what "
                        f"its {' or '.join(f'{side}s' for side in sides)} are)",
                    )
                # The final checkpoint keeps the last epoch's training state: a finished run resumes as
                # a no-op.
                last_training = None
                if resume is not None:
                    model.load_state_dict(resume.model.state_dict())
                    last_training = resume.training
                if run_dir is not None:
                    say(f"writing what each user rated into {run_dir}")
                    write_json(run_dir / CONFIG_FILE, config.to_dict())
                    _write_data_record(run_dir, dataset)
                    RecommendData.of(dataset, data.users, data.items).save(run_dir / RECOMMEND_FILE)

            def checkpoint(stats: EpochStats, training: dict[str, Any]) -> None:
                nonlocal last_training
                last_training = training
                # The last epoch is saved again with the metrics; a ranking model's before them too, as
                # its final lists (every judged user against every item) can take minutes, and an
                # interrupt then keeps the trained model for --resume to score.
                if run_dir is not None and (stats.epoch < config.epochs or config.ranks):
                    metrics = {"epoch": stats.epoch}
                    save_checkpoint(
                        run_dir / CHECKPOINT_FILE, model, config, data.users, data.items, metrics, training
                    )

            start = time.perf_counter()
            history = fit(
                model,
                data.train,
                data.test,
                config,
                generator,
                threads=threads,
                progress=progress,
                on_epoch=on_epoch,
                on_checkpoint=checkpoint if run_dir is not None else None,
                checkpoint_every=checkpoint_every,
                resume=last_training,
            )
            seconds = time.perf_counter() - start
            result = RunResult(
                config, model.cpu(), data, history, _test_scores(model, data, config, progress), seconds
            )
            if not config.ranks and distributed_rank()[0] == 0:  # said once, not by every rank
                warn_if_worse_than_mean(result.model, result.data.train, result.data.train_mean, config)
            if run_dir is not None:
                metrics = result.metrics()
                save_checkpoint(
                    run_dir / CHECKPOINT_FILE, model, config, data.users, data.items, metrics, last_training
                )
                write_json(run_dir / METRICS_FILE, metrics)
            return result


def _test_scores(model: nn.Module, data: EncodedSplit, config: RunConfig, progress: bool) -> dict[str, float]:
    """RMSE and MAE on the test part; for a ranking model, its lists' metrics there (every test pair
    reaching `relevant` is relevant), with a bar where `progress`."""
    if not config.ranks:
        return evaluate_test(model, data, config.unknown)
    return evaluate_ranking(model_scorer(model, len(data.items)), _task(data, config), progress=progress)


def _task(data: EncodedSplit, config: RunConfig) -> RankingTask:
    """`data`'s test part judged as `config` judges it: relevant from `relevant`, graded in its
    rating unit."""
    n_users, n_items = len(data.users), len(data.items)
    return ranking_task(data.train, data.test, n_users, n_items, config.relevant, rating_unit=config.unit)


def _warn_if_one_day_each(model: BayesianFM, dataset: RatingsDataset, n_users: int) -> None:
    """Warn when every user of the training ratings rated on one day alone: `model`'s time group then
    has a bin per user, which the users' biases already are."""
    if model.n_time_bins <= n_users:
        warnings.warn(
            f"`features` time: each user of {dataset.name} rated on one day alone (data without "
            "timestamps numbers its rows as seconds), so the time group adds nothing; drop time",
            stacklevel=3,
        )


def _write_data_record(run_dir: Path, dataset: RatingsDataset) -> None:
    """The run folder's data.json: where `dataset` was read and how, for a resume to read it again."""
    write_json(run_dir / DATA_FILE, {"dataset": dataset.name, **dataset.origin})


def record_moved_data(run_dir: Path, dataset: RatingsDataset, checkpoint: Checkpoint) -> None:
    """Write where a finished run's data is now into its data.json, once it is checked to be the data
    the run was trained on, as a resume checks it: a new user's cold start reads it again from there."""
    with run_folder_of_a_call(run_dir, resume=True):
        prepare(dataset, checkpoint.config, checkpoint)
        _write_data_record(run_dir, dataset)


def _check_resumable(checkpoint: Checkpoint, data: EncodedSplit, dataset: RatingsDataset) -> None:
    """A checkpoint resumes only onto the same users, items and ratings (named by the file they came
    from, where one did), with its training state saved."""
    same_ids = np.array_equal(checkpoint.users.raw_ids, data.users.raw_ids) and np.array_equal(
        checkpoint.items.raw_ids, data.items.raw_ids
    )
    source = dataset.origin.get("ratings", dataset.name)
    if not same_ids:
        raise RecsysError(
            f"cannot resume: the users and items of {source} are not those the run was trained on (the "
            "data changed since the run started)"
        )
    if checkpoint.training is None:
        raise RecsysError("cannot resume: the checkpoint holds no training state to continue from")
    if checkpoint.training.get("ratings") != ratings_fingerprint(data.train, data.test):
        raise RecsysError(
            f"cannot resume: the ratings of {source} differ from those the run was trained on (the data "
            "changed since the run started)"
        )


def warn_if_worse_than_mean(
    model: nn.Module, train: RatingTensors, train_mean: float, config: RunConfig
) -> None:
    """Warn when `config`'s model fits (a sample of) its training ratings worse than their mean does.
    The causes differ (steps too large or too small, too few, a penalty too strong, a `y_range` whose
    sigmoid is flat over the ratings), so the settings to look at are named, not one fix."""
    stride = max(1, len(train) // MEAN_CHECK_SAMPLE)
    x, y = train.x[::stride].cpu(), train.y[::stride].cpu()
    model_rmse = evaluate(model, RatingTensors(x, y))["rmse"]
    mean_rmse = float(torch.sqrt(torch.mean((y - train_mean) ** 2)))
    if model_rmse > mean_rmse > 0:  # every rating alike: the mean is all there is to fit
        low, high = config.y_range or (0.0, 0.0)
        wide = high - low > WIDE_RANGE * float(y.max() - y.min())
        also = f", and `y_range` ({low:g}, {high:g}), far wider than the ratings" if wide else ""
        # Only the settings the fit reads: a Gibbs sampler has no `lr`, `l2` or `init_scale`.
        ignored = unread(model_entry(config.model).fit) if config.engine in PER_RATING else ()
        named = [f"`{name}`{LOOK_AT[name]}" for name in LOOK_AT if name not in ignored]
        warnings.warn(
            f"{config.model} fits its training ratings worse than their mean does (RMSE {model_rmse:.4f} "
            f"against {mean_rmse:.4f}); look at {listed(named)}{also}",
            stacklevel=3,
        )


# Rating units (recsys.data.dataset.rating_unit) within which the Bayesian models' autograd fit, whose
# scores are linear in the ratings' own units, moves as its tuned steps were tuned to (five stars):
# measured on ML-100K rescaled, 0-2.5 and 1-10 fit as 1-5 does, 0-1 and 0-100 no better than the mean.
LINEAR_SCORE_UNITS = (0.5, 2.0)


def _warn_of_a_range_that_cannot_fit(config: RunConfig, scale: tuple[float, float]) -> None:
    """Warn, before training, where the predictions cannot reach the ratings: a `y_range` given that
    leaves out part of the rating scale."""
    if config.y_range is not None and not config.ranks:
        low, high = config.y_range
        if low > scale[0] or high < scale[1]:
            warnings.warn(
                f"`y_range` ({low:g}, {high:g}) does not cover the ratings' scale {span_text(*scale)}: "
                f"no prediction can leave it (leave `y_range` out for the data's {default_y_range(scale)})",
                stacklevel=4,
            )


def _check_linear_scores_fit(config: RunConfig, scale: tuple[float, float]) -> None:
    """Refuse a Bayesian model's autograd fit on a scale far from five stars: its scores, unlike the
    sigmoid models', are in the ratings' own units, so its steps and penalty (tuned on five stars)
    are far too small or too large there, and it trains to no better than the ratings' mean."""
    unit, (least, most) = config.unit, LINEAR_SCORE_UNITS
    if config.engine == "autograd" and model_entry(config.model).sampled and not least <= unit <= most:
        raise RecsysError(
            f"`engine` autograd: {config.model} on it scores in the ratings' own units with steps "
            f"tuned on five stars, and on a scale of {span_text(*scale)} fits no better than the "
            "ratings' mean; use `engine` compiled (its Gibbs sampler, the default), or ratings on a "
            "scale near 1-5"
        )


def recorded_data(run_dir: Path) -> dict[str, Any]:
    """Where a run read its data (its data.json: a folder, or a ratings file and how it was read);
    empty when it has none. One that is there but unreadable is an error naming it: the data would
    otherwise be looked for elsewhere without a word."""
    path = run_dir / DATA_FILE
    try:
        record = json.loads(read_file(path))
    except FileNotFoundError:
        return {}
    except OSError as error:  # not damage: a folder in its place, no permission to read it
        raise DataError(f"cannot read {path}: {error.strerror or error}") from None
    except ValueError as error:
        raise DataError(f"{path} is damaged ({short_reason(error)}); {_RESTORE_RECORD}") from None
    if not isinstance(record, dict):
        raise DataError(f"{path} is damaged (not a JSON object); {_RESTORE_RECORD}")
    return record


_RESTORE_RECORD = "it says where the run read its data: restore it"
