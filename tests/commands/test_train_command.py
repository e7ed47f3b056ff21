"""recsys.commands.train: `recsys-train` (scripts/train.py) as a user runs it.

Most runs go through the command's `cli()` in this process (conftest.run_cli: the sys.argv,
environment and output a fresh `python scripts/train.py ...` would have), a fraction of a second
each rather than a 2 s torch import; a module fixture makes the runs of a group and the tests read
their results. Where the process itself is under test (what it imports before it answers, two
processes racing for one folder, a kill mid-run) scripts/train.py runs as a subprocess: those tests
are slow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from conftest import ROOT, Ran, cut_short, run_cli

from recsys.commands import train as train_command
from recsys.config import config_for
from recsys.data.catalog import load_dataset
from recsys.data.ratings_file import load_ratings
from recsys.errors import RecsysError
from recsys.evaluation.metrics import evaluate_test
from recsys.models import MODELS, DotProductBias, Ensemble, SampledModel, model_entry
from recsys.names import CONFIG_FILE, DATA_FILE
from recsys.train.checkpoints import load_checkpoint
from recsys.workflows.experiment import prepare

TRAIN = "scripts/train.py"
FLAGS = [
    "--model", "--dataset", "--data-dir", "--split", "--epochs", "--lr", "--wd", "--l2", "--bs",
    "--n-factors", "--seed", "--device", "--out",
]  # fmt: skip


@dataclass(frozen=True)
class Job:
    args: list[str]
    cache: Path  # RECSYS_CACHE for the run: an empty folder


@dataclass(frozen=True)
class Runs:
    """What run_jobs returned for a set of jobs, and the --out folder each job was given."""

    results: dict[str, Ran]
    outs: dict[str, Path]


def run_jobs(jobs: dict[str, Job]) -> dict[str, Ran]:
    """Run the command in this process for each job in turn."""
    return {name: run_cli(train_command.cli, "train.py", job.args, job.cache) for name, job in jobs.items()}


def run_scripts(jobs: dict[str, Job]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Start scripts/train.py for every job at once, from the repository root, without $RECSYS_DATA."""

    def run(job: Job) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "RECSYS_DATA"}
        env["RECSYS_CACHE"] = str(job.cache)
        return subprocess.run(
            [sys.executable, TRAIN, *job.args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(run, job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


def empty_folder(factory: pytest.TempPathFactory, name: str) -> Path:
    return factory.mktemp(name)


# --- runs that succeed ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    base = tmp_path_factory.mktemp("good")
    outs = {"main": base / "run", "offline": base / "offline", "logged": base / "logged"}
    jobs = {
        "main": Job(["--dataset", "tiny", "--epochs", "2", "--no-progress", "--out", str(outs["main"])],
                    empty_folder(tmp_path_factory, "cache")),
        "logged": Job(["--dataset", "tiny", "--epochs", "1", "--engine", "autograd",
                       "--out", str(outs["logged"])], empty_folder(tmp_path_factory, "cache")),
        "help": Job(["--help"], empty_folder(tmp_path_factory, "cache")),
        "offline": Job(["--offline", "--epochs", "1", "--no-progress", "--out", str(outs["offline"])],
                       empty_folder(tmp_path_factory, "cache")),
    }  # fmt: skip
    for name in MODELS:
        outs[name] = base / f"model-{name}"
        jobs[name] = Job(
            [
                "--dataset",
                "tiny",
                "--model",
                name,
                "--epochs",
                "1",
                "--no-progress",
                "--out",
                str(outs[name]),
            ],
            empty_folder(tmp_path_factory, "cache"),
        )
    return Runs(run_jobs(jobs), outs)


def ok(result: Ran) -> Ran:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


TEST_RMSE = re.compile(r"test RMSE (\d+\.\d{4})")
TEST_NDCG = re.compile(r"test NDCG@10 (\d+\.\d{4})  precision@10 (\d+\.\d{4})  recall@10 (\d+\.\d{4})")


def test_train_tiny_prints_the_epoch_table_and_test_rmse(good: Runs) -> None:
    result = ok(good.results["main"])
    lines = result.stdout.splitlines()
    header = [
        i
        for i, line in enumerate(lines)
        if re.fullmatch(r"\s*epoch\s+train_loss\s+test_rmse\s+seconds", line)
    ]
    assert len(header) == 1
    rows = lines[header[0] + 1 : header[0] + 3]
    assert [int(row.split()[0]) for row in rows] == [1, 2]
    assert all(re.fullmatch(r"\s+\d+(\s+\d+\.\d+){3}", row) for row in rows)
    assert len(TEST_RMSE.findall(result.stdout)) == 1
    assert "on tiny (4,000 ratings)" in result.stdout
    assert f"run folder: {good.outs['main']}" in result.stdout


def test_a_run_whose_stderr_is_no_terminal_draws_no_progress(good: Runs) -> None:
    """`train.py ... > log 2>&1`: the status lines and the epoch's bar were kept in the log, each
    redraw behind a carriage return; without a terminal there are none, as with --no-progress."""
    result = ok(good.results["logged"])
    assert "\r" not in result.stderr and "it/s" not in result.stderr
    assert "splitting" not in result.stderr and "test RMSE" in result.stdout


def test_train_tiny_writes_config_and_metrics(good: Runs) -> None:
    result = ok(good.results["main"])
    out = good.outs["main"]
    files = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert files == ["checkpoint.pt", "config.json", "data.json", "metrics.json", "recommend.npz"]
    config = json.loads((out / "config.json").read_text())
    assert config["model"] == "dotbias"
    assert config["dataset"] == "tiny"
    assert config["epochs"] == 2
    assert config["y_range"] == [0.0, 5.5]
    assert config["device"] == "cpu"
    metrics = json.loads((out / "metrics.json").read_text())
    assert [entry["epoch"] for entry in metrics["history"]] == [1, 2]
    printed = TEST_RMSE.search(result.stdout)
    assert printed is not None
    assert f"{metrics['test_rmse']:.4f}" == printed.group(1)
    assert metrics["n_train"] + metrics["n_test"] + metrics["n_test_unknown"] == 4000
    # The table shows the recorded history.
    rows = [line.split() for line in result.stdout.splitlines() if re.match(r"\s+[12]\s+\d", line)]
    for row, entry in zip(rows, metrics["history"], strict=True):
        assert row[1] == f"{entry['train_loss']:.4f}" and row[2] == f"{entry['valid_rmse']:.4f}"


def test_train_tiny_checkpoint_reproduces_the_test_rmse(good: Runs) -> None:
    ok(good.results["main"])
    out = good.outs["main"]
    metrics = json.loads((out / "metrics.json").read_text())
    checkpoint = load_checkpoint(out / "checkpoint.pt")
    # dotbias's compiled default: an ensemble of two, which the run's header says.
    assert isinstance(checkpoint.model, Ensemble) and checkpoint.config.members == 2
    assert "an ensemble of 2 models trained apart" in good.results["main"].stdout.splitlines()[0]
    for member in checkpoint.model.member_models():
        assert isinstance(member, DotProductBias)
        assert member.user_factors.num_embeddings == metrics["n_users"] == len(checkpoint.users)
        assert member.item_factors.num_embeddings == metrics["n_items"] == len(checkpoint.items)
    assert checkpoint.config.to_dict() == {
        **json.loads((out / "config.json").read_text()),
        "y_range": (0.0, 5.5),
    }
    assert checkpoint.metrics["test_rmse"] == metrics["test_rmse"]
    data, config = prepare(load_dataset("tiny"), checkpoint.config)
    assert config == checkpoint.config
    assert np.array_equal(data.users.raw_ids, checkpoint.users.raw_ids)
    assert evaluate_test(checkpoint.model, data, config.unknown)["rmse"] == pytest.approx(
        metrics["test_rmse"], rel=1e-6
    )


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_trains_from_the_cli(name: str, good: Runs) -> None:
    result = ok(good.results[name])
    # A ranking model's scores are no ratings: it reports its lists.
    assert (TEST_NDCG if model_entry(name).ranks else TEST_RMSE).search(result.stdout)
    config = json.loads((good.outs[name] / "config.json").read_text())
    assert (config["model"], config["epochs"]) == (name, 1)
    model = load_checkpoint(good.outs[name] / "checkpoint.pt").model
    members = model.member_models()
    assert {type(member) for member in members} == {MODELS[name]}
    if model_entry(name).sampled:  # its members are chains, whose kept draws one model pools
        (sampled,) = members
        kept = cast(type[SampledModel], MODELS[name]).kept_draws(config["epochs"], config["members"])
        assert cast(SampledModel, sampled).draws_side_by_side() == kept
        header = result.stdout.splitlines()[0]
        assert (f"{config['members']} chains of 1 sweep" in header) == (config["members"] > 1), header
    else:
        assert len(members) == config["members"]


def test_help_lists_every_flag(good: Runs) -> None:
    result = ok(good.results["help"])
    missing = [flag for flag in FLAGS if flag not in result.stdout]
    assert not missing
    assert all(name in result.stdout for name in MODELS)


def test_offline_without_data_falls_back_to_synthetic(good: Runs) -> None:
    result = ok(good.results["offline"])
    notes = result.stderr.strip().splitlines()
    assert len(notes) == 1, result.stderr
    assert "ml-100k is not available" in notes[0] and "synthetic" in notes[0]
    assert "on synthetic (100,000 ratings)" in result.stdout
    assert TEST_RMSE.search(result.stdout)
    config = json.loads((good.outs["offline"] / "config.json").read_text())
    assert config["dataset"] == "synthetic"


# --- bad input -----------------------------------------------------------------------------------

ARGPARSE = "argparse"
BAD_CASES = [
    pytest.param("model", ["--model", "nope"], ARGPARSE, id="model"),
    pytest.param("dataset", ["--dataset", "nope"], ARGPARSE, id="dataset"),
    pytest.param("epochs", ["--dataset", "tiny", "--epochs", "0"], "--epochs must be at least 1",
                 id="epochs"),
    pytest.param("bs", ["--dataset", "tiny", "--bs", "0"], "--bs must be at least 1", id="bs"),
    pytest.param("lr", ["--dataset", "tiny", "--lr", "-1"], "--lr must be positive", id="lr"),
    pytest.param("test-frac", ["--dataset", "tiny", "--test-frac", "1.5"], "--test-frac", id="test-frac"),
    pytest.param("offline", ["--dataset", "ml-100k", "--offline"], "--data-dir", id="offline"),
    pytest.param("fold", ["--split", "u1", "--dataset", "tiny"], "--split u1", id="fold-on-tiny"),
    # Asked for by name, a fold has no synthetic fallback: the line says what the command needs.
    pytest.param("fold-offline", ["--split", "u1", "--offline"],
                 "--split u1 takes ml-100k's predefined folds, and ml-100k is not available",
                 id="fold-offline"),
    pytest.param("data-dir", ["--data-dir", "/nonexistent", "--dataset", "ml-100k"], "/nonexistent",
                 id="data-dir"),
    pytest.param("out", ["--dataset", "tiny"], "not an empty folder", id="out-not-empty"),
    pytest.param("cuda", ["--dataset", "tiny", "--device", "cuda"], "CUDA", id="device-cuda",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")),
    pytest.param("out-file", ["--dataset", "tiny"], "--out", id="out-is-a-file"),
    pytest.param("device", ["--dataset", "tiny", "--device", "tpu"], "--device", id="device-unknown"),
    pytest.param("no-test", ["--dataset", "tiny", "--split", "user-last", "--test-n", "1000"],
                 "no test rating", id="split-without-test-ratings"),
    pytest.param("huge", ["--dataset", "tiny", "--n-factors", "1000000000000"], "GiB", id="n-factors-absurd"),
    pytest.param("checkpoint-every", ["--dataset", "tiny", "--checkpoint-every", "-1"],
                 "--checkpoint-every must be 0 or more", id="checkpoint-every-negative"),
    pytest.param("test-frac-unused", ["--dataset", "tiny", "--split", "user-last", "--test-frac", "7"],
                 "--test-frac must lie strictly between 0 and 1, got 7.0", id="test-frac-typed-but-unused"),
    # A split flag the split does not read would leave the user scored on another split than asked.
    pytest.param("test-frac-unread", ["--dataset", "tiny", "--split", "user-last", "--test-frac", "0.3"],
                 "--test-frac applies to --split random, user, time; this run's split is user-last",
                 id="test-frac-on-user-last"),
    pytest.param("test-n-unread", ["--dataset", "tiny", "--test-n", "3"],
                 "--test-n applies to --split user-last only; this run's split is random (the dataset's)",
                 id="test-n-on-the-default-split"),
    # Given as a flag, even at the autograd engine's default, it would be ignored: refused.
    pytest.param("compiled-bs", ["--dataset", "tiny", "--engine", "compiled", "--bs", "512"],
                 "--bs applies to --engine autograd only", id="compiled-engine-with-bs"),
    # A flag of a setting the run does not read, given at its base value, was taken and did nothing
    # (where any other value was refused).
    pytest.param("unread-at-base", ["--dataset", "tiny", "--alpha", "1"],
                 "--alpha has no effect on dotbias's compiled engine", id="unread-flag-at-its-base-value"),
    pytest.param("autograd-unread-at-base", ["--dataset", "tiny", "--engine", "autograd", "--alpha", "1"],
                 "--alpha applies to --engine compiled only", id="compiled-only-flag-on-autograd"),
    # Diverged at any step size; the advice had been to lower --lr, already 1e-9.
    pytest.param("y-range-far",
                 ["--dataset", "tiny", "--epochs", "1", "--lr", "1e-9", "--y-range", "0", "1e20"],
                 "narrow --y-range (now 0 to 1e+20", id="y-range-far-beyond-the-ratings"),
    # Finite, but beyond float32: training failed with an OverflowError's traceback.
    pytest.param("scale-huge", ["--ratings", "data/books/ratings.csv", "--rating-scale", "0,1e200"],
                 "--rating-scale 0,1e+200: beyond 3.4e+38, float32's largest",
                 id="rating-scale-beyond-float32"),
]  # fmt: skip
KEPT = b"an earlier run's file\n"


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    base = tmp_path_factory.mktemp("bad")
    outs: dict[str, Path] = {}
    jobs: dict[str, Job] = {}
    for case in BAD_CASES:
        key, args, _ = case.values
        out = base / key
        if key == "out":
            out.mkdir()
            (out / "keep.txt").write_bytes(KEPT)
        elif key == "out-file":
            out.write_bytes(KEPT)
        outs[key] = out
        jobs[key] = Job([*args, "--no-progress", "--out", str(out)], empty_folder(tmp_path_factory, "cache"))
    return Runs(run_jobs(jobs), outs)


@pytest.mark.parametrize(("key", "args", "expected"), BAD_CASES)
def test_bad_input_exits_2_with_a_one_line_error(key: str, args: list[str], expected: str, bad: Runs) -> None:
    result = bad.results[key]
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    if expected == ARGPARSE:  # argparse's own check, in the commands' one-line form
        assert "invalid choice: 'nope'" in lines[0] and lines[0].endswith("(train.py --help lists the flags)")
    else:
        assert expected in lines[0]
    assert "test RMSE" not in result.stdout
    assert "train_loss" not in result.stdout  # no epoch table's header left above the error
    out = bad.outs[key]
    if key == "out":
        assert [p.name for p in out.iterdir()] == ["keep.txt"]
        assert (out / "keep.txt").read_bytes() == KEPT
    elif key == "out-file":
        assert out.read_bytes() == KEPT
    elif key != "device":  # (where an unknown device is caught is the fix's choice)
        assert not out.exists()  # nothing is written for a run that cannot start


def test_train_into_an_unwritable_folder_exits_2(tmp_path: Path) -> None:
    result = run_cli(
        train_command.cli,
        "train.py",
        ["--dataset", "tiny", "--epochs", "1", "--no-progress", "--out", "/proc/recsys-run"],
        tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert (
        result.stderr.startswith("error: --out /proc/recsys-run: cannot create it")
        and "Traceback" not in result.stderr
    )


def _train_script() -> object:
    return train_command


def test_a_settings_file_that_names_no_members_takes_the_models_default(tmp_path: Path) -> None:
    path = tmp_path / "best.json"
    for settings, members in (({"lr": 0.05, "epochs": 3}, 2), ({"lr": 0.05, "members": 3}, 3)):
        path.write_text(json.dumps({"model": "dotbias", "engine": "compiled", **settings}))
        args = train_command.parse_args(["--config", str(path)])
        assert train_command.config_from_args(args, "tiny", "cpu").members == members
    args = train_command.parse_args(["--config", str(path), "--members", "2"])
    assert train_command.config_from_args(args, "tiny", "cpu").members == 2  # the flag wins


def test_a_settings_files_engine_auto_is_chosen_as_the_flags(tmp_path: Path) -> None:
    """`--engine auto` is a flag's value, so a file's "auto" leaves the engine to be chosen, not an
    unknown engine."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"engine": "auto", "lr": 0.05}))
    args = train_command.parse_args(["--config", str(path)])
    assert train_command.config_from_args(args, "tiny", "cpu").engine == "compiled"


def test_auto_engine_under_torchrun_is_the_device_engines_on_a_gpu_for_dot_products_else_autograd(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script: Any = _train_script()
    args = script.parse_args(["--model", "dotbias"])
    assert script.config_from_args(args, "tiny", "cpu").engine == "compiled"
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert script.config_from_args(args, "tiny", "cpu").engine == "autograd"
    for model, engine in (("dotbias", "device"), ("dot", "device"), ("svdpp", "autograd")):
        args = script.parse_args(["--model", model])
        assert script.config_from_args(args, "tiny", "cuda").engine == engine, model


def test_a_ranking_model_keeps_its_engine_under_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    """So that it is told to run without torchrun (recsys.train.interactions), not to leave out
    `engine` autograd, which it was never given: the auto engine once became autograd under
    torchrun for every model."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    for model in ("ials", "bpr"):
        args = train_command.parse_args(["--model", model])
        assert train_command.config_from_args(args, "tiny", "cpu").engine == "compiled"


@pytest.mark.parametrize(
    ("flags", "on_gpu"),
    [
        (["--model", "dotbias"], True),  # per-rating AdaGrad there is the device engine
        (["--model", "svdpp", "--engine", "device"], True),
        (["--model", "embproj"], True),  # autograd
        (["--model", "dotbias", "--engine", "compiled"], False),  # asked for numba on the CPU
        (["--model", "bpmf"], False),  # a sampler: the compiled engine only
        (["--model", "bpr"], False),
    ],
)
def test_a_run_given_no_device_goes_to_a_gpu_where_its_engine_runs_there(
    flags: list[str], on_gpu: bool
) -> None:
    script: Any = _train_script()
    args = script.parse_args(flags)
    assert script.runs_on_gpu(script.config_from_args(args, "tiny", "cpu"), args.engine) is on_gpu


@pytest.mark.slow
@pytest.mark.parametrize(
    "args", [["--help"], ["--threads", "0"], ["--lr", "-1"], ["--engine", "compiled", "--model", "linear"]]
)
def test_help_and_flag_errors_answer_before_torch_is_imported(args: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", TRAIN, *args], cwd=ROOT, capture_output=True, text=True
    )
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "recsys.config" in imported  # the import log was read
    assert not {"torch", "pandas", "numba"} & imported
    assert result.returncode == (0 if args == ["--help"] else 2)


def test_help_shows_each_models_real_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    script: Any = _train_script()
    with pytest.raises(SystemExit):
        script.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "None" not in text and "(default:" not in text
    compiled = "dot 19, dotbias 12, linear 10, embproj 10, svdpp 10, bpmf 38, bfm 64, bpr 200, ials 20"
    assert f"[default: {compiled}; with --engine autograd: dot 11, dotbias 9, svdpp 5, bpmf 5, bfm 5]" in text
    assert "dotbias 512, linear 512, embproj 512, svdpp 2048" in text  # the autograd batch sizes
    # bpmf's sampler reads no lr: only its autograd default is listed.
    assert (
        "dotbias 2, linear 1, embproj 1, svdpp 1, bpmf 4, bfm 8; with --engine autograd: dotbias 1, bpmf 1, "
        "bfm 1]" in text
    )
    assert (
        "svdpp 0.035, bpr 0.15; with --engine autograd: dot 0.0021, dotbias 0.0094, svdpp 0.02, bpmf 0.02, "
        "bfm 0.02]" in text
    )
    assert (
        "its count; for ratings, 1 + the rating less the relevance threshold, in five-star units); "
        "every other cell's is 1 [default: 3]" in text
    )


# --- resuming --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resumed(good: Runs, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """--resume on the finished main run: with flags that conflict, agree, or would extend it."""
    ok(good.results["main"])
    run_dir = str(good.outs["main"])
    cache = empty_folder(tmp_path_factory, "cache")
    jobs = {
        "model": Job(["--resume", run_dir, "--model", "dot"], cache),
        "epochs": Job(["--resume", run_dir, "--epochs", "5"], cache),
        "seed": Job(["--resume", run_dir, "--seed", "3"], cache),
        "same": Job(["--resume", run_dir, "--model", "dotbias", "--epochs", "2", "--threads", "1"], cache),
        "missing": Job(["--resume", str(tmp_path_factory.mktemp("empty"))], cache),
    }
    return Runs(run_jobs(jobs), {})


@pytest.mark.parametrize(
    ("flags", "expected"),
    [(["--lr", "0.1"], "--lr has no effect on bpmf's compiled engine, a Gibbs sampler"),
     (["--epochs", "9"], "its burn-in and kept draws are laid out over them")],
)  # fmt: skip
def test_resuming_a_sampler_names_what_it_has(flags: list[str], expected: str) -> None:
    # A sampler has no learning rate: the refusals had spoken of one.
    config = config_for("bpmf", dataset="tiny")
    args = train_command.parse_args(["--resume", "runs/any", *flags])
    with pytest.raises(RecsysError, match=re.escape(expected)):
        train_command.check_resume_flags(args, config)


@pytest.mark.parametrize(
    ("key", "expected"),
    [("model", "--model dot: --resume continues"), ("epochs", "planned for 2 epochs"),
     ("seed", "--seed 3"), ("missing", "has no checkpoint.pt to resume from")],
)  # fmt: skip
def test_resume_refuses_flags_that_would_change_the_run(key: str, expected: str, resumed: Runs) -> None:
    result = resumed.results[key]
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr


def test_resuming_a_finished_run_says_so_and_changes_nothing(good: Runs, resumed: Runs) -> None:
    out = good.outs["main"]
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir() if p.is_file()}
    result = ok(resumed.results["same"])
    assert "is finished (2 epochs, test RMSE" in result.stdout and "epoch" not in result.stdout.split(")")[-1]
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir() if p.is_file()} == before


def test_resuming_a_finished_run_whose_checkpoint_is_damaged_says_so(good: Runs, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(good.outs["main"], run)
    checkpoint = run / "checkpoint.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:-100])
    result = run_cli(train_command.cli, "train.py", ["--resume", str(run)], tmp_path / "cache")
    assert result.returncode == 2 and "is finished" not in result.stdout
    assert result.stderr.startswith(f"error: {checkpoint}: damaged checkpoint (truncated")
    assert result.stderr.count("\n") == 1


def test_a_folder_whose_run_was_killed_before_it_wrote_anything_is_free_again(tmp_path: Path) -> None:
    """SIGKILL or the OOM killer while a run loads its data leaves its folder holding only the lock
    file, hidden from `ls`: --out takes it as the empty folder it is, and --resume says what happened
    (it had been 'not an empty folder' and 'config.json: No such file or directory')."""
    from recsys.workflows.run_folder import LOCK_FILE

    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_FILE).touch()
    resumed = run_cli(train_command.cli, "train.py", ["--resume", str(out)], tmp_path / "cache")
    assert resumed.returncode == 2 and resumed.stderr == (
        f"error: --resume {out} has no checkpoint.pt to resume from: its run stopped before writing its "
        "first checkpoint.pt (killed?), so there is nothing to resume; delete the folder to start that "
        "run again\n"
    )
    args = ["--dataset", "tiny", "--epochs", "1", "--no-progress", "--out", str(out)]
    trained = run_cli(train_command.cli, "train.py", args, tmp_path / "cache")
    assert trained.returncode == 0, trained.stderr
    assert (out / "checkpoint.pt").is_file() and not (out / LOCK_FILE).exists()


@pytest.mark.parametrize("name", ["config.json", "data.json", "metrics.json"])
def test_a_run_file_linked_to_a_device_is_refused_or_written_anew(name: str, tmp_path: Path) -> None:
    """A run folder's config.json, data.json or metrics.json that is a link to /dev/zero had been
    read until memory ran out (the OOM killer ended the command): config.json and data.json are named
    as no files, and a metrics.json that cannot be read, as one that is missing, leaves the run to
    finish, which writes it anew."""
    out = tmp_path / "run"
    cut_short(load_dataset("tiny"), config_for("dotbias", dataset="tiny", epochs=3), out, 2)
    (out / name).unlink(missing_ok=True)
    (out / name).symlink_to("/dev/zero")
    result = run_cli(train_command.cli, "train.py", ["--resume", str(out), "--no-progress"], tmp_path / "c")
    if name == "metrics.json":
        assert result.returncode == 0, result.stderr
        assert json.loads((out / name).read_text())["history"]
    else:
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert str(out / name) in result.stderr and "not a regular file" in result.stderr


def test_runs_started_in_one_second_without_out_each_get_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: the default folder is named after the second its run started, and a second run
    started in it (a shell loop's, with `&`) stopped with "--out ... is in use by another recsys run"
    (or "already exists"), naming an --out it was never given."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(train_command.time, "strftime", lambda format: "20261128-064550")
    for _ in range(2):
        assert train_command.main(["--dataset", "tiny", "--epochs", "1", "--no-progress"]) == 0
    folders = [line for line in capsys.readouterr().out.splitlines() if line.startswith("run folder: ")]
    first = Path("runs") / "dotbias-tiny-random-20261128-064550"
    assert folders == [f"run folder: {first}", f"run folder: {first}-2"]
    assert (tmp_path / f"{first}-2" / "metrics.json").is_file()


@pytest.mark.slow
def test_two_runs_started_together_on_one_out_do_not_mix(tmp_path: Path) -> None:
    """Exactly one run gets the folder; the other exits 2 and its files are not in it."""
    for attempt in range(3):
        out = tmp_path / f"out{attempt}"
        jobs = {
            str(seed): Job(["--dataset", "tiny", "--epochs", "1", "--seed", str(seed), "--no-progress",
                            "--out", str(out)], tmp_path / "cache")
            for seed in (1, 2)
        }  # fmt: skip
        results = run_scripts(jobs)
        winners = [seed for seed, result in results.items() if result.returncode == 0]
        assert len(winners) == 1, {seed: r.stderr for seed, r in results.items()}
        loser = results[next(seed for seed in results if seed not in winners)]
        assert loser.returncode == 2 and loser.stderr.startswith(f"error: --out {out}"), loser.stderr
        assert json.loads((out / "config.json").read_text())["seed"] == int(winners[0])
        assert load_checkpoint(out / "checkpoint.pt").config.seed == int(winners[0])


# Only against a hang: a run of this test takes seconds, or a minute or two on a loaded machine.
HANG_SECONDS = 1800


@pytest.mark.slow
def test_killed_run_leaves_a_loadable_checkpoint_and_resumes(tmp_path: Path) -> None:
    """SIGKILL a run once it has written a checkpoint; --resume then finishes it as planned."""
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "RECSYS_DATA"} | {
        "RECSYS_CACHE": str(tmp_path / "cache")
    }
    # One thread: two of torch's threads spin at every barrier while other processes hold the cores.
    command = [sys.executable, TRAIN, "--dataset", "tiny", "--bs", "64", "--epochs", "150",
               "--no-progress", "--threads", "1", "--checkpoint-every", "0"]  # fmt: skip
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        process = subprocess.Popen([*command, "--out", str(run_dir)], cwd=ROOT, env=env,
                                   stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
    try:
        # On a busy machine the start (imports, the first epoch) takes what it takes: the wait ends
        # when the checkpoint appears or the run ends without one; HANG_SECONDS only stops a hung run.
        started = time.monotonic()
        while not (run_dir / "checkpoint.pt").exists():
            assert process.poll() is None, f"the run ended before its first checkpoint: {log.read_text()}"
            assert time.monotonic() - started < HANG_SECONDS, "no checkpoint yet: the run hangs"
            time.sleep(0.05)
        time.sleep(0.3)  # mid-run, most likely mid-write of a later epoch's checkpoint
        assert process.poll() is None, "the run finished before it could be killed"
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")  # the last complete write, never a torn one
    done = checkpoint.metrics["epoch"]  # a mid-run checkpoint's metrics: {"epoch": epochs done}
    assert 1 <= done < 150
    resumed = subprocess.run([*command[:2], "--resume", str(run_dir), "--no-progress", "--threads", "1"],
                             cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=HANG_SECONDS)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert len(metrics["history"]) == 150


def test_a_runs_own_settings_train_again_through_config(tmp_path: Path) -> None:
    """A compiled run's config.json holds the autograd-only fields at their defaults: as settings
    (without the data and device, which have flags of their own) they are no error."""
    first = tmp_path / "first"
    args = ["--dataset", "tiny", "--epochs", "2", "--no-progress"]
    ok(run_cli(train_command.cli, "train.py", [*args, "--out", str(first)], tmp_path / "cache"))
    settings = json.loads((first / "config.json").read_text())
    assert settings["engine"] == "compiled" and "batch_size" in settings
    del settings["dataset"], settings["device"]
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    again = ["--dataset", "tiny", "--no-progress", "--config", str(tmp_path / "settings.json")]
    ok(run_cli(train_command.cli, "train.py", [*again, "--out", str(tmp_path / "again")], tmp_path / "cache"))
    assert (
        json.loads((tmp_path / "again" / "metrics.json").read_text())["test_rmse"]
        == json.loads((first / "metrics.json").read_text())["test_rmse"]
    )


def test_the_split_defaults_to_the_datasets_own() -> None:
    args = train_command.parse_args([])
    assert train_command.config_from_args(args, "ml-100k", "cpu", "u1").split == "u1"
    assert train_command.config_from_args(args, "books", "cpu", "random").split == "random"
    chosen = train_command.parse_args(["--split", "time"])
    assert train_command.config_from_args(chosen, "ml-100k", "cpu", "u1").split == "time"


def test_a_config_files_split_wins_over_the_datasets(tmp_path: Path) -> None:
    settings = tmp_path / "best.json"
    settings.write_text(json.dumps({"split": "user"}))
    args = train_command.parse_args(["--config", str(settings)])
    assert train_command.config_from_args(args, "ml-100k", "cpu", "u1").split == "user"


@pytest.mark.parametrize(
    ("local_rank", "given", "expected"),
    [(None, None, None), ("0", None, None), ("1", None, "numba-rank-1"), ("1", "/mine", "/mine")],
)
def test_under_torchrun_each_later_rank_has_a_numba_cache_of_its_own(
    local_rank: str | None,
    given: str | None,
    expected: str | None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from recsys.commands.train import own_numba_cache

    monkeypatch.setenv("RECSYS_CACHE", str(tmp_path))
    for name, value in (("LOCAL_RANK", local_rank), ("NUMBA_CACHE_DIR", given)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    own_numba_cache()
    found = os.environ.get("NUMBA_CACHE_DIR")
    if expected is None:
        assert found is None
    elif expected.startswith("/"):
        assert found == expected  # the user's own setting stands
    else:
        assert found == str(tmp_path / expected)


def test_resume_refuses_a_config_file_edited_away_from_its_checkpoint(tmp_path: Path) -> None:
    """The flags are checked against config.json; the run trains with its checkpoint's settings."""
    out = tmp_path / "run"
    cut_short(load_dataset("tiny"), config_for("dotbias", dataset="tiny", epochs=4), out, 2)
    written = json.loads((out / CONFIG_FILE).read_text())
    (out / CONFIG_FILE).write_text(json.dumps({**written, "epochs": 8}))
    ran = run_cli(train_command.cli, "train.py", ["--resume", str(out), "--epochs", "8"], tmp_path / "c")
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    assert "its config.json says epochs 8 against 4 in its checkpoint" in ran.stderr
    assert json.loads((out / CONFIG_FILE).read_text())["epochs"] == 8  # nothing written over it


def test_a_run_whose_files_moved_resumes_from_where_the_flags_say_and_records_it(tmp_path: Path) -> None:
    """A moved ratings file had to be written into data.json by hand; --ratings and --items on
    --resume say where the files are now, read as the run read them, and other data is still refused."""
    rows = [f"u{u};i{i};{1 + (u * 7 + i) % 5}" for u in range(30) for i in range(0, 40, 3)]
    ratings, items = tmp_path / "own.csv", tmp_path / "titles.csv"
    ratings.write_text("user;item;rating\n" + "\n".join(rows) + "\n")
    items.write_text("item,title\n" + "\n".join(f"i{i},Film {i}" for i in range(0, 40, 3)) + "\n")
    dataset = load_ratings(ratings, sep=";", items=items)
    out = tmp_path / "run"
    cut_short(dataset, config_for("dotbias", dataset=dataset.name, epochs=4, split="random"), out, 2)
    moved = tmp_path / "moved"
    moved.mkdir()
    ratings, items = ratings.rename(moved / "renamed.csv"), items.rename(moved / "titles.csv")
    record = json.loads((out / DATA_FILE).read_text())

    def resume(*flags: str) -> Ran:
        return run_cli(train_command.cli, "train.py", ["--resume", str(out), *flags], tmp_path / "c")

    gone = resume()
    assert gone.returncode == 2 and "resume the run with --ratings at its new place" in gone.stderr
    edited = moved / "edited.csv"
    edited.write_text(ratings.read_text().replace("u0;i0;1", "u0;i0;5"))
    for flags, message in (
        (["--ratings", str(edited), "--items", str(items)], "differ from those the run was trained on"),
        (["--ratings", str(ratings), "--sep", ";"], "--sep: --resume reads the run's own data as it read it"),
        (["--ratings", str(ratings), "--user-features", str(items)], "the run read no user features file,"),
    ):
        refused = resume(*flags, "--no-progress")
        assert refused.returncode == 2 and message in refused.stderr and "Traceback" not in refused.stderr
        assert json.loads((out / DATA_FILE).read_text()) == record  # nothing written over it
    ran = resume("--ratings", str(ratings), "--items", str(items), "--no-progress")
    assert ran.returncode == 0, ran.stderr
    assert json.loads((out / DATA_FILE).read_text()) == {
        **record,
        "ratings": str(ratings.resolve()),
        "items": str(items.resolve()),
    }
    back = ratings.rename(tmp_path / "back.csv")
    folder = resume("--data-dir", str(moved))
    assert folder.returncode == 2 and f"--data-dir {moved}: the run read the ratings file" in folder.stderr
    # A finished run only checks and records them: a new user's cold start may read its data again.
    other = resume("--ratings", str(edited))
    assert other.returncode == 2 and "differ from those the run was trained on" in other.stderr
    assert json.loads((out / DATA_FILE).read_text())["ratings"] == str(ratings.resolve())
    with pytest.MonkeyPatch.context() as patch:  # under torchrun a rank but the first leaves it to rank 0
        patch.setenv("RANK", "1")
        second = resume("--ratings", str(back))
    assert second.returncode == 0 and second.stdout == "", second.stdout
    assert json.loads((out / DATA_FILE).read_text())["ratings"] == str(ratings.resolve())
    finished = resume("--ratings", str(back))
    assert finished.returncode == 0, finished.stderr
    assert "the new places of its files recorded in its data.json" in finished.stdout
    assert json.loads((out / DATA_FILE).read_text())["ratings"] == str(back)
    assert resume().stdout.endswith("nothing to resume, nothing changed\n")


def test_resume_onto_an_edited_ratings_file_names_the_file(tmp_path: Path) -> None:
    rows = [f"u{u},i{i},{1 + (u * 7 + i) % 5}" for u in range(30) for i in range(0, 40, 3)]
    ratings = tmp_path / "own.csv"
    ratings.write_text("user,item,rating\n" + "\n".join(rows) + "\n")
    dataset = load_ratings(ratings)
    out = tmp_path / "run"
    cut_short(dataset, config_for("dotbias", dataset=dataset.name, epochs=4, split="random"), out, 2)
    ratings.write_text(ratings.read_text().replace("u0,i0,1", "u0,i0,5"))
    ran = run_cli(train_command.cli, "train.py", ["--resume", str(out)], tmp_path / "c")
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    message = f"cannot resume: the ratings of {ratings.resolve()} differ from those the run was trained on"
    assert message in ran.stderr
