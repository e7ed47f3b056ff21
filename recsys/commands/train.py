"""Train one rating model and write a run folder: `python scripts/train.py --model dotbias`.

The flags are parsed and checked before torch, pandas or numba is imported, so `--help` and a
mistake answer at once.
"""

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recsys.commands.common import (
    CommandParser,
    add_data_flags,
    check_data_flags,
    dataset_from_flags,
    path_flag,
    progress_shown,
    reading_flags,
    run,
    test_summary,
    warn_of_unused_feature_files,
)
from recsys.config import (
    AUTOGRAD,
    AUTOGRAD_ONLY,
    ENGINES,
    FIT_NAMES,
    PER_RATING,
    SETTINGS,
    SHARES_DEVICE_STEPS,
    RunConfig,
    Setting,
    check_device,
    check_threads,
    config_for,
    default_model,
    default_threads,
    differences,
    refuse_autograd_only,
    refuse_unread,
    unread,
)
from recsys.data.split_settings import FRACTION_SPLITS, check_test_frac, check_test_n
from recsys.errors import RecsysError, short_reason
from recsys.files import read_file
from recsys.models.registry import COMPILED_DEFAULTS, model_entry, model_names
from recsys.names import (
    CHECKPOINT_FILE,
    CHECKPOINT_SECONDS,
    CONFIG_FILE,
    DATA_FILE,
    METRICS_FILE,
    MOVABLE_FILES,
)

if TYPE_CHECKING:
    from recsys.data.dataset import RatingsDataset
    from recsys.train.checkpoints import Checkpoint
    from recsys.train.trainer import EpochStats

DEFAULTS = RunConfig()
# Each flag that sets a RunConfig field, with the field (from the fields' Settings): a resumed run
# keeps its own values.
CONFIG_FLAGS = {setting.flag: name for name, setting in SETTINGS.items() if setting.flag is not None}


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _listing(values: dict[str, Any]) -> str:
    """`values` by model as help text, one value when every model has the same."""
    if len(set(values.values())) == 1:
        return _shown(next(iter(values.values())))
    return ", ".join(f"{model} {_shown(value)}" for model, value in values.items())


def model_defaults(field: str) -> str:
    """Every model's default for `field` as the engine `auto` chooses it on the CPU, then the
    autograd engine's where it differs: the help shows the values a run will use."""
    # A ranking model trains on the compiled engine only.
    trained_by_autograd = [model for model in model_names() if not model_entry(model).ranks]
    autograd = {model: getattr(config_for(model, engine="autograd"), field) for model in trained_by_autograd}
    if "autograd" not in SETTINGS[field].engines:
        autograd = {}
    if field in AUTOGRAD_ONLY:
        return f"[default: {_listing(autograd)}; autograd engine only]"
    configs = {model: config_for(model) for model in model_names()}
    # Not shown for a model whose engine, or compiled fit, does not read it (a sampler's learning rate).
    chosen = {
        model: getattr(config, field)
        for model, config in configs.items()
        if config.engine in SETTINGS[field].engines
        and not (config.engine == "compiled" and field in unread(model_entry(model).fit))
    }
    differing = {
        model: autograd[model]
        for model in COMPILED_DEFAULTS
        if model in autograd and autograd[model] != chosen.get(model)
    }
    named = ", ".join(f"{model} {_shown(value)}" for model, value in differing.items())
    tail = f"; with --engine autograd: {named}" if differing else ""
    return f"[default: {_listing(chosen)}{tail}]"


def _help(name: str, setting: Setting) -> str:
    """A setting's help with the default a run will use."""
    if setting.shown_default is not None:
        default = f"[default: {setting.shown_default}]"
    elif setting.by_model:
        default = model_defaults(name)
    else:
        default = f"[default: {_shown(getattr(DEFAULTS, name))}]"
    only = " (autograd engine only)" if setting.engines == AUTOGRAD and not setting.by_model else ""
    return f"{setting.help}{only} {default}"


