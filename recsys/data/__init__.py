"""Data: MovieLens and other datasets, loading, splitting and id encoding (the bottom layer)."""
