"""recsys.files: a file is written whole or not at all, and an unwritable folder is one line."""

import json
import math
import os
from pathlib import Path
from typing import IO

import pytest

from recsys.errors import RecsysError
from recsys.files import atomic_write, read_file, write_json


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "out.bin"
    atomic_write(path, lambda file: file.write(b"first"))
    atomic_write(path, lambda file: file.write(b"second"))
    assert path.read_bytes() == b"second"
    assert [p.name for p in path.parent.iterdir()] == ["out.bin"]
    assert path.stat().st_mode & 0o777 == 0o644  # readable by others, as a plain write would leave it


@pytest.mark.parametrize("error", [RuntimeError("the writer failed"), KeyboardInterrupt()])
def test_a_failing_writer_leaves_the_old_file_and_no_temporary(tmp_path: Path, error: BaseException) -> None:
    path = tmp_path / "metrics.json"
    path.write_bytes(b"old")

    def half_then_fail(file: IO[bytes]) -> None:
        file.write(b"torn")
        raise error

    with pytest.raises(type(error)):
        atomic_write(path, half_then_fail)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["metrics.json"]


def test_a_writer_that_fails_writing_is_a_recsys_error_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "new.json"

    def disk_full(file: IO[bytes]) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(RecsysError, match=rf"^cannot write {path}: No space left on device$"):
        atomic_write(path, disk_full)
    assert list(tmp_path.iterdir()) == []


def test_write_json_writes_indented_json_with_a_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    write_json(path, {"a": 1, "b": [1, 2]})
    text = path.read_text()
    assert json.loads(text) == {"a": 1, "b": [1, 2]}
    assert text == json.dumps({"a": 1, "b": [1, 2]}, indent=2) + "\n"


def test_unwritable_folder_is_a_recsys_error() -> None:
    with pytest.raises(RecsysError, match=r"cannot write /proc/recsys-test/metrics\.json"):
        write_json(Path("/proc/recsys-test/metrics.json"), {"a": 1})


def test_json_is_strict_with_a_number_that_is_not_finite_as_null(tmp_path: Path) -> None:
    """Python's NaN is no JSON: strict readers (JavaScript's JSON.parse) refuse it."""
    write_json(tmp_path / "m.json", {"rmse": math.nan, "curve": [1.0, math.inf, {"x": -math.inf}], "n": 3})
    text = (tmp_path / "m.json").read_text()
    assert "NaN" not in text and "Infinity" not in text

    def refuse(constant: str) -> None:
        raise ValueError(constant)

    assert json.loads(text, parse_constant=refuse) == {
        "rmse": None,
        "curve": [1.0, None, {"x": None}],
        "n": 3,
    }


def test_read_file_reads_a_regular_file_and_refuses_anything_else(tmp_path: Path) -> None:
    """A run file that is a link to /dev/zero had been read until memory ran out, and a named pipe
    waited for a writer that never came."""
    (tmp_path / "config.json").write_bytes(b"{}")
    assert read_file(tmp_path / "config.json") == b"{}"
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "zeros").symlink_to("/dev/zero")
    for name in ("pipe", "zeros"):
        with pytest.raises(OSError, match="not a regular file"):
            read_file(tmp_path / name)
    with pytest.raises(IsADirectoryError):
        read_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_file(tmp_path / "missing")
