"""One LensKit fit and prediction, timed, for scripts/bench.py: run by a Python that has LensKit.

LensKit 2025.8 (the newest for Python 3.11) requires pandas 2 and recsys pins pandas 3, so LensKit
lives in its own environment (docs/benchmarks.md says how to make it) and this script imports
neither recsys nor torch's training code: the bench writes a fold's ratings to two CSV files (user,
item, rating), runs this script with `--lenskit-python`'s interpreter, and reads one JSON line back.

    python lenskit_peer.py als '{"embedding_size": 50}' train.csv test.csv
"""

import json
import sys
import time

import numpy as np
import pandas as pd

SCORERS = {"als": ("lenskit.als", "BiasedMFScorer"), "funksvd": ("lenskit.funksvd", "FunkSVDScorer")}


def fit_predict(algorithm: str, settings: dict[str, object], train: pd.DataFrame, test: pd.DataFrame) -> dict:
    """Fit LensKit's `algorithm` scorer with `settings` on `train` and rate `test`'s pairs, timed."""
    from importlib import import_module

    from lenskit.batch import predict
    from lenskit.data import ItemListCollection, from_interactions_df
    from lenskit.pipeline import predict_pipeline

    module, name = SCORERS[algorithm]
    scorer = getattr(import_module(module), name)(**settings)
    wall, cpu = time.perf_counter(), time.process_time()
    pipeline = predict_pipeline(scorer, fallback=False)
    pipeline.train(from_interactions_df(train))
    # One process: the default pool of workers died here ("BrokenProcessPool") on this machine.
    queries = ItemListCollection.from_df(test, ["user_id"])
    scored = predict(pipeline, queries, n_jobs=1).to_df()
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    merged = test.merge(scored[["user_id", "item_id", "score"]], on=["user_id", "item_id"], how="left")
    if merged["score"].isna().any():
        raise RuntimeError(f"LensKit gave no score for {int(merged['score'].isna().sum())} test ratings")
    errors = merged["score"].to_numpy() - merged["rating"].to_numpy()
    return {"rmse": float(np.sqrt(np.mean(errors**2))), "seconds": seconds, "cpu_seconds": cpu_seconds}


def main(argv: list[str]) -> int:
    algorithm, settings, train_path, test_path = argv
    names = {"user": "user_id", "item": "item_id"}
    train, test = (pd.read_csv(path).rename(columns=names) for path in (train_path, test_path))
    print(json.dumps(fit_predict(algorithm, json.loads(settings), train, test)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
