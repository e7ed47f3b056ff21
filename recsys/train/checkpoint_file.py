"""A checkpoint file's framing, read and written without torch: a header line naming the payload's
size and SHA-256, then the payload's bytes (what `torch.save` wrote; recsys.train.checkpoints reads
them). A command can so tell a damaged checkpoint before it loads torch.
"""

import hashlib
import re
from pathlib import Path

from recsys.errors import RecsysError

# A header line with the payload's size and SHA-256 precedes torch.save's bytes. The format counts up
# when a model's saved state changes (4: svdpp's bags, the feature models' coding digests; 5: bfm's
# time group; 6: its bins, a user-day each; 8: the feature models' codings themselves, not a digest).
CHECKPOINT_FORMAT = 8
HEADER = re.compile(rb"recsys-checkpoint (\d+) size=(\d+) sha256=([0-9a-f]{64})\n")
HEADER_START = b"recsys-checkpoint "


def header_line(body: bytes | memoryview) -> bytes:
    """The header that goes before `body`."""
    digest = hashlib.sha256(body).hexdigest()
    return f"recsys-checkpoint {CHECKPOINT_FORMAT} size={len(body)} sha256={digest}\n".encode()


def checkpoint_body(path: Path) -> bytes:
    """The payload bytes of the checkpoint at `path`, checked against its header; a missing, empty,
    cut or changed file, or one of another format, is one RecsysError line naming it."""
    if not path.is_file():
        raise RecsysError(f"{path}: checkpoint not found")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RecsysError(f"cannot read {path}: {error.strerror or error}") from None
    if not data:
        raise RecsysError(f"{path}: damaged checkpoint (the file is empty)")
    if not data.startswith(HEADER_START):
        raise RecsysError(f"{path}: not a recsys checkpoint, or one damaged at its start (no recsys header)")
    return _verified_body(path, data)


def _verified_body(path: Path, data: bytes) -> bytes:
    """The payload bytes after the header line, once their size and SHA-256 match the header's."""
    match = HEADER.match(data)
    if match is None:
        raise RecsysError(f"{path}: damaged checkpoint (its header line is cut short or garbled)")
    version, size, digest = int(match[1]), int(match[2]), match[3].decode()
    if version != CHECKPOINT_FORMAT:
        raise RecsysError(
            f"{path}: checkpoint format {version}; this recsys reads format {CHECKPOINT_FORMAT}: train "
            "the run again"
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
