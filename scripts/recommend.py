"""Use a trained run: `python scripts/recommend.py RUN_DIR --user 196` (or --similar TITLE, --explain).

A thin wrapper of the installed `recsys-recommend` command (recsys/commands/recommend.py).
"""

from recsys.commands.recommend import cli

if __name__ == "__main__":
    cli()
