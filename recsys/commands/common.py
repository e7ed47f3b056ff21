"""What the command-line scripts share: the data flags and turning user errors into one line.

Importing it is cheap (no torch, pandas or numba at module level), so a script can parse and check
its flags, and answer `--help` or a mistake, before it loads the libraries that do the work.
"""

import argparse
import contextlib
import io
import math
import os
import re
import shlex
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from recsys.errors import DataUnavailable, RecsysError
from recsys.names import DATASETS, MOVABLE_FILES, PREDEFINED_FOLDS

if TYPE_CHECKING:
    from recsys.config import RunConfig
    from recsys.data.dataset import RatingsDataset
    from recsys.workflows.experiment import RunResult


# recsys.data.columns' TABLE_FIELDS, not imported: it would bring pandas before the flags are checked.
TABLE_FIELDS = ("user", "item", "rating", "timestamp", "weight")


# A setting's name -> the flag that sets it, from the parser of the command running: the library
# names settings (`batch_size`), a command's user knows flags (--bs).
_FLAG_OF: dict[str, str] = {}


def in_flags(message: str) -> str:
    """A library message in a shell user's words: each `setting` it names as the flag that sets it
    (RunConfig's from their Settings, the rest from the command's parser); others as they are. A
    RunConfig setting the running command has no flag for is named as train's flag (as the user runs
    train), so that no message asks for a flag the command would refuse (tune and compare have no
    --test-frac), and one that no flag sets (`relevant`) as a key of a --config file; so is a run's
    file (`ratings`, `user_features`) where the command reads none (recommend, naming where to give a
    moved one)."""
    from recsys.config import SETTINGS

    def flag(match: re.Match[str]) -> str:
        setting = SETTINGS.get(match[1])
        if setting is not None and setting.flag is not None:
            if _FLAG_OF and setting.flag not in _FLAG_OF.values():
                return f"{command_named('train')}'s {setting.flag}"
            return setting.flag
        if _FLAG_OF and match[1] not in _FLAG_OF and match[1] in MOVABLE_FILES:  # recommend.py has none
            return f"{command_named('train')}'s --{match[1].replace('_', '-')}"
        if setting is not None and match[1] not in _FLAG_OF:  # a setting no flag sets: a --config key
            if not _FLAG_OF or "config" in _FLAG_OF:
                config = "a --config file"
            else:
                config = f"{command_named('train')}'s --config file"
            return f'"{match[1]}" in {config}'
        return _FLAG_OF.get(match[1], match[0])

    return re.sub(r"`([a-z][a-z0-9_]*)`", flag, message)


NUMBER = r"((\d+\.?\d*|\.\d+)(e[-+]?\d+)?|inf(inity)?|nan)"  # as float() reads one, less its sign


