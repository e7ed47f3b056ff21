"""Offline tests for recsys.movielens and recsys.datasets on small made-up files in every layout.

Nothing here copies the real MovieLens data: each test writes its own few lines in the format of
the variant under test. Only the last tests read the real ml-100k, and they skip when it is absent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import Served, zip_bytes

import recsys.movielens as movielens
from recsys.data import RatingsDataset
from recsys.datasets import DATASETS, load_dataset, resolve_dataset
from recsys.errors import DataError, DownloadError
from recsys.movielens import RATINGS_FILE, VARIANTS, load_movielens, read_folder

# ---------------------------------------------------------------------------------------------
# Writers of small made-up datasets in each layout
# ---------------------------------------------------------------------------------------------

SEPARATOR = {"100k": "\t", "dat": "::", "csv": ","}
CSV_HEADER = "userId,movieId,rating,timestamp"
# Made-up genre names: the parser only needs 'name|index' lines, in order.
GENRES_100K = [f"Kind{i:02d}" for i in range(19)]

# (item, title, genre flags set) for the 100k layout; titles are made up.
ITEMS_100K = [
    (10, "Café Lumière (1993)", {1, 5}),
    (20, "Quiet Harbour (1996)", set()),
    (30, "Plain Title, A (1997)", {18}),
]
# (item, title, genres) for the dat and csv layouts.
ITEMS_DAT = [
    (10, "Space Patrol: The Return (1995)", "Comedy|Drama"),
    (20, "Crème Brûlée (1998)", "Romance"),
    (30, "Nothing Listed (2001)", "(no genres listed)"),
]
ITEMS_CSV = [
    (10, "Lighthouse, The (1995)", "Comedy|Drama"),
    (20, "Plain (1999)", "Thriller"),
    (30, "Brackets: and, commas (2003)", "(no genres listed)"),
]

# (user, item, rating, timestamp): whole stars for the 1-5 variants, half stars for the others.
WHOLE_RATINGS = [(1, 10, 4, 1_000_000_001), (1, 20, 1, 1_000_000_050), (2, 10, 5, 1_000_000_002)]
HALF_RATINGS = [(1, 10, 4.5, 1_100_000_001), (1, 20, 0.5, 1_100_000_050), (2, 30, 3.0, 1_100_000_002)]


def ratings_text(layout: str, rows: list[tuple]) -> str:
    """A ratings file of `layout` holding `rows` (no trailing checks: callers may pass bad rows)."""
    sep = SEPARATOR[layout]
    lines = [sep.join(str(v) for v in row) for row in rows]
    if layout == "csv":
        lines.insert(0, CSV_HEADER)
    return "\n".join(lines) + "\n"


def write_items(folder: Path, layout: str) -> None:
    if layout == "100k":
        genre_lines = "".join(f"{name}|{i}\n" for i, name in enumerate(GENRES_100K)) + "\n"
        (folder / "u.genre").write_bytes(genre_lines.encode("latin-1"))
        lines = []
        for item, title, on in ITEMS_100K:
            flags = "|".join("1" if i in on else "0" for i in range(19))
            lines.append(f"{item}|{title}|01-Jan-1995||http://example.invalid/{item}|{flags}\n")
        (folder / "u.item").write_bytes("".join(lines).encode("latin-1"))
    elif layout == "dat":
        lines = "".join(f"{item}::{title}::{genres}\n" for item, title, genres in ITEMS_DAT)
        (folder / "movies.dat").write_bytes(lines.encode("latin-1"))
    else:
        out = io.StringIO()
        pd.DataFrame(ITEMS_CSV, columns=["movieId", "title", "genres"]).to_csv(out, index=False)
        (folder / "movies.csv").write_text(out.getvalue(), encoding="utf-8")


def write_dataset(folder: Path, layout: str, rows: list[tuple]) -> Path:
    """Write a complete dataset of `layout` (ratings `rows` and a few items) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RATINGS_FILE[layout]).write_text(ratings_text(layout, rows), encoding="utf-8")
    write_items(folder, layout)
    return folder


