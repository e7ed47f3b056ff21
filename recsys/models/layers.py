"""The pieces every model is built from: the y_range squash, seeded tables, row lookups, the penalty."""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from recsys.process_settings import ProcessSetting

# fastai's initialisation for collaborative-filtering embeddings: small, so the first dot products
# sit near zero and the sigmoid starts in its linear middle.
INIT_STD = 0.01

# torch's default dtype is the process's, not a Python thread's.
_DEFAULT_DTYPE = ProcessSetting(torch.get_default_dtype, torch.set_default_dtype)


def init_normal_(weight: Tensor, generator: torch.Generator | None) -> Tensor:
    """Normal(0, INIT_STD) initialisation drawn from the caller's generator (no global seeding)."""
    with torch.no_grad():
        return weight.normal_(0.0, INIT_STD, generator=generator)


@contextmanager
def global_rng_kept() -> Iterator[None]:
    """torch's global RNG as it was after the block: torch's layers draw their own initialisation from
    it, which a model then overwrites from its generator, and a caller's `torch.manual_seed` stream
    would otherwise move on by every model built (the next `torch.randn` after a fit differed)."""
    with torch.random.fork_rng(devices=[]):
        yield


@contextmanager
def float32_default() -> Iterator[None]:
    """torch's default dtype float32 for the block, the caller's after: a model is built in float32,
    as the engines train it, whatever the caller set (`torch.set_default_dtype(torch.float64)` in a
    notebook had built float64 tables, which the compiled engine refused with an internal error, and
    drawn other initial weights). Blocks in several Python threads share the one default
    (`ProcessSetting`): the first to close had given its float64 back under the other's model."""
    with _DEFAULT_DTYPE.held(torch.float32):
        yield


def scale_weights_(model: nn.Module, factor: float) -> None:
    """Multiply every parameter of `model` by `factor` in place (its initial scale, searched)."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(factor)


def embedding_table(n: int, n_factors: int, generator: torch.Generator | None) -> nn.Embedding:
    """An embedding table initialised from `generator`."""
    with global_rng_kept():
        embedding = nn.Embedding(n, n_factors)
    init_normal_(embedding.weight, generator)
    return embedding


def bias_table(n: int) -> nn.Embedding:
    """One bias per id, starting at zero (the model's starting score already sits mid-range)."""
    with global_rng_kept():
        table = nn.Embedding(n, 1)
    nn.init.zeros_(table.weight)
    return table


def lookup(table: nn.Embedding, ids: Tensor) -> Tensor:
    """The rows `ids` (1-d) of `table`, as `table(ids)` gives them.

    For dense gradients on the CPU through `index_select`, whose backward (`index_add_`) is several
    times faster than nn.Embedding's own backward (figures in docs/performance.md). A table set to
    sparse gradients, or on a GPU (where `index_add_` is not deterministic), keeps the module call.
    """
    if table.sparse or ids.device.type != "cpu":
        return table(ids)
    return table.weight.index_select(0, ids)


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
        # The product checks its column indices on the CPU; on a GPU it would read past the weight for a
        # caller's index past the table, so the indices are checked there (a wait for the device).
        check_invariants=indices.device.type != "cpu",
    )
    # Outside autocast, as nn.Embedding's lookups are: torch's sparse product under it fails in backward
    # ("expected scalar type Float but found BFloat16").
    with torch.autocast(indices.device.type, enabled=False):
        out = torch.sparse.mm(one_hot, linear.weight.t())
    return out if linear.bias is None else out + linear.bias


# The index dtypes torch's lookups take (their values are checked by RatingModel's call, not here:
# the trainer's steps, whose pairs fit checks once, would wait for a GPU each batch).
INDEX_DTYPES = (torch.int64, torch.int32)


def require_tensor(x: object) -> None:
    """A batch of [user, item] indices is a tensor: a list or an array is named as such, before an
    attribute it lacks fails deeper in."""
    if not isinstance(x, Tensor):
        raise TypeError(f"expected a torch tensor of [user, item] indices, got {type(x).__name__}")


