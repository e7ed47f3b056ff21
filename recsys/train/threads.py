"""Threads: torch's own intra-op threads, set for a block of work and restored after; numba's for an
engine's run; and tasks run side by side on threads of their own."""

import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import torch

from recsys.errors import RecsysError
from recsys.process_settings import ProcessSetting

T = TypeVar("T")

# torch's thread count is the process's, not a Python thread's.
_TORCH_THREADS = ProcessSetting(
    lambda: torch.get_num_threads(), lambda threads: torch.set_num_threads(threads)
)


def _gnu_openmp_started() -> bool:
    """Whether numba's threads for `prange` loops run on GNU OpenMP and have started in this process."""
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    omppool = sys.modules.get("numba.np.ufunc.omppool")  # imported by numba as its threads start
    layer, vendor = getattr(parallel, "_threading_layer", None), getattr(omppool, "openmp_vendor", None)
    return layer == "omp" and vendor == "GNU"


# Set in a child of os.fork() (multiprocessing's default start on Linux before Python 3.14) whose
# parent had started numba's GNU OpenMP threads: they do not exist in the child, and numba's first
# parallel loop there kills the process with SIGTERM (a multiprocessing.Pool then waits for it forever).
_forked_after_openmp = False


def _note_fork_in_child() -> None:
    """Run by os.fork() in the child: whether the parent had started numba's OpenMP threads."""
    global _forked_after_openmp
    _forked_after_openmp = _forked_after_openmp or _gnu_openmp_started()


os.register_at_fork(after_in_child=_note_fork_in_child)


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's own threads set to `threads` for the block and restored after (None: left as they are).

    On cores that other work contends for, torch's OpenMP workers wait on each other at the end of
    every parallel operation, for as long as another process holds one of them: the autograd
    engine's small steps ran ten times slower on two threads than on one beside a search's parallel
    fits, and a compiled u1 run several times slower beside two busy processes. Blocks in several
    Python threads share the one setting (`ProcessSetting`).
    """
    if threads is None:
        yield
        return
    with _TORCH_THREADS.held(threads):
        yield


class NumbaThreads:
    """numba's threads set to `threads` (at most what numba started with) for an engine's run, and
    given back by `restore`: the caller's, not the engine's, afterwards. torch's threads are left as
    they were."""

    def __init__(self, threads: int) -> None:
        """Raises RecsysError in a forked process whose parent had started numba's OpenMP threads."""
        if _forked_after_openmp:
            raise RecsysError(
                "this process was forked (multiprocessing's 'fork' start) after numba's OpenMP threads ran "
                "in its parent (ials, bpmf, bfm), and they do not survive a fork: start the processes "
                "with multiprocessing.get_context('spawn') or 'forkserver' (a ProcessPoolExecutor's "
                "mp_context; joblib's default loky backend already does), or fork before the first such run"
            )
        import numba  # imported only by runs that use it

        self._numba = numba
        # numba's OpenMP pool, launched by a process's first of these calls, sets OpenMP's threads, and
        # so torch's, to all of numba's: a sampler's float64 sums in torch then split over the cores,
        # and the first run in a process differed from the next in the last bits (train loss, noise
        # draws). So torch's are kept.
        with _TORCH_THREADS.kept():
            self.before = numba.get_num_threads()
            numba.set_num_threads(min(threads, getattr(numba.config, "NUMBA_NUM_THREADS")))  # noqa: B009

    def restore(self) -> None:
        self._numba.set_num_threads(self.before)


def side_by_side(
    tasks: Sequence[Callable[[], T]], stop: Callable[[], None] | None = None, workers: int | None = None
) -> list[T]:
    """Each of `tasks` (nogil kernels) on threads of their own, at most `workers` at once (None: every
    task at once), a thread taking the next task as it ends one; their results in order, and a task's
    error raises here (no task starts after one has failed).

    Waited for by joining daemon threads, which a Ctrl-C or SIGTERM (an exception raised in this
    thread) cannot leave holding a lock: a ThreadPoolExecutor's wait, interrupted inside one of its
    conditions, left the workers waiting on it for ever and the command hung in the pool's shutdown.
    Interrupted, this returns at once, after `stop` (which asks the tasks to end early); the tasks
    running end on their own, and none starts after.
    """
    if len(tasks) == 1:
        return [tasks[0]()]
    results: list[T | None] = [None] * len(tasks)
    errors: list[BaseException | None] = [None] * len(tasks)
    lock, waiting, ended = threading.Lock(), iter(range(len(tasks))), [False]

    def run() -> None:
        while True:
            with lock:
                place = None if ended[0] else next(waiting, None)
            if place is None:
                return
            try:
                results[place] = tasks[place]()
            except BaseException as error:
                errors[place] = error
                ended[0] = True

    count = len(tasks) if workers is None else max(1, min(workers, len(tasks)))
    threads = [threading.Thread(target=run, daemon=True) for _ in range(count)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    except BaseException:
        ended[0] = True
        if stop is not None:
            stop()
        raise
    for error in errors:
        if error is not None:
            raise error
    return results  # type: ignore[return-value]  # each task has returned
