"""Train one rating model and write a run folder: `python scripts/train.py --model dotbias`.

A thin wrapper of the installed `recsys-train` command (recsys/commands/train.py).
"""

from recsys.commands.train import cli

if __name__ == "__main__":
    cli()
