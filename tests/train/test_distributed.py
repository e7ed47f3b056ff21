"""recsys.train.distributed: a plain start is rank 0 alone, and data-parallel training under torchrun
(gloo, two CPU processes on 127.0.0.1) matches one process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, terminated_after_epoch
from torch import distributed as dist

from recsys.errors import RecsysError
from recsys.models import build_model
from recsys.train.device import Batches, DeviceTables
from recsys.train.distributed import (
    SHARE_ALIGNMENT,
    StepShares,
    average_gradients,
    distributed_rank,
    distributed_session,
)

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
# batch, which must weigh as such in the average. (The sparse case with even batches is this one's
# every batch but the last: not run on its own, as each case is three processes importing torch.)
@pytest.mark.slow
@pytest.mark.parametrize(
    "flags", [[], ["--sparse", "--bs", "457", "--epochs", "15"]], ids=["dense", "sparse-last-batch-of-one"]
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


@pytest.mark.slow
@pytest.mark.parametrize(
    ("checkpoint_every", "left"),
    [("3600", []), ("0", ["checkpoint.pt", "config.json", "data.json", "recommend.npz"])],
    ids=["before-the-first-checkpoint", "after-one"],
)
def test_sigterm_to_torchrun_leaves_nothing_or_a_folder_to_resume(
    checkpoint_every: str, left: list[str], tmp_path: Path
) -> None:
    """torchrun's agent passes a SIGTERM on to its workers. Under the default action rank 0 died with
    its fresh folder's config.json, data.json and lock file in it: nothing to resume, and the folder
    refused to a new run. Now the ranks stop as one process does."""
    out = tmp_path / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
                "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0"]  # fmt: skip
    args = ["scripts/train.py", "--dataset", "tiny", "--offline", "--epochs", "400", "--no-progress",
            "--checkpoint-every", checkpoint_every, "--out", str(out)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "RECSYS_DATA"}
    env |= {"RECSYS_CACHE": str(tmp_path / "cache"), "GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1"}
    _, errors = terminated_after_epoch([*torchrun, *args], 2, env=env | {"PYTHONUNBUFFERED": "1"})
    assert (sorted(path.name for path in out.iterdir()) if out.exists() else []) == left
    # Each rank ended by the handler. Unbuffered, a rank writes the word and its newline apart, so
    # the two ranks' lines may interleave ("terminatedterminated").
    assert errors.count("terminated") == 2, errors[-3000:]


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


@pytest.mark.slow
def test_two_ranks_on_the_device_engine_are_one_process_bit_for_bit(tmp_path: Path) -> None:
    """Each rank finds its share of a step's gradients and every rank applies the whole step's: on the
    CPU the very same model as one process (dotbias' default ensemble of two, tiny's one step an
    epoch)."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
                "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0"]  # fmt: skip
    args = ["scripts/train.py", "--dataset", "tiny", "--engine", "device", "--epochs", "3", "--no-progress"]
    distributed = run([*torchrun, *args], tmp_path / "ddp", tmp_path)
    single = run([sys.executable, *args], tmp_path / "single", tmp_path)
    assert distributed["test_rmse"] == single["test_rmse"]
    for ours, theirs in zip(distributed["history"], single["history"], strict=True):
        assert (ours["train_loss"], ours["valid_rmse"]) == (theirs["train_loss"], theirs["valid_rmse"])
        assert ours["ratings"] == theirs["ratings"]  # every rank applies every rating's update


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_the_ranks_shares_tile_a_step_each_from_an_aligned_place(world_size: int) -> None:
    for entries in (0, 1, 63, 64, 65, 200, 1001, 65_536):
        parts = [StepShares(rank, world_size).part(entries) for rank in range(world_size)]
        assert [place for part in parts for place in range(entries)[part]] == list(range(entries))
        assert all(part.start % SHARE_ALIGNMENT == 0 for part in parts if part.start < entries)


def _shared_steps_on_rank(rank: int, init_file: str, kernels: bool, found: "dict[str, bool]") -> None:
    """A model stepped by one process beside the same model stepped by this rank's share of each
    step (full of repeated rows, in uneven shares, one of them empty); each rank reports whether they
    agree."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        for name, y_range in (("dotbias", (0.0, 5.5)), ("dot", None)):
            models = [
                build_model(name, 30, 20, 33, y_range, torch.Generator().manual_seed(1), 30.0, 1)
                for _ in "ab"
            ]
            stepped = [
                DeviceTables(model.factorisation(), y_range, kernels=kernels, shares=shares)  # type: ignore[arg-type]
                for model, shares in zip(models, (None, StepShares(rank, 2)), strict=True)
            ]
            generator = torch.Generator().manual_seed(3)
            with torch.no_grad():
                for entries in (301, 50, 301):  # 50: rank 1's share is empty
                    users = torch.randint(0, 30, (entries,), generator=generator)
                    items = torch.randint(0, 20, (entries,), generator=generator)
                    values = torch.randint(1, 6, (entries,), generator=generator).float()
                    order = torch.arange(entries)
                    step = next(Batches.drawn(users, items, values, order, entries, (30, 20)).steps())
                    errors = [tables.step(step, 0.1, 0.05, 2.0) for tables in stepped]
            if kernels:  # the interpreter's atomic adds: the same up to float32's rounding
                same = torch.allclose(errors[0], errors[1], rtol=1e-5) and all(
                    torch.allclose(models[1].state_dict()[key], value, rtol=1e-5, atol=1e-6)
                    for key, value in models[0].state_dict().items()
                )
            else:
                same = bool(errors[0] == errors[1]) and all(
                    torch.equal(models[1].state_dict()[key], value)
                    for key, value in models[0].state_dict().items()
                )
            found[f"{rank}-{name}"] = same
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two spawned processes with torch
@pytest.mark.parametrize("kernels", [False, True], ids=["torch", "triton-interpreted"])
def test_shared_device_steps_are_one_processs_steps(
    kernels: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kernels:
        pytest.importorskip("triton", reason="needs Triton (a dev dependency) for its interpreter")
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # the spawned ranks import the kernels afresh
    found = torch.multiprocessing.Manager().dict()
    args = (str(tmp_path / "init"), kernels, found)
    torch.multiprocessing.spawn(_shared_steps_on_rank, args=args, nprocs=2)
    assert dict(found) == {f"{rank}-{name}": True for rank in (0, 1) for name in ("dotbias", "dot")}


def test_the_device_engine_refuses_to_share_svdpps_steps() -> None:
    model = build_model("svdpp", 4, 4, 2, (0.0, 5.5), torch.Generator().manual_seed(0), 1.0, 1)
    tables = model.factorisation()
    assert tables is not None
    with pytest.raises(RecsysError, match="under torchrun trains dot and dotbias, not svdpp"):
        DeviceTables(tables, (0.0, 5.5), torch.ones(4), shares=StepShares(0, 2))
