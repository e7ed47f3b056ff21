"""MovieLens: the variants, their file layouts, and where a copy is found or fetched.

Lookup order for a variant: an explicit folder or zip (`data_dir`; a zip is unpacked into the
cache under archives/<start of its sha256>/), the data root named by $RECSYS_DATA, the user cache
($RECSYS_CACHE, else $XDG_CACHE_HOME/recsys, else ~/.cache/recsys); otherwise a verified download
from GroupLens into the cache.
"""

import codecs
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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recsys.data.dataset import RATING_COLUMNS, FoldRows, RatingsDataset, check_ratings, ratings_frame
from recsys.data.download import download, extract_zip
from recsys.data.ratings_table import ITEM_COLUMNS, keep_latest_duplicates, warn_unnamed_items
from recsys.errors import DataError, DataUnavailable, DownloadError
from recsys.names import PREDEFINED_FOLDS

GROUPLENS_URL = "https://files.grouplens.org/datasets/movielens"
DATA_ROOT_ENV = "RECSYS_DATA"
CACHE_ENV = "RECSYS_CACHE"
OFFLINE_HINT = f"to train without a download, pass `data_dir` or set ${DATA_ROOT_ENV} to a local copy"


@dataclass(frozen=True)
class Variant:
    """One MovieLens release: where it is served, how it is pinned, and how its files are laid out."""

    name: str
    folder: str  # the folder the zip unpacks to
    layout: str  # "100k" (u.data, u.item), "dat" (ratings.dat, movies.dat) or "csv"
    rating_scale: tuple[float, float]
    size: int | None
    sha256: str | None = None
    md5: str | None = None
    max_size: int | None = None  # where `size` is unknown: a bound on what a download may write


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant(
            "ml-100k",
            "ml-100k",
            "100k",
            (1, 5),
            4_924_029,
            sha256="50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
        ),
        Variant(
            "ml-1m",
            "ml-1m",
            "dat",
            (1, 5),
            5_917_549,
            sha256="a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
        ),
        # GroupLens publishes only an md5 for 10M and no size we could confirm offline.
        # GroupLens lists the zip at 63 MB: twice that bounds a server that sends without end.
        Variant(
            "ml-10m",
            "ml-10M100K",
            "dat",
            (0.5, 5),
            None,
            md5="ce571fd55effeba0271552578f2648bd",
            max_size=128 << 20,
        ),
        Variant(
            "ml-20m",
            "ml-20m",
            "csv",
            (0.5, 5),
            198_702_078,
            sha256="96f243c338a8665f6bcc89c53edf6ee39162a846940de6b7c8c48aeada765ff3",
        ),
        Variant(
            "ml-25m",
            "ml-25m",
            "csv",
            (0.5, 5),
            261_978_986,
            sha256="8b21cfb7eb1706b4ec0aac894368d90acf26ebdfb6aced3ebd4ad5bd1eb9c6aa",
        ),
        # "latest" changes over time: this pins one release, and a newer one fails closed.
        Variant(
            "ml-latest-small",
            "ml-latest-small",
            "csv",
            (0.5, 5),
            978_202,
            sha256="696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436",
        ),
    ]
}

RATINGS_FILE = {"100k": "u.data", "dat": "ratings.dat", "csv": "ratings.csv"}
ITEMS_FILE = {"100k": "u.item", "dat": "movies.dat", "csv": "movies.csv"}


