"""``python -m agentrl.serve``: see ``agentrl.serve.cli``."""

from agentrl.serve.cli import main

raise SystemExit(main())
