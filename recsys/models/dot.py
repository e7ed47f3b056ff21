"""Dot-product models: fastai's EmbeddingDot (`dot`) and EmbeddingDotBias (`dotbias`), and the shape
every model here shares: rating = squash(user vector . item vector + extra terms)."""

from abc import abstractmethod

import torch
from torch import Tensor

from recsys.models.base import (
    BilinearForm,
    Explanation,
    Factorisation,
    LearnedBiases,
    RatingModel,
    YRange,
    to_numpy,
)
from recsys.models.layers import (
    bias_table,
    embedding_table,
    lookup,
    mean_squared_norm,
    split_pairs,
)


class DotModel(RatingModel):
    """rating = sigmoid_range(user_vector . item_vector + extra, y_range); subclasses say how
    vectors are made and what is added."""

    @abstractmethod
    def vectors(self, users: Tensor, items: Tensor) -> tuple[Tensor, Tensor]:
        """The (batch, n_factors) user and item vectors whose dot product is the score."""

    def terms(self, users: Tensor, items: Tensor) -> tuple[Tensor, list[Tensor]]:
        """The unsquashed score and the per-id parameter rows it used (what the L2 penalty weighs)."""
        user_vectors, item_vectors = self.vectors(users, items)
        return (user_vectors * item_vectors).sum(dim=-1), [user_vectors, item_vectors]

    def score(self, users: Tensor, items: Tensor) -> Tensor:
        """The unsquashed prediction."""
        return self.terms(users, items)[0]

    def forward(self, x: Tensor) -> Tensor:
        return self.squash(self.score(*split_pairs(x)))

    def forward_with_penalty(self, x: Tensor) -> tuple[Tensor, Tensor]:
        # One set of lookups for both (the trainer's hot path: a separate `penalty` call would look
        # every row up twice).
        score, rows = self.terms(*split_pairs(x))
        return self.squash(score), mean_squared_norm(*rows)

    def shared_offsets(self) -> tuple[Tensor, Tensor] | None:
        """The offset vectors b_u and b_i added to every user's and every item's vector (a Linear
        layer's bias) before the dot product; None when there are none."""
        return None

    def bilinear_form(self) -> BilinearForm | None:
        """Each id's vector with its side's shared offset added: (u + b_u) . (i + b_i), no free biases."""
        vectors = self.id_vectors()
        if vectors is None:
            return None
        user_vectors, item_vectors = vectors
        offsets = self.shared_offsets()
        if offsets is not None:
            user_vectors, item_vectors = user_vectors + offsets[0], item_vectors + offsets[1]
        return BilinearForm(user_vectors, item_vectors, None, item_vectors.new_zeros(len(item_vectors)))

    def learned_biases(self) -> LearnedBiases | None:
        """Implied biases from the shared offsets: expanding (u + b_u) . (i + b_i) = u.i + b_u.i + u.b_i
        + b_u.b_i, item i gets the bias b_u . i and user u the bias u . b_i (tied to the factors, not
        free); None without offsets."""
        offsets, vectors = self.shared_offsets(), self.id_vectors()
        if offsets is None or vectors is None:
            return None
        (user_offset, item_offset), (user_vectors, item_vectors) = offsets, vectors
        return LearnedBiases(
            to_numpy(user_vectors @ item_offset), to_numpy(item_vectors @ user_offset), "implied"
        )


class DotProduct(DotModel):
    """rating = user_factors[u] . item_factors[i], optionally squashed into `y_range`."""

    def __init__(
        self,
        n_users: int,
        n_items: int,
        n_factors: int,
        y_range: YRange | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(n_users, n_items, y_range)
        self.user_factors = embedding_table(n_users, n_factors, generator)
        self.item_factors = embedding_table(n_items, n_factors, generator)

    def vectors(self, users: Tensor, items: Tensor) -> tuple[Tensor, Tensor]:
        return lookup(self.user_factors, users), lookup(self.item_factors, items)

    def id_vectors(self) -> tuple[Tensor, Tensor] | None:
        return self.user_factors.weight.detach(), self.item_factors.weight.detach()

    def factorisation(self) -> Factorisation | None:
        return Factorisation(self.user_factors.weight, self.item_factors.weight, None, None)


class DotProductBias(DotProduct):
    """rating = u . i + user_bias[u] + item_bias[i], squashed into `y_range` (fastai's
    EmbeddingDotBias)."""

    def __init__(
        self,
        n_users: int,
        n_items: int,
        n_factors: int,
        y_range: YRange | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(n_users, n_items, n_factors, y_range, generator)
        # Biases start at zero: the sigmoid's middle already sits near the mean rating.
        self.user_bias, self.item_bias = bias_table(n_users), bias_table(n_items)

    def _parts(self, users: Tensor, items: Tensor) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
        """The factors' dot product, the user and item biases (batch,), and the rows they used."""
        factors, rows = super().terms(users, items)
        user_bias, item_bias = lookup(self.user_bias, users), lookup(self.item_bias, items)
        return factors, user_bias.squeeze(-1), item_bias.squeeze(-1), [*rows, user_bias, item_bias]

    def terms(self, users: Tensor, items: Tensor) -> tuple[Tensor, list[Tensor]]:
        # Biases are penalised too, as in Surprise's SVD, so a movie rated twice cannot claim an
        # extreme bias.
        factors, user_bias, item_bias, rows = self._parts(users, items)
        return factors + user_bias + item_bias, rows

    def learned_biases(self) -> LearnedBiases | None:
        return LearnedBiases(
            to_numpy(self.user_bias.weight[:, 0]), to_numpy(self.item_bias.weight[:, 0]), "explicit"
        )

    def factorisation(self) -> Factorisation | None:
        return Factorisation(
            self.user_factors.weight, self.item_factors.weight, self.user_bias.weight, self.item_bias.weight
        )

    def bilinear_form(self) -> BilinearForm | None:
        form = super().bilinear_form()
        assert form is not None, "a dot product has vectors"
        return form._replace(
            user_bias=self.user_bias.weight[:, 0].detach(), item_bias=self.item_bias.weight[:, 0].detach()
        )

    def explain(self, users: Tensor, items: Tensor) -> Explanation | None:
        """user_bias + item_bias + factors = score, squashed to the prediction."""
        with torch.no_grad():
            # The same operations in the same order as `terms`, so the parts add up bit for bit.
            factors, user_bias, item_bias, _ = self._parts(users, items)
            score = factors + user_bias + item_bias
            terms = {"user_bias": user_bias, "item_bias": item_bias, "factors": factors}
            return Explanation(terms, score, self.squash(score))
