"""recsys.config: RunConfig refuses values no run can use, config_for applies each model's tuned
defaults and chooses the engine, and the thread count is checked against the cores."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from recsys.config import (
    ENGINES,
    RunConfig,
    available_cores,
    check_device,
    check_threads,
    config_for,
    default_threads,
)
from recsys.data.dataset import RatingsDataset
from recsys.errors import RecsysError
from recsys.workflows.experiment import train_and_evaluate


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("optimizer", "adam", "`optimizer` 'adam'"),
        ("schedule", "cosine", "`schedule` 'cosine'"),
        ("unknown", "skip", "`unknown` 'skip'"),
        ("epochs", 0, "`epochs` must be at least 1"),
        ("batch_size", 0, "`batch_size` must be at least 1"),
        ("n_factors", 0, "`n_factors` must be at least 1"),
        ("lr", 0.0, "`lr` must be positive"),
        ("init_scale", 0.0, "`init_scale` must be positive"),
        ("init_scale", float("inf"), "`init_scale` must be positive"),
        ("epochs", True, "`epochs` must be a whole number, got True"),  # a config file's `true`
        ("n_factors", 5.0, "`n_factors` must be a whole number, got 5.0"),  # JSON written by numpy
        # Checked with the flags, before a data file is read (the default split, random, uses it).
        ("test_frac", 1.0, "`test_frac` must lie strictly between 0 and 1, got 1.0"),
        ("test_frac", float("nan"), "`test_frac` must lie strictly between 0 and 1, got nan"),
        ("l2", -0.1, "`l2` must be zero or positive"),
        ("l2", float("inf"), "`l2` must be zero or positive and finite"),
        ("wd", -1.0, "`wd` must be zero or positive"),
        ("wd", float("inf"), "`wd` must be zero or positive and finite"),
        ("y_range", (5.0, 0.0), "`y_range` needs finite LOW < HIGH"),
        ("y_range", (0.0, float("inf")), "`y_range` needs finite LOW < HIGH"),
        ("y_range", 5, "`y_range` needs finite LOW < HIGH"),
        ("seed", -1, "`seed` must be a whole number from 0 to 2**32 - 1"),
        ("seed", 2**64, "`seed` must be a whole number from 0 to 2**32 - 1"),
        ("sparse", "no", "`sparse` is true or false"),
        ("ordinal", "false", "`ordinal` is true or false, got 'false'"),  # a config file's text
        ("device", "tpu", "`device` must be cpu or cuda"),
    ],
)
def test_config_rejects_values_no_run_can_use(field: str, value: Any, message: str) -> None:
    with pytest.raises(RecsysError, match=re.escape(message)):
        config_for("dot", **{field: value})


def test_an_ials_confidence_weight_past_float32s_digits_is_refused() -> None:
    # 1e300 trained to a loss of 5e299 and a test NDCG of chance without a word; 1e30 diverged.
    with pytest.raises(RecsysError, match=re.escape("`alpha` must be at most 1e+09, got 1e+300")):
        config_for("ials", alpha=1e300)
    assert config_for("ials", alpha=1e9).alpha == 1e9


def test_split_settings_are_checked_where_the_split_uses_them() -> None:
    with pytest.raises(RecsysError, match="`test_n` must be at least 1, got 0"):
        config_for("dot", split="user-last", test_n=0)
    with pytest.raises(RecsysError, match=r"`test_n` must be a whole number, got 2\.5"):
        config_for("dot", split="user-last", test_n=2.5)
    with pytest.raises(RecsysError, match="`test_frac` must lie strictly between 0 and 1"):
        config_for("dot", split="time", test_frac=0.0)
    # A fold ignores both: a run saved with odd unused values still loads.
    saved = config_for("dot", split="u1", test_frac=0.0, test_n=0)
    assert RunConfig.from_dict(saved.to_dict()) == saved


def test_config_for_applies_overrides_and_rejects_unknown_models() -> None:
    config = config_for("linear", lr=0.1, wd=None)
    assert (config.model, config.lr, config.wd) == ("linear", 0.1, RunConfig().wd)
    with pytest.raises(RecsysError, match="unknown model 'nope'"):
        config_for("nope")


def test_run_config_round_trips_and_rejects_unknown_keys() -> None:
    config = config_for("dot", y_range=(0.5, 5.0), epochs=3)
    values = config.to_dict()
    values["y_range"] = list(values["y_range"])  # as read back from JSON
    assert RunConfig.from_dict(values) == config
    with pytest.raises(RecsysError, match="bogus"):
        RunConfig.from_dict({**config.to_dict(), "bogus": 1})


@pytest.mark.parametrize("change", [{"optimizer": "sgd"}, {"wd": 0.1}])
def test_sparse_needs_adamw_without_weight_decay(change: dict[str, Any]) -> None:
    with pytest.raises(RecsysError, match="`sparse`"):
        config_for("dotbias", sparse=True, **change)


def test_compiled_engine_refuses_models_and_settings_it_does_not_have() -> None:
    trained = "dot, dotbias, svdpp, bpmf, bfm, bpr, ials"
    with pytest.raises(RecsysError, match=f"`engine` compiled trains {trained}, not linear"):
        config_for("linear", engine="compiled")
    with pytest.raises(RecsysError, match="`batch_size` applies to `engine` autograd only"):
        config_for("dotbias", engine="compiled", batch_size=64)
    with pytest.raises(RecsysError, match="runs on the CPU"):
        config_for("dotbias", engine="compiled", device="cuda")
    # Left to choose, a config takes the compiled engine unless an autograd-only flag is given.
    assert config_for("dotbias").engine == "compiled"
    assert config_for("dotbias", batch_size=64).engine == "autograd"
    assert config_for("dotbias", device="cuda").engine == "device"  # the same AdaGrad, for a GPU
    assert config_for("embproj").engine == "autograd"


def test_threads_are_checked() -> None:
    assert check_threads(1) == 1
    for bad in (0, -2):
        with pytest.raises(RecsysError, match="`threads` must be at least 1"):
            check_threads(bad)
    with pytest.raises(RecsysError, match=f"may use {available_cores()} core"):
        check_threads(available_cores() + 1)
    for fractional in (1.5, True, "2"):  # not a count at all: saying "at least 1" of 1.5 misleads
        with pytest.raises(RecsysError, match=r"^`threads` must be a whole number, got "):
            check_threads(fractional)


def test_numpy_numbers_are_taken_as_pythons() -> None:
    """A grid search over np.arange, or a float32 learning rate, sets numpy's numbers."""
    config = config_for(
        "dotbias", n_factors=np.int64(8), epochs=np.int32(2), lr=np.float32(0.5), y_range=[np.int8(0), 5.5]
    )
    assert (config.n_factors, config.epochs, config.lr, config.y_range) == (8, 2, 0.5, (0, 5.5))
    assert type(config.n_factors) is int and type(config.lr) is float
    assert RunConfig.from_dict(config.to_dict()) == config
    assert check_threads(np.int64(1)) == 1
    with pytest.raises(RecsysError, match="`epochs` must be a whole number"):
        config_for("dotbias", epochs=np.bool_(True))


