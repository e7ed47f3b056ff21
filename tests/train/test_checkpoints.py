"""recsys.train.checkpoints: what is saved loads back, nothing in a file runs code, and damage is named
as damage."""

import hashlib
import io
import os
import pickle
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from recsys.config import config_for, model_for
from recsys.data.encoding import IdMap
from recsys.errors import RecsysError
from recsys.evaluation.metrics import predict
from recsys.models import MODELS, model_entry
from recsys.names import CHECKPOINT_FILE
from recsys.train.checkpoints import (
    CHECKPOINT_FORMAT,
    load_checkpoint,
    save_checkpoint,
    write_checkpoint_payload,
)

USERS, ITEMS = IdMap(np.array([3, 17, 40, 99])), IdMap(np.array([5, 6, 700]))
CONFIG = config_for("dotbias", n_factors=4, y_range=(0.5, 5.0), dataset="tiny")
METRICS = {"test_rmse": 0.9, "history": [{"epoch": 1, "ratings": 12}]}
TRAINING = {"epoch": 1, "optimizer": {"step": torch.tensor(7.0)}, "rng": torch.arange(5)}
CHECKSUM = "damaged checkpoint (checksum mismatch): it was changed or corrupted after it was written"


@pytest.fixture
def model() -> nn.Module:
    """A small dotbias model whose every parameter, the zero-initialised biases too, is non-trivial."""
    model = model_for(CONFIG, len(USERS), len(ITEMS), torch.Generator().manual_seed(9))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)))
    return model


@pytest.fixture
def checkpoint(tmp_path: Path, model: nn.Module) -> Path:
    path = tmp_path / "run" / CHECKPOINT_FILE
    save_checkpoint(path, model, CONFIG, USERS, ITEMS, METRICS, TRAINING)
    return path


def split_file(data: bytes) -> tuple[bytes, bytes]:
    """A format-3 file's header line (with its newline) and payload."""
    end = data.index(b"\n") + 1
    return data[:end], data[end:]


def payload_of(path: Path) -> dict[str, Any]:
    """The payload a format-3 file holds, read without recsys."""
    payload = torch.load(io.BytesIO(split_file(path.read_bytes())[1]), weights_only=True)
    assert isinstance(payload, dict)
    return payload


