"""recsys.workflows.estimator: RatingRegressor in scikit-learn's machinery (clone, searches, pipelines,
its own estimator checks) and on ids of every kind."""

import pickle
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import planted_days, planted_side_features
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.exceptions import DataConversionWarning
from sklearn.metrics import root_mean_squared_error
from sklearn.model_selection import GridSearchCV, KFold, RandomizedSearchCV, cross_validate
from sklearn.pipeline import Pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from recsys import RatingRegressor
from recsys.config import available_cores
from recsys.data.catalog import load_dataset
from recsys.data.dataset import RatingsDataset
from recsys.train.trainer import TrainingDiverged

# Three epochs at a learning rate that learns tiny's ratings in three, whatever the tuned defaults.
QUICK = {"epochs": 3, "lr": 0.08, "threads": 1}

Split = tuple[pd.DataFrame, pd.Series, pd.DataFrame, pd.Series]


@pytest.fixture(scope="module")
def split(tiny: RatingsDataset) -> Split:
    """The tiny ratings cut 80/20 at random: (X_train, y_train, X_test, y_test)."""
    ratings = tiny.ratings.sample(frac=1.0, random_state=0)
    cut = int(0.8 * len(ratings))
    X, y = ratings[["user", "item"]], ratings["rating"]
    return X.iloc[:cut], y.iloc[:cut], X.iloc[cut:], y.iloc[cut:]


@pytest.fixture(scope="module")
def fitted(split: Split) -> RatingRegressor:
    """The default model (dotbias, compiled engine) fitted for three epochs on the training part."""
    X_train, y_train, _, _ = split
    return RatingRegressor(**QUICK).fit(X_train, y_train)


def test_fit_predict_beats_the_training_mean(split: Split, fitted: RatingRegressor) -> None:
    X_train, y_train, X_test, y_test = split
    predicted = fitted.predict(X_test)
    assert predicted.shape == (len(X_test),) and predicted.dtype == np.float64
    mean_rmse = root_mean_squared_error(y_test, np.full(len(y_test), y_train.mean()))
    assert root_mean_squared_error(y_test, predicted) < 0.9 * mean_rmse
    assert fitted.n_features_in_ == 2 and list(fitted.feature_names_in_) == ["user", "item"]
    assert fitted.config_.epochs == 3 and fitted.config_.engine == "compiled"
    assert fitted.config_.y_range == pytest.approx((0.0, 5.5))  # fastai's (0, 1.1 * max) for 1-5 stars
    assert fitted.train_mean_ == pytest.approx(float(y_train.mean()))
    assert len(fitted.users_) == X_train["user"].nunique() and fitted.users_.integer_ids


def test_text_ids_predict_exactly_as_the_integers_they_stand_for(split: Split) -> None:
    X_train, y_train, X_test, _ = split

    def as_text(X: pd.DataFrame) -> pd.DataFrame:
        # Zero-padded, so the text sorts as the integers do: each id gets the same row of the tables.
        return X.assign(
            user=[f"reader-{user:04d}" for user in X["user"]], item=[f"978-{item:05d}" for item in X["item"]]
        )

    numbers = RatingRegressor(**QUICK).fit(X_train, y_train)
    text = RatingRegressor(**QUICK).fit(as_text(X_train), y_train)
    assert not text.users_.integer_ids and text.users_.raw_ids[0] == f"reader-{numbers.users_.raw_ids[0]:04d}"
    assert np.array_equal(text.predict(as_text(X_test)), numbers.predict(X_test))


def test_ids_keep_their_spelling(split: Split) -> None:
    X_train, y_train, _, _ = split
    # As an ISBN-10, item 1 is "0000000001" (its zeros matter) and item 12 is "000000001X".
    isbn = {item: f"{item:010d}" for item in X_train["item"].unique()}
    isbn[12] = "000000001X"
    shop = X_train.assign(item=X_train["item"].map(isbn))
    model = RatingRegressor(**QUICK).fit(shop, y_train)
    assert model.items_.raw_ids[0] == "0000000001" and "000000001X" in set(model.items_.raw_ids)
    # Each id is looked up by itself: a new ISBN beside a known one leaves the known one its rating.
    known = shop.iloc[:1]
    with_new = pd.DataFrame(
        {"user": [known["user"].iloc[0]] * 2, "item": ["9999999999", known["item"].iloc[0]]}
    )
    assert model.predict(with_new)[1] == model.predict(known)[0] != model.train_mean_
    # "007" and "7" are two readers; text that reads as an integer ("7") is that integer.
    readers = pd.DataFrame({"user": ["007", "7", "7", "007"], "item": [1, 1, 2, 2]})
    two = RatingRegressor(**QUICK).fit(readers, [1.0, 5.0, 5.0, 1.0])
    assert list(two.users_.raw_ids) == ["007", "7"]
    integers = RatingRegressor(**QUICK).fit(pd.DataFrame({"user": [7, 8], "item": [1, 2]}), [1.0, 5.0])
    # A list of pairs mixing integers and text reaches numpy as all text: "7" is still user 7.
    assert np.array_equal(integers.predict([[7, "1"], [8, "2"]]), integers.predict([[7, 1], [8, 2]]))


