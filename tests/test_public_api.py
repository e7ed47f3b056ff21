"""recsys/__init__.py: the public API resolves, and importing it stays free of the heavy libraries."""

import subprocess
import sys
from importlib import import_module

import pytest

import recsys


@pytest.mark.parametrize(
    ("home", "name"), [(home, name) for home, names in recsys._HOMES.items() for name in names]
)
def test_every_public_name_is_its_home_modules_after_every_module_is_imported(home: str, name: str) -> None:
    # Importing a package binds it as an attribute of its parent: a public name shared with a
    # subpackage (`evaluate`) would then be the package, whatever was imported first.
    for module in recsys._HOMES:
        import_module(module)
    assert getattr(recsys, name) is getattr(import_module(home), name)
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
