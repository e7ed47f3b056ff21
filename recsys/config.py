"""One typed, frozen description of a run: data, split, model and training hyperparameters.

It is written into every run folder and checkpoint, so a run can be rebuilt without outside
knowledge. The CLI builds it; library functions take it, never an argparse namespace.
"""

import dataclasses
import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recsys.data.split_settings import FRACTION_SPLITS, check_test_frac, check_test_n
from recsys.errors import RecsysError

# Each model's tuned defaults live with the model in its registry (importable without torch); they
# are named here too because RunConfig checks against them and config_for applies them.
from recsys.models.registry import COMPILED_DEFAULTS, build_model, model_entry
from recsys.models.registry import MODEL_DEFAULTS as MODEL_DEFAULTS
from recsys.names import FEATURE_GROUPS, SPLIT_KINDS, feature_groups

if TYPE_CHECKING:
    import torch

    from recsys.models.base import RatingModel

ENGINES = ("compiled", "autograd", "device")
# The engines of per-rating AdaGrad, which read the same settings and take the same tuned defaults:
# compiled (numba on the CPU) and device (the same steps as whole-batch tensor operations, for a GPU).
PER_RATING = ("compiled", "device")
OPTIMIZERS = ("adamw", "sgd")
SCHEDULES = ("one-cycle", "constant")
UNKNOWN_POLICIES = ("drop", "mean")


