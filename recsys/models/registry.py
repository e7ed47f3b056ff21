"""The one registry of models: each name with its class and its tuned defaults for each engine.

Importable without torch (config.py and the commands' `--help` read names and defaults from it): a
built-in model's class is named by where it lives and imported when first built. Adding a model
touches its own file and one `register` call at the bottom of this one; a model defined elsewhere (a
test, a notebook) registers itself with `register` or, for a while, `registered`.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import import_module
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from recsys.errors import RecsysError

if TYPE_CHECKING:
    import torch

    from recsys.models.base import RatingModel, YRange


@dataclass(frozen=True)
class ModelEntry:
    """One registered model."""

    name: str  # what --model and RunConfig.model call it
    model: str | type[RatingModel]  # the class, or where it lives: "package.module:ClassName"
    # RunConfig fields whose best value for this model differs from RunConfig's default (flags override)
    defaults: Mapping[str, Any]
    # the same for the compiled engine; None: the model has no compiled path (factorisation() is None)
    compiled_defaults: Mapping[str, Any] | None
    # What the compiled engine fits (FITS): "ratings" (per-rating AdaGrad on the squared error),
    # "gibbs" (samples a SampledModel's posterior), "fm" (the same over feature rows, a model with
    # `uses_features`), "bpr" or "als" (ranking from interactions).
    fit: str = "ratings"
    # What tune.py searches, per engine, where it is not that engine's usual space
    # (recsys.workflows.tune.SEARCH_SPACES): names of RunConfig fields (or y_margin) to candidates.
    search_spaces: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def steps_by_rating(self) -> bool:
        """It trains by per-rating AdaGrad steps (fit `ratings`, with factor tables): on the compiled
        engine, and on the device engine, which reads the same defaults."""
        return self.compiled_defaults is not None and self.fit == "ratings"

    @property
    def sampled(self) -> bool:
        """Its compiled engine samples a posterior (a SampledModel): no learning rate or penalty there."""
        return self.fit in SAMPLED_FITS

    @property
    def ranks(self) -> bool:
        """It is trained to rank items from interactions, not to predict ratings: its scores are no
        ratings (no RMSE), and it trains on the compiled engine only."""
        return self.fit in RANKING_FITS

    def model_class(self) -> type[RatingModel]:
        """The model's class, imported on first use and checked against the interface."""
        if not isinstance(self.model, str):
            return self.model
        if self.name not in _LOADED:
            module, _, attribute = self.model.partition(":")
            _LOADED[self.name] = check_model_class(
                getattr(import_module(module), attribute),
                compiled=self.compiled_defaults is not None,
                sampled=self.sampled,
                ranks=self.ranks,
            )
        return _LOADED[self.name]


# What a model's compiled engine fits; the last two train for top-N lists (recsys.train.bpr, .als).
FITS = ("ratings", "gibbs", "fm", "bpr", "als")
SAMPLED_FITS = ("gibbs", "fm")
RANKING_FITS = ("bpr", "als")
_REGISTRY: dict[str, ModelEntry] = {}
_LOADED: dict[str, type[RatingModel]] = {}  # classes registered by path, once imported and checked


def check_model_class(
    model_class: Any, *, compiled: bool = False, sampled: bool = False, ranks: bool = False
) -> type[RatingModel]:
    """`model_class` if it implements RatingModel in full and is built as the registry builds models;
    a TypeError saying what is missing if not. `compiled`: it must also have factorisation() tables,
    or be a SampledModel; `sampled`: it must be a SampledModel (and, without it, must not be); `ranks`:
    its class must say it ranks (and, without it, must not)."""
    import torch

    from recsys.models.base import RatingModel, SampledModel

    if not (isinstance(model_class, type) and issubclass(model_class, RatingModel)):
        raise TypeError(f"a registered model must subclass recsys.models.RatingModel, got {model_class!r}")
    if inspect.isabstract(model_class):
        missing = ", ".join(sorted(model_class.__abstractmethods__))
        raise TypeError(f"{model_class.__name__} does not implement {missing} of RatingModel")
    try:
        inspect.signature(model_class).bind(1, 1, 1, y_range=None, generator=None)
    except TypeError as error:
        raise TypeError(
            f"{model_class.__name__} must take (n_users, n_items, n_factors, y_range=None, "
            f"generator=None): {error}"
        ) from None
    if ranks != model_class.ranks:
        raise TypeError(
            f"{model_class.__name__} {'does not rank' if ranks else 'ranks'} (its `ranks`) but is registered "
            f"with {'a ranking' if ranks else 'a rating'} fit"
        )
    if sampled != issubclass(model_class, SampledModel):
        raise TypeError(
            f"{model_class.__name__} is {'not ' if sampled else ''}a SampledModel but is registered with "
            f"{'a sampling fit (gibbs or fm)' if sampled else 'a fit other than gibbs or fm'}"
        )
    if compiled and not sampled:
        # Only the model's form is asked for: a tiny one on the CPU, initialised from a throwaway
        # generator (the meta device's first use imports torch's compiler, seconds of a run's start).
        throwaway = torch.Generator().manual_seed(0)
        model = _builder(model_class)(2, 2, 1, y_range=None, generator=throwaway)
        if model.factorisation() is None:
            raise TypeError(
                f"{model_class.__name__} has compiled-engine defaults but no factorisation() tables"
            )
    return model_class