class CommandParser(argparse.ArgumentParser):
    """argparse's parser with its errors as one `error:` line, as the commands' own checks give them,
    instead of a usage block over a dozen lines above the message; its flags are what `in_flags`
    names settings by."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # argparse takes "-5" and "-0.5" for values, but "-1e6", "-inf" and "-1,1" for flags
        # (`--rating-scale -10,10` was "expected one argument"): each is a value too, which the flag's
        # own check then reads. No flag here looks like one.
        self._negative_number_matcher = re.compile(rf"^-{NUMBER}(,\s*-?{NUMBER})*$", re.IGNORECASE)
        if self.description and not self.prog.endswith(".py"):  # a console command: name it as typed
            self.description = re.sub(r"python scripts/\w+\.py", self.prog, self.description)

    def parse_known_args(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        for action in self._actions:
            long = [option for option in action.option_strings if option.startswith("--")]
            if long:
                _FLAG_OF.setdefault(action.dest, long[0])
        self._args = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, *rest, **kwargs)

    def error(self, message: str) -> NoReturn:
        # A value that starts with "-" (Yelp's ids: "-MtJ-RADfbTs51BtZ2aD1c") is taken for a flag.
        named = re.fullmatch(r"argument (--[\w-]+)(?:/\S+)?: expected one argument", message)
        flag, args = named[1] if named else "", getattr(self, "_args", [])
        value = args[args.index(flag) + 1] if flag in args[:-1] else ""
        if value.startswith("-") and value.split("=")[0] not in self._option_string_actions:
            message += f"; a value that starts with '-' is given joined to its flag: {flag}={value}"
        self.exit(2, f"error: {message} ({self.prog} --help lists the flags)\n")


def columns_flag(text: str) -> dict[str, str]:
    """`--columns user=A,item=B[,rating=C][,timestamp=D][,weight=E]` as a mapping (no rating: the
    file holds interactions); argparse reports a bad one."""
    columns: dict[str, str] = {}
    for part in text.split(","):
        field, sep, column = part.partition("=")
        field, column = field.strip(), column.strip()
        if field in columns:
            raise argparse.ArgumentTypeError(f"{text!r} names the {field} column twice")
        if not sep or field not in TABLE_FIELDS or not column:
            raise argparse.ArgumentTypeError(
                f"expected user=COLUMN,item=COLUMN[,rating=COLUMN][,timestamp=COLUMN][,weight=COLUMN], "
                f"got {text!r}"
            )
        columns[field] = column
    missing = [field for field in TABLE_FIELDS[:2] if field not in columns]
    if missing:
        raise argparse.ArgumentTypeError(f"{text!r} names no {' or '.join(missing)} column")
    return columns


def scale_flag(text: str) -> tuple[float, float]:
    """`--rating-scale LO,HI` as numbers with LO < HI; argparse reports a bad one."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI (e.g. 1,10), got {text!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise argparse.ArgumentTypeError(f"expected finite LO < HI, got {text!r}")
    return low, high


def sep_flag(text: str) -> str:
    """`--sep`: one character; `\\t` (as a shell passes it) stands for a tab."""
    sep = {"\\t": "\t", "tab": "\t"}.get(text, text)
    if len(sep) != 1:
        raise argparse.ArgumentTypeError(f"expected one character (or \\t for a tab), got {text!r}")
    return sep


def path_flag(text: str) -> Path:
    """A path flag's value with a leading `~` as the home folder: a shell leaves `--out=~/runs` (and a
    quoted `~`) as typed, which would make a folder named `~` in the working folder."""
    return Path(text).expanduser()


def add_data_flags(parser: argparse.ArgumentParser) -> None:
    """--dataset, --data-dir, --ratings and its companions, --offline and --no-progress."""
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        default=None,
        help="dataset; unset: ml-100k, or built-in synthetic data when ml-100k cannot be had",
    )
    parser.add_argument(
        "--data-dir",
        type=path_flag,
        default=None,
        help="local unpacked dataset folder, its parent, or its .zip "
        "(else $RECSYS_DATA, the cache, then a download)",
    )
    own = parser.add_argument_group("your own data (instead of --dataset)")
    own.add_argument(
        "--ratings",
        type=path_flag,
        default=None,
        help="a ratings file: CSV, TSV or another one-character separator, with or without a header, "
        "plain or gzip/bz2/xz/zstd, or Parquet; ids may be integers or strings",
    )
    own.add_argument(
        "--columns",
        type=columns_flag,
        default=None,
        help="the file's columns, e.g. user=userId,item=isbn,rating=score[,timestamp=ts] "
        "(interactions: weight=plays, or none) "
        "[default: found by common names, or user, item, rating[, timestamp] by position]",
    )
    own.add_argument(
        "--sep",
        type=sep_flag,
        default=None,
        help="the file's one-character separator, e.g. ';' or '\\t' [default: found from the first lines]",
    )
    own.add_argument(
        "--items",
        type=path_flag,
        default=None,
        help="an item table with an id and a title column (and genres)",
    )
    own.add_argument(
        "--rating-scale",
        type=scale_flag,
        default=None,
        metavar="LO,HI",
        help="the ratings' scale; a rating outside it is an error; a negative LO is written "
        "--rating-scale=-10,10 [default: read from the data]",
    )
    own.add_argument(
        "--implicit",
        action="store_true",
        help="read --ratings as interactions (views, plays, purchases): repeats of a user-item pair are "
        "summed, a rating-like column is each event's weight; a file without a rating column is read "
        "so anyway",
    )
    for side, example, readers in (
        ("user", "user,age,occupation", "bfm and svdpp"),
        ("item", "item,genres,year", "bfm"),
    ):
        parser.add_argument(
            f"--{side}-features",
            type=path_flag,
            default=None,
            metavar="FILE",
            help=f"a table of what each {side} is, for {readers} (e.g. columns {example}): an id column, "
            "then one column per feature, numbers or categories ('|' between several) [default: the "
            "data's own: MovieLens' demographics, genres, years and tags]",
        )
    parser.add_argument("--offline", action="store_true", help="never download")
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bars (drawn only where stderr is a terminal)"
    )


