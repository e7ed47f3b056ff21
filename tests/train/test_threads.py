"""recsys.train.threads: torch's threads set for a block of work and the caller's given back after;
tasks side by side on threads, and the strata of a grid on them, stopped by an interruption."""

from __future__ import annotations

import _thread
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from recsys.train.compiled import run_strata
from recsys.train.threads import side_by_side, torch_threads


class ProcessSetting:
    """torch's thread count as one value for the whole process, as two fits in a notebook's threads
    saw it (the second read the first's one thread as the caller's), without OpenMP's per-thread
    copies, which decide what each thread reads by when it first ran a torch op."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def set(self, threads: int) -> None:
        self.threads = threads

    def get(self) -> int:
        return self.threads


@pytest.fixture
def setting(monkeypatch: pytest.MonkeyPatch) -> ProcessSetting:
    """The caller's torch threads: two, one more than the blocks below ask for."""
    setting = ProcessSetting(2)
    monkeypatch.setattr(torch, "set_num_threads", setting.set)
    monkeypatch.setattr(torch, "get_num_threads", setting.get)
    return setting


def test_nested_blocks_give_back_the_outer_setting_then_the_callers(setting: ProcessSetting) -> None:
    with torch_threads(3):
        with torch_threads(1):
            assert setting.threads == 1
        assert setting.threads == 3
    assert setting.threads == 2