def test_a_y_range_given_as_a_numpy_array_is_its_pair() -> None:
    """np.array([0, 5.5]) is finite LOW < HIGH: it was refused with a message saying it was not."""
    config = config_for("dotbias", y_range=np.array([0, 5.5]))
    assert config.y_range == (0.0, 5.5) and all(type(end) is float for end in config.y_range)
    assert RunConfig.from_dict(config.to_dict()) == config
    with pytest.raises(RecsysError, match="`y_range` needs finite LOW < HIGH"):
        config_for("dotbias", y_range=np.array([[0, 5.5]]))


def test_every_field_has_a_default_that_passes_its_own_checks() -> None:
    config = RunConfig()
    assert RunConfig.from_dict(config.to_dict()) == config
    assert {field.name for field in dataclasses.fields(RunConfig)} == set(config.to_dict())


def test_a_config_is_frozen() -> None:
    config = config_for("dot")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.lr = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(("local_ranks", "expected"), [(None, 8), ("1", 8), ("2", 4), ("64", 1)])
def test_default_threads_share_the_cores_among_torchruns_local_ranks(
    local_ranks: str | None, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("recsys.config.available_cores", lambda: 8)
    if local_ranks is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_ranks)
    assert default_threads() == expected


@pytest.mark.parametrize("flag", ["lr", "l2"])
def test_a_sampled_models_compiled_engine_refuses_a_step_size_or_penalty(flag: str) -> None:
    with pytest.raises(RecsysError, match=f"`{flag}` has no effect on bpmf's compiled engine"):
        config_for("bpmf", **{flag: 0.5})
    assert config_for("bpmf", engine="autograd", **{flag: 0.5}).engine == "autograd"
    assert config_for("bpmf").engine == "compiled"


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_a_cuda_device_is_refused_without_one_by_the_command_and_the_library(tiny: RatingsDataset) -> None:
    check_device("cpu")
    with pytest.raises(RecsysError, match="`device` cuda:1: no CUDA device is available here"):
        check_device("cuda:1")
    config = config_for("dotbias", engine="autograd", dataset="tiny", device="cuda", epochs=1)
    with pytest.raises(RecsysError, match="`device` cuda: no CUDA device"):
        train_and_evaluate(tiny, config, progress=False)


# --- one schema ----------------------------------------------------------------------------------


