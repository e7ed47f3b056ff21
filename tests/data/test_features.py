"""Side-feature tables: reading a user's file, coding its columns, and the feature rows a
factorisation machine sums over."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from recsys import config_for, load_dataset, train_and_evaluate
from recsys.data.features import (
    check_feature_table,
    column_codings,
    features_of,
    read_feature_file,
    rows_for_new,
    side_blocks,
    year_of_title,
)
from recsys.data.movielens import read_users
from recsys.errors import DataError, RecsysError


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_feature_file_is_read_with_its_id_column_found_by_name(tmp_path: Path) -> None:
    path = _write(tmp_path / "users.csv", "age,userId,job\n31,7,writer\n25,3,artist|writer\n")
    table = read_feature_file(path, "user")
    assert table.index.tolist() == [7, 3] and table.columns.tolist() == ["age", "job"]
    # The ids match the ratings' integer ids; without a named id column the first is the id.
    items = read_feature_file(_write(tmp_path / "items.tsv", "a\tcolour\nb\tred\n"), "item")
    assert items.index.tolist() == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("user,age,job\n1,31,writer\n2,,artist\n", r"users\.csv: age is missing on line 3$"),
        ("user,age\n1,31\n2,40\n1,25\n", r"users\.csv: user 1 has two rows, on line 2 and line 4$"),
    ],
)
def test_a_bad_feature_file_is_one_line_naming_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        read_feature_file(_write(tmp_path / "users.csv", text), "user")


def test_columns_are_coded_as_numbers_or_categories() -> None:
    table = pd.DataFrame(
        {"age": [20.0, 30.0, 40.0], "genres": ["Drama|Comedy", "Drama", "War"]}, index=[5, 6, 7]
    )
    age, genres = column_codings(table)
    assert age.categories is None and age.mean == pytest.approx(30.0)
    assert genres.categories == ("Comedy", "Drama", "War")
    # Ids 6 and 5 are rows 0 and 1; id 9 has no row: no side features.
    blocks = side_blocks(table, (age, genres), np.array([6, 5, 9]))
    assert blocks[0].rows.tolist() == [0, 1] and blocks[0].values[1] == pytest.approx(-10 / age.scale)
    entries = sorted(zip(blocks[1].rows, blocks[1].columns, blocks[1].values, strict=True))
    assert entries == [(0, 1, 1.0), (1, 0, 0.5), (1, 1, 0.5)]
    # A category training never saw adds nothing.
    new = pd.DataFrame({"age": [30.0], "genres": ["Western|War"]}, index=[11])
    (_, unseen) = side_blocks(new, (age, genres), np.array([11]))
    assert unseen.columns.tolist() == [2] and unseen.values.tolist() == [1.0]


def test_arrow_text_columns_are_coded_as_text_columns_are() -> None:
    """Regression: pyarrow's to_numeric keeps text it cannot read as NaN, which is no missing value, so
    a `pd.ArrowDtype` text column (`dtype_backend="pyarrow"`) was taken for numbers and failed inside
    pandas ("Unable to parse string"), and an Arrow text value where training had numbers passed."""
    plain = pd.DataFrame({"job": ["a", "b", "a"], "age": ["20", "30", "40"]}, index=[1, 2, 3])
    arrow = plain.astype(pd.ArrowDtype(pa.string()))
    assert check_feature_table(arrow, "user", "user_features") is arrow
    assert column_codings(arrow) == column_codings(plain)
    with pytest.raises(RecsysError, match="'age' was a number in training"):
        side_blocks(arrow.assign(age=arrow["job"]), column_codings(plain), np.array([1]))


def test_a_list_column_names_several_categories_as_a_bar_does(tmp_path: Path) -> None:
    """Genres as a list per row (a Parquet file's list column, or lists in a DataFrame) code as the
    same names joined by '|' do, not as one category per distinct list."""
    lists = pd.DataFrame({"item": [1, 2, 3], "genres": [["Drama", "Comedy"], ["Drama"], []]})
    lists.to_parquet(tmp_path / "items.parquet")
    table = read_feature_file(tmp_path / "items.parquet", "item")
    joined = pd.DataFrame({"genres": ["Drama|Comedy", "Drama", ""]}, index=[1, 2, 3])
    assert column_codings(table) == column_codings(joined)
    (coding,) = column_codings(table)
    assert coding.categories == ("Comedy", "Drama")
    for given in (table, joined):
        (block,) = side_blocks(given, (coding,), np.array([1, 2, 3]))
        entries = sorted(zip(block.rows, block.columns, block.values, strict=True))
        assert entries == [(0, 0, 0.5), (0, 1, 0.5), (1, 1, 1.0)]  # the empty list adds nothing


def test_text_ids_in_one_table_meet_number_ids_in_the_other() -> None:
    table = pd.DataFrame({"job": ["a", "b"]}, index=pd.Index(["1", "2"]))
    (block,) = side_blocks(table, column_codings(table), np.array([2, 1]))
    assert sorted(zip(block.rows.tolist(), block.columns.tolist(), strict=True)) == [(0, 1), (1, 0)]


def test_feature_rows_put_the_ids_first_then_the_side_then_what_each_rated() -> None:
    pairs = np.array([[0, 1], [0, 2], [1, 2], [0, 1]])  # user 0 rated item 1 twice: counted once
    users = pd.DataFrame({"job": ["x", "y"]}, index=[10, 20])
    user_rows, item_rows = features_of(("side", "implicit"), np.array([10, 20]), np.array([1, 2, 3]), pairs,
                                       users, None)  # fmt: skip
    assert user_rows.group_names == ("ids", "job", "implicit") and item_rows.group_names == (
        "ids",
        "implicit",
    )
    assert user_rows.groups.tolist() == [0, 0, 1, 1, 2, 2, 2]
    first = slice(user_rows.starts[0], user_rows.starts[1])
    assert user_rows.columns[first].tolist() == [0, 2, 5, 6]  # its id, job x, items 1 and 2
    np.testing.assert_allclose(user_rows.values[first], [1, 1, 2**-0.5, 2**-0.5])
    # Item 2 was rated by both users; item 0 by nobody: its id alone.
    assert item_rows.columns[item_rows.starts[2] : item_rows.starts[3]].tolist() == [2, 3, 4]
    assert item_rows.columns[item_rows.starts[0] : item_rows.starts[1]].tolist() == [0]
    ids_only, _ = features_of((), np.array([10, 20]), np.array([1, 2, 3]), pairs, users, None)
    assert ids_only.n_features == 2 and ids_only.group_names == ("ids",)


def test_movielens_users_and_years_become_side_features(tmp_path: Path) -> None:
    _write(tmp_path / "u.user", "1|24|M|technician|85711\n2|53|F|other|V3N4P\n")
    users = read_users(tmp_path, "100k")
    assert users is not None and users.loc[1].tolist() == ["18-24", "M", "technician", "8"]
    assert users.loc[2, "age"] == "50-55" and users.loc[2, "zip"] == "other"
    _write(tmp_path / "users.dat", "1::F::1::10::48067\n")
    dat = read_users(tmp_path, "dat")
    assert dat is not None and dat.loc[1].tolist() == ["under 18", "F", "10", "4"]
    assert read_users(tmp_path, "csv") is None
    titles = pd.Series(["Toy Story (1995)", "Metropolis (1927)", "Rocky (1976)", "No year"])
    assert year_of_title(titles).tolist() == ["1995", "<1950", "1975-1979", "unknown"]
    _write(tmp_path / "u.user", "1|old|M|technician|85711\n")
    with pytest.raises(DataError, match=r"u\.user: age 'old' on line 1 is not a number"):
        read_users(tmp_path, "100k")
    _write(tmp_path / "users.dat", "1::F::1::10::55117-1234\n")  # ml-1m's ZIP+4 codes
    assert read_users(tmp_path, "dat").loc[1, "zip"] == "5"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        # pandas pads a short line: its gender would read "student" and its zip "".
        (
            "u.user",
            "1|24|M|technician|85711\n\n3|18|student|12345\n",
            r"line 3 has 4 fields; expected user\|age",
        ),
        ("users.dat", "1::F::1::10::48067\n2::M::25::16\n", "line 2 is not UserID::Gender::Age"),
    ],
)
def test_a_movielens_user_line_of_too_few_fields_is_named(
    name: str, text: str, message: str, tmp_path: Path
) -> None:
    _write(tmp_path / name, text)
    with pytest.raises(DataError, match=message):
        read_users(tmp_path, "100k" if name == "u.user" else "dat")


def test_a_recorded_run_reads_its_feature_files_again(tmp_path: Path) -> None:
    from recsys.data.catalog import dataset_from_record, load_dataset, with_feature_files

    path = _write(tmp_path / "items.csv", "item,colour\n1,red\n2,blue\n")
    dataset = with_feature_files(load_dataset("tiny"), None, path)
    assert dataset.origin["item_features"] == str(path.resolve()) and "user_features" not in dataset.origin
    again = dataset_from_record(dict(dataset.origin), "tiny")
    assert again.item_features is not None and again.item_features["colour"].tolist() == ["red", "blue"]
    path.unlink()
    with pytest.raises(DataError, match=r"items\.csv \(recorded in its data\.json\), which is no longer"):
        dataset_from_record(dict(dataset.origin), "tiny")


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("user,age\n001,20\n010,30\n", ["001", "010"]),  # a leading zero: text, as the ratings' ids
        ("user,age\n12345678901234567890123,20\n7,30\n", ["12345678901234567890123", "7"]),  # past int64
        ("userId,user,age\n1,a,20\n2,b,30\n", [1, 2]),  # a feature named like the side
    ],
)
def test_feature_file_ids_are_read_as_a_ratings_files_are(
    tmp_path: Path, text: str, ids: list[object]
) -> None:
    table = read_feature_file(_write(tmp_path / "users.csv", text), "user")
    assert table.index.tolist() == ids


@pytest.mark.parametrize("value", ["inf", "1e160", "-1e307"])
def test_an_infinite_or_vast_number_is_refused_and_a_category_counts_once(tmp_path: Path, value: str) -> None:
    """A number whose square overflows would give the column an infinite spread: zeroed, silently."""
    with pytest.raises(
        DataError, match=rf"users\.csv: age {value} on line 2 is not a finite number of at most"
    ):
        read_feature_file(_write(tmp_path / "users.csv", f"user,age\n1,{value}\n2,4\n"), "user")
    with pytest.raises(RecsysError, match="feature 'age' holds a number that is not finite or above"):
        column_codings(pd.DataFrame({"age": [float(value), 4.0]}))
    table = pd.DataFrame({"genres": ["a|a", "a| b"]}, index=[1, 2])
    (block,) = side_blocks(table, column_codings(table), np.array([1, 2]))
    assert sorted(zip(block.rows.tolist(), block.values.tolist(), strict=True)) == [
        (0, 1.0),
        (1, 0.5),
        (1, 0.5),
    ]


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), 1e160])
def test_an_infinite_or_vast_number_in_a_table_is_named_with_its_setting(value: float) -> None:
    """The estimator's tables are checked as a file is: a ValueError naming the setting, the column and
    the id, before training."""
    from recsys import RatingRegressor

    table = pd.DataFrame({"age": [20.0, value]}, index=[1, 2])
    with pytest.raises(RecsysError, match=r"user_features: age .* for user 2 is not a finite number"):
        check_feature_table(table, "user", "user_features")
    X = pd.DataFrame({"user": [1, 2, 1, 2], "item": [1, 1, 2, 2]})
    with pytest.raises(ValueError, match=r"user_features: age .* for user 2 is not a finite number"):
        RatingRegressor("bfm", epochs=2, user_features=table).fit(X, [1.0, 2.0, 3.0, 4.0])


def test_new_rows_need_the_columns_training_had() -> None:
    training = column_codings(pd.DataFrame({"age": [20.0, 30.0], "job": ["a", "b"]}, index=[1, 2]))
    with pytest.raises(RecsysError, match="lacks column 'job'"):
        rows_for_new(("side",), training, pd.DataFrame({"age": [25.0]}, index=[9]), np.array([9]))
    with pytest.raises(RecsysError, match="'age' was a number in training"):
        rows_for_new(
            ("side",), training, pd.DataFrame({"age": ["old"], "job": ["a"]}, index=[9]), np.array([9])
        )
    rows = rows_for_new(
        ("side",), training, pd.DataFrame({"job": ["b"], "age": [30.0]}, index=[9]), np.array([9])
    )
    assert rows.columns.tolist() == [0, 2]  # age, then job b: the training table's order


def test_a_column_of_numbers_but_one_is_read_as_categories_with_a_warning(tmp_path: Path) -> None:
    table = pd.DataFrame({"age": [str(20 + n) for n in range(19)] + ["unknown"]}, index=range(20))
    expected = r"feature 'age' is read as categories.*1 of its 20 values is not a number \(such as 'unknown"
    with pytest.warns(UserWarning, match=expected):
        (coding,) = column_codings(table)
    assert coding.categories is not None and len(coding.categories) == 20
    # A pandas category column is categories, though its values spell numbers (MovieLens' years).
    (years,) = column_codings(pd.DataFrame({"year": ["1995", "1996"]}, dtype="category"))
    assert years.categories == ("1995", "1996")


def test_whole_number_ids_stored_as_floats_are_integers(tmp_path: Path) -> None:
    path = tmp_path / "users.parquet"
    pd.DataFrame({"user": [1.0, 2.0], "job": ["a", "b"]}).to_parquet(path)
    assert read_feature_file(path, "user").index.tolist() == [1, 2]


def test_numbers_with_a_decimal_comma_are_read_as_decimals_with_a_warning(tmp_path: Path) -> None:
    path = _write(tmp_path / "users.csv", "user;height;code\n1;1,2;1,2\n2;1,35;x\n3;2;3\n")
    with pytest.warns(
        UserWarning, match=r"height is written with a decimal comma, read as decimals \(e.g. '1,2' as 1.2\)"
    ):
        table = read_feature_file(path, "user")
    assert table["height"].tolist() == [1.2, 1.35, 2.0]
    assert table["code"].tolist() == ["1,2", "x", "3"]  # not all numbers: categories, as before


def test_a_column_naming_no_category_is_said_to_add_nothing() -> None:
    with pytest.warns(UserWarning, match="feature 'tags' names no category in any row"):
        (coding,) = column_codings(pd.DataFrame({"tags": ["|", " | "]}, index=[1, 2]))
    assert coding.size == 0


def test_a_table_with_number_labels_is_read_under_its_codings_names() -> None:
    table = pd.DataFrame({0: ["a", "b"], 1: [20.0, 30.0]}, index=[10, 20])
    codings = column_codings(table)
    assert [coding.name for coding in codings] == ["0", "1"]
    job, age = side_blocks(table, codings, np.array([20, 10]))
    assert job.columns.tolist() == [1, 0] and age.values.tolist() == [1.0, -1.0]
    users, _ = features_of(("side",), np.array([10, 20]), np.array([1]), np.zeros((0, 2), np.int64),
                           table, None)  # fmt: skip
    assert users.group_names == ("ids", "0", "1")


def test_a_table_with_tuple_labels_is_read_too() -> None:
    table = pd.concat({"who": pd.DataFrame({"job": ["a", "b"]}, index=[1, 2])}, axis=1)
    (block,) = side_blocks(table, column_codings(table), np.array([1, 2]))
    assert block.columns.tolist() == [0, 1]


def test_a_repeated_column_label_is_named() -> None:
    table = pd.DataFrame([["a", 1], ["b", 2]], index=[1, 2], columns=["job", "job"])
    with pytest.raises(RecsysError, match="user_features: column 'job' appears more than once"):
        check_feature_table(table, "user", "user_features")


def test_labels_that_spell_one_name_are_one_column_repeated() -> None:
    """Columns are looked up by their labels as text: 0 and "0" would be one column, read twice."""
    table = pd.DataFrame({0: [20.0, 30.0], "0": ["a", "b"]}, index=[1, 2])
    with pytest.raises(RecsysError, match="user_features: column '0' appears more than once"):
        check_feature_table(table, "user", "user_features")


def test_the_estimator_refuses_it_as_a_value_error() -> None:
    from recsys import RatingRegressor

    table = pd.DataFrame([["a", 1], ["b", 2]], index=[1, 2], columns=["job", "job"])
    X = pd.DataFrame({"user": [1, 2, 1, 2], "item": [1, 1, 2, 2]})
    with pytest.raises(ValueError, match="column 'job' appears more than once"):
        RatingRegressor("bfm", epochs=2, user_features=table).fit(X, [1.0, 2.0, 3.0, 4.0])
    table = pd.DataFrame({0: [20.0, 30.0], "0": ["a", "b"]}, index=[1, 2])
    with pytest.raises(ValueError, match="column '0' appears more than once"):
        RatingRegressor("bfm", epochs=2, user_features=table).fit(X, [1.0, 2.0, 3.0, 4.0])


def _users() -> pd.DataFrame:
    ids = np.arange(1, 121)
    return pd.DataFrame({"job": np.where(ids % 2 == 0, "a", "b"), "age": ids.astype(float)}, index=ids)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda table: pd.concat([table, table.iloc[:1]]), "user 1 has two rows"),
        (lambda table: table.assign(age=table["age"].where(table.index != 3)), "age is missing for user 3"),
        (lambda table: table["age"], "must be a pandas DataFrame indexed by user id, got Series"),
    ],
)
def test_a_bad_table_is_named_before_training(change, message) -> None:  # type: ignore[no-untyped-def]
    dataset = dataclasses.replace(load_dataset("tiny"), user_features=change(_users()))
    with pytest.raises(RecsysError, match=message):
        train_and_evaluate(dataset, config_for("bfm", dataset="tiny", epochs=2), progress=False)


def test_a_feature_file_of_ids_alone_says_it_has_no_features(tmp_path: Path) -> None:
    """One column has no separator for the sniffer to find: the error names what is missing, not the
    separator."""
    path = tmp_path / "users.csv"
    path.write_text("user\n1\n2\n")
    with pytest.raises(DataError, match=r"users.csv: no feature columns beside the user id column 'user'"):
        read_feature_file(path, "user")
    path.write_text("user;job\n1\n2\n")  # a separator there: the reader's own error stands
    with pytest.raises(DataError) as refused:
        read_feature_file(path, "user")
    assert "no feature columns" not in str(refused.value)


def test_a_table_without_rows_is_named_so() -> None:
    with pytest.raises(RecsysError, match=r"^user_features has no rows \(one per user, indexed by its id\)$"):
        check_feature_table(pd.DataFrame({"age": pd.Series([], dtype=float)}), "user", "user_features")


def test_ids_left_in_a_column_of_a_table_indexed_by_row_number_are_named() -> None:
    """users.reset_index() (or read_csv without index_col) keeps the ids as a feature and gives each
    row's features to the id that is its row number: silently, where the row numbers are ids too."""
    table = pd.DataFrame({"userId": [1, 2, 3], "job": ["a", "b", "a"]}).set_index("userId")
    assert check_feature_table(table, "user", "user_features") is table
    with pytest.raises(RecsysError, match=r"column 'userId' holds the user ids, .*set_index\('userId'\)"):
        check_feature_table(table.reset_index(), "user", "user_features")
    # Not a column of ids: a value repeated, or a name no id goes by; or the row numbers named.
    repeated = pd.DataFrame({"user": [1, 1, 2], "job": ["a", "b", "a"]})
    numbered = pd.DataFrame({"user_id": [5, 6, 7], "job": ["a", "b", "a"]}).rename_axis("user")
    for kept in (repeated, table.reset_index().rename(columns={"userId": "age"}), numbered):
        assert check_feature_table(kept, "user", "user_features") is kept


def test_a_feature_file_of_the_other_side_is_refused(tmp_path: Path) -> None:
    """Item ids 1..n read as user ids 1..n would give items' genres to users without a word."""
    items = tmp_path / "items.csv"
    items.write_text("movieId,genres\n1,Drama\n2,Comedy\n")
    with pytest.raises(
        DataError, match="id column 'movieId' names items, but it was given as the user features"
    ):
        read_feature_file(items, "user")
    assert read_feature_file(items, "item").index.tolist() == [1, 2]
    users = tmp_path / "users.csv"
    users.write_text("userId,age\n1,20\n2,30\n")
    with pytest.raises(
        DataError, match="id column 'userId' names users, but it was given as the item features"
    ):
        read_feature_file(users, "item")
    plain = tmp_path / "plain.csv"  # "id" names either side's ids
    plain.write_text("id,age\n1,20\n2,30\n")
    assert read_feature_file(plain, "user").index.tolist() == [1, 2]


def test_a_short_line_of_a_two_column_feature_file_is_named(tmp_path: Path) -> None:
    # Its lines disagree on the number of fields, and a line of two has no third for the sniffer.
    path = _write(tmp_path / "users.csv", "userId,age\n1,20\n2,30\n3,40\n4\n5,50\n")
    with pytest.raises(DataError, match="age is missing on line 5"):
        read_feature_file(path, "user")
