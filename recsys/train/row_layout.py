"""How the compiled engines lay out the factor rows they train: each on whole 64-byte cache lines, so
that a row spans the fewest lines and the vectorised loops have no remainder. Light (no numba), so
that the memory check counts the copies this makes without loading the engines."""

CACHE_LINE = 64  # bytes
FLOATS_PER_LINE = CACHE_LINE // 4  # float32s


def padded_width(width: int) -> int:
    """A row of `width` float32s widened to whole cache lines (50 factors: 64)."""
    return -(-width // FLOATS_PER_LINE) * FLOATS_PER_LINE
