"""recsys.train.jit: kernels compile in nopython mode without the GIL and with numpy's error model, and
compile uncached where numba finds no place for a cache."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pytest
from numba.core import caching

from recsys.errors import RecsysError
from recsys.train import jit


def _ratio(a: float, b: float) -> float:
    return a / b


def _total(values: np.ndarray) -> float:
    total = 0.0
    for value in values:
        total += value
    return total


def test_a_kernel_runs_without_the_gil_and_with_numpys_error_model() -> None:
    kernel: Any = jit.compiled()(_ratio)
    assert kernel.targetoptions["nogil"] is True
    assert kernel.targetoptions["nopython"] is True
    assert kernel(3.0, 2.0) == 1.5
    assert kernel(1.0, 0.0) == np.inf  # numpy's error model: no ZeroDivisionError check per `/`
    with pytest.raises(ZeroDivisionError):
        _ratio(1.0, 0.0)


@pytest.mark.parametrize("fastmath", [False, True])
def test_fastmath_is_passed_on(fastmath: bool) -> None:
    kernel: Any = jit.compiled(fastmath=fastmath)(_total)
    assert bool(kernel.targetoptions.get("fastmath")) is fastmath
    assert kernel(np.arange(5.0)) == 10.0


def test_without_a_cache_location_it_compiles_uncached(monkeypatch: pytest.MonkeyPatch) -> None:
    njit = jit.njit
    calls: list[bool] = []

    def njit_without_locator(**options: Any) -> Any:
        calls.append(options.get("cache", False))
        if options.get("cache"):
            raise RuntimeError("cannot cache function '_ratio': no locator available for file 'x.py'")
        return njit(**options)

    monkeypatch.setattr(jit, "njit", njit_without_locator)
    kernel: Any = jit.compiled()(_ratio)
    assert calls == [True, False]
    assert kernel(3.0, 2.0) == 1.5 and kernel.targetoptions["nogil"] is True


def test_other_compile_errors_are_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(**options: Any) -> Any:
        raise RuntimeError("something else went wrong")

    monkeypatch.setattr(jit, "njit", broken)
    with pytest.raises(RuntimeError, match="something else went wrong"):
        jit.compiled()(_ratio)


def test_a_compile_numba_cannot_save_is_a_warning_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a full disk where numba caches (beside the package, or ~/.cache) ended a run with
    numba's OSError traceback as it saved its first kernel, though the cache only saves a compile."""

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))  # nothing cached there: it compiles
    monkeypatch.setattr(caching.IndexDataCacheFile, "save", full)
    kernel: Any = jit.compiled()(_ratio)
    with pytest.warns(
        UserWarning, match=r"numba cannot save compiled code in .* \(No space left on device\)"
    ):
        assert kernel(3.0, 2.0) == 1.5


def test_with_the_jit_disabled_a_kernel_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """NUMBA_DISABLE_JIT=1: numba leaves the function Python, and the cache hook then failed on it with
    an AttributeError traceback; a kernel now says, when called, that it runs only compiled."""
    monkeypatch.setattr(numba.config, "DISABLE_JIT", True)
    kernel = jit.compiled()(_ratio)
    with pytest.raises(RecsysError, match=r"^NUMBA_DISABLE_JIT is set, .* \(_ratio here\) run only compiled"):
        kernel(3.0, 2.0)
