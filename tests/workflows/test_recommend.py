"""recsys.workflows.recommend on small models trained once on the tiny sample."""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import planted_side_features

from recsys.config import config_for
from recsys.data.catalog import load_dataset
from recsys.data.dataset import RatingsDataset
from recsys.errors import RecsysError
from recsys.evaluation.biases import learned_biases
from recsys.evaluation.factors import item_vectors
from recsys.evaluation.metrics import predict
from recsys.models.fold_in import fold_in
from recsys.names import CHECKPOINT_FILE, RECOMMEND_FILE
from recsys.train.checkpoints import Checkpoint, load_checkpoint
from recsys.workflows.experiment import train_and_evaluate
from recsys.workflows.rated_items import read_rated
from recsys.workflows.recommend import (
    cold_start,
    described_by_features,
    explain,
    knows_user,
    recommend,
    recommend_from_ratings,
    similar_items,
)
from recsys.workflows.recommend_data import RecommendData


def train_run(model: str, run_dir: Path) -> Checkpoint:
    """Train `model` briefly on tiny into `run_dir` and load its checkpoint back."""
    config = config_for(model, dataset="tiny", epochs=3, batch_size=128)
    train_and_evaluate(load_dataset("tiny"), config, run_dir=run_dir, progress=False)
    return load_checkpoint(run_dir / CHECKPOINT_FILE)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run")
    train_run("dotbias", folder)
    return folder


@pytest.fixture(scope="module")
def checkpoint(run_dir: Path) -> Checkpoint:
    return load_checkpoint(run_dir / CHECKPOINT_FILE)


