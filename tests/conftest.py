"""Shared fixtures: the committed tiny dataset, real MovieLens 100K when present, and a local server.

Test modules, in tests/ and its subfolders, import `ROOT`, `Served`, `zip_bytes` and `SLOW_PATH` from
here (`from conftest import ...`; pytest's `pythonpath` puts tests/ on sys.path). The subfolders have
no conftest.py of their own: a second module named `conftest` would shadow this one for those imports.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import signal
import subprocess
import sys
import threading
import warnings
import zipfile
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

import hypothesis
import numpy as np
import pandas as pd
import pytest

from recsys.data.catalog import load_dataset
from recsys.data.dataset import RatingsDataset
from recsys.names import CHECKPOINT_FILE

if TYPE_CHECKING:
    from torch import nn

    from recsys.config import RunConfig
    from recsys.train.checkpoints import Checkpoint
    from recsys.train.trainer import EpochStats
    from recsys.workflows.compare import Comparison

ROOT = Path(__file__).resolve().parent.parent  # the repository

# Helper modules beside this one (imported by test modules later) whose asserts report like a test's.
pytest.register_assert_rewrite("movielens_files")

# Property tests draw the same examples on every run, so a suite that passed passes again (CI's
# included); `pytest --hypothesis-profile=explore` draws new ones each run, to hunt for more.
hypothesis.settings.register_profile("repeatable", derandomize=True)
hypothesis.settings.register_profile("explore", derandomize=False)
hypothesis.settings.load_profile("repeatable")

# The local server stalls on this path for SLOW_SECONDS and then answers 504, for timeout tests.
SLOW_PATH = "/slow.zip"
SLOW_SECONDS = 2.0
# On this path it answers 200 and then drips the body a byte every DRIP_SECONDS, for stall tests.
DRIP_PATH = "/drip.zip"
DRIP_SECONDS = 0.02
# On this path it waits LATE_SECONDS before its headers, then sends LATE_BODY at once.
LATE_PATH = "/late.zip"
LATE_SECONDS = 0.5
LATE_BODY = b"x" * 50_000  # under STALL_BYTES: a stall check that counted the wait would trip


@pytest.fixture(scope="session")
def tiny() -> RatingsDataset:
    """The tiny sample (recsys/data/samples/tiny): 4,000 synthetic ratings in MovieLens' CSV layout."""
    return load_dataset("tiny")


@pytest.fixture(scope="session")
def tiny_comparison(tiny: RatingsDataset) -> Comparison:
    """Every model and baseline trained for 3 epochs on tiny's random split, with its planted truth
    (the comparison recsys.workflows.compare and .report are tested on)."""
    from recsys.data.catalog import planted_truth
    from recsys.workflows.compare import compare_models

    return compare_models(tiny, "random", epochs=3, truth=planted_truth(tiny))


@pytest.fixture(scope="session")
def ml100k_folder() -> Path:
    """The real ml-100k folder under $RECSYS_DATA; skips when it is not there."""
    root = os.environ.get("RECSYS_DATA")
    if not root:
        pytest.skip("real MovieLens 100K: set RECSYS_DATA to a folder holding ml-100k/")
    folder = Path(root) / "ml-100k"
    if not (folder / "u.data").is_file():
        pytest.skip(f"real MovieLens 100K: {folder}/u.data not found")
    return folder


@pytest.fixture
def no_data_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset $RECSYS_DATA so the real data (when a run sets it) is never picked up by accident."""
    monkeypatch.delenv("RECSYS_DATA", raising=False)


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the dataset cache at an empty folder so no test reads or writes the user's cache."""
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("RECSYS_CACHE", str(cache))
    return cache


@pytest.fixture(autouse=True, scope="session")
def commands_exit_by_system_exit() -> Iterator[None]:
    """A command run in this process ends with SystemExit, as `sys.exit` would, instead of ending the
    process (recsys.commands.common.end_process, which would end pytest with the command's code and
    no summary; a test in tests/commands runs the real one in a subprocess). Session-wide, so that it
    is in place before the module fixtures that run commands."""
    from recsys.commands import common

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(common, "end_process", sys.exit)
        yield


