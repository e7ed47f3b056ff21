"""Errors a user can cause: scripts print them as one line and exit 2, never as a traceback."""


class RecsysError(Exception):
    """A problem with the user's input, files or flags, phrased for the user."""


class DataError(RecsysError):
    """A dataset file is missing, malformed, or cannot be obtained."""


class DataUnavailable(DataError):
    """A named dataset has no local copy and cannot be downloaded (not: a copy that is damaged)."""


class DownloadError(DataUnavailable):
    """A download failed, timed out, or did not match its pinned size or digest."""


# Characters of an underlying error quoted in a one-line message.
REASON_LENGTH = 160


def short_reason(error: BaseException) -> str:
    """An underlying error's first sentence as one short line, for a RecsysError to quote."""
    text = " ".join(str(error).split()).split(". ")[0] or type(error).__name__
    return text if len(text) <= REASON_LENGTH else text[: REASON_LENGTH - 3] + "..."


def plain_value(value: object) -> object:
    """A numpy scalar as the Python value it holds, for messages: numpy 2 shows 3 as np.int64(3) and
    'a' as np.str_('a')."""
    is_numpy_scalar = type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0
    return value.item() if is_numpy_scalar else value  # type: ignore[attr-defined]


def listed(words: list[str]) -> str:
    """Words as a sentence lists them: "a", "a and b", "a, b and c"."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
