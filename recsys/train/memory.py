"""Whether a model's tables fit in memory, answered before they are allocated.

An absurd size (`--n-factors 1000000000000`) would otherwise die inside torch's allocator with a
traceback, or push the machine into swap, minutes into a run.
"""

import os
from pathlib import Path
from typing import cast

import torch
from torch import nn

from recsys.config import RunConfig, available_cores
from recsys.errors import RecsysError
from recsys.models import SampledModel, build_model, model_entry, rating_model
from recsys.train.row_layout import FLOATS_PER_LINE, padded_width

# Copies of every parameter a run holds: the weights, their gradients and Adam's two moments. The
# compiled engine holds the weights and one AdaGrad sum per row, and beside them working copies of
# the factor tables padded to whole cache lines (`working_copy_bytes`, counted apart: for a narrow
# table, such as one factor widened to 16, they outweigh the four copies).
COPIES_PER_PARAMETER = 4
# How far below the memory available the arithmetic bound must stay for the exact count to be skipped:
# room for a registered model larger than the built-in ones.
BOUND_MARGIN = 8


def available_memory() -> int:
    """Bytes this process can still allocate: the kernel's MemAvailable, capped by a cgroup limit."""
    candidates = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                candidates.append(int(line.split()[1]) * 1024)
    except OSError:
        candidates.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            candidates.append(int(limit))
    except OSError:
        pass
    return min(candidates)


def training_bytes(config: RunConfig, n_users: int, n_items: int) -> int:
    """Bytes the model's parameters and their training state take, counted on the meta device (one
    model's, times the models built), and a sampler's own."""
    with torch.device("meta"):
        model = build_model(config.model, n_users, n_items, table_width(config), config.y_range)
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    return (
        (COPIES_PER_PARAMETER * parameters + working_copy_bytes(config, model)) * config.built_members
        + solver_bytes(config)
        + chain_bytes(config, n_users, n_items)
    )


def trains_working_copies(config: RunConfig) -> bool:
    """Whether `config`'s engine trains copies of the factor tables laid out on cache lines
    (recsys.train.row_layout): the compiled engine's per-rating AdaGrad and bpr."""
    return config.engine == "compiled" and not config.samples and model_entry(config.model).fit != "als"


def working_copy_bytes(config: RunConfig, model: nn.Module) -> int:
    """Bytes of the working copies `config`'s engine trains of `model`'s factor tables: one with rows
    padded to whole cache lines of each table whose width is not (a table already so laid out is
    trained in place), and bpr's item table in any case, copied in the order of its groups."""
    tables = rating_model(model).factorisation() if trains_working_copies(config) else None
    if tables is None:
        return 0
    factors = [
        tables.user_factors,
        tables.item_factors,
        *([tables.implicit.factors] if tables.implicit is not None else []),
    ]
    bpr = model_entry(config.model).fit == "bpr"
    copied = [
        table
        for table in factors
        if table.shape[1] % FLOATS_PER_LINE or (bpr and table is tables.item_factors)
    ]
    return sum(4 * table.shape[0] * padded_width(table.shape[1]) for table in copied)


# A sampler's chains pool their kept draws in one model, but each holds its current draw: a float64
# row [factors, bias] per feature, of which a user's and an item's ids and rated others (bfm's
# implicit feedback) number at most twice the users and items; side features are few beside them.
FEATURE_ROWS_PER_ID = 2


def chain_bytes(config: RunConfig, n_users: int, n_items: int) -> int:
    """Bytes of the current draws a compiled sampler's `members` chains hold (0 for other models)."""
    if not config.samples:
        return 0
    rows = FEATURE_ROWS_PER_ID * (n_users + n_items)
    return 8 * rows * (config.n_factors + 1) * config.members


# Dense float64 matrices of side k x k (k the rank) that a compiled solve holds beside the tables,
# which grow as the rank's square however few the users and items: implicit ALS sums each side's
# Gram matrix over GRAM_CHUNKS partial sums (and keeps the last one); BPMF's sampler draws each
# side's Normal-Wishart prior through a dozen (k + 1)-square temporaries and solves a (k + 1)-square
# system per row on every thread.
def solver_bytes(config: RunConfig) -> int:
    """Bytes of the k x k matrices `config`'s compiled solver holds at once (0 for the others)."""
    fit = model_entry(config.model).fit
    if config.engine != "compiled" or fit not in ("als", "gibbs"):
        return 0
    if fit == "als":
        from recsys.train.als import GRAM_CHUNKS  # numba's, which an ordinary check need not load

        squares = GRAM_CHUNKS + 4
    else:
        squares = 16
    side = config.n_factors + (1 if config.samples else 0)  # the sampler's rows are [factors, bias]
    threads = available_cores()
    return 8 * side * side * (squares + (threads if config.samples else 0))


def table_width(config: RunConfig) -> int:
    """Columns per id of the model's factor tables: `n_factors`, or for a sampled model on the
    compiled engine one block of them per draw it keeps."""
    if config.samples:
        sampled = cast(type[SampledModel], model_entry(config.model).model_class())
        return config.n_factors * sampled.kept_draws(config.epochs, config.members)
    return config.n_factors


def bound_bytes(config: RunConfig, n_users: int, n_items: int) -> int:
    """An over-estimate of `training_bytes` for the built-in models, from arithmetic alone: their
    tables (svdpp's second item table among them), biases and projections hold at most
    (users + 2 items + 2k + 2)(k + 1) float32s a member, k the tables' width, and their working
    copies (users + 2 items) rows of k padded to whole cache lines."""
    k = table_width(config)
    tables = COPIES_PER_PARAMETER * 4 * (n_users + 2 * n_items + 2 * k + 2) * (k + 1) * config.built_members
    if trains_working_copies(config):  # the user, item and svdpp's implicit factors, padded
        tables += 4 * (n_users + 2 * n_items) * padded_width(k) * config.built_members
    return tables + solver_bytes(config) + chain_bytes(config, n_users, n_items)


def check_fits(config: RunConfig, n_users: int, n_items: int) -> None:
    """Refuse a model whose training state would not fit in the memory available, with the figures.

    The exact count runs only when BOUND_MARGIN times the bound reaches the memory available: the
    meta device's first use imports torch's compiler, seconds that an ordinary run need not pay.
    """
    available = available_memory()
    if BOUND_MARGIN * bound_bytes(config, n_users, n_items) < available:
        return
    needed = training_bytes(config, n_users, n_items)
    if needed > available:
        members = f"`members` {config.members}, " if config.members > 1 else ""
        raise RecsysError(
            f"{members}`n_factors` {config.n_factors}: {config.model} with {n_users:,} users and "
            f"{n_items:,} items needs about {needed / 2**30:,.1f} GiB for its weights and training state, "
            f"and {available / 2**30:,.1f} GiB is available; choose "
            + ("fewer members or " if config.members > 1 else "")
            + "fewer factors"
        )
