"""The device engine's step for `dot` and `dotbias` as Triton kernels, for a GPU.

The same step as `DeviceTables.step` in torch operations, which read and write each rating's rows
about thirty times over in a hundred-odd kernels (docs/findings.md, "The device engine on an
H200"). Here one kernel gathers each rating's rows, scores it and writes its rows' gradients and
their squares; torch finds each update's AdaGrad sum as the compiled engine would have it (the
segmented sums over the step's repeated rows); a second kernel steps each side's rows by atomic
adds; and a third adds the squares to the sums last, so no update reads a sum this step has changed.
Imported only where it runs: on a GPU, or on the CPU under Triton's interpreter
(`TRITON_INTERPRET=1`, set before this module is imported), as the tests run it.
"""

import triton
import triton.language as tl
from torch import Tensor

# Ratings per program: a program holds about this many factors of each side at once.
FACTORS_PER_PROGRAM = 4096
# Ratings per program of the update: the more, the fewer atomic adds on a busy row, but the larger the
# same-row product; the least a block product takes was the fastest of 16 to 128 on an H200
# (docs/findings.md, "The device engine on an H200").
RATINGS_PER_APPLY = 16
# Factors per program of the update, at most: its same-row product stages 128 bytes a factor in shared
# memory, 32 KiB at 256 factors but 256 KiB at 2,048, more than a Hopper GPU gives a program (227 KiB,
# so rows of over 1,024 factors failed to launch); a wider row's factors take programs side by side.
APPLY_FACTORS = 256
SQUARES_PER_PROGRAM = 1024


@triton.jit
def _gradients(
    users,
    items,
    values,
    user_factors,
    item_factors,
    user_bias,
    item_bias,
    user_gradients,
    item_gradients,
    bias_gradients,
    user_squares,
    item_squares,
    squared_error,
    n,
    width,
    low,
    span,
    twice_weight,
    decay,
    SQUASH: tl.constexpr,
    BIASED: tl.constexpr,
    COLUMNS: tl.constexpr,
    BLOCK_RATINGS: tl.constexpr,
    BLOCK_FACTORS: tl.constexpr,
) -> None:
    """Each rating's gradients from the rows as they were before the step: its factor rows' (one
    row each side), its biases' (one column each side), the squares AdaGrad adds (a factor row's
    mean square, a bias's square; COLUMNS per side), and its squared error added to the step's."""
    ratings = tl.program_id(0) * BLOCK_RATINGS + tl.arange(0, BLOCK_RATINGS)
    live = ratings < n
    factors = tl.arange(0, BLOCK_FACTORS)
    cells = live[:, None] & (factors[None, :] < width)
    user = tl.load(users + ratings, mask=live, other=0)
    item = tl.load(items + ratings, mask=live, other=0)
    user_rows = tl.load(user_factors + user[:, None] * width + factors[None, :], mask=cells, other=0.0)
    item_rows = tl.load(item_factors + item[:, None] * width + factors[None, :], mask=cells, other=0.0)
    score = tl.sum(user_rows * item_rows, axis=1)
    if BIASED:
        user_biases = tl.load(user_bias + user, mask=live, other=0.0)
        item_biases = tl.load(item_bias + item, mask=live, other=0.0)
        score += user_biases + item_biases
    value = tl.load(values + ratings, mask=live, other=0.0)
    if SQUASH:
        sigmoid = tl.sigmoid(score)
        error = low + span * sigmoid - value
        gradient = error * sigmoid * (1 - sigmoid) * (twice_weight * span)
    else:
        error = score - value
        gradient = twice_weight * error
    error = tl.where(live, error, 0.0)
    user_step = gradient[:, None] * item_rows + decay * user_rows
    item_step = gradient[:, None] * user_rows + decay * item_rows
    cell_offsets = ratings[:, None] * width + factors[None, :]
    tl.store(user_gradients + cell_offsets, user_step, mask=cells)
    tl.store(item_gradients + cell_offsets, item_step, mask=cells)
    tl.store(user_squares + ratings * COLUMNS, tl.sum(user_step * user_step, axis=1) / width, mask=live)
    tl.store(item_squares + ratings * COLUMNS, tl.sum(item_step * item_step, axis=1) / width, mask=live)
    if BIASED:
        user_bias_step = gradient + decay * user_biases
        item_bias_step = gradient + decay * item_biases
        tl.store(bias_gradients + ratings * 2, user_bias_step, mask=live)
        tl.store(bias_gradients + ratings * 2 + 1, item_bias_step, mask=live)
        tl.store(user_squares + ratings * COLUMNS + 1, user_bias_step * user_bias_step, mask=live)
        tl.store(item_squares + ratings * COLUMNS + 1, item_bias_step * item_bias_step, mask=live)
    tl.atomic_add(squared_error, tl.sum(error * error, axis=0))


