"""recsys.commands.common: a user's mistake is one `error:` line and exit code 2; the data flags."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, run_cli, terminated_after_epoch

from recsys.commands import compare as compare_command
from recsys.commands import recommend as recommend_command
from recsys.commands import train as train_command
from recsys.commands import tune as tune_command
from recsys.commands.common import (
    CommandParser,
    Terminated,
    add_data_flags,
    check_data_flags,
    command_named,
    dataset_from_flags,
    run,
)
from recsys.errors import DataError, RecsysError


@pytest.fixture(autouse=True)
def restore_formatwarning(monkeypatch: pytest.MonkeyPatch) -> None:
    """run() sets warnings.formatwarning and showwarning for the process; put them back after each test."""
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)


def exit_code(main: object) -> int | str | None:
    with pytest.raises(SystemExit) as exited:
        run(main)  # type: ignore[arg-type]
    return exited.value.code


def test_run_exits_with_mains_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(lambda: 0) == 0
    assert exit_code(lambda: 3) == 3
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("error", [RecsysError("--epochs must be at least 1"), DataError("no ratings")])
def test_a_recsys_error_is_one_line_and_exit_code_2(
    error: RecsysError, capsys: pytest.CaptureFixture[str]
) -> None:
    def main() -> int:
        raise error

    assert exit_code(main) == 2
    assert capsys.readouterr().err == f"error: {error}\n"


def test_an_interrupt_is_exit_code_130(capsys: pytest.CaptureFixture[str]) -> None:
    def main() -> int:
        raise KeyboardInterrupt

    assert exit_code(main) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_output_piped_into_a_reader_that_stops_early_ends_quietly(capsys: pytest.CaptureFixture[str]) -> None:
    """`recommend.py ... | head -3`: the pipe closes under the command's next print; no traceback,
    SIGPIPE's exit code, as a Unix tool that is told to stop."""

    def main() -> int:
        raise BrokenPipeError(32, "Broken pipe")

    assert exit_code(main) == 141
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("interruption", "code", "said"),
    [(KeyboardInterrupt, 130, "interrupted"), (Terminated, 143, "terminated")],
)
def test_an_interrupt_inside_a_compiled_function_is_still_an_interrupt(
    interruption: type[BaseException], code: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C (or SIGTERM) landing while a numba-compiled function runs Python inside comes out
    wrapped, twice, in SystemErrors: still the interrupt's exit code and line, no traceback."""

    def main() -> int:
        try:
            try:
                raise interruption
            except BaseException as error:
                raise SystemError(
                    "<function _numba_unpickle> returned a result with an exception set"
                ) from error
        except SystemError as error:
            raise SystemError(
                "CPUDispatcher(<function _row_sums>) returned a result with an exception set"
            ) from error

    assert exit_code(main) == code
    assert capsys.readouterr().err == f"{said}\n"


def test_an_interrupt_swallowed_on_the_way_is_still_an_interrupt(capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C while numba compiles lands in a ctypes callback, which swallows it; numba then fails
    with an error of its own. A Ctrl-C was received: that is what the user sees, not a traceback."""

    def main() -> int:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
        except KeyboardInterrupt:
            pass  # as the callback does
        raise RuntimeError("no compiled object yet for <Library '_row_sums'>")

    # Python's own handler, as in a terminal: a job started in the background (CI's may be) ignores
    # SIGINT, and run() leaves that as it is.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert exit_code(main) == 130
        assert capsys.readouterr().err == "interrupted\n"
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
        with pytest.raises(RuntimeError, match="a bug"):  # with no interruption, an error is a bug
            run(lambda: (_ for _ in ()).throw(RuntimeError("a bug")))  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_interruption_once_main_has_ended_is_no_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: Ctrl-C on seeing a command's last line landed as run() put the signal handlers
    back, and ended the finished command with a KeyboardInterrupt traceback and no exit code of its
    own."""
    put_back = signal.signal
    handlers: list[Any] = []

    def interrupted_as_it_puts_back(signum: int, handler: Any) -> Any:
        handlers.append(handler)
        if len(handlers) == 4:  # run() set SIGTERM's, SIGINT's and SIGHUP's; it puts SIGTERM's back first
            os.kill(os.getpid(), signal.SIGINT)  # delivered before the next line of Python
        return put_back(signum, handler)

    previous = put_back(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        monkeypatch.setattr(signal, "signal", interrupted_as_it_puts_back)
        try:
            code = exit_code(lambda: 0)
        except KeyboardInterrupt:
            pytest.fail("the Ctrl-C escaped run(): a traceback")
        assert code == 0
    finally:
        put_back(signal.SIGINT, previous)


def test_a_system_error_of_another_cause_is_a_bug_and_propagates() -> None:
    def main() -> int:
        raise SystemError("a bug")

    with pytest.raises(SystemError, match="a bug"):
        run(main)


def test_a_sigterm_ends_as_ctrl_c_does_with_code_143(capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGTERM)

    def main() -> int:
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to this, the main thread: raises here
        time.sleep(5)
        return 0

    assert exit_code(main) == 143
    assert capsys.readouterr().err == "terminated\n"
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back


def test_a_hang_up_cleans_up_as_sigterm_does_with_code_129(capsys: pytest.CaptureFixture[str]) -> None:
    """The terminal or ssh session closed (SIGHUP): its default action ended the process without the
    cleanup, leaving a fresh run folder, or tune.py's --out holding only its lock."""
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as a shell starts one (nohup: ignored)

    def main() -> int:
        if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:  # sent, it would end pytest
            return 0
        os.kill(os.getpid(), signal.SIGHUP)  # delivered to this, the main thread: raises here
        time.sleep(5)
        return 0

    try:
        assert exit_code(main) == 129
        assert capsys.readouterr().err == "hung up\n"
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, before)


def test_an_ignored_hang_up_stays_ignored() -> None:
    """`nohup recsys-train ...`: the command goes on after its terminal closes."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        seen: list[object] = []
        assert exit_code(lambda: seen.append(signal.getsignal(signal.SIGHUP)) or 0) == 0
        assert seen == [signal.SIG_IGN] and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_under_torchrun_sigterm_is_the_commands_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun's agent passes a SIGTERM on to its workers: with the default action rank 0 died with
    its fresh run folder's files in it (tests/train/test_distributed.py)."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def main() -> int:
        seen.append(signal.getsignal(signal.SIGTERM))
        return 0

    assert exit_code(main) == 0
    assert seen[0] is not before and signal.getsignal(signal.SIGTERM) is before


@pytest.mark.slow  # a subprocess: a torch import
def test_a_terminated_run_takes_back_the_folder_it_made(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-u", "scripts/train.py", "--dataset", "synthetic", "--epochs", "200",
               "--checkpoint-every", "3600", "--no-progress", "--out", str(out)]  # fmt: skip
    code, errors = terminated_after_epoch(command, 1)
    assert code == 143 and errors.strip().endswith("terminated"), errors
    assert not out.exists()  # no checkpoint yet: nothing to resume, so nothing is left


def test_other_exceptions_are_not_hidden() -> None:
    def main() -> int:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        run(main)


def test_a_warning_is_one_warning_line(capsys: pytest.CaptureFixture[str]) -> None:
    def main() -> int:
        print(warnings.formatwarning("slow disk", UserWarning, "x.py", 1), end="")
        return 0

    assert exit_code(main) == 0
    assert capsys.readouterr().out == "warning: slow disk\n"


def test_a_warning_of_recsys_made_an_error_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -W error` (or PYTHONWARNINGS=error): the library's own warning ended a command in a
    traceback; another package's keeps its traceback."""
    from recsys.commands.common import warn_of_unused_feature_files
    from recsys.config import config_for

    def own() -> int:
        given = argparse.Namespace(user_features=Path("users.csv"), item_features=None)
        warn_of_unused_feature_files(given, config_for("dot"))
        return 0

    def theirs() -> int:
        warnings.warn("a package's deprecation", DeprecationWarning, stacklevel=1)
        return 0

    # numpy's warning, raised by a call on a line of recsys (`np.log(0)` in a kernel's caller).
    in_recsys = compile("np.log(np.zeros(1))", str(ROOT / "recsys" / "train" / "compiled.py"), "exec")

    def numpys() -> int:
        exec(in_recsys, {"np": np})
        return 0

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert exit_code(own) == 2
        said = capsys.readouterr().err
        assert said.startswith("error: ") and "--user-features is unused" in said and said.count("\n") == 1
        with pytest.raises(DeprecationWarning, match="a package's deprecation"):
            run(theirs)
        with pytest.raises(RuntimeWarning, match="divide by zero encountered in log"):
            run(numpys)


def test_a_warning_given_again_is_shown_once(capsys: pytest.CaptureFixture[str]) -> None:
    """tune.py's trials and folds each fit a model, and each fit warned alike: four lines of one warning."""

    def main() -> int:
        with warnings.catch_warnings():  # as scikit-learn's fits do, which forgets what was shown
            warnings.simplefilter("always")
            for _ in range(3):
                warnings.warn("no side features", UserWarning, stacklevel=1)
            warnings.warn("another", UserWarning, stacklevel=1)
        return 0

    assert exit_code(main) == 0
    assert capsys.readouterr().err == "warning: no side features\nwarning: another\n"


def test_data_flags() -> None:
    parser = argparse.ArgumentParser()
    add_data_flags(parser)
    args = parser.parse_args(["--dataset", "tiny", "--data-dir", "d", "--offline", "--no-progress"])
    assert (args.dataset, args.data_dir, args.offline, args.no_progress) == ("tiny", Path("d"), True, True)
    unset = parser.parse_args([])
    assert (unset.dataset, unset.data_dir, unset.offline, unset.no_progress) == (None, None, False, False)
    with pytest.raises(SystemExit):
        parser.parse_args(["--dataset", "nope"])


def data_flags(argv: list[str]) -> argparse.Namespace:
    parser = CommandParser()  # as the commands parse: its flags are what messages name settings by
    add_data_flags(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--ratings", "r.csv", "--dataset", "tiny"], "drop --dataset and --data-dir"),
        (["--columns", "user=u,item=i,rating=r"], "--columns describes a --ratings file"),
        (["--rating-scale", "1,10"], "--rating-scale describes a --ratings file"),
        (["--implicit"], "--implicit describes a --ratings file"),
    ],
)
def test_data_flags_that_do_not_go_together_are_refused(argv: list[str], expected: str) -> None:
    with pytest.raises(RecsysError, match=expected):
        check_data_flags(data_flags(argv))


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--columns", "user=u,rating=r"), ("--columns", "who=u,item=i,rating=r"), ("--rating-scale", "10,1"),
     ("--rating-scale", "one,ten"), ("--rating-scale", "1,inf"), ("--rating-scale", "nan,5")],
)  # fmt: skip
def test_bad_columns_and_scales_are_argparse_errors(flag: str, value: str) -> None:
    with pytest.raises(SystemExit):
        data_flags([flag, value])


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (train_command, "--out"),
        (train_command, "--resume"),
        (train_command, "--config"),
        (train_command, "--ratings"),
        (train_command, "--data-dir"),
        (tune_command, "--out"),
        (compare_command, "--out"),
    ],
)
def test_a_tilde_in_a_path_flag_is_the_home_folder(
    command: ModuleType, flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a shell leaves `--out=~/runs/a` as typed, and the run made a folder named `~` in the
    working folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    args = command.parse_args([f"{flag}=~/runs/ä b"])
    assert getattr(args, flag[2:].replace("-", "_")) == tmp_path / "runs" / "ä b"


@pytest.mark.parametrize("flag", ["--ratings-of", "--data-dir"])
def test_a_tilde_in_recommends_paths_is_the_home_folder(
    flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    query = [] if flag == "--ratings-of" else ["--user", "1"]
    args = recommend_command.parse_args(["~/runs/a", *query, f"{flag}=~/ä b"])
    assert args.run_dir == tmp_path / "runs" / "a"
    assert getattr(args, flag[2:].replace("-", "_")) == tmp_path / "ä b"


def test_a_parse_error_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    parser = CommandParser(prog="train.py")
    add_data_flags(parser)
    with pytest.raises(SystemExit) as raised:
        parser.parse_args(["--columns", "user=a,user=b,rating=c"])
    assert raised.value.code == 2
    assert capsys.readouterr().err == (
        "error: argument --columns: 'user=a,user=b,rating=c' names the user column twice "
        "(train.py --help lists the flags)\n"
    )


def test_columns_and_scale_flags_parse() -> None:
    args = data_flags(
        ["--ratings", "r.csv", "--columns", "user=a, item=b,rating=c,timestamp=d", "--rating-scale", "1,10"]
    )
    assert args.columns == {"user": "a", "item": "b", "rating": "c", "timestamp": "d"}
    assert args.rating_scale == (1.0, 10.0)
    check_data_flags(args)
    interactions = data_flags(["--ratings", "r.csv", "--columns", "user=a,item=b,weight=c", "--implicit"])
    assert interactions.columns == {"user": "a", "item": "b", "weight": "c"} and interactions.implicit
    check_data_flags(interactions)


def test_implicit_reads_a_ratings_file_as_interactions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plays.csv"
    path.write_text("user,item,rating\n1,2,4\n1,2,3\n2,2,1\n")
    dataset = dataset_from_flags(data_flags(["--ratings", str(path), "--implicit"]))
    assert dataset.implicit and dataset.ratings["rating"].tolist() == [7.0, 1.0]
    assert capsys.readouterr().err == "interactions: 2 user-item pairs of strength 1-7, summing to 8\n"


def test_dataset_from_flags_loads_the_named_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    args = data_flags(["--dataset", "tiny", "--no-progress", "--offline"])
    assert dataset_from_flags(args).name == "tiny"
    assert capsys.readouterr().err == ""


def test_dataset_from_flags_says_when_it_falls_back_to_synthetic(
    no_data_root: None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = data_flags(["--no-progress", "--offline"])
    assert dataset_from_flags(args).name == "synthetic"
    note = capsys.readouterr().err
    assert note.count("\n") == 1 and "ml-100k is not available" in note and "synthetic" in note
    assert "pass --data-dir or set $RECSYS_DATA" in note  # the flag, not the library's `data_dir`


@pytest.mark.parametrize(("code", "stream"), [(0, "stdout"), (3, "stderr")])
def test_end_process_flushes_both_streams_and_exits_with_the_code(code: int, stream: str) -> None:
    """The real end of a command, in a process of its own: what was printed but not yet flushed
    (stdout is a pipe here, so block-buffered) arrives, and the code is the process's."""
    program = (
        "import sys\n"
        "from recsys.commands.common import end_process\n"
        f"print('left in the buffer', end='', file=sys.{stream})\n"
        f"end_process({code})\n"
    )
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    ran = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, env=buffered
    )
    assert ran.returncode == code
    assert getattr(ran, stream) == "left in the buffer"


@pytest.mark.parametrize("closed", [1, 2])
def test_end_process_with_a_stream_closed_from_the_start_exits_with_the_code(closed: int) -> None:
    """`recsys-train ... >&-` (or `2>&-`): Python starts with that stream None; end_process's flush of
    it ended a finished run in an AttributeError and exit code 1."""
    program = "from recsys.commands.common import end_process\nprint('lost')\nend_process(0)\n"
    shell = f'exec "$0" -c "$1" {closed}>&-'  # the stream closed as a shell closes it
    ran = subprocess.run(["sh", "-c", shell, sys.executable, program], capture_output=True, timeout=60)
    assert ran.returncode == 0, ran.stderr


@pytest.mark.parametrize(
    ("stderr", "flags", "shown"),
    [("tty", [], True), ("tty", ["--no-progress"], False), ("file", [], False), ("closed", [], False)],
)
def test_progress_is_drawn_on_a_terminal_only(
    stderr: str, flags: list[str], shown: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Into a log (`> log 2>&1`) each progress redraw was kept; with stderr closed (`2>&-`, None)
    tqdm's first write failed."""
    from recsys.commands.common import progress_shown

    leader, follower = os.openpty()
    streams = {"tty": os.fdopen(follower, "w"), "file": (tmp_path / "log").open("w"), "closed": None}
    monkeypatch.setattr(sys, "stderr", streams[stderr])
    try:
        assert progress_shown(data_flags(flags)) is shown
    finally:
        os.close(leader)
        for stream in streams.values():
            if stream is not None:
                stream.close()


def test_what_the_output_encoding_lacks_is_escaped_not_a_traceback() -> None:
    """PYTHONIOENCODING=ascii (or an ASCII locale without UTF-8 mode) and a title or path such as
    `résultats`: print raised UnicodeEncodeError, a traceback after the run's work was done."""
    program = "from recsys.commands.common import run\nrun(lambda: print('run folder: résultats') or 0)\n"
    ran = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        timeout=60,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == b"run folder: r\\xe9sultats\n"


def test_a_console_command_names_itself_in_its_description() -> None:
    text = "Train: `python scripts/train.py --model dotbias`."
    assert CommandParser(prog="recsys-train", description=text).description == (
        "Train: `recsys-train --model dotbias`."
    )
    assert CommandParser(prog="train.py", description=text).description == text


@pytest.mark.parametrize("low", ["-1e6", "-1E-1", "-2.5e+3", "-0.5", "-5", "-.5"])
def test_a_negative_value_with_an_exponent_is_a_value_not_a_flag(low: str) -> None:
    # argparse's own reading took "-1e6" for an unknown flag: "--y-range: expected 2 arguments".
    assert train_command.parse_args(["--y-range", low, "6"]).y_range == [float(low), 6.0]


def test_a_scale_that_starts_below_zero_is_a_value_not_a_flag() -> None:
    # argparse took "-10,10" for an unknown flag: "--rating-scale: expected one argument".
    assert train_command.parse_args(["--rating-scale", "-10,10"]).rating_scale == (-10.0, 10.0)
    assert train_command.parse_args(["--rating-scale", "-1e1, -.5"]).rating_scale == (-10.0, -0.5)


@pytest.mark.parametrize("flag", ["--lr", "--wd"])
@pytest.mark.parametrize("value", ["-inf", "-nan", "-Infinity"])
def test_a_value_that_is_no_finite_number_is_refused_as_that(flag: str, value: str, tmp_path: Path) -> None:
    """A value of -inf was taken for a flag, and the error ("expected one argument") hid the value."""
    ran = run_cli(train_command.cli, "train.py", [flag, value, "--dataset", "tiny", "--offline"], tmp_path)
    assert ran.returncode == 2 and ran.stderr.startswith(f"error: {flag} must be"), ran.stderr


@pytest.mark.slow  # a subprocess each: their imports
@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("make_tiny.py", ["--out"]),
        ("make_ratings_file.py", []),
        ("make_ratings_file.py", ["x", "--shape", "y"]),
    ],
)
def test_the_sample_data_scripts_answer_a_bad_flag_in_one_line(script: str, args: list[str]) -> None:
    """The scripts that write sample data parse with CommandParser too: argparse's own parser put a
    usage block above its error."""
    ran = subprocess.run(
        [sys.executable, f"scripts/{script}", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 2
    assert ran.stderr.startswith("error: ") and ran.stderr.count("\n") == 1, ran.stderr
    assert ran.stderr.endswith(f"({script} --help lists the flags)\n")


@pytest.mark.parametrize(
    ("program", "expected"),
    [("scripts/tune.py", "train.py"), ("/venv/bin/recsys-tune", "recsys-train"),
     ("python -m recsys tune", "python -m recsys train")],
)  # fmt: skip
def test_a_command_named_to_run_next_is_run_as_this_one_was(
    program: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tune.py's last line named `train.py --config ...` under `python -m recsys`, where the user may
    have no scripts folder."""
    monkeypatch.setattr(sys, "argv", [program])
    assert command_named("train") == expected


def test_a_gpu_out_of_memory_is_one_line_naming_what_to_change(capsys: pytest.CaptureFixture[str]) -> None:
    """The fit check before a run measures the host's memory alone: a model too large for a GPU ended
    in torch's OutOfMemoryError traceback."""
    import torch

    def main() -> int:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore")

    assert exit_code(main) == 2
    assert capsys.readouterr().err == (
        "error: the run does not fit in the device's memory (CUDA out of memory. Tried to allocate 2.00 "
        "GiB); use fewer --n-factors or --members, or train on the CPU (--device cpu)\n"
    )


def test_a_value_that_starts_with_a_dash_is_shown_joined_to_its_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: a Yelp user id such as "-MtJ-RADfbTs51BtZ2aD1c" after --user met argparse's bare
    "expected one argument", which does not say how to give it."""
    for argv, advice in [
        (
            ["--user", "-MtJ-RADfbTs51BtZ2aD1c"],
            "; a value that starts with '-' is given joined to its flag: --user=-MtJ-RADfbTs51BtZ2aD1c (",
        ),
        (["--user", "--top", "3"], "expected one argument ("),  # a flag after it: no such advice
    ]:
        with pytest.raises(SystemExit) as stopped:
            recommend_command.parse_args([str(tmp_path), *argv])
        assert stopped.value.code == 2 and advice in capsys.readouterr().err
    args = recommend_command.parse_args([str(tmp_path), "--user=-MtJ-RADfbTs51BtZ2aD1c"])
    assert args.user == "-MtJ-RADfbTs51BtZ2aD1c"