def register(
    name: str,
    model: str | type[RatingModel],
    *,
    defaults: Mapping[str, Any] | None = None,
    compiled_defaults: Mapping[str, Any] | None = None,
    fit: str = "ratings",
    search_spaces: Mapping[str, Mapping[str, Any]] | None = None,
) -> ModelEntry:
    """Add model `name`: its class (or "module:ClassName", imported when first built), its autograd
    `defaults` and, when the compiled engine can train it, its `compiled_defaults`; `fit`, what that
    engine fits (FITS: "gibbs" samples a SampledModel's posterior, "bpr" and "als" rank); `search_spaces`,
    per engine, what tune.py searches where the engine's usual space does not fit the model.

    A class is checked now (a TypeError if it does not implement RatingModel in full); a name taken
    is a ValueError.
    """
    if not name or not isinstance(name, str):
        raise ValueError(f"a model name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"model {name!r} is already registered")
    if fit not in FITS:
        raise ValueError(f"fit must be one of {', '.join(FITS)}, got {fit!r}")
    if not isinstance(model, str):
        check_model_class(
            model,
            compiled=compiled_defaults is not None,
            sampled=fit in SAMPLED_FITS,
            ranks=fit in RANKING_FITS,
        )
    if fit != "ratings" and compiled_defaults is None:
        raise ValueError(f"fit {fit!r} is the compiled engine's: give compiled_defaults")
    entry = ModelEntry(
        name,
        model,
        MappingProxyType(dict(defaults or {})),
        None if compiled_defaults is None else MappingProxyType(dict(compiled_defaults)),
        fit,
        _frozen_spaces(search_spaces),
    )
    _REGISTRY[name] = entry
    return entry


def _frozen_spaces(spaces: Mapping[str, Mapping[str, Any]] | None) -> Mapping[str, Mapping[str, Any]]:
    """Search spaces per engine, read-only."""
    return MappingProxyType(
        {engine: MappingProxyType(dict(space)) for engine, space in (spaces or {}).items()}
    )


def unregister(name: str) -> None:
    """Remove model `name` from the registry."""
    model_entry(name)
    del _REGISTRY[name]
    _LOADED.pop(name, None)


@contextmanager
def registered(
    name: str,
    model: str | type[RatingModel],
    *,
    defaults: Mapping[str, Any] | None = None,
    compiled_defaults: Mapping[str, Any] | None = None,
    fit: str = "ratings",
    search_spaces: Mapping[str, Mapping[str, Any]] | None = None,
) -> Iterator[ModelEntry]:
    """`register` for the length of a `with` block, then remove it again."""
    entry = register(
        name,
        model,
        defaults=defaults,
        compiled_defaults=compiled_defaults,
        fit=fit,
        search_spaces=search_spaces,
    )
    try:
        yield entry
    finally:
        unregister(name)


def model_names() -> tuple[str, ...]:
    """Every registered model's name, in registration order."""
    return tuple(_REGISTRY)


def model_entry(name: str) -> ModelEntry:
    """The entry of model `name`; an unknown name is an error listing the valid ones."""
    if name not in _REGISTRY:
        raise RecsysError(f"unknown model {name!r}; choose one of: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def build_model(
    name: str,
    n_users: int,
    n_items: int,
    n_factors: int,
    y_range: YRange | None,
    generator: torch.Generator | None = None,
    init_scale: float = 1.0,
    members: int = 1,
) -> RatingModel:
    """Build the registered model `name`, initialised from `generator` with every initial weight
    times `init_scale` (a searched hyperparameter; a registered class needs no argument for it); an
    unknown name lists the valid ones. `members` > 1: an ensemble of that many such models, each
    initialised in turn from `generator`. A size or scale no model can have is a ValueError naming it."""
    _check_build(
        n_users=n_users, n_items=n_items, n_factors=n_factors, members=members, init_scale=init_scale
    )
    from recsys.models.layers import float32_default  # torch: imported once a model is built

    builder = _builder(model_entry(name).model_class())
    with float32_default():
        built = [
            builder(n_users, n_items, n_factors, y_range=y_range, generator=generator) for _ in range(members)
        ]
    if members > 1:
        from recsys.models.ensemble import Ensemble  # torch: imported once a model is built

        model: RatingModel = Ensemble(built)
    else:
        model = built[0]
    if init_scale != 1.0:
        from recsys.models.layers import scale_weights_  # torch: imported once a model is built

        scale_weights_(model, init_scale)
    return model


def _check_build(*, init_scale: float, **sizes: int) -> None:
    """build_model's sizes and scale, checked as RunConfig checks them: torch's own errors for a table
    of -1 or "8" columns, or an ensemble of no members, name no argument (and 0 factors, or an
    initial scale of 0, build a model that cannot learn)."""
    for name, size in sizes.items():
        least = 0 if name in ("n_users", "n_items") else 1
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < least:
            raise ValueError(f"`{name}` must be a whole number of at least {least}, got {size!r}")
    if (
        isinstance(init_scale, bool)
        or not isinstance(init_scale, numbers.Real)
        or not 0 < init_scale < math.inf
    ):
        raise ValueError(f"`init_scale` must be positive and finite, got {init_scale!r}")


def _builder(model_class: type[RatingModel]) -> Callable[..., RatingModel]:
    """A registered class as what it is: a callable taking (n_users, n_items, n_factors, y_range,
    generator), as check_model_class made sure. RatingModel's own __init__ takes (n_users, n_items,
    y_range)."""
    return model_class


class _Classes(Mapping[str, "type[RatingModel]"]):
    """Each registered name -> its class, always as the registry now holds them."""

    def __getitem__(self, name: str) -> type[RatingModel]:
        if name not in _REGISTRY:
            raise KeyError(name)
        return _REGISTRY[name].model_class()

    def __contains__(self, name: object) -> bool:
        return name in _REGISTRY  # without importing the class

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(_REGISTRY))

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return f"MODELS({', '.join(_REGISTRY)})"


