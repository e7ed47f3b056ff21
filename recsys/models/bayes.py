"""Bayesian matrix factorisation (`bpmf`): Salakhutdinov and Mnih's BPMF with a bias per user and item.

rating = global_bias + user_bias[u] + item_bias[i] + factor_scale * user_factors[u] . item_factors[i],
clipped to `y_range`. Fitted on the compiled engine by Gibbs sampling (recsys.train.gibbs), it
predicts the posterior mean: the average over the kept samples s of b_u^s + b_i^s + p_u^s . q_i^s.
That average is itself one dot product, of the samples' factors laid side by side with
factor_scale = 1 / (number of samples), so the model stays a plain module that any trainer,
checkpoint and fastai `Learner` can drive (the autograd engine trains it as a clipped biased dot
product).
"""

from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from recsys.data.features import SIDES, FeatureRows
from recsys.errors import RecsysError
from recsys.models.base import BilinearForm, Explanation, LearnedBiases, SampledModel, YRange, to_numpy
from recsys.models.feature_coding import (
    CODING_BUFFERS,
    check_saved_codings,
    new_rows_sums,
    register_codings,
    set_codings,
)
from recsys.models.layers import (
    bias_table,
    embedding_table,
    lookup,
    mean_squared_norm,
    split_pairs,
    split_timed,
    take_saved_shapes,
)
from recsys.models.squash import ordinal_expectation, ordinal_expectation_inverse

# Rows x columns of factor rows gathered at once when predicting (16 MB of float32 a table).
_GATHERED_ENTRIES = 1 << 22
# The first sweeps' draws are discarded, as the chain has not yet forgotten its start.
BURN_IN_SHARE = 0.2
# The time group's bins: a rating's user and day (UTC), the days counted from the training part's
# first (a bin per week, for every user, did less on validation: docs/findings.md).
DAY_SECONDS = 24 * 3600
# A time beyond this many seconds from 1970 (the year 5138) is one in smaller units (milliseconds).
MAX_SECONDS = 10**11


def beyond_seconds(times: Tensor | np.ndarray) -> int | None:
    """The farthest of `times` from 1970 where it lies too far for seconds since 1970 (they are in
    smaller units, milliseconds say), which the time group refuses; None where they read as seconds."""
    farthest = max(abs(int(times.min())), abs(int(times.max())))
    return farthest if farthest > MAX_SECONDS else None


def check_seconds(times: Tensor | np.ndarray) -> None:
    """Refuse times too far from 1970 for seconds (`beyond_seconds`): each would be a day of its own."""
    farthest = beyond_seconds(times)
    if farthest is not None:
        raise RecsysError(
            f"the ratings' times reach {farthest:,}, over 3,000 years from 1970 as the time group reads "
            "them (seconds since 1970): are they milliseconds? convert them, or leave time out of "
            "`features`"
        )


def days_since(times: Tensor, origin: int | Tensor) -> Tensor:
    """Each time's day (seconds), counted from `origin`'s."""
    return torch.div(times.long() - origin, DAY_SECONDS, rounding_mode="floor")


def _kept(table: Tensor, draw: Tensor, slot: int, slots: int) -> Tensor:
    """`table` with the factors of `draw` ([factors, bias] rows) as its block `slot` of `slots`:
    widened to hold every draw (the empty blocks zeros), zeroed when slot 0 starts afresh."""
    k = draw.shape[1] - 1
    if table.shape != (len(draw), slots * k):
        table = torch.zeros(len(draw), slots * k, device=table.device)
    if slot == 0:
        table.zero_()
    table[:, slot * k : (slot + 1) * k] = draw[:, :k]
    return table


def _average_bias(bias: Tensor, draw: Tensor, slot: int) -> None:
    """`bias` made the running mean of the draws' biases (their last column) over draws 0..slot."""
    bias += (draw[:, -1].to(bias) - bias) / (slot + 1)


