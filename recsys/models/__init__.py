"""Rating models: each maps a (batch, 2) LongTensor of [user, item] indices to (batch,) ratings.

They compute predictions and nothing else (no optimizer, device or seeding), so the shared trainer,
the contract tests and fastai's `Learner` can all drive any of them. Every model implements one
interface (`base.RatingModel`) and is held, with its tuned defaults, by one registry (`registry`).

Files: base (the interface), layers (the pieces models are built from), dot (`dot`, `dotbias`),
linear (`linear`, `embproj`), implicit (`svdpp`), bayes
(`bpmf`), ensemble (any of them `--members N` times), registry. Each name below is imported from its
file on first use (PEP 562), so the registry and its defaults can be read without importing torch.
"""

from typing import TYPE_CHECKING

from recsys.lazy import lazy_names

if TYPE_CHECKING:
    from recsys.models.base import (
        Explanation,
        Factorisation,
        LearnedBiases,
        RatingModel,
        SampledModel,
        YRange,
        rating_model,
    )
    from recsys.models.bayes import BayesianMF
    from recsys.models.dot import DotProduct, DotProductBias
    from recsys.models.ensemble import Ensemble
    from recsys.models.implicit import SVDPlusPlus
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
    from recsys.models.squash import sigmoid_range

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
        "SampledModel",
        "rating_model",
        "Factorisation",
        "LearnedBiases",
        "Explanation",
        "YRange",
    ],
    "recsys.models.squash": ["sigmoid_range"],
    "recsys.models.dot": ["DotProduct", "DotProductBias"],
    "recsys.models.linear": ["LinearDotProduct", "EmbeddingProjection"],
    "recsys.models.implicit": ["SVDPlusPlus"],
    "recsys.models.bayes": ["BayesianMF"],
    "recsys.models.ensemble": ["Ensemble"],
}
__all__ = [
    "COMPILED_DEFAULTS",
    "MODELS",
    "MODEL_DEFAULTS",
    "BayesianMF",
    "DotProduct",
    "DotProductBias",
    "EmbeddingProjection",
    "Ensemble",
    "Explanation",
    "Factorisation",
    "LearnedBiases",
    "LinearDotProduct",
    "ModelEntry",
    "RatingModel",
    "SVDPlusPlus",
    "SampledModel",
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
__getattr__, __dir__ = lazy_names(__name__, _HOMES)
