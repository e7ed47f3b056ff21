"""What the models that use features share: how their side-feature columns were coded, kept so that
a new user's row of the feature file (which may have grown since) is coded as training coded its
own, and a resumed run whose file was changed is refused; and the sums of a table's rows over new
users' feature rows."""

import hashlib

import numpy as np
import torch
from torch import Tensor, nn

from recsys.data.features import SIDES, ColumnCoding, FeatureRows, codings_from_text
from recsys.errors import RecsysError

# Per side: how its columns were coded (codings_text, as UTF-8), and a digest of the training rows
# themselves (checked on resume: the same coding can describe other users).
CODING_BUFFERS = tuple(f"{side}_feature_{part}" for side in SIDES for part in ("coding", "rows"))


def coding_bytes(coding: str) -> Tensor:
    """A FeatureRows.coding (or a digest) as a uint8 tensor (empty for none), what a checkpoint keeps."""
    return (
        torch.frombuffer(bytearray(coding.encode()), dtype=torch.uint8)
        if coding
        else torch.zeros(0, dtype=torch.uint8)
    )


def keeps_codings(module: nn.Module, side: str) -> bool:
    """Whether `module` was trained on a table of `side`'s side features (it keeps how it coded them)."""
    saved = getattr(module, f"{side}_feature_coding", None)
    return saved is not None and len(saved) > 0


def saved_codings(module: nn.Module, side: str) -> tuple[ColumnCoding, ...] | None:
    """How `module` coded `side`'s side-feature columns in training; None where it read no table."""
    if not keeps_codings(module, side):
        return None
    return codings_from_text(getattr(module, f"{side}_feature_coding").numpy().tobytes().decode())


def register_codings(module: nn.Module) -> None:
    """Empty codings and rows digests, buffers of `module` (filled by `set_codings`, or by a checkpoint's)."""
    for name in CODING_BUFFERS:
        module.register_buffer(name, torch.zeros(0, dtype=torch.uint8))


def _rows_digest(rows: FeatureRows) -> str:
    digest = hashlib.blake2b(rows.coding.encode(), digest_size=8)
    for array in (rows.starts, rows.columns, rows.values):
        digest.update(np.ascontiguousarray(array).data)
    return digest.hexdigest()


def set_codings(module: nn.Module, users: FeatureRows, items: FeatureRows) -> None:
    for side, rows in zip(SIDES, (users, items), strict=True):
        setattr(module, f"{side}_feature_coding", coding_bytes(rows.coding))
        setattr(module, f"{side}_feature_rows", coding_bytes(_rows_digest(rows)))


def check_coding(module: nn.Module, side: str, coding: Tensor, doing: str) -> None:
    """Refuse feature rows of `side` coded otherwise than `module` was trained on."""
    if not torch.equal(getattr(module, f"{side}_feature_coding"), coding):
        raise RecsysError(
            f"cannot {doing}: the {side} side features are coded otherwise than when the model was "
            f"trained (has the {side} feature file changed since?)"
        )


def check_saved_codings(module: nn.Module, state_dict: dict[str, Tensor], prefix: str) -> None:
    """Before a resumed run's state is loaded onto a model whose features the data has just set: the
    two codings, and the rows they coded, must agree."""
    for side in SIDES:
        saved = state_dict.get(f"{prefix}{side}_feature_coding")
        if saved is not None:
            check_coding(module, side, saved, "resume")
        saved = state_dict.get(f"{prefix}{side}_feature_rows")
        if saved is not None and not torch.equal(saved, getattr(module, f"{side}_feature_rows")):
            raise RecsysError(
                f"cannot resume: the {side}s' side features differ from the run's (has the {side} "
                "feature file changed since?)"
            )


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
