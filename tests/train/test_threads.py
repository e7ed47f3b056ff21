"""Tasks side by side on threads, and the strata of a grid on them, stopped by an interruption."""

import _thread
import threading
import time

import pytest

from recsys.train.compiled import run_strata
from recsys.train.threads import side_by_side


def _until_threads_end(before: int) -> None:
    """Wait (at most 30 s) until the threads started since `before` threads were alive have ended."""
    deadline = time.monotonic() + 30
    while threading.active_count() > before and time.monotonic() < deadline:
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

    before = threading.active_count()
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

    before = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        run_strata(strata, grid, 2, train)
    release.set()
    _until_threads_end(before)
    assert 1 <= len(trained) < grid * grid
