"""What the command-line scripts share: the data flags and turning user errors into one line."""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from recsys.data import RatingsDataset
from recsys.datasets import DATASETS, resolve_dataset
from recsys.errors import RecsysError


def add_data_flags(parser: argparse.ArgumentParser) -> None:
    """--dataset, --data-dir, --offline and --no-progress."""
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        default=None,
        help="dataset; unset: ml-100k, or built-in synthetic data when ml-100k cannot be had",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="local unpacked dataset folder, its parent, or its .zip "
        "(else $RECSYS_DATA, the cache, then a download)",
    )
    parser.add_argument("--offline", action="store_true", help="never download")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def dataset_from_flags(args: argparse.Namespace) -> RatingsDataset:
    """Load the dataset the flags name, printing the note when it falls back to synthetic data."""
    dataset, note = resolve_dataset(
        args.dataset, args.data_dir, progress=not args.no_progress, allow_download=not args.offline
    )
    if note:
        print(note, file=sys.stderr)
    return dataset


def run(main: Callable[[], int]) -> None:
    """Run a script's main: a user's mistake (RecsysError) is one `error:` line and exit code 2."""
    try:
        code = main()
    except RecsysError as error:
        print(f"error: {error}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
