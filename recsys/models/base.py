"""The one interface every rating model implements, and the plain data its accessors return.

A model says what it has: its predictions and their L2 penalty (both abstract, so no model can leave
the penalty out), its per-id vectors and biases, the tables the compiled engine trains in place, and
a prediction in parts; each accessor answers None for a model that has no such thing. Code outside
`recsys.models` asks these questions and never names a concrete model class.
"""

import math
from abc import ABCMeta, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING, ClassVar, Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from recsys.models.layers import INDEX_DTYPES, check_pair_range
from recsys.models.squash import YRange, sigmoid_range, sigmoid_range_inverse

if TYPE_CHECKING:
    from recsys.data.features import FeatureRows

BiasKind = Literal["explicit", "implied"]
# Fold-in reads a rating at least this share of the y_range inside its ends (RatingModel.unsquash): a
# rating at an end, a millionth inside, had a score of 13.8, and with y_range (0, 5) u1's fold-in RMSE
# grew with the ratings known (docs/evaluation.md). The default range's 1-5 stars lie inside it.
UNSQUASH_INSIDE = 0.04
# A sampled model keeps at most this many draws, side by side in its tables, so they set its size; its
# accuracy with fewer was measured (docs/findings.md): as many as `bpmf`'s defaults keep.
MAX_KEPT_DRAWS = 200


class Bags(NamedTuple):
    """The bags of a batch's users, each distinct user's once, flattened bag after bag (what
    `F.embedding_bag` sums, from `bag_starts`)."""

    users: Tensor  # the distinct users
    inverse: Tensor  # each of the batch's users, as its place in `users`
    counts: Tensor  # how often each distinct user occurs in the batch
    columns: Tensor  # the bags' rows
    weights: Tensor
    bag_starts: Tensor  # where each distinct user's bag starts in `columns`
    owners: Tensor  # each entry's bag, as its user's place in `users`


def gather_bags(columns: Tensor, weights: Tensor, starts: Tensor, users: Tensor) -> Bags:
    """The bags (user u's: columns[starts[u]:starts[u + 1]] with those `weights`) of the distinct
    users of `users`."""
    distinct, inverse, counts = torch.unique(users, return_inverse=True, return_counts=True)
    first = starts[distinct]
    sizes = starts[distinct + 1] - first
    bag_starts = torch.cumsum(sizes, 0) - sizes
    owners = torch.repeat_interleave(torch.arange(len(distinct), device=users.device), sizes)
    # Where each entry lies in `columns`: its user's start plus 0, 1, ... size - 1.
    entries = torch.arange(len(owners), device=users.device) + (first - bag_starts)[owners]
    return Bags(distinct, inverse, counts, columns[entries], weights[entries], bag_starts, owners)


def bag_vectors(table: Tensor, bags: Bags) -> Tensor:
    """Each distinct user's bag vector: the weighted sum of `table` rows over its bag."""
    return F.embedding_bag(
        bags.columns, table, bags.bag_starts, mode="sum", per_sample_weights=bags.weights.to(table)
    )


class ImplicitFeedback(NamedTuple):
    """SVD++'s implicit part of a user's vector: a weighted sum of `factors` rows, user u's bag
    columns[starts[u]:starts[u + 1]] with those `weights` (the items u rated, each 1/sqrt(their
    count), and u's side features)."""

    factors: Tensor
    columns: Tensor
    weights: Tensor
    starts: Tensor

    def bags(self, users: Tensor) -> Bags:
        """The bags of the distinct users of `users`."""
        return gather_bags(self.columns, self.weights, self.starts, users)


class Factorisation(NamedTuple):
    """A model's tables when its rating is squash((user_factors[u] + implicit(u)) . item_factors[i] +
    user_bias[u] + item_bias[i]): what an engine that updates them in place (recsys.train.compiled)
    needs. `implicit`: SVD++'s implicit feedback, None (implicit(u) zero) for a plain dot product."""

    user_factors: Tensor
    item_factors: Tensor
    user_bias: Tensor | None
    item_bias: Tensor | None
    implicit: ImplicitFeedback | None = None


@dataclass(frozen=True)
class LearnedBiases:
    """Per-user and per-item biases by inner index, as float64 copies.

    `kind` "explicit": one free bias per id, learned; "implied": no bias of the model's own, but a
    vector shared by every id of one side whose dot product with the other side's factors acts as one.
    """

    user: np.ndarray
    item: np.ndarray
    kind: BiasKind


