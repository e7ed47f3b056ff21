"""recsys.train.distributed: a plain start is rank 0 alone, and data-parallel training under torchrun
(gloo, two CPU processes on 127.0.0.1) matches one process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from torch import distributed as dist

from recsys.train.distributed import distributed_rank, distributed_session

ARGS = ["scripts/train.py", "--dataset", "tiny", "--bs", "256", "--epochs", "3", "--no-progress"]
# Summation order differs (each rank averages its half, then the halves are averaged), nothing else.
TOLERANCE = 1e-4


def run(command: list[str], out: Path, tmp_path: Path) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "RECSYS_DATA"}
    env |= {"RECSYS_CACHE": str(tmp_path / "cache"), "GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1"}
    result = subprocess.run([*command, "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    # The ranks' own errors come first, torchrun's summary of them last.
    assert result.returncode == 0, result.stderr[:3000] + "\n...\n" + result.stderr[-1500:]
    return json.loads((out / "metrics.json").read_text())


def batch_sizes(n: int, batch_size: int) -> list[int]:
    return [min(batch_size, n - start) for start in range(0, n, batch_size)]


# Dense gradients (AdamW), and sparse ones (LazyAdam), which gloo all-reduces as sparse tensors.
@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--sparse"]], ids=["dense", "sparse"])
def test_two_ranks_match_one_process(flags: list[str], tmp_path: Path) -> None:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
                "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0"]  # fmt: skip
    distributed = run([*torchrun, *ARGS, *flags], tmp_path / "ddp", tmp_path)
    single = run([sys.executable, *ARGS, *flags], tmp_path / "single", tmp_path)
    assert distributed["test_rmse"] == pytest.approx(single["test_rmse"], abs=TOLERANCE)
    assert distributed["n_train"] == single["n_train"]
    # Rank 0 trained on its half of each batch, not on the whole batch (which gives the same weights).
    rank_share = sum(-(-size // 2) for size in batch_sizes(single["n_train"], 256))
    for ours, theirs in zip(distributed["history"], single["history"], strict=True):
        assert ours["train_loss"] == pytest.approx(theirs["train_loss"], abs=TOLERANCE)
        assert theirs["ratings"] == single["n_train"]
        assert ours["ratings"] == rank_share


@pytest.mark.parametrize("world_size", [None, "1"])
def test_a_plain_start_is_rank_0_alone_without_a_process_group(
    world_size: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if world_size is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", world_size)
    assert distributed_rank() == (0, 1)
    with distributed_session("cpu") as (rank, device):
        assert (rank, device) == (0, "cpu")
        assert not dist.is_initialized()
    assert distributed_rank() == (0, 1)
