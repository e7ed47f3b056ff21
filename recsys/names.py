"""The names that flags and configs accept, importable without pandas or torch, so that `--help` and
a mistyped flag answer at once."""

MOVIELENS_VARIANTS = ("ml-100k", "ml-1m", "ml-10m", "ml-20m", "ml-25m", "ml-32m", "ml-latest-small")
DATASETS = (*MOVIELENS_VARIANTS, "tiny", "synthetic")
PREDEFINED_FOLDS = ("u1", "u2", "u3", "u4", "u5", "ua", "ub")
SPLIT_KINDS = ("random", "user", "user-last", "time", *PREDEFINED_FOLDS)
# The feature groups a factorisation machine may use beside the ids (RunConfig.features): side
# features (recsys.data.features), implicit feedback (the items each user rated, the users who
# rated each item: SVD++'s idea, from training ratings only) and the user and day of each rating (bfm only).
FEATURE_GROUPS = ("side", "implicit", "time")


def feature_groups(features: str) -> tuple[str, ...]:
    """RunConfig.features' comma list as its groups ("" none)."""
    return tuple(name.strip() for name in features.split(",") if name.strip())


# The files of a run folder: DATA_FILE records where the data was read, so that resuming and
# recommending find it again without --data-dir; RECOMMEND_FILE what recommending reads of the data
# (recsys.workflows.recommend_data). A run writes its DESCRIPTION before its first checkpoint.
CONFIG_FILE, METRICS_FILE = "config.json", "metrics.json"
CHECKPOINT_FILE, DATA_FILE, RECOMMEND_FILE = "checkpoint.pt", "data.json", "recommend.npz"
DESCRIPTION = (CONFIG_FILE, DATA_FILE, RECOMMEND_FILE)
# The files a run read, by their key in its DATA_FILE: a resumed run may be told each one's new place.
MOVABLE_FILES = ("ratings", "items", "user_features", "item_features")
# tune.py's search folder holds the run its best setting trained, in this folder.
SEARCH_RUN_FOLDER = "run"

# A mid-run checkpoint is written once this many seconds have passed since the last (and the last
# epoch's always), so runs of short epochs do not spend their time writing them.
CHECKPOINT_SECONDS = 30.0
