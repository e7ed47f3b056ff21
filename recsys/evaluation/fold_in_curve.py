"""How well fold-in serves new users: accuracy against the number of ratings known.

For each test user with enough training ratings, all but their first n (by time) are hidden, the
user is folded into the trained model from those n (recsys.models.fold_in; n = 0 is the bias-only
cold start), and their test ratings are scored: RMSE, and NDCG@10 in the full-ranking protocol of
recsys.evaluation.ranking. The trained model's own scores on the same users close the curve. The item
side was trained with these users' full ratings, which flatters fold-in slightly on data this small.
"""

import math
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import pandas as pd
import torch
from torch import nn

from recsys.data.encoding import EncodedSplit, RatingTensors
from recsys.evaluation.metrics import predict, rmse
from recsys.evaluation.ranking import BLOCK_ENTRIES, evaluate_ranking, ranking_task
from recsys.evaluation.scorers import model_scorer
from recsys.models.base import rating_model
from recsys.models.fold_in import REGULARIZATION, FoldedUsers, fold_in

RATINGS_KNOWN = (0, 1, 3, 5, 10, 20)
CURVE_K = 10


def first_ratings(data: EncodedSplit, users: np.ndarray, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each of `users`' first `n` training ratings by time (training order where there are no
    times; ties keep training order): (inner items, ratings) per user."""
    x, y = data.train.x.numpy(), data.train.y.numpy()
    times = data.train_times if data.train_times is not None else np.arange(len(y))
    order = np.lexsort((np.arange(len(y)), times, x[:, 0]))  # by user, then time, then row
    starts = np.searchsorted(x[order, 0], users)
    rows = [order[start : start + n] for start in starts]
    return [(torch.from_numpy(x[r, 1]), torch.from_numpy(y[r]).double()) for r in rows]


def _folded_scores(folded: FoldedUsers, row_of: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
    """The folded-in users' scores, for inner user indices (`row_of` maps them to fold-in rows)."""
    return folded.scores(row_of[users])


def _every_list_ties(folded: FoldedUsers, n_users: int, n_items: int) -> bool:
    """Whether every folded-in user scores all `n_items` items alike, a block of users at a time (as
    the lists are made): the first user with two scores apart ends the search."""
    size = max(1, BLOCK_ENTRIES // max(n_items, 1))
    for first in range(0, n_users, size):
        scores = folded.scores(torch.arange(first, min(first + size, n_users)))
        if not bool((scores.amax(dim=1) == scores.amin(dim=1)).all()):
            return False
    return True


def fold_in_curve(
    model: nn.Module,
    data: EncodedSplit,
    threshold: float | None,
    ratings_known: Sequence[int] = RATINGS_KNOWN,
    regularization: float = REGULARIZATION,
    starts: Callable[[np.ndarray, list[np.ndarray]], list[tuple[torch.Tensor, torch.Tensor]] | None]
    | None = None,
    rating_unit: float | None = None,
    alpha: float | None = None,
    l2: float | None = None,
) -> pd.DataFrame:
    """RMSE and NDCG@10 of folded-in users per number of ratings known, and of the trained model
    ("trained" row), on the test users with at least max(ratings_known) training ratings; NDCG@10
    NaN where every user's items tie (no list to judge). `starts`
    (raw user ids, the inner items each has rated) places a model's new users before fold-in corrects
    them (recsys.workflows.experiment.new_user_starts: by their features). A folded-in user has no
    times, so the pairs are scored without them, the trained model's too (bfm's time group: now).
    `rating_unit`, `alpha` and `l2`: the run's (fold_in's), by which a ranking model's rows are solved."""
    model, data = rating_model(model), data.pairs()
    n_users, n_items = len(data.users), len(data.items)
    counts = torch.bincount(data.train.x[:, 0], minlength=n_users)
    test_users = torch.unique(data.test.x[:, 0])
    users = test_users[counts[test_users] >= max(ratings_known)]
    in_curve = torch.isin(data.test.x[:, 0], users)
    test = RatingTensors(data.test.x[in_curve], data.test.y[in_curve])
    task = ranking_task(data.train, test, n_users, n_items, threshold, rating_unit=rating_unit or 1.0)
    row_of = torch.full((n_users,), -1, dtype=torch.long)
    row_of[users] = torch.arange(len(users))
    rows = []
    # A ranking model's scores are no ratings: its curve has NDCG@10 alone.
    error = (lambda predictions: math.nan) if model.ranks else (lambda predictions: rmse(predictions, test.y))
    for n in ratings_known:
        known = first_ratings(data, users.numpy(), n)
        placed = (
            None
            if starts is None
            else starts(data.users.decode(users.numpy()), [i.numpy() for i, _ in known])
        )
        folded = fold_in(model, known, regularization, threshold, placed, rating_unit, alpha, l2)
        predictions = folded.predict(row_of[test.x[:, 0]], test.x[:, 1])
        # Every new user's items tie (a model without biases, from nothing it can use: the zero
        # vector): the lists would be the items in index order, a measure of the ids, not the model.
        scorer = partial(_folded_scores, folded, row_of)
        tied = _every_list_ties(folded, len(users), n_items)
        ndcg = math.nan if tied else evaluate_ranking(scorer, task, (CURVE_K,))[f"ndcg@{CURVE_K}"]
        rows.append((str(n), error(predictions.float()), ndcg))
    trained = evaluate_ranking(model_scorer(model, n_items), task, (CURVE_K,))
    rows.append(("trained", error(predict(model, test.x)), trained[f"ndcg@{CURVE_K}"]))
    table = pd.DataFrame(rows, columns=["ratings_known", "rmse", f"ndcg@{CURVE_K}"])
    table.attrs["users"] = len(users)
    return table
