"""recsys.workflows.experiment: one run from data to scores (bit-identical for a seed, moved by every
hyperparameter), the checks around it (splits it cannot score, size-adapted batches, the mean
baseline warning, the record of where the data came from), its run folder, and resuming it."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import assert_same_state, cut_short, python_output

from recsys.config import AUTOGRAD_ONLY, ENGINES, config_for
from recsys.data.catalog import dataset_from_record, load_dataset
from recsys.data.dataset import RatingsDataset, ratings_frame
from recsys.errors import RecsysError
from recsys.evaluation.metrics import evaluate_test, predict, rmse
from recsys.models import BayesianMF
from recsys.names import CHECKPOINT_FILE, DATA_FILE
from recsys.train.checkpoints import load_checkpoint
from recsys.workflows import experiment
from recsys.workflows.experiment import (
    MIN_STEPS,
    SCORING_TORCH_THREADS,
    described_users,
    fitted_config,
    prepare,
    recorded_data,
    train_and_evaluate,
)


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
        pytest.param([1] * 5, [1, 2, 3, 4, 5], {"split": "user-last", "test_n": 10}, "`test_n`",
                     id="user-last-too-many"),
        pytest.param([1, 2] * 50, list(range(100)), {"test_frac": 0.001}, "`test_frac`", id="tiny-fraction"),
        pytest.param([1, 1, 2, 2], [1, 2, 3, 4], {"split": "user-last", "test_n": 1}, "`split` random",
                     id="user-last-one-held-out-item-unseen"),
        pytest.param([1, 2, 3, 4, 5], [1, 2, 1, 2, 1], {"split": "user"}, "a user with one rating",
                     id="user-split-one-rating-each"),
        # 50 ratings each: 0.001 of them rounds to none, though nobody has only one rating
        pytest.param([1, 2] * 50, list(range(100)), {"split": "user", "test_frac": 0.001},
                     r"too few for that share to round to one\) gives none: raise `test_frac`",
                     id="user-split-tiny-fraction"),
    ],
)  # fmt: skip
def test_a_split_with_nothing_to_score_is_an_error_naming_the_setting(
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
    with pytest.warns(UserWarning, match="worse than their mean") as caught:
        train_and_evaluate(tiny, hopeless, progress=False)
    assert not any("far wider" in str(warning.message) for warning in caught)  # a range inside the scale
    # A sigmoid stretched over 0..1000 is flat over 1-5: steps of any size barely move it.
    stretched = config_for("dotbias", dataset="tiny", epochs=2, y_range=(0.0, 1000.0))
    with pytest.warns(UserWarning, match=r"worse than their mean .*`y_range` \(0, 1000\), far wider"):
        train_and_evaluate(tiny, stretched, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train_and_evaluate(tiny, config_for("dotbias", dataset="tiny"), progress=False)


def test_a_sampled_model_worse_than_the_mean_is_pointed_at_what_it_reads(tiny: RatingsDataset) -> None:
    """bpmf's Gibbs sampler reads no `lr`, `l2` or `init_scale` (setting one is refused): a fit worse than
    the mean names `epochs` alone, not settings the user cannot give."""
    squeezed = config_for("bpmf", dataset="tiny", epochs=1, members=1, y_range=(0.0, 1.0))
    with pytest.warns(UserWarning, match="worse than their mean") as caught:
        train_and_evaluate(tiny, squeezed, progress=False)
    (message,) = [str(w.message) for w in caught if "worse than their mean" in str(w.message)]
    assert message.endswith("look at `epochs`")


def test_predictions_that_cannot_reach_the_ratings_are_warned_about_before_training(
    tiny: RatingsDataset,
) -> None:
    narrow = config_for("dotbias", dataset="tiny", epochs=1, y_range=(2.9, 3.1))
    with pytest.warns(UserWarning, match=r"`y_range` \(2.9, 3.1\) does not cover the ratings' scale 1-5"):
        prepare(tiny, narrow)


def _rescaled(dataset: RatingsDataset, factor: float) -> RatingsDataset:
    """`dataset` with every rating, and its scale, times `factor`."""
    low, high = dataset.rating_scale
    ratings = dataset.ratings.assign(rating=dataset.ratings["rating"] * factor)
    return dataclasses.replace(dataset, ratings=ratings, rating_scale=(low * factor, high * factor))


@pytest.mark.parametrize("model", ["bpmf", "bfm"])
@pytest.mark.parametrize(("factor", "scale"), [(200.0, "200-1000"), (0.2, "0.2-1")])
def test_a_bayesian_autograd_fit_far_from_five_stars_is_refused(
    tiny: RatingsDataset, model: str, factor: float, scale: str
) -> None:
    """Its scores are in the ratings' units, its steps tuned on five stars: on 0-1 and 0-1000 it had
    trained, after a warning, to no better than the mean (docs/data.md)."""
    rescaled = _rescaled(tiny, factor)
    with pytest.raises(RecsysError, match=rf"^`engine` autograd: {model} .* on a scale of {scale} fits no"):
        prepare(rescaled, config_for(model, engine="autograd", dataset="tiny"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepare(rescaled, config_for(model, dataset="tiny"))  # the Gibbs sampler keeps to any scale
        prepare(_rescaled(tiny, 2.0), config_for(model, engine="autograd", dataset="tiny"))  # as 1-10
        prepare(tiny, config_for(model, engine="autograd", dataset="tiny"))


def test_a_model_trained_without_a_user_table_places_no_new_user_by_one(tiny: RatingsDataset) -> None:
    # It would place every new user alike (no side block to code) while saying it placed them.
    run = train_and_evaluate(tiny, config_for("bfm", dataset="tiny", epochs=4), progress=False)
    table = pd.DataFrame({"job": ["a", "b"]}, index=pd.Index([9001, 9002], name="user"))
    assert not described_users(run.model, run.config, table, np.array([9001, 9002])).any()


def test_a_time_group_of_one_day_per_user_is_warned_about() -> None:
    """Ratings without timestamps are numbered by row, as seconds: a few thousand of them are one day,
    so each user's bin is the user's own, which the user's bias already is."""
    rng = np.random.default_rng(0)
    users, items = np.arange(600) % 30, np.arange(600) // 30  # each pair once
    ratings = ratings_frame(users, items, rng.integers(1, 6, 600).astype(float), np.arange(600))
    dataset = RatingsDataset.from_frame(ratings, rating_scale=(1.0, 5.0), name="rows")
    config = config_for("bfm", features="implicit,time", epochs=2, members=1)
    with pytest.warns(UserWarning, match="each user of rows rated on one day alone"):
        train_and_evaluate(dataset, config, progress=False)
    ratings["timestamp"] *= 3600  # an hour apart: 600 ratings over 25 days, a user's a day apart
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*one day alone")
        train_and_evaluate(RatingsDataset.from_frame(ratings, name="hours"), config, progress=False)