@dataclass(frozen=True)
class Ran:
    """A command run in this process: its exit code and what it printed, as a CompletedProcess has them."""

    returncode: int
    stdout: str
    stderr: str


def _print_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                   file: object = None, line: str | None = None) -> None:  # fmt: skip
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def python_output(script: str, environment: dict[str, str], timeout: float) -> str:
    """What `python -c script` prints, in a fresh process with `environment` added to this one's: for
    what only a process's first import or first thread pool shows. Its failure fails the test."""
    result = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, **environment}, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def terminated_after_epoch(
    command: list[str], epoch: int, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Start `command` (a training run printing a row per epoch), send it SIGTERM once the row of
    `epoch` shows, and return its exit code and stderr."""
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        for line in child.stdout:  # that epoch's row: training is under way
            if line.split()[:1] == [str(epoch)]:
                break
        child.send_signal(signal.SIGTERM)
        _, errors = child.communicate(timeout=120)
    return child.returncode, errors


def run_cli(cli: Callable[[], None], script: str, args: list[str], cache: Path) -> Ran:
    """`python scripts/<script> ARGS`, run in this process: a command's `cli()` (what scripts/<script>
    and the console command call) under the sys.argv, working folder, environment (no $RECSYS_DATA,
    $RECSYS_CACHE at `cache`) and warning display (Python's default filters, printed to stderr) a
    fresh process would have. A torch import saved per run; an exception that escapes `cli()` fails
    the test as a traceback would."""
    import torch

    stdout, stderr = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()  # cli() sets torch's threads from --threads
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        patch.delenv("RECSYS_DATA", raising=False)
        patch.setenv("RECSYS_CACHE", str(cache))
        patch.chdir(ROOT)
        patch.setattr(sys, "argv", [f"scripts/{script}", *args])
        patch.setattr(warnings, "formatwarning", warnings.formatwarning)  # cli() replaces it
        warnings.resetwarnings()
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        warnings.showwarning = _print_warning
        try:
            with redirect_stdout(stdout), redirect_stderr(stderr):
                cli()
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
        finally:
            torch.set_num_threads(threads)
    return Ran(code, stdout.getvalue(), stderr.getvalue())


def zip_bytes(members: dict[str, bytes]) -> bytes:
    """Build a small zip in memory from name -> bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# A throwaway HTTP server on 127.0.0.1
# ---------------------------------------------------------------------------------------------


@dataclass
class Served:
    """A running local server: where it serves from, its base url, and what it was asked for."""

    root: Path
    base: str
    requests: list[str] = field(default_factory=list)

    def put(self, name: str, data: bytes) -> str:
        """Serve data under name and return its url."""
        (self.root / name).write_bytes(data)
        return f"{self.base}/{name}"


class _Server(ThreadingHTTPServer):
    # Non-daemon handler threads are joined by server_close(), so no thread outlives a test.
    daemon_threads = False
    release: threading.Event
    seen: list[str]


class _Handler(SimpleHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.seen.append(self.path)
        if self.path == SLOW_PATH:
            # Stall before answering; teardown sets the event so the thread ends at once.
            if not self.server.release.wait(SLOW_SECONDS):
                self.send_error(504)
            return
        if self.path == LATE_PATH:
            if not self.server.release.wait(LATE_SECONDS):
                self.send_response(200)
                self.send_header("Content-Length", str(len(LATE_BODY)))
                self.end_headers()
                self.wfile.write(LATE_BODY)
            return
        if self.path == DRIP_PATH:
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            for _ in range(100_000):  # until teardown releases it, or the client hangs up
                if self.server.release.wait(DRIP_SECONDS):
                    return
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:
                    return
            return
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """Serve the files of an empty folder (tmp_path/srv) over HTTP for the length of one test."""
    root = tmp_path / "srv"
    root.mkdir()
    handler = functools.partial(_Handler, directory=str(root))
    server = _Server(("127.0.0.1", 0), handler)
    server.release = threading.Event()
    server.seen = []
    # A short poll interval keeps shutdown() (which waits for the next poll) fast.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield Served(root=root, base=f"http://{host}:{port}", requests=server.seen)
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert not thread.is_alive()


class Interrupted(Exception):
    """Stands in for a crash after an epoch's checkpoint was written."""


def cut_short(dataset: RatingsDataset, config: RunConfig, run_dir: Path, epoch: int) -> Checkpoint:
    """Train until `epoch` is done, then crash (its checkpoint written after every epoch); the
    checkpoint the crash left, which --resume would continue from."""
    from recsys.train.checkpoints import load_checkpoint
    from recsys.workflows.experiment import train_and_evaluate

    def on_epoch(stats: EpochStats) -> None:
        if stats.epoch == epoch:
            raise Interrupted

    with pytest.raises(Interrupted):
        train_and_evaluate(
            dataset, config, run_dir=run_dir, progress=False, on_epoch=on_epoch, checkpoint_every=0
        )
    return load_checkpoint(run_dir / CHECKPOINT_FILE)


def assert_same_state(expected: nn.Module, found: nn.Module) -> None:
    """Every tensor of the two models' state equal, bit for bit."""
    import torch

    found_state = found.state_dict()
    for name, tensor in expected.state_dict().items():
        assert torch.equal(tensor, found_state[name]), name


def planted_side_features(seed: int = 0) -> RatingsDataset:
    """Users of group a like items of kind x and dislike kind y by a planted +-1, group b the reverse;
    each user rates only 6 items, too few for its own vector to learn its taste."""
    rng = np.random.default_rng(seed)
    n_users, n_items = 400, 60
    group = rng.choice(["a", "b"], n_users)
    kind = rng.choice(["x", "y"], n_items)
    rows = [(u, i) for u in range(n_users) for i in rng.choice(n_items, 6, replace=False)]
    users, items = np.array(rows).T
    taste = np.where((group[users] == "a") == (kind[items] == "x"), 1.0, -1.0)
    ratings = np.clip(np.round(3 + taste + rng.normal(0, 0.5, len(rows))), 1, 5)
    frame = pd.DataFrame({"user": users, "item": items, "rating": ratings})
    dataset = RatingsDataset.from_frame(frame, rating_scale=(1.0, 5.0), name="planted")
    return dataclasses.replace(
        dataset,
        user_features=pd.DataFrame({"group": group}, index=pd.Index(np.arange(n_users), name="user")),
        item_features=pd.DataFrame({"kind": kind}, index=pd.Index(np.arange(n_items), name="item")),
    )


DAY = 24 * 3600


def planted_days(seed: int = 0) -> tuple[RatingsDataset, np.ndarray]:
    """Each user's 12 ratings on 3 days of a month, 4 a day, each user-day moving its ratings by a
    planted offset (sd 0.6 stars), on top of a user and an item bias; and the offsets, (user, day)."""
    rng = np.random.default_rng(seed)
    n_users, n_items = 200, 50
    rows = [(u, i) for u in range(n_users) for i in rng.choice(n_items, 12, replace=False)]
    users, items = np.array(rows).T
    days = np.stack([rng.choice(30, 3, replace=False) for _ in range(n_users)])
    day = days[users, np.arange(len(rows)) % 3]
    offsets = rng.normal(0, 0.6, (n_users, 30))
    user_bias, item_bias = rng.normal(0, 0.3, n_users), rng.normal(0, 0.3, n_items)
    ratings = 3 + offsets[users, day] + user_bias[users] + item_bias[items] + rng.normal(0, 0.3, len(rows))
    times = 1_000_000_000 + day * DAY + rng.integers(0, DAY // 2, len(rows))
    frame = pd.DataFrame({"user": users, "item": items, "rating": ratings.clip(1, 5), "timestamp": times})
    return RatingsDataset.from_frame(frame, rating_scale=(1.0, 5.0), name="days"), offsets
