"""The console commands (recsys-train, recsys-compare, recsys-recommend)."""