@pytest.mark.parametrize(
    ("engine", "threads", "during"),
    [("compiled", None, SCORING_TORCH_THREADS), ("autograd", None, 1), ("autograd", 2, 2)],
)
def test_torch_runs_on_one_thread_unless_asked_and_is_restored_after(
    tiny: RatingsDataset, engine: str, threads: int | None, during: int
) -> None:
    seen: list[int] = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        config = config_for("dotbias", engine=engine, dataset="tiny", epochs=2)
        train_and_evaluate(
            tiny,
            config,
            progress=False,
            threads=threads,
            on_epoch=lambda _: seen.append(torch.get_num_threads()),
        )
        assert seen == [during, during]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow  # a fresh python per model (4 s each): numba's thread pool starts once in a process
@pytest.mark.parametrize("model", ["bpmf", "ials"])
def test_the_compiled_run_that_starts_numbas_threads_keeps_torch_on_one(model: str) -> None:
    """numba's OpenMP pool, started by a process's first sampler or ALS run, set torch's threads to all
    of numba's: bpmf's sums then split over the cores, and the first run in a process differed from
    the next in the last bits."""
    script = (
        "import torch\n"
        "from recsys import config_for, load_dataset, train_and_evaluate\n"
        "torch.set_num_threads(2)\n"
        "seen = []\n"
        f"config = config_for({model!r}, dataset='tiny', epochs=2)\n"
        "train_and_evaluate(load_dataset('tiny'), config, progress=False, threads=1,\n"
        "                   on_epoch=lambda _: seen.append(torch.get_num_threads()))\n"
        "print(seen, torch.get_num_threads())\n"
    )
    output = python_output(script, {"NUMBA_NUM_THREADS": "2"}, timeout=300)
    assert output.split("\n")[-2] == f"[{SCORING_TORCH_THREADS}, {SCORING_TORCH_THREADS}] 2"