def test_blocks_in_two_threads_give_back_the_callers_threads_whichever_closes_first(
    setting: ProcessSetting,
) -> None:
    """A first run's block opens, a second's opens in another thread, the first closes and then the
    second: the caller's two threads come back, not the one the second found set."""
    first_open, second_open, first_closed = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def first() -> None:
        with torch_threads(1):
            first_open.set()
            second_open.wait(10)
        first_closed.set()

    def second() -> None:
        first_open.wait(10)
        with torch_threads(1):
            second_open.set()
            first_closed.wait(10)
            seen["after the first closed"] = setting.threads

    runs = [threading.Thread(target=first), threading.Thread(target=second)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert seen == {"after the first closed": 1}  # the second's block still holds its setting
    assert setting.threads == 2


def _until_threads_end(before: set[threading.Thread]) -> None:
    """Wait (at most 30 s) until the threads started since `before` were alive have ended (tqdm's
    monitor, which a status line may start, aside)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
        thread not in before and thread.name != "tqdm_monitor" for thread in threading.enumerate()
    ):
        time.sleep(0.01)


def test_tasks_give_their_results_in_order_and_an_error_raises() -> None:
    assert side_by_side([lambda: 1, lambda: 2, lambda: 3]) == [1, 2, 3]

    def fails() -> int:
        raise ValueError("task 2")

    with pytest.raises(ValueError, match="task 2"):
        side_by_side([lambda: 1, fails])


def test_an_interruption_returns_at_once_and_asks_the_tasks_to_stop() -> None:
    """A ThreadPoolExecutor waited for its workers after a Ctrl-C, and an interruption that landed
    inside one of its locks left them waiting on it: the command hung. Now nothing is waited for."""
    release, stopped = threading.Event(), threading.Event()

    def interrupts() -> None:
        _thread.interrupt_main()  # Ctrl-C, as the main thread sees it
        release.wait(30)

    before = set(threading.enumerate())
    with pytest.raises(KeyboardInterrupt):
        side_by_side([interrupts, lambda: release.wait(30)], stop=stopped.set)
    assert stopped.is_set() and not release.is_set()  # returned with both tasks still running
    release.set()
    _until_threads_end(before)


def test_interrupted_strata_take_no_more_blocks() -> None:
    """Stopped, the threads finish the blocks they hold and take no others: an interrupted epoch in a
    notebook kept training the model behind the caller's back."""
    grid, release, trained = 3, threading.Event(), []
    strata = [[g * grid + (g + s) % grid for g in range(grid)] for s in range(grid)]

    def train(blocks: list[int]) -> None:
        trained.extend(blocks)
        if len(trained) == 1:
            _thread.interrupt_main()
            release.wait(30)

    before = set(threading.enumerate())
    with pytest.raises(KeyboardInterrupt):
        run_strata(strata, grid, 2, train)
    release.set()
    _until_threads_end(before)
    assert 1 <= len(trained) < grid * grid


FORKED_AFTER_OPENMP = """
import multiprocessing, sys
from recsys import config_for, load_dataset, train_and_evaluate

def run(queue):
    try:
        train_and_evaluate(tiny, config_for("ials", dataset="tiny", epochs=1), progress=False)
        queue.put("trained")
    except Exception as error:
        queue.put(f"{type(error).__name__}: {error}")

if __name__ == "__main__":
    tiny = load_dataset("tiny")
    train_and_evaluate(tiny, config_for("ials", dataset="tiny", epochs=1), progress=False)
    fork = multiprocessing.get_context("fork")
    queue = fork.Queue()
    child = fork.Process(target=run, args=(queue,))
    child.start()
    child.join(60)
    print(child.exitcode, queue.get(timeout=1) if not queue.empty() else "nothing")
"""


@pytest.mark.slow
def test_a_forked_child_of_a_parent_that_ran_numbas_openmp_threads_gets_an_error_not_sigterm(
    tmp_path: Path,
) -> None:
    """numba's first parallel loop in such a child killed it with SIGTERM (-15), which leaves a
    multiprocessing.Pool waiting forever; the child's run now raises a RecsysError saying what to do."""
    script = tmp_path / "forked.py"
    script.write_text(FORKED_AFTER_OPENMP)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    exitcode, _, message = done.stdout.strip().partition(" ")
    assert exitcode == "0", done.stdout
    assert message.startswith("RecsysError: this process was forked"), message
    assert "multiprocessing.get_context('spawn')" in message


def test_a_child_forked_while_another_thread_set_torchs_threads_can_set_them() -> None:
    """The parent's lock, held by another thread at the fork, is held for ever in the child."""
    import os

    from recsys.train import threads

    with threads._TORCH_THREADS._lock:  # as another thread's block would hold it
        child = os.fork()
        if child == 0:
            with torch_threads(1):
                pass
            os._exit(0)
    deadline = time.monotonic() + 30
    while (ended := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if ended[0] == 0:  # stuck on the lock
        os.kill(child, 9)
        os.waitpid(child, 0)
    assert ended[0] == child and os.waitstatus_to_exitcode(ended[1]) == 0


def test_an_interrupted_ensemble_epoch_stops_its_members(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ensemble's members train side by side on threads of their own, which a Ctrl-C in a notebook
    does not reach: they trained the rest of their epoch behind the caller's back."""
    from recsys.config import config_for
    from recsys.data.catalog import load_dataset
    from recsys.data.encoding import RatingTensors
    from recsys.models import build_model
    from recsys.train import compiled
    from recsys.train.trainer import fit

    monkeypatch.setattr(compiled, "grid_size", lambda n_ratings: 3)  # 3 strata of 3 blocks an epoch
    kernel, release, blocks, running = compiled._train_blocks, threading.Event(), [], set()
    both_running = threading.Barrier(2, action=_thread.interrupt_main)  # then Ctrl-C, as main sees it

    def train_blocks(*args: Any) -> None:
        blocks.extend(args[4])
        if threading.current_thread() not in running:  # a member's first call
            running.add(threading.current_thread())
            both_running.wait(30)
            release.wait(30)
        kernel(*args)

    monkeypatch.setattr(compiled, "_train_blocks", train_blocks)
    ratings = load_dataset("tiny").ratings
    x = torch.tensor(ratings[["user", "item"]].to_numpy() - 1, dtype=torch.int64)
    train = RatingTensors(x, torch.tensor(ratings["rating"].to_numpy(), dtype=torch.float32))
    nothing = RatingTensors(x[:0], train.y[:0])
    config = config_for("dotbias", members=2, epochs=1)
    model = build_model("dotbias", 120, 200, config.n_factors, config.y_range, torch.Generator(), members=2)
    before = set(threading.enumerate())
    with pytest.raises(KeyboardInterrupt):
        fit(model, train, nothing, config, torch.Generator(), threads=2, progress=False)
    release.set()
    _until_threads_end(before)
    assert len(blocks) < 2 * 3 * 3  # without the stop, each member's three strata of three blocks


def test_an_ensemble_trains_no_more_members_at_once_than_its_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`threads` 2 and 3 members: two members at a time, the third once one has finished. Each member
    had a thread of its own, three threads where two were asked for."""
    from recsys.config import config_for
    from recsys.data.catalog import load_dataset
    from recsys.data.encoding import RatingTensors
    from recsys.models import build_model
    from recsys.train import compiled
    from recsys.train.trainer import fit

    train_epoch, lock, running, most = compiled.CompiledEpochs.train_epoch, threading.Lock(), [0], [0]
    all_three = threading.Event()

    def counted(self: compiled.CompiledEpochs, lr: float, order: list[list[int]]) -> float:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            if running[0] == 3:
                all_three.set()
        all_three.wait(0.5)  # long enough for a third member to start, were it let
        try:
            return train_epoch(self, lr, order)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(compiled.CompiledEpochs, "train_epoch", counted)
    ratings = load_dataset("tiny").ratings
    x = torch.tensor(ratings[["user", "item"]].to_numpy() - 1, dtype=torch.int64)
    train = RatingTensors(x, torch.tensor(ratings["rating"].to_numpy(), dtype=torch.float32))
    config = config_for("dotbias", members=3, epochs=1)
    model = build_model("dotbias", 120, 200, config.n_factors, config.y_range, torch.Generator(), members=3)
    fit(model, train, RatingTensors(x[:0], train.y[:0]), config, torch.Generator(), threads=2, progress=False)
    assert most[0] == 2
