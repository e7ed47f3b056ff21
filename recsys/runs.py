"""Run folders and checkpoints: config, id maps, metrics and weights, written atomically.

A checkpoint is a header line naming its payload's size and SHA-256, then the payload as
`torch.save` writes it. The payload holds only tensors and plain data and is read with
`torch.load(weights_only=True)`, so a tampered file cannot run code; the checksum names a damaged
file as damaged; the payload rebuilds its model with no outside knowledge.

A run folder belongs to one run at a time: `claim_run_folder` holds a lock file inside it.
"""

import fcntl
import hashlib
import io
import json
import os
import pickle
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from recsys.config import RunConfig
from recsys.encoding import IdMap
from recsys.errors import RecsysError
from recsys.models import build_model
from recsys.names import CHECKPOINT_FILE

# 3: a header line with the payload's size and SHA-256 precedes torch.save's bytes.
# 2: a bare torch.save archive; still read (unchecked), so that existing run folders keep working.
#    Each epoch of its training history records `ratings`, which resuming needs.
CHECKPOINT_FORMAT = 3
LEGACY_FORMAT = 2
HEADER = re.compile(rb"recsys-checkpoint (\d+) size=(\d+) sha256=([0-9a-f]{64})\n")
HEADER_START, ARCHIVE_START = b"recsys-checkpoint ", b"PK"  # the latter: torch.save's zip archive
LOCK_FILE = ".recsys-run.lock"  # internal: held by the run that owns the folder
REASON_LENGTH = 160  # characters of an underlying error quoted in a one-line message


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
    write_checkpoint_payload(path, payload)


def write_checkpoint_payload(path: Path, payload: dict[str, Any]) -> None:
    """Atomically write `payload` behind a header with its size and SHA-256, so damage is caught."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    body = buffer.getbuffer()
    digest = hashlib.sha256(body).hexdigest()
    header = f"recsys-checkpoint {CHECKPOINT_FORMAT} size={len(body)} sha256={digest}\n".encode()
    _atomic_write(path, lambda file: file.writelines((header, body)))


def load_checkpoint(path: Path) -> Checkpoint:
    """Rebuild the model of a checkpoint; refuse a damaged file and anything that is not plain data.

    Every failure is one RecsysError line naming `path`.
    """
    payload = _read_payload(path)
    try:
        config = RunConfig.from_dict(payload["config"])
        users, items = IdMap(payload["user_ids"].numpy()), IdMap(payload["item_ids"].numpy())
        metrics = json.loads(payload["metrics"])
        model = build_model(config.model, len(users), len(items), config.n_factors, config.y_range)
        model.load_state_dict(payload["state_dict"])
    except Exception as error:  # a safe payload of the wrong shape can fail in many ways; all say so
        raise RecsysError(f"{path}: damaged or incompatible checkpoint ({_reason(error)})") from None
    return Checkpoint(model, config, users, items, metrics, payload.get("training"))


def _read_payload(path: Path) -> dict[str, Any]:
    """The payload of a format-3 file after its checksum is verified, or of a format-2 archive."""
    if not path.is_file():
        raise RecsysError(f"{path}: checkpoint not found")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RecsysError(f"cannot read {path}: {error.strerror or error}") from None
    if not data:
        raise RecsysError(f"{path}: damaged checkpoint (the file is empty)")
    if data.startswith(HEADER_START):
        body, expected = _verified_body(path, data), CHECKPOINT_FORMAT
    elif data.startswith(ARCHIVE_START):
        body, expected = data, LEGACY_FORMAT
    else:
        raise RecsysError(
            f"{path}: not a recsys checkpoint, or one damaged at its start (it begins with neither "
            "the recsys header nor a torch archive)"
        )
    payload = _unpickle(path, body)
    found = payload.get("format") if isinstance(payload, dict) else None
    if found != expected:
        raise RecsysError(
            f"{path}: unsupported checkpoint format {found!r} in a format-{expected} file "
            f"(this recsys reads formats {LEGACY_FORMAT} and {CHECKPOINT_FORMAT})"
        )
    return payload


def _verified_body(path: Path, data: bytes) -> bytes:
    """The payload bytes after the header line, once their size and SHA-256 match the header's."""
    match = HEADER.match(data)
    if match is None:
        raise RecsysError(f"{path}: damaged checkpoint (its header line is cut short or garbled)")
    version, size, digest = int(match[1]), int(match[2]), match[3].decode()
    if version != CHECKPOINT_FORMAT:
        raise RecsysError(
            f"{path}: unsupported checkpoint format {version} "
            f"(this recsys reads formats {LEGACY_FORMAT} and {CHECKPOINT_FORMAT})"
        )
    body = data[match.end() :]
    if len(body) < size:
        raise RecsysError(
            f"{path}: damaged checkpoint (truncated: {len(body):,} of {size:,} bytes): it was cut "
            "short after it was written, e.g. by an interrupted copy or a full disk"
        )
    if len(body) > size or hashlib.sha256(body).hexdigest() != digest:
        raise RecsysError(
            f"{path}: damaged checkpoint (checksum mismatch): it was changed or corrupted after it "
            "was written"
        )
    return body


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
            f"{path}: damaged or truncated checkpoint (torch cannot read it: {_reason(error)})"
        ) from None


