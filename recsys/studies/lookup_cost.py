"""What an embedding lookup saves over one-hot rows through `nn.Linear`, as the number of users grows.

`nn.Linear(n_users, n_factors, bias=False)` on one-hot rows computes the same numbers as
`nn.Embedding(n_users, n_factors)` (with `linear.weight == embedding.weight.T`), but the dense product
builds a (batch, n_users) one-hot matrix and multiplies through the whole table, and both one-hot
products write a gradient for every entry of the table. `lookup_versus_linear` times one training
step of four variants on CPU and measures the memory each step allocates:

- `embedding`: `nn.Embedding`, dense gradient (the whole table, zeros outside the batch's rows);
- `sparse_embedding`: `nn.Embedding(sparse=True)`: a sparse gradient holding only the batch's rows;
- `dense_one_hot`: a dense float one-hot batch @ `nn.Linear`;
- `sparse_one_hot`: a sparse COO one-hot batch @ `nn.Linear` (`recsys.models.layers.one_hot_linear`).
"""

import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

from recsys.models.layers import INIT_STD, one_hot_linear

VARIANTS = ("embedding", "sparse_embedding", "dense_one_hot", "sparse_one_hot")
ONE_HOT_VARIANTS = ("dense_one_hot", "sparse_one_hot")
MEASURES = ("seconds", "peak_bytes", "gradient_entries")

Batch = TypeVar("Batch")  # what a variant's forward takes: user indices, or bags of items

# Plain SGD for every variant: it accepts sparse gradients, and with no momentum it keeps no state and
# costs one pass over the gradient's values, so the steps differ only in how the gradient is made.
LEARNING_RATE = 0.01


def _variants(
    weight: Tensor, with_dense_one_hot: bool
) -> dict[str, tuple[nn.Module, Callable[[Tensor], Tensor]]]:
    """Each variant's trainable module and its forward pass from user indices, all starting at `weight`."""
    embedding = nn.Embedding.from_pretrained(weight.clone(), freeze=False)
    sparse_embedding = nn.Embedding.from_pretrained(weight.clone(), freeze=False, sparse=True)
    n_users, n_factors = weight.shape
    dense_linear = nn.Linear(n_users, n_factors, bias=False)
    sparse_linear = nn.Linear(n_users, n_factors, bias=False)
    with torch.no_grad():
        # Linear stores (out_features, in_features): the table transposed.
        dense_linear.weight.copy_(weight.t())
        sparse_linear.weight.copy_(weight.t())
    variants: dict[str, tuple[nn.Module, Callable[[Tensor], Tensor]]] = {
        "embedding": (embedding, embedding),
        "sparse_embedding": (sparse_embedding, sparse_embedding),
        "sparse_one_hot": (sparse_linear, lambda users: one_hot_linear(users, sparse_linear, sparse=True)),
    }
    if with_dense_one_hot:
        variants["dense_one_hot"] = (
            dense_linear,
            lambda users: one_hot_linear(users, dense_linear, sparse=False),
        )
    return variants


def training_step(optimizer: torch.optim.Optimizer, forward: Callable[[Batch], Tensor], batch: Batch) -> None:
    """One training step: release the old gradient, forward, a loss, backward, SGD update."""
    # Releasing (not zeroing) the old gradient makes every step allocate its own, as the trainer does.
    optimizer.zero_grad(set_to_none=True)
    forward(batch).pow(2).mean().backward()
    optimizer.step()


@contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """Within it, whatever native code writes to file descriptor 2 goes to /dev/null.

    The profiler (kineto) writes `USDT:... profiler_start`/`profiler_stop` lines (and, at some log
    levels, `STAGE:` lines) straight to fd 2 from C++, so `sys.stderr` and `warnings` cannot catch
    them, and its KINETO_LOG_LEVEL is read only at the profiler's first start in the process. fd 2
    is shared by the whole process: keep the block short, and anything else written to it meanwhile
    is lost too.
    """
    sys.stderr.flush()  # what Python already wrote still reaches the real stderr
    try:
        saved: int | None = os.dup(2)
    except OSError:  # no fd 2 (a closed stderr): nothing to silence
        saved = None
    if saved is None:
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_allocated_bytes(step: Callable[[], None]) -> int:
    """Peak of (bytes allocated - bytes freed) on CPU during `step`, from the profiler's memory events."""
    # `step` already ran untimed and timed before, so a warning it raises has been seen by now.
    with (
        _native_stderr_silenced(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler,
    ):
        step()
    events = [e for e in profiler.profiler.kineto_results.events() if e.name() == "[memory]"]
    in_use = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        in_use += event.nbytes()  # negative for a free
        peak = max(peak, in_use)
    return peak


def _gradient_entries(module: nn.Module) -> int:
    """Gradient values the last backward wrote: all of a dense gradient, a sparse one's stored values."""
    total = 0
    for parameter in module.parameters():
        assert parameter.grad is not None
        # An embedding's sparse gradient is uncoalesced: one row of values per batch index, repeats included.
        total += parameter.grad._values().numel() if parameter.grad.is_sparse else parameter.grad.numel()
    return total


def lookup_versus_linear(
    n_users: int,
    *,
    n_factors: int = 50,
    batch_size: int = 1024,
    steps: int = 20,
    seed: int = 0,
    skip_dense_above: int | None = None,
) -> dict[str, float]:
    """Compare an embedding lookup with one-hot @ `nn.Linear` on one table of `n_users` x `n_factors`.

    Every variant trains with `torch.optim.SGD` (no momentum: `param -= lr * grad`, a sparse gradient
    added row by row) on the same `steps` random batches of user indices, loss mean(output^2), after
    one untimed warm-up step. Returns, as plain numbers:

    - `max_abs_diff`: largest |embedding(u) - one_hot(u) @ linear.weight.T| on one batch, dense and
      sparse one-hot;
    - `<variant>_seconds`: mean wall time of a training step;
    - `<variant>_peak_bytes`: measured, not computed: the peak of CPU bytes allocated minus freed
      during one extra step, from `torch.profiler` memory events, counted from the step's start
      (gradients from the previous step already released); it includes the one-hot batch, the
      gradient and every temporary PyTorch allocates, but not the table itself; the loss's own
      temporaries (4 x batch_size x n_factors floats) are in every variant's number;
    - `<variant>_gradient_entries`: gradient values the step writes (a dense gradient's every entry;
      a sparse gradient's stored values, batch_size x n_factors).

    The dense one-hot is batch_size x n_users floats (400 MB at 100,000 users and a batch of 1024,
    built via an int64 one-hot twice that size); with `n_users > skip_dense_above` it is skipped
    and its numbers are NaN.
    """
    if n_users < 1 or n_factors < 1 or batch_size < 1 or steps < 1:
        raise ValueError(
            f"n_users, n_factors, batch_size and steps must be at least 1, got "
            f"{n_users}, {n_factors}, {batch_size}, {steps}"
        )
    generator = torch.Generator().manual_seed(seed)
    weight = torch.empty(n_users, n_factors).normal_(0.0, INIT_STD, generator=generator)
    # One warm-up batch, `steps` timed batches, one batch for the memory measurement; shared by all.
    batches = [torch.randint(0, n_users, (batch_size,), generator=generator) for _ in range(steps + 2)]
    with_dense_one_hot = skip_dense_above is None or n_users <= skip_dense_above
    variants = _variants(weight, with_dense_one_hot)

    with torch.no_grad():
        lookup = variants["embedding"][1](batches[0])
        one_hot_outputs = [variants[name][1](batches[0]) for name in ONE_HOT_VARIANTS if name in variants]
        max_abs_diff = max(float((output - lookup).abs().max()) for output in one_hot_outputs)

    result: dict[str, float] = {"max_abs_diff": max_abs_diff}
    for name in VARIANTS:
        if name not in variants:
            result.update({f"{name}_{measure}": math.nan for measure in MEASURES})
            continue
        module, forward = variants[name]
        optimizer = torch.optim.SGD(module.parameters(), lr=LEARNING_RATE)
        training_step(optimizer, forward, batches[0])
        start = time.perf_counter()
        for users in batches[1 : steps + 1]:
            training_step(optimizer, forward, users)
        seconds = (time.perf_counter() - start) / steps
        # Release the last gradient before profiling, so the peak counts only what the step allocates.
        optimizer.zero_grad(set_to_none=True)
        peak_bytes = peak_allocated_bytes(partial(training_step, optimizer, forward, batches[-1]))
        result[f"{name}_seconds"] = seconds
        result[f"{name}_peak_bytes"] = float(peak_bytes)
        result[f"{name}_gradient_entries"] = float(_gradient_entries(module))
    return result


def lookup_cost_table(
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000),
    *,
    progress: Callable[[str], None] | None = None,
    **kwargs: Any,
) -> list[dict[str, float]]:
    """One row of `lookup_versus_linear(n_users, **kwargs)` per size, with `n_users`, to show the trend.

    `progress`, when given, is called with one line as each size's measurement starts.
    """
    rows = []
    for number, n_users in enumerate(sizes, start=1):
        if progress is not None:
            progress(f"measuring lookup cost: {n_users:,} users ({number}/{len(sizes)})")
        rows.append({"n_users": float(n_users), **lookup_versus_linear(n_users, **kwargs)})
    return rows