# The most models an ensemble may hold: its gain flattens after a few, and its cost does not.
MAX_MEMBERS = 100
# Seeds as numpy's and scikit-learn's generators take them.
SEED_LIMIT = 2**32


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _plain(value: object) -> object:
    """numpy's numbers (from `np.arange` in a grid search, a float32 learning rate) as Python's, which
    the checks below and the config's JSON take; anything else as it is."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or type(value) in (int, float):
        return value
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _is_whole(value: object) -> bool:
    """An int, and not a bool (which Python counts as one: a config file's `true` is no epoch count)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Setting:
    """How a RunConfig field is set: the one place a setting is declared.

    train.py's flags (with `help`), its check that a resumed run keeps every setting, the engines'
    refusals of settings they do not read, and RatingRegressor's parameters are all derived from
    these. `flag` None: set from the data, not by hand; `engines`: those that read it; `unread_by`:
    the compiled engine's fits (registry FITS) that do not; `estimator`: whether RatingRegressor takes it
    (the split is scikit-learn's, the data the estimator's own); `choices`: the values it takes;
    `by_model`: its default is each model's tuned one, so the help lists them; `shown_default`: the
    default as the help says it, where the field's own is not what a run uses.
    """

    help: str
    flag: str | None
    engines: tuple[str, ...] = ("compiled", "autograd")
    unread_by: tuple[str, ...] = ()
    estimator: bool = True
    choices: tuple[str, ...] | None = None
    by_model: bool = False
    shown_default: str | None = None
    base: Any = None  # by_model: the value where the model's registry entry names none


class _Tuned:
    """The default of a setting whose value is each model's tuned one for its engine, resolved when
    a RunConfig is made (and of `engine`: chosen as `auto` chooses)."""

    def __repr__(self) -> str:
        return "TUNED"


TUNED: Any = _Tuned()


def _setting(default: Any, help: str, flag: str | None, **options: Any) -> Any:
    if options.get("by_model"):  # the field's default is the model's: `default` where it names none
        setting = Setting(help, flag, base=default, **options)
        return dataclasses.field(default=TUNED, metadata={"setting": setting})
    return dataclasses.field(default=default, metadata={"setting": Setting(help, flag, **options)})


# The largest ials confidence weight: beyond it a confidence (1 + alpha x strength) swamps float32's
# digits, and at 1e30 or 1e300 the fit diverged or learned nothing without a word.
LARGEST_ALPHA = 1e9

# The model a command trains when none is named and the data are interactions, which the default
# (a rating model) refuses: the ranking model with the better lists on u1 (docs/benchmarks.md).
RANKING_DEFAULT_MODEL = "ials"

AUTOGRAD = ("autograd",)
COMPILED = ("compiled",)


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's result. Each field's `Setting` says how it is set; a
    setting left out takes the model's tuned value for its engine (`RunConfig(model="dot")` is
    `config_for("dot")`), and `engine` left out is chosen as `--engine auto` chooses."""

    model: str = _setting(
        "dotbias",
        "model family (recsys/models/registry.py)",
        "--model",
        shown_default=f"dotbias; {RANKING_DEFAULT_MODEL} on interactions without ratings",
    )
    dataset: str = _setting("ml-100k", "a MovieLens variant, tiny or synthetic", "--dataset", estimator=False)
    split: str = _setting(
        "random",
        "random, per-user fraction, each user's last test_n by time, global time cut, or an ml-100k fold",
        "--split",
        estimator=False,
        choices=SPLIT_KINDS,
        shown_default="u1 for ml-100k, which comes with it; else random",
    )
    test_frac: float = _setting(0.2, "test share for random/user/time splits", "--test-frac", estimator=False)
    test_n: int = _setting(10, "ratings per user held out by user-last", "--test-n", estimator=False)
    unknown: str = _setting(
        "drop",
        "test ratings whose id is unseen in training: drop, or predict the training mean",
        "--unknown",
        estimator=False,  # the estimator's own `unknown` answers for every row: mean or error
        choices=UNKNOWN_POLICIES,
        unread_by=("bpr", "als"),  # a ranking model's lists are judged, not its test ratings' errors
    )
    n_factors: int = _setting(50, "latent factors per user and item", "--n-factors", by_model=True)
    members: int = _setting(
        1,
        "models trained apart, from their own starts and orders, whose predictions are averaged "
        "(recsys/models/ensemble.py); compiled and device engines only. bpmf and bfm: independent "
        "chains of `epochs` sweeps each, their draws pooled",
        "--members",
        unread_by=("bpr", "als"),
        by_model=True,
    )
    y_range: tuple[float, float] | None = _setting(
        None,
        "sigmoid output range",
        "--y-range",
        shown_default="0 to 1.1 x the top rating",
        unread_by=("bpr", "als"),  # a ranking score is no rating
    )
    init_scale: float = _setting(
        1.0,
        "multiplies every initial weight; 1: fastai's normal(0, 0.01) tables",
        "--init-scale",
        unread_by=("gibbs", "fm"),  # a chain starts at a fixed scale (recsys.train.gibbs.START_SCALE)
        by_model=True,
    )
    # Errors are divided by this in the loss (2 for ratings 1-10): from the data's rating scale
    # (recsys.data.dataset.rating_unit), 1 for MovieLens.
    rating_unit: float | None = _setting(
        None, "the ratings' size against five stars, from the data's scale", None, estimator=False
    )
    epochs: int = _setting(10, "epochs", "--epochs", by_model=True)
    lr: float = _setting(5e-3, "peak learning rate", "--lr", unread_by=("gibbs", "fm", "als"), by_model=True)
    batch_size: int = _setting(
        512,
        "batch size, lowered where needed so that a run takes at least 100 optimizer steps",
        "--bs",
        engines=AUTOGRAD,
        by_model=True,
    )
    # See trainer.py for why the penalty weighs the rows a batch uses.
    l2: float = _setting(
        0.1,
        "L2 penalty on the per-id rows of each batch (ials: on every row, scaled by its interactions)",
        "--l2",
        unread_by=("gibbs", "fm"),
        by_model=True,
    )
    alpha: float = _setting(
        1.0,
        "ials: an interaction's confidence is 1 + alpha x its strength (its count; for ratings, 1 + the "
        "rating less the relevance threshold, in five-star units); every other cell's is 1",
        "--alpha",
        engines=COMPILED,
        estimator=False,  # RatingRegressor predicts ratings: it trains no ranking model
        unread_by=("ratings", "gibbs", "fm", "bpr"),
        by_model=True,
    )
    features: str = _setting(
        "",
        "bfm, svdpp: what users (and for bfm items) are described by beside their ids, a comma list "
        "of: side (the data's or --user-features/--item-features tables), implicit (the items each "
        "user rated, the users who rated each item), time (bfm: a bias per user and day of the "
        "ratings); empty: the ids alone",
        "--features",
        by_model=True,
    )
    ordinal: bool = _setting(
        False,
        "bfm: the ratings as the steps of an ordered probit (a latent score between sampled cutpoints) "
        "rather than normal values; predicts the expected rating. Ratings must lie on a scale of whole steps",
        "--ordinal",
        engines=COMPILED,
        unread_by=("ratings", "gibbs", "bpr", "als"),
    )
    # Set from the data: the relevance threshold of the top-N lists (recsys.evaluation.ranking), 1 for
    # interactions (every one counts).
    relevant: float | None = _setting(
        None,
        "the rating at or above which an item is a positive for bpr and ials and relevant in top-N lists",
        None,
        estimator=False,
    )
    wd: float = _setting(
        0.0,
        "decoupled weight decay on every parameter (fastai's wd)",
        "--wd",
        engines=AUTOGRAD,
        by_model=True,
    )
    optimizer: str = _setting(
        "adamw", "optimizer", "--optimizer", engines=AUTOGRAD, choices=OPTIMIZERS, by_model=True
    )
    sparse: bool = _setting(
        False,
        "sparse embedding gradients with LazyAdam; much faster for 100K+ users or items",
        "--sparse",
        engines=AUTOGRAD,
    )
    schedule: str = _setting(
        "one-cycle",
        "learning-rate schedule",
        "--schedule",
        engines=AUTOGRAD,
        choices=SCHEDULES,
        by_model=True,
    )
    seed: int = _setting(0, "seed for split, initialisation and shuffle", "--seed")
    device: str = _setting(
        "cpu",
        "cpu or cuda (cuda:N)",
        "--device",
        shown_default="cuda where available for the autograd and device engines",
    )
    # compiled: per-rating AdaGrad, whole epochs in numba (recsys.train.compiled), the Gibbs samplers,
    # BPR and implicit ALS; device: the same per-rating AdaGrad in whole-batch tensor steps
    # (recsys.train.device); autograd: batches through torch's autograd and optimizers.
    engine: str = _setting(
        TUNED,
        "compiled: numba on the CPU (per-rating AdaGrad for dot, dotbias and svdpp; the samplers, BPR, "
        "ALS); device: the same AdaGrad for dot, dotbias and svdpp in whole-batch steps, for a GPU; "
        "autograd: batches through torch (every model, torchrun); auto: compiled on the CPU, device on "
        "a GPU, where the model has it and no autograd-only setting is given",
        "--engine",
        choices=ENGINES,
        shown_default="auto",
    )

    def __post_init__(self) -> None:
        """Resolve the tuned defaults, then reject values no run can use, naming the setting (a
        command names its flag)."""
        self._resolve_tuned()
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "y_range" and hasattr(value, "__array__") and getattr(value, "ndim", None) == 1:
                value = value.tolist()  # a 1-D array, np.array([1, 5]), is the pair its list is
            plain = (
                tuple(_plain(end) for end in value)
                if field.name == "y_range" and isinstance(value, tuple | list)
                else _plain(value)
            )
            object.__setattr__(self, field.name, plain)
        for name in ("epochs", "batch_size", "n_factors", "members"):
            value = getattr(self, name)
            if not _is_whole(value):
                raise RecsysError(f"`{name}` must be a whole number, got {value!r}")
            if value < 1:
                raise RecsysError(f"`{name}` must be at least 1, got {value!r}")
        # Checked where the split uses them: a run saved with an unused odd value still loads.
        if self.split in FRACTION_SPLITS:
            check_test_frac(self.test_frac)
        if self.split == "user-last":
            check_test_n(self.test_n)
        if not _is_whole(self.seed) or not 0 <= self.seed < SEED_LIMIT:
            raise RecsysError(f"`seed` must be a whole number from 0 to 2**32 - 1, got {self.seed!r}")
        for name in ("sparse", "ordinal"):
            if not isinstance(flag := getattr(self, name), bool):
                raise RecsysError(f"`{name}` is true or false, got {flag!r}")
        for name in ("lr", "init_scale", "alpha"):
            if not _is_number(positive := getattr(self, name)) or not 0 < positive < math.inf:
                raise RecsysError(f"`{name}` must be positive and finite, got {positive!r}")
        if self.alpha > LARGEST_ALPHA:  # float32 sums of confidence-weighted rows overflow, or lose the 1
            raise RecsysError(f"`alpha` must be at most {LARGEST_ALPHA:g}, got {self.alpha!r}")
        for name in ("l2", "wd"):
            if not _is_number(strength := getattr(self, name)) or not 0 <= strength < math.inf:
                raise RecsysError(f"`{name}` must be zero or positive and finite, got {strength!r}")
        if self.relevant is not None and not (_is_number(self.relevant) and math.isfinite(self.relevant)):
            raise RecsysError(f"`relevant` must be a finite rating, got {self.relevant!r}")
        if self.rating_unit is not None and not (_is_number(self.rating_unit) and self.rating_unit > 0):
            raise RecsysError(f"`rating_unit` must be positive, got {self.rating_unit!r}")
        if self.y_range is not None and not (
            isinstance(self.y_range, tuple | list)
            and len(self.y_range) == 2
            and all(_is_number(end) and math.isfinite(end) for end in self.y_range)
            and self.y_range[0] < self.y_range[1]
        ):
            raise RecsysError(f"`y_range` needs finite LOW < HIGH, got {self.y_range!r}")
        named = self.features.split(",") if isinstance(self.features, str) and self.features else []
        if (
            not isinstance(self.features, str)
            or not set(named) <= set(FEATURE_GROUPS)
            or len(set(named)) < len(named)
        ):
            groups = ", ".join(FEATURE_GROUPS)
            raise RecsysError(
                f"`features` is a comma list of: {groups}, each once without spaces (or empty), got "
                f"{self.features!r}"
            )
        for name, allowed in (
            ("optimizer", OPTIMIZERS),
            ("schedule", SCHEDULES),
            ("unknown", UNKNOWN_POLICIES),
            ("engine", ENGINES),
        ):
            if (value := getattr(self, name)) not in allowed:
                raise RecsysError(f"unknown `{name}` {value!r}; choose one of: {', '.join(allowed)}")
        if self.sparse and (self.optimizer != "adamw" or self.wd > 0):
            raise RecsysError(
                "`sparse` works with `optimizer` adamw and `wd` 0 (LazyAdam has no weight decay)"
            )
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise RecsysError(f"`device` must be cpu or cuda (cuda:N), got {self.device!r}")
        if self.members > 1:
            self._check_ensemble()
        self._check_features()
        if self.engine == "compiled":
            self._check_compiled()
        elif self.engine == "device":
            self._check_device_engine()
        else:
            self._check_autograd()

    def _resolve_tuned(self) -> None:
        """Each setting left at TUNED takes the model's tuned value for its engine (the registry's
        entry), else its Setting's base; `engine` left so is chosen: compiled where the model has it,
        on the CPU, and device on a GPU for the models of per-rating AdaGrad, unless a setting only the
        autograd engine reads is given."""
        unresolved = [name for name in SETTINGS if getattr(self, name) is TUNED]
        if not unresolved:
            return
        entry = model_entry(self.model)  # an unknown model is an error listing the registered ones
        compiled = entry.compiled_defaults  # None: no compiled path (RunConfig refuses one)
        if self.engine is TUNED:
            # Given: a tuned setting given at all, another set apart from its field's default (sparse).
            autograd_only = [
                name
                for name in AUTOGRAD_ONLY
                if getattr(self, name) is not TUNED
                and (SETTINGS[name].by_model or getattr(self, name) != _FIELD_DEFAULTS[name])
            ]
            on_cpu = self.device == "cpu"
            per_rating = entry.steps_by_rating
            chosen = "autograd"
            if compiled is not None and not autograd_only and (on_cpu or per_rating):
                chosen = "compiled" if on_cpu else "device"
            members = _plain(self.members)
            # An ensemble (a sampler's chains) is the compiled engine's, which a setting given here ruled out.
            ensemble = _is_whole(members) and 1 < members <= MAX_MEMBERS  # type: ignore[operator]
            if ensemble and compiled is not None and chosen == "autograd":
                chose = [f"`{name}`" for name in autograd_only] + (
                    [] if on_cpu or per_rating else ["`device`"]
                )
                raise RecsysError(
                    f"`members` {members}: an ensemble trains on the compiled or device engine, which "
                    f"{' and '.join(chose)} rule{'s' if len(chose) == 1 else ''} out; leave "
                    f"{'it' if len(chose) == 1 else 'them'} or `members` out"
                )
            object.__setattr__(self, "engine", chosen)
        tuned = entry.defaults
        if compiled is not None and reads_compiled_defaults(self.model, self.engine):
            tuned = compiled
        for name in unresolved:
            if name != "engine":
                object.__setattr__(self, name, tuned.get(name, SETTINGS[name].base))

    def _check_ensemble(self) -> None:
        """An ensemble is of a model trained by per-rating AdaGrad, on one of its engines; a sampled
        model's members are its sampler's independent chains."""
        flag = f"`members` {self.members}"
        if self.members > MAX_MEMBERS:
            raise RecsysError(f"{flag}: at most {MAX_MEMBERS} (a few members give nearly all of the gain)")
        entry = model_entry(self.model)
        if entry.sampled:  # its sampler's chains, whose draws it pools
            if self.engine != "compiled":
                raise RecsysError(
                    f"{flag}: {self.model}'s members are its sampler's chains, on `engine` compiled"
                )
            return
        if entry.ranks:
            raise RecsysError(f"{flag}: {self.model} trains one model to rank (ensembles average ratings)")
        if entry.compiled_defaults is None:
            raise RecsysError(
                f"{flag}: ensembles train on the compiled or device engine, neither of which {self.model} has"
            )
        if self.engine not in PER_RATING:
            raise RecsysError(
                f"{flag}: an ensemble trains on `engine` compiled or device only (the autograd engine would "
                "train its members together, through their mean)"
            )

    def _check_features(self) -> None:
        """`features` is read where the model's registry entry gives it a default for the engine (bfm's
        sampler on the compiled engine, svdpp on either), which imports no model class."""
        if not reads_features(self.model, self.engine):
            if self.features != _BASES["features"]:
                elsewhere = any(reads_features(self.model, engine) for engine in ENGINES)
                where = f" on `engine` {self.engine}" if elsewhere else ""
                raise RecsysError(
                    f"`features` has no effect on {self.model}{where}; leave it out (bfm on `engine` "
                    "compiled and svdpp read it)"
                )
        elif "time" in feature_groups(self.features) and self.model not in READS_TIME:
            raise RecsysError(
                f"`features` time: {self.model} has no term for a rating's time; bfm reads it (drop time)"
            )
        elif self.members > 1 and self.features != "implicit" and not self.samples:
            raise RecsysError(
                f"`members` {self.members}: an ensemble's members read `features` implicit only"
            )

    def _check_compiled(self) -> None:
        """The compiled engine trains dot and dotbias on the CPU; refuse the flags it has no use for."""
        if self.model not in COMPILED_DEFAULTS:
            raise RecsysError(
                f"`engine` compiled trains {', '.join(COMPILED_DEFAULTS)}, not {self.model}; "
                "use `engine` autograd"
            )
        if self.device != "cpu":
            raise RecsysError(
                "`engine` compiled runs on the CPU; use `engine` device or autograd with `device` cuda"
            )
        self._refuse_unread()

    def _check_device_engine(self) -> None:
        """The device engine trains the models of per-rating AdaGrad, on any device."""
        entry = model_entry(self.model)
        if not entry.steps_by_rating:
            trained = ", ".join(name for name in COMPILED_DEFAULTS if model_entry(name).steps_by_rating)
            raise RecsysError(
                f"`engine` device trains {trained}, not {self.model}; use `engine` "
                f"{'compiled' if entry.compiled_defaults is not None else 'autograd'}"
            )
        self._refuse_unread()

    def _refuse_unread(self) -> None:
        """Refuse the settings this engine's fit has no use for (compiled or device)."""
        set_apart = self._set_apart()
        refuse_unread(set_apart, self.model, self.engine)
        refuse_autograd_only(set_apart, self.engine)

    def _set_apart(self) -> set[str]:
        """The settings whose value is not their base, the value where nothing sets them."""
        return {name for name in SETTINGS if getattr(self, name) != _BASES[name]}

    def _check_autograd(self) -> None:
        """A ranking model trains on the compiled engine only; the autograd engine reads no setting
        only the compiled one has."""
        if model_entry(self.model).ranks:
            raise RecsysError(
                f"{self.model} learns to rank on `engine` compiled only (numba on the CPU); leave out "
                "`engine` autograd, `device` and the settings of the autograd engine (batches, optimizer, "
                "schedule, `wd`, `sparse`)"
            )
        refuse_unread(self._set_apart(), self.model, self.engine)

    @property
    def samples(self) -> bool:
        """Whether this run's engine is a Gibbs sampler: a sampled model (bpmf) on the compiled engine."""
        return self.engine == "compiled" and model_entry(self.model).sampled

    @property
    def built_members(self) -> int:
        """How many models `model_for` builds: `members`, but one for a sampled model, whose members
        are chains pooled in it."""
        return 1 if self.samples else self.members

    @property
    def unit(self) -> float:
        """The rating unit errors and strengths are measured in: `rating_unit`, 1 until fitted to data."""
        return self.rating_unit or 1.0

    @property
    def ranks(self) -> bool:
        """Whether the model learns to rank (bpr, ials): its scores are no ratings."""
        return model_entry(self.model).ranks

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "RunConfig":
        """Rebuild from `to_dict` output; an unknown key is an error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise RecsysError(f"unknown config key(s) {unknown}; known: {sorted(known)}")
        values = dict(values)
        if values.get("y_range") is not None:
            values["y_range"] = tuple(values["y_range"])
        return cls(**values)


SETTINGS: dict[str, Setting] = {
    field.name: field.metadata["setting"] for field in dataclasses.fields(RunConfig)
}
_FIELD_DEFAULTS = {field.name: field.default for field in dataclasses.fields(RunConfig)}
# Settings only the autograd engine reads: the compiled engine has no batches, optimizer choice,
# schedule, sparse gradients or weight decay.
AUTOGRAD_ONLY = tuple(name for name, setting in SETTINGS.items() if setting.engines == AUTOGRAD)
# Each setting's value where nothing sets it: a model's tuned value falls back to it.
_BASES = {
    name: setting.base if setting.by_model else _FIELD_DEFAULTS[name] for name, setting in SETTINGS.items()
}
# Each compiled fit (recsys.models.registry.FITS) as an error message names it.
FIT_NAMES = {
    "ratings": "per-rating AdaGrad",
    "gibbs": "a Gibbs sampler (it samples its priors' strength; its chains start at one scale)",
    "fm": "a Gibbs sampler over feature rows (it samples its priors' strength; chains start at one scale)",
    "bpr": "BPR",
    "als": "implicit ALS (each side solved in closed form, no learning rate)",
}


def differences(written: RunConfig, trained: RunConfig) -> str:
    """The settings in which a run folder's config.json (`written`) differs from its checkpoint's
    (`trained`), each as "name WRITTEN against TRAINED"; "" where none does."""
    return ", ".join(
        f"{name} {getattr(written, name)!r} against {getattr(trained, name)!r}"
        for name in SETTINGS
        if getattr(written, name) != getattr(trained, name)
    )


def unread(fit: str) -> tuple[str, ...]:
    """The settings the compiled engine's `fit` does not read (a Gibbs sampler draws the priors'
    strength; implicit ALS has no learning rate; a ranking score has no y_range)."""
    return tuple(name for name, setting in SETTINGS.items() if fit in setting.unread_by)


def refuse_unread(fields: set[str], model: str, engine: str) -> None:
    """Setting one of `fields` that `model` on `engine` does not read is an error naming it (a RunConfig
    refuses one set apart from its base; train.py one given as a flag at all, as a flag given at the
    base would otherwise be taken and do nothing: `--alpha 1` on dotbias, where `--alpha 2` was refused)."""
    if engine not in PER_RATING:  # the autograd engine reads every setting but the compiled engine's own
        for name in SETTINGS:
            if name in fields and "autograd" not in SETTINGS[name].engines:
                raise RecsysError(f"`{name}` applies to `engine` compiled only")
        return
    entry = model_entry(model)
    for name in unread(entry.fit):
        if name in fields:
            autograd = not entry.ranks and "autograd" in SETTINGS[name].engines
            other = ", or use `engine` autograd" if autograd else ""
            raise RecsysError(
                f"`{name}` has no effect on {model}'s {engine} engine, {FIT_NAMES[entry.fit]}; "
                f"leave it out{other}"
            )


def refuse_autograd_only(fields: set[str], engine: str) -> None:
    """The compiled and device engines read none of these settings: setting one is an error naming it
    (a RunConfig refuses one set apart from its default; train.py one given as a flag at all)."""
    for name in AUTOGRAD_ONLY:
        if name in fields:
            raise RecsysError(f"`{name}` applies to `engine` autograd only (the {engine} engine has none)")


def default_model(implicit: bool) -> str:
    """The model to train where none is named: `ials` on interactions (a rating model would refuse
    them), else RunConfig's."""
    return RANKING_DEFAULT_MODEL if implicit else str(_FIELD_DEFAULTS["model"])


