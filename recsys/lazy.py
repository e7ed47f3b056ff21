"""A package's public names imported from their modules on first use (PEP 562), so that importing
the package (and a command's `--help`) stays free of torch, pandas and numba."""

import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_names(
    package: str, homes: dict[str, list[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, whose public names live in the modules of `homes`
    (module -> names); a name is imported once and then kept in the package's namespace."""
    home_of = {name: module for module, names in homes.items() for name in names}
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name not in home_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home_of[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *home_of})

    return __getattr__, __dir__