def test_unseen_ids_get_the_training_mean_or_an_error(split: Split, fitted: RatingRegressor) -> None:
    X_train, y_train, _, _ = split
    known_user, known_item = X_train["user"].iloc[0], X_train["item"].iloc[0]
    unseen = pd.DataFrame(
        {"user": [known_user, 10**9, known_user], "item": [10**9 + 1, known_item, known_item]}
    )
    predicted = fitted.predict(unseen)
    assert predicted[:2] == pytest.approx([y_train.mean()] * 2) and predicted[2] != fitted.train_mean_
    strict = clone(fitted).set_params(unknown="error").fit(X_train, y_train)
    with pytest.raises(ValueError, match=r"user id\(s\) 1000000000 .* item id\(s\) 1000000001 "):
        strict.predict(unseen)
    many = pd.DataFrame({"user": range(10**9, 10**9 + 7), "item": [known_item] * 7})
    with pytest.raises(ValueError, match=r"1000000004 and 2 more") as raised:
        strict.predict(many)
    assert "1000000005" not in str(raised.value)
    assert np.array_equal(strict.predict(unseen.iloc[2:]), predicted[2:])  # known pairs predict alike
    with pytest.raises(ValueError, match=r"unknown='drop' .*predict owes a rating for every row"):
        RatingRegressor(unknown="drop").fit(X_train, y_train)


def test_same_seed_same_predictions_and_parameters_survive_clone(split: Split) -> None:
    X_train, y_train, X_test, _ = split
    model = RatingRegressor(model="dot", n_factors=8, seed=3, **QUICK)
    twin = clone(model)
    assert twin.get_params() == model.get_params() and not hasattr(twin, "model_")
    first = model.fit(X_train, y_train).predict(X_test)
    assert np.array_equal(first, twin.fit(X_train, y_train).predict(X_test))
    changed = clone(model).set_params(seed=4, n_factors=9)
    assert changed.get_params() == {**model.get_params(), "seed": 4, "n_factors": 9}
    assert not np.array_equal(first, changed.fit(X_train, y_train).predict(X_test))
    restored = pickle.loads(pickle.dumps(model))
    assert np.array_equal(restored.predict(X_test), first)


# A value other than the default for each hyper-parameter, on the autograd engine (which reads them
# all), that the tiny ratings let take effect (fit caps the batch at n * epochs / 100 = 96 here).
CHANGED = {
    "model": "dot",
    "n_factors": 7,
    "epochs": 4,
    "lr": 0.05,
    "batch_size": 32,
    "l2": 0.5,
    "wd": 0.1,
    "y_range": (0.5, 5.5),
    "init_scale": 3.0,
    "optimizer": "sgd",
    "schedule": "constant",
    "seed": 1,
    "engine": "compiled",
    "sparse": True,
}


def test_spaces_around_text_ids_are_not_part_of_them() -> None:
    """As a ratings file's and a DataFrame's ids are read: "a " and "a" are one user, " 42" is 42."""
    X = [["a ", "x"], ["b", " y"], [" a", "y"], ["b", "x"]] * 10
    model = RatingRegressor(epochs=2, threads=1).fit(X, [1, 2, 3, 4] * 10)
    assert model.users_.raw_ids.tolist() == ["a", "b"] and model.items_.raw_ids.tolist() == ["x", "y"]
    same = model.predict([["a", "x"], ["a ", " x "]])
    assert same[0] == same[1] != model.train_mean_
    numbers = RatingRegressor(epochs=2, threads=1).fit([[" 42", "7"], ["43 ", "8"]] * 10, [1, 2] * 10)
    assert numbers.users_.integer_ids and numbers.users_.raw_ids.tolist() == [42, 43]
    with pytest.raises(ValueError, match=r"X: missing user id \(empty text\) in row 2"):
        RatingRegressor(epochs=2, threads=1).fit([["a", "x"], ["  ", "y"]] * 10, [1, 2] * 10)


@pytest.mark.parametrize("dtype", ["string[python]", "string[pyarrow]", "object"])
def test_a_missing_text_id_of_a_nullable_column_is_named(dtype: str) -> None:
    """pandas' NA in a "string" column is a missing id, as NaN and None are (it once reached a
    comparison whose result has no truth value: a TypeError from inside pandas)."""
    X = pd.DataFrame({"user": ["a", "b", "c", "a"] * 5, "item": ["x", "y", "x", "y"] * 5}).astype(dtype)
    X.loc[1, "user"] = pd.NA
    with pytest.raises(ValueError, match=r"X: missing user id \(NaN or None\) in row 2"):
        RatingRegressor(epochs=2, threads=1).fit(X, [1.0, 2.0, 3.0, 4.0] * 5)
    fitted = RatingRegressor(epochs=2, threads=1).fit(
        X.drop(index=1), [1.0, 3.0, 4.0] + [1.0, 2.0, 3.0, 4.0] * 4
    )
    with pytest.raises(ValueError, match=r"X: missing item id \(NaN or None\) in row 1"):
        fitted.predict(pd.DataFrame({"user": ["a"], "item": [pd.NA]}, dtype=dtype))


def test_members_train_an_ensemble_on_the_compiled_engine(split: Split) -> None:
    X_train, y_train, X_test, _ = split
    one = RatingRegressor(engine="compiled", members=1, **QUICK).fit(X_train, y_train)
    two = RatingRegressor(engine="compiled", members=2, **QUICK).fit(X_train, y_train)
    assert len(two.model_.members) == 2 and two.config_.members == 2
    assert not np.allclose(one.predict(X_test), two.predict(X_test), rtol=1e-4, atol=0)
    with pytest.raises(ValueError, match=r"`members` 2: .*`engine` compiled or device only"):
        RatingRegressor(engine="autograd", members=2, **QUICK).fit(X_train, y_train)


def test_every_hyperparameter_changes_the_predictions(split: Split) -> None:
    X_train, y_train, X_test, _ = split
    base = RatingRegressor(engine="autograd", **QUICK)
    # (members: an ensemble is the compiled engine's; device: this machine may have no GPU; the
    # features, their tables and the ordered probit are bfm's, below)
    features = {"features", "user_features", "item_features", "ordinal"}
    assert set(CHANGED) == set(base.get_params()) - {"unknown", "threads", "members", "device", *features}
    baseline = base.fit(X_train, y_train).predict(X_test)
    assert np.array_equal(clone(base).fit(X_train, y_train).predict(X_test), baseline)  # autograd repeats
    for name, value in CHANGED.items():
        predicted = clone(base).set_params(**{name: value}).fit(X_train, y_train).predict(X_test)
        assert not np.allclose(predicted, baseline, rtol=1e-4, atol=0), name