def _reason(error: Exception) -> str:
    """An underlying error's first sentence as one short line, for a RecsysError to quote."""
    text = " ".join(str(error).split()).split(". ")[0] or type(error).__name__
    return text if len(text) <= REASON_LENGTH else text[: REASON_LENGTH - 3] + "..."


@contextmanager
def claim_run_folder(path: Path, *, resume: bool) -> Iterator[Path]:
    """Hold `path` for one run, so that two runs never mix their files in one folder.

    A fresh run (`resume` False) needs a new or empty folder, made here; a resumed one needs its
    checkpoint. A second claim while this one is held is an error. A fresh run that fails inside
    the block takes back the lock file and folder it made, so a failed start leaves nothing behind.
    """
    flag = "--resume" if resume else "--out"
    made_folder = not resume and _make_folder(path, flag)
    if not path.is_dir():
        raise RecsysError(f"{flag} {path} is not a folder")
    lock = path / LOCK_FILE
    made_lock = not lock.exists()
    with _locked(lock, f"{flag} {path}"):
        try:
            _check_contents(path, flag, resume)
            yield path
        except BaseException:
            if not resume:
                _take_back(path, made_folder=made_folder, made_lock=made_lock)
            raise


def _make_folder(path: Path, flag: str) -> bool:
    """Create `path` with its parents; whether this call made it (one of two racing runs does)."""
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        return False
    except OSError as error:
        raise RecsysError(f"{flag} {path}: cannot create it: {error.strerror or error}") from None
    return True


@contextmanager
def _locked(lock: Path, what: str) -> Iterator[None]:
    """Hold an exclusive flock on `lock` (created if need be); the OS releases it if the run dies."""
    try:
        handle = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise RecsysError(f"{what}: cannot create {lock.name}: {error.strerror or error}") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RecsysError(f"{what} is in use by another recsys run") from None
        if not _same_file(handle, lock):  # a failed start took this lock file back as we opened it
            raise RecsysError(f"{what} is in use by another recsys run")
        yield
    finally:
        os.close(handle)  # releases the lock


def _same_file(handle: int, path: Path) -> bool:
    """Whether `path` still names the open file `handle`."""
    try:
        return os.path.samestat(os.fstat(handle), os.stat(path))
    except FileNotFoundError:
        return False


def _check_contents(path: Path, flag: str, resume: bool) -> None:
    """A fresh run needs a folder holding nothing but the lock; a resumed one needs a checkpoint."""
    if resume:
        if not (path / CHECKPOINT_FILE).is_file():
            raise RecsysError(f"{flag} {path} has no {CHECKPOINT_FILE} to resume from")
    elif any(entry.name != LOCK_FILE for entry in path.iterdir()):
        raise RecsysError(f"{flag} {path} already exists and is not an empty folder; choose a new one")


def _take_back(path: Path, *, made_folder: bool, made_lock: bool) -> None:
    """Remove the lock file and folder this claim made; a folder the run wrote into stays."""
    if made_lock:
        (path / LOCK_FILE).unlink(missing_ok=True)
    if made_folder:
        with suppress(OSError):  # not empty: the run wrote files, or another run locked it since
            path.rmdir()
