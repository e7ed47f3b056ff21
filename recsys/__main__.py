"""`python -m recsys COMMAND [FLAGS]`: the commands, by recsys.commands.dispatch."""

import sys

from recsys.commands.dispatch import main

sys.exit(main(sys.argv[1:]))