def progress_shown(args: argparse.Namespace) -> bool:
    """Whether the command draws progress bars and status lines: not with --no-progress, and only on a
    terminal. Redirected (`> log 2>&1`, nohup.out) every redraw stayed in the file, carriage returns
    and all, ten a second; with stderr closed (`2>&-`) the first one failed."""
    return not args.no_progress and sys.stderr is not None and sys.stderr.isatty()


def reading_flags(args: argparse.Namespace) -> list[tuple[str, object]]:
    """The flags that say how a --ratings file is read, with their values (None: not given)."""
    return [
        ("--columns", args.columns),
        ("--sep", args.sep),
        ("--rating-scale", args.rating_scale),
        ("--implicit", args.implicit or None),
    ]


def check_data_flags(args: argparse.Namespace) -> None:
    """--ratings replaces --dataset and --data-dir; its companions need it."""
    if args.ratings is not None and (args.dataset is not None or args.data_dir is not None):
        raise RecsysError("--ratings names the data itself; drop --dataset and --data-dir")
    for flag, value in [*reading_flags(args), ("--items", args.items)]:
        if value is not None and args.ratings is None:
            raise RecsysError(f"{flag} describes a --ratings file; add --ratings PATH")


def command_named(name: str) -> str:
    """How to run the command `name` as this one was run, for a line that names it to run next:
    `python -m recsys NAME`, the console command `recsys-NAME`, or the script `NAME.py`."""
    program = Path(sys.argv[0]).name
    if program.startswith("python -m recsys"):
        return f"python -m recsys {name}"
    return f"recsys-{name}" if program.startswith("recsys-") else f"{name}.py"


def data_flags(args: argparse.Namespace) -> str:
    """The data flags `args` were given, as a shell command line repeats them: a command that names
    another to run next (tune.py's `train.py --config ...`) must name the same data, or it trains
    ml-100k (or synthetic data) in place of the user's file."""
    shown: list[str] = []
    for flag, value in (
        ("--dataset", args.dataset),
        ("--data-dir", args.data_dir),
        ("--ratings", args.ratings),
        (
            "--columns",
            ",".join(f"{field}={name}" for field, name in args.columns.items()) if args.columns else None,
        ),
        ("--sep", "\\t" if args.sep == "\t" else args.sep),
        ("--items", args.items),
        ("--user-features", getattr(args, "user_features", None)),
        ("--item-features", getattr(args, "item_features", None)),
    ):
        if value is not None:
            shown += [flag, shlex.quote(str(value))]
    if args.rating_scale is not None:  # one word: a negative LO would read as a flag
        shown.append(f"--rating-scale={args.rating_scale[0]:g},{args.rating_scale[1]:g}")
    if args.implicit:
        shown.append("--implicit")
    return " ".join(shown)


