"""Run folders and checkpoints: config, id maps, metrics and weights, written atomically.

A checkpoint holds only tensors and plain data and is read with `torch.load(weights_only=True)`,
so a tampered file cannot run code; it rebuilds its model with no outside knowledge.
"""

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from recsys.config import RunConfig
from recsys.encoding import IdMap
from recsys.errors import RecsysError
from recsys.models import build_model

# 2: each epoch of the training history records `ratings`, which resuming needs.
CHECKPOINT_FORMAT = 2
CONFIG_FILE, METRICS_FILE, CHECKPOINT_FILE = "config.json", "metrics.json", "checkpoint.pt"


def _atomic_write(path: Path, write: Any) -> None:
    """Write via `write(file)` to a temporary file beside `path`, fsync, then rename into place.

    A crash at any moment leaves either the previous file or the new one, never a torn one; a
    folder that cannot be written is a one-line RecsysError, not a traceback.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise RecsysError(f"cannot write {path}: {error.strerror or error}") from None
    try:
        os.fchmod(handle, 0o644)  # mkstemp's 0600 would hide run files from other readers
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise RecsysError(f"cannot write {path}: {error.strerror or error}") from None
        raise


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically write `data` as indented JSON."""
    _atomic_write(path, lambda file: file.write(json.dumps(data, indent=2).encode() + b"\n"))


@dataclass(frozen=True)
class Checkpoint:
    """A trained model with everything needed to use it."""

    model: nn.Module
    config: RunConfig
    users: IdMap
    items: IdMap
    metrics: dict[str, Any]
    training: dict[str, Any] | None = None  # optimizer, schedule and RNG state to resume from


def save_checkpoint(
    path: Path,
    model: nn.Module,
    config: RunConfig,
    users: IdMap,
    items: IdMap,
    metrics: dict[str, Any],
    training: dict[str, Any] | None = None,
) -> None:
    """Atomically save weights (on CPU), config, id maps, metrics and the state to resume from."""
    payload = {
        "format": CHECKPOINT_FORMAT,
        "config": config.to_dict(),
        "state_dict": {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()},
        "user_ids": torch.from_numpy(users.raw_ids),
        "item_ids": torch.from_numpy(items.raw_ids),
        "metrics": json.dumps(metrics),
        "training": training,
    }
    _atomic_write(path, lambda file: torch.save(payload, file))


def load_checkpoint(path: Path) -> Checkpoint:
    """Rebuild the model of a checkpoint; refuse anything that is not plain data."""
    if not path.is_file():
        raise RecsysError(f"{path}: checkpoint not found")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # unpickling refused or a corrupt file
        reason = str(error).strip().splitlines()[0]
        raise RecsysError(f"{path}: not a recsys checkpoint or unsafe to load ({reason})") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise RecsysError(f"{path}: unsupported checkpoint format (expected {CHECKPOINT_FORMAT})")
    try:
        config = RunConfig.from_dict(payload["config"])
        users, items = IdMap(payload["user_ids"].numpy()), IdMap(payload["item_ids"].numpy())
        metrics = json.loads(payload["metrics"])
        model = build_model(config.model, len(users), len(items), config.n_factors, config.y_range)
        model.load_state_dict(payload["state_dict"])
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RecsysError(f"{path}: damaged or incompatible checkpoint ({reason})") from None
    return Checkpoint(model, config, users, items, metrics, payload.get("training"))
