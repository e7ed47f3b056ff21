"""Regenerate data/tiny (synthetic ratings in MovieLens' CSV layout) byte for byte."""

import argparse
from pathlib import Path

from recsys.data.catalog import TINY_FOLDER
from recsys.data.synthetic import TINY_CONFIG, make_synthetic


def write_tiny(folder: Path) -> None:
    """Write ratings.csv and movies.csv of the tiny dataset into `folder`."""
    dataset, _ = make_synthetic(TINY_CONFIG)
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["userId,movieId,rating,timestamp"] + [
        f"{u},{i},{r:.1f},{t}" for u, i, r, t in dataset.ratings.itertuples(index=False)
    ]
    (folder / "ratings.csv").write_text("\n".join(lines) + "\n")
    movies = ["movieId,title,genres"] + [f"{i},{t},{g}" for i, t, g in dataset.items.itertuples(index=False)]
    (folder / "movies.csv").write_text("\n".join(movies) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=TINY_FOLDER, help="folder to write")
    write_tiny(parser.parse_args().out)
