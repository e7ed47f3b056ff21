"""Checkpoints carry the training state: an interrupted run resumes and ends bit-identical."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from recsys.config import config_for
from recsys.data.dataset import RatingsDataset
from recsys.errors import RecsysError
from recsys.train.checkpoints import load_checkpoint
from recsys.train.trainer import EpochStats
from recsys.workflows.experiment import train_and_evaluate

ROOT = Path(__file__).resolve().parent.parent


class Interrupted(Exception):
    """Stands in for a crash after an epoch's checkpoint was written."""


def stop_after(epoch: int) -> Callable[[EpochStats], None]:
    def on_epoch(stats: EpochStats) -> None:
        if stats.epoch == epoch:
            raise Interrupted

    return on_epoch


CONFIGS = {
    "adamw": config_for("dotbias", dataset="tiny", epochs=5, batch_size=256),
    "lazy-adam": config_for("dotbias", dataset="tiny", epochs=5, batch_size=256, sparse=True),
    "compiled": config_for("dotbias", engine="compiled", dataset="tiny", epochs=5),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_resumed_run_is_bit_identical(tiny: RatingsDataset, tmp_path: Path, name: str) -> None:
    config = CONFIGS[name]
    whole = train_and_evaluate(tiny, config, run_dir=tmp_path / "whole", progress=False)
    with pytest.raises(Interrupted):
        train_and_evaluate(tiny, config, run_dir=tmp_path / "cut", progress=False, on_epoch=stop_after(2))
    checkpoint = load_checkpoint(tmp_path / "cut" / "checkpoint.pt")
    assert checkpoint.metrics == {"epoch": 2}
    resumed = train_and_evaluate(tiny, config, run_dir=tmp_path / "cut", progress=False, resume=checkpoint)
    assert resumed.test["rmse"] == whole.test["rmse"]
    assert [h.train_loss for h in resumed.history] == [h.train_loss for h in whole.history]
    for name, tensor in whole.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name


def test_resume_refuses_other_data(tiny: RatingsDataset, tmp_path: Path) -> None:
    config = config_for("dotbias", dataset="tiny", epochs=2, batch_size=256)
    train_and_evaluate(tiny, config, run_dir=tmp_path / "run", progress=False)
    checkpoint = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    other = dataclasses.replace(
        tiny, ratings=tiny.ratings[tiny.ratings["user"] != tiny.ratings["user"].iloc[0]]
    )
    with pytest.raises(RecsysError, match="cannot resume"):
        train_and_evaluate(other, config, progress=False, resume=checkpoint)


def test_killed_run_leaves_a_loadable_checkpoint_and_resumes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "RECSYS_DATA"} | {
        "RECSYS_CACHE": str(tmp_path / "cache")
    }
    # One thread: two of torch's threads spin at every barrier while other processes hold the cores.
    command = [sys.executable, "scripts/train.py", "--dataset", "tiny", "--bs", "64", "--epochs", "150",
               "--no-progress", "--threads", "1"]  # fmt: skip
    process = subprocess.Popen([*command, "--out", str(run_dir)], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while not (run_dir / "checkpoint.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # mid-run, most likely mid-write of a later epoch's checkpoint
    process.send_signal(signal.SIGKILL)
    process.wait()
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")  # the last complete write, never a torn one
    done = checkpoint.metrics.get("epoch", 150)
    resumed = subprocess.run([*command[:2], "--resume", str(run_dir), "--no-progress", "--threads", "1"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert len(metrics["history"]) == 150
    assert done <= 150