def _kind(name: str, setting: Setting) -> dict[str, Any]:
    """argparse's arguments for a setting's value, by its field's type."""
    kind = {field.name: field.type for field in dataclasses.fields(RunConfig)}[name]
    if name == "model":
        return {"choices": model_names()}
    if name == "engine":
        return {"choices": ("auto", *ENGINES)}
    if setting.choices is not None:
        return {"choices": setting.choices}
    if kind is bool:
        return {"action": "store_true"}
    if kind == tuple[float, float] | None:
        return {"type": float, "nargs": 2, "metavar": ("LOW", "HIGH")}
    return {"type": int if kind is int else float if kind in (float, float | None) else str}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags; those left unset stay None so that a resumed run can tell which were given."""
    parser = CommandParser(
        description=__doc__,
        epilog="Training flags left unset take the model's tuned defaults (recsys/models/registry.py).",
    )
    add = parser.add_argument
    add_data_flags(parser)  # --dataset among them
    for name, setting in SETTINGS.items():
        if setting.flag is not None and name != "dataset":
            add(setting.flag, dest=name, default=None, help=_help(name, setting), **_kind(name, setting))
    add(
        "--threads",
        type=int,
        default=None,
        help="CPU threads (the compiled engine's; the autograd engine's on the CPU, where it takes one "
        "unless asked); the compiled engine's result does not "
        "depend on it [default: the cores this process may use]",
    )
    add(
        "--checkpoint-every",
        type=float,
        default=CHECKPOINT_SECONDS,
        metavar="SECONDS",
        help="write the checkpoint to resume from after an epoch once this many seconds have passed "
        "since the last (and after the last epoch); 0: after every epoch [default: %(default)g]",
    )
    add(
        "--resume",
        type=path_flag,
        default=None,
        metavar="RUN_DIR",
        help="continue an interrupted run from its last checkpoint, with its own settings and data "
        "(files since moved: --ratings, --items, --user-features, --item-features or --data-dir say where)",
    )
    add(
        "--out",
        type=path_flag,
        default=None,
        help="run folder [default: runs/<model>-<dataset>-<split>-<time>]",
    )
    add(
        "--config",
        type=path_flag,
        default=None,
        metavar="FILE",
        help="a JSON file of settings (tune.py's best.json); the flags given override it",
    )
    return parser.parse_args(argv)


def config_from_args(
    args: argparse.Namespace,
    dataset: str,
    device: str,
    default_split: str | None = None,
    *,
    implicit: bool = False,
) -> RunConfig:
    """The run's config from the flags, over the --config file's settings where one is given (unset
    training settings take the model's tuned defaults; the split, `default_split`: the dataset's, None
    before the data are read (ml-100k's u1, else random: a split flag is then checked against a split
    named); the model, the default for ratings or, where the data are `implicit`, for interactions)."""
    settings = config_file_values(args.config) if args.config is not None else {}
    file_engine, file_model = settings.pop("engine", None), settings.pop("model", None)
    engine = args.engine if args.engine not in (None, "auto") else file_engine
    named = args.model or file_model
    model = named or default_model(implicit)
    ranks = model in model_names() and model_entry(model).ranks
    shares_steps = device.startswith("cuda") and model in SHARES_DEVICE_STEPS
    if engine is None and int(os.environ.get("WORLD_SIZE", "1")) > 1 and not ranks and not shares_steps:
        engine = "autograd"  # the compiled engine trains in one process (a ranking model says so itself)
    flags = {
        name: (tuple(value) if name == "y_range" and value else value)
        for name in CONFIG_FLAGS.values()
        if name not in ("model", "dataset", "engine", "device") and (value := getattr(args, name)) is not None
    }
    given = set(flags)
    # Typed as flags, they are checked whatever the split (RunConfig checks them where it uses them).
    if args.test_frac is not None:
        check_test_frac(args.test_frac)
    if args.test_n is not None:
        check_test_n(args.test_n)
    if engine in PER_RATING:  # a flag given at all, even at the autograd engine's default, would be ignored
        refuse_autograd_only(given, engine)
    from_file = set(settings) - given
    if file_engine is not None and engine == file_engine:  # the file's, no --engine replaced it
        from_file.add("engine")
    settings.update(flags)
    named_by = "--split" if "split" in flags else "--config" if "split" in settings else "the dataset's"
    split = settings.get("split", default_split)
    if split is not None:  # None: the dataset's, not known before the data are read
        _refuse_unread_split_flags(args, split, named_by)
    settings["split"] = split or DEFAULTS.split
    try:
        config = config_for(model, engine=engine, dataset=dataset, device=device, **settings)
        refuse_unread(given, config.model, config.engine)  # RunConfig takes one at its base value
        return config
    except RecsysError as error:
        # An error naming a setting the file gave: the user may never have typed its flag.
        if any(f"`{field}`" in str(error) for field in from_file):
            raise RecsysError(f"{error} (with the settings of --config {args.config})") from None
        if implicit and not named:
            raise RecsysError(
                f"{error} ({model}: the model for interactions when --model is left out)"
            ) from None
        raise


def _refuse_unread_split_flags(args: argparse.Namespace, split: str, named_by: str) -> None:
    """--test-frac and --test-n given to a split that holds out by neither are an error, not ignored:
    a user who asks for a tenth held out would otherwise be scored on the split's own."""
    if args.test_frac is not None and split not in FRACTION_SPLITS:
        how = "each user's last --test-n ratings" if split == "user-last" else "a predefined fold"
        raise RecsysError(
            f"--test-frac applies to --split {', '.join(FRACTION_SPLITS)}; this run's split is {split} "
            f"({named_by}), which holds out {how}"
        )
    if args.test_n is not None and split != "user-last":
        raise RecsysError(
            f"--test-n applies to --split user-last only; this run's split is {split} ({named_by})"
        )


