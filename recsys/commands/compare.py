"""Train every model on the same split and write a report folder: `python scripts/compare.py --split u1`.

`--split folds` runs ml-100k's five predefined folds u1..u5 and reports mean and spread; the bias
analysis is read from the first fold.
"""

import argparse
import math
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from recsys.commands.common import (
    CommandParser,
    add_data_flags,
    check_data_flags,
    dataset_from_flags,
    path_flag,
    progress_shown,
    run,
)
from recsys.config import ENGINES, UNKNOWN_POLICIES, config_for
from recsys.errors import RecsysError
from recsys.models.registry import model_entry, model_names
from recsys.names import PREDEFINED_FOLDS, SPLIT_KINDS

if TYPE_CHECKING:
    from recsys.data.dataset import RatingsDataset
    from recsys.workflows.experiment import RunResult

FOLDS = PREDEFINED_FOLDS[:5]  # u1..u5: together they test every rating once
COST_SIZES = (1_000, 10_000, 100_000)
# Above this many ratings a comparison of every model is warned about before it starts: each model's
# final lists rank every user against every item, and the samplers are sized for ML-1M and below.
LARGE_COMPARISON = 2_000_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # Defaults are written into the help by hand: argparse's own would print "None" for the flags
    # whose default is worked out later.
    parser = CommandParser(description=__doc__)
    add_data_flags(parser)
    parser.add_argument(
        "--split",
        choices=[*SPLIT_KINDS, "folds"],
        default=None,
        help="split, or folds (u1..u5) [default: u1 for ml-100k, which comes with it; else random]",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=model_names(),
        default=None,
        help=f"models to train [default: every one that trains on the data and --engine: "
        f"{' '.join(model_names())}; on interactions, the ranking models]",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed for splits, initialisation and shuffle [default: 0]"
    )
    parser.add_argument(
        "--unknown", choices=UNKNOWN_POLICIES, default="drop", help="unseen-id policy [default: drop]"
    )
    parser.add_argument(
        "--relevant",
        type=_relevant,
        default=None,
        metavar="RATING|all",
        help="a test rating at or above RATING is relevant to its user in the top-N lists; all: every "
        "test item [default: 3/4 of the way up the rating scale, 4 on 1-5 stars]",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="override every model's epochs (quick looks) [default: each model's tuned epochs]",
    )
    parser.add_argument(
        "--engine",
        choices=("auto", *ENGINES),
        default="auto",
        help="train every model on this engine (autograd: the one every model has); auto: each "
        "model's default, compiled where it has one [default: auto]",
    )
    parser.add_argument(
        "--cost-sizes",
        type=int,
        nargs="+",
        default=list(COST_SIZES),
        help="table sizes (users) for the embedding-versus-Linear cost measurements "
        f"[default: {' '.join(map(str, COST_SIZES))}]",
    )
    parser.add_argument(
        "--no-measurements",
        action="store_true",
        help="skip the embedding-versus-Linear and bias-before-norm measurements, "
        "saving the minutes they take after training",
    )
    parser.add_argument(
        "--out",
        type=path_flag,
        default=None,
        help="report folder: new, empty, or an earlier report's, whose files are replaced once the new "
        "report is whole (stopped, the comparison writes nothing) [default: reports/<dataset>-<split>]",
    )
    return parser.parse_args(argv)


def _relevant(text: str) -> float | Literal["all"]:
    """--relevant's value: a finite rating, or "all"."""
    if text.strip().casefold() == "all":
        return "all"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rating or 'all', got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite rating, got {text!r}")
    return value


def say(line: str) -> None:
    """A progress line on stderr, so stdout keeps only the results."""
    print(line, file=sys.stderr)


def _say_trained(result: "RunResult", number: int, count: int) -> None:
    say(f"{result.config.model} trained in {result.seconds:.1f} s ({number}/{count})")


