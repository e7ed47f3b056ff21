"""Scoring and reading trained models: metrics, baselines, biases and factor vectors."""
