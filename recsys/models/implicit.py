"""Koren's SVD++ (`svdpp`): the biased dot product plus what each user rated, as implicit feedback,
and the user's side features.

rating = squash(user_bias[u] + item_bias[i] + (user_factors[u] + sum over u's bag of w_f y_f)
. item_factors[i]). A user's bag is N(u), the items u rated in the training part, each weighted
|N(u)|^-1/2, and (with side features) the user's own features, weighted as recsys.data.features
codes them; y_f are rows of a second table, `implicit_factors`, the side features' first. A user's
bag vector is one `nn.EmbeddingBag` sum, made once per batch for each distinct user in it rather
than once per rating (a batch of ML-100K ratings names each active user many times).

The compiled engine trains it too (`factorisation` hands it the tables and the bags), user by user:
recsys.train.compiled.

The model learns N(u) from the training pairs (`set_training_pairs`, which the trainer calls before
training), or its bags from the data's feature rows (`set_features`, the `features` setting); they
are kept in buffers, so a checkpoint rebuilds them with no outside knowledge. Until they are set
every bag is empty and the model predicts as `dotbias` does.
"""

from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from recsys.data.features import FeatureRows, implicit_block
from recsys.models.base import (
    Bags,
    Explanation,
    Factorisation,
    ImplicitFeedback,
    YRange,
    bag_vectors,
    gather_bags,
)
from recsys.models.dot import DotProductBias
from recsys.models.feature_coding import (
    CODING_BUFFERS,
    check_saved_codings,
    new_rows_sums,
    register_codings,
    set_codings,
)
from recsys.models.layers import check_pair_range, embedding_table, lookup, split_pairs, take_saved_shapes

_BAGS = ("bag_columns", "bag_weights", "bag_starts")


