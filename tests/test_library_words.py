"""The library speaks to Python callers: its errors and warnings name a setting in backticks
(`test_frac`), never a command's flag (--test-frac); recsys/commands/ shows each as its flag, in one
place (`in_flags`)."""

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from recsys.commands import common
from recsys.commands.common import CommandParser, in_flags

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ROOT / "recsys" / "commands"
FLAG = re.compile(r"--[a-z]")


def _strings(node: ast.AST) -> Iterator[ast.Constant]:
    """The string constants in `node`, f-strings' literal parts among them."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            yield inner


def _is_warn(call: ast.Call) -> bool:
    """`warnings.warn(...)`, or `warn(...)` imported from warnings."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr == "warn" and isinstance(func.value, ast.Name) and func.value.id == "warnings"
    return isinstance(func, ast.Name) and func.id == "warn"


def message_flags(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string naming a flag in a `raise X(...)` call's or a `warnings.warn(...)`
    call's arguments."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            call = node.exc
        elif isinstance(node, ast.Call) and _is_warn(node):
            call = node
        else:
            continue
        for argument in [*call.args, *(keyword.value for keyword in call.keywords)]:
            found += [(s.lineno, s.value) for s in _strings(argument) if FLAG.search(s.value)]
    return sorted(found)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _setting_declarations(tree: ast.AST) -> set[int]:
    """The ids of the strings inside config.py's `_setting(...)` declarations: each field's flag."""
    return {
        id(s)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_setting"
        for s in _strings(node)
    }


def string_flags(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string constant naming a flag, other than docstrings and the flags
    RunConfig's fields declare: a message may be put together from a constant or a helper's
    return value (a hint, a name passed down) far from its `raise`."""
    tree = ast.parse(source)
    allowed = _docstrings(tree) | _setting_declarations(tree)
    return sorted(
        (s.lineno, s.value) for s in _strings(tree) if id(s) not in allowed and FLAG.search(s.value)
    )


def library_files() -> list[Path]:
    files = sorted(path for path in (ROOT / "recsys").rglob("*.py") if COMMANDS not in path.parents)
    assert len(files) > 30 and ROOT / "recsys" / "data" / "ratings_file.py" in files
    return files


@pytest.mark.parametrize("check", [message_flags, string_flags])
def test_library_messages_name_settings_not_flags(check: Callable[[str], list[tuple[int, str]]]) -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in library_files()
        for line, text in check(path.read_text())
    ]
    assert not offenders, "name the setting in backticks instead:\n" + "\n".join(offenders)


VIOLATIONS = '''
"""A docstring may say --sep."""
import warnings

HINT = "pass --data-dir"


def load(sep, frac):
    """So may a function's: --test-frac."""
    if len(sep) != 1:
        raise DataError(f"--sep {sep!r}: the separator must be one character")
    if frac > 1:
        raise RecsysError("`test_frac` must lie strictly between 0 and 1", f"or --test-n {frac}")
    warnings.warn(f"{sep}: or set --rating-scale", stacklevel=2)
    raise DataError(f"{sep}: not found; {HINT}")
'''


def test_the_checks_find_a_flag_in_a_message() -> None:
    assert [line for line, _ in message_flags(VIOLATIONS)] == [11, 13, 14]
    assert [line for line, _ in string_flags(VIOLATIONS)] == [5, 11, 13, 14]
    assert message_flags('raise RecsysError(f"`sep` {sep!r}: one character")') == []


def test_in_flags_names_a_setting_by_its_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "_FLAG_OF", {})
    message = "`test_frac` must lie strictly between 0 and 1, got 1.0"
    assert in_flags(message) == "--test-frac must lie strictly between 0 and 1, got 1.0"  # RunConfig's
    assert in_flags("`batch_size` must be at least 1") == "--bs must be at least 1"  # its flag, not its name
    assert in_flags("`no_such_setting` 3: `sep`") == "`no_such_setting` 3: `sep`"  # no parser ran
    parser = CommandParser()
    parser.add_argument("--cold-start", action="store_true")
    parser.add_argument("--sep")
    parser.parse_args([])
    assert in_flags("`no_such_setting` 3: use `cold_start` or `sep`") == (
        "`no_such_setting` 3: use --cold-start or --sep"
    )


def test_in_flags_names_a_setting_the_command_has_no_flag_for_as_train_pys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tune.py and compare.py have no --test-frac: a message of theirs must not ask for it as theirs."""
    monkeypatch.setattr(common, "_FLAG_OF", {})
    parser = CommandParser()
    parser.add_argument("--seed", type=int)
    parser.parse_args([])
    message = "change `test_frac` (now 0.2) or `seed`"
    assert in_flags(message) == "change train.py's --test-frac (now 0.2) or --seed"


@pytest.mark.parametrize(
    ("program", "train"),
    [
        ("compare.py", "train.py"),
        ("recsys-compare", "recsys-train"),
        ("python -m recsys compare", "python -m recsys train"),
    ],
)
def test_in_flags_names_train_as_the_user_runs_the_commands(
    monkeypatch: pytest.MonkeyPatch, program: str, train: str
) -> None:
    """Under `python -m recsys` or a console command, a flag only train has is train's as the user
    runs it, not a script the user may not have."""
    monkeypatch.setattr(common, "_FLAG_OF", {})
    monkeypatch.setattr("sys.argv", [program])
    parser = CommandParser()
    parser.add_argument("--user")
    parser.parse_args([])
    assert (
        in_flags("change `test_frac` or `ratings`") == f"change {train}'s --test-frac or {train}'s --ratings"
    )


def test_in_flags_names_a_run_file_the_command_reads_none_of_as_train_pys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """recommend.py has no --user-features: its message on a moved feature file asked for
    `user_features`, a data.json key, where the place is given to train.py's --resume."""
    monkeypatch.setattr(common, "_FLAG_OF", {})
    parser = CommandParser()
    parser.add_argument("--user")  # recommend.py's: no --ratings or --user-features
    parser.parse_args([])
    message = "resume the run with `user_features` at its new place; `ratings` too; `user`"
    assert in_flags(message) == (
        "resume the run with train.py's --user-features at its new place; train.py's --ratings too; --user"
    )


def test_in_flags_names_a_setting_no_flag_sets_as_a_config_files_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """train.py has no --relevant: a message asking to lower `relevant` names the --config key."""
    monkeypatch.setattr(common, "_FLAG_OF", {})
    parser = CommandParser()
    parser.add_argument("--config")
    parser.parse_args([])
    assert in_flags("lower `relevant`") == 'lower "relevant" in a --config file'
    monkeypatch.setattr(common, "_FLAG_OF", {})
    parser = CommandParser()
    parser.add_argument("--relevant")  # compare.py's own flag
    parser.parse_args([])
    assert in_flags("lower `relevant`") == "lower --relevant"
    monkeypatch.setattr(common, "_FLAG_OF", {})
    parser = CommandParser()
    parser.add_argument("--seed")
    parser.parse_args([])
    assert in_flags("lower `relevant`") == 'lower "relevant" in train.py\'s --config file'