def test_every_setting_is_declared_once_and_everything_else_is_derived_from_it() -> None:
    from recsys.commands import train as train_command
    from recsys.config import AUTOGRAD_ONLY, SETTINGS, Setting, unread
    from recsys.workflows.estimator import CONFIG_PARAMETERS, RatingRegressor

    fields = [field.name for field in dataclasses.fields(RunConfig)]
    assert list(SETTINGS) == fields and all(isinstance(setting, Setting) for setting in SETTINGS.values())
    args = train_command.parse_args([])
    estimator = RatingRegressor().get_params()
    for name, setting in SETTINGS.items():
        if setting.flag is None:  # set from the data: no flag, no parameter
            assert not setting.estimator, name
            continue
        # train.py has its flag, storing the field itself, and --resume keeps it.
        assert name in vars(args), name
        assert train_command.CONFIG_FLAGS[setting.flag] == name
        # RatingRegressor takes it as a parameter (`unknown` it has its own: mean or error, per row).
        assert (name in CONFIG_PARAMETERS or name == "model") == setting.estimator, name
        assert not setting.estimator or name in estimator, name
    assert AUTOGRAD_ONLY == ("batch_size", "wd", "optimizer", "sparse", "schedule")
    # What each of the compiled engine's fits does not read (`features`: what each model reads).
    assert unread("ratings") == ("alpha", "ordinal")
    assert unread("gibbs") == ("init_scale", "lr", "l2", "alpha", "ordinal")
    assert unread("fm") == ("init_scale", "lr", "l2", "alpha")
    assert unread("bpr") == ("unknown", "members", "y_range", "alpha", "ordinal")
    assert unread("als") == ("unknown", "members", "y_range", "lr", "ordinal")


@pytest.mark.parametrize(
    ("model", "settings", "message"),
    [
        ("dotbias", {"features": "side"}, "`features` has no effect on dotbias; leave it out"),
        ("bpmf", {"features": "implicit"}, "`features` has no effect on bpmf; leave it out"),
        ("ials", {"features": "side"}, "`features` has no effect on ials; leave it out"),
        ("bfm", {"engine": "autograd", "features": "side"}, "no effect on bfm on `engine` autograd"),
        ("svdpp", {"members": 2, "features": "side"}, "an ensemble's members read `features` implicit only"),
        ("svdpp", {"members": 2, "features": ""}, "an ensemble's members read `features` implicit only"),
        ("svdpp", {"features": "side,side"}, "each once without spaces"),
        ("bfm", {"features": " side"}, "each once without spaces"),
        ("bfm", {"features": "side,"}, "each once without spaces"),
        ("svdpp", {"features": "implicit,time"}, "`features` time: svdpp has no term for a rating's time"),
    ],
)
def test_features_are_refused_where_no_model_reads_them(model: str, settings: dict, message: str) -> None:
    with pytest.raises(RecsysError, match=re.escape(message)):
        config_for(model, **settings)


def test_svdpp_reads_features_on_either_engine_implicit_by_default() -> None:
    for engine in ENGINES:
        assert config_for("svdpp", engine=engine).features == "implicit"
        assert config_for("svdpp", engine=engine, features="side,implicit").features == "side,implicit"


def test_a_resumed_run_refuses_every_flag_that_would_change_a_setting(tmp_path: Path) -> None:
    from recsys.commands import train as train_command
    from recsys.config import SETTINGS

    config = config_for("dot", engine="autograd")
    changed = {"model": "dotbias", "dataset": "tiny", "split": "u2", "test_frac": "0.3", "test_n": "3",
               "unknown": "mean", "n_factors": "3", "members": "2", "y_range": ["1", "9"],
               "init_scale": "2", "epochs": "99", "lr": "0.5", "batch_size": "7", "l2": "0.7",
               "alpha": "3", "features": "side", "ordinal": None, "wd": "0.2",
               "optimizer": "sgd", "sparse": None, "schedule": "constant", "seed": "9", "device": "cuda",
               "engine": "compiled"}  # fmt: skip
    for name, setting in SETTINGS.items():
        if setting.flag is None or name == "dataset":  # the data: --resume reads the run's own
            continue
        value = changed[name]
        values = [] if value is None else [value] if isinstance(value, str) else value
        args = train_command.parse_args(["--resume", str(tmp_path), setting.flag, *values])
        with pytest.raises(RecsysError, match=f"^{re.escape(setting.flag)} "):
            train_command.check_resume_flags(args, config)


def test_runconfigs_own_defaults_are_each_models_tuned_ones() -> None:
    from recsys.models import model_names

    for model in model_names():
        assert RunConfig(model=model) == config_for(model), model
        for engine in ENGINES:
            try:
                expected = config_for(model, engine=engine)
            except RecsysError:  # a model without that engine
                continue
            assert RunConfig(model=model, engine=engine) == expected, (model, engine)
    assert RunConfig().engine == "compiled" and RunConfig().members == 2  # dotbias's compiled defaults
    assert RunConfig(model="dot", engine="autograd").lr == 0.0021  # dot's, not a shared default
    assert RunConfig(batch_size=256).engine == "autograd"  # a setting only the autograd engine reads
    config = RunConfig(model="svdpp", epochs=3)
    assert RunConfig.from_dict(config.to_dict()) == config and "TUNED" not in repr(config)
