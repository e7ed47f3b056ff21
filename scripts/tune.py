"""Tune a model on its split's training part only: `python scripts/tune.py --model dotbias --split u1`.

A thin wrapper of the installed `recsys-tune` command (recsys/commands/tune.py).
"""

from recsys.commands.tune import cli

if __name__ == "__main__":
    cli()
