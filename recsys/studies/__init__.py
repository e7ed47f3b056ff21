"""Measurements the comparison report shows (lookup cost, a bias before a norm)."""
