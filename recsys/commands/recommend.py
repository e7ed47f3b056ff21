"""Use a trained run: `python scripts/recommend.py RUN_DIR --user 196` (or --similar ITEM, --explain,
or --rate "TITLE=RATING" ... for a new user).

The checkpoint holds no ratings or titles: what each user rated and the items' titles come from the
run folder's recommend.npz, written at training (the data is read again only for the feature table of
a new user's cold start, on a model that reads side features).
"""

import argparse
import json
import shlex
import sys
import warnings
from pathlib import Path

from recsys.commands.common import CommandParser, command_named, path_flag, run
from recsys.config import RunConfig, differences
from recsys.errors import RecsysError
from recsys.files import read_file
from recsys.names import CHECKPOINT_FILE, CONFIG_FILE, RECOMMEND_FILE, SEARCH_RUN_FOLDER
from recsys.workflows.rated_items import rating_pair, read_rated

# Items a list holds unless --top says otherwise.
DEFAULT_TOP = 10


def _rating_pair(text: str) -> tuple[str, float]:
    """--rate's TITLE=RATING; argparse reports a malformed one."""
    try:
        return rating_pair(text)
    except RecsysError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def check_checkpoint_is_the_runs(run_dir: Path, trained: RunConfig) -> None:
    """The run folder's config.json and its checkpoint (trained with `trained`) must be one run's: a
    checkpoint copied in from another run (another model, data or seed) would be used with this one's
    data and words."""
    try:
        written = RunConfig.from_dict(json.loads(read_file(run_dir / CONFIG_FILE)))
    except (OSError, ValueError, TypeError, AttributeError, RecsysError):
        return  # no config.json to go by: the checkpoint speaks for itself
    if differ := differences(written, trained):
        raise RecsysError(
            f"{run_dir}: its {CONFIG_FILE} says {differ} in its {CHECKPOINT_FILE}: the checkpoint is "
            "another run's"
        )


