"""Fetch dataset archives and unpack them without trusting the network or the archive.

`download` streams a url to a temporary file, checks it against a pinned size and digest and only
then moves it atomically onto its destination, so a failed or tampered download is never cached.
`extract_zip` unpacks an archive into a folder that appears only once everything is written, and
refuses members that would escape that folder.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import stat
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import IO

from tqdm import tqdm

from recsys.errors import DataError, DownloadError

__all__ = ["download", "extract_zip"]

_CHUNK = 1 << 16
# A download that brings fewer than STALL_BYTES in STALL_SECONDS has stalled: a server that drips a
# byte at a time, each within the socket's timeout, would otherwise hold the command for ever.
STALL_SECONDS = 60.0
STALL_BYTES = 1 << 16


def download(
    url: str,
    dest: Path,
    *,
    size: int | None,
    sha256: str | None = None,
    md5: str | None = None,
    allow_http: bool = False,
    timeout: float = 60.0,
    progress: bool = True,
    max_size: int | None = None,
    stall_seconds: float = STALL_SECONDS,
) -> Path:
    """Save url at dest only if it matches its pinned size and digests, so bad bytes never land.
    Without a pinned `size`, `max_size` bounds what is written before the digest can be checked.
    `timeout` bounds each wait for data, `stall_seconds` each span that must bring STALL_BYTES."""
    if sha256 is None and md5 is None:
        raise ValueError("download() needs a pinned sha256 or md5 to verify what it fetched")
    _check_scheme(url, allow_http)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below, kept past close on purpose
        dir=dest.parent, prefix=f".{dest.name}.", suffix=".part", delete=False
    )
    tmp_path = Path(tmp.name)
    try:
        with tmp:
            digests = _stream(
                url,
                tmp,
                size=size,
                timeout=timeout,
                progress=progress,
                allow_http=allow_http,
                max_size=max_size,
                stall_seconds=stall_seconds,
            )
            tmp.flush()
            os.fsync(tmp.fileno())
        _verify(url, digests, sha256=sha256, md5=md5)
        os.replace(tmp_path, dest)
    except BaseException as exc:
        tmp_path.unlink(missing_ok=True)
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()  # it holds the error response's socket open
        if isinstance(exc, (OSError, http.client.HTTPException)):
            raise DownloadError(_describe(url, exc, timeout)) from exc
        raise
    return dest


def _check_scheme(url: str, allow_http: bool) -> None:
    """Refuse anything but https (and http when asked), since plain http can be tampered with."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme == "https" or (scheme == "http" and allow_http):
        return
    if scheme == "http":
        raise DownloadError(f"refusing to download {url} over plain http; use https or pass allow_http=True")
    raise DownloadError(f"cannot download {url}: only https urls are supported")