@triton.jit
def _apply(
    order,
    rows,
    gradients,
    bias_gradients,
    sums,
    earlier,
    table,
    bias,
    learning_rate,
    n,
    width,
    SIDE: tl.constexpr,
    BIASED: tl.constexpr,
    ORDERED: tl.constexpr,
    COLUMNS: tl.constexpr,
    BLOCK_RATINGS: tl.constexpr,
    BLOCK_FACTORS: tl.constexpr,
) -> None:
    """One side's AdaGrad steps, over the step's ratings sorted by row (through `order` where
    ORDERED): each rating's row update by its gradient over the root of the row's sum as the compiled
    engine would have it by then (the sum before the step plus `earlier`, in sorted order). A
    program first adds up the updates of each row it holds (a product with the block's same-row
    matrix, of 0s and 1s, on the tensor cores in three passes of TF32 that keep float32's digits), so
    a popular row takes one atomic add a program instead of one a rating."""
    places = tl.program_id(0) * BLOCK_RATINGS + tl.arange(0, BLOCK_RATINGS)
    live = places < n
    # This program's share of the factors (the first also steps the biases).
    factors = tl.program_id(1) * BLOCK_FACTORS + tl.arange(0, BLOCK_FACTORS)
    cells = live[:, None] & (factors[None, :] < width)
    entries = tl.load(order + places, mask=live, other=0).to(tl.int64) if ORDERED else places.to(tl.int64)
    row = tl.load(rows + entries, mask=live, other=-1)
    lr = tl.load(learning_rate)
    total = tl.load(sums + row * COLUMNS, mask=live, other=1.0)
    total += tl.load(earlier + places * COLUMNS, mask=live, other=0.0)
    step = lr / tl.sqrt(total)
    gradient = tl.load(gradients + entries[:, None] * width + factors[None, :], mask=cells, other=0.0)
    same = (row[:, None] == row[None, :]) & live[:, None] & live[None, :]
    # A row's first place in the block writes the block's sum of its updates.
    before = tl.arange(0, BLOCK_RATINGS)[None, :] < tl.arange(0, BLOCK_RATINGS)[:, None]
    first = live & (tl.sum((same & before).to(tl.int32), axis=1) == 0)
    summed = tl.dot(same.to(tl.float32), -step[:, None] * gradient, input_precision="tf32x3")
    tl.atomic_add(table + row[:, None] * width + factors[None, :], summed, mask=cells & first[:, None])
    if BIASED:  # noqa: SIM102 (a constexpr test, kept apart from the run-time one)
        if tl.program_id(1) == 0:
            bias_total = tl.load(sums + row * COLUMNS + 1, mask=live, other=1.0)
            bias_total += tl.load(earlier + places * COLUMNS + 1, mask=live, other=0.0)
            bias_gradient = tl.load(bias_gradients + entries * 2 + SIDE, mask=live, other=0.0)
            bias_update = -lr / tl.sqrt(bias_total) * bias_gradient
            bias_summed = tl.sum(tl.where(same, bias_update[None, :], 0.0), axis=1)
            tl.atomic_add(bias + row, bias_summed, mask=first)


@triton.jit
def _add_squares(
    order,
    rows,
    squares,
    earlier,
    sums,
    n,
    ORDERED: tl.constexpr,
    COLUMNS: tl.constexpr,
    BLOCK_RATINGS: tl.constexpr,
) -> None:
    """Each row's squares of the step join its sums, once its updates are made: at the last place of
    the row's run (in sorted order) its earlier squares plus its own, a plain write, as no other
    place holds that row's last."""
    places = tl.program_id(0) * BLOCK_RATINGS + tl.arange(0, BLOCK_RATINGS)
    live = places < n
    has_next = places + 1 < n
    if ORDERED:
        entries = tl.load(order + places, mask=live, other=0).to(tl.int64)
        next_entries = tl.load(order + places + 1, mask=has_next, other=0).to(tl.int64)
    else:
        entries = places.to(tl.int64)
        next_entries = entries + 1
    row = tl.load(rows + entries, mask=live, other=0)
    next_row = tl.load(rows + next_entries, mask=has_next, other=-1)
    last = live & (next_row != row)
    for column in tl.static_range(COLUMNS):
        found = tl.load(earlier + places * COLUMNS + column, mask=last, other=0.0)
        found += tl.load(squares + entries * COLUMNS + column, mask=last, other=0.0)
        total = tl.load(sums + row * COLUMNS + column, mask=last, other=0.0)
        tl.store(sums + row * COLUMNS + column, total + found, mask=last)