class BilinearForm(NamedTuple):
    """A model's score for every pair at once: score[u, i] = user_vectors[u] . item_vectors[i] +
    user_bias[u] + item_bias[i], squashed by the model's `squash` into its prediction. Full ranking
    scores a block of users against every item from it, and fold-in fits a new user's row of it."""

    user_vectors: Tensor  # (n_users, k)
    item_vectors: Tensor  # (n_items, k)
    user_bias: Tensor | None  # (n_users,); None: the model has no free bias per user
    item_bias: Tensor  # (n_items,), with any global term; zeros for a model without item biases

    def scores(self, users: Tensor) -> Tensor:
        """The unsquashed scores of every item for `users`, (len(users), n_items)."""
        scores = self.user_vectors[users] @ self.item_vectors.T + self.item_bias
        if self.user_bias is not None:
            scores += self.user_bias[users].unsqueeze(1)
        return scores

    def pair_scores(self, users: Tensor, items: Tensor) -> Tensor:
        """The unsquashed scores of the pairs (users[k], items[k])."""
        scores = (self.user_vectors[users] * self.item_vectors[items]).sum(1) + self.item_bias[items]
        return scores if self.user_bias is None else scores + self.user_bias[users]


class Explanation(NamedTuple):
    """A batch of predictions in parts: named `terms` that add up to `score`, and `prediction`, what
    `forward` returns: the score squashed into the model's y_range (for an ensemble, whose terms and
    score are its members' means, the mean of the members' squashed scores)."""

    terms: dict[str, Tensor]
    score: Tensor
    prediction: Tensor


def to_numpy(tensor: Tensor) -> np.ndarray:
    """A detached float64 copy on the CPU (the module the tensor belongs to is not moved)."""
    return tensor.detach().cpu().double().numpy().copy()


