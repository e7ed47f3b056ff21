"""recsys' models as a scikit-learn estimator, for cross_validate, GridSearchCV and Pipelines.

X holds raw (user, item) ids, two columns of integers or strings (and a third, the rating's time,
for `bfm` with `features` time); y the ratings. The model trains on all of (X, y) with the shared
trainer, so the estimator's figures are those of `train.py` with the same settings; scikit-learn's
splitters do the holding out.
"""

import inspect
import math
import warnings
from typing import Any, cast

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from recsys.config import (
    SETTINGS,
    RunConfig,
    check_device,
    check_threads,
    config_for,
    model_for,
    reads_time,
    unread_feature_sides,
)
from recsys.data.encoding import IdMap, RatingTensors
from recsys.data.features import check_coverage, check_feature_table, features_of
from recsys.data.ratings_table import (
    INTEGER_TEXT,
    row_of_frame,
    timestamps,
    warn_of_a_stray_end,
    whole_numbers,
)
from recsys.errors import DataError, RecsysError, plain_value
from recsys.evaluation.metrics import fallback_rating, predict
from recsys.models.bayes import BayesianFM, check_seconds
from recsys.models.layers import float32_default
from recsys.models.registry import model_entry, model_names
from recsys.names import feature_groups
from recsys.train.memory import check_fits
from recsys.train.ordinal import rating_steps
from recsys.train.threads import torch_threads
from recsys.train.trainer import fit
from recsys.workflows.experiment import (
    described_users,
    fitted_config,
    placed_users,
    warn_if_no_side_features,
    warn_if_worse_than_mean,
)


class InputError(RecsysError, ValueError):
    """A caller's mistake in parameters, X or y: a ValueError, as scikit-learn's estimators report one,
    and a RecsysError, so that recsys' own searches tell it from a bug's ValueError."""


# RunConfig's settings the estimator takes as parameters (None: the model's tuned default), from
# their Settings; then its own: what predict does with unseen ids, and the threads it runs on.
CONFIG_PARAMETERS = tuple(name for name, setting in SETTINGS.items() if setting.estimator and name != "model")
PARAMETER_DEFAULTS: dict[str, Any] = {
    **{name: 0 if name == "seed" else None for name in CONFIG_PARAMETERS},
    "unknown": "mean",
    "threads": None,
    "user_features": None,
    "item_features": None,
}
# What predict does with a user or item that fit never saw. recsys.config.UNKNOWN_POLICIES' "drop"
# leaves such ratings out of a test score; predict owes a rating for every row, so it has "error".
PREDICT_UNKNOWN = ("mean", "error")
# Unseen ids of each kind that an unknown="error" message names.
SHOWN_UNSEEN = 5


