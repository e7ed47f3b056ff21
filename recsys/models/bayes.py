"""Bayesian matrix factorisation (`bpmf`): Salakhutdinov and Mnih's BPMF with a bias per user and item.

rating = global_bias + user_bias[u] + item_bias[i] + factor_scale * user_factors[u] . item_factors[i],
clipped to `y_range`. Fitted on the compiled engine by Gibbs sampling (recsys.train.gibbs), it
predicts the posterior mean: the average over the kept samples s of b_u^s + b_i^s + p_u^s . q_i^s.
That average is itself one dot product, of the samples' factors laid side by side with
factor_scale = 1 / (number of samples), so the model stays a plain module that any trainer,
checkpoint and fastai `Learner` can drive (the autograd engine trains it as a clipped biased dot
product).
"""

import torch
from torch import Tensor, nn

from recsys.models.base import Explanation, LearnedBiases, SampledModel, YRange, to_numpy
from recsys.models.layers import embedding_table, lookup, mean_squared_norm, split_pairs

_TABLES = ("user_factors.weight", "item_factors.weight")
# The first sweeps' draws are discarded, as the chain has not yet forgotten its start.
BURN_IN_SHARE = 0.2


def burn_in(sweeps: int) -> int:
    """Sweeps whose draws are discarded: BURN_IN_SHARE of them, at most all but one."""
    return min(int(sweeps * BURN_IN_SHARE), sweeps - 1)


class BayesianMF(SampledModel):
    """global_bias + user_bias[u] + item_bias[i] + factor_scale * (user_factors[u] . item_factors[i])."""

    factor_scale: Tensor

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
        self.user_bias = nn.Embedding(n_users, 1)
        self.item_bias = nn.Embedding(n_items, 1)
        nn.init.zeros_(self.user_bias.weight)
        nn.init.zeros_(self.item_bias.weight)
        # Starts in the middle of the range, as the other models' sigmoid does.
        middle = 0.0 if y_range is None else (y_range[0] + y_range[1]) / 2
        self.global_bias = nn.Parameter(torch.tensor(float(middle)))
        self.register_buffer("factor_scale", torch.tensor(1.0))

    def _parts(self, users: Tensor, items: Tensor) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
        """The scaled factors' dot product, the user and item biases (batch,), and the rows used."""
        user_vectors, item_vectors = lookup(self.user_factors, users), lookup(self.item_factors, items)
        factors = (user_vectors * item_vectors).sum(dim=-1) * self.factor_scale
        user_bias, item_bias = lookup(self.user_bias, users), lookup(self.item_bias, items)
        return (
            factors,
            user_bias.squeeze(-1),
            item_bias.squeeze(-1),
            [user_vectors, item_vectors, user_bias, item_bias],
        )

    def terms(self, users: Tensor, items: Tensor) -> tuple[Tensor, list[Tensor]]:
        """The unclipped score and the per-id rows it used (what the L2 penalty weighs)."""
        factors, user_bias, item_bias, rows = self._parts(users, items)
        return self.global_bias + user_bias + item_bias + factors, rows

    def squash(self, score: Tensor) -> Tensor:
        """Clipped into y_range: the posterior mean is a linear prediction, not a sigmoid's."""
        return score if self.y_range is None else score.clamp(*self.y_range)

    def forward(self, x: Tensor) -> Tensor:
        return self.squash(self.terms(*split_pairs(x))[0])

    def forward_with_penalty(self, x: Tensor) -> tuple[Tensor, Tensor]:
        score, rows = self.terms(*split_pairs(x))
        return self.squash(score), mean_squared_norm(*rows)

    def set_draw(self, slot: int, slots: int, user_draw: Tensor, item_draw: Tensor, mean: float) -> None:
        k = user_draw.shape[1] - 1
        with torch.no_grad():
            for table, draw in ((self.user_factors, user_draw), (self.item_factors, item_draw)):
                if table.weight.shape[1] != slots * k:  # room for every draw; the empty slots are zeros
                    table.weight = nn.Parameter(torch.zeros(len(draw), slots * k, device=table.weight.device))
                if slot == 0:
                    table.weight.zero_()
                table.weight[:, slot * k : (slot + 1) * k] = draw[:, :k]
            # The biases' running mean over draws 0..slot.
            for bias, draw in ((self.user_bias, user_draw), (self.item_bias, item_draw)):
                bias.weight[:, 0] += (draw[:, k].to(bias.weight) - bias.weight[:, 0]) / (slot + 1)
            self.global_bias.fill_(mean)
            self.factor_scale.fill_(1.0 / (slot + 1))

    def _load_from_state_dict(self, state_dict: dict[str, Tensor], prefix: str, *args: object) -> None:
        # The factor tables are as wide as the samples kept: take the saved width before copying.
        for name in _TABLES:
            saved = state_dict.get(prefix + name)
            module = getattr(self, name.split(".")[0])
            if saved is not None and saved.shape != module.weight.shape:
                module.weight = nn.Parameter(torch.empty_like(saved, device=module.weight.device))
        super()._load_from_state_dict(state_dict, prefix, *args)  # type: ignore[arg-type]

    def id_vectors(self) -> tuple[Tensor, Tensor] | None:
        return self.user_factors.weight.detach(), self.item_factors.weight.detach()

    def learned_biases(self) -> LearnedBiases | None:
        return LearnedBiases(
            to_numpy(self.user_bias.weight[:, 0]), to_numpy(self.item_bias.weight[:, 0]), "explicit"
        )

    def explain(self, users: Tensor, items: Tensor) -> Explanation | None:
        """global + user_bias + item_bias + factors = score, clipped to the prediction."""
        with torch.no_grad():
            factors, user_bias, item_bias, _ = self._parts(users, items)
            score = self.global_bias + user_bias + item_bias + factors  # as `terms` adds them
            terms = {"global": self.global_bias.detach().expand_as(score), "user_bias": user_bias}
            terms |= {"item_bias": item_bias, "factors": factors}
            return Explanation(terms, score, self.squash(score))
