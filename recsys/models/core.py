"""Rating models: each maps a (batch, 2) LongTensor of [user, item] indices to (batch,) ratings.

They compute predictions and nothing else (no optimizer, device or seeding), so the shared trainer,
the contract tests and fastai's `Learner` can all drive any of them.
"""

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from recsys.errors import RecsysError

YRange = tuple[float, float]

# fastai's initialisation for collaborative-filtering embeddings: small, so the first dot products
# sit near zero and the sigmoid starts in its linear middle.
INIT_STD = 0.01


def sigmoid_range(x: Tensor, y_range: YRange | None) -> Tensor:
    """Squash into `y_range` as fastai does: sigmoid(x) * (hi - lo) + lo; identity for None."""
    if y_range is None:
        return x
    low, high = y_range
    return torch.sigmoid(x) * (high - low) + low


def _init_(weight: Tensor, generator: torch.Generator | None) -> Tensor:
    """Normal(0, INIT_STD) initialisation drawn from the caller's generator (no global seeding)."""
    with torch.no_grad():
        return weight.normal_(0.0, INIT_STD, generator=generator)


def embedding_table(n: int, n_factors: int, generator: torch.Generator | None) -> nn.Embedding:
    """An embedding table initialised from `generator`."""
    embedding = nn.Embedding(n, n_factors)
    _init_(embedding.weight, generator)
    return embedding


def lookup(table: nn.Embedding, ids: Tensor) -> Tensor:
    """The rows `ids` (1-d) of `table`, as `table(ids)` gives them.

    For dense gradients on the CPU through `index_select`, whose backward (`index_add_`) took
    23-58 us per ML-100K table at batch 2048 against 87-133 us for nn.Embedding's own backward: a
    fifth of a u1 training run. A table set to sparse gradients, or on a GPU (where `index_add_`
    is not deterministic), keeps the module call.
    """
    if table.sparse or ids.device.type != "cpu":
        return table(ids)
    return table.weight.index_select(0, ids)


class _SumOfSquares(torch.autograd.Function):
    """Sum of squares of every entry of every tensor given: one dot product forward and one product
    backward per tensor. Autograd through `pow(2).sum(-1)` per tensor takes ~6 ops each and was a
    third of a training step's forward and backward (measured at batch 4096)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, *tensors: Tensor) -> Tensor:
        ctx.save_for_backward(*tensors)
        flat = [t.reshape(-1) for t in tensors]
        return torch.stack([torch.dot(f, f) for f in flat]).sum()

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> tuple[Tensor, ...]:
        return tuple(t * (2 * grad) for t in ctx.saved_tensors)  # type: ignore[attr-defined]


def _mean_squared_norm(*rows: Tensor) -> Tensor:
    """Batch mean of the summed squared L2 norms of per-example parameter rows."""
    return _SumOfSquares.apply(*rows) / len(rows[0])  # type: ignore[no-any-return]


def split_pairs(x: Tensor) -> tuple[Tensor, Tensor]:
    """Split a (batch, 2) index tensor into user and item columns."""
    if x.dim() != 2 or x.shape[1] != 2:
        raise ValueError(f"expected a (batch, 2) tensor of [user, item] indices, got {tuple(x.shape)}")
    return x[:, 0], x[:, 1]


class Factorisation(NamedTuple):
    """A model's tables when its rating is squash(user_factors[u] . item_factors[i] + user_bias[u] +
    item_bias[i]): what an engine that updates them in place (recsys.train.compiled) needs."""

    user_factors: Tensor
    item_factors: Tensor
    user_bias: Tensor | None
    item_bias: Tensor | None


class _DotModel(nn.Module):
    """rating = sigmoid_range(user_vector . item_vector + extra, y_range); subclasses say how
    vectors are made and what is added."""

    def __init__(self, y_range: YRange | None) -> None:
        super().__init__()
        self.y_range = y_range

    def vectors(self, users: Tensor, items: Tensor) -> tuple[Tensor, Tensor]:
        """The (batch, n_factors) user and item vectors whose dot product is the score."""
        raise NotImplementedError

    def terms(self, users: Tensor, items: Tensor) -> tuple[Tensor, list[Tensor]]:
        """The unsquashed score and the per-id parameter rows it used (what the L2 penalty weighs)."""
        user_vectors, item_vectors = self.vectors(users, items)
        return (user_vectors * item_vectors).sum(dim=-1), [user_vectors, item_vectors]

    def score(self, users: Tensor, items: Tensor) -> Tensor:
        """The unsquashed prediction."""
        return self.terms(users, items)[0]

    def forward(self, x: Tensor) -> Tensor:
        return sigmoid_range(self.score(*split_pairs(x)), self.y_range)

    def forward_with_penalty(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Predictions and the L2 penalty of the rows they used, from one set of lookups (the trainer's
        hot path: a separate `penalty` call would look every row up twice)."""
        score, rows = self.terms(*split_pairs(x))
        return sigmoid_range(score, self.y_range), _mean_squared_norm(*rows)

    def penalty(self, x: Tensor) -> Tensor:
        """L2 penalty of the per-id rows this batch uses (the trainer's regulariser)."""
        return self.forward_with_penalty(x)[1]

    def factorisation(self) -> Factorisation | None:
        """The tables of a plain biased or unbiased dot product; None for a model of another form."""
        return None


