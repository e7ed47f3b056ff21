"""recsys' models as a scikit-learn estimator, for cross_validate, GridSearchCV and Pipelines.

X holds raw (user, item) ids, two columns of integers or strings; y the ratings. The model trains on
all of (X, y) with the shared trainer, so the estimator's figures are those of `train.py` with the
same settings; scikit-learn's splitters do the holding out.
"""

from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from recsys.config import config_for
from recsys.data.encoding import IdMap, RatingTensors
from recsys.data.ratings_table import ids, row_of_frame
from recsys.errors import RecsysError
from recsys.evaluate.metrics import predict
from recsys.models import build_model
from recsys.train.trainer import fit
from recsys.workflows.experiment import fitted_config

# What predict does with a user or item that fit never saw.
PREDICT_UNKNOWN = ("mean", "error")


class RatingRegressor(RegressorMixin, BaseEstimator):
    """A rating model (`model`: dot, dotbias, linear, embproj, or any registered one) fitted on raw
    (user, item) ids. Parameters left at None take the model's tuned defaults for its engine, as
    `train.py` does. `unknown`: "mean" predicts the training mean for an id fit never saw; "error"
    raises a ValueError naming it. `score` is R^2 (scikit-learn's rule for regressors); search with
    `scoring="neg_root_mean_squared_error"` to rank by RMSE.
    """

    def __init__(
        self,
        model: str = "dotbias",
        *,
        engine: str | None = None,
        n_factors: int | None = None,
        epochs: int | None = None,
        lr: float | None = None,
        batch_size: int | None = None,
        l2: float | None = None,
        wd: float | None = None,
        y_range: tuple[float, float] | None = None,
        unknown: str = "mean",
        seed: int = 0,
        threads: int | None = None,
    ) -> None:
        self.model = model
        self.engine = engine
        self.n_factors = n_factors
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.l2 = l2
        self.wd = wd
        self.y_range = y_range
        self.unknown = unknown
        self.seed = seed
        self.threads = threads

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True  # ids may be strings (ISBNs, UUIDs)
        tags.input_tags.categorical = True  # each column is a categorical id, not a measurement
        tags.input_tags.allow_nan = False
        tags.target_tags.required = True
        return tags

    def fit(self, X: Any, y: Any) -> "RatingRegressor":
        """Train on every (user, item, rating) given."""
        if self.unknown not in PREDICT_UNKNOWN:
            raise ValueError(f"unknown={self.unknown!r}; choose one of: {', '.join(PREDICT_UNKNOWN)}")
        X, y = validate_data(self, X, y, dtype=None, ensure_all_finite=False, y_numeric=True)
        users, items = _id_columns(X)
        ratings = np.asarray(y, dtype=np.float64)
        if not np.isfinite(ratings).all():
            raise ValueError("y holds NaN or infinite ratings")
        self.users_, self.items_ = IdMap.fit(users), IdMap.fit(items)
        low, high = float(ratings.min()), float(ratings.max())
        # One rating value gives no scale: a unit-wide one around it, so the y_range stays a range.
        scale = (low, high) if low < high else (low - 1.0, high + 1.0)
        try:
            config = config_for(
                self.model,
                engine=self.engine,
                n_factors=self.n_factors,
                epochs=self.epochs,
                lr=self.lr,
                batch_size=self.batch_size,
                l2=self.l2,
                wd=self.wd,
                y_range=self.y_range,
                seed=self.seed,
            )
        except RecsysError as error:  # scikit-learn reports bad parameters as ValueErrors
            raise ValueError(str(error)) from None
        self.config_ = fitted_config(config, scale, len(ratings))
        encoded = torch.from_numpy(np.stack([self.users_.encode(users), self.items_.encode(items)], axis=1))
        train = RatingTensors(encoded, torch.from_numpy(ratings.astype(np.float32)))
        nothing = RatingTensors(encoded[:0], train.y[:0])  # no validation part: the splitter holds out
        generator = torch.Generator().manual_seed(self.seed)
        self.model_ = build_model(
            self.config_.model,
            len(self.users_),
            len(self.items_),
            self.config_.n_factors,
            self.config_.y_range,
            generator,
        )
        fit(self.model_, train, nothing, self.config_, generator, threads=self.threads, progress=False)
        self.model_.cpu()
        self.train_mean_ = float(ratings.mean())
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predicted ratings; ids fit never saw follow `unknown`."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=None, ensure_all_finite=False, reset=False)
        users, items = _id_columns(X)
        known = self.users_.known(users) & self.items_.known(items)
        if self.unknown == "error" and not known.all():
            unseen = [(u, i) for u, i in zip(users[~known][:5], items[~known][:5], strict=True)]
            raise ValueError(f"(user, item) pairs with an id fit never saw: {unseen}")
        predictions = np.full(len(users), self.train_mean_, dtype=np.float64)
        if known.any():
            x = torch.from_numpy(
                np.stack([self.users_.encode(users[known]), self.items_.encode(items[known])], axis=1)
            )
            predictions[known] = predict(self.model_, x).numpy()
        return predictions


def _id_columns(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The user and item ids of a two-column X: integers where every id is one, else strings."""
    if X.ndim != 2 or X.shape[1] != 2:
        width = X.shape[1] if X.ndim == 2 else 0
        raise ValueError(f"X must have two columns, the user and the item ids; got {width} feature(s)")
    try:
        return tuple(  # type: ignore[return-value]
            ids(pd.Series(X[:, column]), kind, "X", row_of_frame)
            for column, kind in ((0, "user"), (1, "item"))
        )
    except RecsysError as error:
        raise ValueError(str(error)) from None