def config_file_values(path: Path) -> dict[str, Any]:
    """The settings a --config file holds: a JSON object of RunConfig fields, such as the best.json
    tune.py writes. The data and the device come from their own flags."""
    try:
        values = json.loads(path.read_text())
    except OSError as error:
        raise RecsysError(f"--config {path}: cannot read it ({error.strerror})") from None
    except ValueError as error:
        raise RecsysError(f"--config {path}: not JSON ({error})") from None
    if not isinstance(values, dict):
        raise RecsysError(f'--config {path}: expected a JSON object of settings, e.g. {{"lr": 0.05}}')
    known = [field.name for field in dataclasses.fields(RunConfig) if field.name not in ("dataset", "device")]
    unknown = sorted(set(values) - set(known))
    if unknown and set(unknown) <= {"dataset", "device"}:  # what a run folder's config.json adds
        raise RecsysError(
            f"--config {path}: names the {' and the '.join(unknown)}, which come from their own flags; "
            f"a run's {CONFIG_FILE} is continued with --resume RUN_DIR, or used as settings without them"
        )
    if unknown:
        raise RecsysError(
            f"--config {path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(known)}"
        )
    if "model" in values and values["model"] not in model_names():  # named as the file's, not a flag's
        raise RecsysError(
            f"--config {path}: unknown model {values['model']!r}; choose one of: {', '.join(model_names())}"
        )
    if values.get("engine") == "auto":  # as --engine auto: chosen for the model and device
        del values["engine"]
    if isinstance(values.get("y_range"), list):
        values["y_range"] = tuple(values["y_range"])
    return values


def resumed_config(run_dir: Path) -> RunConfig:
    """The config a run folder was started with, read without torch."""
    try:
        return RunConfig.from_dict(json.loads(read_file(run_dir / CONFIG_FILE)))
    except (OSError, ValueError, TypeError, AttributeError, RecsysError) as error:
        raise RecsysError(
            f"--resume {run_dir}: not a readable recsys run folder ({CONFIG_FILE}: {short_reason(error)})"
        ) from None


def _check_config_file(run_dir: Path, written: RunConfig, trained: RunConfig) -> None:
    """The run folder's config.json (`written`), which the flags were checked against, must say what
    its checkpoint trains with: an edited one would have the run continue otherwise than it says."""
    if differ := differences(written, trained):
        raise RecsysError(
            f"--resume {run_dir}: its {CONFIG_FILE} says {differ} in its checkpoint; the "
            f"checkpoint's settings are the run's: restore {CONFIG_FILE} to them"
        )


def check_moved_file_flags(args: argparse.Namespace) -> None:
    """A resumed run reads its data as it read it: its files' new places may be given, nothing else."""
    for flag, value in [("--dataset", args.dataset), *reading_flags(args)]:
        if value is not None:
            raise RecsysError(
                f"{flag}: --resume reads the run's own data as it read it; drop {flag} (--ratings, --items, "
                "--user-features, --item-features and --data-dir may say where its files are now)"
            )
    if args.ratings is not None and args.data_dir is not None:
        raise RecsysError(
            "--ratings names where a run's ratings file is now, --data-dir where its dataset's folder is; "
            "drop the one the run did not read"
        )


