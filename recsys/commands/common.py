"""What the command-line scripts share: the data flags and turning user errors into one line.

Importing it is cheap (no torch, pandas or numba at module level), so a script can parse and check
its flags, and answer `--help` or a mistake, before it loads the libraries that do the work.
"""

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from recsys.errors import RecsysError
from recsys.names import DATASETS

if TYPE_CHECKING:
    from recsys.data.dataset import RatingsDataset


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


def dataset_from_flags(args: argparse.Namespace) -> "RatingsDataset":
    """Load the dataset the flags name, printing the note when it falls back to synthetic data.

    Under torchrun, rank 0 loads (and if need be downloads) first and the others then read its cache.
    """
    import torch

    from recsys.data.catalog import resolve_dataset
    from recsys.train.distributed import distributed_rank

    rank, world_size = distributed_rank()
    if world_size > 1 and rank != 0:
        torch.distributed.barrier()
    dataset, note = resolve_dataset(
        args.dataset,
        args.data_dir,
        progress=not args.no_progress and rank == 0,
        allow_download=not args.offline,
    )
    if world_size > 1 and rank == 0:
        torch.distributed.barrier()
    if note and rank == 0:
        print(note, file=sys.stderr)
    return dataset


def check_device(device: str) -> None:
    """Refuse a CUDA device on a machine without one, naming the flag."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RecsysError(f"--device {device}: no CUDA device is available here; use --device cpu")


def run(main: Callable[[], int]) -> None:
    """Run a script's main: a user's mistake (RecsysError) is one `error:` line and exit code 2, and
    a warning one `warning:` line."""
    warnings.formatwarning = lambda message, *args, **kwargs: f"warning: {message}\n"
    try:
        code = main()
    except RecsysError as error:
        print(f"error: {error}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
