"""Koren's SVD++ (`svdpp`): the biased dot product plus what each user rated, as implicit feedback.

rating = squash(user_bias[u] + item_bias[i] + (user_factors[u] + |N(u)|^-1/2 sum_{j in N(u)} y_j)
. item_factors[i]), where N(u) is the set of items user u rated in the training part and y_j rows of
a second item table, `implicit_factors`. A user's implicit vector is one `nn.EmbeddingBag` sum, made
once per batch for each distinct user in it rather than once per rating (a batch of ML-100K ratings
names each active user many times).

The compiled engine trains it too (`factorisation` hands it the tables and N(u)), user by user:
recsys.train.compiled.

The model learns N(u) from the training pairs (`set_training_pairs`, which the trainer calls before
training); it is kept in two buffers, so a checkpoint rebuilds it with no outside knowledge. Until
it is set every N(u) is empty and the model predicts as `dotbias` does.
"""

import torch
from torch import Tensor
from torch.nn import functional as F

from recsys.models.base import Explanation, Factorisation, ImplicitFeedback, YRange
from recsys.models.dot import DotProductBias
from recsys.models.layers import check_pair_range, embedding_table, lookup, split_pairs, take_saved_shapes


class SVDPlusPlus(DotProductBias):
    """`dotbias` plus |N(u)|^-1/2 times the sum of `implicit_factors` rows over the items u rated."""

    rated_items: Tensor
    rated_starts: Tensor
    # The implicit table is summed by the functional embedding_bag and penalised through its whole
    # weight: its gradient is dense.
    sparse_gradients = False

    def __init__(
        self,
        n_users: int,
        n_items: int,
        n_factors: int,
        y_range: YRange | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(n_users, n_items, n_factors, y_range, generator)
        self.implicit_factors = embedding_table(n_items, n_factors, generator)
        # N(u) in CSR form: user u rated rated_items[rated_starts[u]:rated_starts[u + 1]].
        self.register_buffer("rated_items", torch.zeros(0, dtype=torch.long))
        self.register_buffer("rated_starts", torch.zeros(n_users + 1, dtype=torch.long))

    def set_training_pairs(self, x: Tensor) -> None:
        users, items = split_pairs(x)
        n_users, n_items = len(self.rated_starts) - 1, len(self.implicit_factors.weight)
        check_pair_range(x, n_users, n_items)
        # Each (user, item) pair once, sorted by user: a repeated rating is still one item rated.
        pairs = torch.unique(users.long().cpu() * n_items + items.long().cpu())
        counts = torch.bincount(pairs // n_items, minlength=n_users)
        device = self.rated_starts.device
        self.rated_items = (pairs % n_items).to(device)
        self.rated_starts = F.pad(torch.cumsum(counts, 0), (1, 0)).to(device)

    def _load_from_state_dict(self, state_dict: dict[str, Tensor], prefix: str, *args: object) -> None:
        # N(u)'s size is the data's, not the model's: take the saved buffers' shapes before copying.
        take_saved_shapes(self, state_dict, prefix, ("rated_items", "rated_starts"))
        super()._load_from_state_dict(state_dict, prefix, *args)  # type: ignore[arg-type]

    def _bags(self, users: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One bag per distinct user of `users`: the bags' items flattened, where each bag starts,
        its size, and each of `users`' bag."""
        distinct, inverse = torch.unique(users, return_inverse=True)
        starts = self.rated_starts[distinct]
        sizes = self.rated_starts[distinct + 1] - starts
        bag_starts = torch.cumsum(sizes, 0) - sizes
        # Where each bag's entries lie in rated_items: its user's start plus 0, 1, ... size - 1.
        entries = torch.arange(int(sizes.sum()), device=users.device) + torch.repeat_interleave(
            starts - bag_starts, sizes
        )
        return self.rated_items[entries], bag_starts, sizes, inverse

    def implicit_vectors(self, users: Tensor) -> Tensor:
        """Each user's |N(u)|^-1/2 sum_{j in N(u)} y_j, (batch, n_factors), from one bag per distinct
        user."""
        return self._implicit(*self._bags(users))

    def _implicit(self, items: Tensor, bag_starts: Tensor, sizes: Tensor, inverse: Tensor) -> Tensor:
        scale = sizes.clamp(min=1).to(self.implicit_factors.weight.dtype).rsqrt()
        sums = F.embedding_bag(
            items,
            self.implicit_factors.weight,
            bag_starts,
            mode="sum",
            per_sample_weights=scale.repeat_interleave(sizes),
        )
        return sums[inverse]

    def _implicit_penalty_row(self, items: Tensor, bag_starts: Tensor, inverse: Tensor) -> Tensor:
        """The row that weighs the bags' rows in the penalty. Each rating weighs its user's bag rows by
        1 / |N(u)|, so the implicit part of a rating's penalty is the mean squared norm of those rows,
        on the scale of one row's. Carried as one entry per distinct user, sqrt(ratings of u in the
        batch * that mean), so that its square is the users' share of the batch's sum of squares."""
        table = self.implicit_factors.weight
        mean_squares = F.embedding_bag(items, table.pow(2).sum(1, keepdim=True), bag_starts, mode="mean")
        in_batch = torch.bincount(inverse, minlength=len(bag_starts)).unsqueeze(1)
        return (in_batch * mean_squares).clamp(min=torch.finfo(table.dtype).tiny).sqrt()

    def _implicit_parts(
        self, users: Tensor, items: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, list[Tensor], tuple[Tensor, Tensor, Tensor, Tensor]]:
        """The factors' dot product, the user and item biases, the implicit vectors' dot product with
        the items' (each (batch,)), dotbias's rows and the users' bags."""
        factors, user_bias, item_bias, rows = self._parts(users, items)
        bags = self._bags(users)
        implicit_score = (self._implicit(*bags) * lookup(self.item_factors, items)).sum(dim=-1)
        return factors, user_bias, item_bias, implicit_score, rows, bags

    def score(self, users: Tensor, items: Tensor) -> Tensor:
        """The unsquashed prediction, without the penalty's rows (what `forward` needs)."""
        factors, user_bias, item_bias, implicit_score, _, _ = self._implicit_parts(users, items)
        return factors + user_bias + item_bias + implicit_score

    def terms(self, users: Tensor, items: Tensor) -> tuple[Tensor, list[Tensor]]:
        """The score and the rows the penalty weighs: dotbias's, then one entry per distinct user whose
        square is (its ratings in the batch) x (the mean squared norm of its N(u) rows)."""
        factors, user_bias, item_bias, implicit_score, rows, (bag_items, bag_starts, _, inverse) = (
            self._implicit_parts(users, items)
        )
        penalty_row = self._implicit_penalty_row(bag_items, bag_starts, inverse)
        return factors + user_bias + item_bias + implicit_score, [*rows, penalty_row]

    def id_vectors(self) -> tuple[Tensor, Tensor] | None:
        """Each user's whole vector, user_factors[u] plus its implicit vector, and the item factors."""
        with torch.no_grad():
            users = torch.arange(len(self.rated_starts) - 1, device=self.rated_starts.device)
            user_vectors = self.user_factors.weight + self.implicit_vectors(users)
        return user_vectors.detach(), self.item_factors.weight.detach()

    def factorisation(self) -> Factorisation | None:
        tables = super().factorisation()
        assert tables is not None, "dotbias's tables"
        return tables._replace(
            implicit=ImplicitFeedback(self.implicit_factors.weight, self.rated_items, self.rated_starts)
        )

    def explain(self, users: Tensor, items: Tensor) -> Explanation | None:
        """user_bias + item_bias + factors + implicit = score, squashed to the prediction."""
        with torch.no_grad():
            factors, user_bias, item_bias, implicit_score, _, _ = self._implicit_parts(users, items)
            score = factors + user_bias + item_bias + implicit_score  # as `score` adds them
            terms = {"user_bias": user_bias, "item_bias": item_bias, "factors": factors}
            terms["implicit"] = implicit_score
            return Explanation(terms, score, self.squash(score))