def test_the_run_records_where_its_data_came_from(tiny: RatingsDataset, tmp_path: Path) -> None:
    train_and_evaluate(  # a folder named as text, as torch and pandas take paths
        tiny, config_for("dotbias", dataset="tiny", epochs=1), run_dir=str(tmp_path), progress=False
    )
    recorded = json.loads((tmp_path / DATA_FILE).read_text())
    assert recorded["dataset"] == "tiny"
    assert tiny.folder is not None and recorded_data(tmp_path) == {
        "dataset": "tiny",
        "folder": str(tiny.folder.resolve()),
    }


def test_a_missing_data_record_is_no_record_and_a_damaged_one_is_named(tmp_path: Path) -> None:
    """A damaged one, left unnamed, had the data looked for elsewhere without a word."""
    assert recorded_data(tmp_path) == {}
    (tmp_path / DATA_FILE).write_text("{not json")
    with pytest.raises(
        RecsysError, match=rf"{DATA_FILE} is damaged \(.*\); it says where the run read its data"
    ):
        recorded_data(tmp_path)
    (tmp_path / DATA_FILE).write_text("[1, 2]")
    with pytest.raises(RecsysError, match=r"is damaged \(not a JSON object\)"):
        recorded_data(tmp_path)
    (tmp_path / DATA_FILE).unlink()
    (tmp_path / DATA_FILE).mkdir()  # not damage: nothing to restore, and it cannot be read
    with pytest.raises(RecsysError) as caught:
        recorded_data(tmp_path)
    assert str(caught.value) == f"cannot read {tmp_path / DATA_FILE}: Is a directory"


def test_a_recorded_folder_that_is_gone_falls_back_to_the_usual_lookup(tiny: RatingsDataset) -> None:
    again = dataset_from_record({"dataset": "tiny", "folder": "/no/such/folder"}, "tiny")
    assert again.ratings.equals(tiny.ratings)


# --- determinism and hyperparameters -------------------------------------------------------------

Y_RANGE = (0.0, 5.5)  # tiny's default: (0, 1.1 x its top rating of 5)
BASES = {engine: config_for("dotbias", engine=engine, dataset="tiny", epochs=3) for engine in ENGINES}
BASE = BASES["autograd"]


@pytest.fixture(scope="module")
def base_runs(tiny: RatingsDataset) -> dict[str, Any]:
    return {engine: train_and_evaluate(tiny, config, progress=False) for engine, config in BASES.items()}


@pytest.fixture(params=ENGINES)
def base_run(request: pytest.FixtureRequest, base_runs: dict[str, Any]) -> Any:
    return base_runs[request.param]


def test_the_scored_count_is_what_the_test_figures_cover(tiny: RatingsDataset) -> None:
    """Regression: under --unknown mean, train.py said "on N ratings" with N the known ones only."""
    config = config_for("dotbias", dataset="tiny", epochs=1, split="user-last", test_n=20)
    for policy in ("drop", "mean"):
        result = train_and_evaluate(tiny, dataclasses.replace(config, unknown=policy), progress=False)
        metrics = result.metrics()
        assert metrics["n_test_unknown"] > 0  # the run has unseen ids to score or not
        unseen = metrics["n_test_unknown"] if policy == "mean" else 0
        assert metrics["n_test_scored"] == metrics["n_test"] + unseen
        predictions = predict(result.model, result.data.test.x)
        known_only = rmse(predictions, result.data.test.y)
        assert (result.test["rmse"] == pytest.approx(known_only)) == (policy == "drop")


