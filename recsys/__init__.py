"""recsys: rating-prediction models on MovieLens and your own ratings, in the fastai style.

The public API: `from recsys import load_dataset, config_for, train_and_evaluate, ...`. Each name is
imported from its layer on first use (PEP 562), so `import recsys` and the commands' `--help` stay
free of torch, pandas and numba.
"""

from importlib import import_module
from typing import Any

_HOMES = {
    "recsys.errors": ["RecsysError", "DataError"],
    "recsys.config": ["RunConfig", "config_for"],
    "recsys.data.dataset": ["RatingsDataset"],
    "recsys.data.catalog": ["load_dataset", "resolve_dataset", "planted_truth"],
    "recsys.data.synthetic": ["SyntheticConfig", "make_synthetic"],
    "recsys.data.splits": ["Split", "make_split"],
    "recsys.data.encoding": ["IdMap", "EncodedSplit", "encode_split"],
    "recsys.models": ["MODELS", "build_model", "sigmoid_range"],
    "recsys.evaluate.metrics": ["predict", "evaluate", "evaluate_test", "rmse", "mae"],
    "recsys.evaluate.biases": ["LearnedBiases", "learned_biases"],
    "recsys.evaluate.factors": ["item_vectors", "cosine_neighbours"],
    "recsys.train.trainer": ["fit", "EpochStats"],
    "recsys.train.checkpoints": ["Checkpoint", "load_checkpoint"],
    "recsys.workflows.experiment": ["RunResult", "train_and_evaluate"],
    "recsys.workflows.compare": [
        "Comparison",
        "compare_models",
        "item_table",
        "user_table",
        "bias_correlations",
        "extreme_items",
    ],
    "recsys.workflows.report": ["write_report"],
    "recsys.workflows.recommend": ["recommend", "cold_start", "similar_items", "explain"],
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_HOME_OF)


def __getattr__(name: str) -> Any:
    """Import a public name from its layer the first time it is asked for."""
    if name not in _HOME_OF:
        raise AttributeError(f"module 'recsys' has no attribute {name!r}")
    value = getattr(import_module(_HOME_OF[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
