"""Files written whole or not at all (a crash leaves the previous file or the new one, never a torn one),
and read only where they are files."""

import errno
import json
import math
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from recsys.errors import RecsysError


def atomic_write(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
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


@contextmanager
def interruptions_held_back() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP received while the block runs take effect as it ends, each through
    the handler that was in place: for a few renames that only together leave a whole set of files
    (a report's), which one landing between two of them would leave half old, half new. Only the main
    thread receives signals in Python; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    # None: a handler set outside Python, which could not be put back; left alone
    kinds = [
        kind for kind in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if signal.getsignal(kind) is not None
    ]
    before = {kind: signal.signal(kind, lambda signum, frame: received.append(signum)) for kind in kinds}
    try:
        yield
    finally:
        for kind, handler in before.items():
            signal.signal(kind, handler)
        for signum in dict.fromkeys(received):  # each once, in the order received
            signal.raise_signal(signum)


def read_file(path: Path) -> bytes:
    """The bytes of the regular file `path`. Anything else in its place is an OSError, as a missing
    file is: a link to /dev/zero or /dev/full reads zeros until memory runs out, a named pipe waits
    for a writer (opened here without waiting, and refused)."""
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(handle, "rb") as file:
        mode = os.fstat(handle).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return file.read()


def write_text(path: Path, text: str) -> None:
    """Atomically write `text` as UTF-8."""
    atomic_write(path, lambda file: file.write(text.encode()))


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically write `data` as indented, strict JSON: a number that is not finite (a metric with
    nothing to judge) is null, which every JSON reader takes (`NaN` is Python's own extension)."""
    write_text(path, json.dumps(_finite_or_null(data), indent=2, allow_nan=False) + "\n")


def _finite_or_null(value: Any) -> Any:
    """`value` with every float that is NaN or infinite, however deep in dicts and lists, as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_null(item) for item in value]
    return value
