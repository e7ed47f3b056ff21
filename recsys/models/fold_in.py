"""Fold-in: a user the model never saw, placed among the trained items from a few ratings.

The item side stays as trained; the user's vector (and bias, where the model has one per user) is a
ridge regression in closed form, as LensKit folds new users into its matrix factorisation. The
ratings are first mapped back through the model's squash (`RatingModel.unsquash`), so that the
regression is linear in the score: minimise sum_j (x_j . w - (unsquash(r_j) - item_bias_j))^2 +
regularization * |w|^2, where x_j is item j's vector (with a 1 appended for the user's bias). A
Bayesian model's form lays its kept draws side by side: the penalty is then the draws' mean, each
draw's part penalised as one model's. An ensemble folds the user into each member and predicts the
members' mean, as it does for known users. A model that reads features starts each user where they
place it (`starts`, one per member: each member's vectors place the user apart), and the ridge
corrects that start.

A ranking model's scores are no ratings: its new user is one row of implicit ALS instead (as the
`implicit` library recalculates a user), fitted to every item, 1 for those rated at or above
`relevant` and 0 elsewhere, a positive weighing 1 + alpha * (1 + (rating - relevant) / the rating
unit), as training weighs it (recsys.train.interactions.positives). For ials (`RatingModel.als_rows`)
that is the row its training solves: an item rated below `relevant` is a 1 at confidence 1 too, alpha
is the run's and the penalty its l2 scaled by the row's weight (recsys.models.ranking.als_penalty); bpr's
row stands in with RANKING_ALPHA and `regularization`.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from recsys.data.encoding import as_held, positive_strength
from recsys.errors import RecsysError
from recsys.models.base import BilinearForm, RatingModel, mean_of_forms, member_forms, rating_model
from recsys.models.ranking import als_penalty

# Chosen by validation inside ML-100K's u1.base (docs/evaluation.md, "Fold-in").
REGULARIZATION = 3.0
# The positives' extra confidence of a ranking model whose rows are no ALS solves (bpr), or of a run
# that names none: RunConfig's default alpha.
RANKING_ALPHA = 1.0


@dataclass(frozen=True)
class FoldedUsers:
    """New users as rows of each member's bilinear form: new user j is row j."""

    members: list[RatingModel]
    forms: list[BilinearForm]  # the members' item sides with the new users' rows

    def __len__(self) -> int:
        """How many new users: rows of each form."""
        return len(self.forms[0].user_vectors)

    def scores(self, users: Tensor) -> Tensor:
        """Predicted ratings of every item for new users `users` (rows of this fold-in): a scorer."""
        return mean_of_forms(self.members, self.forms, users)

    def predict(self, users: Tensor, items: Tensor) -> Tensor:
        """Predicted ratings of the pairs (users[k], items[k]): new-user rows and inner item indices."""
        return mean_of_forms(self.members, self.forms, users, items)


def _ridge(features: Tensor, targets: Tensor, regularization: float | Tensor) -> Tensor:
    """argmin_w |features w - targets|^2 + sum_c regularization_c w_c^2 (one strength for every
    coordinate, or one each), solved in whichever of the primal (k x k) and dual (n x n) forms is
    smaller: the features scaled by 1/sqrt(strength), a plain ridge of strength 1, scaled back."""
    n, k = features.shape
    if n == 0:
        return features.new_zeros(k)
    scale = torch.as_tensor(regularization, dtype=features.dtype, device=features.device).expand(k).rsqrt()
    scaled = features * scale
    eye = torch.eye(min(n, k), dtype=features.dtype, device=features.device)
    if n < k:
        return scale * (scaled.T @ torch.linalg.solve(scaled @ scaled.T + eye, targets))
    return scale * torch.linalg.solve(scaled.T @ scaled + eye, scaled.T @ targets)


def _implicit_row(
    item_vectors: Tensor, items: Tensor, strengths: Tensor, regularization: float, alpha: float
) -> Tensor:
    """One user's implicit ALS row given every item's vector: (V^T V + sum over the positives of
    (c - 1) v v^T + regularization I) w = sum of c v over the positives, c = 1 + alpha * strength."""
    confidence = 1 + alpha * strengths
    positives = item_vectors[items]
    system = item_vectors.T @ item_vectors + (positives.T * (confidence - 1)) @ positives
    system += regularization * torch.eye(len(system), dtype=system.dtype, device=system.device)
    return torch.linalg.solve(system, positives.T @ confidence)


def _check_starts(
    starts: Sequence[tuple[Tensor, Tensor]], pairs: list[tuple[RatingModel, BilinearForm]], n_users: int
) -> None:
    """Starts place users of a rating model with a bias per user: for each member, a vector as wide as
    its form's and a bias for each user folded in."""
    if len(starts) != len(pairs):
        raise ValueError(f"starts for {len(starts)} member(s), and the model has {len(pairs)}")
    for (member, form), (vectors, bias) in zip(pairs, starts, strict=True):
        if member.ranks or form.user_bias is None:
            raise ValueError("starts place the users of a rating model with a user bias (bfm, svdpp)")
        width = form.item_vectors.shape[1]
        if vectors.shape != (n_users, width) or bias.shape != (n_users,):
            raise ValueError(
                f"starts must be ({n_users}, {width}) vectors and {n_users} biases, got "
                f"{tuple(vectors.shape)} and {tuple(bias.shape)}"
            )