def cache_root() -> Path:
    """The user cache folder for downloaded datasets (not created here)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "recsys"


# The first bytes of the compressed and archive formats a dataset file most often arrives in.
PACKED_MAGIC = {
    b"\x1f\x8b": "gzip-compressed",
    b"BZh": "bzip2-compressed",
    b"\xfd7zXZ\x00": "xz-compressed",
    b"\x28\xb5\x2f\xfd": "zstd-compressed",
    b"PK\x03\x04": "a zip archive",
    b"PK\x05\x06": "a zip archive",  # an empty one
}
SNIFF_BYTES = 1 << 16
# How item files are read: all text, no NA values, so a title such as "1984" or "NA" stays itself.
AS_TEXT: dict[str, Any] = {"dtype": str, "keep_default_na": False}


def _shown(text: str, limit: int = 40) -> str:
    """`text` quoted, escaped and cut short, so file content in a message stays one printable line."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _check_text(path: Path, encoding: str) -> None:
    """Reject a missing, compressed or binary file before parsing, so its bytes never reach a message."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    with path.open("rb") as file:
        head = file.read(SNIFF_BYTES)
    for magic, packed in PACKED_MAGIC.items():
        if head.startswith(magic):
            raise DataError(f"{path}: is {packed}; expected a plain-text file (unpack it first)")
    if b"\0" in head:
        raise DataError(f"{path}: is not a text file (it holds NUL bytes)")
    try:
        # Incremental: a character cut in two at the end of `head` is not an error.
        codecs.getincrementaldecoder(encoding)().decode(head)
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: is not a text file (byte {error.start + 1} is not {encoding})") from None


def _check_header(path: Path, expected: list[str]) -> None:
    """Reject a csv file whose first line is not `expected` before pandas takes it for data."""
    _check_text(path, "utf-8")
    with path.open(encoding="utf-8", errors="replace") as file:
        header = file.readline(200).strip()  # bounded: a file without newlines is not read whole
    # A blank first line passes; pandas then takes the next line as the header, and the field count
    # (or "file is empty") catches it.
    if header and header.split(",") != expected:
        raise DataError(f"{path}: expected header {','.join(expected)}, got {_shown(header)}")


def _read(path: Path, **read_csv_args: Any) -> pd.DataFrame:
    """pandas.read_csv with missing, binary and malformed files turned into one-line DataErrors."""
    encoding = read_csv_args.get("encoding", "utf-8")
    _check_text(path, encoding)
    try:
        with warnings.catch_warnings():
            # pandas only warns when a row's field count does not match the header: make it an error.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(path, **read_csv_args)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: file is empty") from None
    except UnicodeDecodeError:  # past the bytes _check_text looked at
        raise DataError(f"{path}: is not a text file (not {encoding} throughout)") from None
    except (pd.errors.ParserError, pd.errors.ParserWarning, ValueError) as error:
        message = str(error).strip().splitlines()[-1]
        raise DataError(f"{path}: cannot parse ({message})") from None


def _expect_fields(raw: pd.DataFrame, path: Path, n_fields: int, layout: str) -> pd.DataFrame:
    """Reject a table whose rows do not have exactly `n_fields` fields (pandas pads short rows)."""
    if raw.shape[1] != n_fields:
        raise DataError(f"{path}: expected {layout} on every line, found {raw.shape[1]} fields")
    return raw


def _whole_numbers(column: pd.Series, path: Path, what: str) -> np.ndarray:
    """`column` as int64, or a DataError naming the first entry that is not a non-negative integer."""
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    # Whole, non-negative and exactly representable: inf or 1e30 must not wrap around in int64.
    bad = np.flatnonzero(~(values == np.round(values)) | (values < 0) | ~(values < 2**53))
    if bad.size:
        row = int(bad[0])
        shown = _shown(str(column.iloc[row])) if np.isnan(values[row]) else values[row]
        raise DataError(f"{path}: {what} {shown} in row {row + 1} is not a non-negative integer")
    return values.astype(np.int64)


def read_ratings(path: Path, layout: str, scale: tuple[float, float]) -> pd.DataFrame:
    """Parse a ratings file of `layout` into the canonical table, validated against `scale`."""
    if layout == "100k":
        raw = _read(path, sep="\t", header=None)
        raw = _expect_fields(raw, path, 4, "user<TAB>item<TAB>rating<TAB>timestamp")
        raw.columns = pd.Index(RATING_COLUMNS)
    elif layout == "dat":
        # "u::i::r::t" read as ':'-separated keeps pandas' fast C parser (a multi-char sep does not).
        raw = _expect_fields(_read(path, sep=":", header=None), path, 7, "user::item::rating::timestamp")
        if raw[[1, 3, 5]].notna().to_numpy().any():
            raise DataError(f"{path}: expected user::item::rating::timestamp on every line")
        raw = raw[[0, 2, 4, 6]].set_axis(RATING_COLUMNS, axis=1)
    elif layout == "csv":
        expected = ["userId", "movieId", "rating", "timestamp"]
        _check_header(path, expected)
        # index_col=False: a row with an extra field must not silently become the index.
        raw = _read(path, sep=",", header=0, index_col=False)
        raw = _expect_fields(raw, path, 4, ",".join(expected)).set_axis(RATING_COLUMNS, axis=1)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    numeric = raw[RATING_COLUMNS]
    if not all(pd.api.types.is_numeric_dtype(dtype) for dtype in numeric.dtypes):
        numeric = numeric.apply(pd.to_numeric, errors="coerce")
    check_ratings(numeric, path, scale)
    user, item, timestamp = (
        _whole_numbers(numeric[column], path, what)
        for column, what in (("user", "user id"), ("item", "item id"), ("timestamp", "timestamp"))
    )
    return keep_latest_duplicates(ratings_frame(user, item, numeric["rating"].to_numpy(), timestamp), path)


def read_items(folder: Path, layout: str) -> pd.DataFrame:
    """Parse item titles and genres ('|'-joined) for `layout` from `folder`."""
    path = folder / ITEMS_FILE[layout]
    if layout == "100k":
        items = _read_100k_items(path, _read_genres(folder / "u.genre"))
    elif layout == "dat":
        items = _read_dat_items(path)
    else:
        _check_header(path, ["movieId", "title", "genres"])
        raw = _read(path, header=0, index_col=False, **AS_TEXT)
        items = _expect_fields(raw, path, 3, "movieId,title,genres").set_axis(ITEM_COLUMNS, axis=1)
    items["item"] = _whole_numbers(items["item"], path, "item id")
    return items


def _read_genres(path: Path) -> list[str]:
    """The genre names of u.genre, checked to be listed in the order of u.item's flag columns."""
    raw = _read(path, sep="|", header=None, encoding="latin-1", **AS_TEXT)
    raw = _expect_fields(raw, path, 2, "name|index")
    for row, index in enumerate(raw[1]):
        if index != str(row):
            raise DataError(f"{path}: genre index {_shown(index)} in row {row + 1} should be {row}")
    return raw[0].tolist()