def dataset_from_flags(args: argparse.Namespace) -> "RatingsDataset":
    """Load the dataset the flags name, printing the note when it falls back to synthetic data.

    Under torchrun, rank 0 loads (and if need be downloads) first and the others then read its cache.
    """
    import torch

    from recsys.data.catalog import resolve_dataset, with_feature_files
    from recsys.train.distributed import distributed_rank

    rank, world_size = distributed_rank()
    if args.ratings is not None:  # a local file: nothing to download, every rank reads it
        return with_feature_files(ratings_from_flags(args, announce=rank == 0), *_feature_flags(args))
    if world_size > 1 and rank != 0:
        torch.distributed.barrier()
    split = getattr(args, "split", None)
    needs_folds = split in PREDEFINED_FOLDS or split == "folds"  # only ml-100k has them: no fallback
    try:
        dataset, note = resolve_dataset(
            args.dataset,
            args.data_dir,
            progress=progress_shown(args) and rank == 0,
            allow_download=not args.offline,
            fallback=not needs_folds,
        )
    except DataUnavailable as error:
        if needs_folds and args.dataset is None and args.data_dir is None:
            raise DataUnavailable(
                f"--split {split} takes ml-100k's predefined folds, and ml-100k is not available: {error}"
            ) from None
        raise
    if world_size > 1 and rank == 0:
        torch.distributed.barrier()
    if note and rank == 0:
        print(in_flags(note), file=sys.stderr)
    return with_feature_files(dataset, *_feature_flags(args))


def _feature_flags(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    return getattr(args, "user_features", None), getattr(args, "item_features", None)


def ratings_from_flags(args: argparse.Namespace, *, announce: bool) -> "RatingsDataset":
    """The --ratings file read as its companion flags say, its rating scale (or its interactions)
    printed."""
    from recsys.data.dataset import describe_scale
    from recsys.data.ratings_file import load_ratings

    dataset = load_ratings(
        args.ratings,
        columns=args.columns,
        sep=args.sep,
        items=args.items,
        rating_scale=args.rating_scale,
        implicit=True if args.implicit else None,
    )
    if announce and dataset.implicit:
        print(f"interactions: {describe_scale(dataset)}", file=sys.stderr)
    elif announce:
        given = "given" if args.rating_scale is not None else "read from the data"
        print(f"ratings: {describe_scale(dataset)} ({given})", file=sys.stderr)
    return dataset


class Terminated(BaseException):
    """SIGTERM (a `kill`, a scheduler's or container's stop), raised in the main thread as Ctrl-C
    raises KeyboardInterrupt, so that the same cleanup runs: a download's partial file, a fresh run
    folder without a checkpoint."""

    signum = signal.SIGTERM
    said = "terminated"


class HungUp(Terminated):
    """SIGHUP: the terminal or ssh session the command ran in closed. Its default action ended the
    process without the cleanup, leaving a fresh run folder without a checkpoint, or a tune.py --out
    holding only its lock, which the search run again refused as taken."""

    signum = signal.SIGHUP
    said = "hung up"


# The interruptions the process was sent, as raised: a handler records each before raising it.
_RECEIVED: list[type[BaseException]] = []
# Set once the command's main has ended: an interruption then has nothing left to stop, and raised
# as run() ends (a Ctrl-C on seeing the last line) it was a traceback over a finished command's output.
_MAIN_ENDED = threading.Event()


def _raising(interruption: type[BaseException]) -> Callable[[int, object], None]:
    """A signal handler that records `interruption` and raises it, until main has ended."""

    def handler(signum: int, frame: object) -> None:
        _RECEIVED.append(interruption)
        if not _MAIN_ENDED.is_set():
            raise interruption

    return handler


def _unraisable(report: Any) -> None:
    """sys.unraisablehook, quiet about an interruption a callback could not raise (numba's, while it
    compiles): `_interruption` makes it the command's end."""
    if not isinstance(report.exc_value, KeyboardInterrupt | Terminated):
        sys.__unraisablehook__(report)


def _interruption(error: BaseException) -> BaseException | None:
    """The Ctrl-C or SIGTERM behind `error`, if any. One that lands while a numba-compiled function
    runs Python inside (unpickling a constant) comes out wrapped in SystemErrors; one that lands
    while numba compiles is swallowed by a ctypes callback, and numba then fails with an error of its
    own ("no compiled object yet"): any error after an interruption was received is taken for it."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt | Terminated):
            return seen
        seen = seen.__cause__ or seen.__context__
    return _RECEIVED[-1]() if _RECEIVED else None


# The warnings a command has shown: each is shown once (tune.py's trials and folds each fit a model,
# and each fit warned alike).
_SHOWN: set[str] = set()


def _show_once(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """warnings.showwarning for a command: a warning's line, unless the command has shown it."""
    text = warnings.formatwarning(message, category, filename, lineno, line)
    if text not in _SHOWN:
        _SHOWN.add(text)
        (file or sys.stderr).write(text)


def run(main: Callable[[], int]) -> None:
    """Run a script's main and end the process with its code: a user's mistake (RecsysError) is one
    `error:` line and exit code 2, and a warning one `warning:` line. A bug's exception propagates,
    with its traceback. Ctrl-C ends with 130, SIGTERM with 143, SIGHUP with 129 and a closed output pipe
    with 141, each after the cleanup it triggers."""
    warnings.formatwarning = lambda message, *args, **kwargs: f"warning: {in_flags(str(message))}\n"
    warnings.showwarning = _show_once
    _SHOWN.clear()
    _escape_what_cannot_be_encoded()
    # Only in the main thread can a handler be set. Under torchrun too: its agent passes a SIGTERM (or
    # Ctrl-C) on to every worker, which cleans up as one process does. A worker blocked in a collective
    # runs the handler once the collective returns, or fails as a peer leaves (gloo); one that never
    # returns is killed by the agent after its grace period (30 s), as the default action would have.
    handles_term = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, _raising(Terminated)) if handles_term else None
    # Ctrl-C raises as Python's own handler does, recorded (left alone where it is ignored: a job
    # started in the background).
    handles_int = handles_term and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if handles_int:
        signal.signal(signal.SIGINT, _raising(KeyboardInterrupt))
    # A hang-up ends the command as SIGTERM does; left alone where it is ignored (`nohup`).
    handles_hup = handles_term and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    if handles_hup:
        signal.signal(signal.SIGHUP, _raising(HungUp))
    _RECEIVED.clear()
    _MAIN_ENDED.clear()
    hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    try:
        end_process(_exit_code(main))
    finally:  # for a caller in this process (a test's end_process returns); a command's ends above
        if handles_term:
            signal.signal(signal.SIGTERM, before)
        if handles_int:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if handles_hup:
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
        sys.unraisablehook = hook