@pytest.fixture(scope="module")
def dot(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    """A model with factors but no biases."""
    return train_run("dot", tmp_path_factory.mktemp("dot"))


@pytest.fixture(scope="module")
def dataset() -> RatingsDataset:
    return load_dataset("tiny")


@pytest.fixture(scope="module")
def data(run_dir: Path, checkpoint: Checkpoint) -> RecommendData:
    """What the run folder keeps of tiny for recommending."""
    return RecommendData.load(run_dir / RECOMMEND_FILE, checkpoint.users, checkpoint.items)


def of(dataset: RatingsDataset, checkpoint: Checkpoint) -> RecommendData:
    """What recommending from `checkpoint` reads of `dataset`."""
    return RecommendData.of(dataset, checkpoint.users, checkpoint.items)


def model_predictions(checkpoint: Checkpoint, user: int, items: np.ndarray) -> np.ndarray:
    """The model's own predictions for raw `user` and raw `items`."""
    users = checkpoint.users.encode(np.full(len(items), user), "user")
    pairs = torch.from_numpy(np.stack([users, checkpoint.items.encode(items, "item")], axis=1))
    return predict(checkpoint.model, pairs).numpy()


def test_recommend_excludes_rated_items_and_ranks_by_the_models_predictions(
    checkpoint: Checkpoint, data: RecommendData, dataset: RatingsDataset
) -> None:
    user = int(dataset.ratings["user"].value_counts().index[0])  # the heaviest rater: most to exclude
    table = recommend(checkpoint, data, user, top=len(checkpoint.items))
    rated = set(dataset.ratings.loc[dataset.ratings["user"] == user, "item"])
    assert list(table.columns) == ["item", "title", "predicted"]
    assert not rated & set(table["item"])
    assert set(table["item"]) == set(checkpoint.items.raw_ids) - rated  # everything else is a candidate
    assert table["predicted"].is_monotonic_decreasing
    # The same model, batched differently: equal up to float32 summation order.
    expected = model_predictions(checkpoint, user, table["item"])
    np.testing.assert_allclose(table["predicted"], expected, rtol=1e-6)
    assert table["title"].str.startswith("Synthetic item").all()


def test_recommend_respects_top(checkpoint: Checkpoint, data: RecommendData) -> None:
    user = int(checkpoint.users.raw_ids[0])
    assert len(recommend(checkpoint, data, user, top=3)) == 3
    for top in (0, 2.5, True):
        with pytest.raises(RecsysError, match="`top` must be a whole number of at least 1"):
            recommend(checkpoint, data, user, top=top)  # type: ignore[arg-type]


def test_an_id_typed_as_text_or_as_a_number_finds_the_same_user_and_item(
    checkpoint: Checkpoint, data: RecommendData, dataset: RatingsDataset
) -> None:
    user, item = int(checkpoint.users.raw_ids[0]), int(checkpoint.items.raw_ids[0])
    assert recommend(checkpoint, data, str(user)).equals(recommend(checkpoint, data, user))
    assert explain(checkpoint, str(user), str(item)) == explain(checkpoint, user, item)
    assert similar_items(checkpoint, data, item).equals(similar_items(checkpoint, data, str(item)))
    # The spaces around a typed id or title are not part of it, as recommend's user's are not.
    assert similar_items(checkpoint, data, f"  {item} ").equals(similar_items(checkpoint, data, item))
    # Leading zeros, as `explain` reads them (and a ratings file's integer ids are read).
    assert similar_items(checkpoint, data, f"000{item}").equals(similar_items(checkpoint, data, item))
    assert explain(checkpoint, user, f"000{item}") == explain(checkpoint, user, item)
    title = str(dataset.items.loc[dataset.items["item"] == item, "title"].iloc[0])
    assert similar_items(checkpoint, data, f" {title}  ").equals(similar_items(checkpoint, data, title))
    with pytest.raises(RecsysError, match="user id 'someone': this model's user ids are integers"):
        recommend(checkpoint, data, "someone")
    assert not knows_user(checkpoint, "someone")  # a question: no, not an error
    assert knows_user(checkpoint, str(user)) and knows_user(checkpoint, user)


@pytest.mark.parametrize(
    ("user", "message"),
    [
        (True, "user id True: an id is an integer or text, not true or false"),
        ([1], "a user id is one integer or text, got list"),
        (1.5, "user id 1.5: not a whole number"),
    ],
)
def test_a_user_id_that_is_no_one_id_is_an_error_naming_it(
    checkpoint: Checkpoint, data: RecommendData, user: object, message: str
) -> None:
    with pytest.raises(RecsysError, match=re.escape(message)):
        recommend(checkpoint, data, user, 3)  # type: ignore[arg-type]


def test_a_whole_float_id_is_that_id_everywhere(checkpoint: Checkpoint, data: RecommendData) -> None:
    user, item = int(checkpoint.users.raw_ids[0]), int(checkpoint.items.raw_ids[0])
    assert recommend(checkpoint, data, float(user), 3).equals(recommend(checkpoint, data, user, 3))
    assert similar_items(checkpoint, data, float(item), 3).equals(similar_items(checkpoint, data, item, 3))


@pytest.mark.parametrize(
    ("rated", "message"),
    [
        ([(1, "5")], "rating '5' for 1 is not a finite number"),
        ([(1, float("nan"))], "rating nan for 1 is not a finite number"),
        ([1], "a new user's ratings are (item, rating) pairs, got 1"),
        # Ids and ratings taken from numpy arrays are shown as plain values, not np.int64(1).
        ([(np.int64(1), np.float64(9.0))], "rating 9 for 1 is off the scale 1-5"),
        ([(np.int64(1), np.float64(5.0)), (np.str_("1"), 4.0)], "'1' and 1 name the same item"),
    ],
)
def test_a_new_users_ratings_that_are_no_pairs_of_numbers_are_named(
    checkpoint: Checkpoint, data: RecommendData, rated: list[object], message: str
) -> None:
    with pytest.raises(RecsysError, match=re.escape(message)):
        recommend_from_ratings(checkpoint, data, rated, 3)  # type: ignore[arg-type]


def test_a_new_users_ratings_may_be_a_dict(checkpoint: Checkpoint, data: RecommendData) -> None:
    item = int(checkpoint.items.raw_ids[0])
    from_dict = recommend_from_ratings(checkpoint, data, {item: 5.0}, 3)
    assert from_dict.equals(recommend_from_ratings(checkpoint, data, [(item, 5.0)], 3))


def test_an_ials_new_user_is_the_row_its_training_would_solve(
    dataset: RatingsDataset, tmp_path: Path
) -> None:
    """ials trains on an item rated below the threshold as a choice, at its run's alpha and l2: a new
    user who rated only below it is placed by those choices (the zero row had listed the items in id
    order, every score 0), and one above it is weighed by the run's alpha and l2."""
    config = config_for("ials", dataset="tiny", epochs=3, alpha=7.0, l2=2.0)
    train_and_evaluate(load_dataset("tiny"), config, run_dir=tmp_path, progress=False)
    checkpoint = load_checkpoint(tmp_path)
    data = of(dataset, checkpoint)
    raw = checkpoint.items.raw_ids[[3, 10, 20]]
    low = recommend_from_ratings(checkpoint, data, [(int(item), 2.0) for item in raw], top=5)
    assert low["score"].abs().max() > 0
    table = recommend_from_ratings(checkpoint, data, [(int(raw[0]), 5.0), (int(raw[1]), 2.0)], top=5)
    items = torch.from_numpy(checkpoint.items.encode(raw[:2], "item"))
    relevant = checkpoint.config.relevant
    rated = [(items, torch.tensor([5.0, 2.0]))]
    folded = fold_in(checkpoint.model, rated, relevant=relevant, alpha=7.0, l2=2.0)
    scores = folded.scores(torch.tensor([0]))[0].numpy()
    inner = checkpoint.items.encode(table["item"].to_numpy(), "item")
    np.testing.assert_allclose(table["score"], scores[inner], rtol=1e-6)
    assert not np.isin(inner, items.numpy()).any()


def test_recommend_to_an_unknown_user_is_an_error_naming_it(
    checkpoint: Checkpoint, data: RecommendData
) -> None:
    with pytest.raises(RecsysError, match=r"user 999999 is not in this model's training data.*`cold_start`"):
        recommend(checkpoint, data, 999999)


def test_cold_start_ranks_by_item_bias(checkpoint: Checkpoint, data: RecommendData) -> None:
    table = cold_start(checkpoint, data, top=5)
    biases = learned_biases(checkpoint.model)
    assert biases is not None
    assert list(table.columns) == ["item", "title", "item_bias"]
    np.testing.assert_array_equal(table["item"], checkpoint.items.decode(np.argsort(-biases.item)[:5]))
    np.testing.assert_array_equal(table["item_bias"], np.sort(biases.item)[::-1][:5])


@pytest.mark.parametrize(("model", "column"), [("bpr", "item_bias"), ("ials", "n_ratings")])
def test_a_ranking_models_cold_start_is_what_it_scores_for_a_user_of_no_factors(
    model: str, column: str, dataset: RatingsDataset, tmp_path: Path
) -> None:
    # bpr scores u . i + b_i: a user of zero factors gets its item biases; ials has nothing but factors.
    config = config_for(model, dataset="tiny", epochs=3)
    train_and_evaluate(load_dataset("tiny"), config, run_dir=tmp_path, progress=False)
    checkpoint = load_checkpoint(tmp_path)
    table = cold_start(checkpoint, of(dataset, checkpoint), top=5)
    assert list(table.columns) == ["item", "title", column]
    if model == "bpr":
        users = checkpoint.model.user_factors.weight
        with torch.no_grad():
            users.zero_()  # every user now a user of no factors
        scores = predict(checkpoint.model, torch.tensor([[0, item] for item in range(len(checkpoint.items))]))
        best = torch.argsort(-scores, stable=True)[:5].numpy()
        np.testing.assert_array_equal(table["item"], checkpoint.items.decode(best))
        np.testing.assert_allclose(table["item_bias"], scores[best].numpy(), rtol=1e-6)


def test_cold_start_leaves_out_what_a_user_new_to_the_model_rated_since(
    checkpoint: Checkpoint, data: RecommendData, dataset: RatingsDataset
) -> None:
    """A user the ratings hold but the training part did not (their ratings came later, as a split
    by time leaves them) is a cold start, and still not shown the items they rated."""
    top = cold_start(checkpoint, data, top=5)
    newcomer = pd.DataFrame(
        {"user": [999_999, 999_999], "item": top["item"].iloc[[0, 2]].to_numpy(), "rating": [5.0, 4.0]}
    )
    later = dataclasses.replace(dataset, ratings=pd.concat([dataset.ratings, newcomer], ignore_index=True))
    table = cold_start(checkpoint, of(later, checkpoint), top=5, user=999_999)
    assert not set(table["item"]) & set(newcomer["item"])
    assert table["item"].tolist()[:2] == top["item"].iloc[[1, 3]].tolist()  # the rest keep their order
    assert (
        cold_start(checkpoint, of(later, checkpoint), top=5, user="someone")["item"].tolist()
        == top["item"].tolist()
    )


def test_cold_start_places_a_user_the_feature_table_describes(tmp_path: Path) -> None:
    """A new user with a row of side features is ranked by what its group likes (planted: group a
    likes kind x), not by item bias; a new user without a row falls back to item bias."""
    planted = planted_side_features()
    assert planted.user_features is not None and planted.item_features is not None
    newcomers = pd.DataFrame({"group": ["a", "b"]}, index=pd.Index([1000, 1001], name="user"))
    dataset = dataclasses.replace(planted, user_features=pd.concat([planted.user_features, newcomers]))
    config = config_for("bfm", features="side", epochs=30, members=2, n_factors=4, split="random")
    train_and_evaluate(dataset, config, run_dir=tmp_path, progress=False, threads=1)
    checkpoint = load_checkpoint(tmp_path / CHECKPOINT_FILE)
    kinds = planted.item_features["kind"]
    for user, liked in ((1000, "x"), (1001, "y")):
        assert described_by_features(checkpoint, dataset.user_features, user)
        table = cold_start(
            checkpoint, of(dataset, checkpoint), top=10, user=user, user_features=dataset.user_features
        )
        assert list(table.columns[-1:]) == ["predicted"]
        assert (kinds.loc[table["item"]] == liked).mean() >= 0.9, (user, table)
    assert not described_by_features(checkpoint, dataset.user_features, 2000)
    assert (
        "item_bias"
        in cold_start(
            checkpoint, of(dataset, checkpoint), top=5, user=2000, user_features=dataset.user_features
        ).columns
    )


def test_cold_start_without_biases_ranks_by_popularity(dot: Checkpoint, dataset: RatingsDataset) -> None:
    table = cold_start(dot, of(dataset, dot), top=5)
    counts = dataset.ratings["item"].value_counts()
    assert list(table.columns) == ["item", "title", "n_ratings"]
    assert table["n_ratings"].is_monotonic_decreasing
    assert table["n_ratings"].iloc[0] == counts.max()
    np.testing.assert_array_equal(table["n_ratings"], counts.reindex(table["item"]))


def test_similar_items_are_the_nearest_by_cosine(
    checkpoint: Checkpoint, data: RecommendData, dataset: RatingsDataset
) -> None:
    query_item = int(checkpoint.items.raw_ids[9])
    title = dataset.items.set_index("item").at[query_item, "title"]
    table = similar_items(checkpoint, data, title.upper(), top=4)
    assert list(table.columns) == ["item", "title", "cosine"]
    assert len(table) == 4 and query_item not in set(table["item"])
    assert table["cosine"].is_monotonic_decreasing
    vectors = item_vectors(checkpoint.model)
    assert vectors is not None
    query = vectors[checkpoint.items.encode(np.array([query_item]))[0]]
    brute = np.array([v @ query / (np.linalg.norm(v) * np.linalg.norm(query)) for v in vectors])
    brute[checkpoint.items.encode(np.array([query_item]))[0]] = -np.inf
    assert table["item"].iloc[0] == checkpoint.items.decode(np.array([np.argmax(brute)]))[0]
    assert table["cosine"].iloc[0] == pytest.approx(brute.max())


def test_an_item_id_finds_what_its_title_finds(
    checkpoint: Checkpoint, data: RecommendData, dataset: RatingsDataset
) -> None:
    query_item = int(checkpoint.items.raw_ids[9])
    title = dataset.items.set_index("item").at[query_item, "title"]
    by_title = similar_items(checkpoint, data, title, top=4)
    pd.testing.assert_frame_equal(similar_items(checkpoint, data, str(query_item), top=4), by_title)


def test_a_title_several_items_share_names_the_item_used(
    checkpoint: Checkpoint, dataset: RatingsDataset
) -> None:
    first, second = (int(item) for item in checkpoint.items.raw_ids[[7, 3]])
    items = dataset.items.copy()
    items.loc[items["item"].isin([first, second]), "title"] = "Same Title"
    shared = dataclasses.replace(dataset, items=items)
    lowest = min(first, second)
    with pytest.warns(
        UserWarning, match=rf"2 items are titled 'same title' .*; using {lowest}, the lowest id"
    ):
        table = similar_items(checkpoint, of(shared, checkpoint), "same title", top=3)
    pd.testing.assert_frame_equal(
        table, similar_items(checkpoint, of(shared, checkpoint), str(lowest), top=3)
    )


def test_data_without_titles_is_queried_by_item_id(checkpoint: Checkpoint, dataset: RatingsDataset) -> None:
    untitled = dataclasses.replace(dataset, items=dataset.items.iloc[:0].astype("int64"))
    query_item = int(checkpoint.items.raw_ids[2])
    table = similar_items(checkpoint, of(untitled, checkpoint), str(query_item), top=3)
    assert len(table) == 3 and query_item not in set(table["item"])
    with pytest.raises(RecsysError, match="no item titled 'nope', nor with that id"):
        similar_items(checkpoint, of(untitled, checkpoint), "nope")


def test_an_unknown_title_suggests_close_matches(checkpoint: Checkpoint, data: RecommendData) -> None:
    with pytest.raises(RecsysError, match="no item titled 'Synthetic item 1O', nor with that id") as raised:
        similar_items(checkpoint, data, "Synthetic item 1O")
    suggestions = str(raised.value).split("did you mean: ")[1].split("; ")
    assert "Synthetic item 10" in suggestions and len(suggestions) <= 5


def test_explain_parts_sum_to_the_models_prediction(checkpoint: Checkpoint) -> None:
    user, item = int(checkpoint.users.raw_ids[3]), int(checkpoint.items.raw_ids[7])
    parts = explain(checkpoint, user, item)
    assert parts["user_bias"] + parts["item_bias"] + parts["factors"] == pytest.approx(parts["score"])
    assert parts["prediction"] == model_predictions(checkpoint, user, np.array([item]))[0]
    low, high = checkpoint.config.y_range or (0.0, 0.0)
    assert parts["prediction"] == pytest.approx(low + (high - low) / (1 + np.exp(-parts["score"])))


def test_explain_of_an_unknown_user_does_not_suggest_a_cold_start(
    checkpoint: Checkpoint, data: RecommendData
) -> None:
    """A cold start has no prediction to take apart (recommend.py refuses --cold-start with
    --explain): the error says what --explain needs instead of pointing there."""
    item = int(checkpoint.items.raw_ids[0])
    with pytest.raises(RecsysError, match="user 999999 is not in this model's training data") as raised:
        explain(checkpoint, 999999, item)
    assert "cold_start" not in str(raised.value)
    assert "`explain` needs a user the model knows" in str(raised.value)


def test_explain_needs_a_model_with_biases(dot: Checkpoint) -> None:
    with pytest.raises(RecsysError, match="'dot' has no bias terms to explain"):
        explain(dot, int(dot.users.raw_ids[0]), int(dot.items.raw_ids[0]))


def test_a_column_of_ids_finds_an_item_by_id_before_a_title_that_spells_another_id(
    checkpoint: Checkpoint, dataset: RatingsDataset, tmp_path: Path
) -> None:
    """A catalogue may title an item with another item's id: a new user's `movieId` column means the
    id; a `title` column (or a typed name) still means the title first."""
    named, other = (int(item) for item in checkpoint.items.raw_ids[[4, 6]])
    items = dataset.items.copy()
    items.loc[items["item"] == other, "title"] = str(named)  # item `other` is titled as item `named`'s id
    tricky = dataclasses.replace(dataset, items=items)
    (tmp_path / "ids.csv").write_text(f"movieId,rating\n{named},5\n")
    (tmp_path / "titles.csv").write_text(f"title,rating\n{named},5\n")
    by_id, by_title = read_rated(tmp_path / "ids.csv"), read_rated(tmp_path / "titles.csv")
    assert by_id.ids and not by_title.ids
    listed = recommend_from_ratings(
        checkpoint, of(tricky, checkpoint), by_id.rated, top=len(checkpoint.items), ids=by_id.ids
    )
    assert named not in set(listed["item"]) and other in set(listed["item"])  # what was rated is left out
    listed = recommend_from_ratings(
        checkpoint, of(tricky, checkpoint), by_title.rated, top=len(checkpoint.items), ids=by_title.ids
    )
    assert other not in set(listed["item"]) and named in set(listed["item"])


def test_a_new_users_events_file_without_an_item_column_asks_for_that_alone(tmp_path: Path) -> None:
    """On a run trained on interactions an item column is all a new user's file needs: a file
    without one is not told it lacks a rating column too."""
    (tmp_path / "mine.csv").write_text("item é5\nitem é9\n")
    with pytest.raises(RecsysError, match=r"expected a header naming an item column \(a count or weight"):
        read_rated(tmp_path / "mine.csv", events=True)
    with pytest.raises(RecsysError, match="expected a header naming item and rating columns"):
        read_rated(tmp_path / "mine.csv")
