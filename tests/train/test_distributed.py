"""recsys.train.distributed: a plain start is rank 0 alone, and data-parallel training under torchrun
(gloo, two CPU processes on 127.0.0.1) matches one process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from torch import distributed as dist

from recsys.train.distributed import average_gradients, distributed_rank, distributed_session

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


# Dense gradients (AdamW), and sparse ones (LazyAdam), which the ranks average themselves. tiny's 3,200
# training ratings in batches of 457 leave a last batch of one rating: the second rank's slice of it is
# empty (its mean was 0 / 0, NaN, and the run stopped as diverged), and the first rank's is the whole
# batch, which must weigh as such in the average.
@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [[], ["--sparse"], ["--sparse", "--bs", "457", "--epochs", "15"]],
    ids=["dense", "sparse", "last-batch-of-one"],
)
def test_two_ranks_match_one_process(flags: list[str], tmp_path: Path) -> None:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
                "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0"]  # fmt: skip
    distributed = run([*torchrun, *ARGS, *flags], tmp_path / "ddp", tmp_path)
    single = run([sys.executable, *ARGS, *flags], tmp_path / "single", tmp_path)
    assert distributed["test_rmse"] == pytest.approx(single["test_rmse"], abs=TOLERANCE)
    assert distributed["n_train"] == single["n_train"]
    # The batch size the run took (lowered for at least 100 steps: 96 for --bs 256 over 3 epochs).
    batch_size = json.loads((tmp_path / "single" / "config.json").read_text())["batch_size"]
    sizes = batch_sizes(single["n_train"], batch_size)
    if "457" in flags:
        assert (batch_size, sizes[-1]) == (457, 1)
    # Rank 0 trained on its half of each batch, not on the whole batch (which gives the same weights).
    rank_share = sum(-(-size // 2) for size in sizes)
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


def _average_on_rank(rank: int, init_file: str, found: "dict[int, dict[str, torch.Tensor]]") -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        model = torch.nn.Sequential(torch.nn.Embedding(5, 2, sparse=True), torch.nn.Linear(2, 1))
        table, layer = model[0], model[1]
        rows = [torch.tensor([1, 3, 1]), torch.tensor([3])][rank]  # rank 0 meets row 1 twice
        table.weight.grad = torch.sparse_coo_tensor(
            rows[None], torch.full((len(rows), 2), rank + 1.0), (5, 2)
        )
        layer.weight.grad = torch.full((1, 2), 2.0 * rank)  # rank 1's bias has no gradient: None
        layer.bias.grad = torch.ones(1) if rank == 0 else None
        average_gradients(model, 2)
        found[rank] = {
            "table": table.weight.grad.to_dense(),
            "weight": layer.weight.grad.clone(),
            "bias": layer.bias.grad.clone(),
        }
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two spawned processes with torch
def test_average_gradients_gathers_each_ranks_rows(tmp_path: Path) -> None:
    found = torch.multiprocessing.Manager().dict()
    torch.multiprocessing.spawn(_average_on_rank, args=(str(tmp_path / "init"), found), nprocs=2)
    expected_table = torch.zeros(5, 2)
    expected_table[1] = 2 * 1.0 / 2  # rank 0's two rows of 1
    expected_table[3] = (1.0 + 2.0) / 2
    for rank in (0, 1):
        torch.testing.assert_close(found[rank]["table"], expected_table)
        torch.testing.assert_close(found[rank]["weight"], torch.ones(1, 2))
        torch.testing.assert_close(found[rank]["bias"], torch.full((1,), 0.5))
