"""A run folder belongs to one run at a time: `claim_run_folder` holds a lock file inside it while
the run lasts."""

import fcntl
import itertools
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from recsys.errors import RecsysError
from recsys.names import CHECKPOINT_FILE, CONFIG_FILE, DESCRIPTION

LOCK_FILE = ".recsys-run.lock"  # internal: held by the run that owns the folder
_HELD: set[Path] = set()  # the folders this process's claims hold now


class FolderTaken(RecsysError):
    """The folder is held by another run, or a fresh run finds files in it."""


@contextmanager
def claim_run_folder(path: Path, *, resume: bool, name: str | None = None) -> Iterator[Path]:
    """Hold `path` for one run, so that two runs never mix their files in one folder.

    A fresh run (`resume` False) needs a new or empty folder, made here; a resumed one needs its
    checkpoint. A second claim while this one is held is an error. A fresh run that fails inside
    the block takes back the lock file and folder it made, and what it wrote if it never reached a
    checkpoint, so a failed start (bad data, a diverged first epoch) leaves nothing behind.
    """
    name = name or ("`resume`" if resume else "`out`")  # the setting `path` came from
    made_folder = not resume and make_folder(path, name)
    if resume and not path.is_dir():  # (make_folder checked a fresh run's)
        raise RecsysError(f"{name} {path} is not a folder")
    lock = path / LOCK_FILE
    made_lock = not lock.exists()
    with _locked(lock, f"{name} {path}"):
        checked = False  # until the folder is known to be this run's, its files are not
        try:
            _check_contents(path, name, resume)
            checked = True
            if resume:  # the half-written files of a run killed while writing one (atomic_write's)
                for partial in path.glob(".*.tmp"):
                    partial.unlink(missing_ok=True)
            _HELD.add(path.resolve())
            yield path
        except BaseException:
            if not resume:
                _take_back(path, made_folder=made_folder, made_lock=made_lock, described=checked)
            raise
        finally:  # still held: the lock file goes with the run, so a finished folder holds only its files
            _HELD.discard(path.resolve())
            lock.unlink(missing_ok=True)


@contextmanager
def claim_unused_run_folder(path: Path) -> Iterator[Path]:
    """Claim `path` for a fresh run, or the first of `path`-2, `path`-3, ... that no run has taken: a
    default folder is named after the second its run started, and runs started in the same second
    (a shell loop's, with `&`) each get one of their own. Yields the folder claimed."""
    for number in itertools.count(1):
        candidate = path if number == 1 else path.with_name(f"{path.name}-{number}")
        claim = ExitStack()
        try:
            claim.enter_context(claim_run_folder(candidate, resume=False))
        except FolderTaken:
            continue
        with claim:
            yield candidate
        return


@contextmanager
def run_folder_of_a_call(path: Path | None, *, resume: bool) -> Iterator[None]:
    """`path` claimed for a library call that writes a run there (None: none), as a command claims
    its folder, unless this process holds it already (a command claims it before loading the data).
    `resume`: the call continues the checkpoint in `path`; a checkpoint continued into another
    folder needs a new or empty one, as a fresh run does."""
    if path is None or path.resolve() in _HELD:
        yield
        return
    continues_here = resume and (path / CHECKPOINT_FILE).is_file()
    with claim_run_folder(path, resume=continues_here, name="`run_dir`"):
        yield


@contextmanager
def taken_back_if_failed(path: Path, name: str) -> Iterator[None]:
    """`path` made a folder as make_folder does, for a block whose failure takes back the folder
    this made, while nothing was written in it (no failed command leaves an empty folder behind)."""
    made = make_folder(path, name)
    try:
        yield
    except BaseException:
        if made:
            with suppress(OSError):  # not empty: what the block wrote stays
                path.rmdir()
        raise


def make_folder(path: Path, name: str) -> bool:
    """Create `path` with its parents unless it is a folder already; whether this call made it (one
    of two racing runs does). A path that cannot be a folder is an error naming `name`, the setting
    it came from in backticks (a command shows its flag)."""
    try:
        path.mkdir(parents=True)
        made = True
    except FileExistsError:  # a folder, a file, or a link to nowhere
        made = False
    except OSError as error:
        raise RecsysError(f"{name} {path}: cannot create it: {error.strerror or error}") from None
    if not path.is_dir():
        raise RecsysError(f"{name} {path} is not a folder")
    return made


@contextmanager
def held_folder(path: Path, name: str) -> Iterator[None]:
    """Hold the lock file in `path`, an existing folder, while the block runs, as a run holds its own:
    another process's claim on it is refused. `name`: the setting `path` came from, in backticks."""
    lock = path / LOCK_FILE
    with _locked(lock, f"{name} {path}"):
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)