class DotProduct(_DotModel):
    """rating = user_factors[u] . item_factors[i], optionally squashed into `y_range`."""

    def __init__(
        self,
        n_users: int,
        n_items: int,
        n_factors: int,
        y_range: YRange | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(y_range)
        self.user_factors = embedding_table(n_users, n_factors, generator)
        self.item_factors = embedding_table(n_items, n_factors, generator)

    def vectors(self, users: Tensor, items: Tensor) -> tuple[Tensor, Tensor]:
        return lookup(self.user_factors, users), lookup(self.item_factors, items)

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
        self.user_bias = nn.Embedding(n_users, 1)
        self.item_bias = nn.Embedding(n_items, 1)
        nn.init.zeros_(self.user_bias.weight)
        nn.init.zeros_(self.item_bias.weight)

    def terms(self, users: Tensor, items: Tensor) -> tuple[Tensor, list[Tensor]]:
        # Biases are penalised too, as in Surprise's SVD, so a movie rated twice cannot claim an
        # extreme bias.
        score, rows = super().terms(users, items)
        user_bias, item_bias = lookup(self.user_bias, users), lookup(self.item_bias, items)
        return score + user_bias.squeeze(-1) + item_bias.squeeze(-1), [*rows, user_bias, item_bias]

    def factorisation(self) -> Factorisation | None:
        return Factorisation(
            self.user_factors.weight, self.item_factors.weight, self.user_bias.weight, self.item_bias.weight
        )


def one_hot_linear(indices: Tensor, linear: nn.Linear, sparse: bool) -> Tensor:
    """Apply `linear` to one-hot rows of `indices`: one_hot @ weight.T (+ bias).

    This is the Linear layer's arithmetic, not a lookup. With `sparse=True` the one-hot batch is a
    sparse COO matrix, so the product skips the zeros but still yields a dense gradient for the
    whole weight; with `sparse=False` it is the plain dense matmul `nn.Linear` does.
    """
    n = linear.in_features
    if not sparse:
        return linear(F.one_hot(indices, n).to(linear.weight.dtype))
    rows = torch.arange(indices.shape[0], device=indices.device)
    one_hot = torch.sparse_coo_tensor(
        torch.stack([rows, indices]),
        torch.ones(indices.shape[0], dtype=linear.weight.dtype, device=indices.device),
        (indices.shape[0], n),
        is_coalesced=True,  # one entry per row, rows in order
        check_invariants=False,  # built here from valid indices
    )
    out = torch.sparse.mm(one_hot, linear.weight.t())
    return out if linear.bias is None else out + linear.bias


class LinearDotProduct(_DotModel):
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
        super().__init__(y_range)
        self.sparse = sparse
        self.user_linear = nn.Linear(n_users, n_factors, bias=bias)
        self.item_linear = nn.Linear(n_items, n_factors, bias=bias)
        for layer in (self.user_linear, self.item_linear):
            _init_(layer.weight, generator)
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

    def factorisation(self) -> Factorisation | None:
        return None  # the projections sit between the tables and the dot product


ModelBuilder = Callable[..., nn.Module]

MODELS: dict[str, ModelBuilder] = {
    "dot": DotProduct,
    "dotbias": DotProductBias,
    "linear": LinearDotProduct,
    "embproj": EmbeddingProjection,
}


def build_model(
    name: str,
    n_users: int,
    n_items: int,
    n_factors: int,
    y_range: YRange | None,
    generator: torch.Generator | None = None,
) -> nn.Module:
    """Build the registered model `name`; an unknown name lists the valid ones."""
    if name not in MODELS:
        raise RecsysError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}")
    return MODELS[name](n_users, n_items, n_factors, y_range=y_range, generator=generator)
