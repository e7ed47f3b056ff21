"""`python -m recsys COMMAND [FLAGS]` (recsys/__main__.py): the commands (train, compare, recommend,
tune) from any Python that has recsys installed, without a checkout's scripts or the console commands
on PATH."""

import importlib
import sys

COMMANDS = {
    "train": "train one model and write a run folder",
    "compare": "train every model on one split and write a report",
    "recommend": "top items, similar items and explanations from a run folder",
    "tune": "search a model's settings by validation inside the training part",
}
USAGE = "usage: python -m recsys {" + ",".join(COMMANDS) + "} [FLAGS]  (python -m recsys COMMAND --help)"


def main(argv: list[str]) -> int:
    """Run the command `argv[0]` names on the flags after it; without one, say which there are."""
    if not argv or argv[0] in ("-h", "--help"):
        listing = "\n".join(f"  {name:<10} {what}" for name, what in COMMANDS.items())
        print(f"{USAGE}\n\ncommands:\n{listing}", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(
            f"{USAGE}\nerror: unknown command {argv[0]!r}; choose one of: {', '.join(COMMANDS)}",
            file=sys.stderr,
        )
        return 2
    sys.argv = [f"python -m recsys {argv[0]}", *argv[1:]]  # argparse names the command by sys.argv[0]
    importlib.import_module(f"recsys.commands.{argv[0]}").cli()
    return 0