@contextmanager
def _locked(lock: Path, what: str) -> Iterator[None]:
    """Hold an exclusive flock on `lock` (created if need be); the OS releases it if the run dies."""
    try:
        handle = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise RecsysError(f"{what}: cannot create {lock.name}: {error.strerror or error}") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderTaken(f"{what} is in use by another recsys run") from None
        if not _same_file(handle, lock):  # a failed start took this lock file back as we opened it
            raise FolderTaken(f"{what} is in use by another recsys run")
        yield
    finally:
        os.close(handle)  # releases the lock


def _same_file(handle: int, path: Path) -> bool:
    """Whether `path` still names the open file `handle`."""
    try:
        return os.path.samestat(os.fstat(handle), os.stat(path))
    except FileNotFoundError:
        return False


def _check_contents(path: Path, name: str, resume: bool) -> None:
    """A fresh run needs a folder holding nothing but the lock; a resumed one needs a checkpoint."""
    if resume:
        check_resumable(path, name, held=True)
    elif _holds_files(path):
        raise FolderTaken(occupied(path, name, held=True))


def _holds_files(path: Path) -> bool:
    """Whether the folder `path` holds anything but the lock file, which is all that a run killed
    before it wrote anything (SIGKILL or the OOM killer while its data loaded, a search's trials)
    leaves: such a folder is as good as empty."""
    return any(entry.name != LOCK_FILE for entry in path.iterdir())


def taken(path: Path) -> bool:
    """Whether `path` cannot be a fresh run's folder: a file, a folder holding files, or one that a
    live run holds."""
    return path.exists() and (not path.is_dir() or _holds_files(path) or in_use(path))


def check_resumable(path: Path, name: str, *, held: bool = False) -> None:
    """Refuse to resume from `path` (by `name`, its setting in backticks) unless it is a folder with a
    checkpoint, saying why where a run stopped before its first one (`held`: this process holds its
    lock; otherwise a live run's folder is named as in use)."""
    if not path.is_dir():
        raise RecsysError(f"{name} {path} is not a folder")
    if (path / CHECKPOINT_FILE).is_file():
        return
    if not held and in_use(path):
        raise FolderTaken(f"{name} {path} is in use by another recsys run")
    why = _stopped_early(path, held=held)
    raise RecsysError(f"{name} {path} has no {CHECKPOINT_FILE} to resume from{why}")


def why_no_checkpoint(path: Path) -> str:
    """Why the run folder `path` has no checkpoint, where it can be told, as words to end a line
    with: a live run has not written its first yet, or its run stopped before it did; else ""."""
    if in_use(path):
        return f": its run, still going, has not written its first {CHECKPOINT_FILE} yet"
    return _stopped_early(path, held=False)


def occupied(path: Path, name: str, *, held: bool = False) -> str:
    """The error for a fresh run given `path`, an existing folder that is not empty, by `name`
    (`held`: this process holds its lock)."""
    if not held and in_use(path):  # its lock file alone: a search writes nothing there for minutes
        return f"{name} {path} is in use by another recsys run"
    if why := _stopped_early(path, held=held):
        return f"{name} {path} already exists{why}, or choose a new one"
    return f"{name} {path} already exists and is not an empty folder; choose a new one"


def _stopped_early(path: Path, *, held: bool) -> str:
    """Where `path` holds only the description of a run that no process holds (`held`: this one
    holds its lock), or only the lock file it left, and that never wrote a checkpoint (one killed by
    SIGKILL, the OOM killer or a crash in its first epochs), words saying so and what to do; else ""."""
    try:
        names = {entry.name for entry in path.iterdir()}
    except OSError:
        return ""
    entries = names - {LOCK_FILE}
    # A run's config, or the lock file it left (not this process's: killed before it wrote anything).
    was_a_run = CONFIG_FILE in entries or (not held and LOCK_FILE in names)
    described = was_a_run and CHECKPOINT_FILE not in entries
    if not described or any(e not in DESCRIPTION and not e.endswith(".tmp") for e in entries):
        return ""
    if not held and in_use(path):  # a live run holds it: it has not reached its first checkpoint yet
        return ""
    return (
        f": its run stopped before writing its first {CHECKPOINT_FILE} (killed?), so there is nothing "
        "to resume; delete the folder to start that run again"
    )


def in_use(path: Path) -> bool:
    """Whether a live run holds the lock file in `path`."""
    try:
        handle = os.open(path / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # none there (or none this process may read): no run holds it
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(handle)


def _take_back(path: Path, *, made_folder: bool, made_lock: bool, described: bool) -> None:
    """Remove the lock file and folder this claim made, and the run's DESCRIPTION (config, data) if
    it never reached a checkpoint: with one the folder stays, to resume from. `described`: the
    folder was found empty, so a description in it is this run's (a folder refused for holding
    files keeps every one of them)."""
    if described and not (path / CHECKPOINT_FILE).exists():  # the folder was empty: these are this run's own
        for name in DESCRIPTION:
            (path / name).unlink(missing_ok=True)
    if made_lock:
        (path / LOCK_FILE).unlink(missing_ok=True)
    if made_folder:
        with suppress(OSError):  # not empty: the run wrote files, or another run locked it since
            path.rmdir()
