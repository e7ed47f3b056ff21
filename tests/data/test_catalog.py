"""recsys.data.catalog: every dataset by name, the default's fallback to synthetic data, the planted truth."""

from __future__ import annotations

import json
import re
import tomllib
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT
from movielens_files import (
    HALF_RATINGS,
    WHOLE_RATINGS,
    check_dtypes,
    expected_ratings,
    listing,
    write_dataset,
)

from recsys.data.catalog import TINY_FOLDER, dataset_from_record, load_dataset, planted_truth, resolve_dataset
from recsys.data.movielens import VARIANTS
from recsys.data.ratings_file import load_ratings
from recsys.data.synthetic import TINY_CONFIG, SyntheticConfig, make_synthetic
from recsys.errors import DataError, DataUnavailable
from recsys.names import DATASETS


def test_unknown_dataset_lists_the_names() -> None:
    with pytest.raises(DataError, match="unknown `dataset` 'nope'") as err:
        load_dataset("nope")
    for name in DATASETS:
        assert name in str(err.value)
    assert {"tiny", "synthetic", *VARIANTS} == set(DATASETS)


def test_load_synthetic_and_tiny() -> None:
    synthetic = load_dataset("synthetic")
    assert synthetic.name == "synthetic" and synthetic.folder is None
    assert len(synthetic.ratings) == 100_000
    check_dtypes(synthetic.ratings)

    tiny = load_dataset("tiny")
    assert tiny.name == "tiny" and tiny.rating_scale == (1.0, 5.0)
    assert len(tiny.ratings) == 4_000
    check_dtypes(tiny.ratings)
    assert tiny.ratings["rating"].between(1, 5).all()
    assert set(tiny.ratings["item"]) <= set(tiny.items["item"])
    # A folder given as text, as a notebook writes it, reads the same.
    assert load_dataset("tiny", str(TINY_FOLDER)).ratings.equals(tiny.ratings)


def test_load_dataset_passes_data_dir_to_movielens(tmp_path: Path, no_data_root: None) -> None:
    folder = write_dataset(tmp_path / "ml-20m", "csv", HALF_RATINGS)
    ds = load_dataset("ml-20m", tmp_path, allow_download=False)
    assert ds.name == "ml-20m" and ds.folder == folder


def test_default_dataset_falls_back_to_synthetic(no_data_root: None, isolated_cache: Path) -> None:
    ds, note = resolve_dataset(None, allow_download=False)

    assert ds.name == "synthetic"
    assert note is not None and "ml-100k" in note and "synthetic" in note
    assert listing(isolated_cache) == []


def test_default_dataset_uses_ml100k_from_data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_dataset(tmp_path / "root" / "ml-100k", "100k", WHOLE_RATINGS)
    monkeypatch.setenv("RECSYS_DATA", str(tmp_path / "root"))

    ds, note = resolve_dataset(None, allow_download=False)

    assert note is None
    assert ds.name == "ml-100k"
    pd.testing.assert_frame_equal(ds.ratings, expected_ratings(WHOLE_RATINGS))


