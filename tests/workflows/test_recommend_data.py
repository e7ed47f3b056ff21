"""recsys.workflows.recommend_data: what a run folder keeps of its data for recommending, and reads
back as it was."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recsys.data.dataset import RatingsDataset
from recsys.data.encoding import IdMap
from recsys.errors import RecsysError
from recsys.workflows.recommend_data import RecommendData

ANY_IDS = IdMap(np.arange(3))  # a model's map, for a file that is refused before it is compared


def test_every_users_rated_items_and_the_titles_come_back_from_the_file(tmp_path: Path) -> None:
    """Text ids, a user who rated only in the test part (not in the model), an item the model does
    not know and one the item table does not name."""
    ratings = pd.DataFrame(
        {
            "user": ["a", "b", "zé", "zé", "b", "a"],
            "item": ["x", "y", "x", "w", "w", "v"],
            "rating": [1.0, 2, 3, 4, 5, 2],
        }
    )
    titles = pd.DataFrame({"item": ["y", "w"], "title": ["Why", "Double U"]})
    with pytest.warns(UserWarning, match="no entry for 2 rated item ids"):
        dataset = RatingsDataset.from_frame(ratings, items=titles)
    users, items = IdMap(np.array(["a", "b"], dtype=object)), IdMap(np.array(["w", "x", "y"], dtype=object))
    RecommendData.of(dataset, users, items).save(tmp_path / "recommend.npz")
    data = RecommendData.load(tmp_path / "recommend.npz", users, items)
    assert data.rating_scale == (1.0, 5.0) and not data.implicit
    rated = {user: sorted(data.rated_by(users, user).tolist()) for user in ("a", "b", "zé", "nobody")}
    assert rated == {"a": [1], "b": [0, 2], "zé": [0, 1], "nobody": []}  # "v" is no item of the model's
    assert data.popularity(len(items)).tolist() == [2, 2, 1]
    assert data.titles_of(items, np.arange(3)).tolist() == ["Double U", "[item x]", "Why"]


def test_a_damaged_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "recommend.npz").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(RecsysError, match=r"recommend.npz is damaged .*; train the run again"):
        RecommendData.load(tmp_path / "recommend.npz", ANY_IDS, ANY_IDS)


def test_an_empty_file_is_damaged_and_one_that_cannot_be_read_is_named_as_such(tmp_path: Path) -> None:
    """An empty recommend.npz (a disk that filled, a copy cut short) had been numpy's EOFError
    traceback; a folder in its place (or a file without read permission) had been called damaged,
    with the advice to train the run again."""
    path = tmp_path / "recommend.npz"
    path.write_bytes(b"")
    with pytest.raises(
        RecsysError, match=r"recommend.npz is damaged \(No data left in file\); train the run"
    ):
        RecommendData.load(path, ANY_IDS, ANY_IDS)
    path.unlink()
    path.mkdir()
    with pytest.raises(RecsysError) as caught:
        RecommendData.load(path, ANY_IDS, ANY_IDS)
    assert str(caught.value) == f"cannot read {path}: Is a directory"


def test_another_runs_file_is_refused(tmp_path: Path) -> None:
    """A recommend.npz copied in from another run (other users or items, even as many of them) had
    been read as this run's: its rows of rated items, and its titles, given to this model's ids."""
    ratings = pd.DataFrame({"user": [1, 2, 2, 3], "item": [10, 10, 20, 30], "rating": [1.0, 2, 3, 4]})
    users, items = IdMap(np.array([1, 2, 3])), IdMap(np.array([10, 20, 30]))
    path = tmp_path / "recommend.npz"
    RecommendData.of(RatingsDataset.from_frame(ratings), users, items).save(path)
    assert RecommendData.load(path, users, items).popularity(3).tolist() == [2, 1, 1]
    for other_users, other_items in (
        (IdMap(np.array([1, 2, 4])), items),  # one user another
        (users, IdMap(np.array([10, 20]))),  # an item fewer
        (items, users),  # the sides swapped
        (IdMap(np.array(["1", "2", "3"], dtype=object)), items),  # the same ids as text
    ):
        with pytest.raises(RecsysError) as caught:
            RecommendData.load(path, other_users, other_items)
        assert str(caught.value) == (
            f"{path} is another run's: it was written for other users and items than its checkpoint's "
            "model knows; train the run again"
        )
