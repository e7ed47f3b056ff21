"""What the ranking fits (BPR, implicit ALS) train on, and how an epoch of theirs is watched.

A training pair is a positive when its value reaches the relevance threshold `relevant` (every
interaction, whose value is its count, does: its threshold is 1); its strength is 1 + value -
relevant, the graded gain of the top-N lists: a 4 of five stars is 1, a 5 is 2, an item played three
times 3. Implicit ALS also reads the rated pairs below the threshold, at strength 0: the user chose
the item. Each epoch is watched by NDCG@10 on the validation pairs, over a sample of its users.
"""

import math
from typing import Any, NamedTuple

import numpy as np
import torch

from recsys.config import RunConfig
from recsys.data.encoding import RatingTensors, as_held, positive_strength
from recsys.errors import RecsysError
from recsys.evaluation.ranking import evaluate_ranking, ranking_task
from recsys.evaluation.scorers import model_scorer
from recsys.models.base import RatingModel
from recsys.train.distributed import refuse_processes
from recsys.train.grouping import grouped, rows_of

# Users whose lists are scored after an epoch (a seeded sample where there are more): enough to
# follow the trend, few enough that watching costs little beside an epoch.
WATCHED_USERS = 2_000
# Epochs watched in a run, at most (evenly spread, the last always): a BPR epoch on ML-100K takes less
# than scoring the lists after it.
WATCHED_EPOCHS = 20


class ByRow(NamedTuple):
    """Positives grouped by one side (CSR): row r's are others[starts[r]:starts[r + 1]], ascending,
    with their strengths."""

    starts: np.ndarray
    others: np.ndarray
    strengths: np.ndarray


class Positives(NamedTuple):
    """The positive pairs of a training part, by user and by item."""

    by_user: ByRow
    by_item: ByRow

    @property
    def n_positives(self) -> int:
        return len(self.by_user.others)


def _unique_by_user(
    users: np.ndarray, items: np.ndarray, strengths: np.ndarray, n_users: int, n_items: int
) -> ByRow:
    """The pairs grouped by user, each user's items ascending and each given once, at its largest
    strength: grouped by item, then by user (each grouping keeps the order it is given)."""
    item_starts, users, strengths = grouped(items, users, strengths, n_items)
    user_starts, items, strengths = grouped(users, rows_of(item_starts, np.int32), strengths, n_users)
    pair_users = rows_of(user_starts)
    repeated = np.zeros(len(items), bool)
    repeated[1:] = (items[1:] == items[:-1]) & (pair_users[1:] == pair_users[:-1])
    if repeated.any():
        firsts = np.flatnonzero(~repeated)
        strengths = np.maximum.reduceat(strengths, firsts)
        items = items[firsts]
        user_starts = np.searchsorted(firsts, user_starts)
    return ByRow(user_starts, items, strengths)


def positives(
    train: RatingTensors,
    relevant: float,
    n_users: int,
    n_items: int,
    *,
    choices: bool = False,
    rating_unit: float = 1.0,
) -> Positives:
    """The pairs of `train` whose value reaches `relevant`, each with its `positive_strength`; with
    `choices`, every other pair too, at strength 0 (a rating below the threshold
    still says the user chose the item). A pair given twice counts once, at its larger strength. No
    pair reaching `relevant`, or pairs kept of one user only, is an error: nothing to rank, or no one
    to learn from but the user ranked."""
    x, values = train.x.cpu().numpy(), train.y.cpu().double().numpy()
    relevant = as_held(relevant)  # a rating of 7.7 reaches 7.7
    reaching = values >= relevant
    if not reaching.any():
        raise RecsysError(
            f"no training rating reaches {relevant:g}, the relevance threshold of the top-N lists "
            "(`relevant`, set from the ratings' scale): a ranking model has no positive to learn from"
        )
    keep = slice(None) if choices else reaching
    strengths = np.where(reaching[keep], positive_strength(values[keep], relevant, rating_unit), 0.0)
    strengths = strengths.astype(np.float32)
    by_user = _unique_by_user(x[keep, 0], x[keep, 1].astype(np.int32), strengths, n_users, n_items)
    if np.count_nonzero(np.diff(by_user.starts)) < 2:
        raise RecsysError(
            "every positive training pair is one user's: a ranking model learns what to recommend to "
            "one user from the others (give the interactions of two or more users)"
        )
    if len(by_user.others) == n_users * n_items:
        raise RecsysError(
            "every user interacted with every item: a ranking model has nothing left to rank (every "
            "event names the same pairs)"
        )
    users = rows_of(by_user.starts, np.int32)
    return Positives(by_user, ByRow(*grouped(by_user.others, users, by_user.strengths, n_items)))


