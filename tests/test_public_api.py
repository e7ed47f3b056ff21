"""recsys/__init__.py: the public API resolves, and importing it stays free of the heavy libraries."""

import subprocess
import sys

import pytest

import recsys


@pytest.mark.parametrize("name", recsys.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(recsys, name) is not None
    assert name in dir(recsys)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        recsys.no_such_thing  # noqa: B018


def test_importing_recsys_imports_none_of_the_heavy_libraries() -> None:
    heavy = "{'torch', 'pandas', 'numba', 'polars', 'sklearn'}"
    code = f"import sys, recsys; print(sorted({heavy} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_every_command_answers_help_without_the_heavy_libraries() -> None:
    # A command parses and checks its flags, and so answers --help, before torch or pandas load.
    heavy = "{'torch', 'pandas', 'numba', 'polars', 'sklearn'}"
    commands = ", ".join(f"recsys.commands.{name}" for name in ("train", "compare", "recommend", "tune"))
    code = f"import sys, {commands}; print(sorted({heavy} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
