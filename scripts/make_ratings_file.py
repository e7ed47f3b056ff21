"""Write a large ratings file to load: synthetic ratings shaped like a MovieLens variant (ML-25M by
default), as ratings.csv (MovieLens' header and columns) and ratings.parquet. Never committed:
`python scripts/make_ratings_file.py /tmp/ratings --shape ml-25m`."""

from pathlib import Path

import benchmark

from recsys.commands.common import CommandParser, run


def main() -> int:
    parser = CommandParser(description=__doc__)  # a mistake in one `error:` line, as every command's
    parser.add_argument("folder", type=Path, help="where to write ratings.csv and ratings.parquet")
    parser.add_argument("--shape", choices=list(benchmark.SHAPES), default="ml-25m")
    args = parser.parse_args()
    written = benchmark.write_ratings_files(args.shape, args.folder)
    print(f"{written['ratings']:,} ratings: {written['csv']} and {written['parquet']}")
    return 0


if __name__ == "__main__":
    run(main)
