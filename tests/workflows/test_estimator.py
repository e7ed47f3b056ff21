"""recsys.workflows.estimator: RatingRegressor in scikit-learn's machinery (clone, searches, pipelines,
its own estimator checks) and on ids of every kind."""

import pickle
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.metrics import root_mean_squared_error
from sklearn.model_selection import GridSearchCV, KFold, RandomizedSearchCV, cross_validate
from sklearn.pipeline import Pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from recsys import RatingRegressor
from recsys.data.dataset import RatingsDataset

QUICK = {"epochs": 3, "threads": 1}


@pytest.fixture(scope="module")
def split(tiny: RatingsDataset) -> tuple[pd.DataFrame, pd.Series, pd.DataFrame, pd.Series]:
    """The tiny ratings cut 80/20 at random: (X_train, y_train, X_test, y_test)."""
    ratings = tiny.ratings.sample(frac=1.0, random_state=0)
    cut = int(0.8 * len(ratings))
    X, y = ratings[["user", "item"]], ratings["rating"]
    return X.iloc[:cut], y.iloc[:cut], X.iloc[cut:], y.iloc[cut:]


def test_fit_predict_beats_the_training_mean(split: Any) -> None:
    X_train, y_train, X_test, y_test = split
    model = RatingRegressor(**QUICK).fit(X_train, y_train)
    predicted = model.predict(X_test)
    assert predicted.shape == (len(X_test),) and predicted.dtype == np.float64
    mean_rmse = root_mean_squared_error(y_test, np.full(len(y_test), y_train.mean()))
    assert root_mean_squared_error(y_test, predicted) < 0.9 * mean_rmse
    assert model.n_features_in_ == 2 and list(model.feature_names_in_) == ["user", "item"]
    assert model.config_.epochs == 3 and model.config_.y_range == pytest.approx((0.0, 5.5))


def test_string_ids_fit_as_well_as_integer_ids(split: Any) -> None:
    X_train, y_train, X_test, y_test = split

    def as_text(X: pd.DataFrame) -> pd.DataFrame:
        return X.assign(user="reader-" + X["user"].astype(str), item="978-" + X["item"].astype(str))

    numbers = RatingRegressor(**QUICK).fit(X_train, y_train)
    text = RatingRegressor(**QUICK).fit(as_text(X_train), y_train)
    assert not text.users_.integer_ids and numbers.users_.integer_ids
    # Other ids sort differently, so rows start elsewhere: equal within noise, not bit for bit.
    scores = [
        root_mean_squared_error(y_test, model.predict(X))
        for model, X in ((numbers, X_test), (text, as_text(X_test)))
    ]
    assert scores[1] == pytest.approx(scores[0], rel=0.05)


def test_unseen_ids_get_the_training_mean_or_an_error(split: Any) -> None:
    X_train, y_train, _, _ = split
    known_user, known_item = X_train["user"].iloc[0], X_train["item"].iloc[0]
    unseen = pd.DataFrame({"user": [known_user, 10**9], "item": [10**9, known_item]})
    model = RatingRegressor(**QUICK).fit(X_train, y_train)
    assert model.predict(unseen) == pytest.approx([y_train.mean()] * 2)
    strict = RatingRegressor(unknown="error", **QUICK).fit(X_train, y_train)
    with pytest.raises(ValueError, match="1000000000"):
        strict.predict(unseen)
    with pytest.raises(ValueError, match="unknown='drop'"):
        RatingRegressor(unknown="drop").fit(X_train, y_train)


def test_same_seed_same_predictions_and_parameters_survive_clone(split: Any) -> None:
    X_train, y_train, X_test, _ = split
    model = RatingRegressor(model="dot", n_factors=8, seed=3, **QUICK)
    twin = clone(model)
    assert twin.get_params() == model.get_params() and not hasattr(twin, "model_")
    first = model.fit(X_train, y_train).predict(X_test)
    assert np.array_equal(first, twin.fit(X_train, y_train).predict(X_test))
    other = clone(model).set_params(seed=4).fit(X_train, y_train).predict(X_test)
    assert not np.array_equal(first, other)
    restored = pickle.loads(pickle.dumps(model))
    assert np.array_equal(restored.predict(X_test), first)


def test_predictions_do_not_depend_on_order_or_batch(split: Any) -> None:
    X_train, y_train, X_test, _ = split
    model = RatingRegressor(**QUICK).fit(X_train, y_train)
    whole = model.predict(X_test)
    order = np.random.default_rng(0).permutation(len(X_test))
    # float32 sums vectorised differently for another batch length: equal to the last bit or two.
    assert np.allclose(model.predict(X_test.iloc[order]), whole[order], rtol=1e-6, atol=0)
    assert np.allclose(model.predict(X_test.iloc[:7]), whole[:7], rtol=1e-6, atol=0)
    assert np.array_equal(model.predict(X_test.to_numpy()), whole)  # an array as well as a frame