class RatingModel(nn.Module, metaclass=ABCMeta):
    """A rating model: `forward(x)` maps a (batch, 2) LongTensor of [user, item] inner indices to
    (batch,) predicted ratings, so the trainer, the contract tests and fastai's `Learner` drive any model.

    A subclass implements `forward` and `forward_with_penalty`, overrides the accessors for what it
    has, and takes `(n_users, n_items, n_factors, y_range=None, generator=None)`: the registry
    (recsys.models.registry) builds every model that way, initialising it from `generator` alone.
    It passes `n_users`, `n_items` and `y_range` on to this class, which checks every batch's
    indices against them.
    """

    # Whether its embedding tables can take sparse gradients (`--sparse`): every lookup goes through
    # the table's own sparse setting and its penalty reads only the rows looked up.
    sparse_gradients: ClassVar[bool] = True
    # Whether it is trained to rank items (recsys.models.ranking): its score orders a user's items and
    # is no rating, so it has no RMSE and no y_range.
    ranks: ClassVar[bool] = False
    # Whether training solves its user rows by implicit ALS (recsys.train.als: ials), every rated item a
    # 1 (one below the relevance threshold a choice, at confidence 1): fold-in then solves a new user's
    # row as training would, at the run's alpha and penalty.
    als_rows: ClassVar[bool] = False
    # Whether its vectors are sums over feature rows that the data sets before training
    # (`set_features(users, items)`, recsys.data.features): side information and implicit feedback.
    uses_features: ClassVar[bool] = False

    def __init__(self, n_users: int, n_items: int, y_range: YRange | None) -> None:
        super().__init__()
        # What a batch's indices must lie below: `model(x)` checks them before `forward` runs.
        self.n_users, self.n_items = n_users, n_items
        self.register_forward_pre_hook(_check_batch_indices)
        if y_range is not None and not (
            isinstance(y_range, Sequence | np.ndarray)
            and len(y_range) == 2
            and all(isinstance(end, Real) and not isinstance(end, bool) for end in y_range)
            and math.isfinite(sum(y_range))
            and y_range[0] < y_range[1]
        ):
            raise ValueError(f"y_range must be finite (low, high) with low < high, got {y_range!r}")
        # Predictions are squashed into (low, high); None leaves them as they are, as a ranking
        # model's always are (its score is no rating).
        self.y_range = None if self.ranks else y_range

    def set_features(self, users: "FeatureRows", items: "FeatureRows") -> None:
        """The feature rows of every user and item, their ids first, for a model that `uses_features`."""
        raise TypeError(f"{type(self).__name__} uses no features")

    def set_times(self, users: Tensor, times: Tensor) -> None:
        """Add a term for each rating's time from the training ratings' `users` and `times`, for a model
        with one."""
        raise TypeError(f"{type(self).__name__} has no term for a rating's time")

    def draws_side_by_side(self) -> int:
        """How many draws its bilinear form lays side by side, each scaled by 1/count (a sampled
        model's kept draws; 1 for any other): fold-in penalises each draw's part as one model's."""
        return 1

    def feature_vectors(self, users: "FeatureRows") -> tuple[Tensor, Tensor]:
        """A model that `uses_features`: the vectors (as its bilinear form's) and biases of new users
        known by their features alone (recsys.data.features.rows_for_new)."""
        raise TypeError(f"{type(self).__name__} uses no features")

    @abstractmethod
    def forward(self, x: Tensor) -> Tensor:
        """Predicted ratings, shape (batch,), for `x` of shape (batch, 2)."""

    @abstractmethod
    def forward_with_penalty(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Predictions and the L2 penalty (a scalar) of the per-id parameter rows they used, from one set
        of lookups: the trainer adds `l2 * penalty` to the loss. A model with nothing to penalise
        returns a zero, and says so here rather than by leaving the method out."""

    def squash(self, score: Tensor) -> Tensor:
        """The score mapped into y_range as `forward` maps it: fastai's sigmoid_range by default."""
        return sigmoid_range(score, self.y_range)

    def unsquash(self, rating: Tensor) -> Tensor:
        """The score `squash` maps to `rating` (ratings nearer y_range's ends than UNSQUASH_INSIDE of it
        are brought that far inside): what fold-in fits a new user's scores to."""
        if self.y_range is None:
            return rating
        low, high = self.y_range
        inside = UNSQUASH_INSIDE * (high - low)
        return sigmoid_range_inverse(rating.clamp(low + inside, high - inside), self.y_range)

    def penalty(self, x: Tensor) -> Tensor:
        """The L2 penalty of the per-id rows the batch `x` uses."""
        _check_batch_indices(self, (x,))
        return self.forward_with_penalty(x)[1]

    def set_training_pairs(self, x: Tensor) -> None:
        """Take from the training part's (n, 2) [user, item] pairs what the model uses beyond each
        rating's own pair (SVD++: the items each user rated); the trainer calls it before training,
        and a fastai `Learner` user calls it once before `fit`. Most models need nothing."""

    def member_models(self) -> "list[RatingModel]":
        """The models trained apart whose mean this model predicts: itself, for all but an ensemble."""
        return [self]

    def id_vectors(self) -> tuple[Tensor, Tensor] | None:
        """Every user's and every item's factor vector, (n_users, n_factors) and (n_items, n_factors),
        detached; None for a model without per-id vectors."""
        return None

    def learned_biases(self) -> LearnedBiases | None:
        """The model's per-id biases, explicit or implied; None for a model that has none."""
        return None

    def bilinear_form(self) -> BilinearForm | None:
        """The model's scores as one bilinear form over every user and item, detached; None for a
        model whose score is not one (an ensemble: ask its members)."""
        return None

    def factorisation(self) -> Factorisation | None:
        """The tables of a plain (biased or unbiased) dot product, for the compiled engine; None for a
        model of another form."""
        return None

    def explain(self, users: Tensor, items: Tensor) -> Explanation | None:
        """The predictions for the pairs (users[k], items[k]) in parts, as detached tensors; None for a
        model whose prediction has no parts worth naming."""
        return None


def _check_batch_indices(model: RatingModel, args: tuple[object, ...]) -> None:
    """Before `forward`: a batch's users and items lie inside the model's tables, or an IndexError
    names the column, the index and the range. One reduction over the batch; `forward_with_penalty`,
    the trainer's step, goes without (fit checks its pairs once). What is no batch of indices is left
    to `forward`'s own TypeError or ValueError. A batch on the meta device has no values to check (a
    model on it is traced for its shapes); a model with its tables elsewhere would read garbage rows
    for it (torch's CPU lookups take meta indices), so that is a RuntimeError. `torch.export` traces
    no values either (reading them back would stop it), nor does `torch.func.vmap` (per-sample
    gradients): there the lookups refuse an index outside with torch's own error."""
    x = args[0] if args else None
    if torch.compiler.is_exporting():
        return
    if isinstance(x, Tensor) and x.dtype in INDEX_DTYPES and x.dim() == 2 and x.shape[1] in (2, 3):
        if torch._C._functorch.is_functorch_wrapped_tensor(x):  # under vmap: no values to read
            return
        if x.device.type != "meta":
            check_pair_range(x, model.n_users, model.n_items)
            return
        held = sorted({str(tensor.device) for tensor in model.parameters()} - {"meta"})
        if held:
            raise RuntimeError(
                f"the batch is on the meta device but the model's tables are on {', '.join(held)}: "
                "move both to one device"
            )


def members_use_features(model: "RatingModel") -> bool:
    """Whether `model`'s members (itself, for all but an ensemble) use features, so that fold-in
    starts each member's new users where its features place them."""
    return all(member.uses_features for member in model.member_models())


def member_forms(model: nn.Module) -> "list[tuple[RatingModel, BilinearForm]] | None":
    """Each of `model`'s members with its bilinear form (one pair for all but an ensemble); None
    where the model, or one of its members, has none."""
    if not isinstance(model, RatingModel):
        return None
    pairs = [(member, member.bilinear_form()) for member in model.member_models()]
    if any(form is None for _, form in pairs):
        return None
    return pairs  # type: ignore[return-value]


def mean_of_forms(
    members: "Sequence[RatingModel]",
    forms: Sequence[BilinearForm],
    users: Tensor,
    items: Tensor | None = None,
) -> Tensor:
    """The members' predictions from their forms, averaged as an ensemble's are: of every item for
    `users` with `items` None, else of the pairs (users[k], items[k])."""
    with torch.no_grad():
        predictions = [
            member.squash(form.scores(users) if items is None else form.pair_scores(users, items))
            for member, form in zip(members, forms, strict=True)
        ]
        return torch.stack(predictions).mean(dim=0)


def rating_model(model: nn.Module) -> RatingModel:
    """`model` as a RatingModel; any other module is a TypeError naming what came in."""
    if not isinstance(model, RatingModel):
        raise TypeError(
            f"expected a recsys.models.RatingModel, got {type(model).__name__}; build models with "
            "recsys.models.build_model"
        )
    return model


class SampledModel(RatingModel):
    """A model fitted by sampling its posterior (recsys.train.gibbs) rather than by descent: it
    predicts the mean of the draws it is given."""

    @classmethod
    def _thinning(cls, sweeps: int, chains: int) -> tuple[int, int, int]:
        """(the draws of a chain after its burn-in, every how many of them one is kept, how many it
        keeps): at most MAX_KEPT_DRAWS over all `chains`."""
        after = sweeps - cls.burn_in(sweeps)
        every = math.ceil(after / max(1, MAX_KEPT_DRAWS // chains))
        return after, every, math.ceil(after / every)

    @classmethod
    def kept_draws(cls, sweeps: int, chains: int = 1) -> int:
        """How many draws `chains` chains of `sweeps` sweeps keep in all: every one after each chain's
        burn-in, or evenly spaced ones, at most MAX_KEPT_DRAWS."""
        return chains * cls._thinning(sweeps, chains)[2]

    @classmethod
    def kept_slot(cls, epoch: int, sweeps: int, chain: int = 0, chains: int = 1) -> tuple[int, int] | None:
        """Where chain `chain`'s draw of sweep `epoch` goes: (its slot, `kept_draws`); None for a draw
        that is not kept. The chains' draws of one sweep take neighbouring slots, so that the slots
        fill in order. Every burn-in draw of the first chain goes to slot 0 (the latest predicts
        until the first kept one replaces it); after the burn-in the thinning passes draws over (the
        kept ones end on the last sweep)."""
        after, every, per_chain = cls._thinning(sweeps, chains)
        slots = chains * per_chain
        before_last = sweeps - epoch
        if before_last >= after:  # a burn-in sweep
            return (0, slots) if chain == 0 else None
        if before_last % every:
            return None
        return (per_chain - 1 - before_last // every) * chains + chain, slots

    @staticmethod
    @abstractmethod
    def burn_in(sweeps: int) -> int:
        """Of `sweeps` sweeps, how many first ones' draws are discarded (the chain has not yet
        forgotten its start); the rest are kept, each a block of the model's tables."""

    @abstractmethod
    def set_draw(self, slot: int, slots: int, user_draw: Tensor, item_draw: Tensor, mean: float) -> None:
        """Keep a draw as number `slot` (from 0) of `slots`, the mean of draws 0..slot from now on
        predicted: draws are (n, k + 1) rows [factors, bias] per user and per item; `mean` the
        global mean they are offsets from. Slot 0 starts afresh."""
