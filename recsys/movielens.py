"""MovieLens: the variants, their file layouts, and where a copy is found or fetched.

Lookup order for a variant: an explicit folder or zip (`data_dir`), the data root named by
$RECSYS_DATA, the user cache ($RECSYS_CACHE, else $XDG_CACHE_HOME/recsys, else ~/.cache/recsys);
otherwise a verified download from GroupLens into the cache.
"""

import os
import shutil
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from recsys.data import ITEM_COLUMNS, RATING_COLUMNS, RatingsDataset, check_ratings, ratings_frame
from recsys.download import download, extract_zip
from recsys.errors import DataError

GROUPLENS_URL = "https://files.grouplens.org/datasets/movielens"
DATA_ROOT_ENV = "RECSYS_DATA"
CACHE_ENV = "RECSYS_CACHE"


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


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant(
            "ml-100k", "ml-100k", "100k", (1, 5), 4_924_029,
            sha256="50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
        ),
        Variant(
            "ml-1m", "ml-1m", "dat", (1, 5), 5_917_549,
            sha256="a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
        ),
        # GroupLens publishes only an md5 for 10M and no size we could confirm offline.
        Variant("ml-10m", "ml-10M100K", "dat", (0.5, 5), None, md5="ce571fd55effeba0271552578f2648bd"),
        Variant(
            "ml-20m", "ml-20m", "csv", (0.5, 5), 198_702_078,
            sha256="96f243c338a8665f6bcc89c53edf6ee39162a846940de6b7c8c48aeada765ff3",
        ),
        Variant(
            "ml-25m", "ml-25m", "csv", (0.5, 5), 261_978_986,
            sha256="8b21cfb7eb1706b4ec0aac894368d90acf26ebdfb6aced3ebd4ad5bd1eb9c6aa",
        ),
        # "latest" changes over time: this pins one release, and a newer one fails closed.
        Variant(
            "ml-latest-small", "ml-latest-small", "csv", (0.5, 5), 978_202,
            sha256="696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436",
        ),
    ]
}  # fmt: skip

RATINGS_FILE = {"100k": "u.data", "dat": "ratings.dat", "csv": "ratings.csv"}


def cache_root() -> Path:
    """The user cache folder for downloaded datasets (not created here)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "recsys"


def _read(path: Path, **read_csv_args) -> pd.DataFrame:
    """pandas.read_csv with missing files and malformed rows turned into one-line DataErrors."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        with warnings.catch_warnings():
            # pandas only warns when a row's field count does not match the header: make it an error.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(path, **read_csv_args)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: file is empty") from None
    except (pd.errors.ParserError, pd.errors.ParserWarning, ValueError, UnicodeDecodeError) as error:
        message = str(error).strip().splitlines()[-1]
        raise DataError(f"{path}: cannot parse ({message})") from None


def _expect_fields(raw: pd.DataFrame, path: Path, n_fields: int, layout: str) -> pd.DataFrame:
    """Reject a table whose rows do not have exactly `n_fields` fields (pandas pads short rows)."""
    if raw.shape[1] != n_fields:
        raise DataError(f"{path}: expected {layout} on every line, found {raw.shape[1]} fields")
    return raw


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
        if path.is_file():
            with path.open(encoding="utf-8", errors="replace") as file:
                header = file.readline().strip().split(",")
            if header != [""] and header != expected:
                raise DataError(f"{path}: expected header {','.join(expected)}, got {header}")
        # index_col=False: a row with an extra field must not silently become the index.
        raw = _read(path, sep=",", header=0, index_col=False)
        # A blank first line passes the check above; pandas then takes the next line as the header.
        raw = _expect_fields(raw, path, 4, ",".join(expected)).set_axis(RATING_COLUMNS, axis=1)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    numeric = raw[RATING_COLUMNS].apply(pd.to_numeric, errors="coerce")
    check_ratings(numeric, path, scale)
    for column, what in (("user", "user id"), ("item", "item id"), ("timestamp", "timestamp")):
        values = numeric[column].to_numpy(dtype=np.float64)
        # Whole, non-negative and exactly representable: inf or 1e30 must not wrap around in int64.
        bad = np.flatnonzero((values != np.round(values)) | (values < 0) | ~(values < 2**53))
        if bad.size:
            raise DataError(
                f"{path}: {what} {values[bad[0]]} in row {bad[0] + 1} is not a non-negative integer"
            )
    return keep_latest_duplicates(ratings_frame(*(numeric[c].to_numpy() for c in RATING_COLUMNS)), path)