def check_resume_flags(args: argparse.Namespace, config: RunConfig) -> None:
    """A resumed run keeps its own settings: a flag that would change one is an error, not ignored."""
    for flag, field in CONFIG_FLAGS.items():
        given = getattr(args, field)
        if given is None or (field == "engine" and given == "auto"):
            continue
        given = tuple(given) if field == "y_range" else given
        if given == getattr(config, field):
            continue
        sampler = config.samples
        if flag == "--epochs":
            laid_out = "burn-in and kept draws are laid out" if sampler else "learning rate falls"
            raise RecsysError(
                f"--epochs {given}: {args.resume} was planned for {config.epochs} epochs, and its "
                f"{laid_out} over them; --resume finishes it as planned (for a run of {given} epochs, "
                f"start a new one with --epochs {given})"
            )
        fit = model_entry(config.model).fit
        if config.engine in PER_RATING and field in unread(fit):
            raise RecsysError(
                f"{flag} has no effect on {config.model}'s {config.engine} engine, {FIT_NAMES[fit]}; "
                "drop the flag"
            )
        raise RecsysError(
            f"{flag} {_shown(given)}: --resume continues {args.resume} with its own settings "
            f"({field} {_shown(getattr(config, field))}); drop the flag, or start a new run"
        )


def _written(value: object) -> float:
    """A score as metrics.json holds it: a number, or null for one with nothing to judge."""
    return math.nan if value is None else float(value)  # type: ignore[arg-type]


def finished_message(run_dir: Path) -> str | None:
    """What to say instead of resuming a run that completed (its metrics file is written last); a
    finished run whose checkpoint is damaged is an error saying so, not finished."""
    from recsys.train.checkpoint_file import checkpoint_body  # torch-free: checks the file's framing

    try:
        metrics = json.loads(read_file(run_dir / METRICS_FILE))
        epochs = len(metrics["history"])
        if "test_ranking" in metrics:
            score = f"test NDCG@10 {_written(metrics['test_ranking']['ndcg@10']):.4f}"
        else:
            score = f"test RMSE {_written(metrics['test_rmse']):.4f}"
    except (OSError, ValueError, TypeError, KeyError):
        return None
    checkpoint_body(run_dir / CHECKPOINT_FILE)
    return f"{run_dir} is finished ({epochs} epoch{'' if epochs == 1 else 's'}, {score})"


def moved_files(args: argparse.Namespace) -> dict[str, Path | None]:
    """Where a resumed run's files are now, by their key in its data.json, as the flags say (None: where
    the run read them)."""
    return {key: getattr(args, key, None) for key in MOVABLE_FILES}


def resumed_dataset(args: argparse.Namespace, checkpoint: "Checkpoint", progress: bool) -> "RatingsDataset":
    """The data of the run `args.resume`, read as the run read it, from where the flags say it is now."""
    from recsys.data.catalog import dataset_from_record, relocated
    from recsys.workflows.experiment import recorded_data

    record = recorded_data(args.resume)
    if args.data_dir is not None and "ratings" in record:
        raise RecsysError(
            f"--data-dir {args.data_dir}: the run read the ratings file {record['ratings']}, not a dataset's "
            "folder; --ratings names where that file is now"
        )
    return dataset_from_record(
        relocated(record, moved_files(args)),
        checkpoint.config.dataset,
        args.data_dir,
        progress=progress,
        allow_download=not args.offline,
    )


def record_moved_files(args: argparse.Namespace) -> None:
    """Check a finished run's files at their new places against its checkpoint, and record them."""
    from recsys.train.checkpoints import load_checkpoint
    from recsys.workflows.experiment import record_moved_data

    checkpoint = load_checkpoint(args.resume / CHECKPOINT_FILE)
    record_moved_data(args.resume, resumed_dataset(args, checkpoint, progress_shown(args)), checkpoint)


