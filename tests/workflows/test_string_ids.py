"""String ids (ISBNs, UUIDs) through a whole run: encoding, training, checkpoint, recommending."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recsys.config import config_for
from recsys.data.dataset import RatingsDataset, ratings_frame
from recsys.data.encoding import IdMap
from recsys.errors import RecsysError
from recsys.names import CHECKPOINT_FILE, RECOMMEND_FILE
from recsys.train.checkpoints import load_checkpoint
from recsys.workflows.experiment import train_and_evaluate
from recsys.workflows.recommend import explain, recommend, similar_items
from recsys.workflows.recommend_data import RecommendData


@pytest.fixture(scope="module")
def string_ids(tiny: RatingsDataset) -> RatingsDataset:
    """The tiny ratings with every id spelled as a string, as an ISBN-keyed file would have them."""
    ratings = tiny.ratings.copy()
    ratings["user"] = [f"reader-{user:03d}" for user in ratings["user"]]
    ratings["item"] = [f"978-{item:06d}" for item in ratings["item"]]
    items = tiny.items.assign(item=[f"978-{item:06d}" for item in tiny.items["item"]])
    return RatingsDataset("strings", ratings, items, tiny.rating_scale)


def test_a_run_on_string_ids_keeps_them_through_its_checkpoint(
    string_ids: RatingsDataset, tmp_path: Path
) -> None:
    config = config_for("dotbias", dataset="strings", epochs=2)
    result = train_and_evaluate(string_ids, config, run_dir=tmp_path, progress=False)
    checkpoint = load_checkpoint(tmp_path / CHECKPOINT_FILE)
    assert not checkpoint.users.integer_ids and checkpoint.users.raw_ids[0] == "reader-001"
    assert np.array_equal(checkpoint.items.raw_ids, result.data.items.raw_ids)
    # text ids and titles stored in the run folder
    data = RecommendData.load(tmp_path / RECOMMEND_FILE, checkpoint.users, checkpoint.items)
    top = recommend(checkpoint, data, checkpoint.users.parse("reader-001", "user"), 3)
    assert len(top) == 3 and all(item.startswith("978-") for item in top["item"])
    assert not top["title"].str.startswith("[item").any()  # titles found by string id
    title = string_ids.items["title"].iloc[0]
    assert len(similar_items(checkpoint, data, title, 2)) == 2
    assert set(explain(checkpoint, "reader-001", top["item"].iloc[0])) >= {"prediction"}
    with pytest.raises(RecsysError, match=r"user '' is not in .*ids such as 'reader-001', 'reader-002'"):
        recommend(checkpoint, data, "")


def test_id_maps_parse_what_a_user_types_as_their_id_type() -> None:
    integers, strings = IdMap(np.array([3, 7])), IdMap(np.array(["a", "b"], dtype=object))
    assert integers.parse("7", "user") == 7 and strings.parse("7", "user") == "7"
    assert strings.parse(" a ", "user") == "a"  # spaces around an id are layout, as in files
    with pytest.raises(RecsysError, match=r"user id 'x1': this model's user ids are integers"):
        integers.parse("x1", "user")
    assert not integers.known(np.array(["3"])).any() and not strings.known(np.array([3])).any()
    for ids in (integers, strings):
        again = IdMap.from_plain(ids.to_plain())
        assert np.array_equal(again.raw_ids, ids.raw_ids) and again.integer_ids == ids.integer_ids


def test_string_ids_with_a_number_among_them_stay_strings() -> None:
    frame = ratings_frame(np.array([1, 2]), np.array([1, 2]), np.array([4.0, 5.0]), np.array([0, 0]))
    assert IdMap.fit(frame["user"].to_numpy()).integer_ids
    mixed = IdMap.fit(pd.Series(["10", "9", "x"], dtype=object).to_numpy())
    assert list(mixed.raw_ids) == ["10", "9", "x"] and not mixed.integer_ids
