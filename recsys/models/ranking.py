"""Dot products trained to rank items rather than to predict ratings: `bpr` and `ials`.

Their score ranks the items for a user (higher first) and is no rating: it is never squashed into a
y_range, so recommend, fold-in and the top-N lists read it as it is, and a report gives them no RMSE.
They are trained from interactions (or from the ratings at or above the relevance threshold) by the
compiled engine's ranking fits: BPR (recsys.train.bpr) and implicit ALS (recsys.train.als).
"""

import numpy as np
import torch
from torch import Tensor

from recsys.models.base import BilinearForm, Explanation, Factorisation, YRange
from recsys.models.dot import DotProduct
from recsys.models.layers import bias_table, lookup


def als_penalty(l2: float, alpha: float, strength_sums: np.ndarray, n_other: int) -> np.ndarray:
    """Implicit ALS's penalty on each row, as training (recsys.train.als) and fold-in solve it: `l2`
    per cell of weight, a row weighing its n_other cells of weight 1 plus alpha * the strengths of its
    positives (`strength_sums`), scaled to an average row's n_other cells."""
    return l2 * (n_other + alpha * strength_sums).astype(np.float64) / n_other


class ImplicitALSModel(DotProduct):
    """score = user_factors[u] . item_factors[i], fitted by implicit ALS (Hu, Koren and Volinsky 2008)
    to every user-item cell: 1 where the user interacted, 0 elsewhere, a cell weighing more the
    stronger the interaction. A `y_range` given is not applied (RatingModel: a ranking score is no
    rating)."""

    ranks = True
    als_rows = True


class BPRModel(ImplicitALSModel):
    """score = user_factors[u] . item_factors[i] + item_bias[i], fitted by BPR (Rendle et al. 2009):
    for a user, an item interacted with should score above one not. A user bias would cancel in that
    difference, so there is none; the item bias is each item's share of the ranking every user sees."""

    als_rows = False  # BPR's rows are SGD's: fold-in's ALS row stands in for them

    def __init__(
        self,
        n_users: int,
        n_items: int,
        n_factors: int,
        y_range: YRange | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(n_users, n_items, n_factors, y_range, generator)
        self.item_bias = bias_table(n_items)

    def terms(self, users: Tensor, items: Tensor) -> tuple[Tensor, list[Tensor]]:
        factors, rows = super().terms(users, items)
        item_bias = lookup(self.item_bias, items)
        return factors + item_bias.squeeze(-1), [*rows, item_bias]

    def factorisation(self) -> Factorisation | None:
        return Factorisation(self.user_factors.weight, self.item_factors.weight, None, self.item_bias.weight)

    def bilinear_form(self) -> BilinearForm | None:
        form = super().bilinear_form()
        assert form is not None, "a dot product has vectors"
        return form._replace(item_bias=self.item_bias.weight[:, 0].detach())

    def explain(self, users: Tensor, items: Tensor) -> Explanation | None:
        """item_bias + factors = score (not squashed: a ranking score is the prediction)."""
        with torch.no_grad():
            factors = (lookup(self.user_factors, users) * lookup(self.item_factors, items)).sum(-1)
            item_bias = lookup(self.item_bias, items).squeeze(-1)
            score = factors + item_bias
            return Explanation({"item_bias": item_bias, "factors": factors}, score, score)