class RankingWatch:
    """NDCG@10 of a model's lists on the validation pairs (relevant: reaching `relevant`), over at most
    WATCHED_USERS of their users, drawn once by `seed`, after at most WATCHED_EPOCHS of `epochs`."""

    def __init__(
        self,
        train: RatingTensors,
        valid: RatingTensors,
        n_users: int,
        n_items: int,
        relevant: float,
        rating_unit: float,
        seed: int,
        epochs: int,
    ) -> None:
        self.epochs, self.every = epochs, -(-epochs // WATCHED_EPOCHS)
        valid_users = torch.unique(valid.x[:, 0].cpu())
        if len(valid_users) > WATCHED_USERS:
            generator = torch.Generator().manual_seed(seed)
            valid_users = valid_users[torch.randperm(len(valid_users), generator=generator)[:WATCHED_USERS]]
        watched = torch.zeros(n_users, dtype=torch.bool)
        watched[valid_users] = True
        # The watched users' pairs alone (a list leaves out the items its own user trained on): the
        # whole training part's took longer than a BPR epoch at the ML-20M shape.
        train, valid = train.to("cpu"), valid.to("cpu")
        in_train, in_valid = watched[train.x[:, 0]], watched[valid.x[:, 0]]
        self.task = ranking_task(
            RatingTensors(train.x[in_train], train.y[in_train]),
            RatingTensors(valid.x[in_valid], valid.y[in_valid]),
            n_users,
            n_items,
            relevant,
            rating_unit=rating_unit,
        )
        self.n_items = n_items

    def ndcg(self, model: RatingModel, epoch: int) -> float:
        """NDCG@10 of `model`'s lists after `epoch`; NaN with no one to judge, or after an epoch not
        watched."""
        if len(self.task.users) == 0 or (epoch % self.every and epoch != self.epochs):
            return math.nan
        return evaluate_ranking(model_scorer(model, self.n_items), self.task, ks=(10,))["ndcg@10"]


class RankingEpochs:
    """What the ranking fits (recsys.train.bpr, .als) share of recsys.train.engine's protocol: the
    positives of the training part, the watch on the validation pairs, and no state beyond the
    model's tables (the seed and the epoch give the rest), in one process."""

    # Whether the fit also reads the pairs below the relevance threshold, as choices (`positives`).
    reads_choices = False

    def __init__(
        self, model: RatingModel, train: RatingTensors, valid: RatingTensors, config: RunConfig
    ) -> None:
        refuse_processes("a ranking model trains on it alone: run it without torchrun")
        tables = model.factorisation()
        assert tables is not None, "the registry checked that a ranking model has factor tables"
        self.model, self.config, self.tables = model, config, tables
        n_users, n_items = len(tables.user_factors), len(tables.item_factors)
        relevant = 1.0 if config.relevant is None else config.relevant
        self.positives = positives(
            train,
            relevant,
            n_users,
            n_items,
            choices=self.reads_choices,
            rating_unit=config.unit,
        )
        self.watch = RankingWatch(
            train, valid, n_users, n_items, relevant, config.unit, config.seed, config.epochs
        )
        self.epoch = 0  # the last run: what the watch judges

    def evaluate(self, valid: RatingTensors) -> dict[str, float]:
        """NDCG@10 of the lists on (a sample of) the validation users, after the epochs watched."""
        return {"ndcg@10": self.watch.ndcg(self.model, self.epoch)}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass
