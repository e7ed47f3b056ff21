"""Where a copy of a MovieLens variant is found, or fetched and unpacked: the cache.

Lookup order for a variant: an explicit folder or zip (`data_dir`; a zip is unpacked into the
cache under archives/<start of its sha256>/), the data root named by $RECSYS_DATA, the user cache
($RECSYS_CACHE, else $XDG_CACHE_HOME/recsys, else ~/.cache/recsys); otherwise a verified download
from GroupLens into the cache. What is read from the folder found is recsys.data.movielens' part.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from recsys.data.download import download, extract_zip
from recsys.errors import DataError, DataUnavailable, DownloadError

if TYPE_CHECKING:  # movielens reads what this finds, and imports it: the variant is only a type here
    from recsys.data.movielens import Variant

GROUPLENS_URL = "https://files.grouplens.org/datasets/movielens"
DATA_ROOT_ENV = "RECSYS_DATA"
CACHE_ENV = "RECSYS_CACHE"
OFFLINE_HINT = f"to train without a download, pass `data_dir` or set ${DATA_ROOT_ENV} to a local copy"


def cache_root() -> Path:
    """The user cache folder for downloaded datasets (not created here)."""
    if os.environ.get(CACHE_ENV):  # `~` as the home folder: a quoted or non-shell setting keeps it
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "recsys"


def local_copy(
    variant: Variant,
    data_dir: Path | None = None,
    *,
    allow_download: bool = True,
    base_url: str = GROUPLENS_URL,
    allow_http: bool = False,
    progress: bool = True,
) -> Path:
    """The unpacked folder of `variant`: found locally, or downloaded, verified and cached once."""
    folder = _find_local(variant, data_dir)
    if folder is not None:
        return folder
    name = variant.name
    if not allow_download:
        raise DataUnavailable(f"{name} is not available locally; {OFFLINE_HINT}")
    root = cache_root()
    # A folder of its own: two processes fetching at once must not unpack or delete each other's zip.
    inbox = _private_folder(root, f".{name}.", ".download")
    try:
        try:
            archive = download(
                f"{base_url}/{name}.zip",
                inbox / f"{name}.zip",
                size=variant.size,
                sha256=variant.sha256,
                md5=variant.md5,
                max_size=variant.max_size,
                allow_http=allow_http,
                progress=progress,
            )
        except DownloadError as error:
            raise DownloadError(f"{error}; {OFFLINE_HINT}") from error
        return _unpack(archive, variant, root)
    finally:  # the zip is not kept: its unpacked folder is the cache
        shutil.rmtree(inbox, ignore_errors=True)


# What recsys unpacked into a folder: each file's size, checked whenever the copy is used again, so a
# copy cut short or edited since (a disk error, an interrupted copy) is named instead of read.
MANIFEST = ".recsys-files.json"


def _write_manifest(folder: Path) -> None:
    sizes = {
        str(path.relative_to(folder)): path.stat().st_size
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
    (folder / MANIFEST).write_text(json.dumps(sizes, indent=0))


def _check_manifest(folder: Path) -> Path:
    """`folder`, once every file its manifest lists has its size (a folder without one, unpacked by
    hand or by an older recsys, is taken as it is)."""
    try:
        sizes = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return folder
    except (OSError, ValueError):
        sizes = None
    if not isinstance(sizes, dict) or not all(
        isinstance(name, str) and isinstance(size, int) for name, size in sizes.items()
    ):
        raise DataError(
            f"{folder}: its {MANIFEST} is damaged; delete the folder to unpack or download it again"
        )
    for name, size in sizes.items():
        path = folder / name
        found = path.stat().st_size if path.is_file() else None
        if found != size:
            state = "is missing" if found is None else f"has {found:,} bytes, not the {size:,} unpacked"
            raise DataError(
                f"{path} {state}: the copy in {folder} is damaged; delete that folder to unpack or download "
                "it again"
            )
    return folder


def _find_local(variant: Variant, data_dir: Path | None) -> Path | None:
    """The unpacked folder of `variant` from `data_dir`, $RECSYS_DATA or the cache, if present."""
    ratings_file = variant.ratings_file
    if data_dir is not None:
        if data_dir.is_file() and zipfile.is_zipfile(data_dir):
            return _unpack_given_archive(data_dir, variant)
        if data_dir.is_file():
            raise DataError(
                f"`data_dir` {data_dir}: a file, but no readable zip (cut short, or not a zip at all); "
                f"expected an unpacked {variant.name} folder, its parent, or {variant.name}.zip"
            )
        for candidate in (data_dir, data_dir / variant.folder):
            if (candidate / ratings_file).is_file():
                return _check_manifest(candidate)
        raise DataError(
            f"`data_dir` {data_dir}: no {ratings_file} there or in {variant.folder}/ "
            f"(expected an unpacked {variant.name} folder, its parent, or {variant.name}.zip)"
        )
    for root in _data_roots():
        if (root / variant.folder / ratings_file).is_file():
            return _check_manifest(root / variant.folder)
        if os.path.lexists(root / variant.folder):  # a damaged copy is named, never passed over
            raise DataError(
                f"{_not_a_copy(root / variant.folder, ratings_file, f' (in ${DATA_ROOT_ENV})')}; restore it, "
                f"or unset ${DATA_ROOT_ENV}"
            )
    # The cache is recsys' own: whatever is in the copy's place is checked before any download.
    return _cached_copy(cache_root() / variant.folder, ratings_file)


def _cached_copy(folder: Path, marker: str) -> Path | None:
    """`folder` if it holds a whole copy (`marker` there, its sizes as unpacked), None if nothing is
    there; anything else in its place is an error naming it, so it is neither fetched again on every
    run nor replaced."""
    # Whether anything is there first: a copy is renamed into place whole, so once the folder is seen
    # its files are there too (looked at the other way round, another process's copy moved in between
    # the two looks would be refused).
    if not os.path.lexists(folder):
        return None
    if (folder / marker).is_file() or (folder / MANIFEST).is_file():
        return _check_manifest(folder)  # a copy recsys made that lost `marker` is named by it
    raise _not_ours(folder, marker)


def _not_ours(folder: Path, marker: str) -> DataError:
    """The error for a file or folder without `marker` where recsys would put a copy: copies are
    renamed into place whole, so it is not one recsys made, and is kept."""
    return DataError(
        f"{_not_a_copy(folder, marker)}, and recsys replaces nothing it cannot tell is its own; move it "
        f"away to unpack the dataset there, or set ${CACHE_ENV} to another folder"
    )


def _not_a_copy(folder: Path, marker: str, where: str = "") -> str:
    """What is at `folder` (`where`: which setting put it there), where a copy holding `marker` should be."""
    what = "a folder without its" if folder.is_dir() else "not a folder holding"
    return f"{folder}{where} is {what} {marker}, not a whole copy"


def _data_roots() -> list[Path]:
    """The folder $RECSYS_DATA names, if set; a warning when it is not a folder from here (a relative
    path is read from the working folder, which in a notebook is the notebook's own)."""
    if not os.environ.get(DATA_ROOT_ENV):
        return []
    root = Path(os.environ[DATA_ROOT_ENV]).expanduser()
    if not root.is_dir():
        warnings.warn(
            f"${DATA_ROOT_ENV}={root} is not a folder (seen from {Path.cwd()}); give an absolute path",
            stacklevel=6,
        )
    return [root]


def _unpack_given_archive(archive: Path, variant: Variant) -> Path:
    """Unpack a zip the user named into a cache folder keyed on its content, and say which copy is read.

    Unlike a download it has no pinned digest: keyed on the name alone, a second, different zip of the
    same dataset would silently be served the copy of the first.
    """
    with archive.open("rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    root = cache_root() / "archives" / digest[:16]
    try:
        folder = _unpack(archive, variant, root)
    except BaseException:
        with contextlib.suppress(OSError):  # a refused zip leaves no empty folder (rmdir: only if empty)
            root.rmdir()
        raise
    warnings.warn(f"{variant.name}: read {folder} (unpacked from {archive})", stacklevel=5)
    return folder


def _unpack(archive: Path, variant: Variant, root: Path) -> Path:
    """Extract `archive` and move its `variant.folder` into `root`; return that folder.

    Each call stages in a folder of its own, so processes unpacking the same archive at once do not
    collide: the first to finish moves its copy into place and the others use it.
    """
    final = root / variant.folder
    marker = variant.ratings_file
    if _cached_copy(final, marker) is not None:
        return final
    staging = _private_folder(root, f".{variant.folder}.", ".unpacking")
    try:
        unpacked = extract_zip(archive, staging / "archive") / variant.folder
        if not (unpacked / marker).is_file():
            raise DataError(f"{archive}: no {variant.folder}/{marker} inside")
        try:
            _write_manifest(unpacked)
        except OSError as error:  # a disk the unpacked files filled
            raise DataError(f"cannot write the dataset cache {root}: {error.strerror or error}") from None
        _move_into_place(unpacked, final, marker)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


# A download's or unpack's private folder older than this was left by a process killed outright
# (SIGKILL, SIGTERM: no `finally` ran); the next one to make such a folder removes it.
STALE_SECONDS = 24 * 3600


def _private_folder(root: Path, prefix: str, suffix: str) -> Path:
    """A new folder in `root` (created if need be) for this process alone; an unwritable cache is a
    one-line error naming the variable that moves it."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale(root, suffix)
        return Path(tempfile.mkdtemp(dir=root, prefix=prefix, suffix=suffix))
    except OSError as error:  # with nowhere to put it, the data cannot be had (no --dataset: synthetic)
        # mkdir's "File exists" for a file where the cache folder should be
        reason = "a file, not a folder" if isinstance(error, FileExistsError) else error.strerror or error
        raise DataUnavailable(
            f"cannot write the dataset cache {root}: {reason}; set ${CACHE_ENV} to a writable folder"
        ) from None


def _remove_stale(root: Path, suffix: str) -> None:
    """Remove the private folders ending in `suffix` that dead processes left in `root`."""
    now = time.time()
    for leftover in root.glob(f".*{suffix}"):
        with contextlib.suppress(OSError):
            if leftover.is_dir() and now - leftover.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(leftover, ignore_errors=True)


def _move_into_place(unpacked: Path, final: Path, marker: str) -> None:
    """Rename `unpacked` to `final`, unless another process has put a complete copy there first
    (what else appeared there since `_cached_copy` looked is refused, not replaced)."""
    try:
        os.rename(unpacked, final)
        return
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise DataError(
                f"cannot write the dataset cache {final.parent}: {error.strerror or error}"
            ) from None
    if (final / marker).is_file():
        return  # another process won the race with the same content: its copy serves
    raise _not_ours(final, marker)