def test_bfm_reads_the_side_tables_it_is_given(split: Split) -> None:
    """Each group and the ordered probit change bfm's predictions, and a side table is read: a feature
    that splits the users in two moves them."""
    X_train, y_train, X_test, _ = split
    users = np.unique(X_train.iloc[:, 0])
    table = pd.DataFrame({"half": np.where(users % 2 == 0, "even", "odd")}, index=users)
    quick = {"epochs": 20, "n_factors": 3, "threads": 1}
    runs = {
        "ids": ("", None),
        "implicit": ("implicit", None),
        "no table": ("side", None),
        "side": ("side", table),
        "ordinal": ("", None),
    }
    predictions = {
        name: RatingRegressor(
            "bfm", features=features, user_features=side, ordinal=name == "ordinal", **quick
        )
        .fit(X_train, y_train)
        .predict(X_test)
        for name, (features, side) in runs.items()
    }
    ids = predictions["ids"]
    assert not np.allclose(predictions["implicit"], ids, rtol=1e-4, atol=0)
    assert np.array_equal(predictions["no table"], ids)  # no tables: nothing beside the ids
    assert not np.allclose(predictions["side"], ids, rtol=1e-4, atol=0)
    assert not np.allclose(predictions["ordinal"], ids, rtol=1e-4, atol=0)
    assert y_train.min() < predictions["ordinal"].min() and predictions["ordinal"].max() < y_train.max()