def check_args(args: argparse.Namespace) -> RunConfig | None:
    """Reject bad flags before anything is loaded: RunConfig checks the values, this what depends on
    the machine (threads here; a CUDA device once torch is loaded). Returns a resumed run's config."""
    args.threads_typed = args.threads is not None  # the autograd engine on the CPU takes one unless asked
    args.threads = check_threads(default_threads() if args.threads is None else args.threads)
    if not args.checkpoint_every >= 0:  # also refuses nan
        raise RecsysError(f"--checkpoint-every must be 0 or more seconds, got {args.checkpoint_every:g}")
    if args.resume is None:
        check_data_flags(args)
    else:
        check_moved_file_flags(args)
        if args.out is not None:
            raise RecsysError("--resume continues in its own run folder; drop --out")
        if args.config is not None:
            raise RecsysError("--resume continues with the run's own settings; drop --config")
        from recsys.workflows.run_folder import check_resumable

        check_resumable(args.resume, "--resume")
        config = resumed_config(args.resume)
        check_resume_flags(args, config)
        return config
    provisional_config(args, args.device or "cpu")
    from recsys.workflows.run_folder import occupied, taken

    if args.out is not None and taken(args.out):
        raise RecsysError(occupied(args.out, "--out"))
    return None


class EpochTable:
    """Prints each epoch's row, under a header printed with the first: a run that stops before its
    first epoch (bad data found while splitting) leaves no empty table above its error."""

    def __init__(self, ranks: bool) -> None:
        self.started = False
        self.ranks = ranks  # a ranking model is watched by its lists' NDCG@10, not by RMSE

    def __call__(self, stats: "EpochStats") -> None:
        from tqdm.auto import tqdm

        score = "test_ndcg@10" if self.ranks else "test_rmse"
        if not self.started:
            # The run's per-epoch score is on its test part (monitoring only: nothing is chosen by it).
            tqdm.write(f"{'epoch':>5}  {'train_loss':>10}  {score:>12}  {'seconds':>7}")
            self.started = True
        value = stats.valid_ndcg if self.ranks else stats.valid_rmse
        shown = "" if self.ranks and math.isnan(value) else f"{value:.4f}"  # an epoch not watched
        tqdm.write(f"{stats.epoch:>5}  {stats.train_loss:>10.4f}  {shown:>12}  {stats.seconds:>7.2f}")


def own_numba_cache() -> None:
    """Under torchrun, give each local rank but the first a numba cache folder of its own, before numba
    loads: ranks that compile the same kernel at once and write one cache file together can leave it
    half written for another to load (numba issue 4807; one CI run here lost a rank to a corrupted
    heap in the two-rank sparse test). The first rank keeps the usual cache."""
    local_rank = os.environ.get("LOCAL_RANK", "0")
    if local_rank != "0" and "NUMBA_CACHE_DIR" not in os.environ:
        from recsys.data.cache import cache_root

        os.environ["NUMBA_CACHE_DIR"] = str(cache_root() / f"numba-rank-{local_rank}")


def runs_on_gpu(config: RunConfig, engine_flag: str | None) -> bool:
    """Whether a run, given no `--device`, goes to a GPU where there is one (`config`: as on the CPU):
    the autograd and device engines', and per-rating AdaGrad's where `--engine` left the choice to auto
    (it becomes the device engine there)."""
    left_to_auto = engine_flag in (None, "auto")
    return config.engine in ("autograd", "device") or (
        left_to_auto and model_entry(config.model).steps_by_rating
    )


def provisional_config(args: argparse.Namespace, device: str) -> RunConfig:
    """The run's config as far as the flags tell before the data are read: for ratings, unless the
    flags suit only the default model of interactions, which a --ratings file may hold (a flag such
    as --alpha); where they suit neither, the error for ratings."""
    dataset = args.dataset or "ml-100k"
    try:
        return config_from_args(args, dataset, device)
    except RecsysError as for_ratings:
        if args.ratings is None:
            raise
        try:
            return config_from_args(args, dataset, device, implicit=True)
        except RecsysError:
            raise for_ratings from None


def auto_device(on_cpu: RunConfig, engine_flag: str | None) -> str:
    """The device for a run given no `--device` (`on_cpu`: its config on the CPU): a GPU where there
    is one and the run goes to it."""
    import torch

    return "cuda" if torch.cuda.is_available() and runs_on_gpu(on_cpu, engine_flag) else "cpu"