class _SchemeCheckingRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to a url the first one would have been allowed to be: https (or http
    where allowed), never from https down to plain http."""

    def __init__(self, allow_http: bool) -> None:
        self.allow_http = allow_http

    def redirect_request(  # type: ignore[override]
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: object, newurl: str
    ) -> urllib.request.Request | None:
        _check_scheme(newurl, self.allow_http)
        if (
            urllib.parse.urlsplit(req.full_url).scheme == "https"
            and urllib.parse.urlsplit(newurl).scheme != "https"
        ):
            raise DownloadError(f"refusing to follow {req.full_url}'s redirect from https to {newurl}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)  # type: ignore[arg-type]


def _stream(
    url: str,
    out: IO[bytes],
    *,
    size: int | None,
    timeout: float,
    progress: bool,
    allow_http: bool,
    max_size: int | None,
    stall_seconds: float,
) -> dict[str, str]:
    """Copy the response body into out while hashing it, so the file is read only once."""
    hashers = {"sha256": hashlib.sha256(), "md5": hashlib.md5(usedforsecurity=False)}
    received = 0
    request = urllib.request.Request(url, headers={"User-Agent": "recsys-download"})
    opener = urllib.request.build_opener(_SchemeCheckingRedirects(allow_http))
    with opener.open(request, timeout=timeout) as response:
        # The span starts with the body: connecting, redirects and headers each have the timeout.
        span_start, span_bytes = time.monotonic(), 0
        length = response.headers.get("Content-Length")
        total = size if size is not None else (int(length) if length and length.isdigit() else None)
        with tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=Path(urllib.parse.urlsplit(url).path).name or url,
            disable=not progress,
            leave=False,
        ) as bar:
            # read1: what one receive brings, so that a dripping server is seen between its drops.
            while chunk := response.read1(_CHUNK):
                received += len(chunk)
                span_bytes += len(chunk)
                if time.monotonic() - span_start >= stall_seconds:
                    if span_bytes < STALL_BYTES:
                        raise DownloadError(
                            f"download of {url} stalled: {span_bytes:,} bytes in the last {stall_seconds:g} s"
                        )
                    span_start, span_bytes = time.monotonic(), 0
                if size is not None and received > size:
                    raise DownloadError(
                        f"download of {url} is larger than expected: expected {size} bytes, "
                        f"got more than {size}"
                    )
                if max_size is not None and received > max_size:
                    raise DownloadError(f"download of {url} is larger than expected: over {max_size} bytes")
                for hasher in hashers.values():
                    hasher.update(chunk)
                out.write(chunk)
                bar.update(len(chunk))
    if size is not None and received != size:
        raise DownloadError(f"download of {url} has the wrong size: expected {size} bytes, got {received}")
    return {name: hasher.hexdigest() for name, hasher in hashers.items()}


def _verify(url: str, digests: dict[str, str], *, sha256: str | None, md5: str | None) -> None:
    """Compare every pinned digest, so a corrupted or substituted file is rejected."""
    for name, expected in (("sha256", sha256), ("md5", md5)):
        if expected is None:
            continue
        if digests[name] != expected.strip().lower():
            raise DownloadError(
                f"download of {url} has the wrong {name}: expected {expected}, got {digests[name]}"
            )


def _describe(url: str, exc: BaseException, timeout: float) -> str:
    """Turn a network exception into one line a user can act on."""
    if isinstance(exc, urllib.error.HTTPError):  # a reason can run over lines (a redirect loop's does)
        first_line = (str(exc.reason).splitlines() or [""])[0]
        return f"download of {url} failed: HTTP {exc.code} {first_line}"
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return f"download of {url} timed out after {timeout:g} s without data"
    if isinstance(exc, urllib.error.URLError):
        return f"cannot reach {url}: {reason}"
    return f"download of {url} failed: {exc}"


def extract_zip(archive: Path, target: Path) -> Path:
    """Unpack archive into a new folder that appears only when whole; refuse escaping members."""
    archive, target = Path(archive), Path(target)
    if os.path.lexists(target):
        raise DataError(f"cannot extract {archive}: {target} already exists")
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"{archive} is not a readable zip archive: {exc}") from exc
    with zf:
        target.parent.mkdir(parents=True, exist_ok=True)
        root = target.parent.resolve() / target.name
        for info in zf.infolist():
            _check_member(archive, info, root)
        _check_room(archive, zf, target.parent)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part"))
        try:
            # A plain mkdir inside the private mkdtemp folder gets the usual umask permissions.
            content = staging / "content"
            content.mkdir()
            zf.extractall(content)
            os.rename(content, target)
        except (zipfile.BadZipFile, EOFError, NotImplementedError, RuntimeError, OSError, zlib.error) as exc:
            # zlib.error: a damaged deflate stream (a zip's own CRC check comes only after it).
            raise DataError(f"cannot extract {archive} into {target}: {exc}") from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _check_room(archive: Path, zf: zipfile.ZipFile, folder: Path) -> None:
    """Refuse an archive whose members would not fit on the disk: zipfile writes no more of a member
    than its declared size, so a zip bomb is refused before a byte of it is written."""
    needed = sum(info.file_size for info in zf.infolist())
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise DataError(
            f"refusing to extract {archive}: it unpacks to {needed / 2**20:,.1f} MiB and {folder} has "
            f"{free / 2**20:,.1f} MiB free"
        )


def _check_member(archive: Path, info: zipfile.ZipInfo, root: Path) -> None:
    """Refuse a member that is a link or could be written outside the extraction folder."""
    name = info.filename
    if not name:
        raise DataError(f"refusing to extract {archive}: it has a member with an empty name")
    if PurePosixPath(name).is_absolute() or PureWindowsPath(name).anchor:
        raise DataError(f"refusing to extract {archive}: member {name!r} has an absolute path or a drive")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise DataError(f"refusing to extract {archive}: member {name!r} is a symbolic link")
    if not (root / name).resolve().is_relative_to(root.resolve()):
        raise DataError(f"refusing to extract {archive}: member {name!r} would land outside {root.name}/")