def refusal(path: Path) -> str:
    """load_checkpoint's error for `path`, checked to be one line that names it."""
    with pytest.raises(RecsysError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    assert "weights_only" not in message, message  # never torch's advice to load unsafely
    return message


class RunsCommand:
    """Unpickling this calls os.system (the classic malicious-pickle payload)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


# --- checkpoints -------------------------------------------------------------------------------


def test_round_trip_gives_back_what_was_saved(checkpoint: Path, model: nn.Module) -> None:
    loaded = load_checkpoint(checkpoint)
    assert type(loaded.model) is type(model)
    saved_state, loaded_state = model.state_dict(), loaded.model.state_dict()
    assert saved_state.keys() == loaded_state.keys()
    assert all(torch.equal(tensor, loaded_state[name]) for name, tensor in saved_state.items())
    assert loaded.config == CONFIG
    assert np.array_equal(loaded.users.raw_ids, USERS.raw_ids)
    assert np.array_equal(loaded.items.raw_ids, ITEMS.raw_ids)
    assert loaded.metrics == METRICS
    from_folder = load_checkpoint(checkpoint.parent)  # the run folder names its checkpoint
    assert from_folder.config == CONFIG and from_folder.metrics == METRICS
    outside = checkpoint.parent.parent
    assert refusal(outside) == f"{outside}: checkpoint not found (a folder with no {CHECKPOINT_FILE} in it)"
    assert loaded.training is not None and loaded.training["epoch"] == TRAINING["epoch"]
    assert torch.equal(loaded.training["rng"], TRAINING["rng"])


def test_a_path_given_as_text_loads_the_same(checkpoint: Path) -> None:
    loaded = load_checkpoint(str(checkpoint))
    assert loaded.config == CONFIG and loaded.metrics == METRICS


def test_file_is_a_header_with_size_and_digest_then_a_torch_archive(checkpoint: Path) -> None:
    header, body = split_file(checkpoint.read_bytes())
    digest = hashlib.sha256(body).hexdigest()
    assert header == f"recsys-checkpoint {CHECKPOINT_FORMAT} size={len(body)} sha256={digest}\n".encode()
    assert body.startswith(b"PK")  # torch.save's zip archive
    assert payload_of(checkpoint)["format"] == CHECKPOINT_FORMAT
    assert [p.name for p in checkpoint.parent.iterdir()] == [CHECKPOINT_FILE]  # no temporary file left


def test_empty_file_is_named_as_damaged(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    path.touch()
    assert refusal(path).endswith("damaged checkpoint (the file is empty)")


def test_truncated_file_is_named_as_truncated(checkpoint: Path) -> None:
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[: len(data) // 2])
    assert "damaged checkpoint (truncated: " in refusal(checkpoint)


def test_file_cut_inside_its_header_is_damaged(checkpoint: Path) -> None:
    checkpoint.write_bytes(checkpoint.read_bytes()[:40])
    assert "damaged checkpoint (its header line is cut short or garbled)" in refusal(checkpoint)


@pytest.mark.parametrize("seed", range(3))
def test_random_bytes_are_not_a_checkpoint(tmp_path: Path, seed: int) -> None:
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(np.random.default_rng(seed).bytes(2000))
    assert "not a recsys checkpoint" in refusal(path)


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: (
            data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0x01]) + data[len(data) // 2 + 1 :]
        ),
        lambda data: data[:-1] + bytes([data[-1] ^ 0x80]),
        lambda data: data + b"\0",
    ],
    ids=["bit-in-the-middle", "last-byte", "appended-byte"],
)
def test_changed_file_fails_its_checksum(checkpoint: Path, damage: Callable[[bytes], bytes]) -> None:
    checkpoint.write_bytes(damage(checkpoint.read_bytes()))
    assert refusal(checkpoint) == f"{checkpoint}: {CHECKSUM}"


def test_bit_flips_throughout_the_payload_are_all_caught(checkpoint: Path) -> None:
    """A flip at 50 places after the header: each the checksum message, never a later failure."""
    data = checkpoint.read_bytes()
    start = len(split_file(data)[0])
    for offset in range(start, len(data), max(1, (len(data) - start) // 50)):
        checkpoint.write_bytes(data[:offset] + bytes([data[offset] ^ 0x10]) + data[offset + 1 :])
        assert refusal(checkpoint) == f"{checkpoint}: {CHECKSUM}", offset


def test_payload_with_code_is_refused_without_running_it(tmp_path: Path, checkpoint: Path) -> None:
    marker = tmp_path / "pwned"
    # A crafted file: its checksum matches.
    write_checkpoint_payload(checkpoint, {**payload_of(checkpoint), "metrics": RunsCommand(marker)})
    message = refusal(checkpoint)
    assert "unsafe to load" in message and "posix.system" in message, message
    assert not marker.exists()


def test_a_bare_torch_archive_is_not_a_checkpoint(checkpoint: Path) -> None:
    """What recsys wrote before checkpoints had a header: refused in one line, not read unchecked."""
    torch.save(payload_of(checkpoint), checkpoint)
    assert (
        refusal(checkpoint)
        == f"{checkpoint}: not a recsys checkpoint, or one damaged at its start (no recsys header)"
    )


@pytest.mark.parametrize(
    ("payload_format", "found"),
    [(2, "2"), (None, "None")],
    ids=["other-format", "no-format"],
)
def test_the_payload_must_state_the_format(checkpoint: Path, payload_format: int | None, found: str) -> None:
    payload = payload_of(checkpoint)
    write_checkpoint_payload(checkpoint, {**payload, "format": payload_format})
    expected = f"{checkpoint}: checkpoint format {found}; this recsys reads format {CHECKPOINT_FORMAT}"
    assert refusal(checkpoint) == expected + ": train the run again"


def test_header_of_an_unknown_format_is_unsupported(checkpoint: Path) -> None:
    checkpoint.write_bytes(
        checkpoint.read_bytes().replace(
            f"recsys-checkpoint {CHECKPOINT_FORMAT} ".encode(), b"recsys-checkpoint 9 ", 1
        )
    )
    expected = f"{checkpoint}: checkpoint format 9; this recsys reads format {CHECKPOINT_FORMAT}"
    assert refusal(checkpoint) == expected + ": train the run again"


@pytest.mark.parametrize(
    "change",
    [
        {"config": {**CONFIG.to_dict(), "bogus": 1}},  # RunConfig's own error, now naming the file
        {"state_dict": {}},
        {"user_ids": "not a tensor"},
        {"metrics": "not json"},
        # What recommend.py and --resume read of them: each had been a traceback there.
        {"metrics": "[1]"},
        {"metrics": '{"epoch": "3"}'},
        {"training": "not a mapping"},
    ],
    ids=["config-key", "no-weights", "id-type", "metrics", "metrics-list", "epoch-text", "training-type"],
)
def test_inconsistent_payload_is_one_line_naming_the_file(checkpoint: Path, change: dict[str, Any]) -> None:
    write_checkpoint_payload(checkpoint, {**payload_of(checkpoint), **change})
    assert "damaged or incompatible checkpoint (" in refusal(checkpoint)


def test_missing_or_unreadable_checkpoint_is_an_error(
    tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert refusal(tmp_path / "nope.pt").endswith("checkpoint not found")
    assert "checkpoint not found" in refusal(tmp_path)  # a folder without one

    def unreadable(path: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", unreadable)
    with pytest.raises(RecsysError) as caught:
        load_checkpoint(checkpoint)
    assert str(caught.value) == f"cannot read {checkpoint}: Permission denied"


# --- payloads: every model, code, inconsistency -------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_checkpoint_round_trip(name: str, tmp_path: Path) -> None:
    users, items = IdMap(np.array([3, 17, 40, 99])), IdMap(np.array([5, 6, 700]))
    y_range = None if model_entry(name).ranks else (0.5, 5.0)  # a ranking score is no rating
    config = config_for(name, n_factors=6, y_range=y_range, dataset="tiny")
    model = model_for(config, len(users), len(items), torch.Generator().manual_seed(9))
    with torch.no_grad():  # make every parameter (zero-initialised biases too) distinctive
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)) * 0.3)
    metrics = {"test_rmse": 0.9, "history": [{"epoch": 1}]}
    path = tmp_path / "sub" / "checkpoint.pt"
    save_checkpoint(path, model, config, users, items, metrics)
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.pt"]  # no temporary file left
    loaded = load_checkpoint(path)
    assert type(loaded.model) is type(model)
    assert loaded.config == config
    assert np.array_equal(loaded.users.raw_ids, users.raw_ids)
    assert np.array_equal(loaded.items.raw_ids, items.raw_ids)
    assert loaded.metrics == metrics
    x = torch.tensor([[u, i] for u in range(4) for i in range(3)])
    assert torch.equal(predict(loaded.model, x), predict(model, x))


class Payload:
    """An arbitrary class: a checkpoint must never need it to load."""

    def __init__(self) -> None:
        self.value = 1


def valid_payload() -> dict[str, Any]:
    return {
        "format": CHECKPOINT_FORMAT,
        "config": config_for("dot", n_factors=2).to_dict(),
        "state_dict": {"user_factors.weight": torch.zeros(3, 2), "item_factors.weight": torch.zeros(4, 2)},
        "user_ids": torch.arange(3),
        "item_ids": torch.arange(4),
        "metrics": "{}",
    }


def test_checkpoint_with_an_arbitrary_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    write_checkpoint_payload(path, {**valid_payload(), "extra": Payload()})
    with pytest.raises(RecsysError, match="unsafe to load"):
        load_checkpoint(path)


@pytest.mark.parametrize("writer", ["torch", "pickle"])
def test_malicious_checkpoint_does_not_run_code(writer: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "checkpoint.pt"
    payload = {**valid_payload(), "metrics": RunsCommand(marker)}
    if writer == "torch":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(RecsysError):
        load_checkpoint(path)
    assert not marker.exists()
    # The file really is dangerous: an unsafe load runs the command.
    if writer == "torch":
        torch.load(path, weights_only=False)
    else:
        pickle.loads(path.read_bytes())
    assert marker.exists()


def test_missing_checkpoint_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RecsysError, match="not found"):
        load_checkpoint(tmp_path / "nope.pt")
    with pytest.raises(RecsysError, match="not found"):
        load_checkpoint(tmp_path)  # a folder is not a checkpoint


@pytest.mark.parametrize(
    "change",
    [
        {"format": CHECKPOINT_FORMAT - 1},
        {"state_dict": {"user_factors.weight": torch.zeros(3, 5), "item_factors.weight": torch.zeros(4, 5)}},
        {"user_ids": torch.arange(7)},
        {"config": {**config_for("dot", n_factors=2).to_dict(), "bogus": 1}},
        {"config": {**config_for("dot", n_factors=2).to_dict(), "model": "nope"}},
    ],
    ids=["format", "shape", "id-count", "config-key", "model"],
)
def test_inconsistent_checkpoint_is_an_error(change: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    write_checkpoint_payload(path, valid_payload())
    assert type(load_checkpoint(path).model).__name__ == "DotProduct"  # the base payload is valid
    write_checkpoint_payload(path, {**valid_payload(), **change})
    with pytest.raises(RecsysError):
        load_checkpoint(path)


def test_garbage_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(RecsysError, match="not a recsys checkpoint"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "payload",
    [{"format": CHECKPOINT_FORMAT}, {**valid_payload(), "metrics": "not json"}],
    ids=["missing-keys", "bad-metrics"],
)
def test_malformed_checkpoint_payload_is_a_recsys_error(payload: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save(payload, path)
    with pytest.raises(RecsysError):
        load_checkpoint(path)
