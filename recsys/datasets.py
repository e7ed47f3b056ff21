"""Every dataset by name: the MovieLens variants, the committed tiny set, and synthetic data."""

from pathlib import Path

from recsys.data import RatingsDataset
from recsys.errors import DataError
from recsys.movielens import VARIANTS, load_movielens, read_folder
from recsys.synthetic import make_synthetic

TINY_FOLDER = Path(__file__).resolve().parent.parent / "data" / "tiny"
DATASETS = (*VARIANTS, "tiny", "synthetic")
DEFAULT_DATASET = "ml-100k"


def load_dataset(
    name: str, data_dir: Path | None = None, *, progress: bool = True, allow_download: bool = True
) -> RatingsDataset:
    """Load dataset `name`; MovieLens variants come from a local copy or a verified download."""
    if name == "synthetic":
        return make_synthetic()[0]
    if name == "tiny":
        return read_folder("tiny", data_dir or TINY_FOLDER, "csv", (1.0, 5.0))
    if name in VARIANTS:
        return load_movielens(name, data_dir, progress=progress, allow_download=allow_download)
    raise DataError(f"unknown --dataset {name!r}; choose one of: {', '.join(DATASETS)}")


def load_default_dataset(
    data_dir: Path | None = None, *, progress: bool = True, allow_download: bool = True
) -> tuple[RatingsDataset, str | None]:
    """ML-100K when it can be had; otherwise the built-in synthetic data and a note saying why."""
    try:
        return load_dataset(DEFAULT_DATASET, data_dir, progress=progress, allow_download=allow_download), None
    except DataError as error:
        note = f"{DEFAULT_DATASET} is not available ({error}); training on built-in synthetic data instead"
        return load_dataset("synthetic"), note
