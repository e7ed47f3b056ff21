"""Every dataset by name: the MovieLens variants, the committed tiny set, and synthetic data."""

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from recsys.data.dataset import RatingsDataset
from recsys.data.features import check_coverage, read_feature_file
from recsys.data.id_columns import distinct_ids
from recsys.data.movielens import VARIANTS, load_movielens, read_folder
from recsys.data.synthetic import TINY_CONFIG, PlantedTruth, SyntheticConfig, make_synthetic
from recsys.errors import DataError, DataUnavailable, RecsysError, short_reason
from recsys.names import DATA_FILE, DATASETS, MOVABLE_FILES

# The committed tiny sample is package data (pyproject.toml), so it is there in every install, not only
# in a checkout; the readers need real files, which a wheel installed by pip unpacks.
TINY_FOLDER = Path(__file__).resolve().parent / "samples" / "tiny"
DEFAULT_DATASET = "ml-100k"


def load_dataset(
    name: str, data_dir: Path | str | None = None, *, progress: bool = True, allow_download: bool = True
) -> RatingsDataset:
    """Load dataset `name`; MovieLens variants come from a local copy or a verified download."""
    if name == "synthetic":
        if data_dir is not None:  # generated: a folder given would be ignored
            raise DataError(f"`data_dir` {data_dir}: synthetic data is generated, not read from a folder")
        return make_synthetic()[0]
    if name == "tiny":
        if data_dir is not None and not (Path(data_dir) / "ratings.csv").is_file():
            raise DataError(
                f"`data_dir` {data_dir}: no ratings.csv, as tiny's folder holds (leave `data_dir` out "
                "for the committed sample)"
            )
        return read_folder("tiny", Path(data_dir) if data_dir is not None else TINY_FOLDER, "csv", (1.0, 5.0))
    if name in VARIANTS:
        return load_movielens(name, data_dir, progress=progress, allow_download=allow_download)
    raise DataError(f"unknown `dataset` {name!r}; choose one of: {', '.join(DATASETS)}")


def resolve_dataset(
    name: str | None,
    data_dir: Path | None = None,
    *,
    progress: bool = True,
    allow_download: bool = True,
    fallback: bool = True,
) -> tuple[RatingsDataset, str | None]:
    """Dataset `name`; with neither a name nor a folder, ML-100K when it can be had, otherwise (with
    `fallback`) the built-in synthetic data and a note saying why."""
    if name is not None or data_dir is not None:
        return load_dataset(
            name or DEFAULT_DATASET, data_dir, progress=progress, allow_download=allow_download
        ), None
    try:
        return load_dataset(DEFAULT_DATASET, progress=progress, allow_download=allow_download), None
    except DataUnavailable as error:  # a copy that is there but damaged is an error, not a fallback
        if not fallback:
            raise
        note = f"{DEFAULT_DATASET} is not available ({error}); training on built-in synthetic data instead"
        return load_dataset("synthetic"), note


def with_feature_files(
    dataset: RatingsDataset, user_features: str | Path | None, item_features: str | Path | None
) -> RatingsDataset:
    """`dataset` with the side-feature tables of these files in place of its own (recsys.data.features),
    their places recorded in its origin so that a resumed run reads them again."""
    tables, origin = {}, dict(dataset.origin)
    for side, path in (("user", user_features), ("item", item_features)):
        if path is not None:
            table = read_feature_file(path, side)
            check_coverage(table, distinct_ids(dataset.ratings[side]), side, str(path))
            tables[f"{side}_features"] = table
            origin[f"{side}_features"] = str(Path(path).resolve())
    return dataclasses.replace(dataset, origin=origin, **tables) if tables else dataset


def planted_truth(dataset: RatingsDataset) -> PlantedTruth | None:
    """The generator's truth behind `dataset` where it is the built-in synthetic data ("synthetic",
    "tiny") as generated, else None. Told by its ratings, not its name: a file called synthetic.csv,
    a tiny read from another folder or data generated with other settings have no truth of these."""
    configs = {"synthetic": SyntheticConfig(), "tiny": TINY_CONFIG}
    if dataset.name not in configs:
        return None
    generated, truth = make_synthetic(configs[dataset.name])
    same = dataset.ratings.reset_index(drop=True).equals(generated.ratings.reset_index(drop=True))
    return truth if same else None


def dataset_from_record(
    record: Mapping[str, Any],
    name: str,
    data_dir: Path | None = None,
    *,
    progress: bool = True,
    allow_download: bool = True,
    features: bool = True,
) -> RatingsDataset:
    """The data a run recorded (its data.json) loaded again: a ratings file read as it was; dataset
    `name` from the folder it was read from, if that is still there (`data_dir` overrides it), else
    found as usual; with `features`, the feature files it recorded read again too."""
    _check_record_types(record)
    _check_record_is_the_runs(record, name)
    _check_recorded_files(record, MOVABLE_FILES if features else ("ratings", "items"))
    dataset = _recorded_data(record, name, data_dir, progress=progress, allow_download=allow_download)
    if not features:
        return dataset
    return with_feature_files(dataset, record.get("user_features"), record.get("item_features"))


