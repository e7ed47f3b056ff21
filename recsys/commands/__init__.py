"""The console commands (recsys-train, recsys-compare, recsys-recommend, recsys-tune; `python -m recsys`)."""
