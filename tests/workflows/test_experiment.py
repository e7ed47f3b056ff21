"""recsys.workflows.experiment: the checks around one run (splits it cannot score, size-adapted batches, the
mean baseline warning, and the record of where the data came from)."""

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recsys.config import config_for
from recsys.data.dataset import RatingsDataset, ratings_frame
from recsys.errors import RecsysError
from recsys.names import DATA_FILE
from recsys.workflows.experiment import MIN_STEPS, prepare, recorded_data_folder, train_and_evaluate


def _dataset(users: list[int], items: list[int]) -> RatingsDataset:
    n = len(users)
    ratings = ratings_frame(np.array(users), np.array(items), np.full(n, 4.0), np.arange(n))
    items_table = pd.DataFrame({"item": sorted(set(items)), "title": "t", "genres": ""})
    return RatingsDataset("tiny", ratings, items_table, (1.0, 5.0))


@pytest.mark.parametrize(
    ("users", "items", "overrides", "expected"),
    [
        pytest.param([1], [1], {}, "no test rating", id="one-rating"),
        pytest.param([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], {}, "no test rating", id="every-id-once"),
        pytest.param([1] * 5, [1, 2, 3, 4, 5], {"split": "user-last", "test_n": 10}, "--test-n",
                     id="user-last-too-many"),
        pytest.param([1, 2] * 50, list(range(100)), {"test_frac": 0.001}, "--test-frac", id="tiny-fraction"),
    ],
)  # fmt: skip
def test_a_split_with_nothing_to_score_is_an_error_naming_the_flag(
    users: list[int], items: list[int], overrides: dict, expected: str
) -> None:
    with pytest.raises(RecsysError, match=expected) as error:
        prepare(_dataset(users, items), config_for("dotbias", dataset="tiny", **overrides))
    assert "\n" not in str(error.value)


def test_a_failed_split_leaves_no_run_folder_files(tmp_path: Path) -> None:
    with pytest.raises(RecsysError, match="no test rating"):
        train_and_evaluate(_dataset([1], [1]), config_for("dotbias", dataset="tiny"), run_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_small_data_gets_smaller_batches_and_at_least_min_steps(tiny: RatingsDataset) -> None:
    config = config_for("dotbias", engine="autograd", dataset="tiny")
    data, resolved = prepare(tiny, config)
    steps = config.epochs * -(-len(data.train) // resolved.batch_size)
    assert resolved.batch_size < config.batch_size
    assert steps >= MIN_STEPS
    assert prepare(tiny, resolved)[1] == resolved  # a resumed config resolves to itself


def test_large_enough_data_keeps_the_tuned_batch(tiny: RatingsDataset) -> None:
    config = config_for("dotbias", engine="autograd", dataset="tiny", batch_size=16)
    assert prepare(tiny, config)[1].batch_size == 16
    compiled = config_for("dotbias", engine="compiled", dataset="tiny")
    assert prepare(tiny, compiled)[1].batch_size == compiled.batch_size  # it has no batches


def test_a_model_worse_than_the_mean_is_warned_about(tiny: RatingsDataset) -> None:
    hopeless = config_for("dotbias", engine="autograd", dataset="tiny", epochs=1, lr=1e-6, y_range=(4.9, 5.0))
    with pytest.warns(UserWarning, match="worse than their mean"):
        train_and_evaluate(tiny, hopeless, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train_and_evaluate(tiny, config_for("dotbias", dataset="tiny"), progress=False)


def test_the_run_records_where_its_data_came_from(tiny: RatingsDataset, tmp_path: Path) -> None:
    train_and_evaluate(
        tiny, config_for("dotbias", dataset="tiny", epochs=1), run_dir=tmp_path, progress=False
    )
    recorded = json.loads((tmp_path / DATA_FILE).read_text())
    assert recorded["dataset"] == "tiny"
    assert tiny.folder is not None and recorded_data_folder(tmp_path) == tiny.folder.resolve()


def test_a_missing_or_damaged_data_record_is_no_record(tmp_path: Path) -> None:
    assert recorded_data_folder(tmp_path) is None
    (tmp_path / DATA_FILE).write_text("{not json")
    assert recorded_data_folder(tmp_path) is None
    (tmp_path / DATA_FILE).write_text(json.dumps({"dataset": "x", "folder": str(tmp_path / "gone")}))
    assert recorded_data_folder(tmp_path) is None
