"""The quickstart's command line: arguments, SIGTERM handling and exit codes.

Exit codes: 0 ok, 1 non-finite numbers in the report, 2 a start-up error (the config, joining
the cluster, room for the roles): one ``error:`` line, its traceback only with ``AGENTRL_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import math
import signal
from typing import Any

from agentrl.quickstart.pipeline import run_quickstart
from agentrl.quickstart.profiles import FULL, PROFILES, SHORT, Profile

__all__ = ["main", "parse_args"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    import agentrl.quickstart as package

    parser = argparse.ArgumentParser(
        prog="python -m agentrl.quickstart",
        description=package.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default="runs/quickstart", help="output folder (report.md lands here)")
    parser.add_argument(
        "--short", action="store_true", help="tiny world, a few steps: the same code path in ~2 min"
    )
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default=None,
        help="a profile of agentrl/quickstart/profiles/ by name (default: full; two_tool: search and "
        "calculate in the hermes format)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="ppo", help="PPO config preset (ppo | grpo | a YAML file)")
    parser.add_argument("overrides", nargs="*", help="PPO config overrides, key=value")
    args = parser.parse_args(argv)
    if args.short and args.profile not in (None, SHORT.name):
        parser.error(f"--short is --profile short; it cannot go with --profile {args.profile}")
    return args


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def chosen_profile(args: argparse.Namespace) -> Profile:
    """``--profile`` by name, else ``--short`` (= ``--profile short``), else ``full``."""
    if args.profile is not None:
        return PROFILES[args.profile]
    return SHORT if args.short else FULL


def main(argv: list[str] | None = None) -> int:
    """Run the quickstart; 0 when every evaluation number is finite, 1 otherwise, 2 on a start-up error."""
    args = parse_args(argv)
    from agentrl.config.errors import StartupError, report_error
    from agentrl.config.loader import ConfigError

    # A SIGTERM (e.g. from a job runner) unwinds like Ctrl-C, so the finally blocks stop the
    # retriever. Once Ray is up its own SIGTERM handler ends the process instead; the Ray
    # workers go with their driver and the retriever with its parent (PDEATHSIG).
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)

    try:
        result = run_quickstart(args.out, chosen_profile(args), args.seed, args.overrides, args.preset)
    except (ConfigError, StartupError) as error:
        return report_error(error, 2)
    finite = all(
        math.isfinite(v) for r in (result.before, result.after) for h in r.values() for v in h.values()
    )
    return 0 if finite else 1