def _escape_what_cannot_be_encoded() -> None:
    """stdout writes a character its encoding lacks escaped (`\\xe9`), as Python's stderr does: under
    PYTHONIOENCODING=ascii a title or path such as `résultats` ended a finished run in a
    UnicodeEncodeError."""
    for stream in filter(None, (sys.stdout, sys.stderr)):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")


def _own_warning(error: BaseException) -> bool:
    """Whether `error` is one of recsys's warnings raised as an error (`python -W error`,
    PYTHONWARNINGS=error): what it warns of is then the command's end, said in one line as a user's
    mistake is, where it was a traceback. Another package's warning keeps its traceback: numpy's and
    torch's are raised inside the call, so recsys's line that made one holds that call, not a
    `warnings.warn(`."""
    if not isinstance(error, Warning) or error.__traceback__ is None:
        return False
    raised = traceback.extract_tb(error.__traceback__)[-1]
    recsys = Path(__file__).resolve().parents[1]
    return Path(raised.filename).is_relative_to(recsys) and (raised.line or "").startswith("warnings.warn(")


def _out_of_device_memory(error: BaseException) -> bool:
    """Whether `error` is torch's OutOfMemoryError (a GPU's memory ran out): recsys' fit check before a
    run measures the host's memory alone, so a model too large for a GPU ended in a traceback. Told
    by its type's name and module, as this module imports no torch."""
    return any(
        kind.__name__ == "OutOfMemoryError" and kind.__module__.startswith("torch")
        for kind in type(error).__mro__
    )


