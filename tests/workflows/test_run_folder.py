"""recsys.workflows.run_folder: one run at a time owns a folder, and a failed start leaves it as it was."""

import fcntl
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from recsys.config import config_for
from recsys.data.catalog import load_dataset
from recsys.errors import RecsysError
from recsys.names import CHECKPOINT_FILE, CONFIG_FILE, DATA_FILE, DESCRIPTION, METRICS_FILE
from recsys.train.checkpoints import load_checkpoint
from recsys.workflows.experiment import train_and_evaluate
from recsys.workflows.run_folder import LOCK_FILE, claim_run_folder, claim_unused_run_folder, occupied


def claim_error(path: Path, *, resume: bool) -> str:
    """The error claiming `path` raises; the block must not run."""
    with pytest.raises(RecsysError) as caught, claim_run_folder(path, resume=resume):
        pytest.fail(f"claimed {path}")
    return str(caught.value)


def test_fresh_claim_makes_the_folder_and_holds_it(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "new"
    with claim_run_folder(out, resume=False) as claimed:
        assert claimed == out and out.is_dir()
        assert [p.name for p in out.iterdir()] == [LOCK_FILE]
        for resume, flag in ((False, "`out`"), (True, "`resume`")):
            assert claim_error(out, resume=resume) == f"{flag} {out} is in use by another recsys run"
        (out / "config.json").write_text("{}")
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]  # the lock goes with the run


def test_a_fresh_run_takes_the_next_unused_name_beside_a_taken_one(tmp_path: Path) -> None:
    """Runs started in one second share a default folder name: each claims a folder of its own."""
    base = tmp_path / "dotbias-tiny-random-20261128-064550"
    with claim_run_folder(base, resume=False), claim_unused_run_folder(base) as second:  # held by a run
        assert second == tmp_path / f"{base.name}-2" and second.is_dir()
        (second / CONFIG_FILE).write_text("{}")
        with claim_unused_run_folder(base) as third:
            assert third == tmp_path / f"{base.name}-3"
    (base / CONFIG_FILE).write_text("{}")  # a run that has written its files, held or not
    with claim_unused_run_folder(base) as fourth:
        assert fourth == tmp_path / f"{base.name}-3"  # the one left empty is free again
    (tmp_path / "file").touch()
    with pytest.raises(RecsysError, match="is not a folder"), claim_unused_run_folder(tmp_path / "file"):
        pytest.fail("claimed a file")