def rows_for(layout: str, scale: tuple[float, float]) -> list[tuple]:
    return WHOLE_RATINGS if scale[0] >= 1 else HALF_RATINGS


def expected_ratings(rows: list[tuple]) -> pd.DataFrame:
    user, item, rating, timestamp = (np.array(col) for col in zip(*rows, strict=True))
    return pd.DataFrame(
        {
            "user": user.astype(np.int64),
            "item": item.astype(np.int64),
            "rating": rating.astype(np.float32),
            "timestamp": timestamp.astype(np.int64),
        }
    )


def folder_as_zip(folder: Path, prefix: str) -> bytes:
    """Zip every file of `folder` under `prefix/`."""
    return zip_bytes({f"{prefix}/{p.name}": p.read_bytes() for p in sorted(folder.iterdir())})


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.fixture
def no_data_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset $RECSYS_DATA so the real data (when a run sets it) is never picked up by accident."""
    monkeypatch.delenv("RECSYS_DATA", raising=False)


# ---------------------------------------------------------------------------------------------
# Parsers of each layout
# ---------------------------------------------------------------------------------------------


def check_dtypes(ratings: pd.DataFrame) -> None:
    assert list(ratings.columns) == ["user", "item", "rating", "timestamp"]
    assert ratings.dtypes.to_dict() == {
        "user": np.dtype(np.int64),
        "item": np.dtype(np.int64),
        "rating": np.dtype(np.float32),
        "timestamp": np.dtype(np.int64),
    }


def check_read(ds: RatingsDataset, rows: list[tuple], titles: list[str], genres: list[str]) -> None:
    """`ds` holds exactly `rows` as ratings, and items 10, 20, 30 with these titles and genres."""
    check_dtypes(ds.ratings)
    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(rows))
    assert ds.items["item"].dtype == np.int64
    assert ds.items["item"].tolist() == [10, 20, 30]
    assert ds.items["title"].tolist() == titles
    assert ds.items["genres"].tolist() == genres


def test_read_100k_layout(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "ml-100k", "100k", WHOLE_RATINGS)

    ds = read_folder("ml-100k", folder, "100k", (1, 5))

    # u.item is latin-1: the accented title survives, decoded.
    check_read(
        ds,
        WHOLE_RATINGS,
        titles=["Café Lumière (1993)", "Quiet Harbour (1996)", "Plain Title, A (1997)"],
        genres=["Kind01|Kind05", "", "Kind18"],
    )
    assert ds.name == "ml-100k" and ds.rating_scale == (1, 5) and ds.folder == folder


def test_read_dat_layout(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "ml-10M100K", "dat", HALF_RATINGS)

    ds = read_folder("ml-10m", folder, "dat", (0.5, 5))

    # A ':' inside a title does not split it; movies.dat is latin-1.
    check_read(
        ds,
        HALF_RATINGS,
        titles=["Space Patrol: The Return (1995)", "Crème Brûlée (1998)", "Nothing Listed (2001)"],
        genres=["Comedy|Drama", "Romance", "(no genres listed)"],
    )
    assert ds.ratings["rating"].tolist() == [4.5, 0.5, 3.0]


def test_read_csv_layout(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "ml-latest-small", "csv", HALF_RATINGS)
    assert '"Lighthouse, The (1995)"' in (folder / "movies.csv").read_text()  # quoted, as GroupLens does

    ds = read_folder("ml-latest-small", folder, "csv", (0.5, 5))

    check_read(
        ds,
        HALF_RATINGS,
        titles=["Lighthouse, The (1995)", "Plain (1999)", "Brackets: and, commas (2003)"],
        genres=["Comedy|Drama", "Thriller", "(no genres listed)"],
    )


def test_large_ids_and_timestamps_keep_int64(tmp_path: Path) -> None:
    rows = [(3_000_000_000, 2_500_000_000, 3.5, 4_000_000_000)]
    folder = write_dataset(tmp_path / "big", "csv", rows)

    ratings = read_folder("x", folder, "csv", (0.5, 5)).ratings

    check_dtypes(ratings)
    assert ratings.iloc[0].tolist() == [3_000_000_000, 2_500_000_000, 3.5, 4_000_000_000]


# ---------------------------------------------------------------------------------------------
# load_movielens for every variant, from its folder or its parent
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("point_at", ["folder", "parent"])
def test_load_every_variant_from_data_dir(
    tmp_path: Path, no_data_root: None, name: str, point_at: str
) -> None:
    variant = VARIANTS[name]
    rows = rows_for(variant.layout, variant.rating_scale)
    folder = write_dataset(tmp_path / "data" / variant.folder, variant.layout, rows)

    data_dir = folder if point_at == "folder" else folder.parent
    ds = load_movielens(name, data_dir=data_dir, allow_download=False)

    assert ds.name == name
    assert ds.folder == folder
    assert ds.rating_scale == variant.rating_scale
    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(rows))
    assert ds.items["item"].tolist() == [10, 20, 30]


def test_variant_table_matches_the_docs() -> None:
    assert {n: (v.folder, v.layout, v.rating_scale) for n, v in VARIANTS.items()} == {
        "ml-100k": ("ml-100k", "100k", (1, 5)),
        "ml-1m": ("ml-1m", "dat", (1, 5)),
        "ml-10m": ("ml-10M100K", "dat", (0.5, 5)),
        "ml-20m": ("ml-20m", "csv", (0.5, 5)),
        "ml-25m": ("ml-25m", "csv", (0.5, 5)),
        "ml-latest-small": ("ml-latest-small", "csv", (0.5, 5)),
    }
    for variant in VARIANTS.values():
        assert variant.sha256 or variant.md5, f"{variant.name} has no pinned digest"


def test_unknown_variant_lists_the_variants() -> None:
    with pytest.raises(DataError, match="ml-100k") as err:
        load_movielens("ml-7k")
    assert "ml-7k" in str(err.value) and "ml-latest-small" in str(err.value)


def test_half_star_rating_outside_whole_star_scale_is_rejected(tmp_path: Path, no_data_root: None) -> None:
    # ml-1m is 1-5: a 0.5 that would be fine in ml-10m must be refused.
    folder = write_dataset(tmp_path / "ml-1m", "dat", HALF_RATINGS)
    with pytest.raises(DataError, match="outside the scale 1-5") as err:
        load_movielens("ml-1m", data_dir=folder)
    assert str(folder / "ratings.dat") in str(err.value)


# ---------------------------------------------------------------------------------------------
# Bad input: one-line DataErrors naming the file
# ---------------------------------------------------------------------------------------------

LAYOUT_SCALE = {"100k": (1.0, 5.0), "dat": (0.5, 5.0), "csv": (0.5, 5.0)}
GOOD = (1, 10, 4, 1_000_000_001)


def write_bad_ratings(folder: Path, layout: str, case: str) -> Path:
    """Write a good dataset, then spoil its ratings file according to `case`; return that file."""
    write_dataset(folder, layout, [GOOD])
    path = folder / RATINGS_FILE[layout]
    sep = SEPARATOR[layout]
    header = CSV_HEADER + "\n" if layout == "csv" else ""
    good = sep.join(map(str, GOOD))
    bad_line = {
        "non-numeric rating": sep.join(["2", "10", "four", "1000000002"]),
        "rating above scale": sep.join(["2", "10", "6", "1000000002"]),
        "rating below scale": sep.join(["2", "10", "0", "1000000002"]),
        "non-integer user": sep.join(["1.5", "10", "4", "1000000002"]),
        "non-integer item": sep.join(["2", "10.5", "4", "1000000002"]),
        "missing field": sep.join(["2", "10", "4"]),
        "extra field": sep.join(["2", "10", "4", "1000000002", "7"]),
    }
    if case == "missing file":
        path.unlink()
    elif case == "empty file":
        path.write_text("")
    elif case == "header only":
        path.write_text(header)
    else:
        path.write_text(f"{header}{good}\n{bad_line[case]}\n{good}\n")
    return path


BAD_CASES: dict[str, str | None] = {
    "missing file": "not found",
    "empty file": "empty|no ratings",
    "non-numeric rating": "non-numeric value in rating row 2",
    "rating above scale": r"rating 6(\.0)? in row 2 is outside the scale",
    "rating below scale": r"rating 0(\.0)? in row 2 is outside the scale",
    "non-integer user": "user id 1.5 in row 2 is not a non-negative integer",
    "non-integer item": "item id 10.5 in row 2 is not a non-negative integer",
    "missing field": "row 2",
    "extra field": None,  # any message, as long as it is a DataError naming the file
}


@pytest.mark.parametrize("layout", ["100k", "dat", "csv"])
@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_ratings_file_is_a_data_error_naming_it(tmp_path: Path, layout: str, case: str) -> None:
    folder = tmp_path / "ds"
    path = write_bad_ratings(folder, layout, case)

    with pytest.raises(DataError, match=BAD_CASES[case]) as err:
        read_folder("x", folder, layout, LAYOUT_SCALE[layout])

    message = str(err.value)
    assert str(path) in message
    assert "\n" not in message


def test_csv_header_only_has_no_ratings(tmp_path: Path) -> None:
    path = write_bad_ratings(tmp_path / "ds", "csv", "header only")
    with pytest.raises(DataError, match="no ratings") as err:
        read_folder("x", tmp_path / "ds", "csv", (0.5, 5))
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    "header", ["user,item,rating,timestamp", "movieId,userId,rating,timestamp", "userId,movieId,rating"]
)
def test_csv_wrong_header(tmp_path: Path, header: str) -> None:
    folder = write_dataset(tmp_path / "ds", "csv", [GOOD])
    path = folder / "ratings.csv"
    path.write_text(f"{header}\n1,10,4,1000000001\n")

    with pytest.raises(DataError, match="expected header userId,movieId,rating,timestamp") as err:
        read_folder("x", folder, "csv", (0.5, 5))
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("layout", "items_file"),
    [("100k", "u.item"), ("100k", "u.genre"), ("dat", "movies.dat"), ("csv", "movies.csv")],
)
def test_missing_items_file(tmp_path: Path, layout: str, items_file: str) -> None:
    folder = write_dataset(tmp_path / "ds", layout, [GOOD])
    (folder / items_file).unlink()

    with pytest.raises(DataError, match="not found") as err:
        read_folder("x", folder, layout, LAYOUT_SCALE[layout])
    assert str(folder / items_file) in str(err.value)


def test_malformed_movies_dat_line(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "ds", "dat", [GOOD])
    with (folder / "movies.dat").open("a", encoding="latin-1") as f:
        f.write("40::Title without genres (2000)\n")

    with pytest.raises(DataError, match="MovieID::Title::Genres") as err:
        read_folder("x", folder, "dat", (0.5, 5))
    assert str(folder / "movies.dat") in str(err.value)


# ---------------------------------------------------------------------------------------------
# Where a copy is found: data_dir, $RECSYS_DATA, the cache
# ---------------------------------------------------------------------------------------------


def tagged_copy(root: Path, user: int) -> Path:
    """An ml-100k folder under `root` whose single rating is by `user`, to tell copies apart."""
    return write_dataset(root / "ml-100k", "100k", [(user, 10, 3, 1_000_000_000)])


@pytest.fixture
def three_copies(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    copies = {
        "explicit": tagged_copy(tmp_path / "explicit", 101),
        "data_root": tagged_copy(tmp_path / "data_root", 202),
        "cache": tagged_copy(isolated_cache, 303),
    }
    monkeypatch.setenv("RECSYS_DATA", str(tmp_path / "data_root"))
    return copies


def only_user(name: str = "ml-100k", **kwargs: object) -> int:
    ds = load_movielens(name, allow_download=False, **kwargs)  # type: ignore[arg-type]
    assert len(ds.ratings) == 1
    return int(ds.ratings["user"].iloc[0])


def test_data_root_comes_before_the_cache(three_copies: dict[str, Path]) -> None:
    assert only_user() == 202
    assert load_movielens("ml-100k", allow_download=False).folder == three_copies["data_root"]


def test_cache_is_used_without_data_root(
    three_copies: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RECSYS_DATA")
    assert only_user() == 303


def test_data_root_without_the_variant_falls_back_to_the_cache(
    three_copies: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty_root"
    empty.mkdir()
    monkeypatch.setenv("RECSYS_DATA", str(empty))
    assert only_user() == 303


@pytest.mark.parametrize("point_at", ["folder", "parent"])
def test_explicit_data_dir_wins(three_copies: dict[str, Path], point_at: str) -> None:
    folder = three_copies["explicit"]
    assert only_user(data_dir=folder if point_at == "folder" else folder.parent) == 101


def test_empty_data_dir_mentions_the_flag(tmp_path: Path, three_copies: dict[str, Path]) -> None:
    # A usable copy elsewhere must not hide a wrong --data-dir.
    empty = tmp_path / "nothing_here"
    empty.mkdir()
    with pytest.raises(DataError, match="--data-dir") as err:
        load_movielens("ml-100k", data_dir=empty)
    assert str(empty) in str(err.value) and "u.data" in str(err.value)


def test_data_dir_of_another_variant_is_not_usable(tmp_path: Path, no_data_root: None) -> None:
    folder = write_dataset(tmp_path / "ml-1m", "dat", WHOLE_RATINGS)
    with pytest.raises(DataError, match="--data-dir"):
        load_movielens("ml-100k", data_dir=folder)


def test_nothing_local_and_no_download(no_data_root: None, isolated_cache: Path) -> None:
    with pytest.raises(DataError, match="not available locally") as err:
        load_movielens("ml-100k", allow_download=False)
    assert "--data-dir" in str(err.value) and "RECSYS_DATA" in str(err.value)
    assert listing(isolated_cache) == []


def test_unset_cache_env_uses_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECSYS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert movielens.cache_root() == tmp_path / "xdg" / "recsys"


# ---------------------------------------------------------------------------------------------
# A local zip as data_dir
# ---------------------------------------------------------------------------------------------


def test_local_zip_is_unpacked_into_the_cache(
    tmp_path: Path, isolated_cache: Path, no_data_root: None
) -> None:
    source = write_dataset(tmp_path / "src" / "ml-100k", "100k", WHOLE_RATINGS)
    archive = tmp_path / "ml-100k.zip"
    data = folder_as_zip(source, "ml-100k")
    archive.write_bytes(data)
    with zipfile.ZipFile(archive) as zf:
        assert sorted(zf.namelist()) == ["ml-100k/u.data", "ml-100k/u.genre", "ml-100k/u.item"]

    ds = load_movielens("ml-100k", data_dir=archive, allow_download=False)

    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(WHOLE_RATINGS))
    assert ds.items["title"].iloc[0] == "Café Lumière (1993)"
    assert ds.folder == isolated_cache / "ml-100k"
    assert listing(isolated_cache) == ["ml-100k"]  # no staging folder left behind
    assert listing(isolated_cache / "ml-100k") == ["u.data", "u.genre", "u.item"]
    assert archive.read_bytes() == data  # the user's zip is left as it was

    # Unpacked once, it is found in the cache afterwards without the zip.
    archive.unlink()
    again = load_movielens("ml-100k", allow_download=False)
    assert again.folder == isolated_cache / "ml-100k"
    pd.testing.assert_frame_equal(again.ratings, ds.ratings)


def test_local_zip_without_the_variant_folder(
    tmp_path: Path, isolated_cache: Path, no_data_root: None
) -> None:
    source = write_dataset(tmp_path / "src" / "ml-100k", "100k", WHOLE_RATINGS)
    archive = tmp_path / "ml-100k.zip"
    archive.write_bytes(folder_as_zip(source, "something-else"))

    with pytest.raises(DataError, match=r"no ml-100k/u\.data inside") as err:
        load_movielens("ml-100k", data_dir=archive)
    assert str(archive) in str(err.value)
    assert listing(isolated_cache) == []


def test_local_zip_over_a_stale_cache_folder(
    tmp_path: Path, isolated_cache: Path, no_data_root: None
) -> None:
    # An earlier, interrupted or hand-made copy: the folder is there but u.data is not.
    (isolated_cache / "ml-100k").mkdir()
    (isolated_cache / "ml-100k" / "notes.txt").write_text("left over\n")
    source = write_dataset(tmp_path / "src" / "ml-100k", "100k", WHOLE_RATINGS)
    archive = tmp_path / "ml-100k.zip"
    archive.write_bytes(folder_as_zip(source, "ml-100k"))

    # The incomplete copy is replaced by the archive's folder.
    ds = load_movielens("ml-100k", data_dir=archive, allow_download=False)
    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(WHOLE_RATINGS))
    assert not (isolated_cache / "ml-100k" / "notes.txt").exists()
    assert not (isolated_cache / ".ml-100k.unpacking").exists()


# ---------------------------------------------------------------------------------------------
# Download end to end from a local server
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def latest_small_zip(tmp_path: Path, served: Served) -> bytes:
    source = write_dataset(tmp_path / "build" / "ml-latest-small", "csv", HALF_RATINGS)
    data = folder_as_zip(source, "ml-latest-small")
    (served.root / "ml-latest-small.zip").write_bytes(data)
    return data


def pin(monkeypatch: pytest.MonkeyPatch, data: bytes, sha256: str | None = None) -> None:
    variant = dataclasses.replace(
        VARIANTS["ml-latest-small"], size=len(data), sha256=sha256 or hashlib.sha256(data).hexdigest()
    )
    monkeypatch.setitem(movielens.VARIANTS, "ml-latest-small", variant)


def test_download_verifies_unpacks_and_caches(
    served: Served,
    latest_small_zip: bytes,
    isolated_cache: Path,
    no_data_root: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pin(monkeypatch, latest_small_zip)

    ds = load_movielens("ml-latest-small", base_url=served.base, allow_http=True, progress=False)

    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(HALF_RATINGS))
    assert ds.items["title"].tolist()[0] == "Lighthouse, The (1995)"
    assert ds.folder == isolated_cache / "ml-latest-small"
    assert served.requests == ["/ml-latest-small.zip"]
    # Only the unpacked folder stays: no zip, no .part file, no staging folder.
    assert listing(isolated_cache) == ["ml-latest-small"]
    assert listing(isolated_cache / "ml-latest-small") == ["movies.csv", "ratings.csv"]

    again = load_movielens("ml-latest-small", base_url=served.base, allow_http=True, progress=False)

    assert served.requests == ["/ml-latest-small.zip"]  # served from the cache, no new request
    pd.testing.assert_frame_equal(again.ratings, ds.ratings)


def test_download_with_wrong_sha256_caches_nothing(
    served: Served,
    latest_small_zip: bytes,
    isolated_cache: Path,
    no_data_root: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pin(monkeypatch, latest_small_zip, sha256="0" * 64)

    with pytest.raises(DownloadError, match="sha256"):
        load_movielens("ml-latest-small", base_url=served.base, allow_http=True, progress=False)

    assert served.requests == ["/ml-latest-small.zip"]
    assert listing(isolated_cache) == []


def test_download_of_a_zip_without_the_folder_leaves_nothing(
    served: Served, tmp_path: Path, isolated_cache: Path, no_data_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_dataset(tmp_path / "build" / "other", "csv", HALF_RATINGS)
    data = folder_as_zip(source, "other")
    (served.root / "ml-latest-small.zip").write_bytes(data)
    pin(monkeypatch, data)  # verifies fine, but holds no ml-latest-small/ folder

    with pytest.raises(DataError, match=r"no ml-latest-small/ratings\.csv inside"):
        load_movielens("ml-latest-small", base_url=served.base, allow_http=True, progress=False)

    assert listing(isolated_cache) == []


def test_download_over_http_needs_opt_in(
    served: Served,
    latest_small_zip: bytes,
    isolated_cache: Path,
    no_data_root: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pin(monkeypatch, latest_small_zip)

    with pytest.raises(DownloadError, match="allow_http"):
        load_movielens("ml-latest-small", base_url=served.base, progress=False)

    assert served.requests == []
    assert listing(isolated_cache) == []


def test_no_download_when_not_allowed(
    served: Served,
    latest_small_zip: bytes,
    isolated_cache: Path,
    no_data_root: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pin(monkeypatch, latest_small_zip)

    with pytest.raises(DataError, match="not available locally"):
        load_movielens("ml-latest-small", base_url=served.base, allow_http=True, allow_download=False)

    assert served.requests == []


# ---------------------------------------------------------------------------------------------
# recsys.datasets
# ---------------------------------------------------------------------------------------------


def test_unknown_dataset_lists_the_names() -> None:
    with pytest.raises(DataError, match="unknown --dataset 'nope'") as err:
        load_dataset("nope")
    for name in DATASETS:
        assert name in str(err.value)
    assert {"tiny", "synthetic", *VARIANTS} == set(DATASETS)


def test_load_synthetic_and_tiny() -> None:
    synthetic = load_dataset("synthetic")
    assert synthetic.name == "synthetic" and synthetic.folder is None
    assert len(synthetic.ratings) == 100_000
    check_dtypes(synthetic.ratings)

    tiny = load_dataset("tiny")
    assert tiny.name == "tiny" and tiny.rating_scale == (1.0, 5.0)
    assert len(tiny.ratings) == 4_000
    check_dtypes(tiny.ratings)
    assert tiny.ratings["rating"].between(1, 5).all()
    assert set(tiny.ratings["item"]) <= set(tiny.items["item"])


def test_load_dataset_passes_data_dir_to_movielens(tmp_path: Path, no_data_root: None) -> None:
    folder = write_dataset(tmp_path / "ml-20m", "csv", HALF_RATINGS)
    ds = load_dataset("ml-20m", tmp_path, allow_download=False)
    assert ds.name == "ml-20m" and ds.folder == folder


def test_default_dataset_falls_back_to_synthetic(no_data_root: None, isolated_cache: Path) -> None:
    ds, note = resolve_dataset(None, allow_download=False)

    assert ds.name == "synthetic"
    assert note is not None and "ml-100k" in note and "synthetic" in note
    assert listing(isolated_cache) == []


def test_default_dataset_uses_ml100k_from_data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_dataset(tmp_path / "root" / "ml-100k", "100k", WHOLE_RATINGS)
    monkeypatch.setenv("RECSYS_DATA", str(tmp_path / "root"))

    ds, note = resolve_dataset(None, allow_download=False)

    assert note is None
    assert ds.name == "ml-100k"
    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(WHOLE_RATINGS))


# ---------------------------------------------------------------------------------------------
# The real ml-100k (skips when absent)
# ---------------------------------------------------------------------------------------------


def test_real_ml100k(ml100k_folder: Path) -> None:
    ds = load_movielens("ml-100k", data_dir=ml100k_folder, allow_download=False)

    ratings = ds.ratings
    check_dtypes(ratings)
    assert len(ratings) == 100_000
    assert ratings["user"].nunique() == 943
    assert ratings["item"].nunique() == 1682
    assert ratings["rating"].between(1, 5).all()
    assert set(ratings["rating"].unique()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert ratings.iloc[0].tolist() == [196, 242, 3.0, 881250949]
    assert len(ds.items) == 1682
    assert ds.items["item"].is_unique
    assert set(ds.items["item"]) == set(ratings["item"])
    assert ds.items["title"].notna().all() and (ds.items["title"].str.len() > 0).all()
    assert ds.folder == ml100k_folder


def test_real_ml100k_via_data_root(ml100k_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECSYS_DATA", str(ml100k_folder.parent))
    ds = load_dataset("ml-100k", allow_download=False)
    assert ds.folder == ml100k_folder
    assert len(ds.ratings) == 100_000
