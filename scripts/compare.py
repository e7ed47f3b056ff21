"""Train every model on the same split and write a report folder: `python scripts/compare.py --split u1`.

A thin wrapper of the installed `recsys-compare` command (recsys/commands/compare.py).
"""

from recsys.commands.compare import cli

if __name__ == "__main__":
    cli()
