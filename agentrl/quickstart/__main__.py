"""``python -m agentrl.quickstart``: the command line of :mod:`agentrl.quickstart.cli`."""

import sys

from agentrl.quickstart.cli import main

if __name__ == "__main__":
    sys.exit(main())
