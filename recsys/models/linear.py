"""Dot products through `nn.Linear` layers: one-hot ids into a Linear (`linear`) and embeddings behind a
Linear projection (`embproj`). Each Linear's bias is one vector shared by every id of its side, so
these models have implied, not explicit, per-id biases (see `DotModel.learned_biases`)."""

import torch
from torch import Tensor, nn

from recsys.models.base import Factorisation, YRange
from recsys.models.dot import DotModel, DotProduct
from recsys.models.layers import global_rng_kept, init_normal_, one_hot_linear


class LinearDotProduct(DotModel):
    """rating = (W_u onehot(u) + b_u) . (W_i onehot(i) + b_i), squashed into `y_range`.

    One-hot users and items go through `nn.Linear` layers. With `bias=False` this is exactly
    `DotProduct` (`user_linear.weight == user_factors.weight.T`). With PyTorch's default
    `bias=True`, `b_u` and `b_i` are ONE vector per side shared by every id, not a bias per id:
    expanding, u.i + b_u.i + u.b_i + b_u.b_i gives each item an implied bias b_u . i and each user
    an implied bias u . b_i, tied to the factors rather than free.
    """

    def __init__(
        self,
        n_users: int,
        n_items: int,
        n_factors: int,
        y_range: YRange | None = None,
        generator: torch.Generator | None = None,
        bias: bool = True,
        sparse: bool = True,
    ) -> None:
        super().__init__(n_users, n_items, y_range)
        self.sparse = sparse
        with global_rng_kept():
            self.user_linear = nn.Linear(n_users, n_factors, bias=bias)
            self.item_linear = nn.Linear(n_items, n_factors, bias=bias)
        for layer in (self.user_linear, self.item_linear):
            init_normal_(layer.weight, generator)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)

    def vectors(self, users: Tensor, items: Tensor) -> tuple[Tensor, Tensor]:
        return (
            one_hot_linear(users, self.user_linear, self.sparse),
            one_hot_linear(items, self.item_linear, self.sparse),
        )

    def terms(self, users: Tensor, items: Tensor) -> tuple[Tensor, list[Tensor]]:
        # The penalty weighs the weight columns the one-hot rows select, not the shared bias.
        score, _ = super().terms(users, items)
        return score, [self.user_linear.weight[:, users].t(), self.item_linear.weight[:, items].t()]

    def id_vectors(self) -> tuple[Tensor, Tensor] | None:
        # Column j of a Linear weight is what one-hot id j maps to, before the shared bias.
        return self.user_linear.weight.t().detach(), self.item_linear.weight.t().detach()

    def shared_offsets(self) -> tuple[Tensor, Tensor] | None:
        if self.user_linear.bias is None or self.item_linear.bias is None:
            return None
        return self.user_linear.bias.detach(), self.item_linear.bias.detach()


class EmbeddingProjection(DotProduct):
    """rating = P_u(user_factors[u]) . P_i(item_factors[i]), each P an `nn.Linear` with bias.

    The projection's bias offsets the transformed vector; like `LinearDotProduct`, it yields
    implied per-id biases only through the other side's factors. The penalty acts on the projected
    vectors: penalising only the embeddings would let the shared projections grow and undo it.
    """

    def __init__(
        self,
        n_users: int,
        n_items: int,
        n_factors: int,
        y_range: YRange | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(n_users, n_items, n_factors, y_range, generator)
        with global_rng_kept():
            self.user_projection = nn.Linear(n_factors, n_factors)
            self.item_projection = nn.Linear(n_factors, n_factors)
        for layer in (self.user_projection, self.item_projection):
            # Identity start, so training begins where DotProduct would.
            with torch.no_grad():
                layer.weight.copy_(torch.eye(n_factors))
            nn.init.zeros_(layer.bias)

    def vectors(self, users: Tensor, items: Tensor) -> tuple[Tensor, Tensor]:
        user_vectors, item_vectors = super().vectors(users, items)
        return self.user_projection(user_vectors), self.item_projection(item_vectors)

    def id_vectors(self) -> tuple[Tensor, Tensor] | None:
        # Each id's vector as the dot product sees it: projected, before the projection's bias.
        return (
            (self.user_factors.weight @ self.user_projection.weight.t()).detach(),
            (self.item_factors.weight @ self.item_projection.weight.t()).detach(),
        )

    def shared_offsets(self) -> tuple[Tensor, Tensor] | None:
        return self.user_projection.bias.detach(), self.item_projection.bias.detach()

    def factorisation(self) -> Factorisation | None:
        return None  # the projections sit between the tables and the dot product