def main(argv: list[str] | None = None) -> int:
    own_numba_cache()
    args = parse_args(argv)
    resumed = check_args(args)
    if args.resume is not None and (finished := finished_message(args.resume)):
        if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, one process writes and says it
            return 0
        if args.data_dir is not None or any(path is not None for path in moved_files(args).values()):
            record_moved_files(args)
            print(f"{finished}; nothing to resume, the new places of its files recorded in its {DATA_FILE}")
        else:
            print(f"{finished}; nothing to resume, nothing changed")
        return 0
    from recsys.train.distributed import distributed_session  # after the checks: torch takes seconds

    # Whether the device is this command's to choose: chosen now for ratings, and again once the data
    # turn out to be interactions, whose default model trains on the CPU.
    args.device_chosen = resumed is None and args.device is None
    if resumed is not None:
        args.device = resumed.device
    elif args.device is None:
        args.device = auto_device(provisional_config(args, "cpu"), args.engine)
    check_device(args.device)
    with distributed_session(args.device) as (rank, device):
        train(args, rank, device, resumed)
    return 0


def train(args: argparse.Namespace, rank: int, device: str, resumed: RunConfig | None) -> None:
    """Train and evaluate as the flags say; rank 0 claims, prints to and writes the run folder.

    A named run folder is claimed before the data is loaded; the default one, named after the
    dataset, once it is. `resumed`: a resumed run's config.json, as check_args read it.
    """
    from recsys.train.checkpoints import load_checkpoint
    from recsys.train.trainer import torch_threads_for
    from recsys.workflows.experiment import check_model_fits_data, train_and_evaluate
    from recsys.workflows.run_folder import claim_run_folder, claim_unused_run_folder

    lead = rank == 0  # under torchrun only rank 0 prints and writes the run folder
    with ExitStack() as claimed:
        out = args.resume or args.out
        if lead and out is not None:
            claimed.enter_context(claim_run_folder(out, resume=args.resume is not None))
        resume = load_checkpoint(args.resume / CHECKPOINT_FILE) if args.resume is not None else None
        if resume is not None:
            assert resumed is not None, "check_args read the run's config.json"
            _check_config_file(args.resume, resumed, resume.config)
            dataset = resumed_dataset(args, resume, progress_shown(args) and lead)
            if lead and (where := dataset.folder or dataset.origin.get("ratings")) is not None:
                print(f"data: {where}", file=sys.stderr)
        else:
            dataset = dataset_from_flags(args)
            if dataset.implicit and args.device_chosen and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
                device = auto_device(config_from_args(args, dataset.name, "cpu", implicit=True), args.engine)
        config = (
            resume.config
            if resume is not None
            else config_from_args(
                args, dataset.name, device, dataset.default_split, implicit=dataset.implicit
            )
        )
        if lead:
            warn_of_unused_feature_files(args, config)
        if out is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            out = Path("runs") / f"{config.model}-{dataset.name}-{config.split}-{stamp}"
            if lead:
                out = claimed.enter_context(claim_unused_run_folder(out))
        # The autograd engine on the CPU takes torch's one thread unless --threads asks for more.
        threads = args.threads if args.threads_typed or config.engine == "compiled" else None
        shown = threads or torch_threads_for(config, None) or args.threads
        # Before the header: a run that cannot start says only why (a resumed run's data is checked
        # against its checkpoint instead, as it is split).
        if resume is None:
            check_model_fits_data(dataset, config)
        if lead:
            print(
                f"{config.model} on {dataset.name} ({len(dataset.ratings):,} "
                f"{'user-item pairs' if dataset.implicit else 'ratings'}), split {config.split}, "
                f"{config.engine} engine, {shown} thread{'s' if shown > 1 else ''}" + _members_shown(config)
            )
        result = train_and_evaluate(
            dataset,
            config,
            run_dir=out if lead else None,
            progress=progress_shown(args),
            on_epoch=EpochTable(config.ranks) if lead else None,
            resume=resume,
            threads=threads,
            checkpoint_every=args.checkpoint_every,
        )
    if lead:
        print(f"{test_summary(result, dataset.implicit)}  trained in {result.seconds:.1f} s")
        print(f"run folder: {out}")


def cli() -> None:
    """The `recsys-train` console command."""
    run(main)


def _members_shown(config: RunConfig) -> str:
    """What the run's members are, for its first line: chains of a sampler, or an ensemble's models."""
    if config.members == 1:
        return ""
    if config.samples:
        sweeps = f"{config.epochs} sweep{'s' if config.epochs > 1 else ''}"
        return f", {config.members} chains of {sweeps}, their draws pooled"
    return f", an ensemble of {config.members} models trained apart"
