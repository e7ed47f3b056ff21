"""Lazy Adam for embedding tables with sparse gradients: a step costs the batch, not the table.

It computes what `torch.optim.SparseAdam` computes (moments of the rows in the batch, one step
count per table for bias correction) in one compiled pass (numba) over the batch: duplicate ids are
summed through a scratch slot per row instead of a sort, each touched row's weight and moments are
read and written once, and tables looked up by the same ids (a user's factors and bias) share that
pass; it prefetches the rows and scratch slots it will touch a few ids ahead, so their cache misses
overlap. Built from torch ops (unique, index_add_, index_select, index_copy_ per table) the step
spent over half of an ML-25M training step in scattered reads and writes of the large tables; the
measured gains are in docs/performance.md. CPU float32 tables only: on CUDA the trainer uses
SparseAdam.
"""

from collections.abc import Iterable

import numpy as np
import torch
from torch import Tensor

from recsys.train.jit import compiled
from recsys.train.prefetch import prefetch_row

Arrays = tuple[np.ndarray, ...]


# How far ahead to prefetch, in row updates (8 was fastest of 4, 8, 16 and 32 at ML-25M shape) and
# in the batch's ids while summing repeats (their slots).
_PREFETCH_AHEAD = 8
_PREFETCH_AHEAD_IDS = 16


# float32 arithmetic, as torch's SparseAdam.
@compiled()
def _lazy_adam_rows(
    tables: tuple[Arrays, Arrays, Arrays],
    gradients: tuple[np.ndarray, Arrays],
    scratch: tuple[np.ndarray, np.ndarray, Arrays],
    step_sizes: np.ndarray,
    beta1: float,
    beta2: float,
    eps: float,
) -> None:
    """Adam on the rows `indices` names in every table of a group looked up by the same ids.

    tables: (weights, exp_avgs, exp_avg_sqs), one array per table; gradients: (indices, values),
    one values row per index, repeats summed here; scratch: (slot, rows, summed): `slot` has one
    entry per table row holding -1 and maps a row to its place in the batch's summed gradients
    (reset before returning), `rows` and `summed` have room for a batch. step_sizes: each table's
    lr * sqrt(1 - beta2^t) / (1 - beta1^t).
    """
    weights, exp_avgs, exp_avg_sqs = tables
    indices, values = gradients
    slot, rows, summed = scratch
    n_rows = 0
    for j in range(indices.shape[0]):
        row = indices[j]
        if j + _PREFETCH_AHEAD_IDS < indices.shape[0]:
            prefetch_row(slot, indices[j + _PREFETCH_AHEAD_IDS])
        if slot[row] < 0:
            slot[row] = n_rows
            rows[n_rows] = row
            for t in range(len(summed)):
                summed[t][n_rows, :] = 0
            n_rows += 1
        position = slot[row]
        for t in range(len(values)):
            total, value = summed[t], values[t]
            for c in range(value.shape[1]):
                total[position, c] += value[j, c]
    # SparseAdam's arithmetic, so the two agree to float32 rounding.
    take1, take2, epsilon = np.float32(1 - beta1), np.float32(1 - beta2), np.float32(eps)
    for position in range(n_rows):
        if position + _PREFETCH_AHEAD < n_rows:
            ahead = rows[position + _PREFETCH_AHEAD]
            for t in range(len(weights)):
                prefetch_row(weights[t], ahead)
                prefetch_row(exp_avgs[t], ahead)
                prefetch_row(exp_avg_sqs[t], ahead)
        row = rows[position]
        slot[row] = -1
        for t in range(len(weights)):
            w, m, v, g = weights[t][row], exp_avgs[t][row], exp_avg_sqs[t][row], summed[t][position]
            step_size = np.float32(step_sizes[t])
            for c in range(w.shape[0]):
                m[c] += (g[c] - m[c]) * take1
                v[c] += (g[c] * g[c] - v[c]) * take2
                w[c] -= step_size * (m[c] / (np.sqrt(v[c]) + epsilon))


class LazyAdam(torch.optim.Optimizer):
    """Adam on sparse row gradients (nn.Embedding(sparse=True)) of float32 CPU tables; rows not in
    the batch keep their moments and values untouched."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})
        # The kernel's scratch per group of tables, never saved (a fresh slot array holds all -1).
        self._scratch: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, Arrays]] = {}

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for tables in self._tables_by_ids(group):
                self._update(tables, group)

    def _tables_by_ids(self, group: dict) -> list[list[Tensor]]:
        """The group's tables that have a gradient, grouped by the ids that looked them up."""
        grouped: list[list[Tensor]] = []
        for parameter in group["params"]:
            if parameter.grad is None:
                continue
            if not parameter.grad.is_sparse:
                raise ValueError("LazyAdam needs sparse gradients: use nn.Embedding(sparse=True)")
            if parameter.device.type != "cpu" or parameter.dtype != torch.float32 or parameter.dim() != 2:
                raise ValueError("LazyAdam updates 2-d float32 CPU tables; use torch.optim.SparseAdam")
            same = next((g for g in grouped if _same_ids(g[0], parameter)), None)
            if same is None:
                grouped.append([parameter])
            else:
                same.append(parameter)
        return grouped

    def _update(self, tables: list[Tensor], group: dict) -> None:
        beta1, beta2 = group["betas"]
        step_sizes = np.empty(len(tables))
        for t, parameter in enumerate(tables):
            state = self.state[parameter]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(parameter)
                state["exp_avg_sq"] = torch.zeros_like(parameter)
            state["step"] += 1
            step_sizes[t] = group["lr"] * (1 - beta2 ** state["step"]) ** 0.5 / (1 - beta1 ** state["step"])
        indices = tables[0].grad._indices()[0].contiguous().numpy()  # type: ignore[union-attr]
        key = tuple(id(parameter) for parameter in tables)
        scratch = self._scratch.get(key)
        if scratch is None or len(scratch[1]) < len(indices):
            scratch = self._scratch[key] = (
                np.full(len(tables[0]), -1, np.int64),
                np.empty(len(indices), np.int64),
                tuple(np.empty((len(indices), p.shape[1]), np.float32) for p in tables),
            )
        _lazy_adam_rows(
            (
                tuple(p.detach().numpy() for p in tables),
                tuple(self.state[p]["exp_avg"].numpy() for p in tables),
                tuple(self.state[p]["exp_avg_sq"].numpy() for p in tables),
            ),
            (indices, tuple(p.grad._values().contiguous().numpy() for p in tables)),  # type: ignore[union-attr]
            scratch,
            step_sizes,
            beta1,
            beta2,
            group["eps"],
        )


def _same_ids(first: Tensor, other: Tensor) -> bool:
    """Whether two tables' sparse gradients name the same rows in the same order."""
    a, b = first.grad._indices()[0], other.grad._indices()[0]  # type: ignore[union-attr]
    return len(first) == len(other) and a.shape == b.shape and bool(torch.equal(a, b))