def test_ordinal_ratings_off_a_scale_of_steps_are_a_value_error(split: Split) -> None:
    X_train, y_train, _, _ = split
    off = np.asarray(y_train, dtype=np.float64).copy()
    off[:: max(1, len(off) // 10)] += 0.3
    with pytest.raises(ValueError, match=r"`ordinal` reads ratings on a scale of whole steps"):
        RatingRegressor("bfm", ordinal=True, epochs=2, n_factors=3, threads=1).fit(X_train, off)


def test_side_tables_are_checked_as_feature_files_are_and_unused_ones_are_said(split: Split) -> None:
    X_train, y_train, _, _ = split
    users = np.unique(X_train.iloc[:, 0])
    quick = {"epochs": 2, "n_factors": 3, "threads": 1}
    good = pd.DataFrame({"half": np.where(users % 2 == 0, "even", "odd")}, index=users)
    for table, message in (
        (good.to_numpy(), "user_features must be a pandas DataFrame indexed by user id, got ndarray"),
        (pd.concat([good, good.iloc[:1]]), "user_features: user .* has two rows"),
        (
            good.assign(age=np.where(users == users[0], np.nan, 30.0)),
            "user_features: age is missing for user",
        ),
        (good.set_axis(users + 10_000), "user_features: none of its .* user ids is among the ratings' users"),
    ):
        with pytest.raises(ValueError, match=message):
            RatingRegressor("bfm", features="side", user_features=table, **quick).fit(X_train, y_train)
    for model, features, message in (
        ("dotbias", None, "dotbias reads no side features: user_features is unused"),
        ("svdpp", "implicit", "`features` 'implicit' names no side features: user_features is unused"),
    ):
        settings = {"features": features} if features else {}
        with pytest.warns(UserWarning, match=message):
            RatingRegressor(model, user_features=good, **settings, **quick).fit(X_train, y_train)
    with pytest.warns(UserWarning, match="`features` names side, but no `user_features` or `item_features`"):
        RatingRegressor("svdpp", features="side", **quick).fit(X_train, y_train)
    # bfm's default names every group data can give: without tables it trains on the others silently.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RatingRegressor("bfm", **quick).fit(X_train, y_train)
    # bfm's time group reads each rating's time as X's third column: pairs alone are refused.
    with pytest.raises(ValueError, match=r"X must have three columns, .* each rating's time .* got 2"):
        RatingRegressor("bfm", features="implicit,time", **quick).fit(X_train, y_train)


def test_bfm_reads_each_ratings_time_from_a_third_column() -> None:
    """The planted user-day offsets are learned from X's times (seconds or dates); predict reads the
    times too, and a day fit never saw is the user-days' mean."""
    dataset, _ = planted_days()
    frame = dataset.ratings.sample(frac=1.0, random_state=0)
    train, test = frame.iloc[:2000], frame.iloc[2000:]
    quick = {"epochs": 40, "members": 2, "n_factors": 2, "threads": 1}
    columns = ["user", "item", "timestamp"]
    timed = RatingRegressor("bfm", features="time", **quick).fit(train[columns], train["rating"])
    untimed = RatingRegressor("bfm", features="", **quick).fit(train[["user", "item"]], train["rating"])
    assert timed.n_features_in_ == 3 and timed.model_.n_time_bins > 0
    error = {
        "timed": np.sqrt(np.mean((timed.predict(test[columns]) - test["rating"]) ** 2)),
        "untimed": np.sqrt(np.mean((untimed.predict(test[["user", "item"]]) - test["rating"]) ** 2)),
    }
    assert error["timed"] < error["untimed"] - 0.1
    # Dates in place of seconds are the same times.
    dated = train[columns].assign(timestamp=pd.to_datetime(train["timestamp"], unit="s"))
    as_dates = RatingRegressor("bfm", features="time", **quick).fit(dated, train["rating"])
    test_dated = test[columns].assign(timestamp=pd.to_datetime(test["timestamp"], unit="s"))
    assert np.array_equal(as_dates.predict(test_dated), timed.predict(test[columns]))
    # A day before any in fit: the user-days' mean, as a pair without a time in the model.
    before = test[columns].assign(timestamp=0)
    inner = torch.from_numpy(
        np.stack(
            [timed.users_.encode(test["user"].to_numpy()), timed.items_.encode(test["item"].to_numpy())], 1
        )
    )
    with torch.no_grad():
        np.testing.assert_allclose(timed.predict(before), timed.model_(inner).double().numpy(), rtol=1e-6)
    bad = test[columns].astype({"timestamp": object})
    bad.iloc[3, 2] = "soon"
    with pytest.raises(ValueError, match=r"X: time 'soon' in row 4 is no number of seconds since 1970"):
        timed.predict(bad)
    with pytest.raises(ValueError, match=r"X: .*milliseconds"):
        RatingRegressor("bfm", features="time", **quick).fit(
            train[columns].assign(timestamp=train["timestamp"] * 1000), train["rating"]
        )


def test_the_compiled_engine_gives_the_same_model_on_any_number_of_threads(split: Split) -> None:
    if available_cores() < 2:
        pytest.skip("one core: no second thread to compare with")
    X_train, y_train, X_test, _ = split
    one = RatingRegressor(epochs=2, threads=1).fit(X_train, y_train).predict(X_test)
    assert np.array_equal(RatingRegressor(epochs=2, threads=2).fit(X_train, y_train).predict(X_test), one)


def test_predictions_do_not_depend_on_order_batch_or_container(split: Split, fitted: RatingRegressor) -> None:
    _, _, X_test, _ = split
    whole = fitted.predict(X_test)
    order = np.random.default_rng(0).permutation(len(X_test))
    # float32 sums vectorised differently for another batch length: equal to the last bit or two.
    assert np.allclose(fitted.predict(X_test.iloc[order]), whole[order], rtol=1e-6, atol=0)
    assert np.allclose(fitted.predict(X_test.iloc[:7]), whole[:7], rtol=1e-6, atol=0)
    array = X_test.to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # fitted with column names, given none
        for same in (array, array.astype(np.int32), array.astype(np.float64), np.asfortranarray(array)):
            assert np.array_equal(fitted.predict(same), whole)
        assert np.array_equal(fitted.predict(array.tolist()), whole)


def test_the_fit_leaves_parameters_and_predict_leaves_everything_as_it_was(split: Split) -> None:
    X_train, y_train, X_test, _ = split
    model = RatingRegressor(y_range=(0.0, 5.5), **QUICK)
    before = {name: value for name, value in vars(model).items()}
    model.fit(X_train, y_train)
    added = set(vars(model)) - set(before)
    assert added and all(name.endswith("_") for name in added)
    assert all(vars(model)[name] is value for name, value in before.items())
    fitted_state = dict(vars(model))
    model.predict(X_test)
    assert vars(model) == fitted_state


def test_ratings_as_integers_or_a_column_train_the_same_model(split: Split, fitted: RatingRegressor) -> None:
    X_train, y_train, X_test, _ = split
    whole = fitted.predict(X_test)
    as_integers = RatingRegressor(**QUICK).fit(X_train, y_train.astype(np.int64))
    assert np.array_equal(as_integers.predict(X_test), whole)
    with pytest.warns(DataConversionWarning):
        as_column = RatingRegressor(**QUICK).fit(X_train, y_train.to_frame())
    assert np.array_equal(as_column.predict(X_test), whole)


def test_small_and_odd_inputs_fit(tiny: RatingsDataset) -> None:
    one = RatingRegressor(**QUICK).fit([[-1, -2]], [4.0])  # negative ids are ids too
    assert one.config_.y_range == pytest.approx((0.0, 5.5))  # one value: the scale of 3-5
    assert 3.0 < one.predict([[-1, -2]])[0] < 5.0
    zeros = RatingRegressor(**QUICK).fit([[1, 1], [2, 2]], [0.0, 0.0])  # zeros would leave no y_range
    assert zeros.config_.y_range == pytest.approx((-1.1, 1.1))
    tens = tiny.ratings.iloc[:500]
    doubled = RatingRegressor(**QUICK).fit(tens[["user", "item"]], 2 * tens["rating"])
    assert doubled.config_.y_range == pytest.approx((0.0, 11.0)) and doubled.config_.rating_unit == 2.0


@pytest.mark.parametrize(
    ("X", "y", "expected"),
    [
        (np.array([[1, 2, 3]]), [4.0], "two columns"),
        (np.array([1, 2]), [4.0, 3.0], "Expected 2D array"),
        (np.array([[1, 2], [3, 4]]), [4.0], "inconsistent numbers of samples"),
        (np.array([[1.0, np.nan], [3.0, 4.0]]), [4.0, 3.0], "missing item id .NaN or None. in row 1"),
        (np.array([[1, None], [3, 4]], dtype=object), [4.0, 3.0], "missing item id .NaN or None. in row 1"),
        (np.array([[1.0, 2.0], [np.inf, 4.0]]), [4.0, 3.0], "user id inf in row 2 is not an integer"),
        (np.array([[1.0, 2.0], [3.5, 4.0]]), [4.0, 3.0], "user id 3.5 in row 2 is not an integer"),
        (np.array([[True, 2], [False, 4]], dtype=object), [4.0, 3.0], "true/false values"),
        # numpy makes one integer array of mixed columns: the true/false are seen before it does.
        (pd.DataFrame({"u": [True, False], "i": [1, 2]}), [4.0, 3.0], "column 'u' holds true/false values"),
        ([[1, True], [2, False]], [4.0, 3.0], "true/false values in its .user, item. columns"),
        (np.array([[1, 2], [3, 4]]), [4.0, np.nan], "y contains NaN"),
        (np.array([[1, 2], [3, 4]]), [4.0, np.inf], "y contains infinity"),
        (np.empty((0, 2)), [], "0 sample"),
        (np.array([[1, 2], [3, 4]]), ["good", "bad"], "y: rating .good. in row 1 is not a number"),
    ],
)
def test_bad_input_is_a_value_error(X: Any, y: Any, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        RatingRegressor(**QUICK).fit(X, y)


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({"model": "svd"}, "unknown model 'svd'; choose one of: dot, dotbias"),
        ({"n_factors": 0}, "`n_factors` must be at least 1, got 0"),
        ({"batch_size": 0}, "`batch_size` must be at least 1, got 0"),
        ({"y_range": (5.0, 1.0)}, "`y_range` needs finite LOW < HIGH"),
        ({"model": "linear", "engine": "compiled"}, "use `engine` autograd"),
        ({"threads": 0}, "`threads` must be at least 1"),
        ({"unknown": "ignore"}, "unknown='ignore'; choose one of: mean, error"),
    ],
)
def test_bad_parameters_are_value_errors_naming_the_parameter(
    parameters: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ValueError, match=expected):
        RatingRegressor(**parameters).fit([[1, 2], [2, 1]], [4.0, 3.0])


def test_numpy_numbers_are_parameters_and_divergence_names_the_parameter() -> None:
    X, y = [[1, 2], [2, 1], [1, 1]], [4.0, 3.0, 5.0]
    fitted = RatingRegressor(model="dot", n_factors=np.int64(4), epochs=np.int32(1), threads=np.int64(1)).fit(
        X, y
    )
    assert fitted.config_.n_factors == 4 and fitted.config_.epochs == 1
    many = np.arange(200)
    with pytest.raises(TrainingDiverged, match=r"lower `lr` \(now 1e\+30\)"):
        RatingRegressor(lr=1e30, epochs=1, threads=1).fit(np.stack([many % 20, many % 17], 1), many % 5 + 1.0)


def test_predict_checks_its_input(fitted: RatingRegressor, split: Split) -> None:
    _, _, X_test, _ = split
    with pytest.raises(ValueError, match="X has 3 features, but RatingRegressor is expecting 2"):
        fitted.predict(X_test.assign(extra=0).to_numpy())
    with pytest.raises(ValueError, match="Feature names must be in the same order"):  # swapped ids
        fitted.predict(X_test[["item", "user"]])
    with pytest.raises(ValueError, match="Reshape your data"):
        fitted.predict(X_test["user"].to_numpy())
    with pytest.raises(ValueError, match="missing user id"):
        fitted.predict(X_test.assign(user=np.nan))
    with pytest.raises(ValueError, match="unknown='drop'"):
        clone(fitted).set_params(unknown="drop").fit(X_test, np.ones(len(X_test)))


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
    # Each fold's test ratings scored by the model fitted on the other two: better than the spread.
    assert len(rmse) == 3 and np.all(rmse < 0.95 * y.std())


def test_grid_and_randomized_search_pick_from_their_grid(tiny: RatingsDataset) -> None:
    X, y = tiny.ratings[["user", "item"]], tiny.ratings["rating"]
    cv = KFold(3, shuffle=True, random_state=0)
    grid = {"n_factors": [2, 16], "epochs": [1, 4]}
    search = GridSearchCV(
        RatingRegressor(lr=0.08, threads=1), grid, cv=cv, scoring="neg_root_mean_squared_error"
    )
    search.fit(X, y)
    assert search.best_params_ in [{"n_factors": k, "epochs": e} for k in (2, 16) for e in (1, 4)]
    assert search.best_params_["epochs"] == 4  # one epoch does not fit these ratings as well as four
    assert len(search.cv_results_["mean_test_score"]) == 4
    assert search.best_estimator_.config_.epochs == 4  # refitted on all of X with the best parameters
    randomized = RandomizedSearchCV(
        RatingRegressor(threads=1, epochs=2),
        {"lr": [0.01, 0.05, 0.1]},
        n_iter=2,
        cv=cv,
        scoring="neg_root_mean_squared_error",
        random_state=0,
    )
    randomized.fit(X, y)
    assert randomized.best_params_["lr"] in (0.01, 0.05, 0.1) and len(randomized.cv_results_["params"]) == 2


def test_in_a_pipeline_that_picks_the_id_columns(split: Split, fitted: RatingRegressor) -> None:
    X_train, y_train, X_test, y_test = split
    wide = X_train.assign(timestamp=0, note="x")[["timestamp", "item", "note", "user"]]
    picks = ColumnTransformer([("ids", "passthrough", ["user", "item"])])
    pipeline = Pipeline([("ids", picks), ("model", RatingRegressor(**QUICK))]).fit(wide, y_train)
    other_wide = X_test.assign(timestamp=1, note="y")
    assert np.array_equal(pipeline.predict(other_wide), fitted.predict(X_test))
    assert pipeline.score(other_wide, y_test) == fitted.score(X_test, y_test) > 0


# scikit-learn's checks that cannot apply to two columns of ids, and why. With the categorical tag
# scikit-learn rounds their X to non-negative integers, so each is refused for its width alone; on two
# of its columns every one passes but check_regressors_train. The contract each one checks is tested
# on id data above, as named.
def _width(columns: int, what: str, tested_by: str) -> str:
    return (
        f"fits X of {columns} feature columns ({what}); RatingRegressor takes exactly two, user and item "
        f"ids, and refuses any other width. Tested on ids by {tested_by}"
    )


NOT_APPLICABLE = {
    "check_fit_score_takes_y": _width(3, "to see that fit and score take y", "test_in_a_pipeline_..."),
    "check_dont_overwrite_parameters": _width(
        3, "to see that fit sets only attributes ending in _", "test_the_fit_leaves_parameters_..."
    ),
    "check_n_features_in_after_fitting": _width(
        4, "then predicts with another width", "test_predict_checks_its_input"
    ),
    "check_positive_only_tag_during_fit": _width(
        4, "iris, with negative values", "test_small_and_odd_inputs_fit (negative ids)"
    ),
    "check_estimators_dtypes": _width(
        5, "as float32, float64, int32 and int64", "test_predictions_do_not_depend_on_order_..."
    ),
    "check_dtype_object": _width(
        10, "as an object array", "test_ids_keep_their_spelling, test_text_ids_predict_exactly_..."
    ),
    "check_pipeline_consistency": _width(
        3, "blobs, to compare the score in and out of a Pipeline", "test_in_a_pipeline_..."
    ),
    "check_estimators_nan_inf": _width(
        3,
        "finite, after NaN and inf that it refuses as 'missing' and 'not an integer' ids",
        "test_bad_input_is_a_value_error",
    ),
    "check_estimators_pickle": _width(
        3,
        "blobs, then pickles the model, also from read-only memory maps",
        "test_same_seed_same_predictions_and_parameters_survive_clone",
    ),
    "check_f_contiguous_array_estimator": _width(
        3, "in Fortran order", "test_predictions_do_not_depend_on_order_..."
    ),
    "check_regressors_train": _width(
        10,
        "continuous features made integers, expecting R^2 > 0.5 from what their values say; ids "
        "carry no value to learn from, and nearly every row of these is a new user",
        "test_fit_predict_beats_the_training_mean, test_bad_input_is_a_value_error",
    ),
    "check_regressor_data_not_an_array": _width(
        10, "as array-likes that are not arrays", "test_predictions_do_not_depend_on_order_..."
    ),
    "check_regressors_no_decision_function": _width(
        4, "to see that a regressor has no decision_function", "the class (RegressorMixin, no such method)"
    ),
    "check_supervised_y_2d": _width(
        3, "with y as a column", "test_ratings_as_integers_or_a_column_train_the_same_model"
    ),
    "check_regressors_int": _width(
        10, "with integer and float y", "test_ratings_as_integers_or_a_column_train_the_same_model"
    ),
    "check_methods_sample_order_invariance": _width(
        3, "then predicts its rows shuffled", "test_predictions_do_not_depend_on_order_..."
    ),
    "check_methods_subset_invariance": _width(
        3, "then predicts its rows in batches", "test_predictions_do_not_depend_on_order_..."
    ),
    "check_fit2d_1sample": _width(
        10, "with one sample, which it fits", "test_small_and_odd_inputs_fit (one rating)"
    ),
    "check_dict_unchanged": _width(
        3, "to see that predict changes no attribute", "test_the_fit_leaves_parameters_..."
    ),
    "check_fit2d_predict1d": _width(3, "then predicts 1-d X", "test_predict_checks_its_input"),
}


@parametrize_with_checks(
    [RatingRegressor(epochs=2, threads=1)], expected_failed_checks=lambda estimator: NOT_APPLICABLE
)
def test_scikit_learn_estimator_checks(estimator: RatingRegressor, check: Any) -> None:
    check(estimator)


def test_a_rating_far_out_of_line_is_warned_of_as_a_files_is() -> None:
    """One typing slip among stars sets the scale read from the data, and so the output range: fit
    warns of it, and of the model that then fits worse than the mean, as train.py does for a file."""
    ratings = load_dataset("tiny").ratings
    y = ratings["rating"].copy()
    y.iloc[0] = 1e6
    with pytest.warns(UserWarning) as caught:
        RatingRegressor(epochs=2).fit(ratings[["user", "item"]], y)
    messages = [str(warning.message) for warning in caught]
    assert any(m.startswith("y: rating 1e+06 on row 1 lies far from all the others") for m in messages)
    assert any("or set `y_range`" in m for m in messages)
    assert any("fits its training ratings worse than their mean" in m for m in messages)


def test_an_unseen_pair_gets_the_training_mean_inside_the_y_range() -> None:
    """A y_range set below the ratings' mean bounds every prediction, the fallback for unseen ids too."""
    ratings = load_dataset("tiny").ratings
    fitted = RatingRegressor(epochs=1, y_range=(1.0, 2.0)).fit(ratings[["user", "item"]], ratings["rating"])
    assert ratings["rating"].mean() > 2.0
    unseen = fitted.predict(pd.DataFrame({"user": [99_999], "item": [ratings["item"].iloc[0]]}))
    assert unseen.tolist() == [2.0]


def test_unsigned_ids_past_int64_are_kept_as_text_not_wrapped() -> None:
    users = np.array([2**63, 2**63 + 1] * 5, dtype=np.uint64)
    X = pd.DataFrame({"user": users, "item": np.arange(10, dtype=np.uint64)})
    fitted = RatingRegressor(epochs=1).fit(X, np.arange(10) % 5 + 1.0)
    assert sorted(fitted.users_.raw_ids) == [str(2**63), str(2**63 + 1)]
    assert np.isfinite(fitted.predict(X)).all()


@pytest.mark.parametrize("dtype", ["Int64", "int64[pyarrow]", "UInt64", "uint64[pyarrow]", "uint64"])
def test_integer_ids_of_every_dtype_past_2_53_are_ids(dtype: str) -> None:
    """Regression: scikit-learn made pandas' and Arrow's nullable integers floats (numpy made uint64
    beside int64 floats), and ids past 2**53, integers as given, were refused as floats."""
    users = np.array([2**60 + 1, 2**60 + 2] * 5)
    X = pd.DataFrame({"user": users, "item": np.arange(10)})
    y = np.arange(10) % 5 + 1.0
    fitted = RatingRegressor(epochs=1, threads=1).fit(X.astype({"user": dtype}), y)
    assert fitted.users_.raw_ids.tolist() == [2**60 + 1, 2**60 + 2]
    plain = RatingRegressor(epochs=1, threads=1).fit(X, y)
    assert np.array_equal(plain.predict(X.astype({"user": dtype})), plain.predict(X))
    if dtype.lower().startswith("uint"):  # past int64 too: kept as text, as numpy's uint64 alone is
        past_int64 = X.assign(user=pd.array(users.astype(np.uint64) + np.uint64(2**63), dtype=dtype))
        fitted = RatingRegressor(epochs=1, threads=1).fit(past_int64, y)
        assert fitted.users_.raw_ids.tolist() == [str(2**63 + 2**60 + 1), str(2**63 + 2**60 + 2)]


def test_integer_ids_past_what_a_float_holds_are_named_as_such() -> None:
    """Beside a float column the ids become floats, which past 2**53 no longer tell ids apart."""
    X = pd.DataFrame({"user": np.array([2**60, 2**60 + 1] * 5), "item": np.arange(10.0)})
    with pytest.raises(ValueError, match=r"user id 1.15\d*e\+18 in row 1 is past 2\*\*53"):
        RatingRegressor(epochs=1).fit(X, np.arange(10) % 5 + 1.0)


def test_dates_as_ids_are_refused_by_column() -> None:
    X = pd.DataFrame({"user": pd.date_range("2020-01-01", periods=10), "item": np.arange(10)})
    with pytest.raises(ValueError, match=r"X: column 'user' holds dates or durations \(datetime64"):
        RatingRegressor(epochs=1).fit(X, np.arange(10) % 5 + 1.0)


def test_ratings_that_are_no_numbers_are_named_by_row() -> None:
    """Text was numpy's "could not convert string to float: np.str_('a')"; None in a list of ratings
    passed scikit-learn's NaN check as NaN and was reported as a bad `relevant`; dates trained as
    nanoseconds."""
    X = pd.DataFrame({"user": [1, 2, 3, 4], "item": [1, 2, 3, 4]})
    cases = [
        (np.array(["4", "3", "five", "2"]), r"y: rating 'five' in row 3 is not a number"),
        ([4.0, 3.0, 2.0, None], r"y: missing rating \(None or NA\) in row 4"),
        (pd.Series([4.0, "x", 2.0, 1.0], dtype=object), r"y: rating 'x' in row 2 is not a number"),
        (pd.Series(pd.date_range("2020-01-01", periods=4)), r"y holds dates or durations \(datetime64"),
        (pd.to_timedelta([1, 2, 3, 4], unit="s"), r"y holds dates or durations \(timedelta64"),
    ]
    for y, message in cases:
        with pytest.raises(ValueError, match=message):
            RatingRegressor(epochs=1, threads=1).fit(X, y)
    spelled = RatingRegressor(epochs=1, threads=1).fit(X, np.array(["4", "3", "2.5", "1"]))
    assert spelled.train_mean_ == pytest.approx(2.625)


@pytest.mark.parametrize("cell", [(1, 2), [1], {"id": 1}])
def test_an_id_of_several_values_is_named(cell: Any) -> None:
    """A tuple in every row was a ValueError from inside pandas ("Buffer has wrong number of
    dimensions"); in some rows, or a dict, it was taken as its text."""
    X = pd.DataFrame({"user": [1, cell, 3, 4], "item": [1, 2, 3, 4]})
    with pytest.raises(
        ValueError, match=rf"X: user id .* in row 2 is a {type(cell).__name__}; each id is one"
    ):
        RatingRegressor(epochs=1, threads=1).fit(X, [1.0, 2.0, 3.0, 4.0])
    fitted = RatingRegressor(epochs=1, threads=1).fit(X.assign(user=[1, 2, 3, 4]), [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match=r"X: item id .* in row 1 is a"):
        fitted.predict(pd.DataFrame({"user": [1], "item": [cell]}))


def test_a_series_as_x_is_one_column_not_an_attribute_error() -> None:
    with pytest.raises(ValueError, match="Expected a 2-dimensional container"):
        RatingRegressor(epochs=1, threads=1).fit(pd.Series([1, 2, 3, 4]), [1.0, 2.0, 3.0, 4.0])


def test_a_cuda_device_on_a_machine_without_one_is_a_valueerror_before_training(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As every other parameter no run can use: it was the trainer's RecsysError, once the model was
    built."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    X = pd.DataFrame({"user": [1, 2, 3, 4], "item": [1, 2, 3, 4]})
    with pytest.raises(ValueError, match="`device` cuda: no CUDA device is available here"):
        RatingRegressor(epochs=1, threads=1, device="cuda").fit(X, [1.0, 2.0, 3.0, 4.0])


def test_an_unseen_user_with_a_feature_row_is_predicted_from_it() -> None:
    """Planted: group a likes kind x by 2 stars over kind y. A user fit never saw but whose row
    user_features has gets its group's taste, not the training mean; one without a row gets the mean,
    or under unknown="error" an error naming it."""
    planted = planted_side_features()
    assert planted.user_features is not None and planted.item_features is not None
    users = pd.concat([planted.user_features, pd.DataFrame({"group": ["a", "b"]}, index=[1000, 1001])])
    ratings = planted.ratings
    estimator = RatingRegressor(
        "bfm", features="side", epochs=30, members=2, n_factors=4, threads=1, user_features=users
    ).fit(ratings[["user", "item"]], ratings["rating"])
    kinds = planted.item_features["kind"]
    x_item, y_item = kinds.index[kinds == "x"][0], kinds.index[kinds == "y"][0]
    pairs = pd.DataFrame({"user": [1000, 1000, 1001, 1001, 2000], "item": [x_item, y_item] * 2 + [x_item]})
    a_x, a_y, b_x, b_y, nobody = estimator.predict(pairs)
    assert a_x - a_y > 1.0 and b_y - b_x > 1.0
    assert nobody == pytest.approx(ratings["rating"].mean())
    estimator.set_params(unknown="error")
    with pytest.raises(ValueError, match="2000"):
        estimator.predict(pairs)
    assert len(estimator.predict(pairs.iloc[:4])) == 4


def test_a_feature_table_indexed_by_text_places_unseen_integer_ids_as_training_read_it() -> None:
    """Regression: fit matched a table indexed by "1000" to the integer user 1000 (ids meet as text),
    but predict looked its new users up as they were, found none, and gave them all the training mean."""
    planted = planted_side_features()
    assert planted.user_features is not None and planted.item_features is not None
    users = pd.concat([planted.user_features, pd.DataFrame({"group": ["a"]}, index=[1000])])
    ratings = planted.ratings
    estimator = RatingRegressor(
        "bfm",
        features="side",
        epochs=30,
        n_factors=4,
        threads=1,
        user_features=users.set_axis(users.index.astype(str)),
    ).fit(ratings[["user", "item"]], ratings["rating"])
    kinds = planted.item_features["kind"]
    x_item, y_item = kinds.index[kinds == "x"][0], kinds.index[kinds == "y"][0]
    a_x, a_y = estimator.predict(pd.DataFrame({"user": [1000, 1000], "item": [x_item, y_item]}))
    assert a_x - a_y > 1.0


def test_text_beside_integer_user_ids_is_not_placed_by_the_feature_row_of_user_0() -> None:
    """Regression: a text user ("u5") of a model of integer ids was looked up in user_features as 0,
    its place's filler, and predicted from user 0's row (no error under unknown="error")."""
    X = pd.DataFrame({"user": [1, 2, 3, 4] * 5, "item": [1, 2] * 10})
    users = pd.DataFrame({"group": ["a", "a", "b", "a", "b"]}, index=[0, 1, 2, 3, 4])
    estimator = RatingRegressor("bfm", features="side", epochs=2, threads=1, user_features=users)
    estimator.fit(X, [1.0, 2.0, 4.0, 5.0] * 5)
    assert estimator.predict(pd.DataFrame({"user": ["u5"], "item": [1]})).tolist() == [estimator.train_mean_]
    estimator.set_params(unknown="error")
    with pytest.raises(ValueError, match=r"user id\(s\) 'u5' \(fit saw 4 integer user ids\)"):
        estimator.predict(pd.DataFrame({"user": ["u5", 0], "item": [1, 1]}))


def test_times_written_as_dates_in_text_are_read_as_a_ratings_files_are() -> None:
    """Regression: the docs promise "seconds since 1970, or dates", but a column of date text (a CSV
    read without parse_dates) was refused as 'no number of seconds since 1970 (or date)'."""
    seconds = np.array([0, 1, 2, 3] * 5) * 86_400 + 1_700_000_000
    X = pd.DataFrame({"user": [1, 2, 3, 4] * 5, "item": [1, 2] * 10, "time": seconds})
    y = [1.0, 2.0, 4.0, 5.0] * 5
    timed = RatingRegressor("bfm", features="time", epochs=2, threads=1).fit(X, y)
    text = X.assign(time=pd.to_datetime(seconds, unit="s").strftime("%d.%m.%Y %H:%M"))
    as_text = RatingRegressor("bfm", features="time", epochs=2, threads=1).fit(text, y)
    assert np.array_equal(as_text.predict(text), timed.predict(X))
    with pytest.raises(ValueError, match=r"X: timestamp 'never' on row 2 is not a time"):
        timed.predict(text.iloc[:2].assign(time=["14.11.2023 22:13", "never"]))


def test_times_given_as_date_objects_are_read_as_the_same_seconds() -> None:
    """Regression: a column of Timestamp or datetime objects (an object column, or rows as lists) was
    read by pandas as datetime64 and counted in microseconds: fit refused it as milliseconds, and predict
    put every pair on a day fit never saw, silently."""
    seconds = np.array([0, 1, 2, 3] * 5) * 86_400 + 1_700_000_000
    X = pd.DataFrame({"user": [1, 2, 3, 4] * 5, "item": [1, 2] * 10, "time": seconds})
    y = [1.0, 2.0, 4.0, 5.0] * 5
    timed = RatingRegressor("bfm", features="time", epochs=2, threads=1).fit(X, y)
    stamps = pd.Series(list(pd.to_datetime(seconds, unit="s", utc=True)), dtype=object)
    datetimes = pd.Series([stamp.to_pydatetime() for stamp in stamps], dtype=object)
    for times in (stamps, datetimes):
        assert np.array_equal(timed.predict(X.assign(time=times)), timed.predict(X))
        as_objects = RatingRegressor("bfm", features="time", epochs=2, threads=1).fit(X.assign(time=times), y)
        assert np.array_equal(as_objects.predict(X), timed.predict(X))
    rows = [[user, item, stamp] for user, item, stamp in zip(X["user"], X["item"], stamps, strict=True)]
    assert np.array_equal(timed.predict(rows), timed.predict(X))


def test_predict_refuses_times_in_milliseconds_as_fit_does() -> None:
    """Regression: fit refused times in milliseconds, but predict read them as seconds, every pair on a
    day (in the year 55,000) fit never saw, and gave the user-days' mean, silently."""
    seconds = np.array([0, 1, 2, 3] * 5) * 86_400 + 1_700_000_000
    X = pd.DataFrame({"user": [1, 2, 3, 4] * 5, "item": [1, 2] * 10, "time": seconds})
    timed = RatingRegressor("bfm", features="time", epochs=2, threads=1).fit(X, [1.0, 2.0, 4.0, 5.0] * 5)
    with pytest.raises(ValueError, match=r"X: the ratings' times reach 1,700,259,200,000, .*milliseconds"):
        timed.predict(X.assign(time=seconds * 1000))
    with pytest.raises(ValueError, match=r"X: the ratings' times reach 100,000,000,000,000,000,000, "):
        timed.predict(X.assign(time=np.where(X.index == 0, 1e20, seconds)))