def block_shape(width: int) -> tuple[int, int]:
    """(ratings, factors) per program for rows of `width` factors."""
    factors = triton.next_power_of_2(width)
    return max(1, FACTORS_PER_PROGRAM // factors), factors


def apply_block_shape(width: int) -> tuple[int, int]:
    """(ratings, factors) per program of `_apply`: RATINGS_PER_APPLY ratings, and both at least the
    16 that a product of blocks (`tl.dot`) needs; at most APPLY_FACTORS factors (a wider row's
    factors are shared out among programs)."""
    return RATINGS_PER_APPLY, max(16, min(APPLY_FACTORS, triton.next_power_of_2(width)))


def gradients(
    users: Tensor,
    items: Tensor,
    values: Tensor,
    tables: tuple[Tensor, Tensor, Tensor | None, Tensor | None],
    out: tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor],
    y_range: tuple[float, float] | None,
    twice_weight: float,
    decay: float,
) -> None:
    """Launch `_gradients` over the step's ratings, writing `out` (user and item gradients, bias
    gradients, user and item squares, the squared error, which it adds to)."""
    user_factors, item_factors, user_bias, item_bias = tables
    biased = user_bias is not None and item_bias is not None
    n, width = len(values), user_factors.shape[1]
    ratings, factors = block_shape(width)
    low, high = y_range if y_range is not None else (0.0, 1.0)
    _gradients[(triton.cdiv(n, ratings),)](
        users,
        items,
        values,
        user_factors,
        item_factors,
        user_bias if user_bias is not None else user_factors,
        item_bias if item_bias is not None else item_factors,
        *out,
        n,
        width,
        low,
        high - low,
        twice_weight,
        decay,
        SQUASH=y_range is not None,
        BIASED=biased,
        COLUMNS=2 if biased else 1,
        BLOCK_RATINGS=ratings,
        BLOCK_FACTORS=factors,
    )


def apply(
    side: int,
    order: Tensor | None,
    rows: Tensor,
    gradients: Tensor,
    bias_gradients: Tensor,
    sums: Tensor,
    earlier: Tensor,
    table: Tensor,
    bias: Tensor | None,
    learning_rate: Tensor,
) -> None:
    """Launch `_apply` for one side (0 users, 1 items) of the step; `order` sorts the side's ratings
    by row (None: they are), `earlier` is in that sorted order."""
    n, width = len(rows), table.shape[1]
    ratings, factors = apply_block_shape(width)
    columns = sums.shape[1]
    ordered = order is not None
    _apply[(triton.cdiv(n, ratings), triton.cdiv(width, factors))](
        order if ordered else rows,
        rows,
        gradients,
        bias_gradients,
        sums,
        earlier,
        table,
        bias if bias is not None else table,
        learning_rate,
        n,
        width,
        SIDE=side,
        BIASED=bias is not None,
        ORDERED=ordered,
        COLUMNS=columns,
        BLOCK_RATINGS=ratings,
        BLOCK_FACTORS=factors,
    )


def add_squares(order: Tensor | None, rows: Tensor, squares: Tensor, earlier: Tensor, sums: Tensor) -> None:
    """Launch `_add_squares`: the step's `squares` (and `earlier`, in sorted order) join `sums`."""
    n = len(rows)
    ordered = order is not None
    _add_squares[(triton.cdiv(n, SQUARES_PER_PROGRAM),)](
        order if ordered else rows,
        rows,
        squares,
        earlier,
        sums,
        n,
        ORDERED=ordered,
        COLUMNS=sums.shape[1],
        BLOCK_RATINGS=SQUARES_PER_PROGRAM,
    )