def split_pairs(x: Tensor) -> tuple[Tensor, Tensor]:
    """Split a (batch, 2) index tensor into user and item columns."""
    require_tensor(x)
    if x.dtype not in INDEX_DTYPES:
        raise TypeError(f"expected [user, item] indices as int64 or int32, got {x.dtype}")
    if x.dim() != 2 or x.shape[1] != 2:
        raise ValueError(f"expected a (batch, 2) tensor of [user, item] indices, got {tuple(x.shape)}")
    return x[:, 0], x[:, 1]


def split_timed(x: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    """Split a (batch, 2) [user, item] or (batch, 3) [user, item, time] tensor into its columns (the
    times None where there are none)."""
    if isinstance(x, Tensor) and x.dim() == 2 and x.shape[1] == 3:
        users, items = split_pairs(x[:, :2])
        return users, items, x[:, 2]
    if isinstance(x, Tensor) and x.dtype in INDEX_DTYPES and (x.dim() != 2 or x.shape[1] != 2):
        raise ValueError(
            "expected a (batch, 2) tensor of [user, item] indices or a (batch, 3) one of [user, item, "
            f"time], got {tuple(x.shape)}"
        )
    return (*split_pairs(x), None)


def check_pair_range(x: Tensor, n_users: int, n_items: int, what: str = "") -> None:
    """An IndexError naming the column, the first index outside and the range, unless every [user,
    item] pair of `x` (its first two columns) indexes a row of tables this size: torch's own ("index
    out of range in self") names none, a negative index would read from the end, and the compiled
    kernels would read past the tables. One reduction, read back (on a GPU, a wait for the device).
    `what` leads the message ("test ")."""
    if not len(x):
        return
    low, high = torch.aminmax(x[:, :2], dim=0)
    lows, highs = low.tolist(), high.tolist()
    for column, (kind, n) in enumerate((("user", n_users), ("item", n_items))):
        if lows[column] < 0 or highs[column] >= n:
            values = x[:, column]
            row = int(((values < 0) | (values >= n)).nonzero()[0])
            held = f"{kind}s 0..{n - 1}" if n else f"{kind}s: it has none"
            raise IndexError(
                f"{what}{kind} index {int(values[row])} (row {row}) is outside the model's {held}"
            )


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


def mean_squared_norm(*rows: Tensor) -> Tensor:
    """Batch mean of the summed squared L2 norms of per-example parameter rows: the L2 penalty of the
    rows a batch used, (1 / batch) * sum over rows r of ||r||^2."""
    return _SumOfSquares.apply(*rows) / len(rows[0])  # type: ignore[no-any-return]


def take_saved_shapes(
    module: nn.Module, state_dict: dict[str, Tensor], prefix: str, names: tuple[str, ...]
) -> None:
    """Give `module`'s tensors `names` (dotted paths below it; parameters or buffers) the shapes they
    have in `state_dict`, before `load_state_dict` copies into them: for tensors whose size is the
    data's or the training's (N(u), a block per kept draw), not fixed by the constructor. Where a
    tensor of fixed size differs from the saved one (another model's state), none is reshaped, so the
    load that then fails names every difference and leaves the model its own shapes."""
    fixed = module.state_dict(prefix=prefix, keep_vars=True)
    if any(
        key[len(prefix) :] not in names and key in state_dict and state_dict[key].shape != tensor.shape
        for key, tensor in fixed.items()
    ):
        return
    for name in names:
        saved = state_dict.get(prefix + name)
        owner_path, _, attribute = name.rpartition(".")
        owner = module.get_submodule(owner_path)
        current = getattr(owner, attribute)
        if saved is None or saved.shape == current.shape:
            continue
        fresh = torch.empty_like(saved, device=current.device)
        setattr(owner, attribute, nn.Parameter(fresh) if isinstance(current, nn.Parameter) else fresh)