def default_models(implicit: bool, engine: str | None) -> list[str]:
    """Every model that trains on the data (interactions: the ranking models alone) with `engine`."""
    chosen = []
    for name in model_names():
        if implicit and not model_entry(name).ranks:
            continue
        try:
            config_for(name, engine=engine)
        except RecsysError:  # no such engine for it (a ranking model on the autograd engine)
            continue
        chosen.append(name)
    if not chosen:
        raise RecsysError(
            f"no model trains on {'interactions' if implicit else 'ratings'} with --engine {engine}"
        )
    return chosen


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_data_flags(args)
    if not args.no_measurements and (small := [size for size in args.cost_sizes if size < 1]):
        raise RecsysError(f"--cost-sizes must be at least 1 user each, got {small[0]}")
    engine = None if args.engine == "auto" else args.engine
    if args.models is not None and (twice := [n for k, n in enumerate(args.models) if n in args.models[:k]]):
        raise RecsysError(f"--models names {twice[0]} twice: name each model once")
    for name in args.models or []:  # a model without the engine asked for: an error before any training
        config_for(name, engine=engine, epochs=args.epochs)
    dataset = dataset_from_flags(args)
    if args.models is None:
        args.models = default_models(dataset.implicit, engine)
        if len(dataset.ratings) > LARGE_COMPARISON:
            warnings.warn(
                f"{len(dataset.ratings):,} {'pairs' if dataset.implicit else 'ratings'}: every model "
                f"({', '.join(args.models)}) trains and ranks every user's list on them, hours at this "
                "size (bpmf and bfm are meant for ML-100K to ML-1M); name the ones to compare with --models",
                stacklevel=2,
            )
    if args.split is None:
        args.split = dataset.default_split
    splits = FOLDS if args.split == "folds" else (args.split,)
    if args.split == "folds" and not set(FOLDS) <= set(dataset.folds):
        raise RecsysError(
            f"--split folds runs ml-100k's predefined folds u1..u5; the dataset is {dataset.name}, "
            "which comes without them"
        )
    from recsys.workflows.report import claim_report_folder, earlier_data

    out = args.out or Path("reports") / f"{dataset.name}-{args.split}"
    with claim_report_folder(out) as earlier:  # a run that fails leaves no folder it made behind
        if earlier:
            this = dataset.origin.get("ratings") or dataset.name
            if (was := earlier_data(out)) is not None and was != this:
                raise RecsysError(f"--out {out} holds the report of other data ({was}); choose another --out")
            print(f"the report in {out} will be replaced", file=sys.stderr)
        return _compare_into(args, dataset, splits, engine, out)


def _compare_into(
    args: argparse.Namespace,
    dataset: "RatingsDataset",
    splits: tuple[str, ...],
    engine: str | None,
    out: Path,
) -> int:
    """Train and score every model on each split, then write the report into `out`."""
    import pandas as pd

    from recsys.data.catalog import planted_truth
    from recsys.workflows.compare import Comparison, compare_models, measurement_sections
    from recsys.workflows.report import RANKING_COLUMNS, fold_summary, ranking_summary, write_report

    comparisons: list[Comparison] = []
    for split in splits:
        print(f"training {', '.join(args.models)} on {dataset.name}, split {split}")
        comparisons.append(
            compare_models(
                dataset,
                split,
                models=args.models,
                seed=args.seed,
                unknown=args.unknown,
                truth=planted_truth(dataset),
                progress=progress_shown(args),
                relevant="scale" if args.relevant is None else args.relevant,
                engine=engine,
                epochs=args.epochs,
                on_trained=_say_trained,
            )
        )
    fold_scores = fold_ranking = None
    if len(comparisons) > 1:
        fold_scores = pd.concat(
            [c.score_table().assign(fold=c.split) for c in comparisons], ignore_index=True
        )
        fold_ranking = pd.concat([c.ranking.assign(fold=c.split) for c in comparisons], ignore_index=True)
    sections = (
        {} if args.no_measurements else measurement_sections(comparisons[0], args.cost_sizes, progress=say)
    )
    report = write_report(
        comparisons[0], out, fold_scores=fold_scores, fold_ranking=fold_ranking, extra_sections=sections
    )
    table = fold_summary(fold_scores) if fold_scores is not None else comparisons[0].score_table()
    if dataset.implicit:  # an RMSE of counts compares nothing: the lists below judge every model
        table = table.drop(columns=[c for c in table.columns if c.startswith(("rmse", "mae"))])
    print(table.to_string(index=False, na_rep="", float_format=lambda v: f"{v:.4f}"))
    ranking = [name for name in table["model"] if name in model_names() and model_entry(name).ranks]
    if ranking and not dataset.implicit:
        print(f"{', '.join(ranking)}: rank items and predict no rating, so no RMSE or MAE (lists below)")
    lists = (
        ranking_summary(fold_ranking)
        if fold_ranking is not None
        else comparisons[0].ranking[["model", *RANKING_COLUMNS[:5], "coverage@10"]]
    )
    print(lists.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"report: {report}")
    return 0


def cli() -> None:
    """The `recsys-compare` console command."""
    run(main)