class SVDPlusPlus(DotProductBias):
    """`dotbias` plus a weighted sum of `implicit_factors` rows over each user's bag: the items u
    rated (each |N(u)|^-1/2), and its side features where the data sets them."""

    uses_features: ClassVar[bool] = True
    bag_columns: Tensor
    bag_weights: Tensor
    bag_starts: Tensor
    user_feature_rows: Tensor  # a digest of the feature rows the bags came from (empty: none did)
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
        # The users' bags in CSR form: user u's are bag_columns[bag_starts[u]:bag_starts[u + 1]], rows
        # of implicit_factors, with those bag_weights.
        self.register_buffer("bag_columns", torch.zeros(0, dtype=torch.long))
        self.register_buffer("bag_weights", torch.zeros(0))
        self.register_buffer("bag_starts", torch.zeros(n_users + 1, dtype=torch.long))
        register_codings(self)
        self.features_set = False  # bags from feature rows, which the training pairs then leave alone

    def set_training_pairs(self, x: Tensor) -> None:
        """Each user's bag: the items it rated in `x`, each |N(u)|^-1/2 (unless `set_features` set
        the bags, or a state dict of a model it set them on was loaded: its bags index its table's
        feature rows)."""
        users, items = split_pairs(x)
        n_users, n_items = len(self.bag_starts) - 1, len(self.item_factors.weight)
        check_pair_range(x, n_users, n_items)
        if self.features_set or len(self.user_feature_rows):  # set here, or loaded with a state dict
            return
        # The `implicit` feature rows' own block, so that an ensemble's members (bags from here) are
        # weighed to the bit as the one model is (bags from the feature rows) whose first member they are.
        bag = implicit_block(users.cpu().numpy(), items.cpu().numpy(), n_users, n_items)
        counts = torch.from_numpy(np.bincount(bag.rows, minlength=n_users))
        self._set_bags(torch.from_numpy(bag.columns), torch.from_numpy(bag.values), counts)

    def set_features(self, users: FeatureRows, items: FeatureRows) -> None:
        """Each user's bag from its feature rows less its id (recsys.data.features.features_of): its
        side features, then the items it rated; the implicit table has a row for each, the side
        features' starting at zero and the rated items' as initialised."""
        n_users = len(self.bag_starts) - 1
        if users.n_rows != n_users:
            raise ValueError(f"feature rows for {users.n_rows} users, the model has {n_users}")
        others = users.columns >= n_users  # the id block comes first: its columns are the ids
        owners = np.repeat(np.arange(n_users), np.diff(users.starts))[others]
        names = users.group_names
        n_implicit = int((users.groups == names.index("implicit")).sum()) if "implicit" in names else 0
        table = self.implicit_factors.weight
        with torch.no_grad():  # the side features' rows first, then the rated items' as initialised
            side = table.new_zeros(users.n_features - n_users - n_implicit, table.shape[1])
            self.implicit_factors.weight = nn.Parameter(torch.cat([side, table[len(table) - n_implicit :]]))
        self._set_bags(
            torch.from_numpy(users.columns[others] - n_users),
            torch.from_numpy(users.values[others]),
            torch.from_numpy(np.bincount(owners, minlength=n_users)),
        )
        set_codings(self, users, items)
        self.features_set = True

    def feature_vectors(self, users: FeatureRows) -> tuple[Tensor, Tensor]:
        """The bag vectors of users known by their features alone (rows_for_new's, for the groups it
        was trained with), and zero biases: what fold-in starts new users from."""
        with torch.no_grad():
            table = self.implicit_factors.weight
            return new_rows_sums(self, users, table), table.new_zeros(users.n_rows)

    def _set_bags(self, columns: Tensor, weights: Tensor, counts: Tensor) -> None:
        device = self.bag_starts.device
        self.bag_columns = columns.long().to(device)
        self.bag_weights = weights.float().to(device)
        self.bag_starts = F.pad(torch.cumsum(counts, 0), (1, 0)).to(device)

    def _load_from_state_dict(self, state_dict: dict[str, Tensor], prefix: str, *args: object) -> None:
        if self.features_set:  # resuming onto the data's features: they must be coded alike
            check_saved_codings(self, state_dict, prefix)
        # The bags' and the implicit table's sizes are the data's, not the model's: take the saved
        # shapes before copying.
        take_saved_shapes(self, state_dict, prefix, (*_BAGS, *CODING_BUFFERS, "implicit_factors.weight"))
        super()._load_from_state_dict(state_dict, prefix, *args)  # type: ignore[arg-type]

    def _bags(self, users: Tensor) -> Bags:
        """The bags of the distinct users of `users`."""
        return gather_bags(self.bag_columns, self.bag_weights, self.bag_starts, users)

    def implicit_vectors(self, users: Tensor) -> Tensor:
        """Each user's bag vector, sum over its bag of w_f y_f, (batch, n_factors), from one bag per
        distinct user."""
        return self._implicit(self._bags(users))

    def _implicit(self, bags: Bags) -> Tensor:
        return bag_vectors(self.implicit_factors.weight, bags)[bags.inverse]

    def _implicit_penalty_row(self, bags: Bags) -> Tensor:
        """The row that weighs the bags' rows in the penalty. Each rating weighs a row of its user's
        bag by its weight squared (1 / |N(u)| for the items rated: the mean squared norm of those
        rows, on the scale of one row's). Carried as one entry per distinct user, sqrt(ratings of u
        in the batch * that sum), so that its square is the users' share of the batch's sum of
        squares."""
        table = self.implicit_factors.weight
        squares = F.embedding_bag(
            bags.columns, table.pow(2).sum(1, keepdim=True), bags.bag_starts, mode="sum",
            per_sample_weights=bags.weights.to(table).square(),
        )  # fmt: skip
        return (bags.counts.unsqueeze(1) * squares).clamp(min=torch.finfo(table.dtype).tiny).sqrt()

    def _implicit_parts(
        self, users: Tensor, items: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, list[Tensor], Bags]:
        """The factors' dot product, the user and item biases, the implicit vectors' dot product with
        the items' (each (batch,)), dotbias's rows and the users' bags."""
        factors, user_bias, item_bias, rows = self._parts(users, items)
        bags = self._bags(users)
        implicit_score = (self._implicit(bags) * lookup(self.item_factors, items)).sum(dim=-1)
        return factors, user_bias, item_bias, implicit_score, rows, bags

    def score(self, users: Tensor, items: Tensor) -> Tensor:
        """The unsquashed prediction, without the penalty's rows (what `forward` needs)."""
        factors, user_bias, item_bias, implicit_score, _, _ = self._implicit_parts(users, items)
        return factors + user_bias + item_bias + implicit_score

    def terms(self, users: Tensor, items: Tensor) -> tuple[Tensor, list[Tensor]]:
        """The score and the rows the penalty weighs: dotbias's, then one entry per distinct user whose
        square is (its ratings in the batch) x (the mean squared norm of its N(u) rows)."""
        factors, user_bias, item_bias, implicit_score, rows, bags = self._implicit_parts(users, items)
        penalty_row = self._implicit_penalty_row(bags)
        return factors + user_bias + item_bias + implicit_score, [*rows, penalty_row]

    def id_vectors(self) -> tuple[Tensor, Tensor] | None:
        """Each user's whole vector, user_factors[u] plus its implicit vector, and the item factors."""
        with torch.no_grad():
            users = torch.arange(len(self.bag_starts) - 1, device=self.bag_starts.device)
            user_vectors = self.user_factors.weight + self.implicit_vectors(users)
        return user_vectors.detach(), self.item_factors.weight.detach()

    def factorisation(self) -> Factorisation | None:
        tables = super().factorisation()
        assert tables is not None, "dotbias's tables"
        return tables._replace(
            implicit=ImplicitFeedback(
                self.implicit_factors.weight, self.bag_columns, self.bag_weights, self.bag_starts
            )
        )

    def explain(self, users: Tensor, items: Tensor) -> Explanation | None:
        """user_bias + item_bias + factors + implicit = score, squashed to the prediction."""
        with torch.no_grad():
            factors, user_bias, item_bias, implicit_score, _, _ = self._implicit_parts(users, items)
            score = factors + user_bias + item_bias + implicit_score  # as `score` adds them
            terms = {"user_bias": user_bias, "item_bias": item_bias, "factors": factors}
            terms["implicit"] = implicit_score
            return Explanation(terms, score, self.squash(score))