def _check_ratings_of(user: int, items: Tensor, ratings: Tensor, n_items: int) -> None:
    """A new user's items must be whole indices into the model's items, one finite rating each."""
    where = f"new user {user}"
    if items.dim() != 1 or ratings.dim() != 1 or len(items) != len(ratings):
        raise ValueError(
            f"{where}: expected as many item indices as ratings, each a 1-D tensor; got shapes "
            f"{tuple(items.shape)} and {tuple(ratings.shape)}"
        )
    if items.is_floating_point() or items.is_complex() or items.dtype == torch.bool:
        raise ValueError(f"{where}: item indices must be whole numbers, got {items.dtype}")
    if items.dtype in (torch.uint16, torch.uint32, torch.uint64):  # torch has no min or max for these
        items = torch.from_numpy(np.minimum(items.numpy(), np.iinfo(np.int64).max).astype(np.int64))
    if len(items) and not (int(items.min()) >= 0 and int(items.max()) < n_items):
        bad = int(items[(items < 0) | (items >= n_items)][0])
        raise ValueError(f"{where}: item index {bad} is outside the model's items 0..{n_items - 1}")
    if not torch.isfinite(ratings.double()).all():
        raise ValueError(f"{where}: its ratings must be finite numbers, got {ratings.tolist()}")


def fold_in(
    model: RatingModel,
    ratings_of_users: Sequence[tuple[Tensor, Tensor]],
    regularization: float = REGULARIZATION,
    relevant: float | None = None,
    starts: Sequence[tuple[Tensor, Tensor]] | None = None,
    rating_unit: float | None = None,
    alpha: float | None = None,
    l2: float | None = None,
) -> FoldedUsers:
    """Fit a new user to each (inner item indices, ratings) pair of `ratings_of_users`, with the
    model's item side fixed. A user with no ratings gets a zero vector and bias: the bias-only cold
    start, the items ranked by their own terms. For a ranking model a rating at or above `relevant`
    (None: any) is a positive. `starts`: for each member (the model itself, for all but an ensemble),
    each user's vector and bias before its ratings (a model that `uses_features`: what its features
    say, BayesianFM.feature_vectors), which the ridge then corrects, so a user with no ratings is
    placed by its features alone. `rating_unit`: the size of the
    ratings against five stars (RunConfig's; None: 1), by which a ranking model's positives weigh.
    `alpha` and `l2`: the run's, with which a model of `als_rows` (ials) solved its rows (None:
    RANKING_ALPHA and `regularization`)."""
    if not regularization > 0:
        raise ValueError(f"regularization must be positive, got {regularization!r}")
    pairs = member_forms(rating_model(model))  # another module is a TypeError naming it
    if pairs is None:
        raise RecsysError(
            f"{type(model).__name__} has no user vectors to fold a new user into; train a model that "
            "has them (`model` dotbias)"
        )
    if starts is not None:
        _check_starts(starts, pairs, len(ratings_of_users))
    n_items = len(pairs[0][1].item_vectors)
    for user, (items, ratings) in enumerate(ratings_of_users):
        _check_ratings_of(user, torch.as_tensor(items), torch.as_tensor(ratings), n_items)
    held = as_held(relevant) if relevant is not None else None  # a rating of 7.7 reaches 7.7
    members, forms = [], []
    for place, (member, form) in enumerate(pairs):
        item_vectors, item_bias = form.item_vectors.double(), form.item_bias.double()
        with_bias = form.user_bias is not None
        device = item_vectors.device  # a model on a GPU folds its new users in there
        rows = []
        if starts is not None:
            start_vectors, start_bias = (
                part.to(device=device, dtype=torch.float64) for part in starts[place]
            )
        for user, (items, ratings) in enumerate(ratings_of_users):
            items = torch.as_tensor(items, dtype=torch.long, device=device)
            rated = torch.as_tensor(ratings, dtype=torch.float64, device=device)
            if member.ranks:
                floor = held if held is not None else float(rated.min()) if len(rated) else 0.0
                reaching = rated >= floor
                strengths = positive_strength(rated, floor, rating_unit or 1.0) * reaching
                if member.als_rows:  # the row training solves: a choice below the threshold is a 1 too
                    confidence = RANKING_ALPHA if alpha is None else alpha
                    strength_sum = np.array(float(strengths.sum()))
                    row_l2 = (
                        regularization
                        if l2 is None
                        else float(als_penalty(l2, confidence, strength_sum, n_items))
                    )
                    row = _implicit_row(item_vectors, items, strengths, row_l2, confidence)
                else:
                    row = _implicit_row(
                        item_vectors, items[reaching], strengths[reaching], regularization, RANKING_ALPHA
                    )
                rows.append(row)
                continue
            targets = member.unsquash(rated) - item_bias[items]
            features = item_vectors[items]
            if with_bias:
                features = torch.cat([features, features.new_ones(len(items), 1)], dim=1)
            start = features.new_zeros(features.shape[1])
            if starts is not None:
                start[: item_vectors.shape[1]] = start_vectors[user]
                if with_bias:
                    start[-1] = start_bias[user]
            # The mean of the draws' penalties: the same strength per draw as one model's (the bias,
            # one number, as one model's).
            penalty = features.new_full((features.shape[1],), regularization * member.draws_side_by_side())
            penalty[item_vectors.shape[1] :] = regularization
            rows.append(start + _ridge(features, targets - features @ start, penalty))
        k = item_vectors.shape[1]
        solved = torch.stack(rows) if rows else item_vectors.new_zeros(0, k + with_bias)
        user_vectors = solved[:, :k].to(form.item_vectors.dtype)
        user_bias = solved[:, k].to(form.item_bias.dtype) if with_bias else None
        members.append(member)
        forms.append(BilinearForm(user_vectors, form.item_vectors, user_bias, form.item_bias))
    return FoldedUsers(members, forms)