def _read_100k_items(path: Path, genre_names: list[str]) -> pd.DataFrame:
    """Items of u.item, whose columns after the fifth are 0/1 flags for the genres of u.genre, in order."""
    raw = _read(path, sep="|", header=None, encoding="latin-1", **AS_TEXT)
    layout = (
        f"item|title|release date|video release date|url|{len(genre_names)} genre flags "
        f"(one per line of {path.with_name('u.genre')})"
    )
    raw = _expect_fields(raw, path, 5 + len(genre_names), layout)
    flags = raw.iloc[:, 5:].apply(pd.to_numeric, errors="coerce").to_numpy()
    bad = np.argwhere(~np.isin(flags, (0, 1)))
    if len(bad):
        row, column = bad[0]
        raise DataError(
            f"{path}: genre flag {_shown(raw.iat[row, 5 + column])} in row {row + 1} is not 0 or 1"
        )
    genres = ["|".join(g for g, on in zip(genre_names, row, strict=True) if on) for row in flags == 1]
    return pd.DataFrame({"item": raw[0], "title": raw[1], "genres": genres})


def _read_dat_items(path: Path) -> pd.DataFrame:
    """Items of movies.dat, split by hand: a title may hold the ':' pandas would split on."""
    _check_text(path, "latin-1")
    with path.open(encoding="latin-1") as file:
        rows = [line.rstrip("\n").split("::", 2) for line in file]
    if not rows:
        raise DataError(f"{path}: file is empty")
    for number, row in enumerate(rows, start=1):
        if len(row) != 3:
            raise DataError(
                f"{path}: expected MovieID::Title::Genres on every line; line {number} has {len(row)} fields"
            )
    return pd.DataFrame(rows, columns=ITEM_COLUMNS)


class PredefinedFolds(Mapping[str, FoldRows]):
    """ml-100k's folds as row positions into the loaded ratings, each read from its uN.base and uN.test
    files when first asked for (a run uses one of seven), in the files' order."""

    def __init__(self, folder: Path, ratings: pd.DataFrame, scale: tuple[float, float]) -> None:
        self._folder, self._ratings, self._scale = folder, ratings, scale
        self._read: dict[str, FoldRows] = {}
        # The ratings' (user, item) keys in increasing order and the row of each, once needed.
        self._sorted_keys: tuple[np.ndarray, np.ndarray] | None = None

    def __getitem__(self, fold: str) -> FoldRows:
        if fold not in PREDEFINED_FOLDS:
            raise KeyError(fold)
        if fold not in self._read:
            self._read[fold] = (self._rows(f"{fold}.base"), self._rows(f"{fold}.test"))
        return self._read[fold]

    def __iter__(self) -> Iterator[str]:
        return iter(PREDEFINED_FOLDS)

    def __len__(self) -> int:
        return len(PREDEFINED_FOLDS)

    def _rows(self, name: str) -> np.ndarray:
        """Positions in the ratings of the rows file `name` lists; a row u.data lacks is an error."""
        path = self._folder / name
        part = read_ratings(path, "100k", self._scale)
        if self._sorted_keys is None:
            keys = _pair_keys(self._ratings)
            order = np.argsort(keys)  # no two rows share a key: the loader kept one rating per pair
            self._sorted_keys = keys[order], order
        sorted_keys, order = self._sorted_keys
        wanted = _pair_keys(part)
        found = np.searchsorted(sorted_keys, wanted).clip(max=len(sorted_keys) - 1)
        rows = order[found]
        same = (sorted_keys[found] == wanted) & (
            self._ratings["rating"].to_numpy()[rows] == part["rating"].to_numpy()
        )
        if not same.all():
            line = int(np.flatnonzero(~same)[0])
            raise DataError(
                f"{path}: the rating in row {line + 1} is not in {RATINGS_FILE['100k']} "
                "(a fold file from another copy of ml-100k?)"
            )
        return rows