@pytest.mark.parametrize(
    ("X", "y", "expected"),
    [
        (np.array([[1, 2, 3]]), [4.0], "two columns"),
        (np.array([[1, 2], [3, 4]]), [4.0], "inconsistent numbers of samples"),
        (np.array([[1.0, np.nan], [3.0, 4.0]]), [4.0, 3.0], "missing item id"),
        (np.array([[1, 2], [3, 4]]), [4.0, np.nan], "NaN"),
        (np.empty((0, 2)), [], "0 sample"),
    ],
)
def test_bad_input_is_a_value_error(X: Any, y: Any, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        RatingRegressor(**QUICK).fit(X, y)


def test_cross_validate_with_kfold(tiny: RatingsDataset) -> None:
    X, y = tiny.ratings[["user", "item"]], tiny.ratings["rating"]
    scores = cross_validate(
        RatingRegressor(**QUICK),
        X,
        y,
        cv=KFold(3, shuffle=True, random_state=0),
        scoring="neg_root_mean_squared_error",
    )
    rmse = -scores["test_score"]
    assert len(rmse) == 3 and np.all(rmse < y.std())


def test_grid_and_randomized_search_pick_from_their_grid(tiny: RatingsDataset) -> None:
    X, y = tiny.ratings[["user", "item"]], tiny.ratings["rating"]
    cv = KFold(3, shuffle=True, random_state=0)
    grid = {"n_factors": [2, 16], "epochs": [1, 4]}
    search = GridSearchCV(RatingRegressor(threads=1), grid, cv=cv, scoring="neg_root_mean_squared_error")
    search.fit(X, y)
    assert search.best_params_["n_factors"] in (2, 16) and search.best_params_["epochs"] in (1, 4)
    assert search.best_params_["epochs"] == 4  # one epoch does not fit these ratings as well as four
    assert len(search.cv_results_["mean_test_score"]) == 4
    randomized = RandomizedSearchCV(
        RatingRegressor(threads=1, epochs=2), {"lr": [0.01, 0.05, 0.1]}, n_iter=2, cv=cv, random_state=0
    )
    randomized.fit(X, y)
    assert randomized.best_params_["lr"] in (0.01, 0.05, 0.1)


def test_in_a_pipeline_that_picks_the_id_columns(split: Any) -> None:
    X_train, y_train, X_test, _ = split
    wide = X_train.assign(timestamp=0, note="x")
    picks = ColumnTransformer([("ids", "passthrough", ["user", "item"])])
    pipeline = Pipeline([("ids", picks), ("model", RatingRegressor(**QUICK))]).fit(wide, y_train)
    direct = RatingRegressor(**QUICK).fit(X_train, y_train)
    assert np.array_equal(pipeline.predict(X_test.assign(timestamp=1, note="y")), direct.predict(X_test))


# scikit-learn's checks that cannot apply to two columns of ids, and why. The contracts they check
# on other data (pickling, subset and order invariance, no change to parameters, 1-d input refused)
# are asserted on id data by the tests above.
MANY_FEATURES = (
    "it fits on 3 to 10 continuous feature columns; RatingRegressor takes exactly two columns of "
    "ids (user, item) and refuses any other width"
)
NOT_APPLICABLE = {
    name: MANY_FEATURES
    for name in (
        "check_fit_score_takes_y",
        "check_dont_overwrite_parameters",
        "check_n_features_in_after_fitting",
        "check_positive_only_tag_during_fit",
        "check_estimators_dtypes",
        "check_dtype_object",
        "check_pipeline_consistency",
        "check_estimators_nan_inf",
        "check_estimators_pickle",
        "check_f_contiguous_array_estimator",
        "check_regressors_train",
        "check_regressor_data_not_an_array",
        "check_regressors_no_decision_function",
        "check_supervised_y_2d",
        "check_regressors_int",
        "check_methods_sample_order_invariance",
        "check_methods_subset_invariance",
        "check_fit2d_1sample",
        "check_dict_unchanged",
        "check_fit2d_predict1d",
    )
}


@parametrize_with_checks(
    [RatingRegressor(epochs=2, threads=1)], expected_failed_checks=lambda estimator: NOT_APPLICABLE
)
def test_scikit_learn_estimator_checks(estimator: RatingRegressor, check: Any) -> None:
    check(estimator)
