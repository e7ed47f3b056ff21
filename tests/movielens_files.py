"""Small made-up MovieLens datasets in each layout, written to disk, for the tests of recsys.data.

Nothing here copies the real MovieLens data: each dataset is a few lines in the format of its layout.
Test modules import what they need (`from movielens_files import write_dataset, ...`).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
from conftest import zip_bytes

from recsys.data.movielens import RATINGS_FILE

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


def check_dtypes(ratings: pd.DataFrame) -> None:
    assert list(ratings.columns) == ["user", "item", "rating", "timestamp"]
    assert ratings.dtypes.to_dict() == {
        "user": np.dtype(np.int64),
        "item": np.dtype(np.int64),
        "rating": np.dtype(np.float32),
        "timestamp": np.dtype(np.int64),
    }