def test_same_seed_is_bit_identical(tiny: RatingsDataset, base_run: Any) -> None:
    again = train_and_evaluate(tiny, base_run.config, progress=False)
    assert again.test["rmse"] == base_run.test["rmse"]
    assert again.test["mae"] == base_run.test["mae"]
    assert [s.train_loss for s in again.history] == [s.train_loss for s in base_run.history]
    first, second = base_run.model.state_dict(), again.model.state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_run_result_resolves_y_range_and_summarises(base_run: Any) -> None:
    assert BASES[base_run.config.engine].y_range is None
    assert base_run.config.y_range == Y_RANGE
    assert base_run.model.y_range == Y_RANGE
    assert base_run.config.rating_unit == 1.0  # five stars: errors as they are
    metrics = base_run.metrics()
    assert metrics["test_rmse"] == base_run.test["rmse"]
    assert metrics["n_train"] + metrics["n_test"] + metrics["n_test_unknown"] == 4000
    assert metrics["n_train"] == 3200
    assert len(metrics["history"]) == 3
    assert 0.5 < base_run.test["rmse"] < 2.0


# Each changed value must change the test RMSE of the base run (Surprise's "every parameter matters").
CHANGES = [
    ("lr", 5e-3),
    ("batch_size", 32),  # below the cap that gives a run 100 steps (96 here)
    ("l2", 0.0),
    ("wd", 0.1),
    ("n_factors", 10),
    ("epochs", 4),
    ("optimizer", "sgd"),
    ("schedule", "constant"),
    ("seed", 1),
    ("y_range", (1.0, 5.0)),
    ("rating_unit", 2.0),
    ("test_frac", 0.3),
    ("split", "user"),
    ("sparse", True),
    ("members", 3),
]
ENGINE_CHANGES = [
    (engine, field, value)
    for engine in ENGINES
    for field, value in CHANGES
    if (engine == "autograd" and field != "members") or (engine == "compiled" and field not in AUTOGRAD_ONLY)
]


@pytest.mark.parametrize(
    ("engine", "field", "value"), ENGINE_CHANGES, ids=[f"{e}-{f}" for e, f, _ in ENGINE_CHANGES]
)
def test_every_hyperparameter_changes_the_result(
    engine: str, field: str, value: Any, tiny: RatingsDataset, base_runs: dict[str, Any]
) -> None:
    base, base_run = BASES[engine], base_runs[engine]
    assert getattr(base, field) != value
    changed = dataclasses.replace(base, **{field: value})
    result = train_and_evaluate(tiny, changed, progress=False)
    assert math.isfinite(result.test["rmse"])
    assert result.test["rmse"] != base_run.test["rmse"]


@pytest.mark.parametrize("engine", ENGINES)
def test_ratings_on_a_larger_scale_train_as_five_stars_do(engine: str, tiny: RatingsDataset) -> None:
    """The same ratings times 20 (a 0-100 scale): the run's errors are 20 times the five-star run's,
    as if nothing but the unit had changed; without the rating unit the default learning rates
    made the compiled engine worse than the mean on such data."""
    ratings = tiny.ratings.assign(rating=tiny.ratings["rating"] * 20)
    scaled = dataclasses.replace(tiny, ratings=ratings, rating_scale=(20.0, 100.0))
    config = config_for("dotbias", engine=engine, dataset="tiny", epochs=3)
    five_stars = train_and_evaluate(tiny, config, progress=False)
    hundred = train_and_evaluate(scaled, config, progress=False)
    assert hundred.config.rating_unit == pytest.approx(20.0)
    assert hundred.config.y_range == pytest.approx((0.0, 110.0))
    assert hundred.test["rmse"] / 20 == pytest.approx(five_stars.test["rmse"], rel=0.02)


def test_run_dir_gets_config_metrics_and_checkpoint(tiny: RatingsDataset, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = train_and_evaluate(tiny, dataclasses.replace(BASE, epochs=1), run_dir=run_dir, progress=False)
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoint.pt",
        "config.json",
        "data.json",
        "metrics.json",
        "recommend.npz",
    ]
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")
    assert checkpoint.config == result.config
    assert checkpoint.metrics["test_rmse"] == result.test["rmse"]
    assert evaluate_test(checkpoint.model, result.data, "drop")["rmse"] == result.test["rmse"]


