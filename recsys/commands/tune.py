"""Tune a model's hyperparameters without ever reading the test ratings, then score the best once:
`python scripts/tune.py --model dotbias --split u1`.

Writes, in the output folder: trials.csv (every setting tried, ranked by validation RMSE, or a ranking
model's NDCG@10), trials.png (that score against each hyperparameter), best.json (what `train.py
--config` reads) and run/ (the best setting retrained on the whole training part: a run folder like
train.py's).
"""

import argparse
import math
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from recsys.commands.common import (
    CommandParser,
    Terminated,
    add_data_flags,
    check_data_flags,
    command_named,
    data_flags,
    dataset_from_flags,
    path_flag,
    run,
    test_summary,
    warn_of_unused_feature_files,
)
from recsys.config import (
    ENGINES,
    RANKING_DEFAULT_MODEL,
    RunConfig,
    check_threads,
    config_for,
    default_model,
    default_threads,
)
from recsys.errors import RecsysError
from recsys.models.registry import model_entry, model_names
from recsys.names import SEARCH_RUN_FOLDER, SPLIT_KINDS

SEARCH_FILES = ("trials.csv", "trials.png", "best.json")  # what a search writes beside its run/


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_flags(parser)
    parser.add_argument(
        "--model",
        choices=model_names(),
        default=None,
        help=f"the model to tune [default: dotbias; {RANKING_DEFAULT_MODEL} on interactions without ratings]",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="the engine every trial trains on [default: compiled where the model has it]",
    )
    parser.add_argument(
        "--split",
        choices=SPLIT_KINDS,
        default=None,
        help="whose training part is searched and whose test part scores the best setting once "
        "[default: u1 for ml-100k, else random]",
    )
    parser.add_argument(
        "--features",
        default=None,
        help="bfm, svdpp: the feature groups every trial reads, a comma list of side, implicit, time (or "
        "empty; bfm's time: a bias per user and day of the ratings) [default: the model's: svdpp implicit, "
        "bfm side,implicit]",
    )
    parser.add_argument(
        "--ordinal",
        action="store_true",
        help="bfm: every trial fits the ratings as an ordered probit over their steps (train.py's --ordinal)",
    )
    parser.add_argument("--trials", type=int, default=30, help="settings to try [default: 30]")
    parser.add_argument(
        "--folds", type=int, default=3, help="cross-validation folds inside the training part [default: 3]"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for the search and the runs [default: 0]")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads the trials train on [default: the cores this process may use]",
    )
    parser.add_argument(
        "--out",
        type=path_flag,
        default=None,
        help="output folder [default: reports/tune-<model>-<dataset>-<split>]",
    )
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    """Refuse bad flags before the data is loaded."""
    check_data_flags(args)
    args.threads = check_threads(default_threads() if args.threads is None else args.threads)
    if args.trials < 1:
        raise RecsysError(f"--trials must be at least 1, got {args.trials}")
    _tuned_config(args)  # a model or engine that reads no `features`, or groups it has not
    if args.folds < 2:
        raise RecsysError(f"--folds must be at least 2 (cross-validation), got {args.folds}")
    from recsys.workflows.run_folder import occupied, taken

    if args.out is not None and taken(args.out):
        raise RecsysError(occupied(args.out, "--out"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_args(args)
    from recsys.files import write_json, write_text
    from recsys.workflows.run_folder import claim_run_folder, in_use, taken
    from recsys.workflows.tune import best_settings, planned_trials, plot_trials, tune

    dataset = dataset_from_flags(args)
    args.model = args.model or default_model(dataset.implicit)
    warn_of_unused_feature_files(args, _tuned_config(args))
    split = args.split or dataset.default_split
    out = args.out or Path("reports") / f"tune-{args.model}-{dataset.name}-{split}"
    if out.is_dir() and taken(out):  # the default folder: --out's was checked with the flags
        running = in_use(out)
        if running or any((out / name).exists() for name in (*SEARCH_FILES, SEARCH_RUN_FOLDER)):
            raise RecsysError(
                f"{out} already holds a search{' running now' if running else ''}; name another with --out"
            )
        raise RecsysError(f"{out} already holds other files (no search's); name another folder with --out")
    ranks = model_entry(args.model).ranks  # scored by its lists' NDCG@10, the higher the better
    label, better = ("valid NDCG@10", max) if ranks else ("valid RMSE", min)
    best_so_far = -math.inf if ranks else math.inf
    best_shown, tried = "", 0  # the best setting so far, as printed, and how many were tried
    planned = planned_trials(_tuned_config(args), args.trials)  # a grid smaller than --trials: all of it

    def report(number: int, setting: dict[str, Any], score: float) -> None:
        nonlocal best_so_far, best_shown, tried
        shown = " ".join(f"{name}={_shown(value)}" for name, value in setting.items())
        if better(best_so_far, score) != best_so_far:  # a better score (a NaN never is)
            best_so_far, best_shown = score, shown
        tried = number
        print(
            f"{number:>4}/{planned}  {label} {score:.4f}  (best {best_so_far:.4f})  {shown}  "
            f"[{time.perf_counter() - start:.0f} s]",
            flush=True,
        )

    # Claimed before the search, so that a path that cannot be a folder fails now and a second search
    # into it is refused, not run to collide with this one's files; a search that fails leaves no
    # folder behind.
    with claim_run_folder(out, resume=False, name="`out`"):
        print(
            f"tuning {args.model} on the training part of {dataset.name} split {split}: {planned} "
            f"settings, {args.folds}-fold cross-validation inside it; the test part is read once, at the end"
        )
        start = time.perf_counter()
        try:
            result = tune(
                dataset,
                args.model,
                split,
                engine=args.engine,
                trials=args.trials,
                folds=args.folds,
                seed=args.seed,
                threads=args.threads,
                on_trial=report,
                run_dir=out / SEARCH_RUN_FOLDER,
                features=args.features,
                ordinal=args.ordinal,
            )
            write_text(out / "trials.csv", result.table.to_csv(index=False))
            plot_trials(result.table, out / "trials.png", result.best, result.score)
            write_json(out / "best.json", best_settings(result))
        except BaseException as error:
            # Stopped, or a file that could not be written (a full disk): none of the search's files
            # stays, so that the folder is never a search without its best.json. Stopped while the best
            # setting was retrained, that run's folder goes too (a ranking model's holds its last
            # epoch, saved before the lists are scored).
            shutil.rmtree(out / SEARCH_RUN_FOLDER, ignore_errors=True)
            for name in SEARCH_FILES:
                (out / name).unlink(missing_ok=True)
            if isinstance(error, KeyboardInterrupt | Terminated) and best_shown:  # what it found is not lost
                print(
                    f"stopped after {tried} of {planned} settings, nothing written; the best so far: "
                    f"{best_shown}  ({label} {best_so_far:.4f})",
                    file=sys.stderr,
                )
            raise
    shown = " ".join(f"{name}={_shown(value)}" for name, value in result.best.items())
    print(f"best setting: {shown}  ({label} {result.table.at[0, result.score]:.4f})", file=sys.stdout)
    print(f"{test_summary(result.run, dataset.implicit)}  (read once, now)")
    # best.json holds the settings alone (it may train other data): the data, split and seed are flags.
    again = " ".join(
        part
        for part in (
            f"{command_named('train')} --config {shlex.quote(str(out / 'best.json'))}",
            data_flags(args),
            f"--split {split}",
            f"--seed {args.seed}" if args.seed else "",
        )
        if part
    )
    print(f"written: {out}/ ({', '.join(SEARCH_FILES)}, run/); `{again}` trains the best setting again")
    return 0


def _tuned_config(args: argparse.Namespace) -> RunConfig:
    """The model's config as the search starts from it: its engine, feature groups and ordinal where
    given, and the seed (checked with the other flags, before the data is read)."""
    given: dict[str, Any] = {"seed": args.seed}
    given |= {"engine": args.engine} if args.engine else {}
    given |= {"features": args.features} if args.features is not None else {}
    given |= {"ordinal": True} if args.ordinal else {}
    return config_for(args.model or default_model(False), **given)


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def cli() -> None:
    """The `recsys-tune` console command."""
    run(main)
