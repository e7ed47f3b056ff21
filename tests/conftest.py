"""Shared fixtures: the committed tiny dataset and, when present, real MovieLens 100K."""

import os
from pathlib import Path

import pytest

from recsys.data import RatingsDataset
from recsys.datasets import load_dataset

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny() -> RatingsDataset:
    """data/tiny: 4,000 synthetic ratings in MovieLens' CSV layout."""
    return load_dataset("tiny")


@pytest.fixture(scope="session")
def ml100k_folder() -> Path:
    """The real ml-100k folder under $RECSYS_DATA; skips when it is not there."""
    root = os.environ.get("RECSYS_DATA")
    if not root:
        pytest.skip("real MovieLens 100K: set RECSYS_DATA to a folder holding ml-100k/")
    folder = Path(root) / "ml-100k"
    if not (folder / "u.data").is_file():
        pytest.skip(f"real MovieLens 100K: {folder}/u.data not found")
    return folder


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the dataset cache at an empty folder so no test reads or writes the user's cache."""
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("RECSYS_CACHE", str(cache))
    return cache