def test_a_damaged_copy_of_the_default_dataset_is_an_error_not_a_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Synthetic data stands in only for data that cannot be had, never for a copy that is broken."""
    folder = write_dataset(tmp_path / "root" / "ml-100k", "100k", WHOLE_RATINGS)
    (folder / "u.item").unlink()
    monkeypatch.setenv("RECSYS_DATA", str(tmp_path / "root"))
    with pytest.raises(DataError, match=r"u\.item: file not found"):
        resolve_dataset(None, allow_download=False)


def test_an_unwritable_cache_still_falls_back_to_synthetic_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_data_root: None
) -> None:
    """No copy and nowhere to put one (a read-only home in a container): the data cannot be had."""
    (tmp_path / "file").write_text("not a folder\n")
    monkeypatch.setenv("RECSYS_CACHE", str(tmp_path / "file" / "cache"))
    ds, note = resolve_dataset(None, progress=False)
    assert ds.name == "synthetic" and note is not None and "cannot write the dataset cache" in note


def test_a_cache_that_is_a_file_is_named_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_data_root: None
) -> None:
    """Regression: a file where the cache folder should be was reported as mkdir's "File exists"."""
    (tmp_path / "cache").write_text("not a folder\n")
    monkeypatch.setenv("RECSYS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataUnavailable) as caught:
        resolve_dataset("ml-100k", progress=False)
    assert str(caught.value) == (
        f"cannot write the dataset cache {tmp_path / 'cache'}: a file, not a folder; set $RECSYS_CACHE to "
        "a writable folder"
    )


def test_tiny_is_package_data_read_from_the_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tiny sample lies in the recsys.data package (where a wheel installs it), not in the
    repository's data/ folder, and loads from any working folder."""
    package = Path(str(resources.files("recsys.data"))).resolve()
    assert package / "samples" / "tiny" == TINY_FOLDER
    assert not TINY_FOLDER.is_relative_to(ROOT / "data")
    names = {"ratings.csv", "movies.csv"}
    assert {path.name for path in TINY_FOLDER.iterdir() if path.is_file()} >= names
    # pyproject.toml declares them package data, so a wheel carries them.
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for name in names:
        relative = (TINY_FOLDER / name).relative_to(package).as_posix()
        assert any(fnmatch(relative, pattern) for pattern in declared["recsys.data"]), relative
    monkeypatch.chdir(tmp_path)
    tiny = load_dataset("tiny")
    assert tiny.folder == TINY_FOLDER and len(tiny.ratings) == 4_000 and len(tiny.items) > 0


def test_planted_truth_is_the_generators_for_its_own_synthetic_data_only(tmp_path: Path) -> None:
    tiny = load_dataset("tiny")
    truth = planted_truth(tiny)
    assert truth is not None
    assert truth.item_bias.shape == (TINY_CONFIG.n_items,)
    assert truth.user_factors.shape == (TINY_CONFIG.n_users, TINY_CONFIG.n_factors)
    # Regenerated, not remembered: the same truth each time.
    again = planted_truth(tiny)
    assert again is not None and np.array_equal(truth.item_bias, again.item_bias)
    assert planted_truth(load_dataset("synthetic")) is not None
    # Not by name: a file called synthetic.csv, or other settings' data, was not made by it.
    shifted = tiny.ratings.assign(user=tiny.ratings["user"] + 500)
    shifted.to_csv(tmp_path / "synthetic.csv", index=False)
    named_alike = load_ratings(tmp_path / "synthetic.csv")
    assert named_alike.name == "synthetic" and planted_truth(named_alike) is None
    assert planted_truth(make_synthetic(SyntheticConfig(n_ratings=50_000))[0]) is None


@pytest.mark.slow
def test_real_ml100k_via_data_root(ml100k_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECSYS_DATA", str(ml100k_folder.parent))
    ds = load_dataset("ml-100k", allow_download=False)
    assert ds.folder == ml100k_folder
    assert len(ds.ratings) == 100_000


@pytest.mark.parametrize(
    ("entry", "value"),
    [("ratings", None), ("ratings", 5), ("sep", 5), ("columns", [1]), ("user_features", ["a"]),
     ("rating_scale", [1]), ("header", "yes")],
)  # fmt: skip
def test_an_edited_data_record_of_the_wrong_kind_is_one_line(entry: str, value: object) -> None:
    record = {"dataset": "own", "ratings": "ratings.csv", entry: value}
    with pytest.raises(DataError, match=f"^the run's data.json is damaged: its '{entry}' should be "):
        dataset_from_record(record, "own")


def test_synthetic_data_of_its_own_settings_is_loaded_again_as_generated() -> None:
    """Regression: data.json named such data "synthetic" alone, so a resume regenerated the built-in
    data and refused it as data that had changed since the run started; the settings are recorded."""
    config = SyntheticConfig(n_users=30, n_items=40, n_ratings=300, noise_std=0.1, seed=3)
    generated = make_synthetic(config)[0]
    record = json.loads(json.dumps({"dataset": generated.name, **generated.origin}))  # as data.json holds it
    again = dataset_from_record(record, "synthetic")
    assert again.ratings.equals(generated.ratings) and again.origin == generated.origin
    assert load_dataset("synthetic").origin == {}  # the built-in data's record is its name alone
    damaged = r"^the run's data.json is damaged: its 'generator' settings .*n_users"
    with pytest.raises(DataError, match=damaged):
        dataset_from_record({**record, "generator": {**record["generator"], "n_users": -1}}, "synthetic")
    with pytest.raises(DataError, match=r"`data_dir` .*: synthetic data is generated"):
        dataset_from_record(record, "synthetic", data_dir=Path("elsewhere"))


def test_a_folder_given_for_generated_data_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"`data_dir` .*: synthetic data is generated"):
        load_dataset("synthetic", tmp_path)


def test_tiny_from_a_folder_without_its_ratings_names_the_folder(tmp_path: Path) -> None:
    """`--data-dir` on tiny reads tiny's files from there: a folder without them named only the file."""
    with pytest.raises(DataError, match=rf"`data_dir` {re.escape(str(tmp_path))}: no ratings.csv"):
        load_dataset("tiny", tmp_path)
