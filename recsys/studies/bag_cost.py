"""What `nn.EmbeddingBag` saves over multi-hot rows through `nn.Linear`, as the number of items grows.

SVD++ sums a second item table's rows over the items each user rated. `nn.EmbeddingBag(mode="sum")`
computes exactly multi_hot(bags) @ W for a (bags, n_items) multi-hot matrix, and `mode="mean"` the
same with each row divided by its bag's size; the Linear builds that matrix and multiplies through
the whole table, the bag reads only the rows named. `bag_versus_multi_hot` checks the equality and
times one training step of each on the CPU, with the memory each step allocates.
"""

import time
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor, nn

from recsys.models.layers import INIT_STD
from recsys.studies.lookup_cost import LEARNING_RATE, peak_allocated_bytes, training_step

MODES = ("sum", "mean")
VARIANTS = ("embedding_bag", "multi_hot_linear")
Bags = tuple[Tensor, Tensor, Tensor]  # the bags' items flattened, where each bag starts, the multi-hot


def multi_hot(bags: list[list[int]], n_items: int, *, normalise: bool = False) -> Tensor:
    """A (len(bags), n_items) float matrix: row b counts how often each item is in bag b, divided by
    the bag's size when `normalise` (an empty bag's row stays zero)."""
    rows = torch.zeros(len(bags), n_items)
    for row, bag in zip(rows, bags, strict=True):
        row.index_add_(0, torch.tensor(bag, dtype=torch.long), torch.ones(len(bag)))
        if normalise and bag:
            row /= len(bag)
    return rows


def _batch(n_items: int, n_bags: int, bag_size: int, mode: str, generator: torch.Generator) -> Bags:
    """`n_bags` bags of `bag_size` distinct random items, as EmbeddingBag and as the Linear take them."""
    bags = [torch.randperm(n_items, generator=generator)[:bag_size].tolist() for _ in range(n_bags)]
    items = torch.tensor([item for bag in bags for item in bag], dtype=torch.long)
    starts = torch.arange(n_bags, dtype=torch.long) * bag_size
    return items, starts, multi_hot(bags, n_items, normalise=mode == "mean")


def bag_versus_multi_hot(
    n_items: int,
    *,
    mode: str = "sum",
    n_factors: int = 50,
    n_bags: int = 256,
    bag_size: int = 100,
    steps: int = 10,
    seed: int = 0,
) -> dict[str, float]:
    """EmbeddingBag(`mode`) against the multi-hot `nn.Linear(n_items, n_factors, bias=False)` on one table.

    Both train with plain SGD on the same `steps` batches of `n_bags` bags (loss mean(output^2)) after
    an untimed warm-up. Returns `max_abs_diff` (outputs on one batch) and `max_abs_grad_diff` (the
    table's gradient on it), and for each variant `<variant>_seconds` (mean wall time of a step) and
    `<variant>_peak_bytes` (the peak a step allocates, from the profiler, the multi-hot matrix of the
    Linear's batch not counted: it is built outside the step, as the bags' item lists are).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if min(n_items, n_factors, n_bags, steps) < 1 or not 1 <= bag_size <= n_items:
        raise ValueError("n_items, n_factors, n_bags and steps must be at least 1, bag_size in [1, n_items]")
    generator = torch.Generator().manual_seed(seed)
    weight = torch.empty(n_items, n_factors).normal_(0.0, INIT_STD, generator=generator)
    bag = nn.EmbeddingBag.from_pretrained(weight.clone(), freeze=False, mode=mode)
    linear = nn.Linear(n_items, n_factors, bias=False)
    with torch.no_grad():
        linear.weight.copy_(weight.t())
    forwards: dict[str, tuple[nn.Module, Callable[[Bags], Tensor]]] = {
        "embedding_bag": (bag, lambda batch: bag(batch[0], batch[1])),
        "multi_hot_linear": (linear, lambda batch: linear(batch[2])),
    }
    batches = [_batch(n_items, n_bags, bag_size, mode, generator) for _ in range(steps + 2)]

    outputs = {name: forward(batches[0]) for name, (_, forward) in forwards.items()}
    gradients = {}
    for name, (module, _) in forwards.items():
        (gradients[name],) = torch.autograd.grad(outputs[name].pow(2).mean(), next(module.parameters()))
    result = {
        "max_abs_diff": float((outputs["embedding_bag"] - outputs["multi_hot_linear"]).abs().max().detach()),
        "max_abs_grad_diff": float(
            (gradients["embedding_bag"] - gradients["multi_hot_linear"].t()).abs().max()
        ),
    }
    for name, (module, forward) in forwards.items():
        optimizer = torch.optim.SGD(module.parameters(), lr=LEARNING_RATE)
        training_step(optimizer, forward, batches[0])
        start = time.perf_counter()
        for batch in batches[1 : steps + 1]:
            training_step(optimizer, forward, batch)
        result[f"{name}_seconds"] = (time.perf_counter() - start) / steps
        optimizer.zero_grad(set_to_none=True)
        result[f"{name}_peak_bytes"] = float(
            peak_allocated_bytes(partial(training_step, optimizer, forward, batches[-1]))
        )
    return result
