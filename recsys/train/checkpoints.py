"""Run folders and checkpoints: config, id maps, metrics and weights, written atomically.

A checkpoint is a header line naming its payload's size and SHA-256, then the payload as
`torch.save` writes it. The payload holds only tensors and plain data and is read with
`torch.load(weights_only=True)`, so a tampered file cannot run code; the checksum names a damaged
file as damaged; the payload rebuilds its model with no outside knowledge.
"""

import io
import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from recsys.config import RunConfig, model_for
from recsys.data.encoding import IdMap
from recsys.errors import RecsysError, short_reason
from recsys.files import atomic_write
from recsys.names import CHECKPOINT_FILE
from recsys.train.checkpoint_file import CHECKPOINT_FORMAT, checkpoint_body, header_line


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
    path: str | Path,
    model: nn.Module,
    config: RunConfig,
    users: IdMap,
    items: IdMap,
    metrics: dict[str, Any],
    training: dict[str, Any] | None = None,
) -> None:
    """Atomically save weights (on CPU), config, id maps, metrics and the state to resume from."""
    path = Path(path)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "config": config.to_dict(),
        "state_dict": {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()},
        "user_ids": users.to_plain(),
        "item_ids": items.to_plain(),
        "metrics": json.dumps(metrics),
        "training": training,
    }
    write_checkpoint_payload(path, payload)


def write_checkpoint_payload(path: Path, payload: dict[str, Any]) -> None:
    """Atomically write `payload` behind a header with its size and SHA-256, so damage is caught."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    body = buffer.getbuffer()
    atomic_write(path, lambda file: file.writelines((header_line(body), body)))


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Rebuild the model of a checkpoint (`path`: the file, or a run folder holding it); refuse a
    damaged file and anything that is not plain data.

    Every failure is one RecsysError line naming `path`.
    """
    path = Path(path)
    if path.is_dir():
        if not (path / CHECKPOINT_FILE).is_file():
            raise RecsysError(f"{path}: checkpoint not found (a folder with no {CHECKPOINT_FILE} in it)")
        path = path / CHECKPOINT_FILE
    payload = _read_payload(path)
    try:
        config = RunConfig.from_dict(payload["config"])
        users, items = IdMap.from_plain(payload["user_ids"]), IdMap.from_plain(payload["item_ids"])
        metrics = json.loads(payload["metrics"])
        _check_plain_state(metrics, payload.get("training"))
        model = model_for(config, len(users), len(items))
        model.load_state_dict(payload["state_dict"])
    except Exception as error:  # a safe payload of the wrong shape can fail in many ways; all say so
        raise RecsysError(f"{path}: damaged or incompatible checkpoint ({short_reason(error)})") from None
    return Checkpoint(model, config, users, items, metrics, payload.get("training"))


def _check_plain_state(metrics: Any, training: Any) -> None:
    """Metrics that are an object whose `epoch`, where a mid-run checkpoint has one, is a count, and a
    training state that is an object or none: what using and resuming a run read of them."""
    if not isinstance(metrics, dict):
        raise TypeError("its metrics are not a JSON object")
    if not isinstance(metrics.get("epoch", 0), int):
        raise TypeError(f"its metrics' epoch is {metrics['epoch']!r}, not a count")
    if training is not None and not isinstance(training, dict):
        raise TypeError("its training state is not a mapping")


def _read_payload(path: Path) -> dict[str, Any]:
    """The payload of a checkpoint file after its checksum is verified."""
    payload = _unpickle(path, checkpoint_body(path))
    found = payload.get("format") if isinstance(payload, dict) else None
    if found != CHECKPOINT_FORMAT:
        raise RecsysError(
            f"{path}: checkpoint format {found!r}; this recsys reads format {CHECKPOINT_FORMAT}: train "
            "the run again"
        )
    return payload


def _unpickle(path: Path, body: bytes) -> Any:
    """torch.load(weights_only=True), its failures as one line without torch's advice to load unsafely."""
    try:
        return torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        needed = re.search(r"GLOBAL (\S{1,80})", str(error))
        what = f"it needs {needed[1]}, which" if needed else "it holds something that"
        raise RecsysError(
            f"{path}: not a recsys checkpoint, or damaged: {what} is not a tensor or plain data, so "
            "it is unsafe to load and was refused without running it"
        ) from None
    except Exception as error:  # torch's archive reader raises many types for a damaged file
        raise RecsysError(
            f"{path}: damaged or truncated checkpoint (torch cannot read it: {short_reason(error)})"
        ) from None