class BayesianMF(SampledModel):
    """global_bias + user_bias[u] + item_bias[i] + factor_scale * (user_factors[u] . item_factors[i])."""

    factor_scale: Tensor
    # What a saved state gives its shape (take_saved_shapes): the factor tables, as wide as the draws kept.
    SIZED_BY_TRAINING: tuple[str, ...] = ("user_factors.weight", "item_factors.weight")

    @staticmethod
    def burn_in(sweeps: int) -> int:
        """BURN_IN_SHARE of the sweeps, at most all but one."""
        return min(int(sweeps * BURN_IN_SHARE), sweeps - 1)

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
        self.user_bias, self.item_bias = bias_table(n_users), bias_table(n_items)
        # Starts in the middle of the range, as the other models' sigmoid does.
        middle = 0.0 if y_range is None else (y_range[0] + y_range[1]) / 2
        self.global_bias = nn.Parameter(torch.tensor(float(middle)))
        self.register_buffer("factor_scale", torch.tensor(1.0))

    def _factor_scores(self, users: Tensor, items: Tensor) -> Tensor:
        """factor_scale * user_factors[u] . item_factors[i], gathering the rows a chunk at a time: with
        a block per kept draw the tables are thousands of columns wide, and a whole batch's rows at
        once would take gigabytes."""
        chunk = max(1, _GATHERED_ENTRIES // self.user_factors.weight.shape[1])
        scores = [self.factor_scale.new_zeros(0)]
        for j in range(0, len(users), chunk):
            user_rows = lookup(self.user_factors, users[j : j + chunk])
            scores.append((user_rows * lookup(self.item_factors, items[j : j + chunk])).sum(-1))
        return torch.cat(scores) * self.factor_scale

    def _biases(self, users: Tensor, items: Tensor) -> tuple[Tensor, Tensor]:
        return lookup(self.user_bias, users).squeeze(-1), lookup(self.item_bias, items).squeeze(-1)

    def terms(self, users: Tensor, items: Tensor) -> tuple[Tensor, list[Tensor]]:
        """The unclipped score and the per-id rows it used (what the L2 penalty weighs)."""
        user_vectors, item_vectors = lookup(self.user_factors, users), lookup(self.item_factors, items)
        user_bias, item_bias = lookup(self.user_bias, users), lookup(self.item_bias, items)
        factors = (user_vectors * item_vectors).sum(dim=-1) * self.factor_scale
        score = self.global_bias + user_bias.squeeze(-1) + item_bias.squeeze(-1) + factors
        return score, [user_vectors, item_vectors, user_bias, item_bias]

    def _score(self, users: Tensor, items: Tensor) -> Tensor:
        """The unclipped score: global + user_bias + item_bias + factors."""
        user_bias, item_bias = self._biases(users, items)
        return self.global_bias + user_bias + item_bias + self._factor_scores(users, items)

    def forward(self, x: Tensor) -> Tensor:
        return self.squash(self._score(*split_pairs(x)))

    def forward_with_penalty(self, x: Tensor) -> tuple[Tensor, Tensor]:
        score, rows = self.terms(*split_pairs(x))
        return self.squash(score), mean_squared_norm(*rows)

    def squash(self, score: Tensor) -> Tensor:
        """Clipped into y_range: the posterior mean is a linear prediction, not a sigmoid's."""
        return score if self.y_range is None else score.clamp(*self.y_range)

    def set_draw(self, slot: int, slots: int, user_draw: Tensor, item_draw: Tensor, mean: float) -> None:
        with torch.no_grad():
            for table, draw in ((self.user_factors, user_draw), (self.item_factors, item_draw)):
                kept = _kept(table.weight, draw, slot, slots)
                if kept is not table.weight:
                    table.weight = nn.Parameter(kept)
            for bias, draw in ((self.user_bias, user_draw), (self.item_bias, item_draw)):
                _average_bias(bias.weight[:, 0], draw, slot)
            self.global_bias.fill_(mean)
            self.factor_scale.fill_(1.0 / (slot + 1))

    def draws_side_by_side(self) -> int:
        return round(1.0 / float(self.factor_scale))

    def _load_from_state_dict(self, state_dict: dict[str, Tensor], prefix: str, *args: object) -> None:
        take_saved_shapes(self, state_dict, prefix, self.SIZED_BY_TRAINING)
        super()._load_from_state_dict(state_dict, prefix, *args)  # type: ignore[arg-type]

    def id_vectors(self) -> tuple[Tensor, Tensor] | None:
        return self.user_factors.weight.detach(), self.item_factors.weight.detach()

    def bilinear_form(self) -> BilinearForm | None:
        """The draws' factors side by side, the users' scaled by factor_scale; the global bias rides
        with the items'."""
        return BilinearForm(
            (self.user_factors.weight * self.factor_scale).detach(),
            self.item_factors.weight.detach(),
            self.user_bias.weight[:, 0].detach(),
            (self.item_bias.weight[:, 0] + self.global_bias).detach(),
        )

    def unsquash(self, rating: Tensor) -> Tensor:
        """Clipping has no inverse inside y_range: the rating is the score."""
        return rating

    def learned_biases(self) -> LearnedBiases | None:
        return LearnedBiases(
            to_numpy(self.user_bias.weight[:, 0]), to_numpy(self.item_bias.weight[:, 0]), "explicit"
        )

    def explain(self, users: Tensor, items: Tensor) -> Explanation | None:
        """global + user_bias + item_bias + factors = score, clipped to the prediction."""
        with torch.no_grad():
            factors, (user_bias, item_bias) = self._factor_scores(users, items), self._biases(users, items)
            score = self.global_bias + user_bias + item_bias + factors  # as `forward` adds them
            terms = {"global": self.global_bias.detach().expand_as(score), "user_bias": user_bias}
            terms |= {"item_bias": item_bias, "factors": factors}
            return Explanation(terms, score, self.squash(score))


class BayesianFM(BayesianMF):
    """Rendle's Bayesian factorisation machine over two blocks (recsys.train.fm_gibbs): a user's vector
    and bias are sums over its features (its id, side features, the items it rated), an item's
    likewise. The id tables hold each id's summed draws, so it predicts as BayesianMF does; the
    non-id features' draws, and the ids' mean, are kept beside them, so that a user or item known by
    its features alone gets a prediction (`feature_scores`): its own id is one never seen, expected
    at the ids' mean as the prior expects it.

    With the time group (`set_times`) the day d on which user u rated adds a bias w_ud, as Koren's
    timeSVD++ has a user's bias drift from day to day: the model then reads (batch, 3) [user, item,
    time in seconds]. A pair without a time, or on a day the user did not rate in the training part,
    is at a user-day never seen: the user-days' mean, as the prior expects it."""

    uses_features: ClassVar[bool] = True
    user_feature_factors: Tensor
    user_feature_bias: Tensor
    item_feature_factors: Tensor
    item_feature_bias: Tensor
    time_origin: Tensor
    time_days: Tensor
    user_days: Tensor
    time_bias: Tensor
    cutpoints: Tensor
    rating_steps: Tensor
    # Also the non-id features' draws, the training part's user-days, the probit's cutpoints, the codings.
    SIZED_BY_TRAINING = (
        *BayesianMF.SIZED_BY_TRAINING,
        *(f"{side}_feature_{part}" for side in SIDES for part in ("factors", "bias")),
        *("user_days", "time_bias", "cutpoints", "rating_steps", *CODING_BUFFERS),
    )

    def __init__(
        self,
        n_users: int,
        n_items: int,
        n_factors: int,
        y_range: YRange | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(n_users, n_items, n_factors, y_range, generator)
        # The rows the sampler sums over, set from the data before training (ids alone without).
        self.features: tuple[FeatureRows, FeatureRows] | None = None
        register_codings(self)
        for side in SIDES:  # the ids' mean and the non-id features' draws: factors side by side, mean bias
            self.register_buffer(f"{side}_feature_factors", torch.zeros(0, 0))
            self.register_buffer(f"{side}_feature_bias", torch.zeros(0))
        # The time group: the first training rating's time, the days from it to the last, the training
        # part's user-days (user * days + day, ascending) and each one's bias, the kept draws' mean
        # (none without the group).
        self.register_buffer("time_origin", torch.tensor(0, dtype=torch.int64))
        self.register_buffer("time_days", torch.tensor(0, dtype=torch.int64))
        self.register_buffer("user_days", torch.zeros(0, dtype=torch.int64))
        self.register_buffer("time_bias", torch.zeros(0))
        # The ordered probit (`set_ordinal`): the kept draws' mean cutpoints, and the scale's lowest
        # rating and step (none without it).
        self.register_buffer("cutpoints", torch.zeros(0))
        self.register_buffer("rating_steps", torch.zeros(0))

    def set_features(self, users: FeatureRows, items: FeatureRows) -> None:
        """The feature rows of every user and item, their ids first (recsys.data.features)."""
        self.features = (users, items)
        set_codings(self, users, items)

    def set_times(self, users: Tensor, times: Tensor) -> None:
        """Add the time group: a bin for each day on which a user rated, from the training ratings'
        `users` and `times` (seconds)."""
        check_seconds(times)
        first, last = int(times.min()), int(times.max())
        origin = first - first % DAY_SECONDS  # the first day's start: days are calendar days (UTC)
        self.time_origin = torch.tensor(origin, dtype=torch.int64)
        self.time_days = days_since(torch.tensor(last), origin) + 1
        self.user_days = torch.unique(self._user_day_keys(users, times)[0])
        self.time_bias = torch.zeros(len(self.user_days))

    def set_ordinal(self, lowest: float, step: float, n_steps: int) -> None:
        """Predict as an ordered probit over `n_steps` ratings lowest, lowest + step, ...: the expected
        rating given the score and the cutpoints (`set_cutpoint_draw`), in place of the score itself."""
        self.rating_steps = torch.tensor([lowest, step])
        self.cutpoints = torch.zeros(n_steps - 1)

    def set_cutpoint_draw(self, slot: int, slots: int, draw: Tensor) -> None:
        """Keep a draw of the cutpoints as slot `slot` of `slots`: their mean over draws 0..slot."""
        with torch.no_grad():
            if slot == 0:
                self.cutpoints.zero_()
            self.cutpoints += (draw.to(self.cutpoints) - self.cutpoints) / (slot + 1)

    def squash(self, score: Tensor) -> Tensor:
        """An ordered probit's expected rating where the model is one, else BayesianMF's clip."""
        if len(self.rating_steps):
            score = ordinal_expectation(score, self.cutpoints, *self.rating_steps.tolist())
        return super().squash(score)

    def unsquash(self, rating: Tensor) -> Tensor:
        """An ordered probit's inverse of the expected rating, a rating at an end step read half a step
        inside it: that step says the latent value fell past its last cutpoint, not that the expected
        rating reaches the end, whose score is infinite (read a millionth inside, a 5 weighed four
        steps above a 4, and u1's fold-in RMSE grew with the ratings known, docs/training.md)."""
        if not len(self.rating_steps):
            return super().unsquash(rating)
        lowest, step = self.rating_steps.tolist()
        top = lowest + step * len(self.cutpoints)
        inside = rating.clamp(lowest + step / 2, top - step / 2)
        return ordinal_expectation_inverse(inside, self.cutpoints, lowest, step)

    @property
    def n_time_bins(self) -> int:
        """The time group's bins, a user-day each (0 without the group)."""
        return len(self.time_bias)

    def time_bins_of(self, users: Tensor, times: Tensor) -> Tensor:
        """The user-day bin of each pair (users' rows, times in seconds); n_time_bins, a user-day never
        seen, where the training part has no rating of that user on that day."""
        keys = self.user_days.to(times.device)
        wanted, inside = self._user_day_keys(users, times)
        place = torch.searchsorted(keys, wanted).clamp(max=max(len(keys) - 1, 0))
        return torch.where(inside & (keys[place] == wanted), place, self.n_time_bins)

    def _user_day_keys(self, users: Tensor, times: Tensor) -> tuple[Tensor, Tensor]:
        """Each pair's user-day as one number (user * days + day, rising as `user_days` does), and
        whether its day falls inside the training part's."""
        days = self.time_days.to(times.device)
        day = days_since(times, self.time_origin.to(times.device))
        return users.long() * days + day, (day >= 0) & (day < days)

    def _time_biases(self) -> Tensor:
        """The user-days' biases and after them (n_time_bins) a user-day never seen's: their mean, as
        the group's prior expects it."""
        return torch.cat([self.time_bias, self.time_bias.mean(0, keepdim=True)])

    def set_time_draw(self, slot: int, slots: int, draw: Tensor) -> None:
        """Keep a draw of the user-days' biases as slot `slot` of `slots`: their mean over draws
        0..slot."""
        with torch.no_grad():
            if slot == 0:
                self.time_bias.zero_()
            self.time_bias += (draw.to(self.time_bias) - self.time_bias) / (slot + 1)

    def forward(self, x: Tensor) -> Tensor:
        users, items, times = split_timed(x)
        if times is not None and not self.n_time_bins:
            raise ValueError(
                "a (batch, 3) tensor's times are read by bfm with its time group (features with "
                "`time`) once trained; this one has none: give (batch, 2) [user, item] pairs"
            )
        score = self._score(users, items)
        if self.n_time_bins:  # a pair without a time at a user-day never seen
            unseen = torch.full_like(users, self.n_time_bins)
            bins = unseen if times is None else self.time_bins_of(users, times)
            score = score + self._time_biases()[bins]
        return self.squash(score)

    def bilinear_form(self) -> BilinearForm | None:
        """BayesianMF's, with a user-day never seen's bias (a pair has no time) in the users' biases,
        as `feature_vectors` gives a new user's."""
        form = super().bilinear_form()
        if form is None or form.user_bias is None or not self.n_time_bins:
            return form
        return form._replace(user_bias=form.user_bias + self._time_biases()[-1])

    def explain(self, users: Tensor, items: Tensor) -> Explanation | None:
        """BayesianMF's terms, and a user-day never seen's bias (`day`) with the time group."""
        found = super().explain(users, items)
        if found is None or not self.n_time_bins:
            return found
        day = self._time_biases()[-1].expand_as(found.score)
        score = found.score + day
        return Explanation({**found.terms, "day": day}, score, self.squash(score))

    def set_feature_draw(self, slot: int, slots: int, user_draw: Tensor, item_draw: Tensor) -> None:
        """Keep, of a draw of every feature's [factors, bias], the rows a user or item never seen is
        known by as slot `slot`: first its id's expected row (the ids' mean), then the non-id features'."""
        with torch.no_grad():
            for side, draw in zip(SIDES, (user_draw, item_draw), strict=True):
                factors, bias = f"{side}_feature_factors", f"{side}_feature_bias"
                setattr(self, factors, _kept(getattr(self, factors), draw.float(), slot, slots))
                if slot == 0 or len(getattr(self, bias)) != len(draw):
                    setattr(self, bias, torch.zeros(len(draw)))
                _average_bias(getattr(self, bias), draw, slot)

    def feature_vectors(self, users: FeatureRows) -> tuple[Tensor, Tensor]:
        """The vectors (as the bilinear form's user vectors: the kept draws side by side, scaled) and
        biases of users known by their non-id features alone (their columns number the features
        after the ids, as recsys.data.features.rows_for_new gives)."""
        with torch.no_grad():
            factors, bias = self.user_feature_factors, self.user_feature_bias
            width = self.user_factors.weight.shape[1]
            if factors.shape[1] != width:  # no draws of its features kept (trained by autograd): none
                return factors.new_zeros(users.n_rows, width), bias.new_zeros(users.n_rows)
            # An unseen id's expected row, then its features' sums.
            vectors = (factors[0] + new_rows_sums(self, users, factors[1:])) * self.factor_scale
            bias = bias[0] + new_rows_sums(self, users, bias[1:])
            if self.n_time_bins:  # a user-day never seen's bias, as `bilinear_form` adds it
                bias = bias + self._time_biases()[-1]
            return vectors, bias

    def feature_scores(self, users: FeatureRows, items: Tensor) -> Tensor:
        """Predictions, (users, items), of each of `users` known by its non-id features alone (as
        `feature_vectors` takes them) for every one of `items`."""
        with torch.no_grad():
            vectors, bias = self.feature_vectors(users)
            item_bias = self.item_bias.weight[items, 0] + self.global_bias
            score = bias[:, None] + item_bias[None, :] + vectors @ self.item_factors.weight[items].T
            return self.squash(score)

    def _load_from_state_dict(self, state_dict: dict[str, Tensor], prefix: str, *args: object) -> None:
        if self.features is not None:  # resuming onto the data's features: they must be coded alike
            check_saved_codings(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args)
