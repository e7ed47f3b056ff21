"""Train one rating model and write a run folder: `python scripts/train.py --model dotbias`.

The flags are parsed and checked before torch, pandas or numba is imported, so `--help` and a
mistake answer at once.
"""

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from recsys.cli import add_data_flags, check_device, dataset_from_flags, distributed_session, run
from recsys.config import (
    ENGINES,
    MODEL_DEFAULTS,
    OPTIMIZERS,
    SCHEDULES,
    UNKNOWN_POLICIES,
    RunConfig,
    check_threads,
    config_for,
    default_threads,
)
from recsys.errors import RecsysError
from recsys.names import SPLIT_KINDS

if TYPE_CHECKING:
    from recsys.trainer import EpochStats

DEFAULTS = RunConfig()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Training flags left unset take the model's tuned defaults (recsys/config.py).",
    )
    add = parser.add_argument
    add("--model", default="dotbias", choices=list(MODEL_DEFAULTS), help="model family")
    add_data_flags(parser)
    add(
        "--split",
        choices=SPLIT_KINDS,
        default=DEFAULTS.split,
        help="random, per-user fraction, each user's last --test-n by time, global time cut, "
        "or an ml-100k fold",
    )
    add(
        "--test-frac",
        type=float,
        default=None,
        help=f"test share for random/user/time splits [{DEFAULTS.test_frac}]",
    )
    add(
        "--test-n", type=int, default=None, help=f"ratings per user held out by user-last [{DEFAULTS.test_n}]"
    )
    add(
        "--unknown",
        choices=UNKNOWN_POLICIES,
        default=None,
        help="test ratings whose id is unseen in training: drop, or predict the training mean "
        f"[{DEFAULTS.unknown}]",
    )
    add("--epochs", type=int, default=None, help="epochs")
    add("--lr", type=float, default=None, help="peak learning rate")
    add("--bs", type=int, default=None, help="batch size")
    add("--l2", type=float, default=None, help="L2 penalty on the per-id rows of each batch")
    add("--wd", type=float, default=None, help="decoupled weight decay (fastai's wd)")
    add("--n-factors", type=int, default=None, help="latent factors per user and item")
    add(
        "--y-range",
        type=float,
        nargs=2,
        metavar=("LOW", "HIGH"),
        default=None,
        help="sigmoid output range (default: 0 to 1.1 x the top rating)",
    )
    add("--optimizer", choices=OPTIMIZERS, default=None, help="optimizer")
    add("--schedule", choices=SCHEDULES, default=None, help="learning-rate schedule")
    add(
        "--sparse",
        action="store_true",
        default=None,
        help="sparse embedding gradients with LazyAdam; much faster for 100K+ users or items",
    )
    add("--seed", type=int, default=DEFAULTS.seed, help="seed for split, initialisation and shuffle")
    add(
        "--engine",
        choices=("auto", *ENGINES),
        default="auto",
        help="compiled: per-rating AdaGrad in numba (dot, dotbias; CPU); autograd: batches through "
        "torch (every model, GPUs, torchrun); auto: compiled where the model has it on the CPU and "
        "no autograd-only flag (--bs, --optimizer, --schedule, --sparse, --wd) is given",
    )
    add(
        "--threads",
        type=int,
        default=None,
        help="CPU threads (compiled engine and torch's own); the compiled engine's result does not "
        "depend on it (default: the cores this process may use)",
    )
    add("--device", default=None, help="cpu or cuda (default: cuda where available for the autograd engine)")
    add(
        "--resume",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="continue an interrupted run from its last completed epoch (its own config and data flags)",
    )
    add("--out", type=Path, default=None, help="run folder (default: runs/<model>-<dataset>-<split>-<time>)")
    return parser.parse_args(argv)  # fmt: skip


def config_from_args(args: argparse.Namespace, dataset: str, device: str) -> RunConfig:
    """The run's config from the flags (unset training flags take the model's tuned defaults)."""
    engine = None if args.engine == "auto" else args.engine
    if engine is None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        engine = "autograd"  # the compiled engine trains in one process
    return config_for(
        args.model, engine=engine, dataset=dataset, split=args.split,
        test_frac=args.test_frac, test_n=args.test_n, unknown=args.unknown, n_factors=args.n_factors,
        y_range=tuple(args.y_range) if args.y_range else None, epochs=args.epochs, lr=args.lr,
        batch_size=args.bs, l2=args.l2, wd=args.wd, optimizer=args.optimizer, sparse=args.sparse,
        schedule=args.schedule, seed=args.seed, device=device,
    )  # fmt: skip


def check_args(args: argparse.Namespace) -> None:
    """Reject bad flags before anything is loaded: RunConfig checks the values, this what depends on
    the machine (threads here; a CUDA device once torch is loaded)."""
    args.threads = check_threads(default_threads() if args.threads is None else args.threads)
    if args.resume is None:
        config_from_args(args, args.dataset or "ml-100k", args.device or "cpu")
    if args.resume is not None and args.out is not None:
        raise RecsysError("--resume continues in its own run folder; drop --out")
    if args.out is not None and args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        raise RecsysError(f"--out {args.out} already exists and is not an empty folder; choose a new one")


def print_epoch(stats: "EpochStats") -> None:
    from tqdm.auto import tqdm

    tqdm.write(
        f"{stats.epoch:>5}  {stats.train_loss:>10.4f}  {stats.valid_rmse:>10.4f}  {stats.seconds:>7.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_args(args)
    import torch  # after the flags are checked: it takes seconds to load

    if args.device is None:
        autograd = config_from_args(args, args.dataset or "ml-100k", "cpu").engine == "autograd"
        args.device = "cuda" if autograd and torch.cuda.is_available() else "cpu"
    check_device(args.device)
    torch.set_num_threads(args.threads)
    with distributed_session(args.device) as (rank, device):
        train(args, rank, device)
    return 0


def train(args: argparse.Namespace, rank: int, device: str) -> None:
    """Train and evaluate as the flags say; rank 0 prints and writes the run folder."""
    from recsys.experiment import train_and_evaluate
    from recsys.runs import CHECKPOINT_FILE, load_checkpoint

    resume = load_checkpoint(args.resume / CHECKPOINT_FILE) if args.resume is not None else None
    if resume is not None:
        args.dataset = resume.config.dataset
    dataset = dataset_from_flags(args)
    config = resume.config if resume is not None else config_from_args(args, dataset.name, device)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.resume or args.out or Path("runs") / f"{config.model}-{dataset.name}-{config.split}-{stamp}"
    lead = rank == 0  # under torchrun only rank 0 prints and writes the run folder
    if lead:
        print(
            f"{config.model} on {dataset.name} ({len(dataset.ratings):,} ratings), split {config.split}, "
            f"{config.engine} engine, {args.threads} thread{'s' if args.threads > 1 else ''}"
        )
        print(f"{'epoch':>5}  {'train_loss':>10}  {'valid_rmse':>10}  {'seconds':>7}")
    result = train_and_evaluate(
        dataset, config, run_dir=out if lead else None, progress=not args.no_progress,
        on_epoch=print_epoch if lead else None, resume=resume, threads=args.threads,
    )  # fmt: skip
    if lead:
        metrics = result.metrics()
        print(
            f"test RMSE {result.test['rmse']:.4f}  MAE {result.test['mae']:.4f}"
            f"  on {metrics['n_test']:,} ratings ({metrics['n_test_unknown']} with ids unseen in training:"
            f" {config.unknown})"
            f"  in {result.seconds:.1f} s"
        )
        print(f"run folder: {out}")


if __name__ == "__main__":
    run(main)
