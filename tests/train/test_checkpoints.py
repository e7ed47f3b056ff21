"""Run folders and checkpoints: damage is named as damage, and one run at a time owns a folder."""

import hashlib
import io
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from recsys.config import config_for
from recsys.data.encoding import IdMap
from recsys.errors import RecsysError
from recsys.models.core import build_model
from recsys.names import CHECKPOINT_FILE
from recsys.train.checkpoints import (
    CHECKPOINT_FORMAT,
    LEGACY_FORMAT,
    load_checkpoint,
    save_checkpoint,
    write_checkpoint_payload,
)
from recsys.workflows.run_folder import LOCK_FILE, claim_run_folder

ROOT = Path(__file__).resolve().parent.parent
USERS, ITEMS = IdMap(np.array([3, 17, 40, 99])), IdMap(np.array([5, 6, 700]))
CONFIG = config_for("dotbias", n_factors=4, y_range=(0.5, 5.0), dataset="tiny")
METRICS = {"test_rmse": 0.9, "history": [{"epoch": 1, "ratings": 12}]}
TRAINING = {"epoch": 1, "optimizer": {"step": torch.tensor(7.0)}, "rng": torch.arange(5)}
CHECKSUM = "damaged checkpoint (checksum mismatch): it was changed or corrupted after it was written"


@pytest.fixture
def model() -> nn.Module:
    """A small dotbias model whose every parameter, the zero-initialised biases too, is non-trivial."""
    model = build_model(
        "dotbias", len(USERS), len(ITEMS), 4, CONFIG.y_range, torch.Generator().manual_seed(9)
    )
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
    assert loaded.training is not None and loaded.training["epoch"] == TRAINING["epoch"]
    assert torch.equal(loaded.training["rng"], TRAINING["rng"])


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


@pytest.mark.parametrize("container", ["checksummed", "legacy"])
def test_payload_with_code_is_refused_without_running_it(
    tmp_path: Path, checkpoint: Path, container: str
) -> None:
    marker = tmp_path / "pwned"
    payload = {**payload_of(checkpoint), "metrics": RunsCommand(marker)}
    if container == "checksummed":  # a crafted file: its checksum matches
        write_checkpoint_payload(checkpoint, payload)
    else:
        torch.save({**payload, "format": LEGACY_FORMAT}, checkpoint)
    message = refusal(checkpoint)
    assert "unsafe to load" in message and "posix.system" in message, message
    assert not marker.exists()


def test_legacy_format_2_file_still_loads(checkpoint: Path, model: nn.Module) -> None:
    """Format 2 wrote the same payload as a bare torch.save archive, with no checksum."""
    torch.save({**payload_of(checkpoint), "format": LEGACY_FORMAT}, checkpoint)
    assert checkpoint.read_bytes().startswith(b"PK")
    loaded = load_checkpoint(checkpoint)
    assert loaded.config == CONFIG and loaded.metrics == METRICS
    assert all(
        torch.equal(tensor, loaded.model.state_dict()[name]) for name, tensor in model.state_dict().items()
    )