def keep_latest_duplicates(ratings: pd.DataFrame, source: Path) -> pd.DataFrame:
    """Keep one rating per (user, item), the latest by timestamp, and warn with the count dropped.

    MovieLens has none; a hand-made file may, and two answers for one pair would both be trained on
    and tested against.
    """
    duplicated = ratings.duplicated(["user", "item"], keep=False).to_numpy()
    if not duplicated.any():
        return ratings
    order = np.argsort(ratings["timestamp"].to_numpy(), kind="stable")
    latest = ~ratings.iloc[order].duplicated(["user", "item"], keep="last").to_numpy()
    keep = np.zeros(len(ratings), dtype=bool)
    keep[order[latest]] = True
    warnings.warn(
        f"{source}: {len(ratings) - keep.sum()} duplicate (user, item) ratings dropped; "
        "kept the latest of each by timestamp",
        stacklevel=3,
    )
    return ratings[keep].reset_index(drop=True)


def read_items(folder: Path, layout: str) -> pd.DataFrame:
    """Parse item titles and genres ('|'-joined) for `layout` from `folder`."""
    if layout == "100k":
        genre_names = _read(folder / "u.genre", sep="|", header=None, encoding="latin-1")[0].tolist()
        raw = _read(folder / "u.item", sep="|", header=None, encoding="latin-1")
        flags = raw.iloc[:, 5 : 5 + len(genre_names)].to_numpy(dtype=bool)
        genres = ["|".join(g for g, on in zip(genre_names, row, strict=True) if on) for row in flags]
        items = pd.DataFrame({"item": raw[0], "title": raw[1], "genres": genres})
    elif layout == "dat":
        path = folder / "movies.dat"
        if not path.is_file():
            raise DataError(f"{path}: file not found")
        rows = [line.rstrip("\n").split("::", 2) for line in path.open(encoding="latin-1")]
        if any(len(row) != 3 for row in rows):
            raise DataError(f"{path}: expected MovieID::Title::Genres on every line")
        items = pd.DataFrame(rows, columns=ITEM_COLUMNS)
    else:
        items = _read(folder / "movies.csv", header=0)
        items.columns = pd.Index(ITEM_COLUMNS)
    items["item"] = items["item"].astype(np.int64)
    return items


def read_folder(name: str, folder: Path, layout: str, scale: tuple[float, float]) -> RatingsDataset:
    """Read an unpacked dataset folder of `layout`."""
    ratings = read_ratings(folder / RATINGS_FILE[layout], layout, scale)
    return RatingsDataset(name, ratings, read_items(folder, layout), scale, folder)


def _find_local(variant: Variant, data_dir: Path | None) -> Path | None:
    """The unpacked folder of `variant` from `data_dir`, $RECSYS_DATA or the cache, if present."""
    ratings_file = RATINGS_FILE[variant.layout]
    if data_dir is not None:
        if data_dir.is_file() and zipfile.is_zipfile(data_dir):
            return _unpack(data_dir, variant, cache_root())
        for candidate in (data_dir, data_dir / variant.folder):
            if (candidate / ratings_file).is_file():
                return candidate
        raise DataError(
            f"--data-dir {data_dir}: no {ratings_file} there or in {variant.folder}/ "
            f"(expected an unpacked {variant.name} folder, its parent, or {variant.name}.zip)"
        )
    roots = [Path(os.environ[DATA_ROOT_ENV])] if os.environ.get(DATA_ROOT_ENV) else []
    for root in [*roots, cache_root()]:
        if (root / variant.folder / ratings_file).is_file():
            return root / variant.folder
    return None


def _unpack(archive: Path, variant: Variant, root: Path) -> Path:
    """Extract `archive` and move its `variant.folder` into `root`; return that folder."""
    final = root / variant.folder
    if (final / RATINGS_FILE[variant.layout]).is_file():
        return final
    staging = root / f".{variant.name}.unpacking"
    shutil.rmtree(staging, ignore_errors=True)  # left over from an interrupted earlier run
    extract_zip(archive, staging)
    if not (staging / variant.folder / RATINGS_FILE[variant.layout]).is_file():
        shutil.rmtree(staging, ignore_errors=True)
        raise DataError(f"{archive}: no {variant.folder}/{RATINGS_FILE[variant.layout]} inside")
    if final.exists():  # an incomplete copy (it lacks the ratings file): replace it
        shutil.rmtree(final)
    os.replace(staging / variant.folder, final)
    shutil.rmtree(staging, ignore_errors=True)
    return final


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
            raise DataError(f"{name} is not available locally; pass --data-dir or set ${DATA_ROOT_ENV}")
        root = cache_root()
        archive = download(
            f"{base_url}/{name}.zip", root / f"{name}.zip", size=variant.size,
            sha256=variant.sha256, md5=variant.md5, allow_http=allow_http, progress=progress,
        )  # fmt: skip
        try:
            folder = _unpack(archive, variant, root)
        finally:  # a zip that does not unpack must not stay cached either
            archive.unlink()
    return read_folder(name, folder, variant.layout, variant.rating_scale)
