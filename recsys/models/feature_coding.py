"""What the models that use features share: the digest they keep of how the side-feature columns
were coded, so that rows coded from a changed feature file (the same count of features meaning
other things) are refused rather than read as the trained features; and the sums of a table's rows
over new users' feature rows."""

import torch
from torch import Tensor, nn

from recsys.data.features import SIDES, FeatureRows
from recsys.errors import RecsysError

CODING_BUFFERS = tuple(f"{side}_feature_coding" for side in SIDES)


def coding_bytes(coding: str) -> Tensor:
    """A FeatureRows.coding digest as a uint8 tensor (empty for none), what a checkpoint keeps."""
    return torch.tensor(list(bytes.fromhex(coding)), dtype=torch.uint8)


def register_codings(module: nn.Module) -> None:
    """Empty digests, buffers of `module` (filled by `set_codings`, or by a checkpoint's)."""
    for name in CODING_BUFFERS:
        module.register_buffer(name, torch.zeros(0, dtype=torch.uint8))


def set_codings(module: nn.Module, users: FeatureRows, items: FeatureRows) -> None:
    for name, rows in zip(CODING_BUFFERS, (users, items), strict=True):
        setattr(module, name, coding_bytes(rows.coding))


def check_coding(module: nn.Module, side: str, coding: Tensor, doing: str) -> None:
    """Refuse feature rows of `side` coded otherwise than `module` was trained on."""
    if not torch.equal(getattr(module, f"{side}_feature_coding"), coding):
        raise RecsysError(
            f"cannot {doing}: the {side} side features are coded otherwise than when the model was "
            f"trained (has the {side} feature file changed since?)"
        )


def check_saved_codings(module: nn.Module, state_dict: dict[str, Tensor], prefix: str) -> None:
    """Before a resumed run's state is loaded onto a model whose features the data has just set: the
    two codings must agree."""
    for side, name in zip(SIDES, CODING_BUFFERS, strict=True):
        saved = state_dict.get(prefix + name)
        if saved is not None:
            check_coding(module, side, saved, "resume")


def new_rows_sums(module: nn.Module, users: FeatureRows, table: Tensor) -> Tensor:
    """Each of `users`' sum of `table` rows over its features, weighted by their values: users known
    by their features alone, as recsys.data.features.rows_for_new gives them, whose columns number the
    model's features after its ids (`table`'s rows). Refused where they were coded otherwise."""
    check_coding(module, "user", coding_bytes(users.coding), "predict for new users")
    if users.n_features != len(table):
        raise RecsysError(
            f"the new users' rows have {users.n_features:,} features where training had "
            f"{len(table):,}: has a feature file changed since, or do the rows name other groups?"
        )
    rows = torch.repeat_interleave(torch.arange(users.n_rows), torch.from_numpy(users.starts).diff())
    values = torch.from_numpy(users.values).to(table)
    weighted = table[torch.from_numpy(users.columns)] * values.reshape(-1, *([1] * (table.dim() - 1)))
    return table.new_zeros(users.n_rows, *table.shape[1:]).index_add_(0, rows, weighted)