def recorded_user_features(
    record: Mapping[str, Any], name: str, data_dir: Path | None = None, *, allow_download: bool = True
) -> pd.DataFrame | None:
    """The users' side-feature table of the data a run recorded (its data.json), for a new user's cold
    start: its file read alone, where the run had one (not the ratings, which at ML-25M's size take
    seconds); None for a ratings file, which has none of its own; else the dataset's own (MovieLens')."""
    _check_record_types(record)
    _check_record_is_the_runs(record, name)
    if "user_features" in record:
        _check_recorded_files(record, ("user_features",))
        return read_feature_file(record["user_features"], "user")
    if "ratings" in record:
        return None
    return dataset_from_record(record, name, data_dir, allow_download=allow_download).user_features


def _check_recorded_files(record: Mapping[str, Any], keys: Iterable[str]) -> None:
    """Each of the files `keys` names in `record` is there, or one line says where it was recorded."""
    for key in keys:
        if key in record and not Path(record[key]).exists():
            raise DataError(
                f"the run read its {key.replace('_', ' ')} from {record[key]} (recorded in its {DATA_FILE}), "
                f"which is no longer there; put the file back, or resume the run with `{key}` at "
                "its new place"
            )


def relocated(record: Mapping[str, Any], moved: Mapping[str, Path | None]) -> dict[str, Any]:
    """`record` (a run's data.json) with the files `moved` names (by key, None for one not moved) at
    their new places. Moving changes nothing else: the file is read as before, and a resumed run checks
    its ratings' fingerprint and its features' digests against the checkpoint, so other data is refused."""
    record = dict(record)
    for key, path in moved.items():
        if path is None:
            continue
        if key not in record:
            trained_on = f" (it was trained on {record.get('dataset', 'data given in Python')})"
            raise DataError(
                f"`{key}` {path}: the run read no {key.replace('_', ' ')} file"
                f"{trained_on if key == 'ratings' else ''}, so it has none to look for there"
            )
        if not Path(path).exists():  # else named as a recorded file gone, which this one never was
            raise DataError(f"`{key}` {path}: no such file")
        record[key] = str(path)
    return record


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# What each entry of a data.json holds, and a check of it: an edited or damaged one is one line.
_RECORD_TYPES: dict[str, tuple[str, Callable[[object], bool]]] = {
    **{
        key: ("a path", lambda value: isinstance(value, str))
        for key in ("ratings", "items", "user_features", "item_features", "folder")
    },
    "sep": ("a separator", lambda value: isinstance(value, str)),
    "generator": ("synthetic data's settings", lambda value: isinstance(value, dict)),
    "header": ("true or false", lambda value: isinstance(value, bool)),
    "implicit": ("true or false", lambda value: isinstance(value, bool)),
    "columns": (
        "names or positions by role",
        lambda value: isinstance(value, dict) and all(isinstance(name, str | int) for name in value.values()),
    ),
    "rating_scale": (
        "[low, high]",
        lambda value: isinstance(value, list) and len(value) == 2 and all(map(_is_number, value)),
    ),
}


def _check_record_types(record: Mapping[str, Any]) -> None:
    for key, (kind, fits) in _RECORD_TYPES.items():
        if key in record and not fits(record[key]):
            raise DataError(
                f"the run's {DATA_FILE} is damaged: its {key!r} should be {kind}, not {record[key]!r}"
            )


def _check_record_is_the_runs(record: Mapping[str, Any], name: str) -> None:
    """A data.json names the data its run trained on, `name`: one naming other data is another run's,
    and one that says how a ratings file was read without its path had that entry removed."""
    recorded = record.get("dataset", name)
    if recorded != name:
        raise DataError(
            f"the run's {DATA_FILE} names the data {recorded!r}, where its checkpoint was trained on "
            f"{name!r}: the {DATA_FILE} is another run's; restore the run's own"
        )
    if name not in DATASETS and "ratings" not in record and set(record) - {"dataset"}:
        raise DataError(
            f"the run's {DATA_FILE} is damaged: it says how a ratings file was read "
            f"({', '.join(sorted(record))}) but has no 'ratings' entry naming it; restore it"
        )


def _recorded_data(
    record: Mapping[str, Any], name: str, data_dir: Path | None, *, progress: bool, allow_download: bool
) -> RatingsDataset:
    if "ratings" in record:
        from recsys.data.ratings_file import load_ratings

        options = {
            key: record[key] for key in ("columns", "sep", "header", "items", "implicit") if key in record
        }
        scale = record.get("rating_scale")
        return load_ratings(
            record["ratings"], rating_scale=tuple(scale) if scale else None, name=name, **options
        )
    if name == "synthetic" and "generator" in record and data_dir is None:  # with settings of its own
        return make_synthetic(_generator_config(record))[0]
    if name not in DATASETS and not record:
        raise DataError(
            f"the run's {DATA_FILE}, which says where its data {name!r} came from, is missing or damaged"
        )
    if name not in DATASETS:
        raise DataError(
            f"the run was trained on data {name!r} given in Python, which it cannot load again; "
            "train from a ratings file for a run that can be resumed and recommended from"
        )
    folder = record.get("folder")
    if data_dir is None and isinstance(folder, str) and Path(folder).is_dir():
        data_dir = Path(folder)
    return load_dataset(name, data_dir, progress=progress, allow_download=allow_download)


def _generator_config(record: Mapping[str, Any]) -> SyntheticConfig:
    """The settings synthetic data was generated with, as its origin (a run's data.json) records them."""
    try:
        return SyntheticConfig(**record["generator"])
    except (TypeError, RecsysError) as error:  # a setting unknown, missing or out of range
        raise DataError(
            f"the run's {DATA_FILE} is damaged: its 'generator' settings are not synthetic data's "
            f"({short_reason(error)})"
        ) from None