def test_lock_is_released_when_the_block_ends(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with claim_run_folder(out, resume=False):
        (out / CHECKPOINT_FILE).write_bytes(b"")
    with claim_run_folder(out, resume=True):  # the next run may take it at once
        pass
    with pytest.raises(KeyError), claim_run_folder(out, resume=True):
        raise KeyError
    with claim_run_folder(out, resume=True):  # an error inside releases it too
        pass


def test_fresh_claim_takes_an_empty_folder(tmp_path: Path) -> None:
    with claim_run_folder(tmp_path, resume=False):
        assert [p.name for p in tmp_path.iterdir()] == [LOCK_FILE]


def test_fresh_claim_refuses_a_folder_with_files_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert claim_error(tmp_path, resume=False) == (
        f"`out` {tmp_path} already exists and is not an empty folder; choose a new one"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_refused_folder_keeps_a_config_and_data_file_of_its_own(tmp_path: Path) -> None:
    """A folder refused for holding files is not this run's: its config.json and data.json (another
    run's, killed before its first checkpoint, or the user's own) are not taken back with the claim."""
    for name in (CONFIG_FILE, DATA_FILE, "notes.txt"):
        (tmp_path / name).write_text("mine")
    assert "not an empty folder" in claim_error(tmp_path, resume=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([CONFIG_FILE, DATA_FILE, "notes.txt"])
    assert all((tmp_path / name).read_text() == "mine" for name in (CONFIG_FILE, DATA_FILE))


def test_claim_refuses_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    for resume, flag in ((False, "`out`"), (True, "`resume`")):
        assert claim_error(path, resume=resume) == f"{flag} {path} is not a folder"


def test_resume_claim_needs_a_checkpoint_and_makes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert claim_error(missing, resume=True) == f"`resume` {missing} is not a folder"
    assert not missing.exists()
    assert (
        claim_error(tmp_path, resume=True) == f"`resume` {tmp_path} has no {CHECKPOINT_FILE} to resume from"
    )
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"")
    with claim_run_folder(tmp_path, resume=True) as claimed:
        assert claimed == tmp_path


def test_a_run_killed_before_its_first_checkpoint_is_named_as_such(tmp_path: Path) -> None:
    """SIGKILL (or the OOM killer) in a run's first epochs leaves its description, its lock file and
    no checkpoint: both --out and --resume say so and what to do, rather than a bare refusal."""
    for name in (*DESCRIPTION, LOCK_FILE):
        (tmp_path / name).write_text("{}")
    why = (
        f": its run stopped before writing its first {CHECKPOINT_FILE} (killed?), so there is nothing to "
        "resume; delete the folder to start that run again"
    )
    resumed = f"`resume` {tmp_path} has no {CHECKPOINT_FILE} to resume from{why}"
    assert claim_error(tmp_path, resume=True) == resumed
    assert occupied(tmp_path, "--out") == f"--out {tmp_path} already exists{why}, or choose a new one"
    assert claim_error(tmp_path, resume=False) == f"`out` {tmp_path} already exists{why}, or choose a new one"
    assert set(DESCRIPTION) <= {entry.name for entry in tmp_path.iterdir()}  # refused: kept
    (tmp_path / LOCK_FILE).write_text("")
    with open(tmp_path / LOCK_FILE) as held:  # a live run's folder, before its first checkpoint
        fcntl.flock(held, fcntl.LOCK_EX)
        assert occupied(tmp_path, "--out") == f"--out {tmp_path} is in use by another recsys run"
    (tmp_path / "notes.txt").write_text("mine")  # a folder holding more than a run's files: no guess
    assert occupied(tmp_path, "--out").endswith("not an empty folder; choose a new one")


def test_failed_fresh_start_in_a_new_folder_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "new"
    with pytest.raises(RecsysError, match="no data"), claim_run_folder(out, resume=False):
        raise RecsysError("no data")
    assert not out.exists()


def test_failed_fresh_start_in_an_empty_folder_leaves_it_empty(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), claim_run_folder(tmp_path, resume=False):
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_failed_run_keeps_what_it_wrote_once_it_has_a_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "new"
    with pytest.raises(RuntimeError), claim_run_folder(out, resume=False):
        (out / CONFIG_FILE).write_text("{}")
        (out / CHECKPOINT_FILE).write_bytes(b"")
        raise RuntimeError
    assert sorted(p.name for p in out.iterdir()) == [CHECKPOINT_FILE, CONFIG_FILE]


def test_failed_run_without_a_checkpoint_takes_back_its_description(tmp_path: Path) -> None:
    """A run that diverged in its first epoch has nothing to resume: the folder is free again."""
    out = tmp_path / "new"
    with pytest.raises(RuntimeError), claim_run_folder(out, resume=False):
        for name in DESCRIPTION:
            (out / name).write_text("{}")
        raise RuntimeError
    assert not out.exists()
    with pytest.raises(RuntimeError), claim_run_folder(tmp_path, resume=False):  # a folder it did not make
        (tmp_path / CONFIG_FILE).write_text("{}")
        (tmp_path / "plot.png").write_bytes(b"")  # not one of the run's own files: left, with the folder
        raise RuntimeError
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_failed_resume_leaves_the_folder_as_it_was(tmp_path: Path) -> None:
    with claim_run_folder(tmp_path, resume=False):
        (tmp_path / CHECKPOINT_FILE).write_bytes(b"")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(RuntimeError), claim_run_folder(tmp_path, resume=True):
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_resuming_clears_what_a_killed_write_left_half_done(tmp_path: Path) -> None:
    with claim_run_folder(tmp_path, resume=False):
        (tmp_path / CHECKPOINT_FILE).write_bytes(b"whole")
    partial = tmp_path / f".{CHECKPOINT_FILE}.k3j2.tmp"  # atomic_write's name, never renamed
    partial.write_bytes(b"half")
    with claim_run_folder(tmp_path, resume=True):
        assert not partial.exists() and (tmp_path / CHECKPOINT_FILE).read_bytes() == b"whole"


# Claims `out` once `go` exists, holds it for a second, then writes a file named after itself.
CLAIMER = """
import pathlib, sys, time
from recsys.errors import RecsysError
from recsys.workflows.run_folder import claim_run_folder
out, go, name = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
(go.parent / f"ready-{name}").touch()
while not go.exists():
    time.sleep(0.001)
try:
    with claim_run_folder(out, resume=False):
        time.sleep(1)
        (out / name).write_text(name)
except RecsysError as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
"""


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_two_processes_claiming_one_folder_at_once(tmp_path: Path, round_: int) -> None:
    """Released together (each waits for a shared signal after its imports): exactly one wins."""
    out, go, names = tmp_path / "out", tmp_path / "go", ("first", "second")
    processes = {
        name: subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(out), str(go), name],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    }
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{name}").exists() for name in names):
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes.values())
        time.sleep(0.01)
    go.touch()
    errors = {name: process.communicate(timeout=120)[1] for name, process in processes.items()}
    results = {name: (process.returncode, errors[name]) for name, process in processes.items()}
    winners = [name for name, (code, _) in results.items() if code == 0]
    assert len(winners) == 1, results
    loser_code, loser_error = next(result for name, result in results.items() if name not in winners)
    assert loser_code == 2 and loser_error.strip() == f"error: `out` {out} is in use by another recsys run"
    assert sorted(p.name for p in out.iterdir()) == [winners[0]]


def test_a_library_run_never_writes_over_another_runs_folder(tmp_path: Path) -> None:
    """train_and_evaluate claims its run_dir as train.py claims --out: a second run into a finished
    run's folder is refused and the first run's files stay; the run's own checkpoint resumes there."""
    dataset = load_dataset("tiny")
    run = tmp_path / "run"
    train_and_evaluate(dataset, config_for("dotbias", dataset="tiny", epochs=2), run_dir=run, progress=False)
    saved = {path.name: path.read_bytes() for path in run.iterdir()}
    with pytest.raises(RecsysError, match=f"`run_dir` {run} already exists and is not an empty folder"):
        train_and_evaluate(dataset, config_for("dot", dataset="tiny", epochs=1), run_dir=run, progress=False)
    assert {path.name: path.read_bytes() for path in run.iterdir()} == saved
    checkpoint = load_checkpoint(run / CHECKPOINT_FILE)
    resumed = train_and_evaluate(dataset, checkpoint.config, run_dir=run, progress=False, resume=checkpoint)
    assert resumed.test["rmse"] == json.loads((run / METRICS_FILE).read_text())["test_rmse"]
