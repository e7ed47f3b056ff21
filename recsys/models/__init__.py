"""Rating models: each maps a (batch, 2) LongTensor of [user, item] indices to (batch,) ratings.

They compute predictions and nothing else (no optimizer, device or seeding), so the shared trainer,
the contract tests and fastai's `Learner` can all drive any of them. Every model implements one
interface (`base.RatingModel`) and is held, with its tuned defaults, by one registry (`registry`).

Files: base (the interface), layers (the pieces models are built from), dot (`dot`, `dotbias`),
linear (`linear`, `embproj`), registry. Each name below is imported from its file on first use
(PEP 562), so the registry and its defaults can be read without importing torch.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recsys.models.base import (
        Explanation,
        Factorisation,
        LearnedBiases,
        RatingModel,
        YRange,
        rating_model,
    )
    from recsys.models.dot import DotProduct, DotProductBias
    from recsys.models.layers import sigmoid_range
    from recsys.models.linear import EmbeddingProjection, LinearDotProduct
    from recsys.models.registry import (
        COMPILED_DEFAULTS,
        MODEL_DEFAULTS,
        MODELS,
        ModelEntry,
        build_model,
        model_entry,
        model_names,
        register,
        registered,
        unregister,
    )

_HOMES = {
    "recsys.models.registry": [
        "MODELS",
        "MODEL_DEFAULTS",
        "COMPILED_DEFAULTS",
        "ModelEntry",
        "build_model",
        "model_entry",
        "model_names",
        "register",
        "registered",
        "unregister",
    ],
    "recsys.models.base": [
        "RatingModel",
        "rating_model",
        "Factorisation",
        "LearnedBiases",
        "Explanation",
        "YRange",
    ],
    "recsys.models.layers": ["sigmoid_range"],
    "recsys.models.dot": ["DotProduct", "DotProductBias"],
    "recsys.models.linear": ["LinearDotProduct", "EmbeddingProjection"],
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = [
    "COMPILED_DEFAULTS",
    "MODELS",
    "MODEL_DEFAULTS",
    "DotProduct",
    "DotProductBias",
    "EmbeddingProjection",
    "Explanation",
    "Factorisation",
    "LearnedBiases",
    "LinearDotProduct",
    "ModelEntry",
    "RatingModel",
    "YRange",
    "build_model",
    "model_entry",
    "model_names",
    "rating_model",
    "register",
    "registered",
    "sigmoid_range",
    "unregister",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its file the first time it is asked for."""
    if name not in _HOME_OF:
        raise AttributeError(f"module 'recsys.models' has no attribute {name!r}")
    value = getattr(import_module(_HOME_OF[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