def _pair_keys(ratings: pd.DataFrame) -> np.ndarray:
    """One int64 key per (user, item) pair (ml-100k's ids are small)."""
    return ratings["user"].to_numpy() * (1 << 32) + ratings["item"].to_numpy()


def read_folder(name: str, folder: Path, layout: str, scale: tuple[float, float]) -> RatingsDataset:
    """Read an unpacked dataset folder of `layout`; warn when rated items lack an entry."""
    ratings = read_ratings(folder / RATINGS_FILE[layout], layout, scale)
    items = read_items(folder, layout)
    warn_unnamed_items(ratings, items, folder / ITEMS_FILE[layout])
    folds = PredefinedFolds(folder, ratings, scale) if layout == "100k" else {}
    return RatingsDataset(name, ratings, items, scale, folder, folds, {"folder": str(folder.resolve())})


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
    ratings_file = RATINGS_FILE[variant.layout]
    if data_dir is not None:
        if data_dir.is_file() and zipfile.is_zipfile(data_dir):
            return _unpack_given_archive(data_dir, variant)
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
    what = "a folder without its" if folder.is_dir() else "not a folder holding"
    return DataError(
        f"{folder} is {what} {marker}, not a whole copy, and recsys replaces nothing it cannot tell is "
        f"its own; move it away to unpack the dataset there, or set ${CACHE_ENV} to another folder"
    )


def _data_roots() -> list[Path]:
    """The folder $RECSYS_DATA names, if set; a warning when it is not a folder from here (a relative
    path is read from the working folder, which in a notebook is the notebook's own)."""
    if not os.environ.get(DATA_ROOT_ENV):
        return []
    root = Path(os.environ[DATA_ROOT_ENV])
    if not root.is_dir():
        warnings.warn(
            f"${DATA_ROOT_ENV}={root} is not a folder (seen from {Path.cwd()}); give an absolute path",
            stacklevel=5,
        )
    return [root]


def _unpack_given_archive(archive: Path, variant: Variant) -> Path:
    """Unpack a zip the user named into a cache folder keyed on its content, and say which copy is read.

    Unlike a download it has no pinned digest: keyed on the name alone, a second, different zip of the
    same dataset would silently be served the copy of the first.
    """
    with archive.open("rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    folder = _unpack(archive, variant, cache_root() / "archives" / digest[:16])
    warnings.warn(f"{variant.name}: read {folder} (unpacked from {archive})", stacklevel=4)
    return folder


def _unpack(archive: Path, variant: Variant, root: Path) -> Path:
    """Extract `archive` and move its `variant.folder` into `root`; return that folder.

    Each call stages in a folder of its own, so processes unpacking the same archive at once do not
    collide: the first to finish moves its copy into place and the others use it.
    """
    final = root / variant.folder
    marker = RATINGS_FILE[variant.layout]
    if _cached_copy(final, marker) is not None:
        return final
    staging = _private_folder(root, f".{variant.folder}.", ".unpacking")
    try:
        unpacked = extract_zip(archive, staging / "archive") / variant.folder
        if not (unpacked / marker).is_file():
            raise DataError(f"{archive}: no {variant.folder}/{marker} inside")
        _write_manifest(unpacked)
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
        raise DataUnavailable(
            f"cannot write the dataset cache {root}: {error.strerror or error}; "
            f"set ${CACHE_ENV} to a writable folder"
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


def load_movielens(
    name: str,
    data_dir: Path | None = None,
    *,
    allow_download: bool = True,
    base_url: str = GROUPLENS_URL,
    allow_http: bool = False,
    progress: bool = True,
) -> RatingsDataset:
    """Load MovieLens variant `name` from a local copy, or download, verify and cache it once."""
    if name not in VARIANTS:
        raise DataError(f"unknown MovieLens variant {name!r}; choose one of: {', '.join(VARIANTS)}")
    variant = VARIANTS[name]
    folder = _find_local(variant, data_dir)
    if folder is None:
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
            folder = _unpack(archive, variant, root)
        finally:  # the zip is not kept: its unpacked folder is the cache
            shutil.rmtree(inbox, ignore_errors=True)
    return read_folder(name, folder, variant.layout, variant.rating_scale)