def test_the_steps_before_the_first_epoch_say_what_they_do_unless_progress_is_off(
    tiny: RatingsDataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At 25M ratings splitting, encoding, writing the run folder and setting up the engine take tens
    of seconds between the run's header and its first epoch: a status line says which is running."""
    config = dataclasses.replace(BASES["compiled"], epochs=1)
    train_and_evaluate(tiny, config, run_dir=tmp_path / "run", progress=True)
    shown = capsys.readouterr().err
    for step in (
        "splitting and encoding 4,000 ratings...",
        "building dotbias for ",
        f"writing what each user rated into {tmp_path / 'run'}...",
        "setting up the compiled engine on 3,200 ratings...",
    ):
        assert step in shown, (step, shown)
    train_and_evaluate(tiny, config, progress=False)
    assert capsys.readouterr().err == ""


# --- resuming: checkpoints carry the training state ------------------------------------------------


CONFIGS = {
    "adamw": config_for("dotbias", dataset="tiny", epochs=5, batch_size=256),
    "lazy-adam": config_for("dotbias", dataset="tiny", epochs=5, batch_size=256, sparse=True),
    "compiled": config_for("dotbias", engine="compiled", dataset="tiny", epochs=5),
    "svdpp-autograd": config_for("svdpp", engine="autograd", dataset="tiny", epochs=5, batch_size=256),
    "svdpp-compiled": config_for("svdpp", engine="compiled", dataset="tiny", epochs=5),
    "ensemble": config_for("dotbias", engine="compiled", dataset="tiny", epochs=5, members=3),
    "device": config_for("dotbias", engine="device", dataset="tiny", epochs=5),
    "svdpp-device": config_for("svdpp", engine="device", dataset="tiny", epochs=5),
    "bpmf-gibbs": config_for("bpmf", dataset="tiny", epochs=10),
    "bpmf-chains": config_for("bpmf", dataset="tiny", epochs=10, members=3),
    "bfm-chains": config_for("bfm", dataset="tiny", epochs=10, members=2),
    "bpr": config_for("bpr", dataset="tiny", epochs=5),
    "ials": config_for("ials", dataset="tiny", epochs=5),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_resumed_run_is_bit_identical(tiny: RatingsDataset, tmp_path: Path, name: str) -> None:
    config = CONFIGS[name]
    whole = train_and_evaluate(tiny, config, run_dir=tmp_path / "whole", progress=False)
    checkpoint = cut_short(tiny, config, tmp_path / "cut", 2)
    assert checkpoint.metrics == {"epoch": 2}
    resumed = train_and_evaluate(tiny, config, run_dir=tmp_path / "cut", progress=False, resume=checkpoint)
    assert resumed.test == whole.test  # RMSE and MAE, or a ranking model's lists
    assert [h.train_loss for h in resumed.history] == [h.train_loss for h in whole.history]
    assert_same_state(whole.model, resumed.model)


def test_a_ranking_run_stopped_while_its_lists_are_scored_keeps_its_model_to_resume(
    tiny: RatingsDataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final lists of a large catalogue take minutes: Ctrl-C then lost every epoch trained."""
    config = CONFIGS["bpr"]
    whole = train_and_evaluate(tiny, config, progress=False)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(experiment, "evaluate_ranking", interrupted)
        with pytest.raises(KeyboardInterrupt):
            train_and_evaluate(tiny, config, run_dir=tmp_path, progress=False)
    checkpoint = load_checkpoint(tmp_path / CHECKPOINT_FILE)
    assert checkpoint.metrics == {"epoch": config.epochs}
    resumed = train_and_evaluate(tiny, config, run_dir=tmp_path, progress=False, resume=checkpoint)
    assert resumed.test == whole.test and len(resumed.history) == config.epochs
    assert_same_state(whole.model, resumed.model)


@pytest.mark.slow  # three thinned chains run whole and resumed (4 s)
def test_a_thinned_chain_cut_between_kept_draws_resumes_bit_identical(
    tiny: RatingsDataset, tmp_path: Path
) -> None:
    config = config_for("bpmf", dataset="tiny", epochs=300, n_factors=2)  # every other draw kept
    assert BayesianMF.kept_slot(251, 300) is None
    whole = train_and_evaluate(tiny, config, progress=False)
    checkpoint = cut_short(tiny, config, tmp_path / "cut", 251)
    resumed = train_and_evaluate(tiny, config, progress=False, resume=checkpoint)
    assert resumed.test == whole.test
    assert [(h.train_loss, h.valid_rmse) for h in resumed.history] == [
        (h.train_loss, h.valid_rmse) for h in whole.history
    ]
    assert_same_state(whole.model, resumed.model)


def test_resume_refuses_other_data(tiny: RatingsDataset, tmp_path: Path) -> None:
    config = config_for("dotbias", dataset="tiny", epochs=2, batch_size=256)
    train_and_evaluate(tiny, config, run_dir=tmp_path / "run", progress=False)
    checkpoint = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    other = dataclasses.replace(
        tiny, ratings=tiny.ratings[tiny.ratings["user"] != tiny.ratings["user"].iloc[0]]
    )
    with pytest.raises(RecsysError, match="cannot resume"):
        train_and_evaluate(other, config, progress=False, resume=checkpoint)


@pytest.mark.parametrize("damage", ["generator", "history"])
def test_a_training_state_without_its_parts_is_one_line(
    damage: str, tiny: RatingsDataset, tmp_path: Path
) -> None:
    """A checkpoint rewritten, header and all, without part of its training state had ended a resume in
    a KeyError's traceback."""
    config = config_for("dotbias", dataset="tiny", epochs=3)
    checkpoint = cut_short(tiny, config, tmp_path / "run", 2)
    assert checkpoint.training is not None
    training = {key: value for key, value in checkpoint.training.items() if key != damage}
    damaged = dataclasses.replace(checkpoint, training=training)
    with pytest.raises(RecsysError) as caught:
        train_and_evaluate(tiny, config, progress=False, resume=damaged)
    assert (
        str(caught.value)
        == f"cannot resume: the checkpoint's training state is damaged (KeyError: '{damage}')"
    )


def test_resume_onto_data_on_another_scale_names_it_as_other_data(
    tiny: RatingsDataset, tmp_path: Path
) -> None:
    """Another run's data.json (data on a scale of 0.2-1) had been refused for the run's relevance
    threshold, which a shell user was told to change in a --config file; it is other data."""
    config = config_for("dotbias", dataset="tiny", epochs=2)
    train_and_evaluate(tiny, config, run_dir=tmp_path / "run", progress=False)
    checkpoint = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    ratings = tiny.ratings.assign(rating=tiny.ratings["rating"] / 5)
    other = dataclasses.replace(tiny, ratings=ratings, rating_scale=(0.2, 1.0))
    with pytest.raises(RecsysError) as caught:
        train_and_evaluate(other, config, progress=False, resume=checkpoint)
    assert str(caught.value).startswith("cannot resume: the ratings of tiny differ from those the run was")


@pytest.mark.parametrize("engine", ["compiled", "autograd"])
def test_resume_refuses_the_same_ids_with_other_ratings(
    engine: str, tiny: RatingsDataset, tmp_path: Path
) -> None:
    # Same users and items, one rating changed: the run would have resumed silently onto other data.
    config = config_for("dotbias", engine=engine, dataset="tiny", epochs=2)
    train_and_evaluate(tiny, config, run_dir=tmp_path / "run", progress=False)
    checkpoint = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    ratings = tiny.ratings.copy()
    ratings.loc[ratings.index[0], "rating"] = 6 - ratings["rating"].iloc[0]
    changed = dataclasses.replace(tiny, ratings=ratings)
    with pytest.raises(RecsysError, match="cannot resume: the ratings of tiny differ"):
        train_and_evaluate(changed, config, progress=False, resume=checkpoint)
    resumed = train_and_evaluate(tiny, config, progress=False, resume=checkpoint)  # the same data resumes
    assert len(resumed.history) == 2


def test_a_new_user_without_an_id_takes_no_row_of_the_feature_table() -> None:
    """recommend --rate's user has no id: no row of the feature table may stand for it."""
    from conftest import planted_side_features

    from recsys.workflows.experiment import new_user_starts

    dataset = planted_side_features()
    run = train_and_evaluate(dataset, config_for("svdpp", features="side", split="random"), progress=False)
    none = np.zeros(0, np.int64)
    by_id = new_user_starts(
        run.model, run.config, dataset.user_features, np.array([0]), [none], len(run.data.items)
    )
    anonymous = new_user_starts(
        run.model, run.config, dataset.user_features, None, [none], len(run.data.items)
    )
    assert by_id is not None and anonymous is not None
    (by_id_vectors, _), (anonymous_vectors, _) = by_id[0], anonymous[0]  # the one member's
    assert by_id_vectors.abs().sum() > 0 and anonymous_vectors.abs().sum() == 0


def test_a_relevance_threshold_above_the_scale_is_refused_and_one_on_it_kept() -> None:
    with pytest.raises(RecsysError, match=r"`relevant` 5.5 is above the ratings' scale 1-5"):
        fitted_config(config_for("bpr", relevant=5.5), (1.0, 5.0), 1000)
    assert fitted_config(config_for("bpr", relevant=5.0), (1.0, 5.0), 1000).relevant == 5.0


def test_a_ranking_run_whose_test_part_judges_nobody_is_refused_before_training() -> None:
    """The latest fifth all 1 stars: no test item is relevant, and every list metric had been NaN."""
    ratings = load_dataset("tiny").ratings.sort_values("timestamp").reset_index(drop=True)
    ratings.loc[int(len(ratings) * 0.8) :, "rating"] = 1.0
    dataset = RatingsDataset.from_frame(ratings, name="late-ones")
    with pytest.raises(RecsysError, match=r"leaves no test user with a relevant item .* `relevant` 4"):
        train_and_evaluate(dataset, config_for("ials", split="time", epochs=1), progress=False)
    lowered = train_and_evaluate(
        dataset, config_for("ials", split="time", epochs=1, relevant=1.0), progress=False
    )
    assert lowered.test["users"] > 0


def test_a_ranking_run_on_data_no_rating_of_which_is_relevant_says_so_whatever_the_split() -> None:
    """Ratings of 0.5-3 on a 0.5-5 scale: refused as the data's, not blamed on the split."""
    ratings = load_dataset("tiny").ratings.assign(rating=lambda frame: frame["rating"].clip(upper=3.0))
    dataset = dataclasses.replace(RatingsDataset.from_frame(ratings, name="low"), rating_scale=(0.5, 5.0))
    expected = r"^no rating of low reaches 3.875, .*its highest is 3\).*lower `relevant`$"
    for split in ("random", "time"):
        with pytest.raises(RecsysError, match=expected):
            train_and_evaluate(dataset, config_for("bpr", split=split, epochs=1), progress=False)


@pytest.mark.parametrize("relevant", [float("nan"), float("inf"), float("-inf")])
def test_compare_models_refuses_a_relevance_threshold_that_is_no_finite_rating(relevant: float) -> None:
    """NaN passed the scale check (it compares false) and left every ranking metric NaN."""
    from recsys import compare_models, load_dataset

    with pytest.raises(RecsysError, match="`relevant` must be a finite rating"):
        compare_models(load_dataset("tiny"), "random", models=["dot"], epochs=1, relevant=relevant)


def test_a_run_records_the_name_of_the_data_it_was_given(tmp_path: Path) -> None:
    """config_for's dataset defaults to ml-100k; a run given other data records that data's name, so
    that its run folder names the data to load again."""
    result = train_and_evaluate(
        load_dataset("tiny"), config_for("dotbias", epochs=1), run_dir=tmp_path / "run", progress=False
    )
    assert result.config.dataset == "tiny"
    assert json.loads((tmp_path / "run" / "config.json").read_text())["dataset"] == "tiny"


@pytest.mark.parametrize(
    ("model", "engine"), [("dotbias", "compiled"), ("svdpp", "device"), ("bfm", "compiled")]
)
def test_a_float64_default_dtype_trains_what_float32_does_and_is_given_back(
    tiny: RatingsDataset, model: str, engine: str
) -> None:
    """Under torch.set_default_dtype(torch.float64) (a notebook's), the compiled engine refused the
    float64 tables it was built with in an internal ValueError, the device engine mixed dtypes in
    index_add_, and the Gibbs samplers drew other numbers: the models are now built and trained in
    float32, as under torch's own default, and the caller's default comes back."""
    config = config_for(model, dataset="tiny", engine=engine, epochs=2)
    expected = train_and_evaluate(tiny, config, progress=False).test["rmse"]
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        result = train_and_evaluate(tiny, config, progress=False)
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(before)
    assert result.test["rmse"] == expected
    assert {parameter.dtype for parameter in result.model.parameters()} == {torch.float32}
