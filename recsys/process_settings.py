"""Settings that belong to the process, not to a Python thread (torch's thread count, its default
dtype), held for blocks of work that several threads may open at once."""

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class ProcessSetting(Generic[T]):
    """A process-wide setting read by `get` and written by `set_to`, held for blocks (`held`).

    Blocks open at once in several threads (two fits in a notebook's threads, a threading search)
    share the one setting: the latest opened holds while it is open, and the caller's own comes back
    when the last closes, whatever order they close in. A block that restored what it found on
    entry would give another thread's setting back as the caller's.
    """

    def __init__(self, get: Callable[[], T], set_to: Callable[[T], None]) -> None:
        self._get, self._set_to = get, set_to
        self._lock = threading.Lock()
        self._open: dict[object, T] = {}  # each open block's value, in the order they opened
        self._callers: T | None = None  # the setting before the first open block, given back by the last
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        """A lock of the child's own: another thread of the parent may have held the parent's."""
        self._lock = threading.Lock()

    @contextmanager
    def held(self, value: T) -> Iterator[None]:
        """The setting at `value` for the block (while no block opened later holds another)."""
        block = object()
        with self._lock:
            if not self._open:
                self._callers = self._get()
            self._open[block] = value
            self._set_to(value)
        try:
            yield
        finally:
            with self._lock:
                del self._open[block]
                self._set_to(next(reversed(self._open.values()), self._callers))  # type: ignore[arg-type]

    @contextmanager
    def kept(self) -> Iterator[None]:
        """The setting after the block as it was before, whatever the block's calls did to it, and no
        other thread's block setting it in between."""
        with self._lock:
            before = self._get()
            try:
                yield
            finally:
                self._set_to(before)
