"""recsys: rating-prediction models on MovieLens and your own ratings, in the fastai style.

The public API: `from recsys import load_dataset, config_for, train_and_evaluate, ...`. Each name is
imported from its layer on first use (PEP 562), so `import recsys` and the commands' `--help` stay
free of torch, pandas and numba.
"""

from recsys.lazy import lazy_names

_HOMES = {
    "recsys.errors": ["RecsysError", "DataError"],
    "recsys.config": ["RunConfig", "config_for"],
    "recsys.data.dataset": ["RatingsDataset"],
    "recsys.data.catalog": ["load_dataset", "resolve_dataset", "planted_truth"],
    "recsys.data.ratings_file": ["load_ratings"],
    "recsys.data.synthetic": ["SyntheticConfig", "make_synthetic"],
    "recsys.data.splits": ["Split", "make_split"],
    "recsys.data.encoding": ["IdMap", "EncodedSplit", "encode_split"],
    "recsys.models": ["MODELS", "build_model", "sigmoid_range"],
    "recsys.evaluation.metrics": ["predict", "evaluate", "evaluate_test", "rmse", "mae"],
    "recsys.evaluation.biases": ["LearnedBiases", "learned_biases"],
    "recsys.evaluation.factors": ["item_vectors", "cosine_neighbours"],
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
    "recsys.workflows.recommend_data": ["RecommendData"],
    "recsys.workflows.estimator": ["RatingRegressor"],
}
__all__ = sorted(name for names in _HOMES.values() for name in names)
__getattr__, __dir__ = lazy_names(__name__, _HOMES)
