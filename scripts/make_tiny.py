"""Regenerate the tiny dataset, recsys/data/samples/tiny (synthetic ratings in MovieLens' CSV layout,
package data that load_dataset("tiny") reads), and data/books (the same ratings as a book shop's
files: string ids, a 2-10 scale, dates, a title table) byte for byte."""

from pathlib import Path

import pandas as pd

from recsys.commands.common import CommandParser, run
from recsys.data.catalog import TINY_FOLDER
from recsys.data.synthetic import TINY_CONFIG, make_synthetic
from recsys.files import write_text

BOOKS_FOLDER = Path(__file__).resolve().parents[1] / "data" / "books"  # the repository's data/books


def write_tiny(folder: Path) -> None:
    """Write ratings.csv and movies.csv of the tiny dataset into `folder`."""
    dataset, _ = make_synthetic(TINY_CONFIG)
    lines = ["userId,movieId,rating,timestamp"] + [
        f"{u},{i},{r:.1f},{t}" for u, i, r, t in dataset.ratings.itertuples(index=False)
    ]
    write_text(folder / "ratings.csv", "\n".join(lines) + "\n")
    movies = ["movieId,title,genres"] + [f"{i},{t},{g}" for i, t, g in dataset.items.itertuples(index=False)]
    write_text(folder / "movies.csv", "\n".join(movies) + "\n")


def write_books(folder: Path) -> None:
    """Write the tiny ratings as a book shop would: reader,isbn,stars,date with readers and ISBN-like
    ids as text, twice the stars (2-10), dates; and books.csv with each isbn's title and genres."""
    dataset, _ = make_synthetic(TINY_CONFIG)
    dates = pd.to_datetime(dataset.ratings["timestamp"], unit="s").dt.strftime("%Y-%m-%d %H:%M:%S")
    lines = ["reader,isbn,stars,date"] + [
        f"reader-{u:03d},{_isbn(i)},{int(r * 2)},{d}"
        for (u, i, r, _), d in zip(dataset.ratings.itertuples(index=False), dates, strict=True)
    ]
    write_text(folder / "ratings.csv", "\n".join(lines) + "\n")
    books = ["isbn,title,genres"] + [
        f'{_isbn(i)},"{t.replace("Movie", "Book")}, a novel",{g}'
        for i, t, g in dataset.items.itertuples(index=False)
    ]
    write_text(folder / "books.csv", "\n".join(books) + "\n")


def _isbn(item: int) -> str:
    return f"978-0-{item:05d}-0"


def main() -> int:
    parser = CommandParser(description=__doc__)  # a mistake in one `error:` line, as every command's
    parser.add_argument("--out", type=Path, default=TINY_FOLDER, help="folder for the tiny dataset")
    parser.add_argument("--books-out", type=Path, default=BOOKS_FOLDER, help="folder for the book shop files")
    args = parser.parse_args()
    write_tiny(args.out)
    write_books(args.books_out)
    return 0


if __name__ == "__main__":
    run(main)