class RatingRegressor(RegressorMixin, BaseEstimator):
    """A rating model (`model`: dot, dotbias, linear, embproj, or any registered one) fitted on raw
    (user, item) ids.

    Parameters left at None take the model's tuned defaults for its engine (`config_for`), as
    `train.py` does; `engine` None picks the compiled engine where the model has one, unless a
    parameter only the autograd engine reads (batch_size, wd, optimizer, schedule) is set. `y_range`
    None: fastai's (0, 1.1 * max rating) from the ratings fit sees; `init_scale` multiplies every
    initial weight (None: 1, fastai's N(0, 0.01) tables); `members` > 1 trains an ensemble of that
    many models on the compiled engine (recsys.models.ensemble). `unknown`: "mean" predicts the
    training mean for a user or item fit never saw; "error" raises a ValueError naming them. `seed`
    seeds the initialisation and the shuffle (None: 0, train.py's default). `threads`: CPU threads
    of the compiled engine (whose result does not depend on them) and torch's threads during fit
    and predict, as train.py's --threads (None: the compiled engine uses every core this process
    may use, and torch's threads are left as they are); pass 1 when a search runs fits in parallel
    (`n_jobs`), and for results that repeat bit for bit on the autograd engine. `user_features`,
    `item_features`: side-feature tables indexed by raw id (recsys.data.features), for a model that
    reads them (`bfm`, with `features` naming the groups it uses). With `features` time, X has a third
    column, each rating's time: seconds since 1970, or dates.

    `score` is R^2 (scikit-learn's rule for regressors); pass `scoring="neg_root_mean_squared_error"`
    to a search or `cross_validate` to rank by RMSE.

    Fitted: `model_` (the trained nn.Module, on the CPU), `users_` and `items_` (IdMaps from raw ids
    to the model's rows), `train_mean_`, `config_` (the RunConfig trained with, y_range resolved; its
    dataset, split and unknown fields are unused), `n_features_in_` (2, or 3 with the times),
    `feature_names_in_` (for a DataFrame X with string column names). Text ids are read without the
    spaces around them, as a ratings file's are.
    """

    unknown: str
    threads: int | None
    user_features: pd.DataFrame | None
    item_features: pd.DataFrame | None

    def __init__(self, model: str = "dotbias", **parameters: Any) -> None:
        # The parameters are RunConfig's settings that `Setting.estimator` marks, then the
        # estimator's own: the signature scikit-learn reads is set from them below.
        unexpected = sorted(set(parameters) - set(PARAMETER_DEFAULTS))
        if unexpected:
            raise TypeError(f"RatingRegressor got unexpected parameter(s) {', '.join(unexpected)}")
        self.model = model
        for name, default in PARAMETER_DEFAULTS.items():
            setattr(self, name, parameters.get(name, default))

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True  # ids may be strings (ISBNs, UUIDs)
        tags.input_tags.categorical = True  # each column is an id, not a measurement
        tags.input_tags.allow_nan = False  # a missing id is an error
        tags.target_tags.required = True
        return tags

    def fit(self, X: Any, y: Any) -> "RatingRegressor":
        """Train on every (user, item, rating) given.

        Args:
            X: raw ids, user then item: a DataFrame of two columns, an (n, 2) array or a list of
                pairs; integers or strings (an id that spells an integer, "42", is that integer; the
                spaces around a string are not part of it).
            y: the n ratings, finite numbers.
        Returns:
            self, fitted.
        Raises:
            ValueError: X not two columns of ids (a missing or non-integer number id), lengths that
                differ, no ratings, a rating that is missing, NaN, infinite or no number (text, a
                date), or a parameter no run can use.

        The trainer scores a validation set after each epoch for monitoring only (nothing is chosen
        by it: the number of epochs is fixed), so fit gives it none: every rating given trains, and
        holding out is left to the caller's splitter, so no held-out rating leaks into training and
        none is taken from it.
        """
        self._check_unknown()
        if self.model in model_names() and model_entry(self.model).ranks:  # unknown: refused below
            raise InputError(
                f"model {self.model!r} ranks items and predicts no rating; RatingRegressor trains the "
                "rating models (train a ranking model with recsys.train_and_evaluate)"
            )
        config = self._config()
        timed = reads_time(config)
        X = _columns_checked(X, timed)
        _refuse_non_ratings(y)
        X, y = validate_data(self, X, y, dtype=None, ensure_all_finite=False, y_numeric=True)
        users, items = (_ids_given(column, kind) for column, kind in _id_columns(X, timed))
        ratings = np.asarray(y, dtype=np.float64)  # validate_data refused NaN and infinite ratings
        self.users_, self.items_ = IdMap.fit(users), IdMap.fit(items)
        low, high = float(ratings.min()), float(ratings.max())
        # One rating value is no scale (and zeros alone would give an empty y_range): one either side.
        scale = (low, high) if low < high else (low - 1.0, high + 1.0)
        if low < high:  # a typing slip (a 1e6 among stars) would set the scale: warned, as a file's is
            warn_of_a_stray_end(ratings, scale, "y", row_of_frame, setting="y_range")
        try:
            self.config_ = fitted_config(config, scale, len(ratings))
            check_fits(self.config_, len(self.users_), len(self.items_))
            if self.threads is not None:
                check_threads(self.threads)
            check_device(self.config_.device)  # before training, and as a ValueError like the rest
            if self.config_.ordinal:  # y off a scale of steps: refused here, as the sampler reads y
                rating_steps(ratings.astype(np.float32).astype(np.float64))
        except RecsysError as error:  # scikit-learn reports bad parameters as ValueErrors
            raise InputError(str(error)) from None
        encoded = np.stack([self.users_.encode(users), self.items_.encode(items)], axis=1)
        pairs = np.column_stack([encoded, _times(X)]) if timed else encoded
        train = RatingTensors(torch.from_numpy(pairs), torch.from_numpy(ratings.astype(np.float32)))
        no_validation = RatingTensors(train.x[:0], train.y[:0])
        config = self.config_
        generator = torch.Generator().manual_seed(config.seed)
        with float32_default():  # features and times coded in float32, as the model is built
            self.model_ = model_for(config, len(self.users_), len(self.items_), generator)
            tables = self._feature_tables(config)
            if self.model_.uses_features:
                raw_ids = (self.users_.raw_ids, self.items_.raw_ids)
                self.model_.set_features(
                    *features_of(feature_groups(config.features), *raw_ids, encoded, *tables)
                )
            if timed:  # times `_times` has checked
                cast(BayesianFM, self.model_).set_times(train.x[:, 0], train.x[:, 2])
            with torch_threads(self.threads):
                fit(
                    self.model_, train, no_validation, config, generator, threads=self.threads, progress=False
                )
        self.model_.cpu()
        self.train_mean_ = float(ratings.mean())
        warn_if_worse_than_mean(self.model_, train, self.train_mean_, config)
        return self

    def _config(self) -> RunConfig:
        """The run's settings from the parameters (a ValueError for ones no run can use)."""
        try:
            overrides = {name: getattr(self, name) for name in CONFIG_PARAMETERS if name != "engine"}
            return config_for(self.model, engine=getattr(self, "engine"), **overrides)  # noqa: B009
        except RecsysError as error:  # scikit-learn reports bad parameters as ValueErrors
            raise InputError(str(error)) from None

    def _feature_tables(self, config: RunConfig) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
        """`user_features` and `item_features`, checked as feature files are (a ValueError), with a
        warning for a table the run reads nothing from, or for side features named but not given."""
        tables = {"user": self.user_features, "item": self.item_features}
        given = [side for side, table in tables.items() if table is not None]
        try:
            for side in given:
                ids = (self.users_ if side == "user" else self.items_).raw_ids
                check_coverage(
                    check_feature_table(tables[side], side, f"{side}_features"), ids, side, f"{side}_features"
                )
        except RecsysError as error:
            raise InputError(str(error)) from None
        reason, unread = unread_feature_sides(config, given)
        if unread:
            names = " and ".join(f"{side}_features" for side in unread)
            warnings.warn(f"{reason}: {names} {'are' if len(unread) > 1 else 'is'} unused", stacklevel=3)
        warn_if_no_side_features(config, bool(given), "no `user_features` or `item_features` were given")
        return tables["user"], tables["item"]

    def predict(self, X: Any) -> np.ndarray:
        """Predicted ratings of (user, item) pairs.

        Args:
            X: raw ids as fit takes them, with the same columns (the times too, where fit read them).
        Returns:
            (n,) float64 ratings. A user fit never saw whose row `user_features` has, for a model that
            reads them, gets the rating its features predict (a cold start, as fold-in places a new
            user). Any other pair whose user or item fit never saw gets the training mean (inside
            y_range where one is set; unknown="mean") or is an error (unknown="error").
        Raises:
            ValueError: X not two columns of ids, or ids unseen in fit under unknown="error".
        """
        check_is_fitted(self, "model_")
        self._check_unknown()
        timed = reads_time(self.config_)
        X = _columns_checked(X, timed)
        X = validate_data(self, X, dtype=None, ensure_all_finite=False, reset=False)
        (user_column, _), (item_column, _) = columns = _id_columns(X, timed)
        (users, user_known, user_id), (items, item_known, _) = (
            _lookup(id_map, column, kind)
            for id_map, (column, kind) in zip((self.users_, self.items_), columns, strict=True)
        )
        known = user_known & item_known
        # Unseen, but placed by their features (text beside integer ids is no id a row can name).
        described = (
            ~user_known & user_id & described_users(self.model_, self.config_, self.user_features, users)
        )
        placed = user_known | described
        if self.unknown == "error" and not (placed & item_known).all():
            raise InputError(self._unseen_message(user_column[~placed], item_column[~item_known]))
        predictions = np.full(len(known), fallback_rating(self.model_, self.train_mean_), dtype=np.float64)
        if known.any():
            inner = np.stack([self.users_.encode(users[known]), self.items_.encode(items[known])], axis=1)
            if timed:  # each pair on its day: a user-day fit never saw is at the user-days' mean
                inner = np.column_stack([inner, _times(X)[known]])
            with torch_threads(self.threads):
                predictions[known] = predict(self.model_, torch.from_numpy(inner)).numpy()
        cold = described & item_known
        if cold.any():
            with torch_threads(self.threads):
                predictions[cold] = self._predict_from_features(users[cold], items[cold])
        return predictions

    def _predict_from_features(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Ratings of unseen `users` (raw, each with a row of `user_features`) for known `items`: each
        placed where its side features put it, as fold-in starts a new user with no ratings."""
        new, at = np.unique(users, return_inverse=True)
        nothing = [np.zeros(0, np.int64)] * len(new)
        placed = placed_users(self.model_, self.config_, self.user_features, new, nothing, len(self.items_))
        inner = torch.from_numpy(self.items_.encode(items))
        return placed.predict(torch.from_numpy(at), inner).double().numpy()

    def _check_unknown(self) -> None:
        """`unknown` is a policy predict has (checked by fit too, so a search fails early)."""
        if self.unknown not in PREDICT_UNKNOWN:
            why = " (it scores known ids only; predict owes a rating for every row)"
            raise InputError(
                f"unknown={self.unknown!r}{why if self.unknown == 'drop' else ''}; "
                f"choose one of: {', '.join(PREDICT_UNKNOWN)}"
            )

    def _unseen_message(self, users: np.ndarray, items: np.ndarray) -> str:
        """The unknown="error" message: which ids fit never saw, and the likely causes."""
        parts = []
        for kind, unseen, id_map in (("user", users, self.users_), ("item", items, self.items_)):
            if len(unseen):
                distinct = pd.unique(pd.Series(unseen, dtype=object))
                shown = ", ".join(repr(plain_value(raw)) for raw in distinct[:SHOWN_UNSEEN])
                more = f" and {len(distinct) - SHOWN_UNSEEN} more" if len(distinct) > SHOWN_UNSEEN else ""
                id_type = "integer" if id_map.integer_ids else "text"
                parts.append(f"{kind} id(s) {shown}{more} (fit saw {len(id_map):,} {id_type} {kind} ids)")
        return (
            f"{' and '.join(parts)} did not occur in the ratings fit was given (new users or items, or "
            "ids of another type or column order); unknown='mean' predicts the training mean for them"
        )


def _id_columns(X: np.ndarray, timed: bool = False) -> tuple[tuple[np.ndarray, str], tuple[np.ndarray, str]]:
    """The user and the item column of a validated X, each with its kind (text ids trimmed); X of
    another width (two columns, or three with the times where `timed`) is an error."""
    if X.shape[1] != 2 + timed:
        wanted = "three columns, the user and the item ids and each rating's time (`features` has time)"
        raise InputError(
            f"X must have {wanted if timed else 'two columns, the user and the item ids'}; got "
            f"{X.shape[1]} feature(s)"
        )
    return (_trimmed(X[:, 0], "user"), "user"), (_trimmed(X[:, 1], "item"), "item")


def _times(X: np.ndarray) -> np.ndarray:
    """A validated X's third column, each rating's time in whole seconds since 1970, checked as the
    time group reads them: fit and predict alike refuse milliseconds, which predict had put on days
    fit never saw, silently."""
    seconds = _seconds(X)
    try:
        check_seconds(seconds)
    except RecsysError as error:
        raise InputError(f"X: {error}") from None
    return seconds.astype(np.int64)


def _seconds(X: np.ndarray) -> np.ndarray:
    """A validated X's third column as whole seconds (numbers as float64, so that one past int64 is
    shown as it is): numbers, or dates as text, read as a ratings file's are; among numbers, one that
    is no finite number is an error naming its row. Kept as objects: pandas would take a column of
    date objects (Timestamps, datetimes) for datetime64, which pd.to_numeric counts in micro- or
    nanoseconds."""
    column = pd.Series(X[:, 2], dtype=object)
    seconds = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
    if not np.isfinite(seconds).any():  # no number at all: dates written as text ("2024-05-01 10:00")
        try:
            return timestamps(column, len(column), "X", row_of_frame)
        except DataError as error:
            raise InputError(str(error)) from None
    bad = np.flatnonzero(~np.isfinite(seconds))
    if bad.size:
        raise InputError(
            f"X: time {plain_value(X[bad[0], 2])!r} in row {int(bad[0]) + 1} is no number of seconds since "
            "1970 (or date)"
        )
    return np.floor(seconds)


def _trimmed(values: np.ndarray, kind: str) -> np.ndarray:
    """Text ids without the spaces around them, as a ratings file's or a DataFrame's are read ("a " is
    the id "a"; one of spaces alone is missing); numbers and other objects as they are."""
    if values.dtype.kind not in "OU":
        return values
    # A tuple, list, set, dict or array in one cell is several values (or none), not an id; pandas
    # fails on a column of them inside its own code.
    several = np.flatnonzero([isinstance(value, tuple | list | set | dict | np.ndarray) for value in values])
    if several.size:
        value = values[several[0]]
        raise InputError(
            f"X: {kind} id {value!r} in row {int(several[0]) + 1} is a {type(value).__name__}; each id is "
            "one integer or text"
        )
    trimmed = np.array([value.strip() if isinstance(value, str) else value for value in values], dtype=object)
    # Compared one by one: `==` on an array holding pandas' NA (a "string" column's missing id) is NA,
    # which has no truth value; a missing id is then named by `_integers`.
    empty = np.flatnonzero([isinstance(value, str) and value == "" for value in trimmed])
    if empty.size:
        raise InputError(f"X: missing {kind} id (empty text) in row {int(empty[0]) + 1}")
    return trimmed


def _columns_checked(X: Any, timed: bool) -> Any:
    """X with the dates of its third column as seconds since 1970 where `timed` (the ratings' times);
    other dates or durations are no ids (numpy finds no common type for them and numbers), nor are
    true/false values, which numpy would turn into ids 0 and 1 beside a column of integers. A Series
    has one dtype, not a column of them: it is one column, which validate_data names as such."""
    if isinstance(X, list | tuple) and any(
        isinstance(value, bool | np.bool_) for row in X if isinstance(row, list | tuple) for value in row[:2]
    ):
        raise InputError("X: true/false values in its (user, item) columns, not ids")
    if isinstance(X, pd.DataFrame):
        X = _integer_ids_kept(X)
    dtypes = getattr(X, "dtypes", None)
    for place, (name, dtype) in enumerate(
        (dtypes if isinstance(dtypes, pd.Series) else pd.Series(dtype=object)).items()
    ):
        if place < 2 and pd.api.types.is_bool_dtype(dtype):
            raise InputError(f"X: column {name!r} holds true/false values ({dtype}), not ids")
        if timed and place == 2 and pd.api.types.is_datetime64_any_dtype(dtype):
            X = X.copy()
            X[name] = (pd.to_datetime(X[name], utc=True) - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(
                seconds=1
            )
        elif pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
            raise InputError(f"X: column {name!r} holds dates or durations ({dtype}), not ids")
    return X


def _integer_ids_kept(X: pd.DataFrame) -> pd.DataFrame:
    """X with its columns of integer ids in numpy's int64 (object where uint64 ids pass int64): scikit-learn
    turns pandas' and Arrow's nullable integers into floats, as numpy turns uint64 beside int64, and a float
    past 2**53 no longer tells neighbouring ids apart. A column with a missing id is left to be named."""
    recast = [
        place
        for place, dtype in enumerate(X.dtypes.iloc[:2])
        if pd.api.types.is_integer_dtype(dtype)
        and not (isinstance(dtype, np.dtype) and dtype.kind == "i")
        and not X.iloc[:, place].isna().any()
    ]
    if not recast:
        return X
    X = X.copy()
    for place in recast:
        column = X.iloc[:, place]
        fits = pd.api.types.is_signed_integer_dtype(column.dtype) or len(column) == 0 or column.max() < 2**63
        X.isetitem(place, column.to_numpy(dtype=np.int64 if fits else object))
    return X


def _refuse_non_ratings(y: Any) -> None:
    """Ratings are numbers: dates or durations (which numpy reads as counts of nanoseconds), text that
    spells no number and a missing rating in an object column (None, which scikit-learn's NaN check
    lets through as NaN) are errors naming y and the row."""
    if y is None:  # validate_data says y is required
        return
    try:
        values = np.asarray(y)
    except ValueError:  # ragged: validate_data says what shape y must have
        return
    dtype = getattr(y, "dtype", values.dtype)
    if values.dtype.kind in "mM" or pd.api.types.is_datetime64_any_dtype(dtype):
        raise InputError(f"y holds dates or durations ({dtype}), not ratings")
    if values.dtype.kind not in "OUS":
        return
    for row, value in enumerate(values.ravel()):
        if value is None or value is pd.NA or value is pd.NaT:
            raise InputError(f"y: missing rating (None or NA) in row {row + 1}")
        try:
            float(value)
        except (TypeError, ValueError):
            raise InputError(f"y: rating {plain_value(value)!r} in row {row + 1} is not a number") from None


def _ids_given(values: np.ndarray, kind: str) -> np.ndarray:
    """A column of ids as fit keys them: int64 where every id is an integer or spells one, else each
    id as text. Ids keep their spelling: "007" and "7" are two ids, and an ISBN keeps its zeros."""
    integer, numbers = _integers(values, kind)
    return numbers if integer.all() else pd.Series(values).astype(str).to_numpy(dtype=object)


def _lookup(id_map: IdMap, values: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A column of ids as `id_map` keys them, which of them it knows, and which are ids of its type at
    all. Each id is looked up by itself, whatever else is in its column: text that spells no integer
    is unknown to a map of integers (its place holds 0, which is no id of its), and an integer is its
    text to a map of text."""
    if id_map.integer_ids:
        integer, numbers = _integers(values, kind)
        return numbers, integer & id_map.known(numbers), integer
    ids = _ids_given(values, kind)
    if ids.dtype.kind in "iu":
        ids = ids.astype(str).astype(object)
    return ids, id_map.known(ids), np.ones(len(ids), dtype=bool)


def _integers(values: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Which ids of a column are integers (whole numbers, or text that spells one), and their values
    (0 for the others). A missing id, a true/false or a fractional number is an error."""
    column = pd.Series(values).infer_objects()  # an object column of numbers reads as numbers
    missing = column.isna().to_numpy()
    if missing.any():
        raise InputError(f"X: missing {kind} id (NaN or None) in row {int(np.flatnonzero(missing)[0]) + 1}")
    if pd.api.types.is_bool_dtype(column.dtype):
        raise InputError(f"X: the {kind} ids are true/false values, not ids")
    if pd.api.types.is_integer_dtype(column.dtype):
        if column.dtype == np.uint64 and int(column.max()) > np.iinfo(np.int64).max:  # kept as text
            return np.zeros(len(column), dtype=bool), np.zeros(len(column), dtype=np.int64)
        return np.ones(len(column), dtype=bool), column.to_numpy(dtype=np.int64)
    if pd.api.types.is_numeric_dtype(column.dtype):
        numbers = column.to_numpy(dtype=np.float64)
        whole = whole_numbers(numbers)  # NaN and inf are not
        if not whole.all():
            row = int(np.flatnonzero(~whole)[0])
            value = float(numbers[row])
            why = (
                "is past 2**53, where a float no longer tells neighbouring integers apart (X's columns "
                "were made floats together: give the ids as integers or text)"
                if math.isfinite(value) and value == round(value)
                else "is not an integer; ids are integers or text (is X the (user, item) columns?)"
            )
            raise InputError(f"X: {kind} id {value!r} in row {row + 1} {why}")
        return whole, numbers.astype(np.int64)
    integer = column.astype(str).str.fullmatch(INTEGER_TEXT).to_numpy(dtype=bool)
    numbers = np.zeros(len(column), dtype=np.int64)
    numbers[integer] = column[integer].astype(str).astype(np.int64).to_numpy()
    return integer, numbers


# scikit-learn reads an estimator's parameters from its __init__'s signature.
RatingRegressor.__init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, default="dotbias"),
        *(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
            for name, default in PARAMETER_DEFAULTS.items()
        ),
    ]
)
