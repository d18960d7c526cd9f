"""Train a search agent: ``python -m agentrl.trainer.main [--preset ppo|grpo|FILE.yaml ...] key=value ...``

The config is loaded and checked in full (unknown keys, wrong types, missing files) before
Ray starts or a model loads, and so are its tools (``tools.check``: class path, options,
tags); a bad key costs a second, not a cluster start-up.
"""

from __future__ import annotations

import argparse
import sys

from agentrl.config.loader import ConfigError, available_presets, load_config, to_yaml
from agentrl.tools.check import ToolConfigError, check_tools


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m agentrl.trainer.main",
        description="PPO/GRPO training of a search agent. Overrides are dotted keys: actor.optim.lr=1e-6",
    )
    parser.add_argument(
        "--preset",
        action="append",
        help=f"config preset ({', '.join(available_presets())}) or a YAML file; repeat to merge in order "
        "(e.g. --preset grpo --preset scale_gpu); default: ppo",
    )
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("overrides", nargs="*", help="key=value overrides")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load_config(args.preset or ["ppo"], args.overrides)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.print_config:
        print(to_yaml(config))
        return 0
    try:
        check_tools(config.actor.rollout.tools)
    except ToolConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    from agentrl.trainer.ppo_trainer import TrainingDiverged
    from agentrl.trainer.supervisor import RunStopped, Supervisor

    supervisor = Supervisor(config)  # restarts after a lost node when trainer.max_restarts > 0
    try:
        supervisor.fit()
    except TrainingDiverged as error:
        print(f"error: training diverged: {error}", file=sys.stderr)
        return 3
    except RunStopped as error:
        print(f"error: {error}", file=sys.stderr)
        return 4
    finally:
        supervisor.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