def config_for(model: str, *, engine: str | None = None, **overrides: Any) -> RunConfig:
    """The config for `model` with its tuned defaults, then `overrides` (None values ignored):
    RunConfig(model=model, ...) with the same settings. `engine` None chooses: compiled where the
    model has it, on the CPU, unless an override sets a field only the autograd engine reads (a batch
    size, optimizer, schedule, sparse or wd)."""
    settings: dict[str, Any] = {name: value for name, value in overrides.items() if value is not None}
    if engine is not None:
        settings["engine"] = engine
    return RunConfig(model=model, **settings)


def model_for(
    config: RunConfig, n_users: int, n_items: int, generator: "torch.Generator | None" = None
) -> "RatingModel":
    """The model `config` describes, for `n_users` users and `n_items` items, initialised from
    `generator`."""
    return build_model(
        config.model, n_users, n_items, config.n_factors, config.y_range, generator, config.init_scale,
        config.built_members,
    )  # fmt: skip


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and `taskset` narrow)."""
    return len(os.sched_getaffinity(0))


def default_threads() -> int:
    """Threads for one process: every core it may use, shared out among torchrun's local ranks."""
    return max(1, available_cores() // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def check_device(device: str) -> None:
    """Refuse a CUDA device on a machine without one (torch is imported here, not with this module:
    a command checks its flags before torch loads)."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RecsysError(f"`device` {device}: no CUDA device is available here; use `device` cpu")


def check_threads(threads: int) -> int:
    """`threads` if this process may use that many cores; a one-line error naming it if not.

    Threads are not part of RunConfig: the compiled engine gives the same result on any number.
    """
    cores = available_cores()
    threads = _plain(threads)  # type: ignore[assignment]
    if not _is_whole(threads):
        raise RecsysError(f"`threads` must be a whole number, got {threads!r}")
    if threads < 1:
        raise RecsysError(f"`threads` must be at least 1, got {threads!r}")
    if threads > cores:
        raise RecsysError(f"`threads` {threads}: this process may use {cores} core(s); pass at most {cores}")
    return threads


# The models whose features are the users' alone (their engine trains user by user).
READS_USER_FEATURES_ONLY = ("svdpp",)
# The models with a term for each rating's time (the `time` feature group).
READS_TIME = ("bfm",)
# The models whose device-engine steps torchrun's ranks share (SVD++'s bags step per user, in one
# process): under torchrun on a GPU, `engine` auto picks the device engine for them, else autograd.
SHARES_DEVICE_STEPS = ("dot", "dotbias")


def reads_time(config: RunConfig) -> bool:
    """Whether `config`'s run reads each rating's time: its data then carries it (x's third column)."""
    return "time" in feature_groups(config.features) and reads_features(config.model, config.engine)


def feature_sides_read(model: str) -> tuple[str, ...]:
    """The sides ("user", "item") whose side-feature tables `model` reads: a dataset with only the
    other side's (ml-latest-small's items', for svdpp) gives it none."""
    return ("user",) if model in READS_USER_FEATURES_ONLY else ("user", "item")


def reads_compiled_defaults(model: str, engine: str) -> bool:
    """Whether `model` on `engine` takes its registry entry's compiled defaults: on the compiled engine
    where it has them, and on the device engine where they are per-rating AdaGrad's (fit `ratings`)."""
    entry = model_entry(model)
    if engine == "device":
        return entry.steps_by_rating
    return engine == "compiled" and entry.compiled_defaults is not None


def default_features(model: str, engine: str) -> str | None:
    """`model`'s default `features` on `engine` from its registry entry; None where it reads none."""
    entry = model_entry(model)
    defaults = entry.compiled_defaults if reads_compiled_defaults(model, engine) else entry.defaults
    return (defaults or {}).get("features")


def reads_features(model: str, engine: str) -> bool:
    """Whether `model` reads `features` on `engine`: its registry entry gives it a default there."""
    return default_features(model, engine) is not None


def unread_feature_sides(config: RunConfig, given: Sequence[str]) -> tuple[str, list[str]]:
    """Of the sides ("user", "item") given side-feature tables, those `config`'s run reads nothing
    from, and why."""
    if not reads_features(config.model, config.engine):
        return f"{config.model} reads no side features", list(given)
    if "side" not in feature_groups(config.features):
        return f"`features` {config.features!r} names no side features", list(given)
    unread = [side for side in given if side not in feature_sides_read(config.model)]
    return (f"{config.model} reads the users' side features only" if unread else ""), unread
