"""recsys.train.jit: kernels compile in nopython mode without the GIL and with numpy's error model, and
compile uncached where numba finds no place for a cache."""

from __future__ import annotations

import errno
import subprocess
import sys
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


# Trains a model of each compiled fit (bfm, bpmf and ials run `prange` kernels) and prints a digest of
# every tensor its checkpoint holds (the Gibbs chains' float64 tables too).
TRAIN_AND_DIGEST = """
import hashlib, sys, torch
from recsys.config import config_for
from recsys.data.catalog import load_dataset
from recsys.train.checkpoints import load_checkpoint
from recsys.workflows.experiment import train_and_evaluate

def tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from tensors(value[key])
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors(item)

for model in ("bfm", "bpmf", "bpr", "dotbias", "svdpp"):
    run = f"{sys.argv[1]}/{model}"
    config = config_for(model, dataset="tiny", epochs=4)
    train_and_evaluate(load_dataset("tiny"), config, run_dir=run, progress=False)
    checkpoint = load_checkpoint(f"{run}/checkpoint.pt")
    digest = hashlib.sha256()
    for tensor in tensors([checkpoint.model.state_dict(), checkpoint.training]):
        digest.update(tensor.contiguous().numpy().tobytes())
    print(model, digest.hexdigest())
"""


@pytest.mark.slow
def test_a_kernel_loaded_from_the_cache_computes_what_it_did_when_compiled(tmp_path: Path) -> None:
    """A process that compiles the parallel kernels and the next, which loads them from numba's cache,
    train the same model bit for bit: numba optimises a cached parallel kernel again, and with
    fastmath's reordering of sums bfm's Gibbs tables differed in their last bits between the two, so
    a run resumed in a later process did not continue as it would have. Not ials: its solve's cached
    copy sums in another order on some CPUs (an AMD EPYC here), its tables a float32 ulp or two apart
    (docs/performance.md), and its compile alone would double this test's time."""
    script = tmp_path / "train_and_digest.py"
    script.write_text(TRAIN_AND_DIGEST)
    root = Path(__file__).resolve().parents[2]
    environment = {
        "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
        "PYTHONPATH": str(root),
        "PATH": "/usr/bin:/bin",
    }
    digests = []
    for run in ("compiles", "loads"):
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path / run)],
            capture_output=True,
            text=True,
            env=environment,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        digests.append(done.stdout)
    assert len(digests[0].splitlines()) == 5 and digests[0] == digests[1]