def _is_a_report(folder: Path) -> bool:
    """Whether `folder`, given for a run folder, holds a comparison's report (its results.json)."""
    from recsys.workflows.report import comparison_results  # matplotlib: only where there is no model

    return comparison_results(folder) is not None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=__doc__)
    parser.add_argument("run_dir", type=path_flag, metavar="RUN_DIR", help="a run folder written by train.py")
    query = parser.add_mutually_exclusive_group(required=True)
    query.add_argument("--user", help="raw user id: recommend the items they have not rated")
    query.add_argument(
        "--similar", metavar="ITEM", help="an exact title (any case), or an item id: its nearest items"
    )
    query.add_argument(
        "--rate",
        action="append",
        type=_rating_pair,
        metavar="TITLE=RATING",
        help="a new user's rating of an item (a title or an id), repeated for each: their top items, "
        "the user folded into the trained model from these ratings",
    )
    query.add_argument(
        "--ratings-of",
        type=path_flag,
        metavar="FILE",
        help="a new user's ratings as a CSV file with item and rating columns: as --rate (on a run "
        "trained on interactions, an item column alone does: each line one event)",
    )
    parser.add_argument("--top", type=int, help=f"how many items to list [default: {DEFAULT_TOP}]")
    parser.add_argument(
        "--cold-start",
        action="store_true",
        help="with --user: a user unseen in training gets items ranked by item bias or popularity",
    )
    parser.add_argument(
        "--explain", action="store_true", help="with --user and --item: the prediction's parts"
    )
    parser.add_argument("--item", help="raw item id for --explain")
    parser.add_argument(
        "--data-dir",
        type=path_flag,
        default=None,
        help="local copy of the run's dataset, for a cold start placed by side features [default: where "
        "the run read it, else the usual lookup]",
    )
    parser.add_argument("--offline", action="store_true", help="never download")
    args = parser.parse_args(argv)
    if args.explain != (args.item is not None) or (args.explain and args.user is None):
        parser.error("--explain needs --user and --item, and --item is only for --explain")
    if args.cold_start and args.user is None:
        parser.error("--cold-start goes with --user")
    if args.cold_start and args.explain:
        parser.error("--cold-start is for a new user's top items; --explain needs a user the model knows")
    if args.explain and args.top is not None:
        parser.error("--top is for a list; --explain explains one prediction (--item)")
    args.top = DEFAULT_TOP if args.top is None else args.top
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # After the flags are checked: torch and pandas take seconds to load.
    import pandas as pd

    from recsys.config import reads_features
    from recsys.data.catalog import recorded_user_features
    from recsys.train.checkpoints import load_checkpoint
    from recsys.workflows.experiment import recorded_data
    from recsys.workflows.recommend import (
        cold_start,
        described_by_features,
        explain,
        knows_user,
        recommend,
        recommend_from_ratings,
        similar_items,
    )
    from recsys.workflows.recommend_data import RecommendData
    from recsys.workflows.run_folder import why_no_checkpoint

    if not args.run_dir.is_dir():  # a checkpoint file given for its folder, a mistyped path
        what = "a file: give the run folder that holds it" if args.run_dir.exists() else "no such folder"
        raise RecsysError(f"{args.run_dir} is not a run folder ({what})")
    if not (args.run_dir / CHECKPOINT_FILE).exists():  # another command's folder, or a run cut short
        inside = args.run_dir / SEARCH_RUN_FOLDER
        if (inside / CHECKPOINT_FILE).exists():
            raise RecsysError(f"{args.run_dir} is a tune.py search; the run it trained is {inside}")
        if _is_a_report(args.run_dir):
            raise RecsysError(
                f"{args.run_dir} is a {command_named('compare')} report, which keeps no trained model; "
                f"train one to recommend from with {command_named('train')} --model MODEL --out FOLDER"
            )
        if why := why_no_checkpoint(args.run_dir):
            raise RecsysError(f"{args.run_dir} has no {CHECKPOINT_FILE} to recommend from{why}")
    checkpoint = load_checkpoint(args.run_dir / CHECKPOINT_FILE)
    check_checkpoint_is_the_runs(args.run_dir, checkpoint.config)
    # A checkpoint written before the run's metrics has one: one of a run stopped short, or a ranking
    # model's last epoch, saved before its final lists were scored (trained in full: nothing to say).
    stopped = checkpoint.metrics.get("epoch")
    if stopped is not None and stopped < checkpoint.config.epochs:
        warnings.warn(
            f"{args.run_dir}: its run stopped after epoch {stopped} of {checkpoint.config.epochs}, so these "
            f"come from a model half trained; `{command_named('train')} --resume "
            f"{shlex.quote(str(args.run_dir))}` finishes it",
            stacklevel=1,
        )
    # parse_args guarantees --user with --explain and --cold-start, and --item with --explain.
    user = None if args.user is None else checkpoint.users.parse(args.user, "user")
    if args.explain:
        assert user is not None
        item = checkpoint.items.parse(args.item, "item")
        print(pd.DataFrame([explain(checkpoint, user, item)]).to_string(index=False))
        return 0
    data = RecommendData.load(args.run_dir / RECOMMEND_FILE, checkpoint.users, checkpoint.items)
    if args.rate is not None:
        table = recommend_from_ratings(checkpoint, data, args.rate, args.top)
    elif args.ratings_of is not None:
        read = read_rated(args.ratings_of, data.implicit)
        table = recommend_from_ratings(checkpoint, data, read.rated, args.top, read.places, ids=read.ids)
    elif user is None:
        table = similar_items(checkpoint, data, args.similar, args.top)
    elif args.cold_start and not knows_user(checkpoint, user):
        # A row of the users' feature file places a new user: it is read again, as it may have grown.
        features = None
        if reads_features(checkpoint.config.model, checkpoint.config.engine):
            features = recorded_user_features(
                recorded_data(args.run_dir),
                checkpoint.config.dataset,
                args.data_dir,
                allow_download=not args.offline,
            )
        placed = ", placed by its side features" if described_by_features(checkpoint, features, user) else ""
        print(f"user {user} is new to this model: a cold start{placed}", file=sys.stderr)
        table = cold_start(checkpoint, data, args.top, user, features)
    else:
        table = recommend(checkpoint, data, user, args.top)
    if table.empty:  # pandas would print "Empty DataFrame" and its columns
        why = f"user {user} has rated every item this model knows" if user is not None else "no other items"
        print(f"no items to list: {why}", file=sys.stderr)
        return 0
    print(table.to_string(index=False))
    return 0


def cli() -> None:
    """The `recsys-recommend` console command."""
    run(main)