class _Defaults(Mapping[str, Mapping[str, Any]]):
    """Each registered name -> its autograd defaults, or (`compiled`) each name with a compiled path ->
    its compiled-engine defaults; always as the registry now holds them."""

    def __init__(self, compiled: bool) -> None:
        self.compiled = compiled

    def _of(self, entry: ModelEntry) -> Mapping[str, Any] | None:
        return entry.compiled_defaults if self.compiled else entry.defaults

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        defaults = self._of(_REGISTRY[name]) if name in _REGISTRY else None
        if defaults is None:
            raise KeyError(name)
        return defaults

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, entry in _REGISTRY.items() if self._of(entry) is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"{'COMPILED' if self.compiled else 'MODEL'}_DEFAULTS({dict(self)})"


MODELS: Mapping[str, type[RatingModel]] = _Classes()
MODEL_DEFAULTS: Mapping[str, Mapping[str, Any]] = _Defaults(compiled=False)
COMPILED_DEFAULTS: Mapping[str, Mapping[str, Any]] = _Defaults(compiled=True)


# The built-in models. `defaults` (the autograd engine's): dot's and dotbias's chosen by
# scripts/tune.py on ML-100K's u1.base alone; linear's and embproj's by older sweeps on u1, which a
# search scored by the same validation did not beat. `compiled_defaults`: by scripts/tune.py on u1.base
# alone; the compiled engine has no batches, optimizer choice or schedule. See docs/findings.md.
register(
    "dot",
    "recsys.models.dot:DotProduct",
    # Both engines' defaults chosen by scripts/tune.py on u1.base alone (docs/findings.md); its
    # autograd best had wd 1e-4, which changed no validation score, so wd stays 0 (--sparse needs it).
    defaults={"batch_size": 512, "lr": 0.0021, "epochs": 11, "n_factors": 64, "l2": 0.013},
    # Chosen by scripts/tune.py on u1.base alone, as dotbias's below (docs/findings.md).
    compiled_defaults={"lr": 0.031, "epochs": 19, "n_factors": 100, "l2": 0.02},
)
register(
    "dotbias",
    "recsys.models.dot:DotProductBias",
    # Both engines' defaults chosen by scripts/tune.py on u1.base alone (3-fold cross-validation
    # inside it; 12 settings on the autograd engine, 120 on the compiled one, then refined one
    # hyperparameter at a time): no test file was read to choose them (docs/findings.md). wd as dot's.
    defaults={"batch_size": 512, "lr": 0.0094, "epochs": 9, "n_factors": 32, "l2": 0.16},
    # An ensemble of two models of 12 epochs, chosen by 5-fold cross-validation inside u1.base over
    # members, epochs, lr, l2 and factors, among the settings that also beat one model on the small
    # datasets at hand (docs/findings.md).
    compiled_defaults={"members": 2, "lr": 0.035, "epochs": 12, "n_factors": 128, "l2": 0.065},
)
register(
    "linear",
    "recsys.models.linear:LinearDotProduct",
    defaults={"lr": 1e-2},  # the shared bias vectors tolerate, and gain from, a larger step
)
register(
    "embproj",
    "recsys.models.linear:EmbeddingProjection",
    defaults={"l2": 0.05},  # the penalty acts on projected vectors, so it needs less
)
register(
    "svdpp",
    "recsys.models.implicit:SVDPlusPlus",
    # Untuned (dotbias's earlier speed setting): the compiled engine is this model's way to train.
    defaults={"batch_size": 2048, "lr": 2e-2, "epochs": 5, "features": "implicit"},
    # Chosen by scripts/tune.py on u1.base alone, as dotbias's (120 settings; docs/findings.md).
    compiled_defaults={"lr": 0.035, "epochs": 10, "n_factors": 64, "l2": 0.098, "features": "implicit"},
)
register(
    "bpmf",
    "recsys.models.bayes:BayesianMF",
    # On the autograd engine it is a clipped biased dot product, with dotbias's earlier speed setting.
    defaults={"batch_size": 2048, "lr": 2e-2, "epochs": 5},
    # Gibbs sweeps (the first fifth burn-in) and the rank of each draw; no lr or l2: the sampler
    # draws the priors' strength too. Chosen by scripts/tune.py on u1.base alone, the sweeps then as
    # four chains of 38 (validation inside u1.base, docs/findings.md).
    compiled_defaults={"epochs": 38, "members": 4, "n_factors": 16},
    fit="gibbs",
    # On the sampler: its sweeps and the rank of each draw (no learning rate or penalty to tune).
    search_spaces={
        "compiled": {"epochs": [25, 38, 50, 75], "members": [2, 4, 8], "n_factors": [5, 8, 10, 16, 20]}
    },
)
register(
    "bfm",
    "recsys.models.bayes:BayesianFM",
    defaults={"batch_size": 2048, "lr": 2e-2, "epochs": 5},  # as bpmf's: a clipped biased dot product
    # Rendle's rank and sweeps for ML-100K (myFM's too), the sweeps as eight chains of 64 (validation
    # inside u1.base, docs/findings.md); the feature groups every dataset can give but time, which
    # serves only ratings whose time falls inside the training part's (docs/findings.md).
    compiled_defaults={"epochs": 64, "members": 8, "n_factors": 10, "features": "side,implicit"},
    fit="fm",
    search_spaces={
        "compiled": {"epochs": [16, 32, 64, 128], "members": [4, 8, 16, 32], "n_factors": [5, 8, 10, 16, 32]}
    },
)
register(
    "bpr",
    "recsys.models.ranking:BPRModel",
    # Ranking models train on the compiled engine only: no autograd defaults. Chosen by scripts/tune.py
    # on u1.base alone (validation NDCG@10 over 3 folds, 80 settings, then refined; docs/findings.md).
    compiled_defaults={"lr": 0.15, "epochs": 200, "n_factors": 64, "l2": 0.03, "init_scale": 3.0},
    fit="bpr",
    # Scored by validation NDCG@10 (recsys.workflows.tune), on log-spaced grids: BPR's step, penalty,
    # rank and length, and the initial scale (its first steps see vectors of that size).
    search_spaces={
        "compiled": {
            "lr": [0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5],
            "l2": [1e-3, 3e-3, 0.01, 0.03, 0.05, 0.1, 0.2, 0.3],
            "n_factors": [8, 16, 32, 64, 100, 128],
            "epochs": [20, 30, 50, 70, 100, 150, 200],
            "init_scale": [0.3, 1.0, 3.0, 10.0, 30.0],
        }
    },
)
register(
    "ials",
    "recsys.models.ranking:ImplicitALSModel",
    # Chosen as bpr's (150 settings, then refined): a strong penalty on many factors, as Rendle et al. find.
    compiled_defaults={"epochs": 20, "n_factors": 64, "l2": 30.0, "alpha": 3.0},
    fit="als",
    # Rendle et al. (2021) tune the rank, the penalty and the unobserved cells' weight (here 1 /
    # (1 + alpha)); iterations matter less once the penalty is right.
    search_spaces={
        "compiled": {
            "n_factors": [8, 12, 16, 24, 32, 48, 64, 100, 128],
            "l2": [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0],
            "alpha": [0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0],
            "epochs": [5, 10, 15, 20, 30, 50],
        }
    },
)