def _users_mistake(error: Exception) -> RecsysError | None:
    """`error` as the one line of a user's mistake where it is one though not a RecsysError: one of
    recsys's warnings raised as an error, or a GPU's memory run out; None for a bug's."""
    if _own_warning(error):
        return RecsysError(str(error))
    if _out_of_device_memory(error):
        first = str(error).strip().splitlines()[0] if str(error).strip() else "out of memory"
        return RecsysError(
            f"the run does not fit in the device's memory ({first}); use fewer `n_factors` or `members`, "
            "or train on the CPU (`device` cpu)"
        )
    return None


def _exit_code(main: Callable[[], int]) -> int:
    """Run `main` and say how it ended as an exit code, a user's mistake or an interruption in one
    line on stderr; a bug's exception propagates. From the moment main ends, an interruption is not
    raised: the process ends with that code, run()'s handlers still in place until it does."""
    try:
        try:
            try:
                return main()
            finally:
                _MAIN_ENDED.set()
        except (RecsysError, BrokenPipeError):
            raise
        except Exception as error:  # a bug propagates, unless an interruption caused it
            cause = _interruption(error) or _users_mistake(error)
            if cause is None:
                raise
            raise cause from None
    except RecsysError as error:
        print(f"error: {in_flags(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated as stop:
        with contextlib.suppress(OSError):  # a hung-up terminal takes no more output
            print(stop.said, file=sys.stderr)
        return 128 + stop.signum
    except BrokenPipeError:
        # Whoever read the output closed it (`| head`): stop quietly, as a Unix tool stops on SIGPIPE,
        # after the same cleanup as an interruption's. The rest of the output goes nowhere.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def end_process(code: int) -> NoReturn:
    """Exit with `code` as soon as stdout and stderr are flushed, without the interpreter's teardown.

    Tearing down torch's, numba's and pandas' objects one by one took longer than a u1 run
    (docs/performance.md); the system frees the memory at once. Every file a command writes is
    closed before its main returns, and no command leaves threads or child processes behind.
    """
    for stream in filter(None, (sys.stdout, sys.stderr)):  # None: closed before the start (`>&-`)
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing reaches it
            stream.flush()
    os._exit(code)


def test_summary(result: "RunResult", implicit: bool) -> str:
    """The run's test scores in a line: RMSE and MAE, or a ranking model's lists (of `implicit` data:
    interactions, every one relevant)."""
    metrics = result.metrics()
    unseen = metrics["n_test_unknown"]
    if result.config.ranks:
        test = result.test
        relevant = "an interaction" if implicit else f"a rating >= {result.config.relevant:g}"
        # As the RMSE line says, so a split whose test part is mostly new users is seen to be.
        pairs = "interactions" if implicit else "ratings"
        left_out = f"; {unseen:,} test {pairs} with ids unseen in training left out" if unseen else ""
        return (
            f"test NDCG@10 {test['ndcg@10']:.4f}  precision@10 {test['precision@10']:.4f}  recall@10 "
            f"{test['recall@10']:.4f}  over {int(test['users']):,} users (relevant: {relevant} in test"
            f"{left_out})"
        )
    how = "given the training mean" if result.config.unknown == "mean" else "left out"
    return (
        f"test RMSE {result.test['rmse']:.4f}  MAE {result.test['mae']:.4f}  on {metrics['n_test_scored']:,} "
        f"ratings ({unseen:,} test ratings with ids unseen in training {how})"
    )


def warn_of_unused_feature_files(args: argparse.Namespace, config: "RunConfig") -> None:
    """--user-features or --item-features given to a run that reads no side features from them."""
    from recsys.config import unread_feature_sides

    given = [side for side in ("user", "item") if getattr(args, f"{side}_features", None) is not None]
    reason, unread = unread_feature_sides(config, given)
    if unread:
        flags = " and ".join(f"--{side}-features" for side in unread)
        verb = "are" if len(unread) > 1 else "is"
        warnings.warn(
            f"{reason}: {flags} {verb} unused (bfm reads both sides', svdpp the users')", stacklevel=2
        )
