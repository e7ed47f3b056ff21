"""An ensemble (`--members N`): the mean of several models of one kind, trained apart.

Each member starts from its own initial tables and meets the ratings in its own order, so their
errors are partly independent and their mean predicts better than any one of them: a bagged factor
model without the resampling. The compiled engine trains every member on its own squared error
(recsys.train.compiled), so N members of E epochs cost what one model of N x E epochs does.
Members' parameters are never averaged: two factor tables are only equal up to a rotation.
"""

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from recsys.models.base import Explanation, LearnedBiases, RatingModel, rating_model


class Ensemble(RatingModel):
    """rating = the mean of the members' ratings, each squashed into the members' shared y_range."""

    def __init__(self, members: Sequence[RatingModel]) -> None:
        if len(members) < 2 or len({type(member) for member in members}) != 1:
            raise ValueError("an ensemble needs two or more members of one model class")
        first = members[0]
        for number, member in enumerate(members):
            if _form(member) != _form(first):
                (users, items, y_range), (first_users, first_items, first_range) = _form(member), _form(first)
                raise ValueError(
                    f"an ensemble's members need one size and y_range: member {number} has {users} users, "
                    f"{items} items and y_range {y_range}, member 0 {first_users} users, {first_items} "
                    f"items and y_range {first_range}"
                )
        super().__init__(first.n_users, first.n_items, first.y_range)
        self.members = nn.ModuleList(members)

    def member_models(self) -> list[RatingModel]:
        return [rating_model(member) for member in self.members]

    def forward(self, x: Tensor) -> Tensor:
        # The members' `forward`: the ensemble's own call has checked the batch's indices.
        return torch.stack([member.forward(x) for member in self.member_models()]).mean(dim=0)

    def forward_with_penalty(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean prediction and the members' mean penalty (what a fastai `Learner`, which trains
        the members together through their mean, minimises)."""
        predictions, penalties = zip(
            *(member.forward_with_penalty(x) for member in self.member_models()), strict=True
        )
        return torch.stack(predictions).mean(dim=0), torch.stack(penalties).mean(dim=0)

    def set_training_pairs(self, x: Tensor) -> None:
        for member in self.member_models():
            member.set_training_pairs(x)

    def id_vectors(self) -> tuple[Tensor, Tensor] | None:
        """The members' vectors side by side, scaled so that a user's and an item's dot product is the
        mean of the members' dot products (what cosine neighbours are measured on)."""
        pairs = [member.id_vectors() for member in self.member_models()]
        vectors = [pair for pair in pairs if pair is not None]
        if len(vectors) < len(pairs):
            return None
        scale = len(vectors) ** -0.5
        users, items = zip(*vectors, strict=True)
        return torch.cat(users, dim=1) * scale, torch.cat(items, dim=1) * scale

    def learned_biases(self) -> LearnedBiases | None:
        """The members' mean biases (in the squash's units, as each member's are)."""
        found = [member.learned_biases() for member in self.member_models()]
        biases = [bias for bias in found if bias is not None]
        if not biases or len(biases) < len(found):
            return None
        return LearnedBiases(
            np.mean([bias.user for bias in biases], axis=0),
            np.mean([bias.item for bias in biases], axis=0),
            biases[0].kind,
        )

    def explain(self, users: Tensor, items: Tensor) -> Explanation | None:
        """The members' mean terms and mean score; the prediction is the mean of the members' squashed
        scores (what `forward` returns), not the squash of the mean score."""
        found = [member.explain(users, items) for member in self.member_models()]
        explained = [part for part in found if part is not None]
        if not explained or len(explained) < len(found):
            return None
        terms = {
            name: torch.stack([part.terms[name] for part in explained]).mean(dim=0)
            for name in explained[0].terms
        }
        score = torch.stack([part.score for part in explained]).mean(dim=0)
        with torch.no_grad():
            prediction = self.forward(torch.stack([users, items], dim=1))
        return Explanation(terms, score, prediction)


def _form(member: RatingModel) -> tuple[int, int, tuple[float, ...] | None]:
    """What the ensemble's own call checks a batch against (its first member's), and its squash: each
    member reads and squashes the batch itself, so they must agree."""
    y_range = None if member.y_range is None else tuple(float(end) for end in member.y_range)
    return member.n_users, member.n_items, y_range