def test_truncated_legacy_file_is_named_as_damaged(checkpoint: Path) -> None:
    torch.save({**payload_of(checkpoint), "format": LEGACY_FORMAT}, checkpoint)
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[: len(data) // 2])
    assert "damaged or truncated checkpoint (torch cannot read it: " in refusal(checkpoint)


@pytest.mark.parametrize(
    ("write", "found"),
    [
        (lambda path, payload: torch.save({**payload, "format": 1}, path), "1 in a format-2 file"),
        (lambda path, payload: torch.save(payload, path), "3 in a format-2 file"),
        (
            lambda path, payload: write_checkpoint_payload(path, {**payload, "format": 2}),
            "2 in a format-3 file",
        ),
        (lambda path, payload: write_checkpoint_payload(path, [payload]), "None in a format-3 file"),
    ],
    ids=["older", "format-3-without-header", "format-2-with-header", "not-a-dict"],
)
def test_payload_format_must_match_its_container(
    checkpoint: Path, write: Callable[[Path, dict[str, Any]], None], found: str
) -> None:
    write(checkpoint, payload_of(checkpoint))
    assert f"unsupported checkpoint format {found}" in refusal(checkpoint)


def test_header_of_an_unknown_format_is_unsupported(checkpoint: Path) -> None:
    checkpoint.write_bytes(
        checkpoint.read_bytes().replace(b"recsys-checkpoint 3 ", b"recsys-checkpoint 9 ", 1)
    )
    assert refusal(checkpoint).endswith("unsupported checkpoint format 9 (this recsys reads formats 2 and 3)")


@pytest.mark.parametrize(
    "change",
    [
        {"config": {**CONFIG.to_dict(), "bogus": 1}},  # RunConfig's own error, now naming the file
        {"state_dict": {}},
        {"user_ids": "not a tensor"},
        {"metrics": "not json"},
    ],
    ids=["config-key", "no-weights", "id-type", "metrics"],
)
def test_inconsistent_payload_is_one_line_naming_the_file(checkpoint: Path, change: dict[str, Any]) -> None:
    write_checkpoint_payload(checkpoint, {**payload_of(checkpoint), **change})
    assert "damaged or incompatible checkpoint (" in refusal(checkpoint)


def test_missing_or_unreadable_checkpoint_is_an_error(
    tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert refusal(tmp_path / "nope.pt").endswith("checkpoint not found")
    assert refusal(tmp_path).endswith("checkpoint not found")  # a folder is not a checkpoint

    def unreadable(path: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", unreadable)
    with pytest.raises(RecsysError) as caught:
        load_checkpoint(checkpoint)
    assert str(caught.value) == f"cannot read {checkpoint}: Permission denied"


# --- claiming a run folder ---------------------------------------------------------------------


def claim_error(path: Path, *, resume: bool) -> str:
    """The error claiming `path` raises; the block must not run."""
    with pytest.raises(RecsysError) as caught, claim_run_folder(path, resume=resume):
        pytest.fail(f"claimed {path}")
    return str(caught.value)


def test_fresh_claim_makes_the_folder_and_holds_it(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "new"
    with claim_run_folder(out, resume=False) as claimed:
        assert claimed == out and out.is_dir()
        assert [p.name for p in out.iterdir()] == [LOCK_FILE]
        for resume, flag in ((False, "--out"), (True, "--resume")):
            assert claim_error(out, resume=resume) == f"{flag} {out} is in use by another recsys run"
        (out / "config.json").write_text("{}")
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE, "config.json"]


def test_lock_is_released_when_the_block_ends(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with claim_run_folder(out, resume=False):
        (out / CHECKPOINT_FILE).write_bytes(b"")
    with claim_run_folder(out, resume=True):  # the next run may take it at once
        pass
    with pytest.raises(KeyError), claim_run_folder(out, resume=True):
        raise KeyError
    with claim_run_folder(out, resume=True):  # an error inside releases it too
        pass


def test_fresh_claim_takes_an_empty_folder(tmp_path: Path) -> None:
    with claim_run_folder(tmp_path, resume=False):
        assert [p.name for p in tmp_path.iterdir()] == [LOCK_FILE]


def test_fresh_claim_refuses_a_folder_with_files_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert claim_error(tmp_path, resume=False) == (
        f"--out {tmp_path} already exists and is not an empty folder; choose a new one"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_claim_refuses_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    for resume, flag in ((False, "--out"), (True, "--resume")):
        assert claim_error(path, resume=resume) == f"{flag} {path} is not a folder"


def test_resume_claim_needs_a_checkpoint_and_makes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert claim_error(missing, resume=True) == f"--resume {missing} is not a folder"
    assert not missing.exists()
    assert (
        claim_error(tmp_path, resume=True) == f"--resume {tmp_path} has no {CHECKPOINT_FILE} to resume from"
    )
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"")
    with claim_run_folder(tmp_path, resume=True) as claimed:
        assert claimed == tmp_path


def test_failed_fresh_start_in_a_new_folder_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "new"
    with pytest.raises(RecsysError, match="no data"), claim_run_folder(out, resume=False):
        raise RecsysError("no data")
    assert not out.exists()


def test_failed_fresh_start_in_an_empty_folder_leaves_it_empty(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), claim_run_folder(tmp_path, resume=False):
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_failed_run_keeps_the_files_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "new"
    with pytest.raises(RuntimeError), claim_run_folder(out, resume=False):
        (out / "config.json").write_text("{}")
        raise RuntimeError
    assert [p.name for p in out.iterdir()] == ["config.json"]


def test_failed_resume_leaves_the_folder_as_it_was(tmp_path: Path) -> None:
    with claim_run_folder(tmp_path, resume=False):
        (tmp_path / CHECKPOINT_FILE).write_bytes(b"")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(RuntimeError), claim_run_folder(tmp_path, resume=True):
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# Claims `out` once `go` exists, holds it for a second, then writes a file named after itself.
CLAIMER = """
import pathlib, sys, time
from recsys.errors import RecsysError
from recsys.workflows.run_folder import claim_run_folder
out, go, name = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
(go.parent / f"ready-{name}").touch()
while not go.exists():
    time.sleep(0.001)
try:
    with claim_run_folder(out, resume=False):
        time.sleep(1)
        (out / name).write_text(name)
except RecsysError as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
"""


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_two_processes_claiming_one_folder_at_once(tmp_path: Path, round_: int) -> None:
    """Released together (each waits for a shared signal after its imports): exactly one wins."""
    out, go, names = tmp_path / "out", tmp_path / "go", ("first", "second")
    processes = {
        name: subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(out), str(go), name],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    }
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{name}").exists() for name in names):
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes.values())
        time.sleep(0.01)
    go.touch()
    errors = {name: process.communicate(timeout=120)[1] for name, process in processes.items()}
    results = {name: (process.returncode, errors[name]) for name, process in processes.items()}
    winners = [name for name, (code, _) in results.items() if code == 0]
    assert len(winners) == 1, results
    loser_code, loser_error = next(result for name, result in results.items() if name not in winners)
    assert loser_code == 2 and loser_error.strip() == f"error: --out {out} is in use by another recsys run"
    assert sorted(p.name for p in out.iterdir()) == sorted([LOCK_FILE, winners[0]])
