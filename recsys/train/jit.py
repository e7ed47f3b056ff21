"""numba compilation as every kernel here wants it: cached on disk where possible, GIL released."""

import warnings
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar, cast

import numba
from numba import njit

from recsys.errors import RecsysError

Function = TypeVar("Function", bound=Callable[..., Any])

# fastmath's flags but `reassoc`, for a `prange` kernel whose sums numba's cached copy reordered
# otherwise than the process that compiled it: bfm's Gibbs draws differed in their last bits between
# a first run and the next (docs/performance.md). Not for every parallel kernel: implicit ALS's took
# four times as long without reordering (on some CPUs its cached copy is then an ulp or two apart).
NO_REORDERING = {"nnan", "ninf", "nsz", "arcp", "contract", "afn"}


def compiled(
    *, fastmath: bool | set[str] = False, parallel: bool = False, inline: bool = False
) -> Callable[[Function], Function]:
    """A decorator compiling a function with numba in nopython mode.

    Cached on disk where numba finds a writable place (beside the package, else ~/.cache) so later
    processes skip the compile; where it finds none (a read-only install with no writable home) numba
    refuses to cache at all, so it compiles in each process instead. nogil: threads can run kernels
    side by side. error_model="numpy": no Python zero-division check per `/`, which is what lets LLVM
    vectorise the loops. fastmath lets it reorder sums (vectorised dot products); the compiled code,
    and so the result, is still the same on every run; or a set of LLVM's flags (NO_REORDERING).
    parallel: `numba.prange` loops run on numba's threads (`numba.set_num_threads`). inline: a small
    helper whose body numba copies into each kernel that calls it, so that the kernel's loops are
    optimised with it in view.
    """

    def decorate(function: Function) -> Function:
        if getattr(numba.config, "DISABLE_JIT"):  # noqa: B009  (numba.config has no stubs for it)
            return cast(Function, _refused_uncompiled(function))

        def build(cache: bool) -> Any:
            return njit(
                cache=cache,
                nogil=True,
                error_model="numpy",
                fastmath=fastmath,
                parallel=parallel,
                inline="always" if inline else "never",
            )(function)

        try:
            kernel = build(cache=True)
        except RuntimeError as error:
            if "no locator available" not in str(error):
                raise
            kernel = build(cache=False)
        else:
            _warn_of_unsaved_compiles(kernel)
        return cast(Function, kernel)

    return decorate


def _refused_uncompiled(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` under NUMBA_DISABLE_JIT=1: refusing to run, in one line. numba left it Python, where
    the kernels that call an LLVM intrinsic (prefetch) fail and the others would take hours; and the
    cache hook after it failed on a function that is no dispatcher, a traceback."""

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise RecsysError(
            f"NUMBA_DISABLE_JIT is set, and recsys's numba kernels ({function.__name__} here) run only "
            "compiled: unset it"
        )

    return refuse


def _warn_of_unsaved_compiles(kernel: Any) -> None:
    """Have `kernel` warn, not fail, where numba cannot save what it compiled (a full disk, a file-size
    limit): the cache only spares the next process a compile, and numba's error would end the run."""
    cache = kernel._cache
    save = cache.save_overload

    def save_or_warn(signature: Any, compiled: Any) -> None:
        try:
            save(signature, compiled)
        except OSError as error:
            warnings.warn(
                f"numba cannot save compiled code in {cache.cache_path} ({error.strerror or error}): "
                "each run compiles it again",
                stacklevel=2,
            )

    cache.save_overload = save_or_warn
