"""The settings of a split a run names, checked without pandas: the flags are checked before the
data is read (`RunConfig` checks them), and `make_split` checks them again for library callers."""

import numbers

from recsys.errors import RecsysError

FRACTION_SPLITS = ("random", "user", "time")  # the splits that hold out --test-frac of the ratings


def check_test_frac(test_frac: float) -> None:
    """The share of ratings a random, per-user or time split holds out."""
    if not (
        isinstance(test_frac, numbers.Real) and not isinstance(test_frac, bool) and 0.0 < test_frac < 1.0
    ):
        raise RecsysError(f"`test_frac` must lie strictly between 0 and 1, got {test_frac!r}")


def check_test_n(test_n: int) -> None:
    """The ratings per user the user-last split holds out."""
    if not isinstance(test_n, numbers.Integral) or isinstance(test_n, bool):
        raise RecsysError(f"`test_n` must be a whole number, got {test_n!r}")
    if test_n < 1:
        raise RecsysError(f"`test_n` must be at least 1, got {test_n}")


def check_split_seed(seed: int) -> None:
    """The seed of a random or per-user split: a whole number numpy's generator takes (0 or more)."""
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise RecsysError(f"`seed` must be a whole number of at least 0, got {seed!r}")
