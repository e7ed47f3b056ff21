"""Scores of every item for a block of users: what full ranking sorts.

A scorer maps (b,) inner user indices to a (b, n_items) tensor in which a higher value ranks an item
higher. A rating model's scorer gives its predicted ratings, from one matrix product where the model
is a bilinear form (`RatingModel.bilinear_form`) and else from every pair through `forward`; the
baselines' scorers rank every user's items alike (popularity, damped item bias) or by chance.
"""

from collections.abc import Callable

import torch
from torch import Tensor, nn

from recsys.evaluation.metrics import predict
from recsys.models.base import mean_of_forms, member_forms

Scorer = Callable[[Tensor], Tensor]


def model_scorer(model: nn.Module, n_items: int) -> Scorer:
    """`model`'s predicted ratings of items 0..n_items-1, in eval mode and without gradients."""
    if (pairs := member_forms(model)) is not None:  # one matrix product per block
        members, forms = zip(*pairs, strict=True)
        return lambda users: mean_of_forms(members, forms, users)

    def pairwise(users: Tensor) -> Tensor:
        pairs = torch.stack(
            [users.repeat_interleave(n_items), torch.arange(n_items).repeat(len(users))], dim=1
        )
        return predict(model, pairs).reshape(len(users), n_items)

    return pairwise


def constant_scorer(item_scores: Tensor) -> Scorer:
    """The same scores for every user (a popularity chart, an item bias)."""
    return lambda users: item_scores.expand(len(users), -1)


def random_scorer(n_items: int, seed: int) -> Scorer:
    """Scores drawn afresh for each block of users from one generator: lists by chance, reproducible
    for the same blocks in the same order."""
    generator = torch.Generator().manual_seed(seed)
    return lambda users: torch.rand(len(users), n_items, generator=generator)
